import { monotonicFactory } from "ulid";
import { actorName } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { EVENT_RETENTION_DAYS, type EVENT_TYPES, type EventItem } from "../store/entities.ts";

export type EventType = (typeof EVENT_TYPES)[number];

// Ids from one process never go backwards, even within a millisecond, so `after=<last id>` misses nothing
// this process wrote.
const ulid = monotonicFactory();

export interface EventInput {
  workshop: string;
  type: EventType;
  hostId?: string;
  runId?: string;
  /**
   * Small, and never a secret, an email or a credential: ids, states, reasons, the student's display name
   * (`student`). `by` (who did it) is filled in from the actor when the recorder leaves it out.
   */
  detail?: Record<string, unknown>;
}

export interface EventView {
  id: string;
  workshop: string;
  type: EventType;
  at: string;
  hostId: string | null;
  runId: string | null;
  detail: Record<string, unknown>;
}

/**
 * Records a state change, with who did it (`detail.by`: the acting instructor's name, "labfleet" or
 * "student", see actorName). An event is a by-product: failing to record one is logged and never fails the
 * operation that caused it.
 */
export async function recordEvent(e: EventInput): Promise<void> {
  const { store, clock } = useDeps();
  const now = clock.now();
  const detail = { by: actorName(), ...e.detail };
  try {
    await store.event
      .create({
        workshop: e.workshop,
        eventId: ulid(now.getTime()),
        type: e.type,
        at: isoNow(clock),
        ...(e.hostId ? { hostId: e.hostId } : {}),
        ...(e.runId ? { runId: e.runId } : {}),
        detail,
        expiresAt: Math.floor(now.getTime() / 1000) + EVENT_RETENTION_DAYS * 86_400,
      })
      .go();
  } catch (err) {
    log.warn("event not recorded", { workshop: e.workshop, type: e.type, error: errorMessage(err) });
  }
}

export function eventView(e: EventItem): EventView {
  return {
    id: e.eventId,
    workshop: e.workshop,
    type: e.type,
    at: e.at,
    hostId: e.hostId ?? null,
    runId: e.runId ?? null,
    detail: (e.detail as Record<string, unknown> | undefined) ?? {},
  };
}

/** A workshop's newest `n` events, newest first, in one read: what a page shows before it polls. */
export async function newestEvents(workshop: string, n: number): Promise<EventView[]> {
  const limit = Math.min(Math.max(n, 1), 500);
  const r = await useDeps().store.event.query.byWorkshop({ workshop }).go({ order: "desc", limit });
  return r.data.map(eventView);
}

/** A workshop's events after `after` (an event id), oldest first: what a live view polls for. */
export async function listEvents(
  workshop: string,
  opts: { after?: string; limit?: number } = {},
): Promise<{ events: EventView[]; last: string | null }> {
  const { store } = useDeps();
  const limit = Math.min(Math.max(opts.limit ?? 100, 1), 500);
  const q = store.event.query.byWorkshop({ workshop });
  const r = await (opts.after ? q.gt({ eventId: opts.after }) : q).go({ limit });
  const events = r.data.map(eventView);
  return { events, last: events.at(-1)?.id ?? opts.after ?? null };
}
