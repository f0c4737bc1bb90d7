import { isDeepStrictEqual } from "node:util";
import {
  DescribeExecutionCommand,
  type DescribeExecutionCommandOutput,
  GetExecutionHistoryCommand,
  type HistoryEventType,
  type SFNClient,
  StartExecutionCommand,
  StopExecutionCommand,
} from "@aws-sdk/client-sfn";
import {
  type DefinitionName,
  definitionOf,
  type RunInput,
  type WorkflowKind,
  type Workflows,
} from "../fleet/workflows.ts";
import { log } from "../runtime/logger.ts";

export interface StepFunctionsWorkflowsOptions {
  client: SFNClient;
  /** The deployed state machines, by definition: deploy, retry and provision run `up`. */
  stateMachineArns: Record<DefinitionName, string>;
}

/** Put on every stop, so the console shows who stopped an execution. Nothing secret goes here. */
export const STOP_ERROR = "labfleet.Stopped";
export const STOP_CAUSE = "stopped by labfleet (run stopped or superseded by a teardown)";

const STATE_MACHINE_ARN = /^(arn:[^:]+:states:[^:]+:[^:]+):stateMachine:([^:]+)$/;

/** `arn:aws:states:R:A:stateMachine:NAME` + run id -> `arn:aws:states:R:A:execution:NAME:RUNID`. */
export function executionArnOf(stateMachineArn: string, runId: string): string {
  const m = STATE_MACHINE_ARN.exec(stateMachineArn);
  if (!m) throw new Error(`not a state machine ARN: ${stateMachineArn}`);
  return `${m[1]}:execution:${m[2]}:${runId}`;
}

/** What the workflow receives: the same object the local executor runs the definition with, nothing more. */
function executionInput(input: RunInput): string {
  const { workshop, runId, force } = input;
  return JSON.stringify({ workshop, runId, force });
}

function errorName(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "name" in err ? String(err.name) : undefined;
}

const CLOSED = new Set(["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]);

/**
 * The cloud adapter of `Workflows`: Step Functions runs the same ASL the local executor runs. The execution
 * name is the run id, so an execution ARN is derived, never stored. Needs states:StartExecution,
 * states:StopExecution and states:DescribeExecution on the two machines and their executions.
 */
export class StepFunctionsWorkflows implements Workflows {
  private readonly client: SFNClient;
  private readonly arns: Record<DefinitionName, string>;

  constructor(options: StepFunctionsWorkflowsOptions) {
    this.client = options.client;
    this.arns = { ...options.stateMachineArns };
    // A wrong ARN fails at start-up, not at the first stop.
    for (const arn of Object.values(this.arns)) executionArnOf(arn, "check");
  }

  /**
   * Starts the definition of `kind`, named after the run. Step Functions keeps names for 90 days: a repeat
   * with the same input succeeds while the execution runs and fails with ExecutionAlreadyExists once it has
   * closed; that error is success when the existing execution has this input (the same run started again),
   * and stays an error when it does not (a different run under the same name).
   */
  async start(kind: WorkflowKind, input: RunInput): Promise<void> {
    const stateMachineArn = this.arns[definitionOf(kind)];
    const payload = executionInput(input);
    try {
      await this.client.send(
        new StartExecutionCommand({ stateMachineArn, name: input.runId, input: payload }),
      );
    } catch (err) {
      if (errorName(err) !== "ExecutionAlreadyExists") throw err;
      const existing = await this.client.send(
        new DescribeExecutionCommand({ executionArn: executionArnOf(stateMachineArn, input.runId) }),
      );
      if (!sameInput(existing, payload)) throw err;
      log.info("workflow already started", { kind, runId: input.runId, status: existing.status });
    }
  }

  /** The run's state transitions so far, from its execution's history (one call per 1,000 events). */
  async transitionsOf(kind: WorkflowKind, runId: string): Promise<number> {
    return transitionsOf(this.client, executionArnOf(this.arns[definitionOf(kind)], runId));
  }

  /**
   * Stops a run's execution. The kind is not known here, so the up machine is tried, then the teardown
   * machine; a run id names an execution on one of them at most. None on either is fine (the run never
   * got as far as starting), and so is an execution that has already ended.
   */
  async stop(runId: string): Promise<void> {
    for (const name of ["up", "teardown", "rollout"] as const) {
      if (await this.stopOn(executionArnOf(this.arns[name], runId))) return;
    }
    log.info("no execution to stop", { runId });
  }

  /** True when the execution exists (and is now stopped or had already ended), false when it does not. */
  private async stopOn(executionArn: string): Promise<boolean> {
    try {
      await this.client.send(
        new StopExecutionCommand({ executionArn, error: STOP_ERROR, cause: STOP_CAUSE }),
      );
      return true;
    } catch (err) {
      if (errorName(err) === "ExecutionDoesNotExist") return false;
      // A stop Step Functions refuses is still a success if the execution has ended anyway.
      const status = await this.client.send(new DescribeExecutionCommand({ executionArn })).then(
        (d) => d.status,
        () => undefined,
      );
      if (status && CLOSED.has(status)) return true;
      throw err;
    }
  }
}

function sameInput(existing: DescribeExecutionCommandOutput, payload: string): boolean {
  if (existing.input === undefined) return false;
  try {
    return isDeepStrictEqual(JSON.parse(existing.input), JSON.parse(payload));
  } catch {
    return false;
  }
}

/** The history events Step Functions bills as state transitions, as the local executor counts StateEntered. */
export const STATE_ENTERED: ReadonlySet<HistoryEventType> = new Set<HistoryEventType>([
  "TaskStateEntered",
  "MapStateEntered",
  "ChoiceStateEntered",
  "WaitStateEntered",
  "PassStateEntered",
  "SucceedStateEntered",
  "FailStateEntered",
  "ParallelStateEntered",
]);

/**
 * Counts an execution's state transitions from its history, so cloud runs record transitions as local runs
 * do. Meant for the finish step or a status view, once per run, not for polling: GetExecutionHistory is
 * paid per call (and throttled), and a long run takes one call per 1000 events. Needs
 * states:GetExecutionHistory.
 */
export async function transitionsOf(client: SFNClient, executionArn: string): Promise<number> {
  let count = 0;
  let nextToken: string | undefined;
  do {
    const page = await client.send(
      new GetExecutionHistoryCommand({
        executionArn,
        maxResults: 1000,
        includeExecutionData: false,
        ...(nextToken ? { nextToken } : {}),
      }),
    );
    for (const event of page.events ?? []) if (event.type && STATE_ENTERED.has(event.type)) count++;
    nextToken = page.nextToken;
  } while (nextToken);
  return count;
}
