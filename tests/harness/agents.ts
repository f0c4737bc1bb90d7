import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { recordEnrolledHost } from "../../shared/agent/enrolled-hosts.ts";
import { removeDir, tempDir } from "./runtime.ts";

/**
 * Real agent processes for tests: the script labfleet serves (GET /agent/v1/agent.sh) run by bash with its own
 * temporary HOME, its env file written as `join` would write it, calling in to the runtime on 127.0.0.1.
 */
export interface TestAgent {
  workshop: string;
  hostId: string;
  secret: string;
  home: string;
  readonly child: ChildProcess;
  /** What the agent printed (stderr). */
  output(): string;
  /** Ends the agent and every command it runs (its process group), and waits for it. */
  stop(): Promise<void>;
  /** Starts it again with the same HOME and env file. */
  restart(): Promise<void>;
}

export async function fetchAgentScript(url: string, dir: string): Promise<string> {
  const res = await fetch(`${url}/agent/v1/agent.sh`);
  if (!res.ok) throw new Error(`GET /agent/v1/agent.sh answered ${res.status}`);
  const file = join(dir, "agent.sh");
  writeFileSync(file, await res.text(), { mode: 0o700 });
  return file;
}

/** Writes the env file `join` writes, for a host whose secret the test made (recordEnrolledHost). */
export function writeAgentEnv(
  home: string,
  o: { url: string; workshop: string; hostId: string; secret: string },
) {
  const dir = join(home, ".labfleet-agent");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  writeFileSync(
    join(dir, `${o.workshop}.env`),
    `LABFLEET_API='${o.url}'\nLABFLEET_WORKSHOP='${o.workshop}'\nLABFLEET_HOST_ID='${o.hostId}'\nLABFLEET_HOST_SECRET='${o.secret}'\n`,
    { mode: 0o600 },
  );
}

/**
 * A machine's agent as a process: `bash ARGS` with `home` as its HOME and working folder, in its own process group,
 * its output (stdout and stderr) kept across restarts. `env` is added to a minimal environment.
 */
export interface AgentProcess {
  home: string;
  /** The process running now. */
  readonly child: ChildProcess;
  output(): string;
  /** Ends the process and every command it runs (its process group), and waits for it. */
  stop(): Promise<void>;
  /** Stops it, then starts `bash args` (by default the same as before) with the same HOME and environment. */
  relaunch(args?: string[]): Promise<void>;
}

export function agentProcess(home: string, args: string[], env: Record<string, string> = {}): AgentProcess {
  let out = "";
  const launch = (a: string[]) => {
    const c = spawn("bash", a, {
      cwd: home,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
      env: {
        PATH: process.env.PATH ?? "/usr/local/bin:/usr/bin:/bin",
        LANG: "C.UTF-8",
        HOME: home,
        USER: process.env.USER ?? "root",
        ...env,
      },
    });
    c.stdout?.on("data", (d: Buffer) => (out += d.toString()));
    c.stderr?.on("data", (d: Buffer) => (out += d.toString()));
    return c;
  };
  let child = launch(args);
  const stop = async () => {
    const c = child;
    if (c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise<void>((r) => c.once("exit", () => r()));
    try {
      if (c.pid) process.kill(-c.pid, "SIGKILL");
    } catch {
      // already gone
    }
    await gone;
  };
  return {
    home,
    get child() {
      return child;
    },
    output: () => out,
    stop,
    async relaunch(a = args) {
      await stop();
      child = launch(a);
    },
  };
}

export async function startAgent(o: {
  url: string;
  script: string;
  workshop: string;
  hostId: string;
  secret: string;
  /** Seconds each long poll asks to be held (default 2: tests see a stopped agent quickly). */
  pollWait?: number;
}): Promise<TestAgent> {
  const home = tempDir("labfleet-agent-home-");
  writeAgentEnv(home, o);
  const proc = agentProcess(home, [o.script, "run", o.workshop], {
    LABFLEET_POLL_WAIT: String(o.pollWait ?? 2),
  });
  return {
    workshop: o.workshop,
    hostId: o.hostId,
    secret: o.secret,
    home,
    get child() {
      return proc.child;
    },
    output: proc.output,
    stop: proc.stop,
    restart: () => proc.relaunch(),
  };
}

/** Records approved enrolled hosts and starts an agent for each. */
export async function enrolledFleet(o: {
  url: string;
  workshop: string;
  names: string[];
  pollWait?: number;
  enrollment?: "approved" | "pending";
}): Promise<{ agents: TestAgent[]; script: string; stop(): Promise<void> }> {
  const dir = tempDir("labfleet-agent-script-");
  const script = await fetchAgentScript(o.url, dir);
  const agents: TestAgent[] = [];
  for (const name of o.names) {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: o.workshop,
      name,
      facts: { hostname: name, os: "Debian GNU/Linux 12", cpus: 2 },
      enrollment: o.enrollment ?? "approved",
    });
    agents.push(
      await startAgent({
        url: o.url,
        script,
        workshop: o.workshop,
        hostId,
        secret,
        ...(o.pollWait ? { pollWait: o.pollWait } : {}),
      }),
    );
  }
  return {
    agents,
    script,
    async stop() {
      for (const a of agents) {
        await a.stop();
        removeDir(a.home);
      }
      removeDir(dir);
    },
  };
}
