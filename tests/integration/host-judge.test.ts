import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { LabProbe } from "../../shared/fleet/lab.ts";
import { judgeHost, type LabReading, markSetupStarted } from "../../shared/fleet/up.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * A push and a poll may read one lab at nearly the same time, and the older reading may be judged last
 * (judgeHost in shared/fleet/up.ts). The older one must then write nothing: a lab that became ready keeps its
 * phases and state, whatever a reading taken while it still built says. Nor does a deploy's "started" mark
 * (markSetupStarted) hide a phase a push wrote before it.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const WS = "judge";

const reading = (probe: Partial<LabProbe>, healthExit?: number): LabReading => ({
  probe: async () => ({ alive: true, started: true, statusLines: [], logTail: [], ...probe }),
  health: async () =>
    healthExit === undefined ? undefined : { exitCode: healthExit, stdout: "", stderr: "" },
  access: async () => undefined,
});
const line = (phase: string, state: string) => JSON.stringify({ phase, state });

beforeAll(async () => {
  rt = await testRuntime();
  await withActor({ type: "instructor", id: "test" }, () =>
    submitWorkshop(workshopYaml({ name: WS, count: 1 })),
  );
  const now = new Date().toISOString();
  await rt.store.host
    .put({
      workshop: WS,
      hostId: "student-01",
      state: "deploying",
      provider: "local",
      createdAt: now,
      updatedAt: now,
    })
    .go();
});
afterAll(async () => {
  await rt.close();
  removeDir(rt.dataDir);
});

describe("judging a lab from a reading", () => {
  it("lets a reading older than the lab's move to ready change nothing", async () => {
    const spec = (await rt.store.workshop.get({ name: WS }).go()).data?.spec as Workshop;
    const before = (await rt.store.host.get({ workshop: WS, hostId: "student-01" }).go()).data;
    if (!before) throw new Error("no host record");
    // Two readings of the same record: one while it built (one phase running), one after setup and health.
    const done = [line("fetch", "done"), line("build", "done"), line("verify", "done")];
    const ready = await judgeHost(
      spec,
      before,
      reading({ alive: false, rc: 0, rcAgeSeconds: 1, statusLines: done }, 0),
    );
    expect(ready).toMatchObject({ state: "ready", changed: true });
    const stale = await judgeHost(spec, before, reading({ statusLines: [line("fetch", "running")] }));
    expect(stale).toEqual({ state: "ready", changed: false });
    const stalerHealth = await judgeHost(
      spec,
      before,
      reading({ alive: false, rc: 0, rcAgeSeconds: 1, statusLines: done }, 1),
    );
    expect(stalerHealth.state).toBe("ready");
    const after = (await rt.store.host.get({ workshop: WS, hostId: "student-01" }).go()).data;
    expect(after?.state).toBe("ready");
    expect(after?.phases?.map((p) => `${p.name}:${p.state}`)).toEqual([
      "fetch:done",
      "build:done",
      "verify:done",
    ]);
    expect(after?.phase).not.toBe("health");
    // The change answers the record it wrote: what the event and the build's time are made from, unread.
    expect(ready.record).toEqual(after);
  });

  it("shows a started setup as started, unless a push already wrote the lab's own phase or its readiness", async () => {
    const spec = (await rt.store.workshop.get({ name: WS }).go()).data?.spec as Workshop;
    const now = new Date().toISOString();
    const put = (hostId: string) =>
      rt.store.host
        .put({
          workshop: WS,
          hostId,
          state: "deploying",
          phase: "sync",
          provider: "local",
          createdAt: now,
          updatedAt: now,
        })
        .go();
    const phaseOf = async (hostId: string) =>
      (await rt.store.host.get({ workshop: WS, hostId }).go()).data?.phase;

    // nothing read from the lab since the deploy wrote its sync: started
    await put("student-02");
    await markSetupStarted(WS, "student-02");
    expect(await phaseOf("student-02")).toBe("started");

    // the wrapper pushed the setup's first phase before the deploy marked it started: the phase stays
    await put("student-03");
    const host = (await rt.store.host.get({ workshop: WS, hostId: "student-03" }).go()).data;
    if (!host) throw new Error("no host record");
    await judgeHost(spec, host, reading({ statusLines: [line("download", "running")] }));
    await markSetupStarted(WS, "student-03");
    expect(await phaseOf("student-03")).toBe("download");

    // an instant lab already judged ready (it reported no phase): it stays ready, its phase not made "started"
    await put("student-04");
    const instant = (await rt.store.host.get({ workshop: WS, hostId: "student-04" }).go()).data;
    if (!instant) throw new Error("no host record");
    await judgeHost(spec, instant, reading({ alive: false, rc: 0, rcAgeSeconds: 1 }, 0));
    await markSetupStarted(WS, "student-04");
    const after = (await rt.store.host.get({ workshop: WS, hostId: "student-04" }).go()).data;
    expect(after?.state).toBe("ready");
    expect(after?.phase).not.toBe("started");
  });
});
