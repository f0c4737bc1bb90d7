import { formatDuration, formatTimeLeft } from "../../shared/runtime/time-format.ts";

/** Small, pure formatting helpers for the console's pages (unit-free numbers into words a reader scans). */

/** "45 s", "3 min 05 s", "2 h 07 min" (shared/runtime/time-format.ts); undefined stays undefined. */
export function duration(seconds: number | undefined): string | undefined {
  return formatDuration(seconds) || undefined;
}

/** "5 h 12 min left", "2 d 3 h left", "expired"; "no expiry" without an expiry. */
export function timeLeft(expiry: string | undefined, now: Date): string {
  if (!expiry) return "no expiry";
  const left = formatTimeLeft(expiry, now);
  if (!left) return "no expiry";
  if (left === "over") return "expired";
  // Under a minute still reads as a minute: the console's lists are not redrawn every second.
  return `${/^\d+ s$/.test(left) ? "1 min" : left} left`;
}

/** Host ids typed into a field: commas, spaces or newlines between them. */
export function hostList(text: string): string[] {
  return [...new Set(text.split(/[\s,]+/).filter(Boolean))];
}
