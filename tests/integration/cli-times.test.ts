import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { FleetEstimate } from "../../shared/fleet/estimate.ts";
import { labIdentity } from "../../shared/fleet/lab-timings.ts";
import { getWorkshop } from "../../shared/fleet/workshops.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { formatClock } from "../../shared/runtime/time-format.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { runCli } from "../harness/cli.ts";
import {
  fixturesDir,
  removeDir,
  tempDir,
  testRuntime,
  waitFor,
  workshopsApi,
  workshopYaml,
} from "../harness/runtime.ts";

/** What the CLI prints about times, claims and a lab's phase and URLs, read as an instructor reads it. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
let expiry: string;
const WS = "times";
const ISO = /\d{4}-\d\d-\d\dT\d\d:\d\d/;

beforeAll(async () => {
  work = tempDir("labfleet-cli-times-");
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  const file = join(work, "workshop.yaml");
  writeFileSync(file, `${workshopYaml({ name: WS, count: 2, ttlHours: 6 })}portal:\n  mode: both\n`);
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stderr).toBe(0);
  expect((await runCli(["portal", "open", WS], { env })).code).toBe(0);
  await claimLab(WS, { name: "Dana Scully", email: "dana@example.test", pin: "582913" }, "127.0.0.1");
  const doc = JSON.parse((await runCli(["status", WS, "--output", "json"], { env })).stdout);
  expiry = doc.expiry;
  expect(expiry).toMatch(ISO);
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("the CLI's times, claims and URLs", () => {
  it("status shows the claims, the time left with the local teardown time, and a ready lab's phase as ready", async () => {
    for (const tz of ["UTC", "Asia/Kolkata"]) {
      const r = await runCli(["status", WS], { env: { ...env, TZ: tz } });
      expect(r.code, r.stderr).toBe(0);
      const [head, ...rows] = r.stdout.split("\n");
      const at = formatClock(expiry, Date.now(), { timeZone: tz });
      expect(head).toMatch(
        new RegExp(
          `^${WS}: ready · 2/2 ready · 1 claimed · 1 free · 5 h [0-5]\\d min left, torn down at ${at}$`,
        ),
      );
      expect(rows).toContainEqual(expect.stringMatching(/^student-01 +ready +ready +\d+ s +Dana Scully$/));
      expect(rows).toContainEqual(expect.stringMatching(/^student-02 +ready +ready +\d+ s$/));
      expect(r.stdout).not.toContain("verify"); // the lab's last phase
      expect(r.stdout).not.toMatch(ISO);
      expect(r.stdout).not.toContain("dana@example.test"); // names only; emails stay in portal status
    }
    // Half an hour apart, the zones print different teardown times: the time is local, not UTC.
    expect(formatClock(expiry, Date.now(), { timeZone: "UTC" })).not.toBe(
      formatClock(expiry, Date.now(), { timeZone: "Asia/Kolkata" }),
    );
  });

  it("access lists each lab's URLs", async () => {
    const r = await runCli(["access", WS], { env });
    expect(r.code, r.stderr).toBe(0);
    for (const id of ["student-01", "student-02"])
      expect(r.stdout).toMatch(
        new RegExp(`^${id} +ready +\\S+ +https://${id}\\.example\\.test/ +stored`, "m"),
      );
    expect(r.stdout).not.toContain("s3cret");
  });

  it("runs, workshops, events and tokens print local clock times and durations, never ISO times", async () => {
    for (const args of [
      ["runs", WS],
      ["workshops"],
      ["events", WS],
      ["portal", "status", WS],
      ["tokens", "list"],
    ]) {
      const r = await runCli(args, { env: { ...env, TZ: "UTC" } });
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(0);
      expect(r.stdout, args.join(" ")).not.toMatch(ISO);
      expect(r.stdout, args.join(" ")).not.toContain("UTC");
    }
    const runs = await runCli(["runs", WS], { env });
    expect(runs.stdout).toMatch(/ up +succeeded +(\d{4}-\d\d-\d\d )?\d\d:\d\d +\d+ s +\d+$/m);
    const workshops = await runCli(["workshops"], { env });
    expect(workshops.stdout).toMatch(
      new RegExp(`^${WS} .* 5 h [0-5]\\d min left, torn down at [\\d :-]+$`, "m"),
    );
    const events = await runCli(["events", WS], { env });
    expect(events.stdout).toMatch(/^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d +host\.ready /m);
    const portal = await runCli(["portal", "status", WS], { env });
    expect(portal.stdout).toMatch(
      /^student-01 +claimed +Dana Scully +dana@example\.test +(\d{4}-\d\d-\d\d )?\d\d:\d\d/m,
    );
  });
});

describe("status while labs build", () => {
  const BUILDING = "building";
  // The `slow` fixture's three phases of SLOW_SECONDS each: far longer than the test, so the labs stay building.
  const yaml = `name: ${BUILDING}
lab:
  source: ${join(fixturesDir, "labs", "slow")}
  setup: SLOW_SECONDS=600 bash setup.sh
  health: test -f built
  concurrency: 3
  timeout_minutes: 60
provider:
  type: local
  count: 2
  ttl_hours: 6
`;
  const status = async (args: string[], tz = "UTC") => {
    const r = await runCli(["status", BUILDING, ...args], { env: { ...env, TZ: tz } });
    expect(r.code, r.stderr).toBe(0);
    return r.stdout;
  };
  const estimateOf = async (args: string[] = []) =>
    JSON.parse(await status([...args, "--output", "json"])).estimate as FleetEstimate;
  /** The estimate as the API answers it (the console's fleet view). */
  const fleetEstimate = async () => (await workshopsApi(rt)(`/${BUILDING}/fleet?limit=1`)).body.estimate;

  it("shows when every lab will be ready, with what the figure stands on, and --output json the estimate", async () => {
    const api = workshopsApi(rt);
    expect((await api("", { yaml })).status).toBe(201);
    expect((await api(`/${BUILDING}/up`, {})).status).toBe(202);
    await waitFor("both labs deploying", async () => {
      const s = await api(`/${BUILDING}`);
      const states = s.body.hostList.map((h: { state: string }) => h.state);
      return states.length === 2 && states.every((st: string) => st === "deploying") ? true : undefined;
    });

    // No build of this lab has finished anywhere yet: no figure, and why.
    expect(await fleetEstimate()).toEqual({ kind: "unknown", building: 2, failed: 0 });
    expect(await status([])).toContain(
      "\nready estimate: not yet (no build of this lab has finished, here or in an earlier run)\n",
    );

    // Three earlier runs of the same lab, each built in 15 min (three phases of 290 s).
    const spec = (await getWorkshop(BUILDING)).spec as Workshop;
    const { store } = useDeps();
    const done = Date.now() - 86_400_000;
    for (const [i, runId] of ["run_a", "run_b", "run_c"].entries())
      await store.labTiming
        .put({
          identity: labIdentity(spec),
          finishedAt: new Date(done + i * 3600_000).toISOString(),
          hostId: "student-01",
          workshop: "earlier",
          runId,
          totalSeconds: 900,
          phases: ["one", "two", "three"].map((name) => ({ name, seconds: 290 })),
          headSeconds: 10,
          tailSeconds: 20,
          wave: 0,
          startOffsetSeconds: 0,
          expiresAt: Math.floor(Date.now() / 1000) + 86_400,
        })
        .go();

    for (const tz of ["UTC", "Asia/Kolkata"]) {
      const before = await fleetEstimate();
      const text = await status([], tz);
      const after = await fleetEstimate();
      if (before.kind !== "estimated" || after.kind !== "estimated") throw new Error("no estimate");
      const line = text.split("\n").find((l) => l.startsWith("every lab ready in"));
      // The clock reads `00:02`, or `2026-12-08 00:02` when the estimate falls on another day there.
      const m =
        /^every lab ready in about (\d+) min, by ((?:\d{4}-\d\d-\d\d )?\d\d:\d\d) \(from 3 earlier runs\)$/.exec(
          line ?? "",
        );
      expect(m, text).not.toBeNull();
      // What is left of a 15-min build a few seconds (on a loaded machine, a minute or two) into it.
      expect(Number(m?.[1])).toBeGreaterThanOrEqual(11);
      expect(Number(m?.[1])).toBeLessThanOrEqual(15);
      // The local clock time of the estimate the API answered around it.
      const at = [before, after].map((e) => formatClock(e.readyAt, Date.now(), { timeZone: tz }));
      expect(at).toContain(m?.[2]);
      expect(text).not.toMatch(ISO);
      // Above the hosts' table: the second line.
      expect(text.split("\n")[1]).toBe(line);
    }

    const e = await estimateOf();
    expect(e).toMatchObject({
      kind: "estimated",
      building: 2,
      failed: 0,
      basis: { earlierRuns: 3, earlierBuilds: 3, thisRunBuilds: 0 },
    });
    if (e.kind !== "estimated") throw new Error("no estimate");
    expect(e.readyAt).toMatch(ISO);
    expect(e.remainingSeconds).toBeGreaterThan(600);
    expect(e.remainingSeconds).toBeLessThanOrEqual(900);
    expect(Object.keys(e.hosts).sort()).toEqual(["student-01", "student-02"]);
    for (const left of Object.values(e.hosts)) expect(left).toBeLessThanOrEqual(e.remainingSeconds);
    // A selection keeps the fleet's figure, with the selected labs' seconds.
    const one = await estimateOf(["--host", "student-02"]);
    expect(one.kind === "estimated" && Object.keys(one.hosts)).toEqual(["student-02"]);

    const down = await runCli(["down", BUILDING, "--yes"], { env });
    expect(down.code, down.stderr).toBe(0);
  }, 240_000);

  it("shows no estimate once every lab is ready; --output json says ready", async () => {
    const r = await runCli(["status", WS, "--output", "json"], { env });
    expect(JSON.parse(r.stdout).estimate).toEqual({ kind: "ready", failed: 0 });
    const text = await runCli(["status", WS], { env });
    expect(text.stdout).not.toContain("ready estimate");
    expect(text.stdout).not.toContain("every lab ready in");
  });
});
