import { z } from "zod";
import { settleEndedExecJob } from "../shared/fleet/exec-jobs.ts";
import { settleEndedExecution } from "../shared/fleet/teardown.ts";
import { causeMessage, RunId, taskHandler, WorkshopName } from "../shared/runtime/handler.ts";
import { idSchema } from "../shared/runtime/ids.ts";

const ExecJobId = idSchema("exec");

/** What Step Functions puts on the default bus when an execution's status changes (the fields read here). */
const ExecutionStatusChange = z.object({
  "detail-type": z.literal("Step Functions Execution Status Change"),
  source: z.literal("aws.states"),
  detail: z.object({
    name: z.union([RunId, ExecJobId]),
    status: z.enum(["FAILED", "TIMED_OUT", "ABORTED"]),
    input: z.string(),
    error: z.string().nullish(),
    cause: z.string().nullish(),
  }),
});

const ExecutionInput = z.object({ workshop: WorkshopName, runId: z.union([RunId, ExecJobId]) });

/**
 * The EventBridge rule's target (cloud only): an execution of labfleet's state machines ended failed, timed out
 * or aborted. Its run is failed with the execution's error when the run's record still says running (its own
 * FailRun or FinishUp step did not get to record it); a teardown's run also gets its receipt. An exec job's
 * execution (its id is the job's) fails the job the same way when its own ExecFail did not.
 */
export const handler = taskHandler("reconcile-run", ExecutionStatusChange, async ({ detail }) => {
  const input = ExecutionInput.parse(JSON.parse(detail.input));
  const why = detail.error
    ? `${detail.error}${detail.cause ? `: ${causeMessage({ Error: detail.error, Cause: detail.cause })}` : ""}`
    : "no error given";
  const failed = ExecJobId.safeParse(detail.name).success
    ? await settleEndedExecJob(input.workshop, detail.name, detail.status, why)
    : await settleEndedExecution(input.workshop, detail.name, detail.status, why);
  return { runId: detail.name, failed };
});
