import { z } from "zod";
import { nextRolloutBatch } from "../shared/fleet/rollout-steps.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "next-rollout-batch",
  z.object({ workshop: WorkshopName, runId: RunId }),
  (i) => nextRolloutBatch(i.workshop, i.runId),
);
