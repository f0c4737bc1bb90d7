import { z } from "zod";
import { failEndedExecution } from "../shared/fleet/up.ts";
import { causeMessage, RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";

/** What Step Functions puts on the default bus when an execution's status changes (the fields read here). */
const ExecutionStatusChange = z.object({
  "detail-type": z.literal("Step Functions Execution Status Change"),
  source: z.literal("aws.states"),
  detail: z.object({
    name: RunId,
    status: z.enum(["FAILED", "TIMED_OUT", "ABORTED"]),
    input: z.string(),
    error: z.string().nullish(),
    cause: z.string().nullish(),
  }),
});

const ExecutionInput = z.object({ workshop: WorkshopName, runId: RunId });

/**
 * The EventBridge rule's target (cloud only): an execution of labfleet's state machines ended failed, timed out
 * or aborted. Its run is failed with the execution's error when the run's record still says running (its own
 * FailRun or FinishUp step did not get to record it).
 */
export const handler = taskHandler("reconcile-run", ExecutionStatusChange, async ({ detail }) => {
  const input = ExecutionInput.parse(JSON.parse(detail.input));
  const why = detail.error
    ? `${detail.error}${detail.cause ? `: ${causeMessage({ Error: detail.error, Cause: detail.cause })}` : ""}`
    : "no error given";
  const failed = await failEndedExecution(input.workshop, detail.name, detail.status, why);
  return { runId: detail.name, failed };
});
