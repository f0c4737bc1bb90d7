import { addTransitions, failRunIfRunning } from "../shared/fleet/runs.ts";
import type { RunInput, RunKind, Workflows } from "../shared/fleet/workflows.ts";
import { withActor } from "../shared/runtime/actor.ts";
import { errorMessage } from "../shared/runtime/errors.ts";
import { log } from "../shared/runtime/logger.ts";
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
}

interface Execution {
  kind: RunKind;
  run: EngineExecution;
  done: Promise<void>;
  stopped: boolean;
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

/**
 * Runs the ASL definitions in-process on the engine (stepfunctions/engine.ts) with the in-process
 * handlers: the local adapter of `Workflows`. Counts state transitions (StateEntered, as Step Functions
 * bills them) into the run record.
 */
export class LocalExecutor implements Workflows {
  private readonly executions = new Map<string, Execution>();
  private readonly engines: Record<DefinitionName, AslEngine>;

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
    this.engines = { up: make("up"), teardown: make("teardown") };
  }

  async start(kind: RunKind, input: RunInput): Promise<void> {
    if (this.executions.has(input.runId)) return;
    const flushEvery = this.options.flushEvery ?? 20;
    let pending = 0;
    let writes = Promise.resolve();
    const flush = () => {
      const n = pending;
      pending = 0;
      writes = writes.then(() =>
        addTransitions(input.workshop, input.runId, n).catch((err) =>
          log.warn("recording transitions failed", { runId: input.runId, error: errorMessage(err) }),
        ),
      );
      return writes;
    };
    const run = this.engines[definitionOf(kind)].start(input, {
      context: { Execution: { Id: `local:${kind}:${input.runId}`, Name: input.runId, Input: input } },
      onTransition: () => {
        pending++;
        if (pending >= flushEvery) void flush();
      },
    });
    const entry: Execution = { kind, run, stopped: false, done: Promise.resolve() };
    entry.done = this.follow(kind, input, entry, flush);
    this.executions.set(input.runId, entry);
  }

  private async follow(kind: RunKind, input: RunInput, entry: Execution, flush: () => Promise<void>) {
    await withActor({ type: "system", id: `workflow:${kind}` }, async () => {
      try {
        const outcome = await entry.run.done;
        if (outcome.status !== "SUCCEEDED" && outcome.status !== "ABORTED" && !entry.stopped) {
          const reason = `${outcome.error ?? outcome.status}${outcome.cause ? `: ${outcome.cause}` : ""}`;
          log.error("workflow failed", { kind, runId: input.runId, error: reason });
          await failRunIfRunning(input.workshop, input.runId, `workflow error: ${reason}`);
        }
      } finally {
        await flush();
        this.executions.delete(input.runId);
      }
    });
  }

  async stop(runId: string): Promise<void> {
    const e = this.executions.get(runId);
    if (!e) return;
    e.stopped = true;
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
