/** Runs `fn` over `items` with at most `limit` in flight; results keep the input order. */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R>,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i] as T, i);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, worker));
  return results;
}

/**
 * Joins concurrent calls for the same key onto one in-flight promise (nothing is kept once it settles, so a
 * caller never sees a result older than its own call's start by more than that one round trip). A
 * classroom loading the same board at once makes one read, not thirty. Callers must not mutate the result.
 */
export function singleFlight<A extends unknown[], R>(
  keyOf: (...args: A) => string,
  fn: (...args: A) => Promise<R>,
): (...args: A) => Promise<R> {
  const inFlight = new Map<string, Promise<R>>();
  return (...args: A) => {
    const key = keyOf(...args);
    const pending = inFlight.get(key);
    if (pending) return pending;
    const p = fn(...args).finally(() => inFlight.delete(key));
    inFlight.set(key, p);
    return p;
  };
}

/**
 * Like singleFlight, but a call joins only a read that starts after the call was made, so what it reads
 * reflects every write made before it (a push that just marked its lab ready is counted). Calls made while a
 * read runs share the next read, which starts once that one settles: a burst of calls makes two or three
 * reads, not one each. Callers must not mutate the result.
 */
export function freshFlight<A extends unknown[], R>(
  keyOf: (...args: A) => string,
  fn: (...args: A) => Promise<R>,
): (...args: A) => Promise<R> {
  const flights = new Map<string, { running: Promise<R>; next?: Promise<R> }>();
  const start = (key: string, args: A): Promise<R> => {
    const running = fn(...args);
    const flight: { running: Promise<R>; next?: Promise<R> } = { running };
    flights.set(key, flight);
    const settled = () => {
      if (flights.get(key) === flight && !flight.next) flights.delete(key);
    };
    running.then(settled, settled);
    return running;
  };
  return (...args: A) => {
    const key = keyOf(...args);
    const flight = flights.get(key);
    if (!flight) return start(key, args);
    const ignore = () => {};
    flight.next ??= flight.running.then(ignore, ignore).then(() => start(key, args));
    return flight.next;
  };
}

export interface ShortCache<A extends unknown[], R> {
  (...args: A): Promise<R>;
  /** Reads through to the store, and keeps what it read. */
  fresh(...args: A): Promise<R>;
  /** Replaces the kept value (after this process wrote it). */
  put(value: R, ...args: A): void;
  /** Drops what is kept for these arguments, or everything. */
  forget(...args: A | []): void;
}

/**
 * Keeps each result for `ttlMs` (and joins concurrent loads), for reads where a second-old answer is as good
 * as a fresh one. Writes made in this process should `put` or `forget`; other processes' writes show
 * within `ttlMs`. Entries past their time are dropped as the cache grows.
 */
export function shortCache<A extends unknown[], R>(opts: {
  key: (...args: A) => string;
  load: (...args: A) => Promise<R>;
  ttlMs: number;
  max?: number;
}): ShortCache<A, R> {
  const kept = new Map<string, { value: Promise<R>; at: number }>();
  const max = opts.max ?? 10_000;
  const keep = (key: string, value: Promise<R>) => {
    if (kept.size >= max) {
      const now = performance.now();
      for (const [k, e] of kept) if (now - e.at >= opts.ttlMs) kept.delete(k);
      if (kept.size >= max) kept.clear();
    }
    const entry = { value, at: performance.now() };
    kept.set(key, entry);
    // A failed load is not kept: the next call tries again.
    value.catch(() => kept.get(key) === entry && kept.delete(key));
  };
  const fresh = (...args: A) => {
    const value = opts.load(...args);
    keep(opts.key(...args), value);
    return value;
  };
  const read = (...args: A) => {
    const e = kept.get(opts.key(...args));
    if (e && performance.now() - e.at < opts.ttlMs) return e.value;
    return fresh(...args);
  };
  return Object.assign(read, {
    fresh,
    put: (value: R, ...args: A) => keep(opts.key(...args), Promise.resolve(value)),
    forget: (...args: A | []) => {
      if (args.length === 0) kept.clear();
      else kept.delete(opts.key(...(args as A)));
    },
  });
}

/** Waits `ms`, or less: it resolves early (never rejects) once `signal` aborts. */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}
