/**
 * Times as people read them, one format everywhere text shows a time: durations (`45 s`, `3 min 05 s`,
 * `1 h 05 min`, `2 d 03 h`), times relative to now (`in 5 h 58 min`, `3 min ago`, `now`) and clock times in
 * the reader's time zone (`12:43` today, `2026-12-02 12:43` on another day). Pure: `now` and the time zone
 * are arguments (the time zone defaults to the process's, i.e. `TZ` or the machine's).
 */

export type TimeInput = string | number | Date;

export interface ClockOptions {
  /** An IANA zone (`Europe/Berlin`); the process's own when absent. */
  timeZone?: string;
  /** `12:43:07` instead of `12:43`. */
  seconds?: boolean;
}

function toMs(t: TimeInput): number {
  return t instanceof Date ? t.getTime() : typeof t === "number" ? t : Date.parse(t);
}

const pad = (n: number) => String(n).padStart(2, "0");

/** A length of time: `45 s`, `3 min 05 s`, `1 h 05 min`, `2 d 03 h`; "" for nothing measurable. */
export function formatDuration(seconds: number | undefined): string {
  if (seconds === undefined || !Number.isFinite(seconds) || seconds < 0) return "";
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const minutes = Math.floor(s / 60);
  if (minutes < 60) return `${minutes} min ${pad(s % 60)} s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return `${hours} h ${pad(minutes % 60)} min`;
  return `${Math.floor(hours / 24)} d ${pad(hours % 24)} h`;
}

/**
 * A span as a relative time needs it, coarser than a duration: seconds under a minute, then whole minutes
 * (`3 min`), then hours and minutes (`5 h 58 min`), then days and hours (`2 d 3 h`).
 */
function span(ms: number): string {
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s} s`;
  const minutes = Math.floor(s / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 24) return `${hours} h ${pad(minutes % 60)} min`;
  return `${Math.floor(hours / 24)} d ${hours % 24} h`;
}

/** `in 5 h 58 min`, `3 min ago`, `now` (within a second); "" for a time that does not parse. */
export function formatRelative(t: TimeInput, now: TimeInput = Date.now()): string {
  const ms = toMs(t) - toMs(now);
  if (!Number.isFinite(ms)) return "";
  if (Math.abs(ms) < 1000) return "now";
  return ms > 0 ? `in ${span(ms)}` : `${span(-ms)} ago`;
}

/** The time left until `t`: `5 h 58 min`, or `over` once it has passed. */
export function formatTimeLeft(t: TimeInput, now: TimeInput = Date.now()): string {
  const ms = toMs(t) - toMs(now);
  if (!Number.isFinite(ms)) return "";
  return ms <= 0 ? "over" : span(ms);
}

function parts(ms: number, timeZone: string | undefined): Record<string, string> {
  const f = new Intl.DateTimeFormat("en-CA", {
    ...(timeZone ? { timeZone } : {}),
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hourCycle: "h23",
  });
  return Object.fromEntries(f.formatToParts(new Date(ms)).map((p) => [p.type, p.value]));
}

/** A clock time in the reader's zone: `12:43` when `t` is today there, `2026-12-02 12:43` otherwise. */
export function formatClock(t: TimeInput, now: TimeInput = Date.now(), opts: ClockOptions = {}): string {
  const ms = toMs(t);
  if (!Number.isFinite(ms)) return "";
  const p = parts(ms, opts.timeZone);
  const today = parts(toMs(now), opts.timeZone);
  const clock = `${p.hour}:${p.minute}${opts.seconds ? `:${p.second}` : ""}`;
  const sameDay = p.year === today.year && p.month === today.month && p.day === today.day;
  return sameDay ? clock : `${p.year}-${p.month}-${p.day} ${clock}`;
}

/** Both: `12:43 (in 5 h 58 min)`, what a deadline or an expiry shows. */
export function formatWhen(t: TimeInput, now: TimeInput = Date.now(), opts: ClockOptions = {}): string {
  const clock = formatClock(t, now, opts);
  return clock ? `${clock} (${formatRelative(t, now)})` : "";
}
