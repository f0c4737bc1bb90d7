/**
 * The fleet view: every lab of a workshop in one list (build state and phase, health, who holds it, their
 * checks, time left, the phase times of its timeline), the counts an instructor scans first, and the ready
 * estimate. One read each of the workshop, its hosts, claims, check results, waiting line, the run building and
 * the lab's recorded builds, however many labs there are.
 */
import { waitingCount } from "../portal/queue.ts";
import { assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
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
}

export interface FleetCounts {
  total: number;
  building: number;
  ready: number;
  failed: number;
  claimed: number;
  /** Ready, healthy and unclaimed. */
  free: number;
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
  labs: FleetLab[];
}

const BUILDING = new Set(["pending", "provisioning", "deploying"]);
const byNumber = (a: string, b: string) => a.localeCompare(b, undefined, { numeric: true });

export async function fleetView(name: string): Promise<FleetView> {
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
  const labs = hosts.map((h): FleetLab => {
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
      free: ready.filter((h) => h.health !== "failing" && !claimOf.has(h.hostId)).length,
      waiting,
    },
    estimate,
    labs,
  };
}
