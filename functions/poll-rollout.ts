import { z } from "zod";
import { pollRollout } from "../shared/fleet/rollout-steps.ts";
import { RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

export const handler = taskHandler(
  "poll-rollout",
  z.object({ workshop: WorkshopName, runId: RunId, deadline: z.iso.datetime() }),
  (i) => pollRollout(i.workshop, i.runId, i.deadline),
);
