import { describe, expect, it } from "vitest";
import { buildPlaces, pushedPlace } from "../../shared/fleet/lab-timings.ts";
import type { HostItem, RunItem } from "../../shared/store/entities.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";

const T0 = Date.parse("2026-12-07T10:00:00Z");
const at = (s: number) => new Date(T0 + s * 1000).toISOString();

function host(hostId: string, startedAfter?: number): HostItem {
  return {
    workshop: "w",
    hostId,
    state: "deploying",
    provider: "local",
    ...(startedAfter !== undefined ? { deployStartedAt: at(startedAfter) } : {}),
  } as HostItem;
}

function run(runId: string): RunItem {
  return { workshop: "w", runId, startedAt: at(-5), deployConcurrency: 2 } as RunItem;
}

const spec = { name: "w", lab: { concurrency: 2 } } as Workshop;

/** A lister of the run's hosts that counts its calls and answers what the hosts are at that moment. */
function lister(hosts: HostItem[]) {
  const calls = { n: 0 };
  return {
    calls,
    list: async () => {
      calls.n++;
      return hosts.map((h) => ({ ...h }));
    },
  };
}

describe("where a build stood in its run's deploy", () => {
  it("places hosts by wave, in counted order, and by their start after the run's first", () => {
    const place = buildPlaces(
      [host("s-10", 12), host("s-2", 1), host("s-1", 0), host("s-3")],
      run("r0"),
      spec,
    );
    expect(place("s-1")).toEqual({ wave: 0, startOffsetSeconds: 0 });
    expect(place("s-2")).toEqual({ wave: 0, startOffsetSeconds: 1 });
    expect(place("s-10")).toEqual({ wave: 1, startOffsetSeconds: 12 });
    // Not started in this run: no place.
    expect(place("s-3")).toBeUndefined();
    expect(place("nobody")).toBeUndefined();
  });

  it("places a host by its own record's start, though the listing was taken before it started", () => {
    const place = buildPlaces([host("s-1", 0), host("s-2", 1), host("s-3"), host("s-4")], run("r0"), spec);
    expect(place("s-4", host("s-4", 31))).toEqual({ wave: 1, startOffsetSeconds: 31 });
    // Its own record says it never started in this run: no place, whatever the listing holds.
    expect(place("s-1", host("s-1"))).toBeUndefined();
    expect(place("s-1", { ...host("s-1"), deployStartedAt: at(-60) })).toBeUndefined();
  });

  it("serves every push of a run from one listing, each placed by its own record", async () => {
    const hosts = [host("s-1", 0), host("s-2", 1), host("s-3"), host("s-4")];
    const { calls, list } = lister(hosts);
    const r = run("r1");
    expect(await pushedPlace(spec, r, host("s-1", 0), list)).toEqual({ wave: 0, startOffsetSeconds: 0 });
    expect(await pushedPlace(spec, r, host("s-2", 1), list)).toEqual({ wave: 0, startOffsetSeconds: 1 });
    // The second wave starts after that listing: its pushes are placed from the same one.
    expect(await pushedPlace(spec, r, host("s-3", 30), list)).toEqual({ wave: 1, startOffsetSeconds: 30 });
    expect(await pushedPlace(spec, r, host("s-4", 31), list)).toEqual({ wave: 1, startOffsetSeconds: 31 });
    expect(calls.n).toBe(1);

    // Another run of the workshop has places of its own.
    expect(await pushedPlace(spec, run("r2"), host("s-1", 0), list)).toEqual({
      wave: 0,
      startOffsetSeconds: 0,
    });
    expect(calls.n).toBe(2);
  });

  it("lists again, once, for a host the listing does not hold", async () => {
    const hosts = [host("s-1", 0), host("s-2", 1)];
    const { calls, list } = lister(hosts);
    const r = run("r5");
    expect(await pushedPlace(spec, r, host("s-1", 0), list)).toEqual({ wave: 0, startOffsetSeconds: 0 });
    expect(calls.n).toBe(1);
    // Hosts added to the run since that listing (a scale-up): the first push of them lists again.
    hosts.push(host("s-3", 40), host("s-4", 41));
    const added = await Promise.all(
      [host("s-3", 40), host("s-4", 41)].map((h) => pushedPlace(spec, r, h, list)),
    );
    expect(added).toEqual([
      { wave: 1, startOffsetSeconds: 40 },
      { wave: 1, startOffsetSeconds: 41 },
    ]);
    expect(calls.n).toBe(2);
  });

  it("lists once for pushes that ask at the same time, and answers no place for a host that never started", async () => {
    const hosts = [host("s-1", 0), host("s-2", 2), host("s-3", 4), host("s-4")];
    const { calls, list } = lister(hosts);
    const r = run("r3");
    const places = await Promise.all(
      [host("s-1", 0), host("s-2", 2), host("s-3", 4)].map((h) => pushedPlace(spec, r, h, list)),
    );
    expect(places.map((p) => p?.startOffsetSeconds)).toEqual([0, 2, 4]);
    expect(calls.n).toBe(1);
    // Its own record holds no start: no place, and no listing for it. Its build is recorded without one.
    expect(await pushedPlace(spec, r, host("s-4"), list)).toBeUndefined();
    // Nor for one started before this run (its lab was already built): this run did not deploy it.
    expect(await pushedPlace(spec, r, { ...host("s-4"), deployStartedAt: at(-60) }, list)).toBeUndefined();
    expect(calls.n).toBe(1);
  });

  it("does not keep a listing that failed", async () => {
    const r = run("r4");
    let fail = true;
    const list = async () => {
      if (fail) throw new Error("store unreachable");
      return [host("s-1", 0)];
    };
    await expect(pushedPlace(spec, r, host("s-1", 0), list)).rejects.toThrow("store unreachable");
    fail = false;
    expect(await pushedPlace(spec, r, host("s-1", 0), list)).toEqual({ wave: 0, startOffsetSeconds: 0 });
  });
});
