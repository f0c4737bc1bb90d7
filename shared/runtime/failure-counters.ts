import { shortCache } from "./concurrency.ts";
import { useDeps } from "./deps.ts";
import { VisibleError } from "./errors.ts";

/**
 * Counters of failed attempts in the store (the `rateCounter` entity): one item per key and window, windows
 * fixed and aligned to the clock, each item incremented atomically and removed by the table's TTL. A key's
 * count is its failures in the current window plus the previous one, so a limit of L holds over any span of
 * one window: an attacker cannot send L just before a boundary and L more just after it. A key that reached
 * its limit therefore waits until its failures fall out of both windows: between one and two windows.
 *
 * The student portal (shared/portal/rate-limit.ts) and the console's sign-in (shared/auth/sign-in-limit.ts)
 * count their failures here, under keys of their own.
 */

export interface Counts {
  /** Failures in the current window. */
  current: number;
  /** Failures in the window before it. */
  previous: number;
  /** What limits are checked against: current + previous. */
  total: number;
}

/** A refusal for too many failures: a 429, with the seconds until it lifts (the Retry-After header). */
export class RateLimited extends VisibleError {
  override name = "RateLimited";
  constructor(
    code: string,
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super("rate_limited", code, message);
  }
}

/** "1 minute", "7 minutes": how a wait is said to a person (rounded up). */
export function minutesText(seconds: number): string {
  const m = Math.max(1, Math.ceil(seconds / 60));
  return `${m} minute${m === 1 ? "" : "s"}`;
}

export interface FailureCounters {
  readonly windowSeconds: number;
  /** The key's failures now (a read at most `readTtlMs` old, or this process's own latest write). */
  count(key: string): Promise<Counts>;
  /**
   * Counts `by` more failures, atomically in the store; returns the counts after it, at least as high as
   * any this process saw before in the window.
   */
  record(key: string, by?: number): Promise<Counts>;
  /** Forgets the key's failures in both windows (an instructor lifted the hold). */
  reset(key: string): Promise<void>;
  /** When a key with these counts falls under `limit` if nothing more fails, or undefined when it is under. */
  liftsAt(counts: Counts, limit: number): Date | undefined;
  /** The start of the current window, in epoch seconds. */
  windowStart(): number;
}

export function failureCounters(opts: { windowSeconds: number; readTtlMs: number }): FailureCounters {
  const W = opts.windowSeconds;
  const windowStart = () => Math.floor(useDeps().clock.now().getTime() / 1000 / W) * W;
  // Windows are epoch seconds of the same number of digits, so their strings sort as their numbers do and
  // one query reads both windows of a key.
  const cache = shortCache({
    key: (key: string, start: number) => `${key}\n${start}`,
    load: async (key: string, start: number): Promise<Counts> => {
      const items = (
        await useDeps()
          .store.rateCounter.query.byKey({ key })
          .between({ window: String(start - W) }, { window: String(start) })
          .go()
      ).data;
      const at = (s: number) => items.find((i) => i.window === String(s))?.count ?? 0;
      const current = at(start);
      const previous = at(start - W);
      return { current, previous, total: current + previous };
    },
    ttlMs: opts.readTtlMs,
  });

  return {
    windowSeconds: W,
    windowStart,
    count: (key) => cache(key, windowStart()),
    async record(key, by = 1) {
      const start = windowStart();
      const before = await cache(key, start);
      const r = await useDeps()
        .store.rateCounter.upsert({ key, window: String(start), expiresAt: start + 2 * W })
        .add({ count: by })
        .go({ response: "all_new" });
      // Concurrent writes from this process answer in any order: one that answers late may carry a lower
      // count than one already kept. The kept count never goes down within a window (only reset lowers it).
      const kept = await cache(key, start);
      const current = Math.max(r.data.count ?? by, kept.current);
      const counts = { current, previous: before.previous, total: current + before.previous };
      cache.put(counts, key, start);
      return counts;
    },
    async reset(key) {
      const start = windowStart();
      const { store } = useDeps();
      await Promise.all([
        store.rateCounter.delete({ key, window: String(start) }).go(),
        store.rateCounter.delete({ key, window: String(start - W) }).go(),
      ]);
      cache.put({ current: 0, previous: 0, total: 0 }, key, start);
    },
    liftsAt(counts, limit) {
      if (counts.total < limit) return undefined;
      const next = windowStart() + W;
      // At the next window the previous one drops out: enough when the current window alone is under the
      // limit; otherwise the current window's failures must drop out too, a window later.
      return new Date((counts.current < limit ? next : next + W) * 1000);
    },
  };
}
