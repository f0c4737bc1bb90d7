import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { controlHost } from "../../shared/agent/host-controls.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { enrolledFleet } from "../harness/agents.ts";
import { fixturesDir, removeDir, testRuntime } from "../harness/runtime.ts";

/**
 * A drained enrolled host with a live agent: `up` leaves it out (nothing is sent to it, its lab is not built, the run
 * does not wait for it) while the other host is deployed and claimed, and it takes no claim; enabled again, it is
 * deployed by the scheduler's next pass.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: Awaited<ReturnType<typeof enrolledFleet>>;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

const yaml = `name: drn
lab:
  source: ${join(fixturesDir, "labs", "quick")}
  setup: bash setup.sh
  health: test -f built
  concurrency: 4
  timeout_minutes: 5
provider:
  type: enrolled
  expected: 2
portal:
  enabled: true
`;

async function claim(email: string): Promise<string> {
  try {
    return (await claimLab("drn", { name: "Ada", email, pin: "503917" }, "10.9.0.8")).lab;
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
}

beforeAll(async () => {
  rt = await testRuntime();
  await asInstructor(() => submitWorkshop(yaml));
  fleet = await enrolledFleet({ url: rt.url, workshop: "drn", names: ["pc", "pc"] });
});
afterAll(async () => {
  await fleet?.stop();
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("a drained enrolled host", () => {
  it("is left out of up and gets no claim; enabled again, it is deployed and claimable", async () => {
    const [kept, drained] = fleet.agents;
    if (!kept || !drained) throw new Error("two agents expected");
    expect([kept.hostId, drained.hostId]).toEqual(["pc", "pc-2"]);
    await asInstructor(() => controlHost("drn", drained.hostId, "drain"));

    const run = await asInstructor(() => startRun("drn", "up"));
    await rt.executor.idle();
    const status = await asInstructor(() => workshopStatus("drn"));
    const r = status.runs.find((x) => x.id === run.runId);
    expect(r?.state).toBe("succeeded");
    expect(Object.keys(r?.hosts ?? {})).not.toContain(drained.hostId);
    expect(status.hostList.map((h) => [h.id, h.state, h.drained])).toEqual([
      ["pc", "ready", false],
      ["pc-2", "pending", true],
    ]);
    // Nothing of the lab reached the drained machine: no lab folder, no state folder of the workshop.
    expect(existsSync(join(kept.home, "lab", "built"))).toBe(true);
    expect(existsSync(join(drained.home, "lab"))).toBe(false);
    expect(existsSync(join(drained.home, ".labfleet", "drn"))).toBe(false);

    // The workshop's labs are the hosts in service: it is ready, and its portal opened.
    expect(status.state).toBe("ready");
    expect(await claim("one@example.test")).toBe(kept.hostId);
    expect(await claim("two@example.test")).toBe("portal.no_lab_free");

    // Enabled again, it is deployed by the scheduler's next pass, and its lab is claimable.
    await asInstructor(() => controlHost("drn", drained.hostId, "enable"));
    await rt.tick();
    await rt.executor.idle();
    const after = await asInstructor(() => workshopStatus("drn"));
    expect(after.hostList.map((h) => [h.id, h.state, h.drained])).toEqual([
      ["pc", "ready", false],
      ["pc-2", "ready", false],
    ]);
    expect(existsSync(join(drained.home, "lab", "built"))).toBe(true);
    expect(await claim("two@example.test")).toBe(drained.hostId);
  }, 180_000);
});
