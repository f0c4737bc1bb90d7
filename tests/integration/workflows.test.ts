import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { refreshHosts } from "../../shared/fleet/ops.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { listHosts, listRuns, submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { open } from "../../shared/runtime/crypto.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import {
  movableClock,
  processesUnder,
  removeDir,
  testRuntime,
  waitFor,
  workshopYaml,
  wrapperGroup,
} from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const clock = movableClock();
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

const logLines: string[] = [];

beforeAll(async () => {
  setLogSink((line) => logLines.push(line), "debug");
  rt = await testRuntime({ clock });
});
afterAll(async () => {
  await rt?.close();
  // Logs went through every flow above: they carry no lab credentials and no instructor token.
  expect(logLines.length).toBeGreaterThan(20);
  const all = logLines.join("\n");
  expect(all).not.toContain("s3cret");
  expect(all).not.toContain(rt.token);
  if (rt) {
    expect(processesUnder(rt.dataDir)).toEqual([]);
    removeDir(rt.dataDir);
  }
});

async function upAndWait(yaml: string, name: string, force = false) {
  await asInstructor(() => submitWorkshop(yaml));
  const run = await asInstructor(() => startRun(name, "up", { force }));
  await rt.executor.idle();
  const status = await asInstructor(() => workshopStatus(name));
  return { run, status, runView: status.runs.find((r) => r.id === run.runId) };
}

async function down(name: string) {
  const run = await asInstructor(() => startRun(name, "teardown"));
  await rt.executor.idle();
  return asInstructor(() => workshopStatus(name)).then((s) => ({
    s,
    run: s.runs.find((r) => r.id === run.runId),
  }));
}

const hostDir = (ws: string, id: string) => join(rt.dataDir, "hosts", ws, id);

describe("up and teardown on local hosts", () => {
  it("brings 3 hosts to ready with phases, access sealed, and a transition count", async () => {
    const { status, runView } = await upAndWait(workshopYaml({ name: "three" }), "three");
    expect(runView?.state).toBe("succeeded");
    expect(status.state).toBe("ready");
    expect(status.hostList.map((h) => [h.id, h.state])).toEqual([
      ["student-01", "ready"],
      ["student-02", "ready"],
      ["student-03", "ready"],
    ]);
    for (const h of status.hostList) {
      expect(h.phases).toEqual([
        { name: "fetch", state: "done" },
        { name: "build", state: "done" },
        { name: "verify", state: "done" },
      ]);
      expect(h.hasAccess).toBe(true);
      expect(existsSync(join(hostDir("three", h.id), "lab", "built"))).toBe(true);
    }
    // BeginUp, Provision, Deploy, 3 DeployHost, then at least one Wait/Poll/Choice, FinishUp
    expect(runView?.transitions).toBeGreaterThanOrEqual(6 + 3 + 1);
    expect(runView?.hosts).toEqual({
      "student-01": { state: "ready" },
      "student-02": { state: "ready" },
      "student-03": { state: "ready" },
    });

    const stored = await listHosts("three");
    const sealed = stored[0]?.access ?? "";
    expect(sealed).not.toContain("s3cret");
    const key = Buffer.from(readFileSync(join(rt.dataDir, "access.key"), "utf8"), "base64");
    expect(JSON.parse(open(key, sealed))).toEqual({
      urls: { ui: "https://student-01.example.test/" },
      credentials: { password: "s3cret-student-01" },
    });
    expect(status.expiry).toBeDefined();
    expect(stored.every((h) => h.expiry === status.expiry)).toBe(true);
  });

  it("a ready lab keeps the access details read when it became ready: a refresh does not read the file again", async () => {
    const before = (await listHosts("three")).find((h) => h.hostId === "student-01");
    // What a student could do on their host: the file is no longer the JSON the lab wrote.
    writeFileSync(join(hostDir("three", "student-01"), ".labfleet", "three", "access.json"), "not json {");
    const views = await asInstructor(() => refreshHosts("three", { hosts: ["student-01"] }));
    expect(views.map((h) => [h.id, h.state, h.error])).toEqual([["student-01", "ready", null]]);
    const after = (await listHosts("three")).find((h) => h.hostId === "student-01");
    expect(after?.access).toBe(before?.access);
    expect(after?.readyAt).toBe(before?.readyAt);
  });

  it("a refresh writes a ready lab's record only when the reading says something new", async () => {
    const record = async () => (await listHosts("three")).find((h) => h.hostId === "student-02");
    const before = await record();
    clock.advance(60_000);
    await asInstructor(() => refreshHosts("three", { hosts: ["student-02"] }));
    // Unchanged: the record was not rewritten (its time would have moved with the clock).
    expect((await record())?.updatedAt).toBe(before?.updatedAt);

    // The lab reported another phase since: the refresh records it, and the lab stays ready.
    const status = join(hostDir("three", "student-02"), ".labfleet", "three", "status.jsonl");
    writeFileSync(status, `${readFileSync(status, "utf8")}{"phase":"warm caches","state":"done"}\n`);
    clock.advance(60_000);
    await asInstructor(() => refreshHosts("three", { hosts: ["student-02"] }));
    const after = await record();
    expect(after?.updatedAt).not.toBe(before?.updatedAt);
    expect(after?.state).toBe("ready");
    expect(after?.readyAt).toBe(before?.readyAt);
    expect(after?.phases?.map((p) => [p.name, p.state]).at(-1)).toEqual(["warm caches", "done"]);
  });

  it("the local provider plans reuse for existing hosts and creation for new ones", async () => {
    const spec = (await asInstructor(() => workshopStatus("three"))).spec;
    const plan = await rt.provider.plan({ ...spec, provider: { ...spec.provider, type: "local", count: 4 } });
    expect(plan).toEqual([
      { hostId: "student-01", action: "reuse" },
      { hostId: "student-02", action: "reuse" },
      { hostId: "student-03", action: "reuse" },
      { hostId: "student-04", action: "create" },
    ]);
  });

  it("running up again does no duplicate work", async () => {
    const before = await listHosts("three");
    const { status, runView } = await upAndWait(workshopYaml({ name: "three" }), "three");
    expect(runView?.state).toBe("succeeded");
    const after = await listHosts("three");
    expect(after.map((h) => [h.hostId, h.attempt, h.deployStartedAt, h.readyAt])).toEqual(
      before.map((h) => [h.hostId, h.attempt, h.deployStartedAt, h.readyAt]),
    );
    expect(after.every((h) => h.attempt === 1)).toBe(true);
    expect(status.state).toBe("ready");
    // The lab log holds one build per host: setup did not run twice.
    const log = readFileSync(join(hostDir("three", "student-01"), ".labfleet", "three", "log"), "utf8");
    expect(log.match(/quick lab built/g)).toHaveLength(1);
  });

  it("up while an up is running returns the running one", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "twice", count: 1 })));
    const [a, b] = await asInstructor(() => Promise.all([startRun("twice", "up"), startRun("twice", "up")]));
    const c = await asInstructor(() => startRun("twice", "up"));
    expect(b.runId).toBe(a.runId);
    expect(c.runId).toBe(a.runId);
    await rt.executor.idle();
    expect((await listRuns("twice")).map((r) => r.runId)).toEqual([a.runId]);
    const s = await asInstructor(() => workshopStatus("twice"));
    expect(s.hostList.map((h) => h.state)).toEqual(["ready"]);
    expect((await listHosts("twice"))[0]?.attempt).toBe(1);
  });

  it("a failing lab fails only its host, with the reason from its log", async () => {
    const { status, runView } = await upAndWait(workshopYaml({ name: "partial", lab: "fail" }), "partial");
    const byId = Object.fromEntries(status.hostList.map((h) => [h.id, h]));
    expect(byId["student-01"]?.state).toBe("ready");
    expect(byId["student-03"]?.state).toBe("ready");
    expect(byId["student-02"]?.state).toBe("failed");
    expect(byId["student-02"]?.error).toMatch(/setup exited with code 7/);
    expect(byId["student-02"]?.error).toContain("error: mirror unreachable while fetching packages");
    expect(byId["student-02"]?.phases).toEqual([{ name: "fetch", state: "failed" }]);
    expect(runView?.state).toBe("failed");
    expect(runView?.error).toBe("1 of 3 labs are not ready");
    expect(status.state).toBe("failed");
  });

  it("a lab that never finishes fails at the deadline with a clear reason and is stopped", async () => {
    const { status, runView } = await upAndWait(
      workshopYaml({ name: "stuck", lab: "hang", count: 2, timeoutMinutes: 0.03 }),
      "stuck",
    );
    expect(runView?.state).toBe("failed");
    for (const h of status.hostList) {
      expect(h.state).toBe("failed");
      expect(h.error).toMatch(
        /^lab did not become ready within 0\.03 minutes \(deadline .+\); last phase: forever$/,
      );
    }
    await waitFor(
      "hung setups to be stopped",
      () => processesUnder(join(rt.dataDir, "hosts", "stuck")).length === 0 || undefined,
    );
  });

  it("a wrapper that died without an exit code is failed with that reason", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "killed", lab: "hang", count: 1 })));
    await asInstructor(() => startRun("killed", "up"));
    const pidFile = join(hostDir("killed", "student-01"), ".labfleet", "killed", "pid");
    const pid = await wrapperGroup(pidFile);
    process.kill(-pid, "SIGKILL");
    await rt.executor.idle();
    const s = await asInstructor(() => workshopStatus("killed"));
    expect(s.hostList[0]?.state).toBe("failed");
    expect(s.hostList[0]?.error).toMatch(
      new RegExp(`setup wrapper died without an exit code \\(pid ${pid}\\)`),
    );
  });

  it("retries a failed host when up runs again, leaving ready ones alone", async () => {
    const before = Object.fromEntries((await listHosts("partial")).map((h) => [h.hostId, h]));
    await upAndWait(workshopYaml({ name: "partial", lab: "fail" }), "partial");
    const after = Object.fromEntries((await listHosts("partial")).map((h) => [h.hostId, h]));
    expect(after["student-01"]?.attempt).toBe(before["student-01"]?.attempt);
    expect(after["student-02"]?.attempt).toBe((before["student-02"]?.attempt ?? 0) + 1);
    expect(after["student-02"]?.state).toBe("failed");
  });

  it("a lower count in the file keeps the workshop's hosts: up never removes hosts", async () => {
    await upAndWait(workshopYaml({ name: "shrink", count: 3 }), "shrink");
    const submitted = await asInstructor(() => submitWorkshop(workshopYaml({ name: "shrink", count: 1 })));
    expect(submitted).toEqual({ name: "shrink", created: false, countKept: { file: 1, kept: 3 } });
    const { status, runView } = await upAndWait(workshopYaml({ name: "shrink", count: 1 }), "shrink");
    expect(runView?.state).toBe("succeeded");
    expect(status.spec.provider).toMatchObject({ count: 3 });
    expect(status.hostList.map((h) => [h.id, h.state])).toEqual([
      ["student-01", "ready"],
      ["student-02", "ready"],
      ["student-03", "ready"],
    ]);
    expect(status.hosts).toEqual({ total: 3, ready: 3, failed: 0 });
    expect(readdirSync(join(rt.dataDir, "hosts", "shrink"))).toEqual([
      "student-01",
      "student-02",
      "student-03",
    ]);
    // A higher count still adds hosts.
    const more = await upAndWait(workshopYaml({ name: "shrink", count: 4 }), "shrink");
    expect(more.status.hosts).toEqual({ total: 4, ready: 4, failed: 0 });
  });

  it("an access file that is not JSON fails the lab with that reason, without logging it", async () => {
    const { status } = await upAndWait(
      workshopYaml({ name: "badaccess", lab: "badaccess", count: 1 }),
      "badaccess",
    );
    expect(status.hostList[0]?.state).toBe("failed");
    expect(status.hostList[0]?.error).toMatch(/wrote \$LABFLEET_ACCESS, but it is not valid JSON/);
    expect(status.hostList[0]?.error).not.toContain("hunter2");
    expect(logLines.join("\n")).not.toContain("hunter2");
  });

  it("teardown stops labs, removes every host folder and marks the workshop torn down", async () => {
    for (const name of ["three", "partial", "stuck", "twice", "killed", "shrink", "badaccess"]) {
      const { s, run } = await down(name);
      expect(run?.state, name).toBe("succeeded");
      expect(s.state, name).toBe("torn_down");
      expect(
        s.hostList.every((h) => h.state === "torn_down"),
        name,
      ).toBe(true);
      expect(existsSync(join(rt.dataDir, "hosts", name)), name).toBe(false);
      expect((await rt.store.schedule.get({ workshop: name, kind: "teardown" }).go()).data?.state).toBe(
        "cancelled",
      );
    }
    expect(readdirSync(join(rt.dataDir, "hosts"))).toEqual([]);
    expect(processesUnder(join(rt.dataDir, "hosts"))).toEqual([]);
  });

  it("a torn-down workshop can be brought up again", async () => {
    const { status } = await upAndWait(workshopYaml({ name: "three", count: 1 }), "three");
    expect(status.hostList.filter((h) => h.state !== "torn_down").map((h) => h.state)).toEqual(["ready"]);
    await down("three");
  });

  it("a due TTL schedule tears the workshop down", async () => {
    const { status } = await upAndWait(workshopYaml({ name: "ttl", count: 2, ttlHours: 2 }), "ttl");
    expect(status.state).toBe("ready");
    const schedule = (await rt.store.schedule.get({ workshop: "ttl", kind: "teardown" }).go()).data;
    expect(schedule?.state).toBe("pending");
    expect(schedule?.at).toBe(status.expiry);
    expect(Date.parse(schedule?.at ?? "") - Date.parse(status.runs[0]?.startedAt ?? "")).toBeGreaterThan(
      2 * 3_600_000 - 60_000,
    );

    expect(await rt.tick()).toBe(0); // not due yet
    clock.advance(2 * 3_600_000 + 1000);
    expect(await rt.tick()).toBe(1);
    await rt.executor.idle();
    const after = await asInstructor(() => workshopStatus("ttl"));
    expect(after.state).toBe("torn_down");
    expect(after.runs[0]?.kind).toBe("teardown");
    expect(existsSync(join(rt.dataDir, "hosts", "ttl"))).toBe(false);
    expect((await rt.store.schedule.get({ workshop: "ttl", kind: "teardown" }).go()).data?.state).toBe(
      "fired",
    );
  });

  it("fires a schedule that fell due while the runtime was down, at start", async () => {
    const { status } = await upAndWait(workshopYaml({ name: "late", count: 1, ttlHours: 1 }), "late");
    expect(status.state).toBe("ready");
    await rt.close();
    const later = movableClock();
    later.advance(clock.now().getTime() - Date.now() + 3_600_000 + 60_000);
    rt = await testRuntime({ dataDir: rt.dataDir, table: rt.table, clock: later, token: rt.token });
    await rt.executor.idle();
    const after = await asInstructor(() => workshopStatus("late"));
    expect(after.state).toBe("torn_down");
    expect(existsSync(join(rt.dataDir, "hosts", "late"))).toBe(false);
  });
});
