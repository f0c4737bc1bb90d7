import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { LAB_TIMINGS_KEPT, labIdentity, recordBuild } from "../../shared/fleet/lab-timings.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import type { HostItem } from "../../shared/store/entities.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { removeDir, testRuntime } from "../harness/runtime.ts";

/**
 * A lab's recorded builds (the estimate's history, in DynamoDB Local) stay at the newest LAB_TIMINGS_KEPT, and
 * the builds a poll records at once (50 labs ready together, as a 500-host workshop's polls have) trim the old
 * records once between them, not once each.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;

beforeAll(async () => {
  rt = await testRuntime();
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

const spec = {
  name: "timings",
  lab: { source: "/labs/timings", setup: "bash setup.sh" },
} as unknown as Workshop;
const base = Date.parse("2026-12-01T09:00:00Z");
const host = (n: number, readyOffsetS: number): HostItem =>
  ({
    workshop: spec.name,
    hostId: `student-${String(n).padStart(3, "0")}`,
    deployStartedAt: new Date(base).toISOString(),
    readyAt: new Date(base + readyOffsetS * 1000).toISOString(),
    phases: [],
  }) as unknown as HostItem;

describe("recorded builds", () => {
  it("keep the newest LAB_TIMINGS_KEPT, trimmed once by builds recorded together", async () => {
    const { store } = useDeps();
    const identity = labIdentity(spec);
    const count = async () =>
      (await store.labTiming.query.byIdentity({ identity }).go({ pages: "all" })).data.length;
    // An earlier run filled the history to 40 past the limit (a trim that never ran).
    const earlier = LAB_TIMINGS_KEPT + 40;
    for (let i = 0; i < earlier; i += 25) {
      await Promise.all(Array.from({ length: Math.min(25, earlier - i) }, (_, k) => recordBuildRaw(i + k)));
    }
    expect(await count()).toBe(earlier);

    const deletes = vi.spyOn(store.labTiming, "delete");
    try {
      // 50 labs ready in one poll, recorded at once; then one more.
      await Promise.all(
        Array.from({ length: 50 }, (_, i) => recordBuild(spec, host(1000 + i, 600 + i), "run-2")),
      );
      await recordBuild(spec, host(2000, 900), "run-3");
      expect(await count()).toBe(LAB_TIMINGS_KEPT);
      // What was beyond the limit was deleted about once each: not once per build recorded.
      const beyond = earlier + 51 - LAB_TIMINGS_KEPT;
      expect(deletes.mock.calls.length).toBeGreaterThanOrEqual(beyond);
      expect(deletes.mock.calls.length).toBeLessThan(2 * beyond);
    } finally {
      deletes.mockRestore();
    }
    // The newest builds are the ones kept.
    const kept = (await store.labTiming.query.byIdentity({ identity }).go({ pages: "all" })).data;
    expect(kept.some((t) => t.hostId === "student-2000")).toBe(true);
    expect(kept.filter((t) => t.runId === "run-2")).toHaveLength(50);

    async function recordBuildRaw(i: number) {
      await store.labTiming
        .put({
          identity,
          finishedAt: new Date(base - (earlier - i) * 60_000).toISOString(),
          hostId: `old-${i}`,
          workshop: spec.name,
          runId: "run-1",
          totalSeconds: 600,
          phases: [],
          expiresAt: Math.floor(base / 1000) + 86_400,
        })
        .go();
    }
  });
});
