import type { Readable } from "node:stream";
import { type RunBashRequest, type RunBashResult, runBash } from "./run-bash.mjs";
import { spawnViaHelper } from "./spawner.ts";
import { type ExecOptions, type ExecResult, OUTPUT_CAP_BYTES, type Transport } from "./types.ts";

/**
 * A local sandbox host: commands are child processes of this runtime, run by bash in the host's own
 * folder with that folder as HOME. Each command gets its own process group so a timeout ends all of it
 * (run-bash.mjs). Commands are started by a small helper process (spawner.ts), so a large runtime does not pay
 * a fork of itself per command; a command fed from a stream, or one when no helper runs, is spawned here.
 */
export class LocalTransport implements Transport {
  readonly outputBytes = OUTPUT_CAP_BYTES;
  constructor(readonly home: string) {}

  exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    const env = {
      PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
      LANG: process.env.LANG ?? "C.UTF-8",
      HOME: this.home,
      USER: process.env.USER ?? "root",
      ...options.env,
    };
    const input = options.stdin;
    const whole = input === undefined || typeof input === "string" || Buffer.isBuffer(input);
    const req: RunBashRequest = {
      command,
      cwd: this.home,
      env,
      ...(whole && input !== undefined ? { stdin: input } : {}),
      ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}),
      cap: OUTPUT_CAP_BYTES,
    };
    const run = (whole && spawnViaHelper(req)) || runBash(req, whole ? undefined : (input as Readable));
    return run.then(toResult);
  }
}

function toResult(r: RunBashResult): ExecResult {
  return {
    exitCode: r.timedOut ? 124 : (r.code ?? (r.signal ? 128 : 1)),
    stdout: r.stdout.toString("utf8"),
    stderr: r.stderr.toString("utf8"),
    ...(r.timedOut ? { timedOut: true } : {}),
    ...(r.truncated ? { truncated: true } : {}),
  };
}
