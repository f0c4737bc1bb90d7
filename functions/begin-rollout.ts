import { z } from "zod";
import { beginRollout } from "../shared/fleet/rollout-steps.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler("begin-rollout", z.object({ workshop: WorkshopName, runId: RunId }), (i) =>
  beginRollout(i.workshop, i.runId),
);
