import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startRun } from "../../shared/fleet/runs.ts";
import { listHosts, submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import {
  processesUnder,
  removeDir,
  tempDir,
  testRuntime,
  uniqueTable,
  waitFor,
  workshopYaml,
} from "../harness/runtime.ts";

/**
 * A forced run (`up --force`) interrupted after some of its labs were rebuilt, resumed by the next start of
 * the local runtime: force applies once per host per run. The `counted` lab appends `start` and `done` to
 * `$HOME/builds` on each build, and build N of a host ends only once the test writes `$HOME/go.N`.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
const open: Runtime[] = [];
const folders: string[] = [];
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);
const HOSTS = ["student-01", "student-02", "student-03"] as const;

afterAll(async () => {
  for (const rt of open) await rt.close().catch(() => undefined);
  for (const dir of folders) {
    expect(processesUnder(dir)).toEqual([]);
    removeDir(dir);
  }
});

async function start(dataDir: string, table: string, stopLabsOnClose: boolean): Promise<Runtime> {
  const rt = await testRuntime({ dataDir, table, stopLabsOnClose });
  open.push(rt);
  return rt;
}

async function close(rt: Runtime): Promise<void> {
  await rt.close();
  open.splice(open.indexOf(rt), 1);
}

/** Runs a forced up on three ready labs, stops the runtime once two of them are rebuilt, starts it again. */
async function interruptedForcedRun(name: string, stopLabsOnClose: boolean) {
  const dataDir = tempDir();
  const table = uniqueTable();
  folders.push(dataDir);
  const home = (h: string) => join(dataDir, "hosts", name, h);
  const lines = (h: string) => {
    const f = join(home(h), "builds");
    return existsSync(f) ? readFileSync(f, "utf8").split("\n") : [];
  };
  const starts = (h: string) => lines(h).filter((l) => l === "start").length;
  const builds = (h: string) => lines(h).filter((l) => l === "done").length;
  const go = (h: string, n: number) => writeFileSync(join(home(h), `go.${n}`), "");
  const hosts = async () => Object.fromEntries((await listHosts(name)).map((h) => [h.hostId, h]));
  const pidOf = (h: string) => Number(readFileSync(join(home(h), ".labfleet", name, "pid"), "utf8"));

  let rt = await start(dataDir, table, stopLabsOnClose);
  for (const h of HOSTS) {
    mkdirSync(home(h), { recursive: true });
    go(h, 1);
  }
  await asInstructor(() => submitWorkshop(workshopYaml({ name, lab: "counted", count: 3 })));
  await asInstructor(() => startRun(name, "up"));
  await rt.executor.idle();
  expect(Object.values(await hosts()).map((h) => h.state)).toEqual(["ready", "ready", "ready"]);

  const run = await asInstructor(() => startRun(name, "up", { force: true }));
  await waitFor(
    "every lab to start its second build",
    () => HOSTS.every((h) => starts(h) === 2) || undefined,
  );
  go("student-01", 2);
  go("student-02", 2);
  await waitFor("two labs rebuilt and ready, the third still building", async () => {
    const s = await hosts();
    return s["student-01"]?.state === "ready" &&
      s["student-02"]?.state === "ready" &&
      s["student-03"]?.state === "deploying" &&
      s["student-03"]?.phase === "build-2"
      ? true
      : undefined;
  });
  const rebuilt = await hosts();
  const building = pidOf("student-03");
  await close(rt);
  // Closing with stopLabsOnClose stops the setup still building; otherwise it goes on, detached.
  expect(processesUnder(home("student-03")).length > 0).toBe(!stopLabsOnClose);

  const resumedAt = new Date().toISOString();
  rt = await start(dataDir, table, stopLabsOnClose);
  expect(rt.resumed).toEqual([run.runId]);
  // The resumed run has decided what to do with the third lab once it has written its record; only then
  // may its build end, so a setup that is followed is seen running.
  await waitFor("the resumed run to reach the third lab", async () => {
    const h = (await hosts())["student-03"];
    return h && h.updatedAt > resumedAt ? true : undefined;
  });
  // Whatever the resumed run starts can end, so a wrong rebuild shows in the counts instead of hanging.
  for (const h of HOSTS) {
    go(h, 2);
    go(h, 3);
  }
  await rt.executor.idle();
  const status = await asInstructor(() => workshopStatus(name));
  expect(status.runs.find((r) => r.id === run.runId)?.state).toBe("succeeded");
  expect(status.hostList.map((h) => h.state)).toEqual(["ready", "ready", "ready"]);
  const after = await hosts();
  // The labs this run had already rebuilt stayed as they were: not built a third time.
  for (const h of ["student-01", "student-02"]) {
    expect([starts(h), builds(h)], h).toEqual([2, 2]);
    expect(after[h]?.attempt, h).toBe(rebuilt[h]?.attempt);
    expect(after[h]?.readyAt, h).toBe(rebuilt[h]?.readyAt);
  }
  return {
    rt,
    starts,
    builds,
    building,
    pidOf,
    attempts: [rebuilt["student-03"]?.attempt, after["student-03"]?.attempt],
  };
}

describe("a resumed forced run", () => {
  it("keeps the labs it rebuilt and follows a setup still running (the runtime was killed)", async () => {
    const r = await interruptedForcedRun("forcekeep", false);
    // The third lab's setup went on while no runtime ran; the resumed run followed it to its end.
    expect([r.starts("student-03"), r.builds("student-03")]).toEqual([2, 2]);
    expect(r.pidOf("student-03")).toBe(r.building);
    expect(r.attempts[1]).toBe(r.attempts[0]);
    await asInstructor(() => startRun("forcekeep", "teardown"));
    await r.rt.executor.idle();
  }, 120_000);

  it("rebuilds only the setups the runtime stopped when it closed (Ctrl-C)", async () => {
    const r = await interruptedForcedRun("forcestop", true);
    // The setup stopped mid-build is built again, once; the labs whose rebuild had finished are not.
    expect([r.starts("student-03"), r.builds("student-03")]).toEqual([3, 2]);
    expect(r.pidOf("student-03")).not.toBe(r.building);
    expect(r.attempts[1]).toBe((r.attempts[0] ?? 0) + 1);
    await asInstructor(() => startRun("forcestop", "teardown"));
    await r.rt.executor.idle();
  }, 120_000);
});
