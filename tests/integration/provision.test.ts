import { existsSync, mkdirSync, readdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listEvents } from "../../shared/fleet/events.ts";
import { extendWorkshop } from "../../shared/fleet/extend.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { listHosts, submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import type { Provider, ProvisionOptions } from "../../shared/providers/types.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { configure, useDeps } from "../../shared/runtime/deps.ts";
import { createID } from "../../shared/runtime/ids.ts";
import type { HostItem } from "../../shared/store/entities.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { runCli } from "../harness/cli.ts";
import {
  fixturesDir,
  processesUnder,
  removeDir,
  tempDir,
  testRuntime,
  workshopYaml,
} from "../harness/runtime.ts";

/**
 * `labfleet provision` and `POST /api/workshops/NAME/provision` on the local runtime: a `provision` run is the
 * up workflow up to the recorded hosts. The hosts exist (local: their folders) and are `pending`, the TTL
 * teardown is armed, and no lab runs anywhere until a later `up` deploys them.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();

beforeAll(async () => {
  work = tempDir("labfleet-provision-");
  // An operator folder of its own: no secrets.yaml, whatever the machine running the tests has.
  rt = await testRuntime({ dataDir: join(work, ".labfleet"), labfleetHome: join(work, "home") });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
});
afterAll(async () => {
  await rt?.close();
  if (work) {
    expect(processesUnder(work)).toEqual([]);
    removeDir(work);
  }
});

const hostDir = (ws: string, id: string) => rt.provider.hostDir(ws, id);

/** Nothing of a lab on the host: no synced source, no lab state folder, no wrapper pid. */
function expectNoLab(ws: string, id: string) {
  const dir = hostDir(ws, id);
  expect(existsSync(dir), dir).toBe(true);
  expect(statSync(dir).mode & 0o777).toBe(0o700);
  expect(readdirSync(dir), dir).toEqual([]);
  expect(existsSync(join(dir, ".labfleet", ws)), `${dir}: lab state folder`).toBe(false);
  expect(existsSync(join(dir, ".labfleet", ws, "pid")), `${dir}: wrapper pid`).toBe(false);
  expect(existsSync(join(dir, "lab")), `${dir}: lab source`).toBe(false);
}

const api = (method: string, path: string, body?: string) =>
  fetch(`${rt.url}/api/workshops${path}`, {
    method,
    headers: {
      authorization: `Bearer ${rt.token}`,
      ...(body === undefined ? {} : { "content-type": "application/json" }),
    },
    ...(body === undefined ? {} : { body }),
  });

const schedule = async (ws: string) =>
  (await rt.store.schedule.get({ workshop: ws, kind: "teardown" }).go()).data;

describe("a provision run", () => {
  it("creates and records the hosts, arms the TTL teardown and deploys nothing", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "prov", count: 3, ttlHours: 4 })));
    const run = await asInstructor(() => startRun("prov", "provision"));
    expect(run).toMatchObject({ kind: "provision", state: "running" });
    await rt.executor.idle();

    const s = await asInstructor(() => workshopStatus("prov"));
    const view = s.runs.find((r) => r.id === run.runId);
    expect(view).toMatchObject({ kind: "provision", state: "succeeded" });
    expect(view?.error).toBeUndefined();
    expect(view?.hosts).toEqual({
      "student-01": { state: "provisioned" },
      "student-02": { state: "provisioned" },
      "student-03": { state: "provisioned" },
    });
    // BeginUp, ProvisionStage, Provision, AfterProvision, FinishUp: no Deploy, no Wait, no Poll.
    expect(view?.transitions).toBe(5);
    // Hosts exist but have no lab: the workshop stays at provisioning, each host pending with its address.
    expect(s.state).toBe("provisioning");
    expect(s.hosts).toEqual({ total: 3, ready: 0, failed: 0 });
    for (const h of s.hostList) {
      expect(h).toMatchObject({ state: "pending", phase: null, phases: [], error: null, hasAccess: false });
      expect(h.address).toBe(hostDir("prov", h.id));
      expect(h.providerId).toBe(`local:prov/${h.id}`);
      expect(h.expiry).toBe(s.expiry);
      expect(h.elapsedSeconds).toBeUndefined();
      expectNoLab("prov", h.id);
    }
    const stored = await listHosts("prov");
    expect(stored.map((h) => [h.hostId, h.attempt, h.deployStartedAt])).toEqual([
      ["student-01", 0, undefined],
      ["student-02", 0, undefined],
      ["student-03", 0, undefined],
    ]);
    expect(processesUnder(join(rt.dataDir, "hosts", "prov"))).toEqual([]);

    // The TTL teardown is armed exactly as up arms it.
    expect(s.expiry).toBeDefined();
    expect(await schedule("prov")).toMatchObject({ state: "pending", at: s.expiry });
    const ttl = Date.parse(s.expiry ?? "") - Date.parse(view?.startedAt ?? "");
    expect(ttl).toBeGreaterThan(4 * 3_600_000 - 60_000);
    expect(ttl).toBeLessThanOrEqual(4 * 3_600_000 + 60_000);

    // The workshop is free again, and the events say what happened.
    expect((await rt.store.workshop.get({ name: "prov" }).go()).data?.activeRunId).toBeUndefined();
    const { events } = await asInstructor(() => listEvents("prov"));
    expect(events.map((e) => [e.type, e.detail])).toEqual([
      ["run.started", { kind: "provision", by: "instructor" }],
      ["run.finished", { kind: "provision", state: "succeeded", by: "labfleet" }],
    ]);
  });

  it("status re-reads nothing of a pending host and shows it as pending", async () => {
    const r = await runCli(["status", "prov"], { env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /^prov: provisioning · 0\/3 ready · \d+ h \d\d min left, torn down at [\d :-]+$/m,
    );
    expect(r.stdout).toMatch(/^student-01\s+pending\s+-$/m);
    expect(r.stdout).toMatch(/^ {2}run_\S+ {2}provision succeeded in \d+ s · 5 state transitions$/m);
    for (const id of ["student-01", "student-02", "student-03"]) expectNoLab("prov", id);
    expect((await listHosts("prov")).every((h) => h.state === "pending")).toBe(true);
  });

  it("provisioning again reuses the hosts and keeps the expiry", async () => {
    const before = await asInstructor(() => workshopStatus("prov"));
    const run = await asInstructor(() => startRun("prov", "provision"));
    await rt.executor.idle();
    const after = await asInstructor(() => workshopStatus("prov"));
    expect(after.runs.find((r) => r.id === run.runId)?.state).toBe("succeeded");
    expect(after.expiry).toBe(before.expiry);
    expect(after.hostList).toEqual(before.hostList.map((h) => ({ ...h })));
    expect((await schedule("prov"))?.at).toBe(before.expiry);
  });

  it("after an extend, hosts are provisioned to end with the workshop (the provider gets the recorded expiry)", async () => {
    const deps = useDeps();
    const local = deps.providers.local as Provider;
    const seen: (string | undefined)[] = [];
    configure({
      ...deps,
      providers: {
        ...deps.providers,
        local: Object.assign(Object.create(local), {
          provision: (spec: Workshop, hostIds?: string[], opts?: ProvisionOptions) => {
            seen.push(opts?.expiry?.toISOString());
            return local.provision(spec, hostIds, opts);
          },
        }),
      },
    });
    try {
      const extended = await asInstructor(() => extendWorkshop("prov", 2));
      await asInstructor(() => startRun("prov", "provision"));
      await rt.executor.idle();
      expect(seen).toEqual([extended.expiry]);
      expect((await asInstructor(() => workshopStatus("prov"))).expiry).toBe(extended.expiry);
    } finally {
      configure(deps);
    }
  });

  it("a later up deploys the provisioned hosts to ready", async () => {
    const before = await asInstructor(() => workshopStatus("prov"));
    const run = await asInstructor(() => startRun("prov", "up"));
    await rt.executor.idle();
    const s = await asInstructor(() => workshopStatus("prov"));
    expect(s.runs.find((r) => r.id === run.runId)).toMatchObject({ kind: "up", state: "succeeded" });
    expect(s.state).toBe("ready");
    expect(s.expiry).toBe(before.expiry);
    for (const h of s.hostList) {
      expect(h).toMatchObject({ state: "ready", hasAccess: true });
      expect(h.address).toBe(hostDir("prov", h.id));
      expect(existsSync(join(hostDir("prov", h.id), "lab", "built"))).toBe(true);
    }
    expect((await listHosts("prov")).map((h) => h.attempt)).toEqual([1, 1, 1]);
  });

  it("a provision of a workshop that is up leaves its labs alone and keeps it ready", async () => {
    const before = await listHosts("prov");
    const run = await asInstructor(() => startRun("prov", "provision"));
    await rt.executor.idle();
    const s = await asInstructor(() => workshopStatus("prov"));
    expect(s.runs.find((r) => r.id === run.runId)?.state).toBe("succeeded");
    expect(s.state).toBe("ready");
    const after = await listHosts("prov");
    expect(after.map((h) => [h.hostId, h.state, h.attempt, h.readyAt])).toEqual(
      before.map((h) => [h.hostId, "ready", 1, h.readyAt]),
    );
  });

  it("writes nothing for a host the provider answers for as before, and only what differs otherwise", async () => {
    const host = async (hostId: string) =>
      (await rt.store.host.get({ workshop: "prov", hostId }).go()).data as HostItem;
    // What a lab's life recorded on student-01: a failing in-use health check, a rollout's notice and its new
    // machine's start; and on student-02 an expiry that is not the workshop's (a record out of date).
    const lived = {
      health: "failing",
      healthFailures: 3,
      healthError: "port 8080 refused",
      healthCheckedAt: "2026-12-06T10:00:00.000Z",
      notice: "updated",
      noticeAt: "2026-12-06T09:00:00.000Z",
      machineCreatedAt: "2026-12-06T08:00:00.000Z",
    } as const;
    await rt.store.host.patch({ workshop: "prov", hostId: "student-01" }).set(lived).go();
    const expiry = (await host("student-01")).expiry as string;
    await rt.store.host
      .patch({ workshop: "prov", hostId: "student-02" })
      .set({ expiry: "2026-12-06T00:00:00.000Z", health: "failing", healthFailures: 2 })
      .go();
    const [one, two] = [await host("student-01"), await host("student-02")];

    await asInstructor(() => startRun("prov", "provision"));
    await rt.executor.idle();

    // student-01: the provider answered as before, so its record is as it was, to the byte.
    expect(await host("student-01")).toEqual(one);
    expect(one).toMatchObject(lived);
    // student-02: its expiry is the workshop's again, and nothing else of it changed but the time of the write.
    const after = await host("student-02");
    expect(after.expiry).toBe(expiry);
    expect(after.updatedAt > two.updatedAt).toBe(true);
    expect({ ...after, expiry: two.expiry, updatedAt: two.updatedAt }).toEqual(two);
    expect(after).toMatchObject({ health: "failing", healthFailures: 2, createdAt: two.createdAt });
  });

  it("needs no operator secret (the up that deploys does), and a teardown removes the hosts", async () => {
    await asInstructor(() =>
      submitWorkshop(
        workshopYaml({ name: "prov-sec", count: 1, extraLab: "  operator_secrets: [API_TOKEN]\n" }),
      ),
    );
    const run = await asInstructor(() => startRun("prov-sec", "provision"));
    await rt.executor.idle();
    const s = await asInstructor(() => workshopStatus("prov-sec"));
    expect(s.runs.find((r) => r.id === run.runId)?.state).toBe("succeeded");
    expectNoLab("prov-sec", "student-01");
    await expect(asInstructor(() => startRun("prov-sec", "up"))).rejects.toThrow(
      "operator secrets missing from the secret store: API_TOKEN",
    );

    const down = await asInstructor(() => startRun("prov-sec", "teardown"));
    await rt.executor.idle();
    const gone = await asInstructor(() => workshopStatus("prov-sec"));
    expect(gone.runs.find((r) => r.id === down.runId)?.state).toBe("succeeded");
    expect(gone.state).toBe("torn_down");
    expect(existsSync(join(rt.dataDir, "hosts", "prov-sec"))).toBe(false);
    expect((await schedule("prov-sec"))?.state).toBe("cancelled");
  });

  it("a second start while one runs returns the running one", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "prov-twice", count: 1 })));
    const [a, b] = await asInstructor(() =>
      Promise.all([startRun("prov-twice", "provision"), startRun("prov-twice", "provision")]),
    );
    expect(b.runId).toBe(a.runId);
    await rt.executor.idle();
    const s = await asInstructor(() => workshopStatus("prov-twice"));
    expect(s.runs.map((r) => [r.id, r.kind, r.state])).toEqual([[a.runId, "provision", "succeeded"]]);
  });

  it("a run resumed after a restart still stops after provisioning (the kind is on the run record)", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "prov-resume", count: 2 })));
    // A run left `running` by a runtime that died before its workflow got anywhere.
    const runId = createID("run");
    const now = new Date().toISOString();
    await rt.store.run
      .create({ workshop: "prov-resume", runId, kind: "provision", state: "running", startedAt: now })
      .go();
    await rt.store.workshop
      .patch({ name: "prov-resume" })
      .set({ activeRunId: runId, lastRunId: runId, updatedAt: now })
      .go();
    const { dataDir, table, token } = rt;
    await rt.close();
    rt = await testRuntime({ dataDir, table, token, labfleetHome: join(work, "home") });
    env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
    expect(rt.resumed).toEqual([runId]);
    await rt.executor.idle();
    const s = await asInstructor(() => workshopStatus("prov-resume"));
    expect(s.runs.find((r) => r.id === runId)).toMatchObject({
      kind: "provision",
      state: "succeeded",
      transitions: 5,
    });
    expect(s.state).toBe("provisioning");
    expect(s.hostList.map((h) => h.state)).toEqual(["pending", "pending"]);
    for (const h of s.hostList) expectNoLab("prov-resume", h.id);
  });
});

describe("POST /api/workshops/NAME/provision", () => {
  it("answers 202 with the provision run", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "prov-api", count: 2 })));
    const empty = await api("POST", "/prov-api/provision");
    expect(empty.status).toBe(202);
    const { run } = await j(empty);
    expect(run).toMatchObject({ kind: "provision", state: "running" });
    expect(run.id).toMatch(/^run_/);
    await rt.executor.idle();
    const got = await j(await api("GET", `/prov-api/runs/${run.id}`));
    expect(got.run).toMatchObject({ id: run.id, kind: "provision", state: "succeeded" });
    const again = await api("POST", "/prov-api/provision", "{}");
    expect(again.status).toBe(202);
    await rt.executor.idle();
    const s = await j(await api("GET", "/prov-api"));
    expect(s.hostList.map((h: { state: string }) => h.state)).toEqual(["pending", "pending"]);
  });

  it("answers 4xx on bad input and changes nothing", async () => {
    const unknownKey = await api("POST", "/prov-api/provision", '{"force": true}');
    expect(unknownKey.status).toBe(400);
    expect((await j(unknownKey)).error.code).toBe("input.invalid");
    const badJson = await api("POST", "/prov-api/provision", "{nope");
    expect(badJson.status).toBe(400);
    expect((await j(badJson)).error.code).toBe("input.bad_json");
    const badName = await api("POST", "/Not_A_Name/provision", "{}");
    expect(badName.status).toBe(400);
    const missing = await api("POST", "/no-such-workshop/provision", "{}");
    expect(missing.status).toBe(404);
    expect((await j(missing)).error.code).toBe("workshop.not_found");
    const noToken = await fetch(`${rt.url}/api/workshops/prov-api/provision`, { method: "POST" });
    expect(noToken.status).toBe(401);
    const s = await j(await api("GET", "/prov-api"));
    expect(s.runs).toHaveLength(2);
  });

  it("is in the OpenAPI document", async () => {
    const doc = await j(
      await fetch(`${rt.url}/api/openapi.json`, { headers: { authorization: `Bearer ${rt.token}` } }),
    );
    const op = doc.paths["/api/workshops/{name}/provision"]?.post;
    expect(op).toBeDefined();
    expect(Object.keys(op.responses).sort()).toEqual(["202", "400", "401", "404", "409"]);
  });
});

describe("labfleet provision", () => {
  it("submits the file, follows the run and prints each host's id and address (exit 0)", async () => {
    const file = join(work, "cli.yaml");
    writeFileSync(file, workshopYaml({ name: "prov-cli", count: 2 }));
    const r = await runCli(["provision", "-f", file], { env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^provision prov-cli: run run_\S+$/);
    expect(lines[1]).toMatch(/^provision succeeded in \d+ s · 5 state transitions$/);
    expect(lines[2]).toMatch(/^host\s+state\s+address$/);
    expect(lines[3]).toBe(`student-01  pending  ${hostDir("prov-cli", "student-01")}`);
    expect(lines[4]).toBe(`student-02  pending  ${hostDir("prov-cli", "student-02")}`);
    expect(lines[5]).toBe(`2 hosts have no lab yet: \`labfleet up -f ${file}\` deploys them`);
    expect(lines[6]).toMatch(/^torn down at [\d :-]+ \(in \d+ h \d\d min\) \(`labfleet extend` moves it\)$/);
    expect(lines).toHaveLength(7);
    for (const id of ["student-01", "student-02"]) expectNoLab("prov-cli", id);
  });

  it("prints one JSON document with --output json", async () => {
    const file = join(work, "cli-json.yaml");
    writeFileSync(file, workshopYaml({ name: "prov-json", count: 1 }));
    const r = await runCli(["provision", "-f", file, "--output", "json"], { env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc).toMatchObject({ workshop: "prov-json", state: "provisioning" });
    expect(doc.expiry).toEqual(expect.any(String));
    expect(doc.hosts).toEqual([
      {
        id: "student-01",
        result: "provisioned",
        state: "pending",
        address: hostDir("prov-json", "student-01"),
        providerId: "local:prov-json/student-01",
        error: null,
      },
    ]);
    expect(doc.run).toMatchObject({ kind: "provision", state: "succeeded", transitions: 5 });
  });

  it("then up deploys the provisioned hosts to ready", async () => {
    const r = await runCli(["up", "-f", join(work, "cli.yaml"), "--output", "json"], { env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.run).toMatchObject({ kind: "up", state: "succeeded" });
    expect(doc.hosts.map((h: { state: string }) => h.state)).toEqual(["ready", "ready"]);
  });

  it("exits 1 with the reason when the hosts cannot be provisioned", async () => {
    const file = join(work, "broken.yaml");
    writeFileSync(file, workshopYaml({ name: "prov-broken", count: 1 }));
    // A file where the workshop's host folders go: the local provider cannot create them.
    mkdirSync(join(rt.dataDir, "hosts"), { recursive: true });
    writeFileSync(join(rt.dataDir, "hosts", "prov-broken"), "not a folder\n");
    const r = await runCli(["provision", "-f", file], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^provision failed in \d+ s · \d+ state transitions$/m);
    const s = await asInstructor(() => workshopStatus("prov-broken"));
    expect(s.state).toBe("failed");
    expect(s.runs[0]).toMatchObject({ kind: "provision", state: "failed" });
    expect(s.runs[0]?.error).toMatch(/EEXIST|ENOTDIR/);
    expect(r.stdout).toContain(`${s.runs[0]?.error}\n`);
    expect(s.hostList).toEqual([]);
    const json = await runCli(["provision", "-f", file, "--output", "json"], { env });
    expect(json.code).toBe(1);
    expect(JSON.parse(json.stdout).run.state).toBe("failed");
  });

  it("exits 1 naming each host that could not be provisioned, with the reason", async () => {
    const file = join(work, "static.yaml");
    writeFileSync(
      file,
      `name: prov-static\nlab: { source: ${join(fixturesDir, "labs", "quick")}, setup: bash setup.sh }\nprovider: { type: static }\nhosts:\n  - { id: byo-01, ssh: "labs@127.0.0.1:1" }\n`,
    );
    const r = await runCli(["provision", "-f", file], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/^provision failed in \d+ s · 5 state transitions$/m);
    expect(r.stdout).toMatch(/^byo-01 failed: .+/m);
    expect(r.stdout).toContain("1 of 1 hosts could not be provisioned");
    const s = await asInstructor(() => workshopStatus("prov-static"));
    expect(s.state).toBe("failed");
    expect(s.hostList[0]).toMatchObject({ id: "byo-01", state: "failed" });
    expect(s.runs[0]?.hosts?.["byo-01"]?.state).toBe("failed");
  });

  it("usage errors exit 2, an invalid file 1, no runtime 3", async () => {
    const noFile = await runCli(["provision"], { env });
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toContain("provision needs -f workshop.yaml");
    const badOption = await runCli(["provision", "-f", join(work, "cli.yaml"), "--nope"], { env });
    expect(badOption.code).toBe(2);
    const bad = join(work, "bad.yaml");
    writeFileSync(
      bad,
      "name: BAD\nlab:\n  source: ./lab\n  setup: ''\nprovider:\n  type: local\n  count: 0\n",
    );
    const invalid = await runCli(["provision", "-f", bad], { env });
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toContain("is not valid");
    const down = await runCli(["provision", "-f", join(work, "cli.yaml")], {
      env: { LABFLEET_URL: "http://127.0.0.1:9", LABFLEET_TOKEN: "x" },
    });
    expect(down.code).toBe(3);
  });

  it("--plan prints the plan and changes nothing", async () => {
    const file = join(work, "plan.yaml");
    writeFileSync(file, workshopYaml({ name: "prov-plan", count: 2 }));
    const r = await runCli(["provision", "-f", file, "--plan"], { env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(
      "plan prov-plan (local): 2 to create, 0 to reuse, 0 unchanged · nothing was changed",
    );
    expect(r.stdout).toMatch(/^student-01 +create/m);
    const json = await runCli(["provision", "-f", file, "--plan", "--output", "json"], { env });
    expect(JSON.parse(json.stdout).items.map((i: { action: string }) => i.action)).toEqual([
      "create",
      "create",
    ]);
    expect((await api("GET", "/prov-plan")).status).toBe(404);
    expect(existsSync(join(rt.dataDir, "hosts", "prov-plan"))).toBe(false);
    // On a provisioned workshop the plan says reuse, and still changes nothing.
    const reuse = await runCli(["provision", "-f", join(work, "cli.yaml"), "--plan"], { env });
    expect(reuse.stdout).toContain("0 to create, 2 to reuse");
    const s = await j(await api("GET", "/prov-cli"));
    expect(s.runs.map((r: { kind: string }) => r.kind)).toEqual(["up", "provision"]);
  });
});
