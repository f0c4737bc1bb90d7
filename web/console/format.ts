/** Small, pure formatting helpers for the console's pages (unit-free numbers into words a reader scans). */

/** "45 s", "3 min 05 s", "2 h 07 min"; undefined stays undefined. */
export function duration(seconds: number | undefined): string | undefined {
  if (seconds === undefined || !Number.isFinite(seconds) || seconds < 0) return undefined;
  const s = Math.round(seconds);
  if (s < 60) return `${s} s`;
  const minutes = Math.floor(s / 60);
  if (minutes < 60) return `${minutes} min ${String(s % 60).padStart(2, "0")} s`;
  const hours = Math.floor(minutes / 60);
  return `${hours} h ${String(minutes % 60).padStart(2, "0")} min`;
}

/** "5 h 12 min left", "2 days 3 h left", "expired"; "none" without an expiry. */
export function timeLeft(expiry: string | undefined, now: Date): string {
  if (!expiry) return "no expiry";
  const ms = Date.parse(expiry) - now.getTime();
  if (!Number.isFinite(ms)) return "no expiry";
  if (ms <= 0) return "expired";
  const minutes = Math.floor(ms / 60_000);
  const days = Math.floor(minutes / 1440);
  const hours = Math.floor((minutes % 1440) / 60);
  const mins = minutes % 60;
  if (days > 0) return `${days} day${days === 1 ? "" : "s"} ${hours} h left`;
  if (hours > 0) return `${hours} h ${mins} min left`;
  return `${Math.max(mins, 1)} min left`;
}

/** An ISO time as "2026-05-01 10:22 UTC" (the console shows UTC, like the CLI). */
export function when(iso: string | null | undefined): string {
  if (!iso) return "";
  return `${iso.replace("T", " ").slice(0, 16)} UTC`;
}

/** An ISO time to the second, "2026-05-01 10:22:07 UTC": what an activity entry shows. */
export function whenExact(iso: string | null | undefined): string {
  if (!iso) return "";
  return `${iso.replace("T", " ").slice(0, 19)} UTC`;
}

/** Host ids typed into a field: commas, spaces or newlines between them. */
export function hostList(text: string): string[] {
  return [...new Set(text.split(/[\s,]+/).filter(Boolean))];
}
