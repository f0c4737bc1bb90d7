import { serveQueueAfter } from "../portal/queue.ts";
import { forgetStudentReads } from "../portal/reads.ts";
import { swapLab } from "../portal/swap.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { mapLimit } from "../runtime/concurrency.ts";
import { timeLeft } from "../runtime/deadline.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { transportFor } from "./hosts.ts";
import { lastLines, runHealth } from "./lab.ts";
import { isConditionalFailure } from "./runs.ts";
import { secretRedactor } from "./secrets.ts";
import { POLL_CONCURRENCY, POLL_MIN_HOST_MS } from "./up.ts";

/**
 * Health while in use: every ready lab (claimed or free) of a running workshop runs `lab.health` again every
 * `lab.health_interval_seconds`. One failure may be a blip; HEALTH_FAILURES_TO_FLAG failures in a row flag the
 * lab `failing` (an event, the instructor's views, its student's lab page), and the next check that passes
 * clears the flag. A failing lab is never given to anyone (a claim or a swap). With `portal.auto_swap` a
 * flagged claimed lab's student is moved to a free lab (shared/portal/swap.ts) as soon as one is free.
 *
 * The pass runs from the local runtime's periodic timer and from the cloud's sweeper (every 5 minutes): checks
 * run POLL_CONCURRENCY at a time, each within IN_USE_HEALTH_TIMEOUT_MS, and none starts with less than
 * POLL_MIN_HOST_MS of the caller's deadline left (the labs checked longest ago go first, so the next pass
 * starts with the ones this one did not reach).
 */

export const HEALTH_FAILURES_TO_FLAG = 2;
/** One in-use check's time limit: a lab that takes longer to answer is not answering. */
export const IN_USE_HEALTH_TIMEOUT_MS = 30_000;

export interface HealthSummary {
  checked: number;
  /** `workshop/host` of the labs flagged failing in this pass. */
  flagged: string[];
  /** `workshop/host` of the labs that passed again after being flagged. */
  recovered: string[];
  /** `workshop/from->to` of the automatic swaps. */
  swapped: string[];
  errors: { workshop: string; hostId?: string; error: string }[];
}

interface Due {
  spec: Workshop;
  host: HostItem;
}

/**
 * Whether a ready lab's in-use check is due now: `lab.health_interval_seconds` after its last check, or after it
 * became ready. Only labs a poll found ready (they have an address and a `readyAt`) are checked.
 */
export function healthDue(spec: Workshop, host: HostItem, now: Date): boolean {
  if (!spec.lab.health || !spec.lab.health_interval_seconds || host.state !== "ready") return false;
  if (!host.address || !host.readyAt) return false;
  const last = host.healthCheckedAt ?? host.readyAt;
  return now.getTime() - Date.parse(last) >= spec.lab.health_interval_seconds * 1000;
}

export async function healthPass(): Promise<HealthSummary> {
  assertActor("system");
  const { store, clock } = useDeps();
  const summary: HealthSummary = { checked: 0, flagged: [], recovered: [], swapped: [], errors: [] };
  const workshops = (await store.workshop.query.all({}).go({ pages: "all" })).data.filter(
    (w) => w.state !== "torn_down" && w.state !== "tearing_down" && w.state !== "draft",
  );
  const due: Due[] = [];
  for (const w of workshops) {
    const spec = w.spec as Workshop;
    if (!spec.lab?.health || !spec.lab.health_interval_seconds) continue;
    const hosts = (await store.host.query.byWorkshop({ workshop: w.name }).go({ pages: "all" })).data;
    for (const host of hosts) if (healthDue(spec, host, clock.now())) due.push({ spec, host });
  }
  due.sort((a, b) => (a.host.healthCheckedAt ?? "").localeCompare(b.host.healthCheckedAt ?? ""));
  const redactors = new Map<string, Promise<(t: string) => string>>();
  const redactorOf = (spec: Workshop) => {
    const known = redactors.get(spec.name);
    if (known) return known;
    const r = secretRedactor(spec);
    redactors.set(spec.name, r);
    return r;
  };
  /** Workshops where a lab was flagged or cleared (the board changes), and those where a free lab came back. */
  const changed = new Set<string>();
  const freed = new Set<string>();
  await mapLimit(due, POLL_CONCURRENCY, async ({ spec, host }) => {
    if (timeLeft() < POLL_MIN_HOST_MS) return;
    try {
      const outcome = await checkInUse(spec, host, await redactorOf(spec));
      if (outcome === "skipped") return;
      summary.checked++;
      const id = `${spec.name}/${host.hostId}`;
      if (outcome === "flagged") summary.flagged.push(id);
      if (outcome === "recovered") summary.recovered.push(id);
      if (outcome === "flagged" || outcome === "recovered") changed.add(spec.name);
      if (outcome === "recovered") freed.add(spec.name);
      if (spec.portal.auto_swap && (outcome === "flagged" || outcome === "still_failing")) {
        const moved = await autoSwap(spec.name, host.hostId);
        if (moved) summary.swapped.push(`${spec.name}/${host.hostId}->${moved}`);
      }
    } catch (err) {
      log.error("health pass: a lab's check failed", {
        workshop: spec.name,
        hostId: host.hostId,
        error: errorMessage(err),
      });
      summary.errors.push({ workshop: spec.name, hostId: host.hostId, error: errorMessage(err) });
    }
  });
  for (const name of changed) forgetStudentReads(name);
  // A lab healthy again is free for students again: the waiting line gets it.
  for (const name of freed) await serveQueueAfter(name);
  if (summary.checked || summary.errors.length)
    log.info("health pass done", {
      checked: summary.checked,
      flagged: summary.flagged.length,
      recovered: summary.recovered.length,
      swapped: summary.swapped.length,
      errors: summary.errors.length,
    });
  return summary;
}

type Outcome = "skipped" | "ok" | "recovered" | "first_failure" | "flagged" | "still_failing";

/** Runs one lab's check and records it on the host (only while the host is still ready). */
async function checkInUse(spec: Workshop, host: HostItem, redact: (t: string) => string): Promise<Outcome> {
  const { store, clock, providers } = useDeps();
  const provider = providers[spec.provider.type];
  if (!provider) return "skipped";
  let failure: string | undefined;
  const t = transportFor(spec, provider, host);
  try {
    const r = await runHealth(t, spec, host.hostId, IN_USE_HEALTH_TIMEOUT_MS);
    if (r.exitCode !== 0) failure = lastLines(r);
  } catch (err) {
    // Out of the caller's time: not a verdict on the lab, the next pass checks it first.
    if (err instanceof VisibleError && err.code === "host.out_of_time") return "skipped";
    failure = `the lab could not be reached: ${errorMessage(err)}`;
  } finally {
    await t.close?.();
  }
  const key = { workshop: spec.name, hostId: host.hostId };
  const now = isoNow(clock);
  try {
    if (failure === undefined) {
      await store.host
        .patch(key)
        .set({ health: "ok", healthFailures: 0, healthCheckedAt: now })
        .remove(["healthError"])
        .where((a, op) => op.eq(a.state, "ready"))
        .go();
      if (host.health !== "failing") return "ok";
      log.info("lab healthy again", key);
      await recordEvent({ ...key, type: "lab.healthy" });
      return "recovered";
    }
    const reason = redact(failure).slice(0, 2000);
    const r = await store.host
      .patch(key)
      .add({ healthFailures: 1 })
      .set({ healthCheckedAt: now, healthError: reason })
      .where((a, op) => op.eq(a.state, "ready"))
      .go({ response: "all_new" });
    if ((r.data.healthFailures ?? 0) < HEALTH_FAILURES_TO_FLAG) return "first_failure";
    if (r.data.health === "failing") return "still_failing";
    await store.host
      .patch(key)
      .set({ health: "failing" })
      .where((a, op) => `${op.eq(a.state, "ready")} AND ${op.ne(a.health, "failing")}`)
      .go();
    log.warn("lab failing its health check", { ...key, error: reason.slice(0, 500) });
    await recordEvent({ ...key, type: "lab.unhealthy", detail: { reason: reason.slice(0, 300) } });
    return "flagged";
  } catch (err) {
    // Rebuilt, torn down or flagged meanwhile: this check no longer applies.
    if (isConditionalFailure(err)) return "skipped";
    throw err;
  }
}

/** portal.auto_swap: the failing lab's student (if it has one) moves to a free lab; none free, it stays flagged. */
async function autoSwap(workshop: string, hostId: string): Promise<string | undefined> {
  const claimed = (await useDeps().store.claim.get({ workshop, hostId }).go()).data;
  if (!claimed) return undefined;
  try {
    return (await swapLab(workshop, { hostId })).to;
  } catch (err) {
    if (!(err instanceof VisibleError) || err.kind !== "conflict") throw err;
    log.warn("automatic swap not possible", { workshop, hostId, reason: err.code });
    return undefined;
  }
}
