import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ScanCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CheckReport } from "../../shared/fleet/check.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { getPortal } from "../../shared/portal/portal.ts";
import { runCli } from "../harness/cli.ts";
import { type FixtureRepo, makeFixtureRepo } from "../harness/git-http.ts";
import { fixturesDir, processesUnder, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";

/**
 * Stages of up (`--only`/`--skip`: provision, deploy, wait, publish) and check mode (`--check` on up, deploy and
 * retry) on the local runtime, through the real CLI: each selection runs exactly its stages, the run records
 * them, and a check reports per host and stage what would happen while changing nothing at all.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let repo: FixtureRepo;
let env: Record<string, string>;
let file: string;
const WS = "stg";
const ADA = { name: "Ada Lovelace", email: "ada@example.test", pin: "503917" };

const yaml = (name: string, ref = "main") => `name: ${name}
lab:
  source: git:file://${repo.dir}
  ref: ${ref}
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 5
portal:
  enabled: true
provider:
  type: local
  count: 2
`;
const cli = (...args: string[]) => runCli(args, { env, cwd: work });
const writeYaml = (name: string, ref?: string) => {
  const f = join(work, `${name}-${ref ?? "main"}.yaml`);
  writeFileSync(f, yaml(name, ref));
  return f;
};
const runsOf = async (ws: string) =>
  (await rt.store.run.query.byWorkshop({ workshop: ws }).go({ pages: "all" })).data;
const hostsOf = async (ws: string) =>
  (await rt.store.host.query.byWorkshop({ workshop: ws }).go({ pages: "all" })).data;
const workshopOf = async (ws: string) => (await rt.store.workshop.get({ name: ws }).go()).data;
const idle = async () => {
  await rt.executor.idle();
  await waitFor("the workshop to be idle", async () => {
    const w = await workshopOf(WS);
    return w && !w.activeRunId ? true : undefined;
  });
};
const check = async (...args: string[]): Promise<{ code: number | null; report: CheckReport }> => {
  const r = await cli(...args, "--check", "--output", "json");
  expect(r.stderr).toBe("");
  return { code: r.code, report: JSON.parse(r.stdout) as CheckReport };
};
const actions = (report: CheckReport, stage: string) =>
  Object.fromEntries(report.items.filter((i) => i.stage === stage).map((i) => [i.hostId, i.action]));
const detailOf = (report: CheckReport, stage: string, hostId: string) =>
  report.items.find((i) => i.stage === stage && i.hostId === hostId)?.detail;

/** Every item of the table, and every file under the hosts' folder with its content: what a check must not change. */
async function snapshot(): Promise<{ items: string; files: string }> {
  const items = (await rt.store.doc.send(new ScanCommand({ TableName: rt.table }))).Items ?? [];
  const sorted = items.map((i) => JSON.stringify(i, Object.keys(i).sort())).sort();
  const files: string[] = [];
  const walk = (dir: string) => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const st = statSync(p);
      if (st.isDirectory()) walk(p);
      else files.push(`${p} ${st.mtimeMs} ${createHash("sha256").update(readFileSync(p)).digest("hex")}`);
    }
  };
  walk(join(rt.dataDir, "hosts"));
  return { items: sorted.join("\n"), files: files.join("\n") };
}

beforeAll(async () => {
  work = tempDir("labfleet-stages-");
  repo = makeFixtureRepo({ from: join(fixturesDir, "labs", "quick") });
  // No scheduler or health pass runs during the tests: a check is compared with the store before and after.
  rt = await testRuntime({
    dataDir: join(work, ".labfleet"),
    labfleetHome: join(work, "home"),
    schedulerIntervalMs: 3_600_000,
  });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  file = writeYaml(WS);
});
afterAll(async () => {
  await rt?.close();
  repo?.remove();
  if (work) removeDir(work);
});

describe("stage names", () => {
  it("an unknown stage exits 1 naming the option and the allowed stages, before anything is submitted", async () => {
    for (const [flag, value] of [
      ["--only", "build"],
      ["--skip", "wait,later"],
    ] as const) {
      const r = await cli("up", "-f", file, flag, value);
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(`${flag}: unknown stage`);
      expect(r.stderr).toContain("expected one of: provision, deploy, wait, publish");
      expect(r.stderr).toContain(flag.slice(2));
    }
    // In check mode 2 means "would change": usage errors exit 1 there, as every other error does.
    for (const args of [
      ["up", "--check"],
      ["up", "-f", file, "--check", "--bogus"],
      ["retry", WS, "--check", "--failed-only", "--all-selected"],
    ]) {
      const r = await cli(...args);
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(1);
      expect(r.stdout).toBe("");
    }
    expect((await cli("up")).code).toBe(2); // a usage error outside check mode keeps its code
    const none = await cli("up", "-f", file, "--skip", "provision,deploy,wait,publish");
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("leaves no stage to run");
    expect(await workshopOf(WS)).toBeNull();
  });

  it("the API answers 400 with the field path", async () => {
    await cli("workshops"); // the runtime answers
    const submit = await cli("submit", "-f", file);
    expect(submit.code, submit.stderr).toBe(0);
    for (const route of ["up", "deploy", "retry", "check"]) {
      const res = await fetch(`${rt.url}/api/workshops/${WS}/${route}`, {
        method: "POST",
        headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
        body: JSON.stringify({ ...(route === "check" ? { command: "up" } : {}), skip: ["wait", "build"] }),
      });
      expect(res.status, route).toBe(400);
      const body = (await res.json()) as { error: { details: { path: string; message: string }[] } };
      expect(body.error.details).toContainEqual({
        path: "skip[1]",
        message: "expected one of: provision, deploy, wait, publish",
      });
    }
    expect(await runsOf(WS)).toEqual([]);
  });
});

describe("stages and check mode, one workshop through its life", () => {
  it("--only deploy on a workshop never provisioned is refused, naming the missing stage; nothing starts", async () => {
    const r = await cli("up", "-f", file, "--only", "deploy");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("the provision stage has not run for student-01, student-02");
    expect(await runsOf(WS)).toEqual([]);
    const c = await cli("up", "-f", file, "--only", "deploy,wait", "--check");
    expect(c.code).toBe(1);
    expect(c.stderr).toContain("the provision stage has not run");
  });

  it("up --check on a workshop never brought up: everything to create (exit 2), nothing changed", async () => {
    const before = await snapshot();
    const { code, report } = await check("up", "-f", file);
    expect(code).toBe(2);
    expect(report).toMatchObject({ workshop: WS, command: "up", changes: true });
    expect(actions(report, "provision")).toEqual({ "student-01": "create", "student-02": "create" });
    expect(actions(report, "deploy")).toEqual({ "student-01": "create", "student-02": "create" });
    expect(detailOf(report, "deploy", "student-01")).toBe("not built yet");
    expect(actions(report, "wait")).toEqual({ "student-01": "reuse", "student-02": "reuse" });
    expect(actions(report, "publish")).toEqual({ "*": "promote" });
    // The text report says the same, and that nothing was changed.
    const text = await cli("up", "-f", file, "--check");
    expect(text.code).toBe(2);
    expect(text.stdout).toMatch(
      /^check stg \(up\): 4 changes on 2 hosts and 1 to the workshop \(publish\) · nothing was changed$/m,
    );
    expect(text.stdout).toMatch(/^student-01 +deploy +create +not built yet$/m);
    expect(await snapshot()).toEqual(before);
    expect(existsSync(join(rt.dataDir, "hosts", WS))).toBe(false);
  });

  it("--only provision is a provision run: hosts recorded, no lab", async () => {
    const r = await cli("up", "-f", file, "--only", "provision");
    expect(r.code, r.stderr + r.stdout).toBe(0);
    const runs = await runsOf(WS);
    expect(runs.map((x) => [x.kind, x.state])).toEqual([["provision", "succeeded"]]);
    expect((await hostsOf(WS)).map((h) => h.state)).toEqual(["pending", "pending"]);
  });

  it("--skip publish builds every lab and hands none out: the portal stays shut, the workshop deploying", async () => {
    const r = await cli("up", "-f", file, "--skip", "provision,publish");
    expect(r.code, r.stderr + r.stdout).toBe(0);
    const run = (await runsOf(WS)).find((x) => x.kind === "up");
    expect(run).toMatchObject({ state: "succeeded", stages: ["deploy", "wait"] });
    const hosts = await hostsOf(WS);
    expect(hosts.map((h) => [h.state, h.ref])).toEqual([
      ["ready", "main"],
      ["ready", "main"],
    ]);
    expect((await workshopOf(WS))?.state).toBe("deploying");
    expect(await getPortal(WS)).toBeUndefined();
    // The status the CLI shows names the stages the run went through.
    const s = await cli("status", WS, "--output", "json");
    expect(JSON.parse(s.stdout).runs[0]).toMatchObject({ kind: "up", stages: ["deploy", "wait"] });
  });

  it("up --check then says only publish would change; --only publish opens the portal and rebuilds nothing", async () => {
    const { code, report } = await check("up", "-f", file);
    expect(code).toBe(2);
    expect(report.items.filter((i) => i.action !== "reuse")).toEqual([
      expect.objectContaining({ hostId: "*", stage: "publish", action: "promote" }),
    ]);
    const started = new Map((await hostsOf(WS)).map((h) => [h.hostId, h.deployStartedAt]));
    const r = await cli("up", "-f", file, "--only", "publish");
    expect(r.code, r.stderr + r.stdout).toBe(0);
    const run = (await runsOf(WS)).filter((x) => x.kind === "up").at(-1);
    // BeginUp, ProvisionStage, RecordedHosts, AfterProvision, FinishUp.
    expect(run).toMatchObject({ state: "succeeded", stages: ["publish"], transitions: 5 });
    expect((await workshopOf(WS))?.state).toBe("ready");
    expect((await getPortal(WS))?.state).toBe("open");
    for (const h of await hostsOf(WS)) expect(h.deployStartedAt).toBe(started.get(h.hostId));
  });

  it("up --check on a ready workshop: nothing to change (exit 0)", async () => {
    const { code, report } = await check("up", "-f", file);
    expect(code).toBe(0);
    expect(report.changes).toBe(false);
    expect(new Set(report.items.map((i) => i.action))).toEqual(new Set(["reuse"]));
    expect(report.items.map((i) => i.stage)).toEqual([
      "provision",
      "provision",
      "deploy",
      "deploy",
      "wait",
      "wait",
      "publish",
    ]);
    const text = await cli("up", "-f", file, "--check");
    expect(text.code).toBe(0);
    expect(text.stdout).toContain("check stg (up): nothing would change · nothing was changed");
  });

  it("a ref change: up reuses the labs unless --force, which rebuilds them (exit 2); deploy --ref the same", async () => {
    const feature = writeYaml(WS, "feature");
    const plain = await check("up", "-f", feature);
    expect(plain.code).toBe(0);
    expect(detailOf(plain.report, "deploy", "student-01")).toBe(
      "ready, built at main, asked for feature: --force rebuilds it",
    );
    const forced = await check("up", "-f", feature, "--force");
    expect(forced.code).toBe(2);
    expect(actions(forced.report, "deploy")).toEqual({ "student-01": "rebuild", "student-02": "rebuild" });
    expect(detailOf(forced.report, "deploy", "student-02")).toBe("built at main, asked for feature");
    const deploy = await check(
      "deploy",
      WS,
      "--ref",
      "feature",
      "--force",
      "--host",
      "student-02",
      "--skip",
      "wait",
    );
    expect(deploy.code).toBe(2);
    expect(deploy.report.items.map((i) => [i.hostId, i.stage, i.action])).toEqual([
      ["student-02", "provision", "reuse"],
      ["student-02", "deploy", "rebuild"],
      ["*", "publish", "promote"],
    ]);
    // The file was not submitted by the check: the workshop still says main.
    expect((await workshopOf(WS))?.spec).toMatchObject({ lab: { ref: "main" } });
  });

  it("a claimed lab is skipped without --force, rebuilt with it; none of the checks changed anything", async () => {
    expect((await claimLab(WS, ADA, "127.0.0.1")).lab).toBe("student-01");
    // A lab's wrapper goes on after its lab is ready (health for its own push, then it removes that output).
    const hosts = join(rt.dataDir, "hosts");
    await waitFor("every lab wrapper to end", () => processesUnder(hosts).length === 0);
    const before = await snapshot();
    const retry = await check("retry", WS, "--all-selected");
    expect(retry.code).toBe(2);
    expect(actions(retry.report, "deploy")).toEqual({ "student-01": "skip", "student-02": "rebuild" });
    expect(detailOf(retry.report, "deploy", "student-01")).toBe("claimed by Ada Lovelace (needs --force)");
    expect(actions(retry.report, "wait")).toEqual({ "student-01": "skip", "student-02": "reuse" });
    const forced = await check("retry", WS, "--all-selected", "--force");
    expect(detailOf(forced.report, "deploy", "student-01")).toBe(
      "ready: rebuilt (--force); claimed by Ada Lovelace: rebuilt under them",
    );
    const deploy = await check("deploy", WS, "--ref", "feature");
    expect(deploy.code).toBe(0);
    // Failed labs: retry rebuilds them (exit 2); a retry with none failed has nothing to do (exit 0).
    expect((await check("retry", WS)).code).toBe(0);
    await check("up", "-f", writeYaml(WS, "feature"), "--force", "--only", "deploy");
    expect(await snapshot()).toEqual(before);
  });

  it("--skip wait deploys and ends without waiting: the lab stays building until a run that waits", async () => {
    const r = await cli("deploy", WS, "--host", "student-02", "--force", "--skip", "wait");
    expect(r.code, r.stderr + r.stdout).toBe(0);
    expect(r.stdout).toContain("--only wait,publish` waits for them and hands them out");
    const run = (await runsOf(WS)).filter((x) => x.kind === "deploy").at(-1);
    expect(run).toMatchObject({ state: "succeeded", stages: ["provision", "deploy", "publish"] });
    await idle();
    // No run polls it: the host record stays as the deploy left it, whatever its setup has done since.
    const h2 = (await hostsOf(WS)).find((h) => h.hostId === "student-02");
    expect(h2?.state).toBe("deploying");
    const { report } = await check("up", "-f", file, "--only", "wait");
    expect(detailOf(report, "wait", "student-02")).toMatch(/^polled until lab.health passes/);
    const w = await cli("up", "-f", file, "--only", "wait,publish");
    expect(w.code, w.stderr + w.stdout).toBe(0);
    expect((await hostsOf(WS)).map((h) => h.state)).toEqual(["ready", "ready"]);
    expect((await workshopOf(WS))?.state).toBe("ready");
  });
});
