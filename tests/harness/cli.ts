import { type ChildProcess, spawn } from "node:child_process";

export const cliBin = new URL("../../cli/bin.mjs", import.meta.url).pathname;

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `labfleet ...` as a separate process, the way a user does. */
export function runCli(
  args: string[],
  opts: { cwd?: string; env?: Record<string, string | undefined> } = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [cliBin, ...args], {
      cwd: opts.cwd ?? process.cwd(),
      env: {
        ...process.env,
        NO_COLOR: "1",
        LABFLEET_URL: undefined,
        LABFLEET_TOKEN: undefined,
        ...opts.env,
      } as NodeJS.ProcessEnv,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

/** Starts a long-running `labfleet ...` (dev) and collects its output as it comes. */
export function startCli(
  args: string[],
  opts: { cwd?: string; env?: Record<string, string | undefined> } = {},
) {
  const child: ChildProcess = spawn(process.execPath, [cliBin, ...args], {
    cwd: opts.cwd ?? process.cwd(),
    env: { ...process.env, NO_COLOR: "1", ...opts.env } as NodeJS.ProcessEnv,
    stdio: ["ignore", "pipe", "pipe"],
  });
  const out = { stdout: "", stderr: "" };
  child.stdout?.on("data", (d) => (out.stdout += d));
  child.stderr?.on("data", (d) => (out.stderr += d));
  const exited = new Promise<number | null>((res) => child.on("exit", (code) => res(code)));
  return { child, out, exited };
}
