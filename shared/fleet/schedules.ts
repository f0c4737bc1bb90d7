import { withActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { ScheduleItem } from "../store/entities.ts";
import { isConditionalFailure, startRun } from "./runs.ts";

/**
 * TTL schedules. The record is the source of truth: the local scheduler runs due records; in the cloud an
 * EventBridge Scheduler one-time schedule mirrors it (Deps.scheduleMirror, see eventbridge-schedules.ts) and
 * the sweeper runs the due records every 5 minutes. A schedule fires once: `pending -> fired` is a
 * conditional write, so two schedulers never both tear a workshop down.
 *
 * The mirror is written after the record. A mirror call that fails is logged, never thrown: the record still
 * fires through the sweeper, a few minutes late at worst, and a stale mirror that fires early finds the record
 * not due and does nothing.
 */
export async function ensureTeardownSchedule(workshop: string, at: string): Promise<ScheduleItem> {
  const { store } = useDeps();
  const existing = (await store.schedule.get({ workshop, kind: "teardown" }).go()).data;
  const record =
    existing?.state === "pending"
      ? existing
      : (await store.schedule.put({ workshop, kind: "teardown", at, state: "pending" }).go()).data;
  // Also for a record that was pending already: a repeated up re-creates a mirror that was lost.
  await mirrorPut(workshop, record.at);
  return record;
}

export async function cancelSchedules(workshop: string): Promise<void> {
  const { store } = useDeps();
  const existing = (await store.schedule.get({ workshop, kind: "teardown" }).go()).data;
  if (!existing) return;
  if (existing.state === "pending") {
    await store.schedule
      .patch({ workshop, kind: "teardown" })
      .set({ state: "cancelled", at: existing.at })
      .where(({ state }, { eq }) => eq(state, "pending"))
      .go()
      .catch(() => undefined);
  }
  // A fired schedule deleted itself (ActionAfterCompletion DELETE); removing it again is a no-op.
  await mirrorRemove(workshop);
}

/**
 * Moves a workshop's pending teardown from `from` to `to`: a conditional write that fails when the record is no
 * longer pending at `from` (it fired, was cancelled or was moved meanwhile), then the mirror.
 * Returns how the mirror fared: `none` when this runtime has no mirror.
 */
export async function moveTeardownSchedule(
  workshop: string,
  from: string,
  to: string,
): Promise<{ mirror: "moved" | "none" | "error"; detail?: string }> {
  const { store, scheduleMirror } = useDeps();
  try {
    await store.schedule
      .patch({ workshop, kind: "teardown" })
      .set({ state: "pending", at: to })
      .where(({ state, at }, { eq }) => `${eq(state, "pending")} AND ${eq(at, from)}`)
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    throw new VisibleError(
      "conflict",
      "schedule.changed",
      `the teardown of ${workshop} changed meanwhile (it fired, was cancelled or was moved); check its status and try again`,
    );
  }
  if (!scheduleMirror) return { mirror: "none" };
  const error = await mirrorPut(workshop, to);
  return error === undefined ? { mirror: "moved" } : { mirror: "error", detail: error };
}

/** Writes the mirror when there is one; returns the error message instead of throwing. */
async function mirrorPut(workshop: string, at: string): Promise<string | undefined> {
  const { scheduleMirror } = useDeps();
  if (!scheduleMirror) return undefined;
  try {
    await scheduleMirror.put(workshop, new Date(at));
    return undefined;
  } catch (err) {
    log.error("teardown schedule mirror failed; the sweeper fires the record instead", {
      workshop,
      error: errorMessage(err),
    });
    return errorMessage(err);
  }
}

async function mirrorRemove(workshop: string): Promise<void> {
  const { scheduleMirror } = useDeps();
  if (!scheduleMirror) return;
  try {
    await scheduleMirror.remove(workshop);
  } catch (err) {
    // Harmless if it stays: when it fires it finds the record not pending.
    log.warn("removing the teardown schedule mirror failed", { workshop, error: errorMessage(err) });
  }
}

export async function dueSchedules(): Promise<ScheduleItem[]> {
  const { store, clock } = useDeps();
  const now = isoNow(clock);
  const pending = (await store.schedule.query.due({ state: "pending" }).go({ pages: "all" })).data;
  return pending.filter((s) => s.at <= now);
}

/**
 * Claims a due schedule and starts its run; false when another scheduler claimed it first, or when the
 * schedule was moved (`labfleet extend`) after it was read: the claim is conditional on both state and time.
 */
export async function fireSchedule(s: ScheduleItem): Promise<boolean> {
  const { store, clock } = useDeps();
  try {
    await store.schedule
      .patch({ workshop: s.workshop, kind: s.kind })
      .set({ state: "fired", at: s.at, firedAt: isoNow(clock) })
      .where(({ state, at }, { eq }) => `${eq(state, "pending")} AND ${eq(at, s.at)}`)
      .go();
  } catch (err) {
    if (isConditionalFailure(err)) return false;
    throw err;
  }
  const run = await withActor({ type: "system", id: "scheduler" }, () => startRun(s.workshop, "teardown"));
  await store.schedule.patch({ workshop: s.workshop, kind: s.kind }).set({ runId: run.runId }).go();
  log.info("schedule fired", { workshop: s.workshop, kind: s.kind, runId: run.runId });
  return true;
}

/**
 * Fires one workshop's teardown schedule if it is pending and due: what the EventBridge schedule's target does.
 * The record decides; a mirror that fired early (the record was moved) or late (cancelled) changes nothing.
 */
export async function fireScheduleOf(
  workshop: string,
): Promise<{ workshop: string; fired: boolean; reason: string }> {
  const { store, clock } = useDeps();
  const s = (await store.schedule.get({ workshop, kind: "teardown" }).go()).data;
  const answer = (fired: boolean, reason: string) => {
    log.info(fired ? "scheduled teardown fired" : "scheduled teardown skipped", { workshop, reason });
    return { workshop, fired, reason };
  };
  if (!s) return answer(false, "no teardown schedule");
  if (s.state !== "pending") return answer(false, `the schedule is ${s.state}`);
  if (s.at > isoNow(clock)) return answer(false, `not due until ${s.at}`);
  return (await fireSchedule(s))
    ? answer(true, `due at ${s.at}`)
    : answer(false, "another scheduler fired it first");
}

/** One pass of the scheduler: fires every due schedule. Errors are logged per schedule, never thrown. */
export async function runDueSchedules(): Promise<number> {
  let fired = 0;
  for (const s of await dueSchedules()) {
    try {
      if (await fireSchedule(s)) fired++;
    } catch (err) {
      log.error("schedule failed", { workshop: s.workshop, kind: s.kind, error: errorMessage(err) });
    }
  }
  return fired;
}
