import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listHosts, listRuns } from "../../shared/fleet/workshops.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { claimOrWait } from "../../shared/portal/waiting.ts";
import type { HostItem } from "../../shared/store/entities.ts";
import { runCli } from "../harness/cli.ts";
import {
  processesLeftUnder,
  removeDir,
  tempDir,
  testRuntime,
  waitFor,
  workshopYaml,
} from "../harness/runtime.ts";

/**
 * Scaling a running workshop up (`labfleet scale NAME --count N`, `POST /api/workshops/{name}/scale`) on the
 * local runtime: the new hosts are provisioned and deployed by a `scale` run, the old ones are untouched
 * (same readyAt, one build, claims kept), the count is recorded on the workshop, the run resumes after a
 * restart, what must be refused is refused with nothing written, and a later `up -f` with the old lower count
 * keeps the hosts. The `counted` lab's build N of a host ends only once the test writes `$HOME/go.N`.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let env: Record<string, string>;
const WS = "grow";
const work = tempDir("labfleet-scale-");
const file = join(work, "workshop.yaml");
const home = (h: string) => join(rt.dataDir, "hosts", WS, h);
const go = (h: string, n: number) => writeFileSync(join(home(h), `go.${n}`), "");
const builds = (h: string) => readFileSync(join(home(h), "builds"), "utf8").match(/start/g)?.length ?? 0;

const api = (path: string, body?: unknown) =>
  fetch(`${rt.url}/api/workshops${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
const scale = (body: unknown, ws = WS) => api(`/${ws}/scale`, body);
const errorOf = async (res: Response) =>
  ((await res.json()) as { error: { code: string; message: string; details: unknown[] } }).error;
const byId = async () => Object.fromEntries((await listHosts(WS)).map((h) => [h.hostId, h]));
const states = async () => Object.fromEntries(Object.entries(await byId()).map(([id, h]) => [id, h.state]));
const storedCount = async () => {
  const w = (await rt.store.workshop.get({ name: WS }).go()).data;
  return (w?.spec as { provider: { count: number } } | undefined)?.provider.count;
};
/** The lab a student (by name) holds. */
const labOf = async (student: string) =>
  (await rt.store.claim.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data.find(
    (c) => c.name === student,
  )?.hostId;
const runEnd = (runId: string) =>
  waitFor(
    `run ${runId} to end`,
    async () => {
      const state = (await rt.store.run.get({ workshop: WS, runId }).go()).data?.state;
      return state && state !== "running" ? state : undefined;
    },
    60_000,
  );
const building = (ids: string[], phase = "build-1") =>
  waitFor(`${ids.join(", ")} to be building`, async () => {
    const h = await byId();
    return ids.every((id) => h[id]?.state === "deploying" && h[id]?.phase === phase) ? true : undefined;
  });

let before: Record<string, HostItem>;

beforeAll(async () => {
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
});
afterAll(async () => {
  await rt?.close();
  if (rt) {
    const left = await processesLeftUnder(rt.dataDir);
    removeDir(rt.dataDir);
    removeDir(work);
    expect(left).toEqual([]);
  }
});

describe("scaling a workshop up", () => {
  it("starts from a workshop of two ready labs, one of them claimed", async () => {
    writeFileSync(file, workshopYaml({ name: WS, lab: "counted", count: 2 }));
    expect((await api("", { yaml: readFileSync(file, "utf8") })).status).toBe(201);
    // Never brought up: nothing to add to.
    const draft = await scale({ count: 4 });
    expect(draft.status).toBe(409);
    expect(await errorOf(draft)).toMatchObject({ code: "scale.not_up" });

    const up = await api(`/${WS}/up`, {});
    const upId = ((await up.json()) as { run: { id: string } }).run.id;
    await building(["student-01", "student-02"]);
    go("student-01", 1);
    go("student-02", 1);
    expect(await runEnd(upId)).toBe("succeeded");
    expect((await api(`/${WS}/portal/open`, {})).status).toBe(200);
    const ada = await claimLab(WS, { name: "Ada", email: "ada@example.test", pin: "503917" }, "127.0.0.1");
    expect(ada.lab).toBe("student-01");
    before = await byId();
  }, 90_000);

  it("refuses bad input, a count that is not more and one above the limit, writing nothing", async () => {
    const runs = (await listRuns(WS)).length;
    for (const [body, message] of [
      [{}, "expected a host count: a whole number from 1 to 500"],
      [{ count: "4" }, "expected a host count: a whole number from 1 to 500"],
      [{ count: 3.5 }, "expected a host count: a whole number from 1 to 500"],
      [{ count: 501 }, "expected a host count: a whole number from 1 to 500"],
    ] as const) {
      const res = await scale(body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const e = await errorOf(res);
      expect(e.details, JSON.stringify(body)).toEqual([{ path: "count", message }]);
    }
    const extra = await scale({ count: 4, hosts: ["x"] });
    expect(extra.status).toBe(400);
    expect(JSON.stringify((await errorOf(extra)).details)).toContain("hosts");

    const fewer = await scale({ count: 1 });
    expect(fewer.status).toBe(400);
    expect(await errorOf(fewer)).toMatchObject({
      code: "scale.not_more",
      message: `workshop ${WS} has 2 hosts: scale only adds hosts; to remove 1 lab nobody claimed, use labfleet down ${WS} --unclaimed 1`,
      details: [{ path: "count", message: "expected more than 2 (the hosts it has now), got 1" }],
    });
    const same = await scale({ count: 2 });
    expect(same.status).toBe(400);
    expect((await errorOf(same)).message).toBe(`workshop ${WS} has 2 hosts already: nothing to add`);

    // The CLI: usage errors exit 2 before anything is sent, the API's refusal exits 1 with its message.
    const noCount = await runCli(["scale", WS], { env });
    expect(noCount.code).toBe(2);
    expect(noCount.stderr).toContain("scale needs --count N");
    const notNumber = await runCli(["scale", WS, "--count", "4x"], { env });
    expect(notNumber.code).toBe(2);
    expect(notNumber.stderr).toContain("--count takes a whole number of hosts, got 4x");
    const smaller = await runCli(["scale", WS, "--count", "1"], { env });
    expect(smaller.code).toBe(1);
    expect(smaller.stderr).toContain(`use labfleet down ${WS} --unclaimed 1`);
    expect(smaller.stderr).toContain("count: expected more than 2");

    expect(await storedCount()).toBe(2);
    expect((await listRuns(WS)).length).toBe(runs);
    expect(await states()).toEqual({ "student-01": "ready", "student-02": "ready" });
  }, 60_000);

  it("refuses a bring-your-own (static) fleet, naming provider.type", async () => {
    const yaml = `${workshopYaml({ name: "byo", lab: "quick" }).replace(/provider:[\s\S]*$/, "")}provider:\n  type: static\nhosts:\n  - id: h1\n    ssh: lab@127.10.0.9\n`;
    expect((await api("", { yaml })).status).toBe(201);
    const res = await scale({ count: 2 }, "byo");
    expect(res.status).toBe(400);
    const e = await errorOf(res);
    expect(e.code).toBe("scale.provider_static");
    expect(e.message).toContain("provider.type static");
    expect(e.details).toEqual([
      { path: "provider.type", message: "expected a provider that creates hosts (local or aws), got static" },
    ]);
  });

  it("adds two hosts with a scale run that resumes after a restart, leaving the old labs as they were", async () => {
    const res = await scale({ count: 4 });
    expect(res.status).toBe(202);
    const answer = (await res.json()) as {
      run: { id: string; kind: string; selection: string[] };
      scale: unknown;
    };
    expect(answer.scale).toEqual({
      workshop: WS,
      from: 2,
      to: 4,
      add: ["student-03", "student-04"],
      waiting: 0,
    });
    expect(answer.run).toMatchObject({ kind: "scale", selection: ["student-03", "student-04"] });
    const runId = answer.run.id;
    // Recorded with the run's start.
    expect(await storedCount()).toBe(4);
    await building(["student-03", "student-04"]);

    // One run at a time: another scale, and an up, are refused naming this run; nothing changes.
    const again = await scale({ count: 6 });
    expect(again.status).toBe(409);
    expect(await errorOf(again)).toMatchObject({
      code: "workshop.busy",
      message: `workshop ${WS} is busy with a scale run (${runId}): wait for it to end (labfleet status ${WS}), then scale; nothing was changed`,
    });
    expect(await storedCount()).toBe(4);
    const up = await api(`/${WS}/up`, {});
    expect(up.status).toBe(409);
    expect((await errorOf(up)).message).toContain(`scale run (${runId})`);

    // The runtime stops mid-run and starts again on the same data: it resumes the run.
    const { dataDir, table } = rt;
    await rt.close();
    rt = await testRuntime({ dataDir, table });
    env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
    expect(rt.resumed).toEqual([runId]);
    go("student-03", 1);
    go("student-04", 1);
    expect(await runEnd(runId)).toBe("succeeded");

    const after = await byId();
    expect(await states()).toEqual({
      "student-01": "ready",
      "student-02": "ready",
      "student-03": "ready",
      "student-04": "ready",
    });
    for (const id of ["student-01", "student-02"]) {
      expect(after[id]?.readyAt, id).toBe(before[id]?.readyAt);
      expect(after[id]?.attempt, id).toBe(before[id]?.attempt);
      expect(builds(id), id).toBe(1);
    }
    // The resumed run followed the setups it had started: each new lab was built once.
    for (const id of ["student-03", "student-04"]) expect(builds(id), id).toBe(1);
    expect(await labOf("Ada")).toBe("student-01");

    const run = (await rt.store.run.get({ workshop: WS, runId }).go()).data;
    expect(run?.hosts).toEqual({ "student-03": { state: "ready" }, "student-04": { state: "ready" } });
    expect((await rt.store.workshop.get({ name: WS }).go()).data?.state).toBe("ready");
    const events = (await rt.store.event.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data.filter(
      (e) => e.runId === runId,
    );
    expect(events.find((e) => e.type === "run.started")?.detail).toEqual({
      by: "bootstrap token",
      kind: "scale",
      from: 2,
      to: 4,
      hosts: ["student-03", "student-04"],
    });
    expect(
      events
        .filter((e) => e.type === "host.ready")
        .map((e) => e.hostId)
        .sort(),
    ).toEqual(["student-03", "student-04"]);

    // The new labs are on the board: the next students get student-02, then a new one.
    const bob = await claimLab(WS, { name: "Bob", email: "bob@example.test", pin: "503918" }, "127.0.0.1");
    const cy = await claimLab(WS, { name: "Cy", email: "cy@example.test", pin: "503919" }, "127.0.0.1");
    expect([bob.lab, cy.lab]).toEqual(["student-02", "student-03"]);
  }, 90_000);

  it("labfleet scale prints what it adds, follows the run and exits 0", async () => {
    const cli = runCli(["scale", WS, "--count", "5"], { env });
    await building(["student-05"]);
    go("student-05", 1);
    const r = await cli;
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split("\n");
    expect(lines[0]).toMatch(
      new RegExp(`^scale ${WS}: adds 1 lab \\(4 → 5\\): student-05 · run run_[0-9A-Z]{26}$`),
    );
    expect(lines.at(-1)).toMatch(/^scale succeeded/);
    expect(await storedCount()).toBe(5);
  }, 60_000);

  it("labfleet scale --output json is one document with what it added", async () => {
    const cli = runCli(["scale", WS, "--count", "6", "--output", "json"], { env });
    await building(["student-06"]);
    go("student-06", 1);
    const r = await cli;
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.scale).toEqual({ workshop: WS, from: 5, to: 6, add: ["student-06"], waiting: 0 });
    expect(doc.run).toMatchObject({ kind: "scale", state: "succeeded", selection: ["student-06"] });
    expect(doc.hosts.map((h: { id: string; state: string }) => [h.id, h.state])).toEqual([
      ["student-06", "ready"],
    ]);
  }, 60_000);

  it("up -f with the file's lower count keeps the hosts and says how to remove labs", async () => {
    const r = await runCli(["up", "-f", file], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(
      `${file} says provider.count 2, but ${WS} has 6 hosts: kept 6, no host removed (up never removes hosts); \`labfleet down ${WS} --unclaimed 4\` removes labs nobody claimed`,
    );
    expect(Object.values(await states())).toEqual(["ready", "ready", "ready", "ready", "ready", "ready"]);
    expect(await storedCount()).toBe(6);
    expect(await labOf("Cy")).toBe("student-03");
    for (const id of ["student-01", "student-03"]) expect(builds(id), id).toBe(1);
  }, 60_000);

  it("brings a lab that down --unclaimed removed back first", async () => {
    const down = await runCli(["down", WS, "--unclaimed", "1"], { env });
    expect(down.code, down.stderr).toBe(0);
    expect(down.stdout).toBe("removed 1 lab: student-06\n");
    expect(existsSync(home("student-06"))).toBe(false);
    const res = await scale({ count: 6 });
    expect(res.status).toBe(202);
    const answer = (await res.json()) as { run: { id: string }; scale: { from: number; add: string[] } };
    expect(answer.scale).toMatchObject({ from: 5, add: ["student-06"] });
    await building(["student-06"]);
    go("student-06", 1);
    expect(await runEnd(answer.run.id)).toBe("succeeded");
    expect((await states())["student-06"]).toBe("ready");
    const w = (await rt.store.workshop.get({ name: WS }).go()).data;
    expect(w?.removedHosts ?? []).toEqual([]);
    expect(await storedCount()).toBe(6);
  }, 60_000);

  it("with students waiting, says so and hands the labs it adds to the first in line", async () => {
    for (const [i, name] of ["Dee", "Eve", "Fay"].entries()) {
      const r = await claimOrWait(
        WS,
        { name, email: `${name.toLowerCase()}@example.test`, pin: `50392${i}` },
        "127.0.0.1",
      );
      expect(r.lab, name).toBeDefined();
    }
    // The room is full: the next two wait, in order.
    const gus = await claimOrWait(WS, { name: "Gus", email: "gus@example.test", pin: "503930" }, "127.0.0.1");
    const hal = await claimOrWait(WS, { name: "Hal", email: "hal@example.test", pin: "503931" }, "127.0.0.1");
    expect([gus.lab, hal.lab]).toEqual([undefined, undefined]);

    const cli = runCli(["scale", WS, "--count", "7"], { env });
    await building(["student-07"]);
    go("student-07", 1);
    const r = await cli;
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("2 students are waiting for a lab\n");
    // The new lab went to the first in line; the second still waits.
    await waitFor("Gus to hold the new lab", async () =>
      (await labOf("Gus")) === "student-07" ? true : undefined,
    );
    expect(await labOf("Hal")).toBeUndefined();
    const status = (await (await api(`/${WS}/portal/status`)).json()) as { waiting: { name: string }[] };
    expect(status.waiting.map((w) => w.name)).toEqual(["Hal"]);
    const down = await api(`/${WS}/portal/scale-down`, { unclaimed: 1 });
    expect(down.status).toBe(409);
    expect(await errorOf(down)).toMatchObject({
      code: "portal.would_take_claimed",
      message:
        "only 0 labs are unclaimed; taking 1 would take claimed labs: add --force to do that; 1 student is waiting for a lab",
    });
  }, 90_000);
});
