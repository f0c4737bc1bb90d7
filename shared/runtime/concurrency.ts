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
