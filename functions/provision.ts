import { z } from "zod";
import { provisionHosts } from "../shared/fleet/up.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler("provision", z.object({ workshop: WorkshopName, runId: RunId }), (i) =>
  provisionHosts(i.workshop, i.runId),
);
