/**
 * How much time a workshop has left, as the student pages show it: a plain time left, then a warning 30
 * minutes before the teardown and a stronger one 10 minutes before, and when the page should look again so
 * each warning appears on time (and an extend shows) without any script.
 */

/** Minutes before the teardown at which the pages warn, the first one first. */
export const WARN_MINUTES = [30, 10] as const;

/** While a warning shows, pages look again this often, so the minutes count down and an extend shows. */
export const WARNING_REFRESH_SECONDS = 60;

export type EndLevel = "time-left" | "soon" | "urgent" | "over";

export interface TimeLeft {
  level: EndLevel;
  /** When the workshop's labs are removed (ISO). */
  expiry: string;
  /** Whole minutes left, rounded up (0 once it is over). */
  minutes: number;
  /** "5 h 12 min", "3 days 2 h", "8 min"; undefined once it is over. */
  text: string | undefined;
  /** Seconds until the page should be read again; undefined when nothing changes any more. */
  refreshSeconds: number | undefined;
}

function duration(minutes: number): string {
  const days = Math.floor(minutes / 1440);
  const hours = Math.floor((minutes % 1440) / 60);
  const mins = minutes % 60;
  if (days > 0) return `${days} day${days === 1 ? "" : "s"} ${hours} h`;
  if (hours > 0) return `${hours} h ${mins} min`;
  return `${mins} min`;
}

/** The time a workshop with this expiry has left at `now`; undefined for an expiry that is not a time. */
export function timeLeft(expiry: string, now: Date): TimeLeft | undefined {
  const end = Date.parse(expiry);
  if (!Number.isFinite(end)) return undefined;
  const ms = end - now.getTime();
  if (ms <= 0) return { level: "over", expiry, minutes: 0, text: undefined, refreshSeconds: undefined };
  const minutes = Math.ceil(ms / 60_000);
  const [soon, urgent] = WARN_MINUTES;
  const level: EndLevel = ms <= urgent * 60_000 ? "urgent" : ms <= soon * 60_000 ? "soon" : "time-left";
  // Before the first warning, look again just as it is due (re-reading the expiry, which an extend moves);
  // during a warning, every minute and at the end.
  const untilWarning = Math.ceil((ms - soon * 60_000) / 1000);
  const refreshSeconds =
    level === "time-left" ? untilWarning : Math.min(WARNING_REFRESH_SECONDS, Math.ceil(ms / 1000));
  return { level, expiry, minutes, text: duration(minutes), refreshSeconds: Math.max(1, refreshSeconds) };
}
