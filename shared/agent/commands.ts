import { EventEmitter } from "node:events";
import { z } from "zod";
import { isConditionalFailure } from "../fleet/runs.ts";
import { open, seal } from "../runtime/crypto.ts";
import { useDeps } from "../runtime/deps.ts";
import { createID } from "../runtime/ids.ts";
import type { AgentCommandItem } from "../store/entities.ts";

/**
 * The command queue between labfleet and enrolled hosts' agents. The agent transport (shared/transports/agent.ts)
 * queues a command; the host's agent takes it with its signed long poll (POST /agent/v1/poll), runs it and posts
 * the result (POST /agent/v1/result); the transport reads the result and deletes the item. Each command is one
 * `agentCommand` item whose script and stdin are sealed with the runtime's access key and removed once the result
 * is in. Every size is bounded so an item stays under DynamoDB's 400 KB, and a result body under the API's 256 KiB.
 */

/** Bytes of the bash script a command is (its environment exports and the command). */
export const AGENT_SCRIPT_MAX = 32 * 1024;
/** Bytes of a command's stdin (a lab source archive travels this way: larger sources must be git URLs). */
export const AGENT_STDIN_MAX = 160 * 1024;
/** Bytes of stdout and stderr an agent sends back; longer output is cut to its start and marked truncated. */
export const AGENT_STDOUT_MAX = 128 * 1024;
export const AGENT_STDERR_MAX = 32 * 1024;
/** A command item ends by TTL this long after it was queued (one that nobody read back). */
export const COMMAND_TTL_SECONDS = 86_400;
/** At most this many commands go to an agent in one poll answer. */
export const COMMANDS_PER_POLL = 8;

/** What an agent is given for one command (every value URL-safe, so the agent's bash reads it with sed). */
export interface TakenCommand {
  id: string;
  /** Seconds, three decimals: the agent runs the command under `timeout` with it. */
  timeoutSeconds: string;
  sudo: 0 | 1;
  /** The script, base64. */
  script: string;
  /** The stdin, base64 (empty: none). */
  stdin: string;
}

export interface QueuedCommand {
  workshop: string;
  hostId: string;
  script: string;
  stdin?: Buffer;
  timeoutMs: number;
  sudo?: boolean;
  step?: string;
}

/** Wakes long polls and waiting transports in this process at once (other processes poll the table). */
const wake = new EventEmitter();
wake.setMaxListeners(0);
const queuedKey = (workshop: string, hostId: string) => `queued:${workshop}/${hostId}`;
const doneKey = (commandId: string) => `done:${commandId}`;

/** Resolves when `key` is emitted or after `ms`, whichever is first. */
function nap(key: string, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      wake.off(key, done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    wake.on(key, done);
  });
}

/** Queues a command for the host's agent; returns its id. */
export async function queueCommand(c: QueuedCommand): Promise<string> {
  const { store, clock, accessKey } = useDeps();
  const now = clock.now();
  const commandId = createID("command");
  await store.agentCommand
    .create({
      workshop: c.workshop,
      hostId: c.hostId,
      commandId,
      state: "queued",
      ...(c.step ? { step: c.step.slice(0, 200) } : {}),
      script: seal(accessKey, c.script),
      ...(c.stdin?.length ? { stdin: seal(accessKey, c.stdin.toString("base64")) } : {}),
      timeoutMs: c.timeoutMs,
      ...(c.sudo ? { sudo: true } : {}),
      createdAt: now.toISOString(),
      expiresAt: Math.floor(now.getTime() / 1000) + COMMAND_TTL_SECONDS,
    })
    .go();
  wake.emit(queuedKey(c.workshop, c.hostId));
  return commandId;
}

async function commandsOf(workshop: string, hostId: string): Promise<AgentCommandItem[]> {
  return (await useDeps().store.agentCommand.query.byHost({ workshop, hostId }).go({ pages: "all" })).data;
}

/**
 * Takes the host's queued commands (oldest first, at most COMMANDS_PER_POLL): each moves queued -> taken with a
 * conditional write, so a command goes to one poll only, and one the transport cancelled meanwhile to none.
 */
export async function takeCommands(workshop: string, hostId: string): Promise<TakenCommand[]> {
  const { store, clock, accessKey } = useDeps();
  const queued = (await commandsOf(workshop, hostId)).filter((c) => c.state === "queued");
  const taken: TakenCommand[] = [];
  for (const c of queued.slice(0, COMMANDS_PER_POLL)) {
    try {
      await store.agentCommand
        .patch({ workshop, hostId, commandId: c.commandId })
        .set({ state: "taken", takenAt: clock.now().toISOString() })
        .where((a, op) => op.eq(a.state, "queued"))
        .go();
    } catch (err) {
      if (isConditionalFailure(err)) continue;
      throw err;
    }
    taken.push({
      id: c.commandId,
      timeoutSeconds: (c.timeoutMs / 1000).toFixed(3),
      sudo: c.sudo ? 1 : 0,
      script: Buffer.from(c.script ? open(accessKey, c.script) : "", "utf8").toString("base64"),
      stdin: c.stdin ? open(accessKey, c.stdin) : "",
    });
  }
  return taken;
}

/**
 * A long poll's wait: takes the host's queued commands, or waits for some (woken at once in this process, else
 * looking again every `everyMs`) until `holdMs` has passed or `stop()` says so; an empty list then.
 */
export async function waitForCommands(
  workshop: string,
  hostId: string,
  holdMs: number,
  opts: { everyMs?: number; mayTake?: () => Promise<boolean> } = {},
): Promise<TakenCommand[]> {
  const until = Date.now() + holdMs;
  const every = opts.everyMs ?? 500;
  for (;;) {
    if (!opts.mayTake || (await opts.mayTake())) {
      const taken = await takeCommands(workshop, hostId);
      if (taken.length > 0) return taken;
    }
    const left = until - Date.now();
    if (left <= 0) return [];
    await nap(queuedKey(workshop, hostId), Math.min(every, left));
  }
}

/** What an agent posts for a command it ran. */
export const AgentResult = z.strictObject({
  id: z.string().regex(/^cmd_[0-9A-HJKMNP-TV-Z]{26}$/, { error: "expected a command id (cmd_...)" }),
  exitCode: z.number().int().min(-1).max(255),
  timedOut: z.boolean().default(false),
  /** The full sizes of the command's output on the host (what was sent may be cut). */
  outBytes: z.number().int().min(0),
  errBytes: z.number().int().min(0),
  stdout: z.base64({ error: "expected base64" }),
  stderr: z.base64({ error: "expected base64" }),
});
export type AgentResult = z.output<typeof AgentResult>;

/**
 * Records an agent's result for one of its own taken commands (taken -> done, conditionally: a second post of the
 * same result, or one for a command given up on, changes nothing). Output beyond the bounds is cut and the result
 * marked truncated. Returns whether it was recorded.
 */
export async function recordResult(workshop: string, hostId: string, r: AgentResult): Promise<boolean> {
  const { store, clock, accessKey } = useDeps();
  const out = Buffer.from(r.stdout, "base64");
  const err = Buffer.from(r.stderr, "base64");
  const truncated =
    out.length > AGENT_STDOUT_MAX ||
    err.length > AGENT_STDERR_MAX ||
    r.outBytes > out.length ||
    r.errBytes > err.length;
  try {
    await store.agentCommand
      .patch({ workshop, hostId, commandId: r.id })
      .set({
        state: "done",
        exitCode: r.exitCode,
        stdout: seal(accessKey, out.subarray(0, AGENT_STDOUT_MAX).toString("utf8")),
        stderr: seal(accessKey, err.subarray(0, AGENT_STDERR_MAX).toString("utf8")),
        ...(r.timedOut ? { timedOut: true } : {}),
        ...(truncated ? { truncated: true } : {}),
        finishedAt: clock.now().toISOString(),
      })
      .remove(["script", "stdin"])
      .where((a, op) => op.eq(a.state, "taken"))
      .go();
  } catch (e) {
    if (isConditionalFailure(e)) return false;
    throw e;
  }
  wake.emit(doneKey(r.id));
  return true;
}

export interface CommandOutcome {
  state: AgentCommandItem["state"];
  exitCode?: number;
  stdout?: string;
  stderr?: string;
  timedOut?: boolean;
  truncated?: boolean;
}

/** A command's state, and its output once done (opened); undefined when the item is gone. */
export async function commandOutcome(
  workshop: string,
  hostId: string,
  commandId: string,
): Promise<CommandOutcome | undefined> {
  const { store, accessKey } = useDeps();
  const c = (await store.agentCommand.get({ workshop, hostId, commandId }).go()).data;
  if (!c) return undefined;
  return {
    state: c.state,
    ...(c.exitCode !== undefined ? { exitCode: c.exitCode } : {}),
    ...(c.stdout !== undefined ? { stdout: open(accessKey, c.stdout) } : {}),
    ...(c.stderr !== undefined ? { stderr: open(accessKey, c.stderr) } : {}),
    ...(c.timedOut ? { timedOut: true } : {}),
    ...(c.truncated ? { truncated: true } : {}),
  };
}

/** Waits up to `ms` for the command's result (woken at once in this process). */
export function napForResult(commandId: string, ms: number): Promise<void> {
  return nap(doneKey(commandId), ms);
}

/** Cancels a command no agent took yet; false when one took it meanwhile (or it is gone). */
export async function cancelQueued(workshop: string, hostId: string, commandId: string): Promise<boolean> {
  try {
    await useDeps()
      .store.agentCommand.patch({ workshop, hostId, commandId })
      .set({ state: "cancelled" })
      .remove(["script", "stdin"])
      .where((a, op) => op.eq(a.state, "queued"))
      .go();
    return true;
  } catch (err) {
    if (isConditionalFailure(err)) return false;
    throw err;
  }
}

/** Forgets a command (its result was read, or it was given up on). */
export async function deleteCommand(workshop: string, hostId: string, commandId: string): Promise<void> {
  await useDeps().store.agentCommand.delete({ workshop, hostId, commandId }).go();
}

/** Forgets every command of a host (it was removed, rejected, or forgot the workshop). */
export async function dropCommands(workshop: string, hostId: string): Promise<void> {
  const all = await commandsOf(workshop, hostId);
  for (const c of all) await deleteCommand(workshop, hostId, c.commandId);
}
