import { z } from "zod";
import { deployHosts } from "../shared/fleet/up.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "deploy-host",
  z.object({
    workshop: WorkshopName,
    runId: RunId,
    // One Deploy Map item: one host, or a batch of them in a large workshop (shared/workshop/limits.ts).
    hostIds: z.array(z.string().min(1)).min(1),
    force: z.boolean().default(false),
  }),
  (i) => deployHosts(i.workshop, i.runId, i.hostIds, i.force),
);
