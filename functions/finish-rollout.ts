import { z } from "zod";
import { finishRollout } from "../shared/fleet/rollout-steps.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "finish-rollout",
  z.object({ workshop: WorkshopName, runId: RunId }),
  (i) => finishRollout(i.workshop, i.runId),
);
