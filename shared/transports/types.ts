import { VisibleError } from "../runtime/errors.ts";
import { collectBytes } from "./run-bash.mjs";

/** How labfleet runs a command on a host. Files travel over stdin, never through a world-readable path. */
export interface ExecOptions {
  stdin?: string | Buffer | NodeJS.ReadableStream;
  env?: Record<string, string>;
  /** Kill the command after this long; the result then has `timedOut: true` and exit code 124. */
  timeoutMs?: number;
  /** Run as root: through `sudo -n` for a non-root login (never prompting), directly for root. */
  sudo?: boolean;
  /**
   * labfleet's own short script that reads and reports, waits for nothing and leaves nothing running (doctor, the
   * lab probe, page reads): it ends within moments whatever becomes of the connection, so the SSH transport starts
   * it without the host-side `timeout` backstop, one process fewer on the host per command, and in the
   * connection's resident shell. `timeoutMs` still holds: labfleet ends the command through its session.
   */
  brief?: boolean;
  /**
   * A command with no stdin that leaves nothing running once it ends, but may run until its timeout (a lab's
   * health check): the SSH transport may run it in the connection's resident shell, as a brief one, yet under the
   * host-side `timeout` backstop. (Brief commands always may.)
   */
  resident?: boolean;
  /** What the command is doing, for error messages ("sync lab source", "doctor"). */
  step?: string;
  /**
   * No waiting past this time (epoch ms), whatever the timeout: a transport that waits beyond the command's own
   * timeout (SSM's delivery and polling) gives up here. Set from the caller's deadline (shared/runtime/deadline.ts).
   */
  deadline?: number;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
  timedOut?: boolean;
  /** True when output went past the transport's cap and was cut. */
  truncated?: boolean;
}

export interface Transport {
  /** Runs `command` with bash on the host, in the login user's home. */
  exec(command: string, options?: ExecOptions): Promise<ExecResult>;
  /**
   * The most stdout (bytes) this transport returns whole; a longer output is cut. Reads of host files size their
   * pages to it (shared/fleet/lab.ts pageBytesFor). Unset: as small as the smallest transport's (SSM's).
   */
  readonly outputBytes?: number;
  /**
   * Checks the host answers without running anything on it: the SSH transport logs in, or finds its connection
   * open (a later command uses that connection). Without it, reachHost runs `true`.
   */
  reach?(step: string): Promise<void>;
  close?(): Promise<void>;
}

/** Checks the host answers: the transport's `reach`, else `true` run on it (another exit code than 0 throws). */
export async function reachHost(t: Transport, step: string): Promise<void> {
  if (t.reach) return t.reach(step);
  const r = await t.exec("true", { step, timeoutMs: 30_000, brief: true });
  if (r.exitCode !== 0) throw new Error(`${step}: the host answered with exit code ${r.exitCode}`);
}

export type TransportName = "local" | "ssh" | "ssm" | "agent";

/** Quote a string for a POSIX shell. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

export const OUTPUT_CAP_BYTES = 1024 * 1024;

/** Collects a command's output up to OUTPUT_CAP_BYTES: a runaway command cannot fill memory. */
export function collectCapped(stream: NodeJS.ReadableStream) {
  const kept = collectBytes(stream, OUTPUT_CAP_BYTES);
  return {
    text: () => kept.bytes().toString("utf8"),
    get truncated() {
      return kept.truncated;
    },
  };
}

/** `export K='v';` lines for a command's environment; a key that is not a variable name is refused. */
export function envExports(env: Record<string, string> | undefined, hostId: string): string {
  return Object.entries(env ?? {})
    .map(([key, value]) => {
      if (!/^[A-Za-z_][A-Za-z0-9_]*$/.test(key)) {
        throw new VisibleError("input", "host.bad_env", `${hostId}: "${key}" is not a variable name`);
      }
      return `export ${key}=${shq(value)};\n`;
    })
    .join("");
}

/**
 * Reads a command's stdin into memory, at most `maxBytes` (transports that carry it in a request: SSM, the agent):
 * past that the stream is destroyed and `tooLarge()` is thrown, so a big input never fills memory.
 */
export async function readBoundedInput(
  input: NonNullable<ExecOptions["stdin"]>,
  maxBytes: number,
  tooLarge: () => Error,
): Promise<Buffer> {
  if (typeof input === "string" || Buffer.isBuffer(input)) {
    const buf = typeof input === "string" ? Buffer.from(input, "utf8") : input;
    if (buf.length > maxBytes) throw tooLarge();
    return buf;
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of input) {
    const buf = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : Buffer.from(chunk);
    size += buf.length;
    if (size > maxBytes) {
      (input as NodeJS.ReadableStream & { destroy?: () => void }).destroy?.();
      throw tooLarge();
    }
    chunks.push(buf);
  }
  return Buffer.concat(chunks);
}
