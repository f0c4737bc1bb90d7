import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inject } from "vitest";
import { type LocalRuntime, type LocalRuntimeOptions, startLocalRuntime } from "../../cli/local/runtime.ts";
import type { Clock } from "../../shared/runtime/clock.ts";

export const fixturesDir = new URL("../fixtures/", import.meta.url).pathname;

export function tempDir(prefix = "labfleet-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

let tables = 0;
export function uniqueTable(): string {
  return `t${process.pid}_${Date.now().toString(36)}_${tables++}`;
}

/** A clock the test moves by hand: `advance(ms)`. */
export function movableClock(): Clock & { advance(ms: number): void } {
  let offset = 0;
  return { now: () => new Date(Date.now() + offset), advance: (ms) => (offset += ms) };
}

/** The local runtime against the shared DynamoDB Local, in a fresh folder and table, with short waits. */
export async function testRuntime(
  opts: Partial<LocalRuntimeOptions> = {},
): Promise<LocalRuntime & { dataDir: string; table: string }> {
  const dataDir = opts.dataDir ?? tempDir();
  const table = opts.table ?? uniqueTable();
  const rt = await startLocalRuntime({
    dataDir,
    dynamoEndpoint: inject("dynamoEndpoint"),
    table,
    waitMs: 100,
    schedulerIntervalMs: 60_000,
    ...opts,
  });
  return { ...rt, dataDir, table };
}

export interface LabOptions {
  name: string;
  lab?: string;
  count?: number;
  timeoutMinutes?: number;
  extraLab?: string;
  ttlHours?: number;
  /** lab.concurrency (default 4). */
  concurrency?: number;
}

/** workshop.yaml text for a fixture lab in tests/fixtures/labs/<lab>. */
export function workshopYaml(o: LabOptions): string {
  return `name: ${o.name}
lab:
  source: ${join(fixturesDir, "labs", o.lab ?? "quick")}
  setup: bash setup.sh
  health: test -f built
  concurrency: ${o.concurrency ?? 4}
  timeout_minutes: ${o.timeoutMinutes ?? 5}
${o.extraLab ?? ""}provider:
  type: local
  count: ${o.count ?? 3}
  ttl_hours: ${o.ttlHours ?? 6}
`;
}

export async function waitFor<T>(
  what: string,
  fn: () => Promise<T | undefined> | T | undefined,
  timeoutMs = 30_000,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v as T;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline)
      throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ""}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Processes whose command line or working folder lies inside `dir` (stray lab processes). */
export function processesUnder(dir: string): number[] {
  const found: number[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmd = readFileSync(`/proc/${entry}/cmdline`, "utf8");
      const environ = readFileSync(`/proc/${entry}/environ`, "utf8");
      if (cmd.includes(dir) || environ.includes(`HOME=${dir}`)) found.push(Number(entry));
    } catch {
      // gone, or not ours to read
    }
  }
  return found;
}

/**
 * The instructor API of a runtime, as its tests call it: `api(path)` GETs `/api/workshops{path}`, `api(path, body)`
 * POSTs the body as JSON, both with the runtime's bearer token; the answer's status and parsed JSON.
 */
export function workshopsApi(rt: { url: string; token: string }) {
  // biome-ignore lint/suspicious/noExplicitAny: each test checks the fields it reads
  return async (path: string, body?: unknown): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${rt.url}/api/workshops${path}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, body: await res.json() };
  };
}

/**
 * Waits up to `timeoutMs` for every process running in `dir` to end (a lab's wrapper can outlive its run by its
 * last push, a few seconds), then ends what is still there and returns those pids: `[]` when all ended by themselves.
 */
export async function processesLeftUnder(dir: string, timeoutMs = 15_000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs;
  let left = processesUnder(dir);
  while (left.length && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 100));
    left = processesUnder(dir);
  }
  for (const pid of left) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // ended meanwhile
    }
  }
  return left;
}

/** The DynamoDB Local processes running inside `dir` (a runtime's data folder). */
export function javaOn(dir: string): number[] {
  return processesUnder(dir).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("DynamoDBLocal.jar");
    } catch {
      return false;
    }
  });
}

export function writeFile(dir: string, name: string, text: string): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
}

export function removeDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * The pid a lab's wrapper wrote to `pidFile`, once its own process group exists: the pid is written as the
 * wrapper starts, and `kill(-pid)` finds no group (ESRCH) until setsid has run in it.
 */
export function wrapperGroup(pidFile: string): Promise<number> {
  return waitFor("the lab wrapper's own process group", () => {
    const pid = existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8")) : Number.NaN;
    if (!Number.isInteger(pid) || !existsSync(`/proc/${pid}/stat`)) return undefined;
    // /proc/PID/stat: "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ")".
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    return Number(fields[2]) === pid ? pid : undefined;
  });
}
