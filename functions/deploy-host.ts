import { z } from "zod";
import { deployHost } from "../shared/fleet/up.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "deploy-host",
  z.object({
    workshop: WorkshopName,
    runId: RunId,
    hostId: z.string().min(1),
    force: z.boolean().default(false),
  }),
  (i) => deployHost(i.workshop, i.runId, i.hostId, i.force),
);
