import { type EventView, listEvents, newestEvents } from "../../shared/fleet/events.ts";

/**
 * A workshop's activity list: its event records (shared/fleet/events.ts) as short sentences, newest first.
 * The page shows the newest ACTIVITY_SHOWN; its live endpoint then sends the events after the newest id the
 * page has (`?after=`), which the script puts at the top of the list.
 */

export const ACTIVITY_SHOWN = 50;
/** The newest `n` events, newest first, and the newest id (the page's cursor for its live endpoint). */
export async function recentEvents(
  workshop: string,
  n = ACTIVITY_SHOWN,
): Promise<{ events: EventView[]; last: string | null }> {
  const events = await newestEvents(workshop, n);
  return { events, last: events[0]?.id ?? null };
}

/** The events after `after` (oldest first, as many as one poll takes) and the new cursor. */
export function eventsAfter(workshop: string, after: string | undefined) {
  return listEvents(workshop, { ...(after ? { after } : {}), limit: 200 });
}

export { eventLabel, eventParts, eventSentence } from "../../shared/fleet/event-sentences.ts";
