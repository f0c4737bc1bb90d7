import { z } from "zod";
import { runLabChecks } from "../shared/fleet/lab-checks.ts";
import { taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

/** "Check my work" from the cloud's portal: the lab's own checks on one host; the portal names no command. */
export const handler = taskHandler(
  "run-checks",
  z.object({ workshop: WorkshopName, hostId: z.string().regex(/^[a-z0-9][a-z0-9-]{0,47}$/) }),
  (i) => runLabChecks(i.workshop, i.hostId),
);
