// aws-local-stepfunctions 3 uses Promise.withResolvers, which Node 20 lacks: without this every Task
// fails. The one polyfill in the project; remove it when Node 22 is the floor.
if (typeof (Promise as { withResolvers?: unknown }).withResolvers !== "function") {
  Object.defineProperty(Promise, "withResolvers", {
    configurable: true,
    writable: true,
    value<T>() {
      let resolve!: (value: T | PromiseLike<T>) => void;
      let reject!: (reason?: unknown) => void;
      const promise = new Promise<T>((res, rej) => {
        resolve = res;
        reject = rej;
      });
      return { promise, resolve, reject };
    },
  });
}

import { randomUUID } from "node:crypto";
import type { HistoryEvent, HistoryEventType } from "@aws-sdk/client-sfn";
import { ExecutionError, ExecutionTimeoutError, StateMachine } from "aws-local-stepfunctions";
import {
  HISTORY_EVENT_LIMIT,
  INLINE_MAP_MAX_CONCURRENCY,
  PAYLOAD_LIMIT_BYTES,
} from "../shared/workshop/limits.ts";
import type { AslDefinition, AslState } from "./definitions.ts";

/**
 * One engine for the ASL definitions, in two profiles. `local` is the local runtime: the definition runs as
 * aws-local-stepfunctions runs it. `cloud` adds what Step Functions Standard enforces (Step Functions
 * Developer Guide, "Step Functions service quotas" and "Using Map state in Inline mode"): an inline Map runs
 * at most 40 iterations at once, an execution's history holds at most 25,000 events, and a state's input or
 * output (a task's result included) holds at most 262,144 bytes of UTF-8. Both profiles count state
 * transitions (StateEntered, as Step Functions bills them) and history events the way Step Functions writes
 * them, and both call every `arn:aws:states:::lambda:invoke` Task through `invoke` and return what that
 * integration returns.
 */

export const LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke";

export type EngineProfile = "local" | "cloud";
export type ExecutionStatus = "RUNNING" | "SUCCEEDED" | "FAILED" | "ABORTED" | "TIMED_OUT";

/**
 * Calls the function a Task names (its `FunctionName` as the definition has it: a `${XFunction}`
 * placeholder locally, a function ARN in the cloud) with the Task's `Payload` and returns its result. A
 * function error is a throw: a `LambdaFunctionError` (the error object a Lambda returned) or any other error
 * (an in-process handler's, reported as the Node.js runtime reports an unhandled error). An error named
 * `Lambda.*` (`Lambda.TooManyRequestsException`, `Lambda.ServiceException`) is a Lambda service error.
 */
export type Invoke = (functionName: string, payload: unknown) => Promise<unknown>;

export interface EngineTiming {
  /** Milliseconds for every Wait state, whatever the definition says (the local runtime's shortened waits). */
  waitMs?: number;
  /** Milliseconds before every retry, whatever the Retry fields say. */
  retryMs?: number;
  /**
   * Multiplies the definition's own seconds where no milliseconds are given: Retry IntervalSeconds and
   * MaxDelaySeconds (so backoffs keep their proportions), Wait Seconds, and Wait SecondsPath values (such a
   * Wait then runs as a timer Task of the engine, still counted as a Wait). 0.01 makes a 60 s wait 0.6 s.
   * Timestamp and TimestampPath waits, and SecondsPath waits with an InputPath or OutputPath, keep real time.
   */
  timeScale?: number;
}

export interface EngineOptions {
  profile: EngineProfile;
  invoke: Invoke;
  timing?: EngineTiming;
  /** Keep every history event for reading back (default: cloud yes, local no; counts are always kept). */
  keepHistory?: boolean;
  /** The region named in TaskScheduled events. */
  region?: string;
}

export interface StartOptions {
  /** Context object fields: `$$.Execution.Id` and `$$.Execution.Name` come from here. */
  context?: { Execution?: Record<string, unknown>; [key: string]: unknown };
  /** The execution role, as ExecutionStarted records it. */
  roleArn?: string;
  /** Called for every state entered (a billed state transition). */
  onTransition?: () => void;
  /** Called for every history event, in order. */
  onEvent?: (event: HistoryEvent) => void;
  /** Calls this execution's Lambdas instead of the engine's `invoke` (to know which execution calls). */
  invoke?: Invoke;
}

export interface ExecutionOutcome {
  status: Exclude<ExecutionStatus, "RUNNING">;
  /** The execution's output, when it succeeded. */
  output?: unknown;
  error?: string;
  cause?: string;
}

export interface ExecutionFigures {
  /** States entered: what Step Functions bills. */
  transitions: number;
  /** Events in the execution's history, as Step Functions counts them against the 25,000 quota. */
  historyEvents: number;
  /** Lambda invocations (every attempt, retries included) by FunctionName. */
  invocations: Record<string, number>;
}

/**
 * A function error as Lambda returns it: the Invoke response has a FunctionError and its payload is the
 * error object (`errorType`, `errorMessage`, `trace`). Step Functions fails the Task with the errorType as
 * Error and the whole object, as JSON, as Cause; without an errorType the Error is `Lambda.Unknown`.
 */
export class LambdaFunctionError extends Error {
  override name = "LambdaFunctionError";
  readonly errorType: string;
  constructor(readonly payload: unknown) {
    const p = (typeof payload === "object" && payload !== null ? payload : {}) as Record<string, unknown>;
    super(typeof p.errorMessage === "string" ? p.errorMessage : "function error");
    this.errorType = typeof p.errorType === "string" && p.errorType ? p.errorType : "Lambda.Unknown";
  }
}

/**
 * Step Functions' default Task timeout is 99,999,999 seconds; aws-local-stepfunctions defaults to 60, and a
 * Node.js timer holds at most 2^31 - 1 ms, so untimed Tasks get the longest timer Node keeps (about 24.8
 * days), locally as in the cloud profile.
 */
const UNTIMED_TASK_SECONDS = Math.floor((2 ** 31 - 1) / 1000);
/** An execution stopped by abort may leave the library's event log open: it is followed this long, then left. */
const EVENT_LOG_GRACE_MS = 2000;
const ENGINE_WAIT = "labfleet-engine-wait";
const EXECUTION_END: ReadonlySet<HistoryEventType> = new Set<HistoryEventType>([
  "ExecutionSucceeded",
  "ExecutionFailed",
  "ExecutionAborted",
  "ExecutionTimedOut",
]);

interface Prepared {
  /** The definition the library runs (the original, or a copy with the profile's and timing's changes). */
  definition: AslDefinition;
  /** lambda:invoke Task states, each with the Map state whose iterations it runs in (innermost), if any. */
  tasks: Map<string, string | undefined>;
  /** Wait states the engine times itself (SecondsPath under a time scale). */
  timedWaits: Set<string>;
  /** Every state's own type, by name (timed waits are Waits here, Tasks in `definition`). */
  types: Map<string, string>;
  waits: string[];
  retriers: Map<string, number>;
  maps: string[];
}

function prepare(source: AslDefinition, profile: EngineProfile, timing: EngineTiming): Prepared {
  const definition = structuredClone(source);
  const prepared: Prepared = {
    definition,
    tasks: new Map(),
    timedWaits: new Set(),
    types: new Map(),
    waits: [],
    retriers: new Map(),
    maps: [],
  };
  const scale = timing.timeScale;
  const walk = (def: AslDefinition, map: string | undefined) => {
    for (const [name, state] of Object.entries(def.States)) {
      prepared.types.set(name, state.Type);
      if (Array.isArray(state.Retry)) {
        prepared.retriers.set(name, state.Retry.length);
        if (scale !== undefined && timing.retryMs === undefined) {
          for (const r of state.Retry as { IntervalSeconds?: number; MaxDelaySeconds?: number }[]) {
            r.IntervalSeconds = (r.IntervalSeconds ?? 1) * scale;
            if (r.MaxDelaySeconds !== undefined) r.MaxDelaySeconds *= scale;
          }
        }
      }
      if (state.Type === "Task") {
        if (state.Resource !== LAMBDA_INVOKE)
          throw new Error(
            `state ${name}: only ${LAMBDA_INVOKE} Tasks run here, not ${String(state.Resource)}`,
          );
        prepared.tasks.set(name, map);
        // In both profiles: the library's 60 s would fail a local Poll of a 500-host workshop mid-way.
        if (state.TimeoutSeconds === undefined && state.TimeoutSecondsPath === undefined)
          state.TimeoutSeconds = UNTIMED_TASK_SECONDS;
      } else if (state.Type === "Wait") {
        prepared.waits.push(name);
        if (scale !== undefined && timing.waitMs === undefined) scaleWait(name, state, scale, prepared);
      } else if (state.Type === "Map") {
        prepared.maps.push(name);
        // MaxConcurrency 0 means "no limit" in ASL; an inline Map still runs at most 40 iterations at once.
        const mc = state.MaxConcurrency;
        if (profile === "cloud" && typeof mc === "number" && (mc === 0 || mc > INLINE_MAP_MAX_CONCURRENCY))
          state.MaxConcurrency = INLINE_MAP_MAX_CONCURRENCY;
        const inner = state.ItemProcessor ?? state.Iterator;
        if (inner) walk(inner, name);
      } else if (state.Type === "Parallel") {
        for (const branch of state.Branches ?? []) walk(branch, map);
      }
    }
  };
  walk(definition, undefined);
  return prepared;
}

function scaleWait(name: string, state: AslState, scale: number, prepared: Prepared) {
  if (typeof state.Seconds === "number") {
    state.Seconds *= scale;
    return;
  }
  if (typeof state.SecondsPath !== "string" || "InputPath" in state || "OutputPath" in state) return;
  // The library reads SecondsPath and sleeps that many seconds, with no way to scale the value: the state
  // becomes a Task the engine answers with a scaled timer, its input passed through unchanged (ResultPath
  // null), and is still counted and recorded as the Wait it is.
  const path = state.SecondsPath;
  delete state.SecondsPath;
  Object.assign(state, {
    Type: "Task",
    Resource: LAMBDA_INVOKE,
    Parameters: { FunctionName: ENGINE_WAIT, Payload: { "seconds.$": path } },
    ResultPath: null,
    TimeoutSeconds: UNTIMED_TASK_SECONDS,
  });
  prepared.timedWaits.add(name);
}

/** Runs one definition, as many times as asked, each run an `EngineExecution`. */
export class AslEngine {
  private readonly prepared: Prepared;
  private readonly machine: StateMachine;

  constructor(
    definition: AslDefinition | string,
    readonly options: EngineOptions,
  ) {
    const source = (typeof definition === "string" ? JSON.parse(definition) : definition) as AslDefinition;
    // Validates the definition as written; the copy the engine runs may hold the engine's own timer Tasks.
    new StateMachine(source as never, { validationOptions: { checkArn: true, checkPaths: true } });
    this.prepared = prepare(source, options.profile, options.timing ?? {});
    this.machine = new StateMachine(this.prepared.definition as never, {
      validationOptions: { noValidate: true },
    });
  }

  /** The names of the definition's lambda:invoke Task states (nested ones included). */
  get taskStates(): string[] {
    return [...this.prepared.tasks.keys()];
  }

  start(input: unknown, options: StartOptions = {}): EngineExecution {
    return new EngineExecution(this.machine, this.prepared, this.options, input, options);
  }
}

/**
 * At most `limit` holders at once. The cloud profile gives each Map state one, with 40 permits, and every
 * Lambda invocation of that Map's iterations holds one: the library honours a Map's MaxConcurrency (and a
 * MaxConcurrencyPath's value) but takes any number, and a MaxConcurrencyPath's value comes from the state's
 * input at run time, where the engine cannot rewrite it. A Task nested in Maps is gated by its innermost.
 */
class Gate {
  private active = 0;
  private readonly waiting: (() => void)[] = [];
  constructor(private readonly limit: number) {}
  async acquire(): Promise<() => void> {
    if (this.active >= this.limit) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.active++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.active--;
      this.waiting.shift()?.();
    };
  }
}

/** An error the library must neither retry nor catch (Step Functions' terminal errors, an ended execution). */
function terminalError(name: string, message: string): Error {
  const err = new Error(message);
  err.name = name;
  Object.defineProperties(err, {
    isRetryable: { value: false },
    isCatchable: { value: false },
  });
  return err;
}

/** A Task failure as Retry and Catch see it: `name` is the Error matched by ErrorEquals, `message` the Cause. */
function taskError(error: string, cause: string): Error {
  const err = new Error(cause);
  err.name = error;
  return err;
}

function failureOf(err: unknown): { error: string; cause: string } {
  if (err instanceof LambdaFunctionError) return { error: err.errorType, cause: JSON.stringify(err.payload) };
  const e = err instanceof Error ? err : new Error(String(err));
  if (e.name.startsWith("Lambda.")) return { error: e.name, cause: e.message };
  // What the Node.js runtime returns for an unhandled error, as Step Functions reports it.
  const errorType = e.name || "Error";
  const payload = { errorType, errorMessage: e.message, trace: (e.stack ?? "").split("\n") };
  return { error: errorType, cause: JSON.stringify(payload) };
}

const macrotask = () => new Promise<void>((resolve) => setImmediate(resolve));
const bytes = (text: string) => Buffer.byteLength(text, "utf8");
const json = (value: unknown) => JSON.stringify(value ?? null);
const NOT_TRUNCATED = { truncated: false };

/**
 * The lambda:invoke integration's result (Step Functions Developer Guide, "Invoke an AWS Lambda function
 * with Step Functions"): the function's output, parsed from JSON, in `Payload`, inside the Invoke response's
 * metadata.
 */
function lambdaResult(payload: unknown) {
  const text = JSON.stringify(payload ?? null);
  const requestId = randomUUID();
  const date = new Date().toUTCString();
  const length = String(Buffer.byteLength(text, "utf8"));
  return {
    ExecutedVersion: "$LATEST",
    Payload: JSON.parse(text) as unknown,
    SdkHttpMetadata: {
      AllHttpHeaders: {
        "X-Amz-Executed-Version": ["$LATEST"],
        "x-amzn-Remapped-Content-Length": ["0"],
        Connection: ["keep-alive"],
        "x-amzn-RequestId": [requestId],
        "Content-Length": [length],
        Date: [date],
        "Content-Type": ["application/json"],
      },
      HttpHeaders: {
        Connection: "keep-alive",
        "Content-Length": length,
        "Content-Type": "application/json",
        Date: date,
        "X-Amz-Executed-Version": "$LATEST",
        "x-amzn-Remapped-Content-Length": "0",
        "x-amzn-RequestId": requestId,
      },
      HttpStatusCode: 200,
    },
    SdkResponseMetadata: { RequestId: requestId },
    StatusCode: 200,
  };
}

type LibEvent = {
  type: string;
  index?: number;
  state?: { name: string; type: string; input: unknown; output?: unknown };
  parentState?: { name: string };
  input?: unknown;
  output?: unknown;
  Error?: string;
  Cause?: unknown;
};

interface InFlight {
  state: string;
  timedOut: boolean;
}

/** One execution of a definition on the engine. */
export class EngineExecution {
  /** Resolves when the execution has ended, with how it ended. */
  readonly done: Promise<ExecutionOutcome>;
  status: ExecutionStatus = "RUNNING";
  private readonly cloud: boolean;
  private readonly keep: boolean;
  private readonly events: HistoryEvent[] = [];
  private readonly invocations: Record<string, number> = {};
  private readonly gates = new Map<string, Gate>();
  private readonly inflight: InFlight[] = [];
  private readonly composites = new Map<string, "failed" | "caught">();
  private readonly timers = new AbortController();
  private readonly lib: ReturnType<StateMachine["run"]>;
  private transitions = 0;
  private count = 0;
  private closed = false;
  private forced?: ExecutionOutcome;
  private stopped?: { error?: string; cause?: string };

  constructor(
    machine: StateMachine,
    private readonly prepared: Prepared,
    private readonly options: EngineOptions,
    input: unknown,
    private readonly hooks: StartOptions,
  ) {
    this.cloud = options.profile === "cloud";
    this.keep = options.keepHistory ?? this.cloud;
    if (this.cloud) for (const m of prepared.maps) this.gates.set(m, new Gate(INLINE_MAP_MAX_CONCURRENCY));
    const handlers: Record<string, (input: unknown) => Promise<unknown>> = {};
    for (const [name, map] of prepared.tasks) handlers[name] = (i) => this.task(name, i, map);
    for (const name of prepared.timedWaits) handlers[name] = (i) => this.timedWait(i);
    const timing = options.timing ?? {};
    const waitTimeOverrides: Record<string, number> = {};
    if (timing.waitMs !== undefined) for (const w of prepared.waits) waitTimeOverrides[w] = timing.waitMs;
    const retryIntervalOverrides: Record<string, number[]> = {};
    if (timing.retryMs !== undefined)
      for (const [name, n] of prepared.retriers) retryIntervalOverrides[name] = Array(n).fill(timing.retryMs);
    this.lib = machine.run(input as never, {
      overrides: {
        taskResourceLocalHandlers: handlers as never,
        waitTimeOverrides,
        retryIntervalOverrides,
      },
      ...(hooks.context ? { context: hooks.context as never } : {}),
      noThrowOnAbort: true,
    });
    this.done = this.follow();
  }

  /** The history so far (kept when `keepHistory`, the cloud profile's default). */
  get history(): readonly HistoryEvent[] {
    return this.events;
  }

  get figures(): ExecutionFigures {
    return { transitions: this.transitions, historyEvents: this.count, invocations: { ...this.invocations } };
  }

  /**
   * Stops the execution (StopExecution): it ends ABORTED with this error and cause. A Lambda already running
   * finishes, and what it returns is dropped.
   */
  stop(error?: string, cause?: string): void {
    if (this.closed || this.stopped) return;
    this.stopped = { ...(error !== undefined ? { error } : {}), ...(cause !== undefined ? { cause } : {}) };
    this.lib.abort();
    this.timers.abort();
  }

  private async follow(): Promise<ExecutionOutcome> {
    const consuming = this.consume();
    let natural: ExecutionOutcome;
    try {
      const output = await this.lib.result;
      natural = { status: "SUCCEEDED", output };
    } catch (err) {
      if (err instanceof ExecutionTimeoutError) natural = { status: "TIMED_OUT", error: "States.Timeout" };
      else {
        const c = (err instanceof ExecutionError ? err.cause : err) as Error | undefined;
        natural = {
          status: "FAILED",
          error: c?.name ?? "States.Runtime",
          cause: c?.message ?? String(err),
        };
      }
    }
    await settleWithin(consuming, EVENT_LOG_GRACE_MS);
    this.timers.abort();
    let outcome: ExecutionOutcome;
    if (this.forced) outcome = this.forced;
    else if (this.stopped) outcome = { status: "ABORTED", ...this.stopped };
    else outcome = natural;
    if (!this.closed) this.record(endEventOf(outcome));
    this.closed = true;
    this.status = outcome.status;
    return outcome;
  }

  private async consume(): Promise<void> {
    for await (const event of this.lib.eventLogs) this.translate(event as LibEvent);
  }

  /** Appends one history event; in the cloud, the 25,000th event must end the execution or it fails. */
  private record(event: Omit<HistoryEvent, "id" | "timestamp">): boolean {
    const type = event.type as HistoryEventType;
    // A stopped execution writes nothing more but its ExecutionAborted (a Lambda still running is ignored).
    if (this.closed || (this.stopped && type !== "ExecutionAborted")) return false;
    if (this.cloud && this.count === HISTORY_EVENT_LIMIT - 1 && !EXECUTION_END.has(type)) {
      this.terminate(
        "States.Runtime",
        `The execution reached the maximum number of history events (${HISTORY_EVENT_LIMIT}).`,
      );
      return false;
    }
    this.count++;
    const full = { ...event, id: this.count, previousEventId: this.count - 1, timestamp: new Date() };
    if (this.keep) this.events.push(full as HistoryEvent);
    this.hooks.onEvent?.(full as HistoryEvent);
    if (EXECUTION_END.has(type)) this.closed = true;
    return true;
  }

  /** Ends the execution FAILED from outside the state machine's own logic (a Step Functions limit). */
  private terminate(error: string, cause: string): void {
    if (this.closed) return;
    this.forced = { status: "FAILED", error, cause };
    this.record({ type: "ExecutionFailed", executionFailedEventDetails: { error, cause } });
    this.closed = true;
    this.lib.abort();
    this.timers.abort();
  }

  private data(value: unknown): string | undefined {
    return this.cloud || this.keep ? json(value) : undefined;
  }

  private tooLarge(text: string | undefined): boolean {
    return this.cloud && text !== undefined && bytes(text) > PAYLOAD_LIMIT_BYTES;
  }

  private translate(e: LibEvent): void {
    if (this.closed) return;
    const state = e.state;
    const type = state ? (this.prepared.types.get(state.name) ?? state.type) : "";
    const key = state ? `${state.name}#${e.index ?? ""}` : "";
    switch (e.type) {
      case "ExecutionStarted":
        this.record({
          type: "ExecutionStarted",
          executionStartedEventDetails: {
            input: this.data(e.input),
            inputDetails: NOT_TRUNCATED,
            roleArn: this.hooks.roleArn,
          },
        });
        return;
      case "StateEntered": {
        if (!state) return;
        this.transitions++;
        this.hooks.onTransition?.();
        const input = this.data(state.input);
        this.record({
          type: `${type}StateEntered` as HistoryEventType,
          stateEnteredEventDetails: { name: state.name, input, inputDetails: NOT_TRUNCATED },
        });
        if (this.tooLarge(input)) {
          this.terminate("States.DataLimitExceeded", limitCause(state.name, "has an input"));
          return;
        }
        if (type === "Map") this.record({ type: "MapStateStarted", mapStateStartedEventDetails: {} });
        if (type === "Parallel") this.record({ type: "ParallelStateStarted" });
        return;
      }
      case "StateExited": {
        if (!state) return;
        const output = this.data(state.output);
        if (this.tooLarge(output)) {
          this.terminate("States.DataLimitExceeded", limitCause(state.name, "returned a result"));
          return;
        }
        if (type === "Map" || type === "Parallel") {
          if (this.composites.get(key) !== "caught")
            this.record({ type: `${type}StateSucceeded` as HistoryEventType });
          this.composites.delete(key);
        }
        this.record({
          type: `${type}StateExited` as HistoryEventType,
          stateExitedEventDetails: { name: state.name, output, outputDetails: NOT_TRUNCATED },
        });
        return;
      }
      case "StateFailed":
        if (!state) return;
        if (type === "Task" && e.Error === "States.Timeout") {
          const running = this.inflight.find((f) => f.state === state.name && !f.timedOut);
          if (running) running.timedOut = true;
          this.record({
            type: "TaskTimedOut",
            taskTimedOutEventDetails: { resourceType: "lambda", resource: "invoke", error: "States.Timeout" },
          });
        } else if (type === "Map" || type === "Parallel") this.composites.set(key, "failed");
        return;
      case "StateRetried":
        if (type === "Map" || type === "Parallel") {
          this.composites.delete(key);
          this.record({ type: `${type}StateStarted` as HistoryEventType });
        }
        return;
      case "StateCaught":
        if ((type === "Map" || type === "Parallel") && this.composites.get(key) === "failed") {
          this.record({ type: `${type}StateFailed` as HistoryEventType });
          this.composites.set(key, "caught");
        }
        return;
      case "MapIterationStarted":
      case "MapIterationSucceeded":
      case "MapIterationFailed": {
        if (e.type === "MapIterationFailed") this.flushFailed(`#${e.index ?? ""}`);
        const details = { name: e.parentState?.name, index: e.index };
        const field =
          e.type === "MapIterationStarted"
            ? "mapIterationStartedEventDetails"
            : e.type === "MapIterationSucceeded"
              ? "mapIterationSucceededEventDetails"
              : "mapIterationFailedEventDetails";
        this.record({ type: e.type, [field]: details });
        return;
      }
      case "ExecutionSucceeded":
        this.record({
          type: "ExecutionSucceeded",
          executionSucceededEventDetails: { output: this.data(e.output), outputDetails: NOT_TRUNCATED },
        });
        return;
      case "ExecutionFailed":
        this.flushFailed("#");
        this.record({
          type: "ExecutionFailed",
          executionFailedEventDetails: { error: e.Error, cause: causeText(e.Cause) },
        });
        return;
      case "ExecutionAborted":
        if (this.stopped)
          this.record({ type: "ExecutionAborted", executionAbortedEventDetails: this.stopped });
        return;
      case "ExecutionTimeout":
        this.record({
          type: "ExecutionTimedOut",
          executionTimedOutEventDetails: { error: "States.Timeout" },
        });
        return;
      default:
        // ParallelBranch* events have no counterpart in a Step Functions history.
        return;
    }
  }

  /** A Map or Parallel state that failed without a retry or catch: its Failed event precedes its scope's end. */
  private flushFailed(suffix: string): void {
    for (const [key, how] of this.composites) {
      if (how !== "failed" || !key.endsWith(suffix)) continue;
      const name = key.slice(0, key.length - suffix.length);
      this.record({ type: `${this.prepared.types.get(name) ?? "Map"}StateFailed` as HistoryEventType });
      this.composites.delete(key);
    }
  }

  private assertOpen(): void {
    if (this.closed || this.stopped) throw terminalError("States.Runtime", "the execution has ended");
  }

  private async task(state: string, raw: unknown, map: string | undefined): Promise<unknown> {
    // The library calls a handler synchronously after it logs the state's entry; one macrotask lets this
    // execution's event log (and a limit it may have hit) catch up before the Lambda is called.
    await macrotask();
    this.assertOpen();
    const release = map ? await this.gates.get(map)?.acquire() : undefined;
    const flight: InFlight = { state, timedOut: false };
    try {
      this.assertOpen();
      const input = (typeof raw === "object" && raw !== null ? raw : {}) as Record<string, unknown>;
      const functionName = String(input.FunctionName);
      const parameters = this.data(raw);
      if (this.tooLarge(parameters)) {
        this.terminate("States.DataLimitExceeded", limitCause(state, "has an input"));
        this.assertOpen();
      }
      const resource = { resourceType: "lambda", resource: "invoke" };
      this.record({
        type: "TaskScheduled",
        taskScheduledEventDetails: { ...resource, region: this.options.region ?? "local", parameters },
      });
      this.record({ type: "TaskStarted", taskStartedEventDetails: resource });
      this.invocations[functionName] = (this.invocations[functionName] ?? 0) + 1;
      this.inflight.push(flight);
      let payload: unknown;
      try {
        payload = await (this.hooks.invoke ?? this.options.invoke)(functionName, input.Payload);
      } catch (err) {
        if (flight.timedOut) throw terminalError("States.Timeout", "the task timed out");
        const f = failureOf(err);
        this.record({ type: "TaskFailed", taskFailedEventDetails: { ...resource, ...f } });
        throw taskError(f.error, f.cause);
      }
      if (flight.timedOut) throw terminalError("States.Timeout", "the task timed out");
      const result = lambdaResult(payload);
      const output = this.data(result);
      if (this.tooLarge(output)) {
        // A terminal error: a Retry or Catch on States.ALL does not match States.DataLimitExceeded.
        const f = { error: "States.DataLimitExceeded", cause: limitCause("lambda", "returned a result") };
        this.record({ type: "TaskFailed", taskFailedEventDetails: { ...resource, ...f } });
        throw terminalError(f.error, f.cause);
      }
      this.record({
        type: "TaskSucceeded",
        taskSucceededEventDetails: { ...resource, output, outputDetails: NOT_TRUNCATED },
      });
      return result;
    } finally {
      const i = this.inflight.indexOf(flight);
      if (i >= 0) this.inflight.splice(i, 1);
      release?.();
    }
  }

  /** A Wait on SecondsPath under a time scale: sleeps the scaled seconds, passes its input through. */
  private async timedWait(raw: unknown): Promise<unknown> {
    const seconds = Number((raw as { Payload?: { seconds?: unknown } } | undefined)?.Payload?.seconds);
    const ms = Math.max(
      0,
      (Number.isFinite(seconds) ? seconds : 0) * 1000 * (this.options.timing?.timeScale ?? 1),
    );
    await sleep(ms, this.timers.signal);
    return {};
  }
}

function limitCause(subject: string, what: "has an input" | "returned a result"): string {
  return `The state/task '${subject}' ${what} with a size exceeding the maximum number of bytes service limit.`;
}

function causeText(cause: unknown): string | undefined {
  if (cause === undefined || cause === null) return undefined;
  return typeof cause === "string" ? cause : JSON.stringify(cause);
}

function endEventOf(o: ExecutionOutcome): Omit<HistoryEvent, "id" | "timestamp"> {
  const details = {
    ...(o.error !== undefined ? { error: o.error } : {}),
    ...(o.cause !== undefined ? { cause: o.cause } : {}),
  };
  switch (o.status) {
    case "SUCCEEDED":
      return {
        type: "ExecutionSucceeded",
        executionSucceededEventDetails: { output: json(o.output), outputDetails: NOT_TRUNCATED },
      };
    case "ABORTED":
      return { type: "ExecutionAborted", executionAbortedEventDetails: details };
    case "TIMED_OUT":
      return { type: "ExecutionTimedOut", executionTimedOutEventDetails: details };
    default:
      return { type: "ExecutionFailed", executionFailedEventDetails: details };
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

/** Whether `p` settled within `ms` (its result or error is not needed). */
export async function settleWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((res) => {
    timer = setTimeout(() => res(false), ms);
  });
  try {
    return await Promise.race([
      p.then(
        () => true,
        () => true,
      ),
      timeout,
    ]);
  } finally {
    clearTimeout(timer);
  }
}
