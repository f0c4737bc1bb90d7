import { type ChildProcess, spawn } from "node:child_process";

/** The CLI's environment in tests: no colour, and no runtime but the one a test names. */
function cliEnv(extra: NodeJS.ProcessEnv | Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    NO_COLOR: "1",
    LABFLEET_URL: undefined,
    LABFLEET_TOKEN: undefined,
    ...extra,
  } as NodeJS.ProcessEnv;
}

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
      env: cliEnv(opts.env),
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

const sh = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Runs `labfleet ...` on a terminal: util-linux `script` gives it a pseudo-terminal (stdin, stdout and stderr),
 * so what a person at a terminal sees is what it sees. Once the output holds `waitFor`, `answer` is typed (a
 * line); without one, input ends there. Everything the command wrote comes back in `output` (the terminal
 * merges stdout and stderr, with CRLF line ends).
 */
export function runCliOnTty(
  args: string[],
  opts: {
    env?: Record<string, string | undefined>;
    waitFor?: string;
    answer?: string;
    timeoutMs?: number;
  } = {},
): Promise<{ code: number | null; output: string }> {
  const command = [process.execPath, cliBin, ...args].map(sh).join(" ");
  return new Promise((resolve, reject) => {
    const child = spawn("script", ["-q", "-e", "-c", command, "/dev/null"], {
      env: cliEnv(opts.env),
      stdio: ["pipe", "pipe", "pipe"],
    });
    let output = "";
    let typed = false;
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`labfleet ${args.join(" ")} on a terminal did not end: ${output}`));
    }, opts.timeoutMs ?? 30_000);
    child.stdout.on("data", (d) => {
      output += d;
      if (!typed && opts.waitFor !== undefined && output.includes(opts.waitFor)) {
        typed = true;
        if (opts.answer !== undefined) child.stdin.write(`${opts.answer}\n`);
        else child.stdin.write("\u0004");
      }
    });
    child.stderr.on("data", (d) => (output += d));
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, output: output.replace(/\r\n/g, "\n") });
    });
  });
}
