import { describe, expect, it } from "vitest";
import {
  type BuildSample,
  basisText,
  estimateFleet,
  median,
  profileOf,
  remainingFor,
} from "../../shared/fleet/estimate.ts";
import { phaseBars, timePhases } from "../../shared/fleet/timeline.ts";

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
    expect(profileOf(earlier)).toEqual({
      phases: [
        { name: "prepare", seconds: 70 },
        { name: "install", seconds: 320 },
        { name: "configure", seconds: 110 },
      ],
      tailSeconds: 10,
      totalSeconds: 510,
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
    // install: 320 - 128 s run; configure 110; tail 10.
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
    expect(e.hosts["student-02"]).toBe(e.remainingSeconds);
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
