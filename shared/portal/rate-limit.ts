import { shortCache } from "../runtime/concurrency.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { RATE, STUDENT_READ_TTL_MS } from "./constants.ts";

/**
 * Failure counters in the store: one item per key and 10-minute window, incremented atomically, removed by
 * the table's TTL. Only failures count, so a classroom of successful claims behind one address never waits.
 */
function windowOf(now: Date): { window: string; expiresAt: number } {
  const start = Math.floor(now.getTime() / 1000 / RATE.windowSeconds) * RATE.windowSeconds;
  return { window: String(start), expiresAt: start + RATE.windowSeconds * 2 };
}

export async function failures(key: string): Promise<number> {
  const { window } = windowOf(useDeps().clock.now());
  return counts(key, window);
}

// A classroom behind one address reads the same counters on every attempt: each is read once a second at
// most, and this process's own failures update it at once. Limits are checked against counts at most
// STUDENT_READ_TTL_MS old; every failure is still counted in the store, atomically.
const counts = shortCache({
  key: (key: string, window: string) => `${key}\n${window}`,
  load: async (key: string, window: string) =>
    (await useDeps().store.rateCounter.get({ key, window }).go()).data?.count ?? 0,
  ttlMs: STUDENT_READ_TTL_MS,
});

export async function recordFailure(key: string): Promise<number> {
  const { store, clock } = useDeps();
  const { window, expiresAt } = windowOf(clock.now());
  const r = await store.rateCounter
    .upsert({ key, window, expiresAt })
    .add({ count: 1 })
    .go({ response: "all_new" });
  const count = r.data.count ?? 1;
  counts.put(count, key, window);
  return count;
}

const limited = () =>
  new VisibleError(
    "rate_limited",
    "portal.rate_limited",
    "Too many failed attempts from your network. Wait a few minutes and try again.",
  );

/** Refuses an address that failed too often, before the attempt is even looked at. */
export async function assertAddressAllowed(address: string): Promise<void> {
  if ((await failures(`addr:${address}`)) >= RATE.perAddressFailures) throw limited();
}

/** Wrong codes past the portal-wide limit stop only the addresses that already guessed wrong a few times. */
export async function assertCodeAttemptAllowed(address: string): Promise<void> {
  // Read side by side: a classroom enters codes at once, and each read waits its turn in the store.
  const [mine, all, myCodes] = await Promise.all([
    failures(`addr:${address}`),
    failures("code:all"),
    failures(`code:${address}`),
  ]);
  if (mine >= RATE.perAddressFailures) throw limited();
  if (all >= RATE.globalWrongCodes && myCodes >= RATE.wrongCodesBeforeGlobalLimit) throw limited();
}

export async function recordWrongCode(address: string): Promise<void> {
  await Promise.all([
    recordFailure(`addr:${address}`),
    recordFailure("code:all"),
    recordFailure(`code:${address}`),
  ]);
}
