import { type EventView, listEvents, newestEvents } from "../../shared/fleet/events.ts";
import { duration } from "./format.ts";

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

const text = (v: unknown): string | undefined =>
  typeof v === "string" && v.trim() !== "" ? v.trim() : undefined;

/** One line, at most `max` characters: a long setup error stays readable in a list. */
function clip(s: string, max = 240): string {
  const line = s.replace(/\s+/g, " ");
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

const KIND_WORD: Record<string, string> = {
  up: "Up",
  deploy: "Deploy",
  retry: "Retry",
  scale: "Scale up",
  teardown: "Teardown",
};
const runWord = (kind: unknown) => KIND_WORD[text(kind) ?? ""] ?? "A run";

/** What a type is called in the list's Event column. */
export function eventLabel(type: string): string {
  return type.replace(".", " ").replace(/_/g, " ");
}

/**
 * A short sentence for an event. `detail` is whatever its recorder put there (ids, states, reasons, first
 * names); every field is optional, and a missing one leaves a shorter sentence.
 */
export function eventSentence(e: EventView): string {
  const d = e.detail;
  const host = e.hostId ?? "a host";
  const type: string = e.type;
  switch (e.type) {
    case "host.ready": {
      const took = duration(typeof d.seconds === "number" ? d.seconds : undefined);
      return `${host} is ready${took ? ` (built in ${took})` : ""}.`;
    }
    case "host.failed": {
      const reason = text(d.reason) ?? text(d.error) ?? text(d.message);
      return reason ? `${host} failed: ${clip(reason)}` : `${host} failed.`;
    }
    case "lab.claimed": {
      const by = text(d.firstName);
      if (d.how === "queue") return `Lab ${host} went to the first in the waiting line.`;
      return `Lab ${host} was claimed${by ? ` by ${clip(by, 40)}` : ""}.`;
    }
    case "queue.joined":
      return "A student joined the waiting line.";
    case "queue.left":
      return d.how === "removed"
        ? "A student was taken out of the waiting line."
        : "A student left the waiting line.";
    case "lab.released":
      return `Lab ${host} was released and is free again.`;
    case "lab.unhealthy": {
      const reason = text(d.reason);
      return `Lab ${host} is failing its health check${reason ? `: ${clip(reason)}` : "."}`;
    }
    case "lab.healthy":
      return `Lab ${host} passes its health check again.`;
    case "lab.swapped": {
      const who = text(d.name);
      const to = text(d.to);
      return `${who ? clip(who, 40) : "Its student"} moved from lab ${host}${to ? ` to ${clip(to, 60)}` : ""}; ${host} is rebuilt.`;
    }
    case "run.started": {
      const hosts = Array.isArray(d.hosts) ? d.hosts.filter((h) => typeof h === "string") : [];
      const on = hosts.length ? ` on ${clip(hosts.join(", "), 120)}` : "";
      const sizes =
        typeof d.from === "number" && typeof d.to === "number" ? ` (${d.from} → ${d.to} hosts)` : "";
      return `${runWord(d.kind)} started${sizes}${on}.`;
    }
    case "run.finished": {
      const state = text(d.state) ?? text(d.result);
      const took = duration(typeof d.durationSeconds === "number" ? d.durationSeconds : undefined);
      const error = text(d.error);
      const how = state ? ` ${state.replace(/_/g, " ")}` : " finished";
      return `${runWord(d.kind)}${how}${took ? ` after ${took}` : ""}${error ? `: ${clip(error)}` : "."}`;
    }
    case "workshop.torn_down":
      return "The workshop was torn down: its hosts and portal are gone.";
    case "exec": {
      const n = typeof d.hosts === "number" ? d.hosts : undefined;
      const cmd = text(d.command);
      const summary = text(d.summary);
      return `A command ran on ${n === undefined ? "the hosts" : `${n} host${n === 1 ? "" : "s"}`}${cmd ? `: ${clip(cmd, 80)}` : ""}${summary ? ` (${clip(summary)})` : "."}`;
    }
    case "teardown.receipt": {
      const left = Array.isArray(d.left) ? d.left.filter((l) => typeof l === "string") : [];
      const who = d.by === "sweeper" ? "The sweeper found" : "Teardown receipt:";
      if (left.length === 0) return `${who} nothing left.`;
      return `${who} ${left.length} thing${left.length === 1 ? "" : "s"} left (${clip(left.join(", "), 160)}): see the receipt for the commands that remove them.`;
    }
    default:
      return eventLabel(type);
  }
}
