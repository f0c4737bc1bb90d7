import { z } from "zod";
import { recordRolloutHostFailure } from "../shared/fleet/rollout-steps.ts";
import { CaughtError, causeMessage, RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "record-rollout-host-failure",
  z.object({ workshop: WorkshopName, runId: RunId, hostId: z.string().min(1), error: CaughtError }),
  (i) => recordRolloutHostFailure(i.workshop, i.runId, i.hostId, causeMessage(i.error)),
);
