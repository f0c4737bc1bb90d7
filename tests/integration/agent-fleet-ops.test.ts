import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { diagnose, refreshHosts } from "../../shared/fleet/ops.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { enrolledFleet } from "../harness/agents.ts";
import { makeRolloutLab, type RolloutLab } from "../harness/rollout-lab.ts";
import { removeDir, testRuntime, workshopsApi } from "../harness/runtime.ts";

/**
 * What the fleet does beyond deploy and exec, on enrolled hosts (real agents calling in to the local runtime): a
 * status refresh and diagnose over the agent transport, and a rollout, which updates enrolled hosts in place
 * (labfleet cannot make another of a machine that dialled in), the claimed one left alone without
 * includeClaimed. The lab is the rollout lab's git repository (tests/harness/rollout-lab.ts).
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let lab: RolloutLab;
let fleet: Awaited<ReturnType<typeof enrolledFleet>>;
const WS = "agentops";
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

const api = (path: string, body?: unknown) => workshopsApi(rt)(path, body);
const versionOn = (i: number) =>
  readFileSync(join(fleet.agents[i]?.home as string, "lab", "VERSION"), "utf8").trim();

beforeAll(async () => {
  lab = makeRolloutLab();
  rt = await testRuntime();
  const yaml = `name: ${WS}
lab:
  source: ${lab.source}
  ref: main
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 2
provider:
  type: enrolled
  expected: 3
portal:
  enabled: true
`;
  expect((await api("", { yaml })).status).toBe(201);
  fleet = await enrolledFleet({ url: rt.url, workshop: WS, names: ["pc-a", "pc-b", "pc-c"] });
  expect((await api(`/${WS}/up`, {})).status).toBe(202);
  await rt.executor.idle();
  expect((await api(`/${WS}/portal/open`, {})).status).toBe(200);
}, 180_000);

afterAll(async () => {
  await fleet?.stop();
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  lab?.remove();
});

describe("the fleet on enrolled hosts", { timeout: 180_000 }, () => {
  it("came up at the lab's main branch on every machine", () => {
    expect(fleet.agents.map((a) => a.hostId)).toEqual(["pc-a", "pc-b", "pc-c"]);
    expect([0, 1, 2].map(versionOn)).toEqual(["1", "1", "1"]);
  });

  it("refreshes the hosts' status over the agent transport", async () => {
    const hosts = await asInstructor(() => refreshHosts(WS));
    expect(hosts.map((h) => [h.id, h.state, h.error])).toEqual([
      ["pc-a", "ready", null],
      ["pc-b", "ready", null],
      ["pc-c", "ready", null],
    ]);
  });

  it("diagnoses a host over the agent transport: its setup's log comes back", async () => {
    const d = await asInstructor(() => diagnose(WS, { hosts: ["pc-b"] }, { allSelected: true }));
    expect(d.index.hosts.map((h) => [h.id, h.error])).toEqual([["pc-b", undefined]]);
    const text = d.files
      .filter((f) => f.path.includes("pc-b"))
      .map((f) => f.content)
      .join("\n");
    expect(text, JSON.stringify(d.files.map((f) => f.path))).toContain("lab version 1 built on pc-b");
  });

  it("rolls a new ref out in place on the unclaimed machines; the claimed one is untouched", async () => {
    const claim = await claimLab(
      WS,
      { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" },
      "127.0.0.1",
    );
    expect(claim.lab).toBe("pc-a");
    const started = await api(`/${WS}/rollout`, { ref: "v2" });
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    await rt.executor.idle();
    const r = (await api(`/${WS}/rollout`)).body.rollout;
    expect(r.state, JSON.stringify(r)).toBe("completed");
    expect(
      r.hosts.map((h: { hostId: string; state: string; mode: string }) => [h.hostId, h.state, h.mode]),
    ).toEqual([
      ["pc-b", "updated", "in_place"],
      ["pc-c", "updated", "in_place"],
    ]);
    expect([0, 1, 2].map(versionOn)).toEqual(["1", "2", "2"]);
    const pcB = (await rt.store.host.get({ workshop: WS, hostId: "pc-b" }).go()).data;
    expect(pcB).toMatchObject({ state: "ready", ref: "v2", provider: "enrolled" });
    const pcA = (await rt.store.host.get({ workshop: WS, hostId: "pc-a" }).go()).data;
    expect(pcA).toMatchObject({ state: "ready", ref: "main" });
  });
});
