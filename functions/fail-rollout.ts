import { z } from "zod";
import { failRollout } from "../shared/fleet/rollout-steps.ts";
import { CaughtError, causeMessage, RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "fail-rollout",
  z.object({ workshop: WorkshopName, runId: RunId, error: CaughtError }),
  async (i) => {
    await failRollout(i.workshop, i.runId, causeMessage(i.error));
    return { state: "failed" as const };
  },
);
