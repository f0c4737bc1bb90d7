import { VisibleError } from "../runtime/errors.ts";

/** How labfleet runs a command on a host. Files travel over stdin, never through a world-readable path. */
export interface ExecOptions {
  stdin?: string | Buffer | NodeJS.ReadableStream;
  env?: Record<string, string>;
  /** Kill the command after this long; the result then has `timedOut: true` and exit code 124. */
  timeoutMs?: number;
  /** Run as root: through `sudo -n` for a non-root login (never prompting), directly for root. */
  sudo?: boolean;
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
  close?(): Promise<void>;
}

export type TransportName = "local" | "ssh" | "ssm";

/** Quote a string for a POSIX shell. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

export const OUTPUT_CAP_BYTES = 1024 * 1024;

/** Collects a command's output up to OUTPUT_CAP_BYTES: a runaway command cannot fill memory. */
export function collectCapped(stream: NodeJS.ReadableStream) {
  const chunks: Buffer[] = [];
  let size = 0;
  let truncated = false;
  stream.on("data", (chunk: Buffer) => {
    if (size >= OUTPUT_CAP_BYTES) {
      truncated = true;
      return;
    }
    const room = OUTPUT_CAP_BYTES - size;
    chunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
    size += Math.min(chunk.length, room);
    if (chunk.length > room) truncated = true;
  });
  return {
    text: () => Buffer.concat(chunks).toString("utf8"),
    get truncated() {
      return truncated;
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
