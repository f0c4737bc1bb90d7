import { addExecTransitions, failExecJob } from "../shared/fleet/exec-jobs.ts";
import { addTransitions, failRunIfRunning } from "../shared/fleet/runs.ts";
import { settleEndedExecution } from "../shared/fleet/teardown.ts";
import type { RunInput, WorkflowKind, Workflows } from "../shared/fleet/workflows.ts";
import { withActor } from "../shared/runtime/actor.ts";
import { pause } from "../shared/runtime/concurrency.ts";
import { useDeps } from "../shared/runtime/deps.ts";
import { errorMessage } from "../shared/runtime/errors.ts";
import { log } from "../shared/runtime/logger.ts";
import { isStoreUnreachable, probeStore, untilStoreAnswers } from "../shared/store/unreachable.ts";
import {
  type AslDefinition,
  allStates,
  type DefinitionName,
  definitionOf,
  functionKeyOf,
  loadDefinition,
} from "./definitions.ts";
import { AslEngine, type EngineExecution, type EngineProfile, settleWithin } from "./engine.ts";
import { taskFunctions } from "./handlers.ts";

export interface LocalExecutorOptions {
  /** Milliseconds for every Wait state (the cloud waits lab.poll_seconds); undefined keeps the definition's. */
  waitMs?: number;
  /** Milliseconds between Lambda-error retries. */
  retryMs?: number;
  /** Transitions are written to the run record in batches of this size (and at the end). */
  flushEvery?: number;
  /**
   * `local` (the default) runs the definitions as the local runtime always has; `cloud` adds Step Functions'
   * limits (40 Map iterations at once, 25,000 history events, 256 KiB per state input and output), so a run
   * that would fail in AWS fails here too.
   */
  profile?: EngineProfile;
  /**
   * Answers when the store does, throws while it is unreachable: what a run paused by a store outage waits on
   * before it resumes (default: one read of the store in use, see shared/store/unreachable.ts).
   */
  storeProbe?: () => Promise<void>;
}

interface Execution {
  kind: WorkflowKind;
  run: EngineExecution;
  done: Promise<void>;
  stopped: boolean;
  /** A step found the store unreachable: the execution was stopped, and the run resumes when the store answers. */
  paused: boolean;
  /** Task handlers of this execution still running (a stop does not cancel them). */
  inflight: Set<Promise<unknown>>;
  /** Aborted by `stop` and `close`: ends the waits of a paused run. */
  halted: AbortController;
}

type Handler = (event: unknown) => Promise<unknown>;

/** The in-process handler a Task's FunctionName placeholder (`${ProvisionFunction}`) stands for. */
function handlerOf(functionName: string): Handler | undefined {
  const key = functionKeyOf({ Type: "Task", Parameters: { FunctionName: functionName } });
  return key ? (taskFunctions as Record<string, Handler>)[key] : undefined;
}

/** Builds `taskResourceLocalHandlers` (keyed by state name) from each Task's FunctionName placeholder. */
export function localHandlers(def: AslDefinition) {
  const handlers: Record<string, (input: unknown) => Promise<unknown>> = {};
  for (const [name, state] of allStates(def)) {
    if (state.Type !== "Task") continue;
    const key = functionKeyOf(state);
    const fn = key ? (taskFunctions as Record<string, Handler>)[key] : undefined;
    if (!fn)
      throw new Error(
        `state ${name} invokes ${String(state.Parameters?.FunctionName)}, which has no handler`,
      );
    handlers[name] = async (input) => {
      const { Payload } = input as { Payload: unknown };
      return { StatusCode: 200, Payload: await fn(Payload) };
    };
  }
  return handlers;
}

/** Calls the in-process handler of a Task; a handler's throw is the function error Lambda would report. */
async function invokeInProcess(functionName: string, payload: unknown): Promise<unknown> {
  const fn = handlerOf(functionName);
  if (!fn) throw new Error(`no handler for ${functionName}`);
  return fn(payload);
}

const CLOSE_GRACE_MS = 15_000;
/** The pause before a paused run resumes grows with each pause in a row (a store that keeps dropping), up to this. */
const MAX_RESUME_DELAY_MS = 30_000;

/**
 * Runs the ASL definitions in-process on the engine (stepfunctions/engine.ts) with the in-process
 * handlers: the local adapter of `Workflows`. Counts state transitions (StateEntered, as Step Functions
 * bills them) into the run record.
 *
 * A store outage never fails a run: the first step that finds the store unreachable stops the execution
 * without a Catch seeing the error (so no host is marked failed for it), the run stays `running`, and once
 * the store answers again the run is started again from its record, as a restarted runtime resumes it
 * (every step is idempotent). This is the one place where workflows handle the store being down.
 */
export class LocalExecutor implements Workflows {
  private readonly executions = new Map<string, Execution>();
  private readonly engines: Record<DefinitionName, AslEngine>;
  /** Pauses in a row per run, for the growing pause before it resumes. */
  private readonly pauses = new Map<string, number>();

  constructor(private readonly options: LocalExecutorOptions = {}) {
    const make = (kind: DefinitionName) => {
      const def = loadDefinition(kind);
      localHandlers(def); // every Task has a handler, or this throws now rather than mid-run
      return new AslEngine(def, {
        profile: options.profile ?? "local",
        invoke: invokeInProcess,
        timing: {
          ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}),
          retryMs: options.retryMs ?? 200,
        },
      });
    };
    this.engines = {
      up: make("up"),
      teardown: make("teardown"),
      rollout: make("rollout"),
      exec: make("exec"),
    };
  }

  async start(kind: WorkflowKind, input: RunInput): Promise<void> {
    if (this.executions.has(input.runId)) return;
    const flushEvery = this.options.flushEvery ?? 20;
    let pending = 0;
    let writes = Promise.resolve();
    const flush = () => {
      const n = pending;
      pending = 0;
      // Through a store outage the count waits for the store (until the run is stopped or the executor closes).
      writes = writes.then(() =>
        untilStoreAnswers(
          () => (kind === "exec" ? addExecTransitions : addTransitions)(input.workshop, input.runId, n),
          {
            signal: entry.halted.signal,
          },
        ).catch((err) =>
          log.warn("recording transitions failed", { runId: input.runId, error: errorMessage(err) }),
        ),
      );
      return writes;
    };
    const entry = {
      kind,
      stopped: false,
      paused: false,
      inflight: new Set<Promise<unknown>>(),
      halted: new AbortController(),
      done: Promise.resolve(),
    } as Execution;
    entry.run = this.engines[definitionOf(kind)].start(input, {
      context: { Execution: { Id: `local:${kind}:${input.runId}`, Name: input.runId, Input: input } },
      onTransition: () => {
        pending++;
        if (pending >= flushEvery) void flush();
      },
      invoke: (functionName, payload) => this.invoke(input, entry, functionName, payload),
    });
    entry.done = this.follow(kind, input, entry, flush).catch((err) =>
      // follow handles what it expects; this is the last line, so no run ever ends in an unhandled rejection
      log.error("following a workflow failed", { kind, runId: input.runId, error: errorMessage(err) }),
    );
    this.executions.set(input.runId, entry);
  }

  /** Calls a Task's handler; one that finds the store unreachable pauses the run instead of failing the step. */
  private invoke(input: RunInput, entry: Execution, functionName: string, payload: unknown) {
    const call = invokeInProcess(functionName, payload).catch((err) => {
      if (isStoreUnreachable(err) && !entry.stopped && !entry.paused) {
        entry.paused = true;
        log.warn("the store is unreachable: run paused; it resumes when the store answers", {
          runId: input.runId,
          task: functionName,
          error: errorMessage(err),
        });
        entry.run.stop(
          "labfleet.StoreUnreachable",
          "the store is unreachable; the run resumes when it is back",
        );
      }
      throw err;
    });
    entry.inflight.add(call);
    void call.then(
      () => entry.inflight.delete(call),
      () => entry.inflight.delete(call),
    );
    return call;
  }

  private async follow(kind: WorkflowKind, input: RunInput, entry: Execution, flush: () => Promise<void>) {
    let resume = false;
    await withActor({ type: "system", id: `workflow:${kind}` }, async () => {
      try {
        const outcome = await entry.run.done;
        if (entry.paused && !entry.stopped) {
          resume = await this.awaitStore(input, entry);
        } else if (outcome.status !== "SUCCEEDED" && outcome.status !== "ABORTED" && !entry.stopped) {
          const reason = `${outcome.error ?? outcome.status}${outcome.cause ? `: ${outcome.cause}` : ""}`;
          log.error("workflow failed", { kind, runId: input.runId, error: reason });
          // The run's record must say so: through a store outage too (it stays running, and resumes, if this
          // runtime closes first).
          // A teardown's run also gets its receipt (what is left and how to remove it), as in the cloud.
          const status = outcome.status === "TIMED_OUT" ? "TIMED_OUT" : "FAILED";
          await untilStoreAnswers(
            async () => {
              if (kind === "teardown")
                await settleEndedExecution(input.workshop, input.runId, status, reason);
              else if (kind === "exec")
                await failExecJob(input.workshop, input.runId, `workflow error: ${reason}`);
              else await failRunIfRunning(input.workshop, input.runId, `workflow error: ${reason}`);
            },
            { signal: entry.halted.signal },
          );
        }
        if (!entry.paused) this.pauses.delete(input.runId);
      } finally {
        await flush();
        this.executions.delete(input.runId);
      }
    });
    if (resume && !entry.halted.signal.aborted) {
      log.info("the store answers again: resuming the run", { kind, runId: input.runId });
      await this.start(kind, input);
    }
  }

  /**
   * A paused run: waits until its steps still running have ended and the store answers (and a pause that grows
   * with each pause in a row), then says whether to resume; false when the executor closes meanwhile.
   */
  private async awaitStore(input: RunInput, entry: Execution): Promise<boolean> {
    const signal = entry.halted.signal;
    const n = (this.pauses.get(input.runId) ?? 0) + 1;
    this.pauses.set(input.runId, n);
    await Promise.allSettled([...entry.inflight]);
    const probe = this.options.storeProbe ?? (() => probeStore(useDeps().store));
    try {
      await untilStoreAnswers(probe, { signal, delayMs: 250, maxDelayMs: 5000 });
    } catch (err) {
      if (signal.aborted) return false;
      // The store answered with an error of its own: resuming finds out what it is.
      log.warn("the store answers with an error; resuming the run anyway", {
        runId: input.runId,
        error: errorMessage(err),
      });
    }
    if (n > 1) await pause(Math.min(250 * 2 ** (n - 1), MAX_RESUME_DELAY_MS), signal);
    return !signal.aborted;
  }

  async stop(runId: string): Promise<void> {
    const e = this.executions.get(runId);
    if (!e) return;
    e.stopped = true;
    e.halted.abort();
    e.run.stop();
    await e.done;
  }

  /** Resolves when no run is executing (tests and shutdown). */
  async idle(): Promise<void> {
    while (this.executions.size > 0) await Promise.all([...this.executions.values()].map((e) => e.done));
  }

  /** Stops every execution without marking its run: a restarted runtime resumes them. */
  async close(): Promise<void> {
    const all = [...this.executions.values()];
    for (const e of all) {
      e.stopped = true;
      e.halted.abort();
      e.run.stop();
    }
    // A task handler still in flight (a host command, a store call) is not cancelled by a stop: wait for
    // the executions a while, then go on; the run is resumed from its record at the next start.
    if (!(await settleWithin(Promise.all(all.map((e) => e.done)), CLOSE_GRACE_MS)))
      log.warn("closing with workflow steps still running; their runs resume at the next start", {
        runs: all.length,
      });
  }

  get running(): string[] {
    return [...this.executions.keys()];
  }
}
