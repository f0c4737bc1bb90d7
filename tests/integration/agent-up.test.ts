import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execCommand } from "../../shared/fleet/exec-jobs.ts";
import { doctor } from "../../shared/fleet/ops.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import { claimLab, labForLink } from "../../shared/portal/claims.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { enrolledFleet } from "../harness/agents.ts";
import { fixturesDir, processesUnder, removeDir, testRuntime, waitFor } from "../harness/runtime.ts";

/**
 * A whole `up` on enrolled hosts: real agent processes, each in its own temporary HOME, calling in to the local
 * runtime on 127.0.0.1; deploy, poll, ready, publish, claim; then exec and doctor over the agent transport, and a
 * teardown after which each agent forgets the workshop.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: Awaited<ReturnType<typeof enrolledFleet>>;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

const yaml = `name: byod
lab:
  source: ${join(fixturesDir, "labs", "quick")}
  setup: bash setup.sh
  health: test -f built
  concurrency: 4
  timeout_minutes: 5
  requires:
    commands: [bash, tar]
provider:
  type: enrolled
  expected: 2
portal:
  enabled: true
`;

beforeAll(async () => {
  rt = await testRuntime();
  await asInstructor(() => submitWorkshop(yaml));
  fleet = await enrolledFleet({ url: rt.url, workshop: "byod", names: ["lab-pc", "lab-pc"] });
});
afterAll(async () => {
  await fleet?.stop();
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("up on enrolled hosts", () => {
  it("deploys, polls and publishes the labs of the machines that joined, and a student claims one", async () => {
    expect(fleet.agents.map((a) => a.hostId)).toEqual(["lab-pc", "lab-pc-2"]);
    const run = await asInstructor(() => startRun("byod", "up"));
    await rt.executor.idle();
    const status = await asInstructor(() => workshopStatus("byod"));
    expect(status.runs.find((r) => r.id === run.runId)?.state).toBe("succeeded");
    expect(status.state).toBe("ready");
    expect(status.hostList.map((h) => [h.id, h.state])).toEqual([
      ["lab-pc", "ready"],
      ["lab-pc-2", "ready"],
    ]);
    // The lab was built in each agent's own home.
    for (const a of fleet.agents) {
      const built = await asInstructor(() =>
        execCommand("byod", { command: "test -f lab/built && echo yes", hosts: [a.hostId] }),
      );
      expect(built.hosts[0]).toMatchObject({ host: a.hostId, exitCode: 0 });
    }
    // The host records kept what enrollment gave them.
    const host = (await rt.store.host.get({ workshop: "byod", hostId: "lab-pc" }).go()).data;
    expect(host).toMatchObject({ provider: "enrolled", enrollment: "approved", reachable: "online" });
    const claim = await claimLab(
      "byod",
      { name: "Ada", email: "ada@example.test", pin: "503917" },
      "10.9.0.1",
    );
    expect(claim.lab).toBe("lab-pc");
    const page = await labForLink(claim.token);
    expect(page?.lab).toBe("lab-pc");
  });

  it("runs doctor over the agent transport", async () => {
    const reports = await asInstructor(() => doctor("byod"));
    expect(reports.map((r) => [r.host, r.ok])).toEqual([
      ["lab-pc", true],
      ["lab-pc-2", true],
    ]);
    expect(reports[0]?.checks.find((c) => c.name === "command:tar")).toMatchObject({ ok: true });
  });

  it("tears down: each agent is told to forget the workshop and stops", async () => {
    await asInstructor(() => startRun("byod", "teardown"));
    await rt.executor.idle();
    for (const a of fleet.agents) {
      await waitFor("the agent to forget the workshop", () => a.child.exitCode === 0, 30_000);
      expect(a.output()).toContain("byod was torn down: forgot it");
      // Its secret is gone: only the mark that tells its agent to forget stays.
      const kept = (await rt.store.hostSecret.get({ workshop: "byod", hostId: a.hostId }).go()).data;
      expect(kept?.current).toBeUndefined();
      expect(kept?.forgottenAt).toEqual(expect.any(String));
      // Nothing of the lab runs on the machine after its teardown.
      expect(processesUnder(a.home)).toEqual([]);
    }
  });
});
