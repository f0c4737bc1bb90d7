import type { HistoryEvent } from "@aws-sdk/client-sfn";
import { describe, expect, it, vi } from "vitest";
import { causeMessage } from "../../shared/runtime/handler.ts";
import {
  deployBatches,
  deployBatchSize,
  deployItems,
  EVENTS_PER_HOST,
  EVENTS_PER_POLL,
  FIXED_EVENTS,
  HISTORY_EVENT_LIMIT,
  historyBudget,
  INLINE_MAP_MAX_CONCURRENCY,
  LAMBDA_RETRIES_PER_TASK,
  MAX_WORKSHOP_HOSTS,
  maxPolls,
  pollBudget,
  RETRY_EVENTS_PER_HOST,
  RETRY_MARGIN_EVENTS,
} from "../../shared/workshop/limits.ts";
import { type AslDefinition, allStates, loadDefinition } from "../../stepfunctions/definitions.ts";
import {
  AslEngine,
  type EngineOptions,
  type EngineProfile,
  type Invoke,
  LambdaFunctionError,
} from "../../stepfunctions/engine.ts";
import { type AuthRequest, AwsError, accessKeyIdFor, arn, type Call } from "../harness/aws/core.ts";
import {
  type ExecutionStatusChangeEvent,
  FakeStepFunctions,
  type InvokeContext,
  invokeThrough,
} from "../harness/aws/sfn.ts";

const INVOKE = "arn:aws:states:::lambda:invoke";
const task = (fn: string, rest: Record<string, unknown> = {}) => ({
  Type: "Task",
  Resource: INVOKE,
  Parameters: { FunctionName: fn, "Payload.$": "$" },
  ...rest,
});
const def = (states: Record<string, unknown>, startAt = Object.keys(states)[0] as string) =>
  ({ StartAt: startAt, States: states }) as unknown as AslDefinition;
const typesOf = (history: readonly HistoryEvent[]) => history.map((e) => e.type);
const named = (name: string, message = name) => Object.assign(new Error(message), { name });
const instant = { waitMs: 0, retryMs: 0 };
/** `${NameFunction}`: a Task's FunctionName placeholder, as the definitions in stepfunctions/ write it. */
const fnOf = (name: string) => `\${${name}Function}`;

function engine(
  d: AslDefinition,
  invoke: Invoke,
  profile: EngineProfile = "cloud",
  more: Partial<EngineOptions> = {},
) {
  return new AslEngine(d, { profile, invoke, timing: instant, keepHistory: true, ...more });
}

async function waitUntil<T>(what: string, fn: () => T | undefined | false, timeoutMs = 10_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setImmediate(r));
  }
}

/** Lets every pending callback and event-log step run, without waiting for any time to pass. */
async function drain(rounds = 50) {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r));
}

describe("lambda:invoke tasks", () => {
  it.each(["local", "cloud"] as const)(
    "%s: returns what the integration returns, Payload parsed",
    async (profile) => {
      const calls: [string, unknown][] = [];
      const e = engine(
        def({ A: task(fnOf("A"), { End: true }) }),
        async (fn, payload) => {
          calls.push([fn, payload]);
          return { at: new Date("2030-01-01T00:00:00.000Z"), n: 1 };
        },
        profile,
      );
      const outcome = await e.start({ x: 1 }).done;
      expect(calls).toEqual([[fnOf("A"), { x: 1 }]]);
      expect(outcome.status).toBe("SUCCEEDED");
      expect(outcome.output).toMatchObject({
        ExecutedVersion: "$LATEST",
        Payload: { at: "2030-01-01T00:00:00.000Z", n: 1 },
        SdkHttpMetadata: { HttpStatusCode: 200, HttpHeaders: { "Content-Type": "application/json" } },
        SdkResponseMetadata: { RequestId: expect.any(String) },
        StatusCode: 200,
      });
    },
  );

  it("a function error fails the Task with its errorType as Error and the error object as Cause", async () => {
    const errorObject = { errorType: "HostUnreachable", errorMessage: "no route to host", trace: ["at x"] };
    let attempts = 0;
    const d = def({
      A: task(fnOf("A"), {
        Retry: [{ ErrorEquals: ["HostUnreachable"], MaxAttempts: 2 }],
        Catch: [{ ErrorEquals: ["States.ALL"], ResultPath: "$.error", Next: "B" }],
        Next: "Done",
      }),
      B: { Type: "Pass", End: true },
      Done: { Type: "Succeed" },
    });
    const run = engine(d, async () => {
      attempts++;
      throw new LambdaFunctionError(errorObject);
    }).start({});
    const outcome = await run.done;
    expect(attempts).toBe(3);
    expect(outcome.output).toEqual({
      error: { Error: "HostUnreachable", Cause: JSON.stringify(errorObject) },
    });
    expect(typesOf(run.history)).toEqual([
      "ExecutionStarted",
      "TaskStateEntered",
      ...Array(3).fill(["TaskScheduled", "TaskStarted", "TaskFailed"]).flat(),
      "TaskStateExited",
      "PassStateEntered",
      "PassStateExited",
      "ExecutionSucceeded",
    ]);
    const failed = run.history.find((h) => h.type === "TaskFailed");
    expect(failed?.taskFailedEventDetails).toMatchObject({
      error: "HostUnreachable",
      resourceType: "lambda",
    });
  });

  it("an in-process handler's throw is reported as Node.js reports an unhandled error", async () => {
    const d = def({
      A: task(fnOf("A"), {
        Catch: [{ ErrorEquals: ["States.TaskFailed"], ResultPath: "$.error", Next: "B" }],
        End: true,
      }),
      B: { Type: "Pass", End: true },
    });
    const outcome = await engine(
      d,
      async () => {
        throw new Error("disk full");
      },
      "local",
    ).start({}).done;
    const caught = (outcome.output as { error: { Error: string; Cause: string } }).error;
    expect(caught.Error).toBe("Error");
    expect(JSON.parse(caught.Cause)).toMatchObject({ errorType: "Error", errorMessage: "disk full" });
    expect(causeMessage(caught)).toBe("disk full");
  });

  it("Lambda.* service errors come from an invoke that throws them by name and are retried on that name", async () => {
    const retriers = loadDefinition("up").States.BeginUp?.Retry as {
      ErrorEquals: string[];
      MaxAttempts: number;
    }[];
    const throttling = retriers.find((r) => r.ErrorEquals.includes("Lambda.TooManyRequestsException"));
    const max = throttling?.MaxAttempts ?? 0;
    expect(max).toBeGreaterThan(0);
    let attempts = 0;
    const d = def({ A: task(fnOf("A"), { Retry: [throttling], End: true }) });
    const run = engine(d, async () => {
      attempts++;
      if (attempts <= max) throw named("Lambda.TooManyRequestsException", "Rate Exceeded.");
      return { ok: true };
    }).start({});
    expect((await run.done).status).toBe("SUCCEEDED");
    expect(run.figures.invocations).toEqual({ [fnOf("A")]: max + 1 });
    expect(run.history.filter((h) => h.type === "TaskFailed").map((h) => h.taskFailedEventDetails)).toEqual(
      Array(max).fill({
        resourceType: "lambda",
        resource: "invoke",
        error: "Lambda.TooManyRequestsException",
        cause: "Rate Exceeded.",
      }),
    );

    attempts = 0;
    const exhausted = await engine(d, async () => {
      attempts++;
      throw named("Lambda.TooManyRequestsException", "Rate Exceeded.");
    }).start({}).done;
    expect(exhausted).toMatchObject({ status: "FAILED", error: "Lambda.TooManyRequestsException" });
    expect(attempts).toBe(max + 1);
  });
});

describe("history events, as Step Functions writes them", () => {
  it("counts every state's events and the transitions it bills", async () => {
    const d = def({
      Work: task(fnOf("Work"), { ResultPath: "$.work", Next: "Check" }),
      Check: {
        Type: "Choice",
        Choices: [{ Variable: "$.go", BooleanEquals: true, Next: "Pause" }],
        Default: "Done",
      },
      Pause: { Type: "Wait", Seconds: 30, Next: "Each" },
      Each: {
        Type: "Map",
        ItemsPath: "$.items",
        MaxConcurrency: 1,
        ItemProcessor: { StartAt: "Item", States: { Item: { Type: "Pass", End: true } } },
        ResultPath: null,
        Next: "Done",
      },
      Done: { Type: "Succeed" },
    });
    const run = engine(d, async () => ({})).start({ go: true, items: [1, 2] });
    expect((await run.done).status).toBe("SUCCEEDED");
    const types = typesOf(run.history);
    expect(types.slice(0, 10)).toEqual([
      "ExecutionStarted",
      "TaskStateEntered",
      "TaskScheduled",
      "TaskStarted",
      "TaskSucceeded",
      "TaskStateExited",
      "ChoiceStateEntered",
      "ChoiceStateExited",
      "WaitStateEntered",
      "WaitStateExited",
    ]);
    expect(types.slice(10, 12)).toEqual(["MapStateEntered", "MapStateStarted"]);
    expect(tally(types.slice(12, -5))).toEqual({
      MapIterationStarted: 2,
      PassStateEntered: 2,
      PassStateExited: 2,
      MapIterationSucceeded: 2,
    });
    expect(types.slice(-5)).toEqual([
      "MapStateSucceeded",
      "MapStateExited",
      "SucceedStateEntered",
      "SucceedStateExited",
      "ExecutionSucceeded",
    ]);
    expect(run.history.map((h) => h.id)).toEqual(types.map((_, i) => i + 1));
    // Work, Check, Pause, Each, two Items, Done.
    expect(run.figures).toMatchObject({ transitions: 7, historyEvents: types.length });
  });

  it("a Fail state writes FailStateEntered and the execution fails with its Error and Cause", async () => {
    const run = engine(
      def({ Stop: { Type: "Fail", Error: "RunFailed", Cause: "see the run" } }),
      async () => ({}),
    ).start({});
    expect(await run.done).toMatchObject({ status: "FAILED", error: "RunFailed", cause: "see the run" });
    expect(typesOf(run.history)).toEqual(["ExecutionStarted", "FailStateEntered", "ExecutionFailed"]);
  });

  it("a stopped execution ends ABORTED with the stop's error and cause", async () => {
    let release!: () => void;
    const run = engine(
      def({ A: task(fnOf("A"), { End: true }) }),
      () => new Promise((r) => (release = () => r({}))),
    ).start({});
    await waitUntil("the task to start", () => run.history.some((h) => h.type === "TaskStarted"));
    run.stop("labfleet.Stopped", "stopped by a test");
    release();
    expect(await run.done).toEqual({
      status: "ABORTED",
      error: "labfleet.Stopped",
      cause: "stopped by a test",
    });
    expect(run.history.at(-1)).toMatchObject({
      type: "ExecutionAborted",
      executionAbortedEventDetails: { error: "labfleet.Stopped", cause: "stopped by a test" },
    });
    expect(typesOf(run.history)).not.toContain("TaskSucceeded");
  });
});

function tally(types: (string | undefined)[]) {
  const t: Record<string, number> = {};
  for (const x of types) if (x) t[x] = (t[x] ?? 0) + 1;
  return t;
}

describe("the cloud profile's limits", () => {
  const mapDef = def({
    Each: {
      Type: "Map",
      ItemsPath: "$.items",
      MaxConcurrencyPath: "$.concurrency",
      ItemProcessor: { StartAt: "Item", States: { Item: task(fnOf("Item"), { End: true }) } },
      End: true,
    },
  });

  it.each([
    ["cloud", INLINE_MAP_MAX_CONCURRENCY],
    ["local", 64],
  ] as const)("%s: a Map with MaxConcurrency 64 runs %i iterations at once", async (profile, expected) => {
    let inFlight = 0;
    let peak = 0;
    const waiting: (() => void)[] = [];
    let open = false;
    const run = engine(
      mapDef,
      async () => {
        inFlight++;
        peak = Math.max(peak, inFlight);
        if (!open) await new Promise<void>((r) => waiting.push(r));
        inFlight--;
        return {};
      },
      profile,
    ).start({ items: Array.from({ length: 100 }, (_, i) => ({ i })), concurrency: 64 });
    await waitUntil(`${expected} iterations in flight`, () => inFlight === expected);
    await drain();
    expect(inFlight).toBe(expected);
    open = true;
    for (const w of waiting.splice(0)) w();
    expect((await run.done).status).toBe("SUCCEEDED");
    expect(peak).toBe(expected);
    expect(run.figures.invocations).toEqual({ [fnOf("Item")]: 100 });
  });

  it("a Lambda result over 256 KiB fails the execution with States.DataLimitExceeded, which States.ALL does not catch", async () => {
    const d = def({
      A: task(fnOf("A"), { Catch: [{ ErrorEquals: ["States.ALL"], Next: "B" }], End: true }),
      B: { Type: "Pass", End: true },
    });
    const big = async () => ({ blob: "é".repeat(131_072) }); // 262,144 bytes of UTF-8, plus the JSON around it
    const run = engine(d, big).start({});
    expect(await run.done).toMatchObject({ status: "FAILED", error: "States.DataLimitExceeded" });
    expect(run.history.find((h) => h.type === "TaskFailed")?.taskFailedEventDetails).toMatchObject({
      error: "States.DataLimitExceeded",
      cause:
        "The state/task 'lambda' returned a result with a size exceeding the maximum number of bytes service limit.",
    });
    expect(typesOf(run.history)).not.toContain("PassStateEntered");
    expect((await engine(d, big, "local").start({}).done).status).toBe("SUCCEEDED");
  });

  it("a state output over 256 KiB fails the execution at that state", async () => {
    const d = def({ Twice: { Type: "Pass", Parameters: { "a.$": "$.s", "b.$": "$.s" }, End: true } });
    const input = { s: "x".repeat(140_000) };
    const run = engine(d, async () => ({})).start(input);
    expect(await run.done).toMatchObject({
      status: "FAILED",
      error: "States.DataLimitExceeded",
      cause:
        "The state/task 'Twice' returned a result with a size exceeding the maximum number of bytes service limit.",
    });
    expect(typesOf(run.history)).toEqual(["ExecutionStarted", "PassStateEntered", "ExecutionFailed"]);
    expect((await engine(d, async () => ({}), "local").start(input).done).status).toBe("SUCCEEDED");
  });

  // Inc, Check: 4 events a loop; ExecutionStarted, Done (2) and ExecutionSucceeded around them: 4n + 4.
  const counter = def({
    Inc: { Type: "Pass", Parameters: { "i.$": "States.MathAdd($.i, 1)", "n.$": "$.n" }, Next: "Check" },
    Check: {
      Type: "Choice",
      Choices: [{ Variable: "$.i", NumericLessThanPath: "$.n", Next: "Inc" }],
      Default: "Done",
    },
    Done: { Type: "Succeed" },
  });

  it("an execution whose 25,000th event is ExecutionSucceeded succeeds", async () => {
    const run = engine(counter, async () => ({})).start({ i: 0, n: 6249 });
    expect((await run.done).status).toBe("SUCCEEDED");
    expect(run.history).toHaveLength(HISTORY_EVENT_LIMIT);
    expect(run.history.at(-1)?.type).toBe("ExecutionSucceeded");
  });

  it("an execution that needs one more event fails at the 25,000th with States.Runtime", async () => {
    const run = engine(counter, async () => ({})).start({ i: 0, n: 6250 });
    expect(await run.done).toEqual({
      status: "FAILED",
      error: "States.Runtime",
      cause: "The execution reached the maximum number of history events (25000).",
    });
    expect(run.history).toHaveLength(HISTORY_EVENT_LIMIT);
    expect(run.history.at(-1)?.type).toBe("ExecutionFailed");
    expect(run.figures.historyEvents).toBe(HISTORY_EVENT_LIMIT);
    const local = engine(counter, async () => ({}), "local").start({ i: 0, n: 6250 });
    expect((await local.done).status).toBe("SUCCEEDED");
    expect(local.figures.historyEvents).toBe(4 * 6250 + 4);
  });
});

describe("time scale", () => {
  it("multiplies Retry intervals, keeping the backoff, and SecondsPath waits, which stay Waits", async () => {
    let attempts = 0;
    const d = def({
      Pause: { Type: "Wait", SecondsPath: "$.seconds", Next: "A" },
      A: task(fnOf("A"), {
        Retry: [{ ErrorEquals: ["States.ALL"], IntervalSeconds: 2, BackoffRate: 2, MaxAttempts: 2 }],
        End: true,
      }),
    });
    const e = new AslEngine(d, {
      profile: "cloud",
      timing: { timeScale: 0.01 },
      invoke: async () => {
        attempts++;
        if (attempts < 3) throw new Error("not yet");
        return {};
      },
    });
    const t0 = performance.now();
    const run = e.start({ seconds: 5 });
    expect((await run.done).status).toBe("SUCCEEDED");
    const elapsed = performance.now() - t0;
    // 5 s of wait and 2 s + 4 s of backoff, at a hundredth: 110 ms (a timer never fires early by more than 1 ms).
    expect(elapsed).toBeGreaterThanOrEqual(105);
    expect(elapsed).toBeLessThan(5000);
    const types = typesOf(run.history);
    expect(types.slice(0, 4)).toEqual([
      "ExecutionStarted",
      "WaitStateEntered",
      "WaitStateExited",
      "TaskStateEntered",
    ]);
    expect(run.figures).toMatchObject({ transitions: 2, invocations: { [fnOf("A")]: 3 } });
  });
});

describe("the up workflow's history budget (shared/workshop/limits.ts)", () => {
  const up = loadDefinition("up");
  const serviceError = () => named("Lambda.ServiceException", "Service error.");
  const throttled = () => named("Lambda.TooManyRequestsException", "Rate Exceeded.");
  /** The n-th failing attempt of a worst-case visit: service errors, then throttling, then (Poll) its own errors. */
  const worstError = (n: number) =>
    n <= 4 ? serviceError() : n <= LAMBDA_RETRIES_PER_TASK ? throttled() : new Error("store unavailable");

  it("limits.ts counts the retries up.asl.json allows", () => {
    for (const name of [
      "BeginUp",
      "Provision",
      "DeployHost",
      "RecordHostFailure",
      "Poll",
      "FailUnfinished",
      "FinishUp",
      "FailRun",
    ]) {
      const state = allStates(up).find(([n]) => n === name)?.[1];
      const retriers = (state?.Retry ?? []) as { ErrorEquals: string[]; MaxAttempts: number }[];
      const lambda = retriers.filter((r) => r.ErrorEquals.every((e) => e.startsWith("Lambda.")));
      expect(
        lambda.reduce((n, r) => n + r.MaxAttempts, 0),
        name,
      ).toBe(LAMBDA_RETRIES_PER_TASK);
    }
    expect(RETRY_EVENTS_PER_HOST).toBe(2 * LAMBDA_RETRIES_PER_TASK * 3);
  });

  /**
   * Stand-ins for up's handlers. `worst`: BeginUp, Provision, FailUnfinished, FinishUp and FailRun each spend
   * every Lambda retry, polls spend the rest of the margin, every host's deploy fails after every retry and is
   * recorded after every retry, and FinishUp fails into FailRun. Otherwise every step succeeds first time.
   */
  function stand(hosts: number, polls: number, worst: boolean): Invoke {
    let margin = RETRY_MARGIN_EVENTS / 3 - (worst ? 5 * LAMBDA_RETRIES_PER_TASK : 0);
    let pollsDone = 0;
    let pollAttempt = 0;
    const attempts = new Map<string, number>();
    const attempt = (key: string) => {
      const n = (attempts.get(key) ?? 0) + 1;
      attempts.set(key, n);
      return n;
    };
    return async (fn, payload) => {
      const p = payload as { hostIds?: string[] };
      const item = p.hostIds?.join(",");
      const name = /^\$\{(\w+)Function\}$/.exec(fn)?.[1];
      switch (name) {
        case "BeginUp":
        case "Provision":
        case "FailUnfinished":
        case "FailRun":
        case "FinishUp": {
          const n = attempt(name);
          if (worst && n <= LAMBDA_RETRIES_PER_TASK) throw worstError(n);
          if (worst && name === "FinishUp") throw new Error("cannot record the result");
          if (name === "BeginUp")
            return {
              concurrency: 40,
              pollSeconds: 10,
              deadline: "2099-01-01T00:00:00.000Z",
              deploy: true,
              stages: { provision: true, deploy: true, wait: true, publish: true },
              hostIds: [],
              batches: [],
            };
          if (name === "Provision") {
            const hostIds = Array.from({ length: hosts }, (_, i) => `h${i}`);
            return { hostIds, batches: deployBatches(hostIds, deployBatchSize(hosts)) };
          }
          return { state: "failed" };
        }
        case "DeployHost": {
          const n = attempt(`deploy:${item}`);
          if (worst && n <= LAMBDA_RETRIES_PER_TASK) throw worstError(n);
          if (worst) throw new Error("setup did not start");
          return { hosts: (p.hostIds ?? []).map((hostId) => ({ hostId, action: "started" })) };
        }
        case "RecordHostFailure": {
          const n = attempt(`record:${item}`);
          if (n <= LAMBDA_RETRIES_PER_TASK) throw worstError(n);
          return { hosts: (p.hostIds ?? []).map((hostId) => ({ hostId, action: "failed" })) };
        }
        case "Poll": {
          pollAttempt++;
          // Every Lambda retry and then the 3 on States.TaskFailed, per poll, while the margin lasts.
          if (worst && margin > 0 && pollAttempt <= LAMBDA_RETRIES_PER_TASK + 3) {
            margin--;
            throw worstError(pollAttempt);
          }
          pollAttempt = 0;
          pollsDone++;
          return { done: false, timedOut: pollsDone >= polls, ready: 0, failed: 0, deploying: hosts };
        }
        default:
          throw new Error(`unexpected ${fn}`);
      }
    };
  }

  const runUp = (hosts: number, polls: number, worst: boolean) =>
    engine(up, stand(hosts, polls, worst), "cloud", { keepHistory: false }).start({
      workshop: "w",
      runId: "run_01J9Z3Q8V6K1M2N3P4R5S6T7V8",
      force: false,
    });

  it("a poll costs 9 events and a Map item 7 (12 when its deploy fails), as limits.ts says", async () => {
    const base = runUp(3, 10, false);
    const morePolls = runUp(3, 11, false);
    const moreHosts = runUp(4, 10, false);
    await Promise.all([base.done, morePolls.done, moreHosts.done]);
    expect(morePolls.figures.historyEvents - base.figures.historyEvents).toBe(EVENTS_PER_POLL);
    expect(moreHosts.figures.historyEvents - base.figures.historyEvents).toBe(7);
    expect(EVENTS_PER_HOST).toBe(7 + 5);
  });

  it("a fleet of more than 100 hosts deploys in batches: 500 hosts cost 100 items' events, not 500", async () => {
    const small = runUp(100, 10, false);
    const large = runUp(500, 10, false);
    const [a, b] = await Promise.all([small.done, large.done]);
    expect(a.status).toBe("SUCCEEDED");
    expect(b.status).toBe("SUCCEEDED");
    expect(deployItems(500)).toBe(100);
    expect(large.figures.historyEvents).toBe(small.figures.historyEvents);
  });

  it("the largest fleet at the most polls validate allows stays within 25,000 events; one poll more fails", async () => {
    const hosts = MAX_WORKSHOP_HOSTS;
    const polls = pollBudget(hosts);
    const fits = runUp(hosts, polls, true);
    // The run ends as the workflow says (FinishUp failed, FailRun recorded it), not at a Step Functions limit.
    expect(await fits.done).toMatchObject({ status: "FAILED", error: "RunFailed" });
    const expected =
      FIXED_EVENTS +
      RETRY_MARGIN_EVENTS +
      deployItems(hosts) * (EVENTS_PER_HOST + RETRY_EVENTS_PER_HOST) +
      polls * EVENTS_PER_POLL;
    expect(fits.figures.historyEvents).toBe(expected);
    expect(expected).toBeLessThanOrEqual(HISTORY_EVENT_LIMIT);

    const over = runUp(hosts, polls + 1, true);
    expect(await over.done).toMatchObject({
      status: "FAILED",
      error: "States.Runtime",
      cause: "The execution reached the maximum number of history events (25000).",
    });
    expect(over.figures.historyEvents).toBe(HISTORY_EVENT_LIMIT);

    // validate allows exactly the settings whose polls fit this budget: for a day-long timeout, the
    // shortest poll interval it allows polls at most `polls` times, and one second less would not fit.
    const minutes = 1440;
    const shortest = historyBudget(5, minutes, hosts).minPollSeconds ?? 0;
    expect(historyBudget(shortest, minutes, hosts).fits).toBe(true);
    expect(maxPolls(shortest, minutes)).toBeLessThanOrEqual(polls);
    expect(historyBudget(shortest - 1, minutes, hosts).fits).toBe(false);
    expect(maxPolls(shortest - 1, minutes)).toBeGreaterThan(polls);
  });
});

describe("FakeStepFunctions", () => {
  const ROLE = "arn:aws:iam::123456789012:role/labfleet-states";
  const fnArn = arn.lambda("labfleet-test-Work");
  const definition = JSON.stringify({
    StartAt: "Work",
    States: {
      Work: {
        ...task(fnArn),
        Retry: [{ ErrorEquals: ["Lambda.TooManyRequestsException"], MaxAttempts: 2 }],
        End: true,
      },
    },
  });

  function setup(
    invoke: (
      fn: string,
      payload: unknown,
      ctx: InvokeContext,
    ) => Promise<{ payload: unknown; functionError?: string }>,
  ) {
    const events: ExecutionStatusChangeEvent[] = [];
    const sfn = new FakeStepFunctions({
      invoke,
      onStatusChange: (e) => void events.push(e),
      timing: instant,
    });
    const machine = sfn.addStateMachine({ name: "labfleet-test-up", definition, roleArn: ROLE });
    const authorized: AuthRequest[] = [];
    const call = (operation: string, deny = false): Call => ({
      principal: {
        name: "BeginUp",
        kind: "function",
        arn: "arn:aws:sts::123456789012:assumed-role/x/BeginUp",
        accessKeyId: accessKeyIdFor("BeginUp"),
      },
      service: "states",
      operation,
      requestId: "req",
      authorize: async (requests) => {
        authorized.push(...requests);
        if (deny) throw new AwsError("AccessDeniedException", "not authorized", 400);
      },
    });
    const op = (name: string, input: unknown, deny = false) =>
      (sfn.operations[name] as (i: unknown, c: Call) => Promise<Record<string, unknown>>)(
        input,
        call(name, deny),
      );
    return { sfn, machine, events, authorized, op };
  }

  it("runs an execution on the cloud profile, invoking through the Lambda double, and reports it", async () => {
    const invoked: [string, unknown, InvokeContext][] = [];
    let n = 0;
    const { sfn, machine, events, authorized, op } = setup(async (fn, payload, ctx) => {
      invoked.push([fn, payload, ctx]);
      if (++n === 1) throw new AwsError("TooManyRequestsException", "Rate Exceeded.", 429);
      return { payload: { done: true } };
    });
    const started = await op("StartExecution", {
      stateMachineArn: machine.arn,
      name: "run_1",
      input: '{"a":1}',
    });
    const executionArn = arn.execution("labfleet-test-up", "run_1");
    expect(started).toEqual({ executionArn, startDate: expect.any(Date) });
    expect(authorized).toEqual([{ action: "states:StartExecution", resource: machine.arn }]);
    await sfn.idle();
    expect(invoked.map(([fn, payload, ctx]) => [fn, payload, ctx.roleArn, ctx.executionArn])).toEqual([
      [fnArn, { a: 1 }, ROLE, executionArn],
      [fnArn, { a: 1 }, ROLE, executionArn],
    ]);
    const described = await op("DescribeExecution", { executionArn });
    expect(described).toMatchObject({
      status: "SUCCEEDED",
      name: "run_1",
      input: '{"a":1}',
      stateMachineArn: machine.arn,
    });
    expect(JSON.parse(described.output as string)).toMatchObject({
      Payload: { done: true },
      StatusCode: 200,
    });
    expect(sfn.figures(executionArn)).toMatchObject({
      status: "SUCCEEDED",
      transitions: 1,
      invocations: { [fnArn]: 2 },
    });
    const failed = sfn.executions.get(executionArn)?.run.history.find((h) => h.type === "TaskFailed");
    expect(failed?.taskFailedEventDetails?.error).toBe("Lambda.TooManyRequestsException");

    expect(events.map((e) => e.detail.status)).toEqual(["RUNNING", "SUCCEEDED"]);
    expect(events[1]).toMatchObject({
      "detail-type": "Step Functions Execution Status Change",
      source: "aws.states",
      account: "123456789012",
      resources: [executionArn],
      detail: {
        executionArn,
        stateMachineArn: machine.arn,
        name: "run_1",
        startDate: (started.startDate as Date).getTime(),
        stopDate: expect.any(Number),
        input: '{"a":1}',
        inputDetails: { included: true },
        outputDetails: { included: true },
        error: null,
        cause: null,
      },
    });
    expect(events[0]?.detail).toMatchObject({ stopDate: null, output: null, outputDetails: null });
  });

  it("is idempotent on name and input while running, and keeps the name once the execution closed", async () => {
    let release!: () => void;
    const { sfn, machine, op } = setup(() => new Promise((r) => (release = () => r({ payload: {} }))));
    const start = (input: string) =>
      op("StartExecution", { stateMachineArn: machine.arn, name: "run_2", input });
    const first = await start("{}");
    expect(await start("{}")).toEqual(first);
    await expect(start('{"other":true}')).rejects.toMatchObject({ code: "ExecutionAlreadyExists" });
    await waitUntil("the task to start", () => sfn.figures(first.executionArn as string).invocations[fnArn]);
    release();
    await sfn.idle();
    await expect(start("{}")).rejects.toMatchObject({ code: "ExecutionAlreadyExists" });
    await expect(
      op("StartExecution", { stateMachineArn: arn.stateMachine("nope"), name: "x" }),
    ).rejects.toMatchObject({
      code: "StateMachineDoesNotExist",
    });
    await expect(op("StartExecution", { stateMachineArn: machine.arn, name: "a b" })).rejects.toMatchObject({
      code: "InvalidName",
    });
  });

  it("authorizes before acting: a denied StartExecution starts nothing", async () => {
    const { sfn, machine, op, authorized } = setup(async () => ({ payload: {} }));
    await expect(
      op("StartExecution", { stateMachineArn: machine.arn, name: "run_3" }, true),
    ).rejects.toMatchObject({
      code: "AccessDeniedException",
    });
    expect(authorized).toEqual([{ action: "states:StartExecution", resource: machine.arn }]);
    expect(sfn.executions.size).toBe(0);
  });

  it("StopExecution aborts with the error and cause given, and says so to EventBridge", async () => {
    let release!: () => void;
    const { sfn, machine, op, events, authorized } = setup(
      () => new Promise((r) => (release = () => r({ payload: {} }))),
    );
    const { executionArn } = await op("StartExecution", { stateMachineArn: machine.arn, name: "run_4" });
    await waitUntil("the task to start", () => sfn.figures(executionArn as string).invocations[fnArn]);
    const stopped = await op("StopExecution", {
      executionArn,
      error: "labfleet.Stopped",
      cause: "by a test",
    });
    expect(stopped).toEqual({ stopDate: expect.any(Date) });
    expect(authorized.at(-1)).toEqual({ action: "states:StopExecution", resource: executionArn });
    expect(await op("DescribeExecution", { executionArn })).toMatchObject({
      status: "ABORTED",
      error: "labfleet.Stopped",
      cause: "by a test",
    });
    release();
    await sfn.idle();
    expect(events.map((e) => e.detail.status)).toEqual(["RUNNING", "ABORTED"]);
    expect(events[1]?.detail).toMatchObject({
      error: "labfleet.Stopped",
      cause: "by a test",
      redriveStatus: "REDRIVABLE",
    });
    expect(sfn.executions.get(executionArn as string)?.run.history.at(-1)?.type).toBe("ExecutionAborted");
    await expect(op("DescribeExecution", { executionArn: `${executionArn}x` })).rejects.toMatchObject({
      code: "ExecutionDoesNotExist",
    });
  });

  it("GetExecutionHistory pages the events, at most 1000 a page, forwards or in reverse", async () => {
    const { sfn, machine, op, authorized } = setup(async () => ({ payload: {}, functionError: undefined }));
    const { executionArn } = await op("StartExecution", {
      stateMachineArn: machine.arn,
      name: "run_5",
      input: '{"k":"v"}',
    });
    await sfn.idle();
    const all: HistoryEvent[] = [];
    let nextToken: string | undefined;
    do {
      const page = await op("GetExecutionHistory", {
        executionArn,
        maxResults: 2,
        ...(nextToken ? { nextToken } : {}),
      });
      all.push(...(page.events as HistoryEvent[]));
      expect((page.events as HistoryEvent[]).length).toBeLessThanOrEqual(2);
      nextToken = page.nextToken as string | undefined;
    } while (nextToken);
    expect(authorized.at(-1)).toEqual({ action: "states:GetExecutionHistory", resource: executionArn });
    expect(typesOf(all)).toEqual([
      "ExecutionStarted",
      "TaskStateEntered",
      "TaskScheduled",
      "TaskStarted",
      "TaskSucceeded",
      "TaskStateExited",
      "ExecutionSucceeded",
    ]);
    expect(all.map((e) => e.id)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    const reverse = await op("GetExecutionHistory", {
      executionArn,
      reverseOrder: true,
      includeExecutionData: false,
    });
    expect((reverse.events as HistoryEvent[]).map((e) => e.id)).toEqual([7, 6, 5, 4, 3, 2, 1]);
    expect((reverse.events as HistoryEvent[]).at(-1)?.executionStartedEventDetails).not.toHaveProperty(
      "input",
    );
    expect(all[0]?.executionStartedEventDetails).toMatchObject({ input: '{"k":"v"}', roleArn: ROLE });
    await expect(op("GetExecutionHistory", { executionArn, maxResults: 1001 })).rejects.toMatchObject({
      code: "ValidationException",
    });
    await expect(op("GetExecutionHistory", { executionArn, nextToken: "garbage" })).rejects.toMatchObject({
      code: "InvalidToken",
    });
  });

  it("takes the Lambda double's Invoke response as it comes: JSON bytes and FunctionError", async () => {
    const seen: [string, string | undefined][] = [];
    const invoke = invokeThrough({
      invoke: async (fn, payload) => {
        seen.push([fn, payload]);
        return fn.endsWith("Bad")
          ? { payload: Buffer.from('{"errorType":"Error","errorMessage":"no"}'), functionError: "Unhandled" }
          : { payload: Buffer.from('{"ok":true}') };
      },
    });
    const ctx = { roleArn: ROLE, stateMachineArn: "sm", executionArn: "ex" };
    expect(await invoke("fnGood", { a: 1 }, ctx)).toEqual({ payload: { ok: true } });
    expect(await invoke("fnBad", null, ctx)).toEqual({
      payload: { errorType: "Error", errorMessage: "no" },
      functionError: "Unhandled",
    });
    expect(seen).toEqual([
      ["fnGood", '{"a":1}'],
      ["fnBad", "null"],
    ]);
  });

  it("a function error from the Lambda double fails the Task with its errorType", async () => {
    const { sfn, machine, op } = setup(async () => ({
      payload: { errorType: "ZodError", errorMessage: "bad input", trace: [] },
      functionError: "Unhandled",
    }));
    const { executionArn } = await op("StartExecution", { stateMachineArn: machine.arn, name: "run_6" });
    await sfn.idle();
    expect(await op("DescribeExecution", { executionArn })).toMatchObject({
      status: "FAILED",
      error: "ZodError",
      cause: JSON.stringify({ errorType: "ZodError", errorMessage: "bad input", trace: [] }),
    });
  });
});

describe("a Task without TimeoutSeconds", () => {
  it("runs as long as it needs in the local profile too, not the library's 60 s (a Poll of 500 local hosts)", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      let finish: (v: unknown) => void = () => {};
      const slow = new Promise((r) => {
        finish = r;
      });
      const run = engine(def({ Long: { ...task("Long"), End: true } }), () => slow, "local").start({});
      await vi.advanceTimersByTimeAsync(120_000);
      finish({ polled: 500 });
      await vi.advanceTimersByTimeAsync(1_000);
      expect(await run.done).toMatchObject({ status: "SUCCEEDED" });
    } finally {
      vi.useRealTimers();
    }
  });
});
