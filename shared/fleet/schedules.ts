import { withActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { ScheduleItem } from "../store/entities.ts";
import { isConditionalFailure, startRun } from "./runs.ts";

/**
 * TTL schedules. The record is the source of truth: the local scheduler runs due records; in the cloud an
 * EventBridge Scheduler one-time schedule mirrors it. A schedule fires once: `pending -> fired` is a
 * conditional write, so two schedulers never both tear a workshop down.
 */
export async function ensureTeardownSchedule(workshop: string, at: string): Promise<ScheduleItem> {
  const { store } = useDeps();
  const existing = (await store.schedule.get({ workshop, kind: "teardown" }).go()).data;
  if (existing?.state === "pending") return existing;
  return (await store.schedule.put({ workshop, kind: "teardown", at, state: "pending" }).go()).data;
}

export async function cancelSchedules(workshop: string): Promise<void> {
  const { store } = useDeps();
  const existing = (await store.schedule.get({ workshop, kind: "teardown" }).go()).data;
  if (existing?.state !== "pending") return;
  await store.schedule
    .patch({ workshop, kind: "teardown" })
    .set({ state: "cancelled", at: existing.at })
    .where(({ state }, { eq }) => eq(state, "pending"))
    .go()
    .catch(() => undefined);
}

export async function dueSchedules(): Promise<ScheduleItem[]> {
  const { store, clock } = useDeps();
  const now = isoNow(clock);
  const pending = (await store.schedule.query.due({ state: "pending" }).go({ pages: "all" })).data;
  return pending.filter((s) => s.at <= now);
}

/** Claims a due schedule and starts its run; false when another scheduler claimed it first. */
export async function fireSchedule(s: ScheduleItem): Promise<boolean> {
  const { store, clock } = useDeps();
  try {
    await store.schedule
      .patch({ workshop: s.workshop, kind: s.kind })
      .set({ state: "fired", at: s.at, firedAt: isoNow(clock) })
      .where(({ state }, { eq }) => eq(state, "pending"))
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
