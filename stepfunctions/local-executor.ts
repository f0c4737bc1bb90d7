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

import { StateMachine } from "aws-local-stepfunctions";
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
import { taskFunctions } from "./handlers.ts";

export interface LocalExecutorOptions {
  /** Milliseconds for every Wait state (the cloud waits lab.poll_seconds); undefined keeps the definition's. */
  waitMs?: number;
  /** Milliseconds between Lambda-error retries. */
  retryMs?: number;
  /** Transitions are written to the run record in batches of this size (and at the end). */
  flushEvery?: number;
}

interface Execution {
  kind: RunKind;
  abort: () => void;
  done: Promise<void>;
  stopped: boolean;
}

/** Builds `taskResourceLocalHandlers` (keyed by state name) from each Task's FunctionName placeholder. */
export function localHandlers(def: AslDefinition) {
  const handlers: Record<string, (input: unknown) => Promise<unknown>> = {};
  for (const [name, state] of allStates(def)) {
    if (state.Type !== "Task") continue;
    const key = functionKeyOf(state);
    const fn = key ? (taskFunctions as Record<string, (e: unknown) => Promise<unknown>>)[key] : undefined;
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

const COUNTING_GRACE_MS = 2000;
const CLOSE_GRACE_MS = 15_000;

/** Whether `p` settled within `ms` (its result or error is not needed). */
async function settleWithin(p: Promise<unknown>, ms: number): Promise<boolean> {
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

/**
 * Runs the ASL definitions in-process with aws-local-stepfunctions: the local adapter of `Workflows`.
 * Counts state transitions (StateEntered events, as Step Functions bills them) into the run record.
 */
export class LocalExecutor implements Workflows {
  private readonly executions = new Map<string, Execution>();
  private readonly machines: Record<DefinitionName, { sm: StateMachine; def: AslDefinition }>;

  constructor(private readonly options: LocalExecutorOptions = {}) {
    const make = (kind: DefinitionName) => {
      const def = loadDefinition(kind);
      return {
        def,
        sm: new StateMachine(def as never, { validationOptions: { checkArn: true, checkPaths: true } }),
      };
    };
    this.machines = { up: make("up"), teardown: make("teardown") };
  }

  async start(kind: RunKind, input: RunInput): Promise<void> {
    if (this.executions.has(input.runId)) return;
    const { sm, def } = this.machines[definitionOf(kind)];
    const waits = Object.fromEntries(
      allStates(def)
        .filter(([, s]) => s.Type === "Wait")
        .map(([name]) => [name, this.options.waitMs ?? -1])
        .filter(([, ms]) => (ms as number) >= 0),
    );
    const retries = Object.fromEntries(
      allStates(def)
        .filter(([, s]) => Array.isArray(s.Retry))
        .map(([name, s]) => [name, (s.Retry as unknown[]).map(() => this.options.retryMs ?? 200)]),
    );
    const execution = sm.run(input as never, {
      overrides: {
        taskResourceLocalHandlers: localHandlers(def) as never,
        waitTimeOverrides: waits,
        retryIntervalOverrides: retries,
      },
      context: {
        Execution: { Id: `local:${kind}:${input.runId}`, Name: input.runId, Input: input as never },
      },
      noThrowOnAbort: true,
    });
    const entry: Execution = { kind, abort: execution.abort, stopped: false, done: Promise.resolve() };
    entry.done = this.follow(kind, input, execution, entry);
    this.executions.set(input.runId, entry);
  }

  private async follow(
    kind: RunKind,
    input: RunInput,
    execution: ReturnType<StateMachine["run"]>,
    entry: Execution,
  ): Promise<void> {
    const flushEvery = this.options.flushEvery ?? 20;
    let pending = 0;
    const flush = async () => {
      const n = pending;
      pending = 0;
      await addTransitions(input.workshop, input.runId, n).catch((err) =>
        log.warn("recording transitions failed", { runId: input.runId, error: errorMessage(err) }),
      );
    };
    await withActor({ type: "system", id: `workflow:${kind}` }, async () => {
      const counting = (async () => {
        for await (const event of execution.eventLogs) {
          if (event.type === "StateEntered") {
            pending++;
            if (pending >= flushEvery) await flush();
          }
        }
      })();
      // The event log ends with the execution; an aborted one (Ctrl-C) may leave it open, so counting is
      // waited for only briefly: a stopped run resumes at the next start anyway.
      const counted = () => settleWithin(counting, COUNTING_GRACE_MS);
      try {
        await execution.result;
        await counted();
      } catch (err) {
        await counted();
        if (!entry.stopped) {
          log.error("workflow failed", { kind, runId: input.runId, error: errorMessage(err) });
          await failRunIfRunning(input.workshop, input.runId, `workflow error: ${errorMessage(err)}`);
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
    e.abort();
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
      e.abort();
    }
    // A task handler still in flight (a host command, a store call) is not cancelled by abort: wait for it a
    // while, then go on; the run is resumed from its record at the next start.
    if (!(await settleWithin(Promise.all(all.map((e) => e.done)), CLOSE_GRACE_MS)))
      log.warn("closing with workflow steps still running; their runs resume at the next start", {
        runs: all.length,
      });
  }

  get running(): string[] {
    return [...this.executions.keys()];
  }
}
