import { spawn } from "node:child_process";
import type { Readable } from "node:stream";
import { collectCapped, type ExecOptions, type ExecResult, type Transport } from "./types.ts";

/**
 * A local sandbox host: commands are child processes of this runtime, run by bash in the host's own
 * folder with that folder as HOME. Each command gets its own process group so a timeout ends all of it.
 */
export class LocalTransport implements Transport {
  constructor(readonly home: string) {}

  exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    const child = spawn("bash", ["--noprofile", "--norc", "-c", command], {
      cwd: this.home,
      detached: true,
      stdio: ["pipe", "pipe", "pipe"],
      env: {
        PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
        LANG: process.env.LANG ?? "C.UTF-8",
        HOME: this.home,
        USER: process.env.USER ?? "root",
        ...options.env,
      },
    });
    return new Promise((resolve, reject) => {
      const out = collectCapped(child.stdout);
      const err = collectCapped(child.stderr);
      let timedOut = false;
      const timer =
        options.timeoutMs === undefined
          ? undefined
          : setTimeout(() => {
              timedOut = true;
              try {
                if (child.pid) process.kill(-child.pid, "SIGKILL");
              } catch {
                // already gone
              }
            }, options.timeoutMs);
      child.on("error", (e) => {
        if (timer) clearTimeout(timer);
        reject(e);
      });
      child.on("close", (code, signal) => {
        if (timer) clearTimeout(timer);
        resolve({
          exitCode: timedOut ? 124 : (code ?? (signal ? 128 : 1)),
          stdout: out.text(),
          stderr: err.text(),
          ...(timedOut ? { timedOut } : {}),
          ...(out.truncated || err.truncated ? { truncated: true } : {}),
        });
      });
      child.stdin.on("error", () => {}); // the command may exit without reading its input
      const input = options.stdin;
      if (input === undefined) child.stdin.end();
      else if (typeof input === "string" || Buffer.isBuffer(input)) child.stdin.end(input);
      else (input as Readable).pipe(child.stdin);
    });
  }
}
