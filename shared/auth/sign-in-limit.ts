import { useDeps } from "../runtime/deps.ts";
import { failureCounters, minutesText, RateLimited } from "../runtime/failure-counters.ts";
import { log } from "../runtime/logger.ts";

/**
 * Failed sign-ins to the console with an instructor token, counted in the store like the portal's failures
 * (shared/runtime/failure-counters.ts: the current 10-minute window and the one before). A token is 24 random
 * bytes or more, so guessing one is hopeless; the limits keep a guesser from hammering the sign-in at all,
 * and never slow a right token down for other people's failures:
 *
 * - per address: an instructor who pastes a wrong token a few times is far from it; a guesser stops there;
 * - overall: past it (a guesser with many addresses), an address that failed a few times itself waits too,
 *   while an address without failures, the instructor's, still signs in at once.
 *
 * A refused attempt is not checked and not counted; a right token never counts.
 */
export const SIGN_IN_LIMITS = {
  windowSeconds: 10 * 60,
  perAddress: 10,
  overall: 100,
  beforeOverall: 3,
} as const;

const counters = failureCounters({ windowSeconds: SIGN_IN_LIMITS.windowSeconds, readTtlMs: 1000 });
const key = (address: string) => `signin:${address}`;
const ALL = "signin:all";

const secondsUntil = (at: Date | undefined) =>
  at ? Math.max(1, Math.ceil((at.getTime() - useDeps().clock.now().getTime()) / 1000)) : 60;

/** Refuses (429) an address that failed to sign in too often, before its token is even looked at. */
export async function assertSignInAllowed(address: string): Promise<void> {
  const [mine, all] = await Promise.all([counters.count(key(address)), counters.count(ALL)]);
  const { perAddress, overall, beforeOverall } = SIGN_IN_LIMITS;
  const earliest = (a: Date | undefined, b: Date | undefined) => (a && b ? (a < b ? a : b) : (a ?? b));
  const lifts =
    mine.total >= perAddress
      ? counters.liftsAt(mine, perAddress)
      : all.total >= overall && mine.total >= beforeOverall
        ? earliest(counters.liftsAt(all, overall), counters.liftsAt(mine, beforeOverall))
        : undefined;
  if (!lifts) return;
  const seconds = secondsUntil(lifts);
  log.warn("console sign-in held back", { address, failures: mine.total });
  throw new RateLimited(
    "auth.rate_limited",
    `Too many failed sign-ins from your address. Try again in ${minutesText(seconds)}.`,
    seconds,
  );
}

/** Counts a failed sign-in from this address. */
export async function recordSignInFailure(address: string): Promise<void> {
  await Promise.all([counters.record(key(address)), counters.record(ALL)]);
}
