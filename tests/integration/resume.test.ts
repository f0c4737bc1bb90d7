import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startCli } from "../harness/cli.ts";
import { processesUnder, removeDir, tempDir, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The real `labfleet dev`, with its own DynamoDB Local persisted under .labfleet/: killed with SIGKILL
 * mid-run, started again, it resumes the same run and finishes it.
 */
const work = tempDir("labfleet-resume-");
const dataDir = join(work, ".labfleet");
const started: ReturnType<typeof startCli>[] = [];

afterAll(async () => {
  // A failed test may leave a runtime up: stop it as Ctrl-C would, then end any DynamoDB Local our
  // runtimes started under this test's folder (a SIGKILLed runtime leaves its own behind).
  for (const s of started) {
    if (s.child.exitCode !== null || s.child.signalCode !== null) continue;
    s.child.kill("SIGINT");
    await Promise.race([s.exited, new Promise((r) => setTimeout(r, 20_000))]);
    if (s.child.exitCode === null && s.child.signalCode === null) s.child.kill("SIGKILL");
  }
  for (const pid of javaFor(work)) process.kill(pid, "SIGKILL");
  removeDir(work);
});

function runtimeInfo(): { url: string; token: string; pid: number } | undefined {
  const f = join(dataDir, "runtime.json");
  return existsSync(f) ? JSON.parse(readFileSync(f, "utf8")) : undefined;
}

async function status(info: { url: string; token: string }) {
  const res = await fetch(`${info.url}/api/workshops/resume`, {
    headers: { authorization: `Bearer ${info.token}` },
    signal: AbortSignal.timeout(10_000), // a stuck request is retried by waitFor, not waited for forever
  }).catch(() => undefined);
  return res?.ok
    ? ((await res.json()) as {
        state: string;
        hostList: { id: string; state: string; phase: string | null }[];
        runs: { id: string; state: string; kind: string; transitions: number }[];
      })
    : undefined;
}

function javaFor(dbPath: string): number[] {
  return processesUnder(dbPath).filter((pid) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("DynamoDBLocal.jar");
    } catch {
      return false;
    }
  });
}

describe("a killed runtime resumes its run", () => {
  it("finishes the run it was in the middle of, without restarting labs", async () => {
    writeFileSync(join(work, "workshop.yaml"), workshopYaml({ name: "resume", lab: "slow", count: 2 }));
    const env = { LABFLEET_WAIT_MS: "200" };
    const first = startCli(["dev", "-f", join(work, "workshop.yaml"), "--data-dir", dataDir, "--port", "0"], {
      cwd: work,
      env,
    });
    started.push(first);

    const info1 = await waitFor("the first runtime", () => runtimeInfo(), 60_000);
    const mid = await waitFor(
      "a lab in its second phase",
      async () => {
        const s = await status(info1);
        return s?.hostList.some((h) => h.state === "deploying" && (h.phase === "two" || h.phase === "three"))
          ? s
          : undefined;
      },
      60_000,
    );
    const runId = mid.runs[0]?.id;
    expect(mid.runs[0]?.state).toBe("running");
    const oldJava = javaFor(join(dataDir, "dynamodb"));
    expect(oldJava).toHaveLength(1);

    first.child.kill("SIGKILL");
    await first.exited;

    const second = startCli(["dev", "--data-dir", dataDir, "--port", "0"], { cwd: work, env });
    started.push(second);
    const info2 = await waitFor(
      "the second runtime",
      () => {
        const i = runtimeInfo();
        return i && i.pid === second.child.pid ? i : undefined;
      },
      60_000,
    );
    await waitFor(
      "the second runtime's banner",
      () => second.out.stdout.includes("resumed 1 unfinished run(s)") || undefined,
    );
    expect(second.out.stdout).toContain("resumed 1 unfinished run(s)");
    // The DynamoDB Local the killed runtime left behind was ended, and a new one serves the same data.
    expect(javaFor(join(dataDir, "dynamodb"))).not.toContain(oldJava[0]);

    const done = await waitFor(
      "the resumed run to end",
      async () => {
        const s = await status(info2);
        return s && s.runs.find((r) => r.id === runId)?.state !== "running" ? s : undefined;
      },
      60_000,
    );
    expect(done.runs.map((r) => [r.kind, r.state])).toEqual([["up", "succeeded"]]);
    expect(done.runs[0]?.id).toBe(runId);
    expect(done.hostList.map((h) => h.state)).toEqual(["ready", "ready"]);
    // Each lab built once: the resumed run found them running and did not start them again.
    for (const h of ["student-01", "student-02"]) {
      const phases = readFileSync(
        join(dataDir, "hosts", "resume", h, ".labfleet", "resume", "status.jsonl"),
        "utf8",
      );
      expect(phases.match(/"phase":"one","state":"running"/g)).toHaveLength(1);
    }

    second.child.kill("SIGINT");
    expect(await second.exited).toBe(0);
    expect(second.out.stdout).toContain("stopped");
    expect(existsSync(join(dataDir, "runtime.json"))).toBe(false);
    expect(javaFor(join(dataDir, "dynamodb"))).toEqual([]);
    expect(processesUnder(join(dataDir, "hosts"))).toEqual([]);
  }, 180_000); // two runtimes, each starting its own DynamoDB Local, on a machine busy with other suites

  it("Ctrl-C stops cleanly, stopping labs mid-build; the next start rebuilds them and finishes", async () => {
    const dir = join(work, "pause");
    const pauseData = join(dir, ".labfleet");
    writeFileSync(join(work, "pause.yaml"), workshopYaml({ name: "pause", lab: "slow", count: 1 }));
    const env = { LABFLEET_WAIT_MS: "200" };
    const first = startCli(["dev", "-f", join(work, "pause.yaml"), "--data-dir", pauseData, "--port", "0"], {
      cwd: work,
      env,
    });
    started.push(first);
    await waitFor(
      "the lab to be building",
      () => {
        const f = join(pauseData, "hosts", "pause", "student-01", ".labfleet", "pause", "status.jsonl");
        return existsSync(f) && readFileSync(f, "utf8").includes('"phase":"one"') ? true : undefined;
      },
      60_000,
    );
    first.child.kill("SIGINT");
    expect(await first.exited).toBe(0);
    expect(first.out.stdout).toContain("stopping (labs still building on local hosts are stopped");
    expect(processesUnder(pauseData)).toEqual([]);
    expect(javaFor(join(pauseData, "dynamodb"))).toEqual([]);

    const second = startCli(["dev", "--data-dir", pauseData, "--port", "0"], { cwd: work, env });
    started.push(second);
    await waitFor(
      "the second runtime's banner",
      () => second.out.stdout.includes("resumed 1 unfinished run(s)") || undefined,
      60_000,
    );
    expect(second.out.stdout).toContain("resumed 1 unfinished run(s)");
    const info = JSON.parse(readFileSync(join(pauseData, "runtime.json"), "utf8"));
    const done = await waitFor(
      "the resumed run to end",
      async () => {
        const res = await fetch(`${info.url}/api/workshops/pause`, {
          headers: { authorization: `Bearer ${info.token}` },
          signal: AbortSignal.timeout(10_000), // a stuck request is retried, not waited for forever
        }).catch(() => undefined);
        if (!res?.ok) return undefined;
        const s = (await res.json()) as { hostList: { state: string }[]; runs: { state: string }[] };
        return s.runs[0]?.state !== "running" ? s : undefined;
      },
      60_000,
    );
    expect(done.runs.map((r) => r.state)).toEqual(["succeeded"]);
    expect(done.hostList.map((h) => h.state)).toEqual(["ready"]);
    second.child.kill("SIGINT");
    expect(await second.exited).toBe(0);
    expect(processesUnder(pauseData)).toEqual([]);
  }, 180_000); // two runtimes, each starting its own DynamoDB Local, on a machine busy with other suites
});
