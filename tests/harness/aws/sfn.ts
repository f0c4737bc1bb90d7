import { randomUUID } from "node:crypto";
import type {
  DescribeExecutionOutput,
  GetExecutionHistoryInput,
  GetExecutionHistoryOutput,
  HistoryEvent,
  StartExecutionInput,
  StartExecutionOutput,
  StopExecutionInput,
  StopExecutionOutput,
} from "@aws-sdk/client-sfn";
import { PAYLOAD_LIMIT_BYTES } from "../../../shared/workshop/limits.ts";
import {
  AslEngine,
  type EngineExecution,
  type EngineTiming,
  type ExecutionFigures,
  type ExecutionOutcome,
  type ExecutionStatus,
  LambdaFunctionError,
} from "../../../stepfunctions/engine.ts";
import { AwsError, arn, type Call, FAKE_ACCOUNT_ID, FAKE_REGION, type Operations } from "./core.ts";

/**
 * The Step Functions API of the AWS double: state machines run on the engine's cloud profile
 * (stepfunctions/engine.ts), so the Map, history and payload limits of Step Functions Standard hold, and
 * their lambda:invoke Tasks call the Lambda double. What each operation does is taken from the Step Functions
 * API Reference (StartExecution, StopExecution, DescribeExecution, GetExecutionHistory) and the Developer
 * Guide ("Step Functions events in EventBridge").
 */

/** What the Lambda double's Invoke answers: the payload, and FunctionError when the function failed. */
export interface LambdaInvokeResult {
  payload: unknown;
  functionError?: string;
}

/** Who calls Lambda for a Task: the state machine's role, on behalf of an execution. */
export interface InvokeContext {
  roleArn: string;
  stateMachineArn: string;
  executionArn: string;
}

/**
 * Invokes a function for a Task. A Lambda service error is an `AwsError` (its code becomes the Task's
 * `Lambda.<code>` error, as `Lambda.TooManyRequestsException`), a function error a result with functionError.
 */
export type InvokeLambda = (
  functionArn: string,
  payload: unknown,
  context: InvokeContext,
) => Promise<LambdaInvokeResult>;

/**
 * Adapts the Lambda double's Invoke (lambda.ts: JSON text in, the response's bytes and FunctionError out) to
 * `InvokeLambda`.
 */
export function invokeThrough(lambda: {
  invoke(functionName: string, payload?: string): Promise<{ payload: Uint8Array; functionError?: string }>;
}): InvokeLambda {
  return async (functionArn, payload) => {
    const r = await lambda.invoke(functionArn, JSON.stringify(payload ?? null));
    const text = Buffer.from(r.payload).toString("utf8");
    return {
      payload: text === "" ? null : (JSON.parse(text) as unknown),
      ...(r.functionError ? { functionError: r.functionError } : {}),
    };
  };
}

/** The EventBridge event Step Functions sends when an execution's status changes (source `aws.states`). */
export interface ExecutionStatusChangeEvent {
  version: "0";
  id: string;
  "detail-type": "Step Functions Execution Status Change";
  source: "aws.states";
  account: string;
  time: string;
  region: string;
  resources: string[];
  detail: {
    executionArn: string;
    stateMachineArn: string;
    name: string;
    status: ExecutionStatus;
    startDate: number;
    stopDate: number | null;
    input: string;
    inputDetails: { included: boolean };
    output: string | null;
    outputDetails: { included: boolean } | null;
    error: string | null;
    cause: string | null;
    stateMachineVersionArn: null;
    stateMachineAliasArn: null;
    redriveCount: number;
    redriveDate: null;
    redriveStatus: "REDRIVABLE" | "NOT_REDRIVABLE";
    redriveStatusReason?: string;
  };
}

export interface FakeStepFunctionsOptions {
  /** The Lambda double. */
  invoke: InvokeLambda;
  /** Receives every execution status change, as EventBridge would (RUNNING, then how it ended). */
  onStatusChange?: (event: ExecutionStatusChangeEvent) => void | Promise<void>;
  /** Waits and retries for tests (see EngineTiming); unset, executions wait what their definitions say. */
  timing?: EngineTiming;
}

export interface StateMachineRecord {
  name: string;
  arn: string;
  /** The ASL text as deployed, with the functions' ARNs substituted for their placeholders. */
  definition: string;
  roleArn: string;
  creationDate: Date;
}

export interface ExecutionRecord {
  executionArn: string;
  stateMachineArn: string;
  name: string;
  input: string;
  startDate: Date;
  stopDate?: Date;
  status: ExecutionStatus;
  output?: string;
  error?: string;
  cause?: string;
  run: EngineExecution;
  /** Resolves when the execution has ended and its status change has been delivered. */
  done: Promise<void>;
}

const NAME_FORBIDDEN = new Set([...'<>{}[]?*"#%\\^|~`$&,;:/']);

/**
 * An execution name: 1 to 80 characters, no white space, brackets, wildcards, special characters
 * (" # % \ ^ | ~ ` $ & , ; : /) or control characters (U+0000-001F, U+007F-009F).
 */
function validName(name: string): boolean {
  const chars = [...name];
  if (chars.length < 1 || chars.length > 80) return false;
  return chars.every((c) => {
    const code = c.codePointAt(0) ?? 0;
    return !(code <= 0x1f || (code >= 0x7f && code <= 0x9f) || /\s/u.test(c) || NAME_FORBIDDEN.has(c));
  });
}
const STATE_MACHINE_ARN = /^arn:aws:states:([^:]+):(\d{12}):stateMachine:([^:]+)$/;
const EXECUTION_ARN = /^arn:aws:states:([^:]+):(\d{12}):execution:([^:]+):([^:]+)$/;
const DEFAULT_PAGE = 100;
const MAX_PAGE = 1000;

export class FakeStepFunctions {
  readonly stateMachines = new Map<string, StateMachineRecord>();
  readonly executions = new Map<string, ExecutionRecord>();
  private readonly engines = new Map<string, AslEngine>();

  constructor(private readonly options: FakeStepFunctionsOptions) {}

  /** Deploys a state machine (what CreateStateMachine does at deploy time): validated now, as AWS does. */
  addStateMachine(machine: { name: string; definition: string; roleArn: string }): StateMachineRecord {
    const machineArn = arn.stateMachine(machine.name);
    const engine = new AslEngine(machine.definition, {
      profile: "cloud",
      invoke: async () => {
        throw new Error("an execution invokes through its own context");
      },
      region: FAKE_REGION,
      ...(this.options.timing ? { timing: this.options.timing } : {}),
    });
    const record = { ...machine, arn: machineArn, creationDate: new Date() };
    this.stateMachines.set(machineArn, record);
    this.engines.set(machineArn, engine);
    return record;
  }

  readonly operations: Operations = {
    StartExecution: (input: StartExecutionInput, call: Call) => this.startExecution(input, call),
    StopExecution: (input: StopExecutionInput, call: Call) => this.stopExecution(input, call),
    DescribeExecution: (input: { executionArn?: string }, call: Call) => this.describeExecution(input, call),
    GetExecutionHistory: (input: GetExecutionHistoryInput, call: Call) =>
      this.getExecutionHistory(input, call),
  };

  /** An execution's figures for a benchmark: transitions, history events, invocations per function. */
  figures(executionArn: string): ExecutionFigures & { status: ExecutionStatus } {
    const e = this.executions.get(executionArn);
    if (!e) throw new Error(`no execution ${executionArn}`);
    return { ...e.run.figures, status: e.status };
  }

  /** Resolves when no execution is running (and every status change has been delivered). */
  async idle(): Promise<void> {
    for (;;) {
      const open = [...this.executions.values()].filter((e) => e.status === "RUNNING");
      if (open.length === 0) break;
      await Promise.all(open.map((e) => e.done));
    }
    await Promise.all([...this.executions.values()].map((e) => e.done));
  }

  /** Stops every running execution (a test's cleanup). */
  async close(): Promise<void> {
    for (const e of this.executions.values()) if (e.status === "RUNNING") e.run.stop();
    await Promise.all([...this.executions.values()].map((e) => e.done));
  }

  private async startExecution(input: StartExecutionInput, call: Call): Promise<StartExecutionOutput> {
    const machineArn = input.stateMachineArn ?? "";
    if (!STATE_MACHINE_ARN.test(machineArn)) throw new AwsError("InvalidArn", `Invalid Arn: '${machineArn}'`);
    await call.authorize([{ action: "states:StartExecution", resource: machineArn }]);
    const machine = this.stateMachines.get(machineArn);
    const engine = this.engines.get(machineArn);
    if (!machine || !engine)
      throw new AwsError("StateMachineDoesNotExist", `State Machine Does Not Exist: '${machineArn}'`);
    const name = input.name ?? randomUUID();
    if (!validName(name)) throw new AwsError("InvalidName", `Invalid Name: '${name}'`);
    const text = input.input ?? "{}";
    if (Buffer.byteLength(text, "utf8") > PAYLOAD_LIMIT_BYTES)
      throw new AwsError(
        "ValidationException",
        `1 validation error detected: Value at 'input' failed to satisfy constraint: Member must have length less than or equal to ${PAYLOAD_LIMIT_BYTES}`,
      );
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      throw new AwsError("InvalidExecutionInput", `Invalid State Machine Execution Input: '${text}'`);
    }
    const executionArn = arn.execution(machine.name, name);
    const existing = this.executions.get(executionArn);
    if (existing) {
      // Same name and same input while the execution is open: the call succeeds with that execution.
      // A different input, or a closed execution (names stay taken for 90 days): ExecutionAlreadyExists.
      if (existing.status === "RUNNING" && existing.input === text)
        return { executionArn, startDate: existing.startDate };
      throw new AwsError("ExecutionAlreadyExists", `Execution Already Exists: '${executionArn}'`);
    }
    const context: InvokeContext = { roleArn: machine.roleArn, stateMachineArn: machineArn, executionArn };
    const startDate = new Date();
    const run = engine.start(parsed, {
      roleArn: machine.roleArn,
      context: {
        Execution: {
          Id: executionArn,
          Name: name,
          RoleArn: machine.roleArn,
          StartTime: startDate.toISOString(),
        },
        StateMachine: { Id: machineArn, Name: machine.name },
      },
      invoke: (functionArn, payload) => this.invokeLambda(functionArn, payload, context),
    });
    const record: ExecutionRecord = {
      executionArn,
      stateMachineArn: machineArn,
      name,
      input: text,
      startDate,
      status: "RUNNING",
      run,
      done: Promise.resolve(),
    };
    this.executions.set(executionArn, record);
    const running = this.publish(record);
    record.done = run.done.then(async (outcome) => {
      await running;
      if (record.status !== "RUNNING") return; // stopped: already closed and published
      this.settle(record, outcome);
      await this.publish(record);
    });
    return { executionArn, startDate };
  }

  private async invokeLambda(
    functionArn: string,
    payload: unknown,
    context: InvokeContext,
  ): Promise<unknown> {
    let result: LambdaInvokeResult;
    try {
      result = await this.options.invoke(functionArn, payload, context);
    } catch (err) {
      if (err instanceof AwsError) {
        // Lambda's API errors reach the Task as Lambda.<ErrorCode>, with the SDK's description as Cause.
        const e = new Error(
          `${err.message} (Service: AWSLambda; Status Code: ${err.status}; Error Code: ${err.code}; Request ID: ${randomUUID()}; Proxy: null)`,
        );
        e.name = `Lambda.${err.code}`;
        throw e;
      }
      throw err;
    }
    if (result.functionError) throw new LambdaFunctionError(result.payload);
    return result.payload;
  }

  private settle(record: ExecutionRecord, outcome: ExecutionOutcome): void {
    record.status = outcome.status;
    record.stopDate = new Date();
    if (outcome.status === "SUCCEEDED") record.output = JSON.stringify(outcome.output ?? null);
    if (outcome.error !== undefined) record.error = outcome.error;
    if (outcome.cause !== undefined) record.cause = outcome.cause;
  }

  private execution(executionArn: string | undefined): ExecutionRecord {
    const e = this.executions.get(executionArn ?? "");
    if (!e) throw new AwsError("ExecutionDoesNotExist", `Execution Does Not Exist: '${executionArn}'`);
    return e;
  }

  private checkExecutionArn(executionArn: string | undefined): string {
    if (!EXECUTION_ARN.test(executionArn ?? ""))
      throw new AwsError("InvalidArn", `Invalid Arn: '${executionArn}'`);
    return executionArn as string;
  }

  private async stopExecution(input: StopExecutionInput, call: Call): Promise<StopExecutionOutput> {
    const executionArn = this.checkExecutionArn(input.executionArn);
    await call.authorize([{ action: "states:StopExecution", resource: executionArn }]);
    const e = this.execution(executionArn);
    if (e.status === "RUNNING") {
      // The execution is ABORTED from now on; a Lambda already running finishes and is ignored.
      e.run.stop(input.error, input.cause);
      this.settle(e, {
        status: "ABORTED",
        ...(input.error !== undefined ? { error: input.error } : {}),
        ...(input.cause !== undefined ? { cause: input.cause } : {}),
      });
      const published = this.publish(e);
      const engineDone = e.done;
      e.done = Promise.all([engineDone, published]).then(() => undefined);
    }
    return { stopDate: e.stopDate ?? new Date() };
  }

  private async describeExecution(
    input: { executionArn?: string },
    call: Call,
  ): Promise<DescribeExecutionOutput> {
    const executionArn = this.checkExecutionArn(input.executionArn);
    await call.authorize([{ action: "states:DescribeExecution", resource: executionArn }]);
    const e = this.execution(executionArn);
    const redrive = redriveOf(e);
    return {
      executionArn: e.executionArn,
      stateMachineArn: e.stateMachineArn,
      name: e.name,
      status: e.status as DescribeExecutionOutput["status"],
      startDate: e.startDate,
      ...(e.stopDate ? { stopDate: e.stopDate } : {}),
      input: e.input,
      inputDetails: { included: true },
      ...(e.output !== undefined ? { output: e.output, outputDetails: { included: true } } : {}),
      ...(e.error !== undefined ? { error: e.error } : {}),
      ...(e.cause !== undefined ? { cause: e.cause } : {}),
      redriveCount: 0,
      redriveStatus: redrive.status,
      ...(redrive.reason ? { redriveStatusReason: redrive.reason } : {}),
    };
  }

  private async getExecutionHistory(
    input: GetExecutionHistoryInput,
    call: Call,
  ): Promise<GetExecutionHistoryOutput> {
    const executionArn = this.checkExecutionArn(input.executionArn);
    await call.authorize([{ action: "states:GetExecutionHistory", resource: executionArn }]);
    const e = this.execution(executionArn);
    const max = input.maxResults ?? 0;
    if (!Number.isInteger(max) || max < 0 || max > MAX_PAGE)
      throw new AwsError(
        "ValidationException",
        `1 validation error detected: Value '${max}' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to ${MAX_PAGE}`,
      );
    const size = max === 0 ? DEFAULT_PAGE : max;
    const reverse = input.reverseOrder === true;
    let offset = 0;
    if (input.nextToken) {
      const token = readToken(input.nextToken);
      if (!token || token.arn !== executionArn || token.reverse !== reverse)
        throw new AwsError("InvalidToken", `Invalid Token: '${input.nextToken}'`);
      offset = token.offset;
    }
    const all = reverse ? [...e.run.history].reverse() : e.run.history;
    const page = all
      .slice(offset, offset + size)
      .map((ev) => (input.includeExecutionData === false ? withoutData(ev) : ev));
    const next = offset + size;
    return {
      events: page,
      ...(next < all.length ? { nextToken: writeToken({ arn: executionArn, offset: next, reverse }) } : {}),
    };
  }

  /** Sends the execution's current status to EventBridge, as Step Functions does on every status change. */
  private async publish(e: ExecutionRecord): Promise<void> {
    if (!this.options.onStatusChange) return;
    const redrive = redriveOf(e);
    const event: ExecutionStatusChangeEvent = {
      version: "0",
      id: randomUUID(),
      "detail-type": "Step Functions Execution Status Change",
      source: "aws.states",
      account: FAKE_ACCOUNT_ID,
      time: new Date().toISOString().replace(/\.\d{3}Z$/, "Z"),
      region: FAKE_REGION,
      resources: [e.executionArn],
      detail: {
        executionArn: e.executionArn,
        stateMachineArn: e.stateMachineArn,
        name: e.name,
        status: e.status,
        startDate: e.startDate.getTime(),
        stopDate: e.stopDate ? e.stopDate.getTime() : null,
        input: e.input,
        inputDetails: { included: true },
        output: e.output ?? null,
        outputDetails: e.output !== undefined ? { included: true } : null,
        error: e.error ?? null,
        cause: e.cause ?? null,
        stateMachineVersionArn: null,
        stateMachineAliasArn: null,
        redriveCount: 0,
        redriveDate: null,
        redriveStatus: redrive.status,
        ...(redrive.reason ? { redriveStatusReason: redrive.reason } : {}),
      },
    };
    await this.options.onStatusChange(event);
  }
}

/** Whether RedriveExecution could restart it: failed, aborted and timed-out executions can, unless they hit the history limit. */
function redriveOf(e: ExecutionRecord): { status: "REDRIVABLE" | "NOT_REDRIVABLE"; reason?: string } {
  if (e.status === "RUNNING")
    return { status: "NOT_REDRIVABLE", reason: "Execution is RUNNING and cannot be redriven" };
  if (e.status === "SUCCEEDED")
    return { status: "NOT_REDRIVABLE", reason: "Execution is SUCCEEDED and cannot be redriven" };
  if (e.error === "States.Runtime" && e.cause?.includes("maximum number of history events"))
    return { status: "NOT_REDRIVABLE", reason: "Execution history event limit exceeded" };
  return { status: "REDRIVABLE" };
}

function withoutData(event: HistoryEvent): HistoryEvent {
  const copy: Record<string, unknown> = { ...event };
  for (const [key, value] of Object.entries(copy)) {
    if (!key.endsWith("EventDetails") || typeof value !== "object" || value === null) continue;
    const { input: _i, output: _o, parameters: _p, ...rest } = value as Record<string, unknown>;
    copy[key] = rest;
  }
  return copy as unknown as HistoryEvent;
}

interface PageToken {
  arn: string;
  offset: number;
  reverse: boolean;
}

function writeToken(t: PageToken): string {
  return Buffer.from(JSON.stringify(t)).toString("base64url");
}

function readToken(token: string): PageToken | undefined {
  try {
    const t = JSON.parse(Buffer.from(token, "base64url").toString("utf8")) as Partial<PageToken>;
    if (typeof t.arn !== "string" || typeof t.offset !== "number" || typeof t.reverse !== "boolean")
      return undefined;
    return t as PageToken;
  } catch {
    return undefined;
  }
}
