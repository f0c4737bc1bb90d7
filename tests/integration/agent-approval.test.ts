import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { approveHosts } from "../../shared/agent/enrollment.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { enrolledFleet } from "../harness/agents.ts";
import { fixturesDir, removeDir, testRuntime, waitFor } from "../harness/runtime.ts";

/**
 * What follows an approval (shared/agent/lifecycle.ts), with real agents: a host approved while its workshop is
 * up is deployed by itself (a deploy run on it alone, no `up` again); one approved while the workshop is busy
 * with another run waits for the scheduler's next pass once the workshop is free.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const WS = "approvals";
const fleets: Awaited<ReturnType<typeof enrolledFleet>>[] = [];
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

const yaml = `name: ${WS}
lab:
  source: ${join(fixturesDir, "labs", "quick")}
  setup: bash setup.sh
  health: test -f built
  concurrency: 4
  timeout_minutes: 5
provider:
  type: enrolled
`;

const host = (hostId: string) => rt.store.host.get({ workshop: WS, hostId }).go({ consistent: true });
const deployRuns = async () =>
  (await asInstructor(() => workshopStatus(WS))).runs.filter((r) => r.kind === "deploy");

async function join1(name: string, enrollment: "approved" | "pending") {
  const f = await enrolledFleet({ url: rt.url, workshop: WS, names: [name], enrollment });
  fleets.push(f);
  return f.agents[0]?.hostId ?? "";
}

beforeAll(async () => {
  rt = await testRuntime();
  await asInstructor(() => submitWorkshop(yaml));
  await join1("first", "approved");
  await asInstructor(() => startRun(WS, "up"));
  await rt.executor.idle();
});
afterAll(async () => {
  for (const f of fleets) await f.stop();
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("after approval", () => {
  it("deploys a host approved while the workshop is up, without another up", async () => {
    expect((await host("first")).data?.state).toBe("ready");
    const late = await join1("late", "pending");
    // Pending: nothing is deployed to it.
    expect(await deployRuns()).toEqual([]);
    expect(await asInstructor(() => approveHosts(WS, [late]))).toEqual([
      { hostId: late, result: "approved" },
    ]);
    await waitFor(
      "the approved host's lab to be ready",
      async () => (await host(late)).data?.state === "ready",
      60_000,
    );
    await rt.executor.idle();
    const runs = await deployRuns();
    expect(runs.map((r) => r.state)).toEqual(["succeeded"]);
    // The host already there was not touched.
    expect((await host("first")).data?.state).toBe("ready");
  });

  it("deploys a host approved while the workshop is busy once it is free, at the scheduler's pass", async () => {
    const later = await join1("later", "pending");
    const busy = await asInstructor(() => startRun(WS, "retry", { hosts: ["first"], force: true }));
    await asInstructor(() => approveHosts(WS, [later]));
    await rt.executor.idle();
    expect((await asInstructor(() => workshopStatus(WS))).runs.find((r) => r.id === busy.runId)?.state).toBe(
      "succeeded",
    );
    // The workshop was busy: the host waits, approved and not deployed.
    expect((await host(later)).data).toMatchObject({ enrollment: "approved", state: "pending" });
    await rt.tick();
    await waitFor(
      "the waiting host's lab to be ready",
      async () => (await host(later)).data?.state === "ready",
      60_000,
    );
    await rt.executor.idle();
    expect((await deployRuns()).map((r) => r.state)).toEqual(["succeeded", "succeeded"]);
  });
});
