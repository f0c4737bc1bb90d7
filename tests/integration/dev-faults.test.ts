import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { runCli, startCli } from "../harness/cli.ts";
import { javaOn, removeDir, tempDir, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The real `labfleet dev`, each with its own DynamoDB Local under its data folder: it outlives DynamoDB Local
 * being killed (and the CLI says the store is unreachable meanwhile), and a second `labfleet dev` on a folder in
 * use refuses at once, while one on the folder of a runtime killed with -9 takes it over.
 */
const work = tempDir("labfleet-devfaults-");
const started: ReturnType<typeof startCli>[] = [];

afterAll(async () => {
  for (const s of started) {
    if (s.child.exitCode !== null || s.child.signalCode !== null) continue;
    s.child.kill("SIGINT");
    await Promise.race([s.exited, new Promise((r) => setTimeout(r, 20_000))]);
    if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill("SIGKILL");
  }
  for (const pid of javaOn(work)) process.kill(pid, "SIGKILL");
  removeDir(work);
});

function runtimeInfo(dataDir: string): { url: string; token: string; pid: number } | undefined {
  const f = join(dataDir, "runtime.json");
  try {
    return existsSync(f) ? JSON.parse(readFileSync(f, "utf8")) : undefined;
  } catch {
    return undefined; // being written
  }
}

async function health(url: string): Promise<{ status: number; body: unknown } | undefined> {
  const res = await fetch(`${url}/api/health`, { signal: AbortSignal.timeout(10_000) }).catch(
    () => undefined,
  );
  return res ? { status: res.status, body: await res.json() } : undefined;
}

describe("labfleet dev when DynamoDB Local dies", () => {
  it("keeps serving, says the store is unreachable meanwhile, and finishes the up once it is back", async () => {
    const dataDir = join(work, "outage", ".labfleet");
    writeFileSync(join(work, "outage.yaml"), workshopYaml({ name: "devout", lab: "slow", count: 2 }));
    const env = { LABFLEET_WAIT_MS: "200", LABFLEET_DYNAMODB_RESTART_MS: "6000" };
    const dev = startCli(["dev", "-f", join(work, "outage.yaml"), "--data-dir", dataDir, "--port", "0"], {
      cwd: work,
      env,
    });
    started.push(dev);
    const info = await waitFor("the runtime", () => runtimeInfo(dataDir), 60_000);
    await waitFor(
      "a lab building",
      () => {
        const f = join(dataDir, "hosts", "devout", "student-01", ".labfleet", "devout", "status.jsonl");
        return existsSync(f) && readFileSync(f, "utf8").includes('"phase":"one"') ? true : undefined;
      },
      60_000,
    );
    const java = Number(readFileSync(join(dataDir, "dynamodb.pid"), "utf8"));
    process.kill(java, "SIGKILL");

    // Another command meanwhile: one plain line, exit 3.
    const cli = await waitFor(
      "the CLI to say the store is unreachable",
      async () => {
        const r = await runCli(["workshops"], { cwd: work, env: { LABFLEET_DATA_DIR: dataDir } });
        return r.code === 3 ? r : undefined;
      },
      6000, // the supervisor's pause before it restarts DynamoDB Local
    );
    expect(cli.stderr).toMatch(/^labfleet: the store is unreachable[^\n]*\n$/);
    expect(cli.stdout).toBe("");
    expect((await health(info.url))?.status).toBe(503);

    await waitFor(
      "health ok again",
      async () => ((await health(info.url))?.status === 200 ? true : undefined),
      90_000,
    );
    expect(dev.child.exitCode).toBeNull();
    expect(runtimeInfo(dataDir)?.pid).toBe(dev.child.pid);
    await waitFor(
      "the up to be followed to its end",
      () => dev.out.stdout.includes("labs ready") || undefined,
      90_000,
    );
    expect(dev.out.stdout).toContain("still following run");
    expect(dev.out.stdout).toContain("up succeeded");
    expect(dev.out.stdout).toContain("2/2 labs ready");
    const listed = await runCli(["workshops"], { cwd: work, env: { LABFLEET_DATA_DIR: dataDir } });
    expect(listed.code).toBe(0);
    expect(listed.stdout).toContain("devout");

    dev.child.kill("SIGINT");
    expect(await dev.exited).toBe(0);
    expect(dev.out.stderr).not.toMatch(/unexpected error|Unhandled|ElectroError/);
    expect(existsSync(join(dataDir, "runtime.json"))).toBe(false);
    expect(existsSync(join(dataDir, "runtime.lock"))).toBe(false);
    expect(javaOn(dataDir)).toEqual([]);
  }, 240_000);
});

describe("one labfleet dev per data folder", () => {
  it("refuses a second start with the first one's pid and URL, and takes over from one killed with -9", async () => {
    const dataDir = join(work, "two", ".labfleet");
    const first = startCli(["dev", "--data-dir", dataDir, "--port", "0"], { cwd: work });
    started.push(first);
    const info = await waitFor("the first runtime", () => runtimeInfo(dataDir), 60_000);
    await waitFor("the first runtime's banner", () => first.out.stdout.includes("Press Ctrl-C") || undefined);
    const java = javaOn(dataDir);
    expect(java).toHaveLength(1);

    const second = startCli(["dev", "--data-dir", dataDir, "--port", "0"], { cwd: work });
    started.push(second);
    // At once: before it starts a DynamoDB Local of its own or serves anything.
    const refused = await waitFor(
      "the second start to exit",
      () => second.child.exitCode ?? undefined,
      20_000,
    );
    expect(refused).toBe(2);
    expect(second.out.stderr).toBe(
      `labfleet: labfleet dev is already running on ${dataDir} (pid ${first.child.pid}, ${info.url}): use that one, stop it first, or choose another folder with --data-dir\n`,
    );
    expect(second.out.stdout).toBe("");
    // Nothing of the first was touched: same DynamoDB Local, same runtime.json, still serving.
    expect(javaOn(dataDir)).toEqual(java);
    expect(runtimeInfo(dataDir)).toEqual(info);
    expect(await health(info.url)).toEqual({ status: 200, body: { ok: true, store: "ok" } });
    const listed = await runCli(["workshops"], { cwd: work, env: { LABFLEET_DATA_DIR: dataDir } });
    expect(listed.code).toBe(0);
    expect(first.child.exitCode).toBeNull();

    // Killed with -9, the first leaves its lock, runtime.json and DynamoDB Local behind: the next start takes over.
    first.child.kill("SIGKILL");
    await first.exited;
    expect(existsSync(join(dataDir, "runtime.lock"))).toBe(true);
    const third = startCli(["dev", "--data-dir", dataDir, "--port", "0"], { cwd: work });
    started.push(third);
    const info3 = await waitFor(
      "the third runtime",
      () => {
        const i = runtimeInfo(dataDir);
        return i && i.pid === third.child.pid ? i : undefined;
      },
      60_000,
    );
    expect(await health(info3.url)).toEqual({ status: 200, body: { ok: true, store: "ok" } });
    expect(javaOn(dataDir)).not.toContain(java[0]); // the stale DynamoDB Local was ended
    expect(javaOn(dataDir)).toHaveLength(1);
    expect(JSON.parse(readFileSync(join(dataDir, "runtime.lock"), "utf8"))).toMatchObject({
      pid: third.child.pid,
      url: info3.url,
    });

    await waitFor("the third runtime's banner", () => third.out.stdout.includes("Press Ctrl-C") || undefined);
    third.child.kill("SIGINT");
    expect(await third.exited).toBe(0);
    expect(existsSync(join(dataDir, "runtime.lock"))).toBe(false);
    expect(javaOn(dataDir)).toEqual([]);
  }, 240_000);
});
