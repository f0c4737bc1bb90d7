/**
 * The fleet view: every lab of a workshop in one list (build state and phase, health, who holds it, their
 * checks, time left, the phase times of its timeline), the counts an instructor scans first, and the ready
 * estimate. One read each of the workshop, its hosts, claims, check results, waiting line, the run building and
 * the lab's recorded builds, however many labs there are.
 */
import { reachableAt, takesNewClaims } from "../agent/reachability.ts";
import { waitingCount } from "../portal/queue.ts";
import { assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import { byNumber } from "../runtime/text.ts";
import type { HostItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { estimateFleet, type FleetEstimate } from "./estimate.ts";
import { labBuilds } from "./lab-timings.ts";
import type { TimedPhase } from "./timeline.ts";
import { getWorkshop, listHosts } from "./workshops.ts";

export interface FleetLab {
  id: string;
  state: HostItem["state"];
  /** What the lab is doing: `ready` for a ready lab, else the phase its setup reports (or `waiting`). */
  phase: string;
  phasesDone: number;
  phasesTotal: number;
  phases: TimedPhase[];
  /** ok or flagged (the in-use health check failed in a row); null before a ready lab was checked. */
  health: "ok" | "flagged" | null;
  /** The last failed health check's output (secrets redacted), while flagged. */
  healthError: string | null;
  /** The display name of the student who holds it (never an email). */
  student: string | null;
  /** Check my work: checks this claim passed, of the lab's checks; null when unclaimed or without checks. */
  checks: { passed: number; total: number } | null;
  /** The host's teardown time (the workshop's when the host has none of its own). */
  expiry: string | null;
  deployStartedAt: string | null;
  readyAt: string | null;
  /** Where its timeline ends: when it became ready, or when its failure was recorded; null while building. */
  endedAt: string | null;
  error: string | null;
  /** Seconds it still needs by the estimate; null when it is not building or there is no estimate. */
  remainingSeconds: number | null;
  /**
   * An enrolled host's agent: `unreachable` once it missed three check-ins, judged against the clock at this read
   * (shared/agent/reachability.ts); null for hosts that do not call in (local, SSH, EC2).
   */
  reachable: "online" | "unreachable" | null;
  /** When an enrolled host's agent last called in; null for other hosts. */
  lastSeenAt: string | null;
  /** An enrolled host's controls: drained (no new work, no new claims), disabled (sent nothing). */
  drained: boolean;
  disabled: boolean;
}

export interface FleetCounts {
  total: number;
  building: number;
  ready: number;
  failed: number;
  claimed: number;
  /** Ready, healthy and unclaimed (and, for enrolled hosts, neither drained, disabled nor unreachable). */
  free: number;
  /** Enrolled hosts whose agent stopped calling in (three missed check-ins). */
  unreachable: number;
  /** Students in the waiting line. */
  waiting: number;
}

export interface FleetView {
  workshop: string;
  at: string;
  /** The run building labs now, whose finished builds are "this run" in the estimate's basis. */
  runId: string | null;
  counts: FleetCounts;
  estimate: FleetEstimate;
  /** The labs of this page, in host order (all of them without a limit). */
  labs: FleetLab[];
  /**
   * The page: how many labs at most, where it starts (0-based, in host order), the cursor of the next page
   * (null on the last) and of the previous one ("" for the first page, null on the first page itself).
   */
  page: { limit: number; start: number; next: string | null; prev: string | null };
}

/** The most labs one page holds, and how many a page holds unless asked. */
export const FLEET_PAGE_MAX = 500;
export const FLEET_PAGE_DEFAULT = 100;

export interface FleetPageOptions {
  /** At most this many labs (1 to FLEET_PAGE_MAX); without it, every lab. */
  limit?: number;
  /** The `page.next` of the previous page: the labs after it. */
  cursor?: string;
}

/** A page's cursor: the last lab's id, base64url (opaque to callers). */
export function fleetCursor(hostId: string): string {
  return Buffer.from(hostId, "utf8").toString("base64url");
}

/** The lab id a cursor names, or undefined when it is not one labfleet made. */
export function parseFleetCursor(cursor: string): string | undefined {
  const id = Buffer.from(cursor, "base64url").toString("utf8");
  return /^[a-z0-9][a-z0-9.-]{0,62}$/.test(id) && fleetCursor(id) === cursor ? id : undefined;
}

const BUILDING = new Set(["pending", "provisioning", "deploying"]);

/** The cursor of the page before the one starting at `start`: "" for the first page, null when there is none. */
function prevCursor(hosts: HostItem[], start: number, limit: number): string | null {
  if (start <= 0) return null;
  const prevStart = Math.max(0, start - limit);
  const before = hosts[prevStart - 1];
  return prevStart === 0 || !before ? "" : fleetCursor(before.hostId);
}

export async function fleetView(name: string, page: FleetPageOptions = {}): Promise<FleetView> {
  assertActor("instructor", "system");
  const { store, clock } = useDeps();
  const w = await getWorkshop(name);
  const spec = w.spec as Workshop;
  const [hostItems, claims, results, waiting, builds, run] = await Promise.all([
    listHosts(name),
    store.claim.query.byWorkshop({ workshop: name }).go({ pages: "all" }),
    store.checkResult.query.byWorkshop({ workshop: name }).go({ pages: "all" }),
    waitingCount(name),
    labBuilds(spec),
    w.activeRunId ? store.run.get({ workshop: name, runId: w.activeRunId }).go() : undefined,
  ]);
  const now = clock.now();
  const hosts = hostItems.filter((h) => h.state !== "torn_down").sort((a, b) => byNumber(a.hostId, b.hostId));
  const claimOf = new Map(claims.data.map((c) => [c.hostId, c]));
  const checkCount = spec.lab.checks?.length ?? 0;
  const runId = w.activeRunId ?? null;
  const estimate = estimateFleet(
    hosts.map((h) => ({
      id: h.hostId,
      state: h.state,
      deployStartedAt: h.deployStartedAt,
      phases: h.phases ?? [],
    })),
    builds,
    runId ?? undefined,
    now,
    // The deploy step's waves: the run's own hosts, as many at once as it deploys.
    {
      concurrency: run?.data?.deployConcurrency ?? run?.data?.concurrency ?? spec.lab.concurrency,
      startedAt: run?.data?.startedAt,
    },
  );
  // The page: the labs after the cursor's, at most `limit`; counts and the estimate stay the whole fleet's.
  const after = page.cursor === undefined ? undefined : parseFleetCursor(page.cursor);
  const start = after === undefined ? 0 : hosts.findIndex((h) => byNumber(h.hostId, after) > 0);
  const limit = page.limit ?? Math.max(hosts.length, 1);
  const pageHosts = start < 0 ? [] : hosts.slice(start, start + limit);
  const more = start >= 0 && start + limit < hosts.length;
  const labs = pageHosts.map((h): FleetLab => {
    const phases = h.phases ?? [];
    const done = phases.filter((p) => p.state === "done").length;
    const total = Math.max(phases.length, 1);
    const claim = claimOf.get(h.hostId);
    const passed = claim
      ? new Set(
          results.data
            .filter((r) => r.hostId === h.hostId && r.claimedAt === claim.claimedAt && r.passed)
            .map((r) => r.check),
        ).size
      : 0;
    return {
      id: h.hostId,
      state: h.state,
      phase: h.state === "ready" ? "ready" : (h.phase ?? "waiting"),
      phasesDone: h.state === "ready" ? total : done,
      phasesTotal: total,
      phases,
      health: h.state === "ready" && h.health ? (h.health === "failing" ? "flagged" : "ok") : null,
      healthError: h.state === "ready" && h.health === "failing" ? (h.healthError ?? null) : null,
      student: claim?.name ?? null,
      checks: claim && checkCount > 0 ? { passed, total: checkCount } : null,
      expiry: h.expiry ?? w.expiry ?? null,
      deployStartedAt: h.deployStartedAt ?? null,
      readyAt: h.readyAt ?? null,
      endedAt: h.state === "ready" ? (h.readyAt ?? null) : h.state === "failed" ? h.updatedAt : null,
      error: h.error ?? null,
      remainingSeconds: estimate.kind === "estimated" ? (estimate.hosts[h.hostId] ?? null) : null,
      reachable: reachableAt(h, now) ?? null,
      lastSeenAt: h.lastSeenAt ?? null,
      drained: h.drained ?? false,
      disabled: h.disabled ?? false,
    };
  });
  const ready = hosts.filter((h) => h.state === "ready");
  return {
    workshop: name,
    at: now.toISOString(),
    runId,
    counts: {
      total: hosts.length,
      building: hosts.filter((h) => BUILDING.has(h.state)).length,
      ready: ready.length,
      failed: hosts.filter((h) => h.state === "failed").length,
      claimed: hosts.filter((h) => claimOf.has(h.hostId)).length,
      free: ready.filter((h) => h.health !== "failing" && !claimOf.has(h.hostId) && takesNewClaims(h, now))
        .length,
      unreachable: hosts.filter((h) => reachableAt(h, now) === "unreachable").length,
      waiting,
    },
    estimate:
      estimate.kind === "estimated" && page.limit !== undefined
        ? {
            ...estimate,
            hosts: Object.fromEntries(
              pageHosts.flatMap((h) => {
                const v = estimate.hosts[h.hostId];
                return v === undefined ? [] : [[h.hostId, v]];
              }),
            ),
          }
        : estimate,
    labs,
    page: {
      limit,
      start: start < 0 ? hosts.length : start,
      next: more && labs.length > 0 ? fleetCursor((labs.at(-1) as FleetLab).id) : null,
      prev: prevCursor(hosts, start < 0 ? hosts.length : start, limit),
    },
  };
}
