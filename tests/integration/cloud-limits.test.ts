import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";
import { tempDir, waitFor } from "../harness/runtime.ts";

/**
 * Lambda's limits on the AWS double: a new account's concurrency (10), and functions whose timeouts are
 * shortened here so that a function that would overrun its timeout in AWS (300 s for Poll with 64 silent hosts)
 * overruns it in seconds. Step Functions' retries keep their proportions (timeScale).
 */

const TIMEOUT_MS = 30_000;
let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud({
    concurrencyLimit: 10,
    timeoutMs: { Poll: TIMEOUT_MS, FailUnfinished: TIMEOUT_MS, Deprovision: TIMEOUT_MS, Api: 20_000 },
    timing: { waitMs: 200, timeScale: 0.02 },
  });
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

/** The most invocations of one function that overlapped in time. */
function peakConcurrency(fn: string): number {
  const spans = cloud.account.lambda.invocations
    .filter((i) => i.functionName === cloud.account.deployed.functionName(fn as never))
    .flatMap((i) => [
      [i.start, 1],
      [i.end, -1],
    ])
    .sort((a, b) => (a[0] as number) - (b[0] as number) || (a[1] as number) - (b[1] as number));
  let now = 0;
  let peak = 0;
  for (const [, d] of spans) {
    now += d as number;
    peak = Math.max(peak, now);
  }
  return peak;
}

describe("a new account's Lambda concurrency", { timeout: 240_000 }, () => {
  it("deploys 12 hosts with lab.concurrency 12 on an account that runs 10 invocations at once", async () => {
    const W = "new-account";
    const yaml = awsWorkshopYaml({
      name: W,
      source: cloud.lab("quick"),
      count: 12,
      extraLab: "concurrency: 12",
    });
    expect((await cloud.api("", { yaml })).status).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    expect(started.status).toBe(202);
    const run = await cloud.runToEnd(W, started.body.run.id, 180_000);
    expect(run.state, JSON.stringify(run)).toBe("succeeded");
    // BeginUp read the account's concurrency and deployed at most half of it at once.
    expect(peakConcurrency("DeployHost")).toBeLessThanOrEqual(5);
    expect(cloud.account.lambda.invocations.filter((i) => i.outcome !== "ok")).toEqual([]);
  });
});

describe("functions end well inside their timeouts", { timeout: 240_000 }, () => {
  const W = "silent";

  it("polls of hosts whose SSM agents went silent end in time; the hosts are read again when they answer", async () => {
    const aws = cloud.account;
    const yaml = awsWorkshopYaml({
      name: W,
      source: cloud.lab("quick"),
      count: 8,
      setup: "sleep 900",
      timeoutMinutes: 30,
    });
    expect((await cloud.api("", { yaml })).status).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    await waitFor(
      "every lab started",
      async () =>
        (await cloud.api(`/${W}`)).body.hostList?.filter((h: { phase?: string }) => h.phase === "started")
          .length === 8,
      120_000,
    );
    const hosts = (await cloud.api(`/${W}`)).body.hostList as { address: string }[];
    for (const h of hosts) aws.ssm.setAgentOnline(h.address, false);
    const polls = () =>
      aws.lambda.invocations.filter((i) => i.functionName === aws.deployed.functionName("Poll"));
    const before = polls().length;
    await waitFor("two polls of the silent hosts", () => polls().length >= before + 2, 120_000);
    for (const p of polls().slice(before)) {
      expect(p.outcome).toBe("ok");
      expect(p.durationMs).toBeLessThan(TIMEOUT_MS * 0.75);
    }
    const s = (await cloud.api(`/${W}`)).body;
    expect(s.hostList.every((h: { state: string }) => h.state === "deploying")).toBe(true);
    expect(s.hostList[0].error).toMatch(/^last poll: /);
    const { run } = (await cloud.api(`/${W}/runs/${started.body.run.id}`)).body;
    expect(run.state).toBe("running");
    // Back online: the next polls read every host again, and the error goes.
    for (const h of hosts) aws.ssm.setAgentOnline(h.address, true);
    await waitFor(
      "every host read again",
      async () =>
        (await cloud.api(`/${W}`)).body.hostList?.every((h: { error: unknown }) => h.error === null),
      90_000,
    );
  });

  it("a teardown of the silent hosts terminates them without waiting for any of them", async () => {
    const aws = cloud.account;
    const res = await cloud.api(`/${W}/teardown`, {});
    expect(res.status).toBe(202);
    const run = await cloud.runToEnd(W, res.body.run.id, 120_000);
    expect(run.state, JSON.stringify(run)).toBe("succeeded");
    const deprovisions = aws.lambda.invocations.filter(
      (i) => i.functionName === aws.deployed.functionName("Deprovision"),
    );
    expect(deprovisions.map((d) => d.outcome)).toEqual(["ok"]);
    expect(deprovisions[0]?.durationMs).toBeLessThan(TIMEOUT_MS / 2);
  });

  it("diagnose of hosts with long logs answers within the Api's timeout, saying what it could not read", async () => {
    const D = "long-logs";
    const yaml = awsWorkshopYaml({
      name: D,
      source: cloud.lab("quick"),
      count: 2,
      setup: "head -c 450000 /dev/urandom | base64 -w 200; exit 3",
    });
    expect((await cloud.api("", { yaml })).status).toBe(201);
    const started = await cloud.api(`/${D}/up`, {});
    expect((await cloud.runToEnd(D, started.body.run.id, 120_000)).state).toBe("failed");
    // As `labfleet diagnose` does: ask for parts until there is no next one, extract each into one folder.
    const out = tempDir("labfleet-diagnose-");
    let parts = 0;
    let from: string | undefined;
    let name: string | undefined;
    do {
      const t0 = Date.now();
      const res = await cloud.api(`/${D}/diagnose`, from ? { from, name } : {});
      expect(res.status, String(res.body)).toBe(200);
      expect(Date.now() - t0).toBeLessThan(20_000);
      name ??= res.headers.get("x-labfleet-diagnose-name") ?? undefined;
      from = res.headers.get("x-labfleet-diagnose-next") ?? undefined;
      writeFileSync(join(out, "part.tar"), gunzipSync(res.body as Buffer));
      execFileSync("tar", ["-xf", join(out, "part.tar"), "-C", out]);
      parts++;
    } while (from && parts < 5);
    expect(from).toBeUndefined();
    for (const hostId of ["student-01", "student-02"]) {
      const summary = JSON.parse(readFileSync(join(out, name as string, hostId, "summary.json"), "utf8"));
      expect(summary).toMatchObject({ host: hostId, state: "failed" });
      // What the time allowed, with why the rest is missing.
      const log = summary.collected["lab.log.tail"];
      if (!log.complete)
        expect(log.error).toMatch(/diagnose spends at most \d+ s on a host|time this step may take ran out/);
    }
    expect(cloud.account.lambda.invocations.filter((i) => i.outcome === "Sandbox.Timedout")).toEqual([]);
  });
});
