import { describe, expect, it } from "vitest";
import {
  type BuildSample,
  basisText,
  estimateFleet,
  median,
  profileOf,
  remainingFor,
  waveProfiles,
} from "../../shared/fleet/estimate.ts";
import { sampleOf } from "../../shared/fleet/lab-timings.ts";
import { phaseBars, timePhases } from "../../shared/fleet/timeline.ts";
import type { HostItem } from "../../shared/store/entities.ts";

/**
 * The pure halves of the fleet view: phases stamped with the times labfleet saw them, the bars of a host's
 * timeline, and the ready estimate from finished builds (this run's and earlier runs').
 */

const T0 = Date.parse("2026-05-01T10:00:00.000Z");
const at = (s: number) => new Date(T0 + s * 1000).toISOString();

const build = (runId: string, phases: [string, number][], tail = 10): BuildSample => ({
  runId,
  phases: phases.map(([name, seconds]) => ({ name, seconds })),
  totalSeconds: phases.reduce((s, [, n]) => s + n, 0) + tail,
});
const earlier = [
  build("run_a", [
    ["prepare", 60],
    ["install", 300],
    ["configure", 120],
  ]),
  build("run_a", [
    ["prepare", 80],
    ["install", 340],
    ["configure", 100],
  ]),
  build("run_b", [
    ["prepare", 70],
    ["install", 320],
    ["configure", 110],
  ]),
];

describe("phase times", () => {
  it("stamps a phase when first seen and when first seen finished, and keeps those stamps on later reads", () => {
    const first = timePhases([], [{ name: "prepare", state: "running" }], at(5));
    expect(first).toEqual([{ name: "prepare", state: "running", startedAt: at(5) }]);
    const second = timePhases(
      first,
      [
        { name: "prepare", state: "done" },
        { name: "install", state: "running" },
      ],
      at(65),
    );
    expect(second).toEqual([
      { name: "prepare", state: "done", startedAt: at(5), endedAt: at(65) },
      { name: "install", state: "running", startedAt: at(65) },
    ]);
    const third = timePhases(
      second,
      [
        { name: "prepare", state: "done" },
        { name: "install", state: "failed" },
      ],
      at(200),
    );
    expect(third[0]).toEqual(second[0]);
    expect(third[1]).toEqual({ name: "install", state: "failed", startedAt: at(65), endedAt: at(200) });
  });

  it("draws one bar per phase from the deploy's start, a running one up to now, and marks the failed one", () => {
    const phases = [
      { name: "prepare", state: "done", startedAt: at(5), endedAt: at(65) },
      { name: "install", state: "running", startedAt: at(65) },
    ];
    expect(phaseBars(phases, at(0), new Date(T0 + 100_000))).toEqual([
      { name: "prepare", state: "done", from: 5, to: 65 },
      { name: "install", state: "running", from: 65, to: 100 },
    ]);
    // On a host that failed, the phase still running when it failed is the failed one.
    expect(phaseBars(phases, at(0), new Date(T0 + 100_000), true)[1]?.state).toBe("failed");
    expect(phaseBars(phases, undefined, new Date(T0))).toEqual([]);
  });
});

describe("the ready estimate", () => {
  it("builds a profile of medians per phase, the tail after the last phase and the total", () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 2, 3])).toBe(2.5);
    expect(profileOf(earlier)).toMatchObject({
      phases: [
        { name: "prepare", seconds: 70 },
        { name: "install", seconds: 320 },
        { name: "configure", seconds: 110 },
      ],
      // Builds recorded before the head was kept count all their time outside phases as tail.
      headSeconds: 0,
      tailSeconds: 10,
      totalSeconds: 510,
      measured: { install: [300, 340, 320] },
    });
    expect(profileOf([])).toBeUndefined();
  });

  it("counts what a building host still needs: nothing for done phases, the rest of a running one, all of the others", () => {
    const profile = profileOf(earlier);
    if (!profile) throw new Error("no profile");
    const now = new Date(T0 + 200_000);
    const host = {
      id: "student-01",
      state: "deploying",
      deployStartedAt: at(0),
      phases: [
        { name: "prepare", state: "done", startedAt: at(2), endedAt: at(72) },
        { name: "install", state: "running", startedAt: at(72) },
      ],
    };
    // install has run 128 s: the builds all took longer, by 172, 212 and 192 s (median 192); configure 110; tail 10.
    expect(remainingFor(host, profile, now)).toBe(192 + 110 + 10);
    expect(remainingFor({ ...host, state: "pending", phases: [] }, profile, now)).toBe(510);
    expect(remainingFor({ ...host, state: "ready" }, profile, now)).toBe(0);
    // Every phase done 4 s ago: what is left of the tail.
    const allDone = ["prepare", "install", "configure"].map((name) => ({
      name,
      state: "done",
      startedAt: at(0),
      endedAt: at(196),
    }));
    expect(remainingFor({ ...host, phases: allDone }, profile, now)).toBe(6);
  });

  it("takes the slowest host, leaves failed hosts out, and says what it stands on", () => {
    const now = new Date(T0 + 100_000);
    const hosts = [
      { id: "student-01", state: "deploying", deployStartedAt: at(0), phases: [] },
      { id: "student-02", state: "pending", phases: [] },
      { id: "student-03", state: "failed", phases: [] },
      { id: "student-04", state: "ready", phases: [] },
    ];
    const e = estimateFleet(hosts, [...earlier, build("run_now", [["prepare", 50]], 0)], "run_now", now);
    if (e.kind !== "estimated") throw new Error(`expected an estimate, got ${e.kind}`);
    expect(e.building).toBe(2);
    expect(e.failed).toBe(1);
    expect(e.basis).toEqual({ earlierRuns: 2, earlierBuilds: 3, thisRunBuilds: 1 });
    // student-02 needs the median total (500); student-01, deploying without a phase yet, at least its phases'
    // medians and the tail (65 + 320 + 110 + 10): it is the slowest.
    expect(e.hosts).toEqual({ "student-01": 505, "student-02": 500 });
    expect(e.remainingSeconds).toBe(505);
    expect(e.readyAt).toBe(new Date(now.getTime() + e.remainingSeconds * 1000).toISOString());
    expect(basisText(e.basis)).toBe("from 2 earlier runs and 1 lab of this run");
    expect(basisText({ earlierRuns: 3, earlierBuilds: 90, thisRunBuilds: 0 })).toBe("from 3 earlier runs");
    expect(basisText({ earlierRuns: 0, earlierBuilds: 0, thisRunBuilds: 5 })).toBe(
      "from this run so far (5 labs built)",
    );
  });

  it("has no estimate before any build finished, and none to make once every lab is ready", () => {
    const now = new Date(T0);
    const building = [{ id: "student-01", state: "deploying", deployStartedAt: at(0), phases: [] }];
    expect(estimateFleet(building, [], "run_now", now)).toEqual({ kind: "unknown", building: 1, failed: 0 });
    expect(estimateFleet([{ id: "a", state: "ready", phases: [] }], earlier, undefined, now)).toEqual({
      kind: "ready",
      failed: 0,
    });
  });
});

describe("the ready estimate's model of a run", () => {
  /** A build with its head and tail measured apart, in a deploy wave. */
  const timed = (runId: string, wave: number, offset: number, head: number, phases: number[], tail: number) =>
    ({
      runId,
      phases: phases.map((seconds, i) => ({
        name: ["prepare", "install", "configure"][i] as string,
        seconds,
      })),
      headSeconds: head,
      tailSeconds: tail,
      totalSeconds: head + phases.reduce((a, b) => a + b, 0) + tail,
      wave,
      startOffsetSeconds: offset,
    }) satisfies BuildSample;

  it("keeps the head before the first phase out of the tail: a host past its first phase owes no head", () => {
    const samples = [
      timed("run_a", 0, 0, 30, [60, 300, 100], 12),
      timed("run_a", 0, 0, 34, [60, 300, 100], 8),
    ];
    const profile = profileOf(samples);
    if (!profile) throw new Error("no profile");
    expect(profile).toMatchObject({ headSeconds: 32, tailSeconds: 10, totalSeconds: 502 });
    const now = new Date(T0 + 400_000);
    const host = {
      id: "student-01",
      state: "deploying",
      deployStartedAt: at(0),
      phases: [
        { name: "prepare", state: "done", startedAt: at(30), endedAt: at(90) },
        { name: "install", state: "done", startedAt: at(90), endedAt: at(390) },
        { name: "configure", state: "running", startedAt: at(390) },
      ],
    };
    // configure: 100 less the 10 s it has run; then the tail, 10 (not the 42 s outside phases of old).
    expect(remainingFor(host, profile, now)).toBe(90 + 10);
  });

  it("counts the first phase from the deploy's start, so an earlier first poll does not make it look done", () => {
    // The earlier build's first poll came 8 s in, when prepare had 2 s left to run.
    const profile = profileOf([timed("run_a", 0, 0, 8, [2, 10], 4)]);
    if (!profile) throw new Error("no profile");
    const host = {
      id: "student-01",
      state: "deploying",
      deployStartedAt: at(0),
      // This run's first poll came 1 s in; 3 s in, prepare still has 7 s to go (10 from the deploy's start).
      phases: [{ name: "prepare", state: "running", startedAt: at(1) }],
    };
    expect(remainingFor(host, profile, new Date(T0 + 3_000))).toBe(7 + 10 + 4);
  });

  it("leaves the whole tail to come while a phase runs longer than every build measured", () => {
    const profile = profileOf([timed("run_a", 0, 0, 5, [10, 20, 10], 6)]);
    if (!profile) throw new Error("no profile");
    const host = {
      id: "student-01",
      state: "deploying",
      deployStartedAt: at(0),
      phases: [
        { name: "prepare", state: "done", startedAt: at(5), endedAt: at(15) },
        { name: "install", state: "done", startedAt: at(15), endedAt: at(35) },
        // 30 s into a phase measured at 10 s: nothing more of the phase is known, the tail still is.
        { name: "configure", state: "running", startedAt: at(35) },
      ],
    };
    expect(remainingFor(host, profile, new Date(T0 + 65_000))).toBe(6);
  });

  it("takes what is left of a running phase from the builds that ran longer than it has so far", () => {
    // A phase that is quick on most builds and slow on some: past the quick ones, the slow ones tell.
    const samples = [2, 2, 2, 8].map((c) => timed("run_a", 0, 0, 1, [3, 3, c], 1));
    const profile = profileOf(samples);
    if (!profile) throw new Error("no profile");
    const host = (ranFor: number) => ({
      id: "student-01",
      state: "deploying",
      deployStartedAt: at(0),
      phases: [
        { name: "prepare", state: "done", startedAt: at(1), endedAt: at(4) },
        { name: "install", state: "done", startedAt: at(4), endedAt: at(7) },
        { name: "configure", state: "running", startedAt: at(7) },
      ],
      now: new Date(T0 + (7 + ranFor) * 1000),
    });
    const early = host(1);
    expect(remainingFor(early, profile, early.now)).toBe(1 + 1);
    const late = host(4);
    expect(remainingFor(late, profile, late.now)).toBe(4 + 1);
  });

  it("models the deploy step's waves: a host waits for its wave's slot, then builds by its wave's profile", () => {
    // An earlier run of 4 hosts, 2 at a time: the second wave started 20 s after the first and built slower.
    const samples = [
      timed("run_a", 0, 0, 10, [30, 60, 30], 10),
      timed("run_a", 0, 1, 10, [30, 60, 30], 10),
      timed("run_a", 1, 20, 10, [30, 60, 50], 30),
      timed("run_a", 1, 21, 10, [30, 60, 50], 30),
    ];
    expect(waveProfiles(samples)(1)).toMatchObject({ totalSeconds: 180, startOffsetSeconds: 20.5 });
    // A third wave was never measured: it starts one more slot (the second wave's offset) later.
    expect(waveProfiles(samples)(2)).toMatchObject({ totalSeconds: 180, startOffsetSeconds: 41 });
    const now = new Date(T0 + 5_000);
    const hosts = ["student-01", "student-02", "student-03", "student-04", "student-05", "student-06"].map(
      (id, i) =>
        i < 2
          ? { id, state: "deploying", deployStartedAt: at(0), phases: [] }
          : { id, state: "pending", phases: [] },
    );
    const e = estimateFleet(hosts, samples, "run_now", now, { concurrency: 2, startedAt: at(-1) });
    if (e.kind !== "estimated") throw new Error(`expected an estimate, got ${e.kind}`);
    // Wave 0 deploying 5 s: 140 - 5. Wave 1: 20.5 - 5 s to its start, then 180. Wave 2: 41 - 5, then 180.
    expect(e.hosts).toEqual({
      "student-01": 135,
      "student-02": 135,
      "student-03": 196,
      "student-04": 196,
      "student-05": 216,
      "student-06": 216,
    });
    expect(e.remainingSeconds).toBe(216);
    // Without the waves (every host at once, one profile for all), the same fleet looks done far sooner.
    const flat = estimateFleet(hosts, samples, "run_now", now, { concurrency: 6 });
    if (flat.kind !== "estimated") throw new Error(`expected an estimate, got ${flat.kind}`);
    expect(flat.remainingSeconds).toBeLessThan(e.remainingSeconds - 60);
  });

  it("counts only the run's own hosts in its waves: labs built before the run started hold no slot", () => {
    const samples = [timed("run_a", 0, 0, 10, [30], 10), timed("run_a", 1, 20, 10, [30], 10)];
    const now = new Date(T0 + 100_000);
    const hosts = [
      // Built by an earlier run and still ready: not part of this (scale) run's deploy step.
      { id: "student-01", state: "ready", deployStartedAt: at(-500), phases: [] },
      { id: "student-02", state: "ready", deployStartedAt: at(-500), phases: [] },
      { id: "student-03", state: "pending", phases: [] },
    ];
    const e = estimateFleet(hosts, samples, "run_now", now, { concurrency: 2, startedAt: at(90) });
    if (e.kind !== "estimated") throw new Error(`expected an estimate, got ${e.kind}`);
    // student-03 is the run's first host: wave 0, no wait.
    expect(e.hosts).toEqual({ "student-03": 50 });
  });
});

describe("a finished build's sample", () => {
  it("measures the head before the first phase and the tail after the last apart from the phases", () => {
    const host = {
      hostId: "student-04",
      deployStartedAt: at(0),
      readyAt: at(40),
      phases: [
        { name: "prepare", state: "done", startedAt: at(3), endedAt: at(10) },
        { name: "install", state: "done", startedAt: at(10), endedAt: at(34) },
      ],
    } as unknown as HostItem;
    expect(sampleOf(host, "run_a", { wave: 1, startOffsetSeconds: 2.5 })).toEqual({
      runId: "run_a",
      totalSeconds: 40,
      phases: [
        { name: "prepare", seconds: 7 },
        { name: "install", seconds: 24 },
      ],
      headSeconds: 3,
      tailSeconds: 6,
      wave: 1,
      startOffsetSeconds: 2.5,
    });
  });
});

describe("the estimate at this run's pace", () => {
  // The earlier runs' medians: prepare 70 s, install 320 s, configure 110 s, tail 10 s, total 510 s.
  const now = new Date(T0 + 800_000);
  const slowHost = {
    id: "student-01",
    state: "deploying",
    deployStartedAt: at(0),
    // install took 640 s (twice the earlier runs' 320 s); configure runs for 20 s now. The first phase holds
    // the deploy step's head and is not compared.
    phases: [
      { name: "prepare", state: "done", startedAt: at(20), endedAt: at(140) },
      { name: "install", state: "done", startedAt: at(140), endedAt: at(780) },
      { name: "configure", state: "running", startedAt: at(780) },
    ],
  };
  const waiting = { id: "student-02", state: "pending", phases: [] };

  it("scales what is left by how this run's finished phases compare with the earlier runs'", () => {
    const e = estimateFleet([slowHost, waiting], earlier, "run_now", now);
    if (e.kind !== "estimated") throw new Error(`expected an estimate, got ${e.kind}`);
    expect(e.basis).toEqual({
      earlierRuns: 2,
      earlierBuilds: 3,
      thisRunBuilds: 0,
      pace: { ratio: 2, phases: 1 },
    });
    // student-02 has not started: the earlier runs' median total, twice over.
    expect(e.hosts["student-02"]).toBe(1020);
    // student-01: what longer configures took beyond 20 s (at this pace: 240, 200, 220 -> 200), then the
    // tail (20).
    expect(e.hosts["student-01"]).toBe(220);
    expect(e.remainingSeconds).toBe(1020);
    expect(basisText(e.basis)).toBe(
      "from 2 earlier runs, at this run's pace (100 % slower than the earlier runs, over 1 phase)",
    );
  });

  it("brings this run's own finished builds to the earlier runs' pace before they join the profile", () => {
    const built = {
      id: "student-03",
      state: "ready",
      deployStartedAt: at(-1020),
      phases: [
        { name: "prepare", state: "done", startedAt: at(-1000), endedAt: at(-880) },
        { name: "install", state: "done", startedAt: at(-880), endedAt: at(-240) },
        { name: "configure", state: "done", startedAt: at(-240), endedAt: at(-20) },
      ],
    };
    const itsBuild = build(
      "run_now",
      [
        ["prepare", 140],
        ["install", 640],
        ["configure", 220],
      ],
      20,
    );
    const e = estimateFleet([built, waiting], [...earlier, itsBuild], "run_now", now, {
      concurrency: 10,
      startedAt: at(-1100),
    });
    if (e.kind !== "estimated") throw new Error(`expected an estimate, got ${e.kind}`);
    expect(e.basis.pace).toEqual({ ratio: 2, phases: 2 });
    // Its build counts as 510 s at the earlier pace (not as the slowest build of all), then twice over.
    expect(e.hosts["student-02"]).toBe(1020);
  });

  it("reads a faster run too, keeps the pace within its bounds, and needs earlier builds to have one", () => {
    const withInstall = (seconds: number) => ({
      ...slowHost,
      phases: [
        { name: "prepare", state: "done", startedAt: at(5), endedAt: at(40) },
        { name: "install", state: "done", startedAt: at(40), endedAt: at(40 + seconds) },
        { name: "configure", state: "running", startedAt: at(40 + seconds) },
      ],
    });
    const quick = estimateFleet([withInstall(160), waiting], earlier, "run_now", new Date(T0 + 210_000));
    if (quick.kind !== "estimated") throw new Error(`expected an estimate, got ${quick.kind}`);
    expect(quick.basis.pace).toEqual({ ratio: 0.5, phases: 1 });
    expect(quick.hosts["student-02"]).toBe(255);
    expect(basisText(quick.basis)).toContain("50 % faster than the earlier runs");

    const slow = estimateFleet([withInstall(3200), waiting], earlier, "run_now", new Date(T0 + 3_300_000));
    if (slow.kind !== "estimated") throw new Error(`expected an estimate, got ${slow.kind}`);
    expect(slow.basis.pace?.ratio).toBe(4);
    expect(slow.hosts["student-02"]).toBe(2040);

    // Only this run's builds: nothing to compare with, the estimate stands on them as they are.
    const own = estimateFleet([slowHost, waiting], [build("run_now", [["prepare", 140]], 0)], "run_now", now);
    if (own.kind !== "estimated") throw new Error(`expected an estimate, got ${own.kind}`);
    expect(own.basis.pace).toBeUndefined();
    expect(
      basisText({ earlierRuns: 1, earlierBuilds: 3, thisRunBuilds: 0, pace: { ratio: 1.03, phases: 4 } }),
    ).toBe("from 1 earlier run, at this run's pace (as fast as the earlier runs, over 4 phases)");
  });
});
