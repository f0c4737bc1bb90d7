import { z } from "zod";
import { startRolloutHost } from "../shared/fleet/rollout-steps.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "start-rollout-host",
  z.object({ workshop: WorkshopName, runId: RunId, hostId: z.string().min(1) }),
  (i) => startRolloutHost(i.workshop, i.runId, i.hostId),
);
