import { type ChildProcess, fork } from "node:child_process";
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import type { RunBashRequest, RunBashResult } from "./run-bash.mjs";

/**
 * Starts local hosts' commands from small helper processes (spawner-child.mjs) instead of the runtime itself.
 * A fork copies the calling process's memory map, and the runtime holds hundreds of megabytes: each `spawn`
 * from it blocks its event loop for tens of milliseconds, so a 500-host workshop's thousands of commands
 * would serialize on that. The helpers are a few tens of megabytes, one per core, and each command goes to
 * the one with the fewest in flight. They are unreferenced (they never keep the runtime alive) and end when it
 * does. When no helper can be started, the caller spawns the command itself.
 */

export type SpawnRequest = RunBashRequest;
export type SpawnResult = RunBashResult;

interface Answer {
  id: number;
  error?: string;
  code?: number | null;
  signal?: string | null;
  timedOut?: boolean;
  stdout?: Uint8Array;
  stderr?: Uint8Array;
  truncated?: boolean;
}

interface Helper {
  child: ChildProcess;
  inFlight: Map<number, { resolve: (r: SpawnResult) => void; reject: (e: Error) => void }>;
}

const CHILD = fileURLToPath(new URL("./spawner-child.mjs", import.meta.url));
let helpers: Helper[] | undefined;
let nextId = 1;

function startHelper(): Helper {
  const child = fork(CHILD, [], {
    serialization: "advanced",
    stdio: ["ignore", "ignore", "inherit", "ipc"],
    // No loader, no inspector: a plain Node with a small heap.
    execArgv: [],
  });
  const helper: Helper = { child, inFlight: new Map() };
  child.on("message", (m: Answer) => {
    const waiting = helper.inFlight.get(m.id);
    if (!waiting) return;
    helper.inFlight.delete(m.id);
    if (m.error !== undefined) waiting.reject(new Error(m.error));
    else
      waiting.resolve({
        code: m.code ?? null,
        signal: m.signal ?? null,
        timedOut: m.timedOut ?? false,
        stdout: Buffer.from(m.stdout ?? new Uint8Array()),
        stderr: Buffer.from(m.stderr ?? new Uint8Array()),
        truncated: m.truncated ?? false,
      });
  });
  const fail = () => {
    // A helper that died answers nothing more: its commands fail, and the next ones go to a new helper.
    if (helpers) helpers = helpers.filter((h) => h !== helper);
    for (const w of helper.inFlight.values()) w.reject(new Error("the local command helper ended"));
    helper.inFlight.clear();
  };
  child.on("exit", fail);
  child.on("error", fail);
  child.unref();
  // The IPC channel alone would keep the runtime alive; only a helper with work in flight may.
  (child.channel as { unref?: () => void } | undefined)?.unref?.();
  return helper;
}

function pick(): Helper | undefined {
  if (!helpers || helpers.length === 0) {
    try {
      helpers = Array.from({ length: Math.max(1, Math.min(availableParallelism(), 4)) }, startHelper);
    } catch {
      return undefined;
    }
  }
  return helpers.reduce((a, b) => (b.inFlight.size < a.inFlight.size ? b : a));
}

/** Runs a command through a helper; undefined when no helper could be started (then spawn it yourself). */
export function spawnViaHelper(req: SpawnRequest): Promise<SpawnResult> | undefined {
  const helper = pick();
  if (!helper?.child.connected) return undefined;
  const id = nextId++;
  return new Promise((resolve, reject) => {
    if (helper.inFlight.size === 0) (helper.child.channel as { ref?: () => void } | undefined)?.ref?.();
    helper.inFlight.set(id, {
      resolve: (r) => {
        settle();
        resolve(r);
      },
      reject: (e) => {
        settle();
        reject(e);
      },
    });
    function settle() {
      if (helper?.inFlight.size === 0)
        (helper.child.channel as { unref?: () => void } | undefined)?.unref?.();
    }
    helper.child.send({ id, ...req }, (err) => {
      if (!err) return;
      helper.inFlight.delete(id);
      settle();
      reject(err);
    });
  });
}

/** Ends the helpers (they start again on the next command). For tests and a runtime that closes. */
export function stopSpawnHelpers(): void {
  for (const h of helpers ?? []) h.child.kill();
  helpers = undefined;
}
