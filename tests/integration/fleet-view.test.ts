import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { labIdentity } from "../../shared/fleet/lab-timings.ts";
import { checkMyWork } from "../../shared/portal/checks.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { FleetViewSchema } from "../../web/api/fleet-view.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { removeDir, testRuntime, waitFor } from "../harness/runtime.ts";

/**
 * The fleet view through the API on the real local runtime: phases timed as the polls see them, each finished
 * build's phase durations kept under the lab's identity, and the ready estimate of a second run of the same lab
 * (known phase durations) within 20 % of what that run then took; the counts, the student's name and the checks
 * passed; bad names and unknown workshops.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "fleet-view-suite-token-0123456789";
const WS = "fleetv";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
const PHASE_SECONDS = 3;
const STUDENT = { name: "Ada Lovelace-Byron of a Long Name", email: "ada@example.test", pin: "480271" };

// The `slow` fixture: three phases of SLOW_SECONDS each, then `built`.
const yaml = `name: ${WS}
lab:
  source: ${join(import.meta.dirname, "..", "fixtures", "labs", "slow")}
  setup: SLOW_SECONDS=${PHASE_SECONDS} bash setup.sh
  health: test -f built
  concurrency: 3
  timeout_minutes: 5
  checks:
    - name: built
      run: test -f built
    - name: never
      run: "false"
provider:
  type: local
  count: 3
  ttl_hours: 6
portal:
  enabled: true
`;

// biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field
async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await app.request(`http://localhost/api/workshops${path}`, {
    method,
    headers: auth,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, json: await res.json() };
}

async function fleet() {
  const r = await api("GET", `/${WS}/fleet`);
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return FleetViewSchema.parse(r.json);
}

beforeAll(async () => {
  rt = await testRuntime();
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("the fleet view", () => {
  it("times each phase, keeps the first run's builds, and estimates the second run within 20 %", async () => {
    expect((await api("POST", "", { yaml })).status).toBe(201);
    expect((await api("POST", `/${WS}/up`, {})).status).toBe(202);
    // Mid-build: no build of this lab has finished anywhere, so there is no estimate yet.
    const early = await waitFor("a lab building", async () => {
      const f = await fleet();
      return f.labs.some((l) => l.state === "deploying") ? f : undefined;
    });
    expect(early.estimate.kind).toBe("unknown");
    expect(early.counts.building).toBeGreaterThan(0);
    await rt.executor.idle();

    const first = await fleet();
    expect(first.estimate).toEqual({ kind: "ready", failed: 0 });
    expect(first.counts).toMatchObject({ total: 3, ready: 3, building: 0, failed: 0, free: 3, claimed: 0 });
    for (const l of first.labs) {
      expect(l.phase).toBe("ready");
      expect(l.phases.map((p) => p.name)).toEqual(["one", "two", "three"]);
      const seconds = l.phases.map(
        (p) => (Date.parse(p.endedAt ?? "") - Date.parse(p.startedAt ?? "")) / 1000,
      );
      // The polls see each phase begin and end, each as late as a poll comes round (later on a busy machine;
      // the first phase's start only once the deploy has started every host): together the phases span at
      // least the two phases after the first, and no more than the build.
      const build = (Date.parse(l.readyAt ?? "") - Date.parse(l.deployStartedAt ?? "")) / 1000;
      for (const s of seconds) expect(s).toBeGreaterThan(0);
      const sum = seconds.reduce((a, b) => a + b, 0);
      expect(sum).toBeGreaterThanOrEqual(2 * PHASE_SECONDS);
      expect(sum).toBeLessThanOrEqual(build);
      // Each phase starts when the one before it is seen done, and they follow the deploy's start.
      expect(Date.parse(l.phases[0]?.startedAt ?? "")).toBeGreaterThanOrEqual(
        Date.parse(l.deployStartedAt ?? ""),
      );
      for (let i = 1; i < l.phases.length; i++) expect(l.phases[i]?.startedAt).toBe(l.phases[i - 1]?.endedAt);
    }
    const { store } = useDeps();
    const spec = (await store.workshop.get({ name: WS }).go()).data?.spec as Workshop;
    // A build is timed once its lab is judged ready, by the push that brought its readiness as often as by the
    // run's poll: the run can end while the last pushes are still timing theirs.
    const timings = (n: number) =>
      waitFor(`${n} builds timed`, async () => {
        const r = await store.labTiming.query
          .byIdentity({ identity: labIdentity(spec) })
          .go({ pages: "all" });
        return r.data.length >= n ? r.data : undefined;
      });
    const kept = await timings(3);
    expect(kept.map((t) => t.hostId).sort()).toEqual(["student-01", "student-02", "student-03"]);
    for (const t of kept) expect(t.phases.map((p) => p.name)).toEqual(["one", "two", "three"]);

    // The second run of the same lab: a rebuild of every host.
    expect((await api("POST", `/${WS}/deploy`, { force: true })).status).toBe(202);
    const second = await waitFor("the rebuild's first phase", async () => {
      const f = await fleet();
      return f.estimate.kind === "estimated" && f.labs.every((l) => l.state === "deploying") ? f : undefined;
    });
    if (second.estimate.kind !== "estimated") throw new Error("no estimate");
    expect(second.estimate.basis).toMatchObject({ earlierRuns: 1, earlierBuilds: 3, thisRunBuilds: 0 });
    expect(second.labs.every((l) => typeof l.remainingSeconds === "number")).toBe(true);
    await rt.executor.idle();
    const done = await fleet();
    const lastReady = Math.max(...done.labs.map((l) => Date.parse(l.readyAt ?? "")));
    const measured = (lastReady - Date.parse(second.at)) / 1000;
    const estimated = second.estimate.remainingSeconds;
    console.info(`fleet estimate: ${estimated} s estimated, ${measured.toFixed(1)} s measured`);
    expect(
      Math.abs(estimated - measured),
      `estimated ${estimated} s, took ${measured} s`,
    ).toBeLessThanOrEqual(measured * 0.2);
    // The second run's builds are kept beside the first's.
    const after = await timings(6);
    expect(after).toHaveLength(6);
    expect(new Set(after.map((t) => t.runId)).size).toBe(2);
  });

  it("names the student of a claimed lab, counts the checks they passed, and counts claimed and free labs", async () => {
    const portal = await api("POST", `/${WS}/portal/open`, {});
    expect(portal.status, JSON.stringify(portal.json)).toBe(200);
    const { lab, token } = await claimLab(WS, STUDENT, "192.0.2.31");
    await checkMyWork(token);
    const f = await fleet();
    expect(f.counts).toMatchObject({ claimed: 1, free: 2, ready: 3, waiting: 0 });
    const row = f.labs.find((l) => l.id === lab);
    expect(row?.student).toBe(STUDENT.name);
    expect(row?.checks).toEqual({ passed: 1, total: 2 });
    expect(f.labs.filter((l) => l.id !== lab).every((l) => l.student === null && l.checks === null)).toBe(
      true,
    );
    // The email never appears in the fleet view.
    expect(JSON.stringify(f)).not.toContain(STUDENT.email);
  });

  it("answers 404 for a workshop that does not exist and 400 for a name that cannot be one", async () => {
    const missing = await api("GET", "/nosuch/fleet");
    expect(missing.status).toBe(404);
    expect(missing.json.error.code).toBe("workshop.not_found");
    const bad = await api("GET", "/Not_A-Name!/fleet");
    expect(bad.status).toBe(400);
    expect(bad.json.error.details[0].path).toBe("name");
  });
});
