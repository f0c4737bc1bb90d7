import { z } from "zod";
import { recordEvent } from "../fleet/events.ts";
import { assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import { failureCounters, minutesText, RateLimited } from "../runtime/failure-counters.ts";
import { log } from "../runtime/logger.ts";
import { RATE, STUDENT_READ_TTL_MS } from "./constants.ts";

/**
 * The portal's limits on guessing (the numbers and why in constants.ts, RATE). Only failures count: a wrong
 * workshop code, a recovery with an unknown email, a wrong PIN. Each failure counts for its browser, for its
 * address, and, when the browser has never entered a right code (a new browser), for its address's new
 * browsers; a wrong code also for the whole portal. A classroom behind one address keeps its cookies, so its
 * typos are spread over many browsers and fall far short of the address's limits, while a guesser that drops
 * its cookies is a new browser at every guess and spends the new browsers' limit quickly.
 *
 * A browser that has entered a right code (vouched for, by its signed cookie) is not held back by the new
 * browsers' limit: the room's students get in again (a rotated code, another tab) while the address is held
 * back for new browsers. Holds are noted in the store, so `portal status` and the console show them, and an
 * instructor can lift them (unblock).
 */

/** Who makes an attempt: the network address, and the browser when it sent its `lf_browser` cookie. */
export interface PortalClient {
  address: string;
  /** The browser's id, from its signed cookie; none when it sent none. */
  browser?: string | undefined;
  /** Whether that browser has entered a right workshop code before (the cookie says so, signed). */
  vouched?: boolean | undefined;
}

/** A client known by its address only (no cookie): a new browser. */
export type ClientLike = PortalClient | string;

const asClient = (c: ClientLike): PortalClient => (typeof c === "string" ? { address: c } : c);

export const counters = failureCounters({
  windowSeconds: RATE.windowSeconds,
  // A classroom behind one address reads the same counters on every attempt: each is read once a second at
  // most, and this process's own failures update it at once. Every failure is still counted in the store.
  readTtlMs: STUDENT_READ_TTL_MS,
});

export type HoldScope = "browser" | "address" | "new_browsers";

const KEYS = {
  address: (a: string) => `addr:${a}`,
  newBrowsers: (a: string) => `new:${a}`,
  browser: (b: string) => `browser:${b}`,
  wrongCodes: "code:all",
} as const;

const LIMIT: Record<HoldScope, number> = {
  browser: RATE.perBrowser,
  address: RATE.perAddress,
  new_browsers: RATE.perAddressNewBrowsers,
};

/** The failures a key holds now (both windows): for tests and the instructor's view. */
export async function failures(key: string): Promise<number> {
  return (await counters.count(key)).total;
}

const secondsUntil = (at: Date | undefined) =>
  at ? Math.max(1, Math.ceil((at.getTime() - useDeps().clock.now().getTime()) / 1000)) : 60;

function refusal(scope: HoldScope | "portal", liftsAt: Date | undefined): RateLimited {
  const seconds = secondsUntil(liftsAt);
  const wait = minutesText(seconds);
  const messages = {
    browser: `Too many wrong attempts from this browser. Try again in ${wait}.`,
    address: `Too many wrong attempts from your network. Try again in ${wait}, or ask your instructor to let your network in.`,
    new_browsers: `Too many wrong codes from your network. If you entered the code before, use that same browser; otherwise try again in ${wait}, or ask your instructor to let your network in.`,
    portal: `The portal is getting too many wrong codes. Try again in ${wait}.`,
  };
  return new RateLimited("portal.rate_limited", messages[scope], seconds);
}

/**
 * Refuses a client that failed too often, before its attempt is even looked at: its browser, its address,
 * or (a new browser) its address's new browsers. A wrong-code attempt (`code`) also waits when the portal
 * as a whole is over its limit and this client already guessed wrong a few times.
 */
export async function assertAttemptAllowed(who: ClientLike, kind: "code" | "other" = "other"): Promise<void> {
  const client = asClient(who);
  const newBrowser = !client.vouched;
  // Read side by side: a classroom enters codes at once, and each read waits its turn in the store.
  const none = { current: 0, previous: 0, total: 0 };
  const [browser, address, fresh, all] = await Promise.all([
    client.browser ? counters.count(KEYS.browser(client.browser)) : none,
    counters.count(KEYS.address(client.address)),
    newBrowser ? counters.count(KEYS.newBrowsers(client.address)) : none,
    kind === "code" ? counters.count(KEYS.wrongCodes) : none,
  ]);
  if (browser.total >= RATE.perBrowser) throw refusal("browser", counters.liftsAt(browser, RATE.perBrowser));
  if (address.total >= RATE.perAddress) throw refusal("address", counters.liftsAt(address, RATE.perAddress));
  if (fresh.total >= RATE.perAddressNewBrowsers)
    throw refusal("new_browsers", counters.liftsAt(fresh, RATE.perAddressNewBrowsers));
  if (all.total >= RATE.globalWrongCodes) {
    const few = RATE.wrongCodesBeforeGlobalLimit;
    if (browser.total >= few || (newBrowser && fresh.total >= few))
      throw refusal("portal", counters.liftsAt(all, RATE.globalWrongCodes));
  }
}

/** Counts one failure of this client (`code`: a wrong workshop code; `other`: a wrong PIN or email). */
export async function recordFailure(who: ClientLike, kind: "code" | "other" = "other"): Promise<void> {
  const client = asClient(who);
  const counted: [HoldScope, string][] = [["address", KEYS.address(client.address)]];
  if (client.browser) counted.push(["browser", KEYS.browser(client.browser)]);
  if (!client.vouched) counted.push(["new_browsers", KEYS.newBrowsers(client.address)]);
  const [, ...results] = await Promise.all([
    kind === "code" ? counters.record(KEYS.wrongCodes) : undefined,
    ...counted.map(([, key]) => counters.record(key)),
  ]);
  // A counter at its limit holds its client back from now on: noted, so the instructor sees it.
  const reached = counted.filter(([scope], i) => (results[i]?.total ?? 0) >= LIMIT[scope]);
  await Promise.all(reached.map(([scope, key]) => noteHold(scope, key, client.address)));
}

/** A wrong workshop code from this client. */
export const recordWrongCode = (who: ClientLike) => recordFailure(who, "code");

async function noteHold(scope: HoldScope, counter: string, address: string): Promise<void> {
  const start = counters.windowStart();
  await useDeps()
    .store.rateHold.put({
      window: String(start),
      counter,
      address,
      scope,
      expiresAt: start + 2 * counters.windowSeconds,
    })
    .go();
  log.warn("portal: holding back", { scope, address });
}

// --- the instructor's view: who is held back, and lifting it -------------------------------------------------

/** An address to let in, as the instructor's view shows it (IPv4 or IPv6, as the client's address is kept). */
export const HeldAddress = z
  .string()
  .trim()
  .min(1)
  .max(100)
  .regex(/^[0-9A-Za-z.:%_-]+$/, { error: "expected a network address as portal status shows it" });

export interface Hold {
  address: string;
  /** browser: one browser at that address; new_browsers: browsers that never entered a right code; address: all. */
  scope: HoldScope;
  /** A browser hold: the end of the browser's id, to tell two held browsers apart. */
  browser?: string;
  /** Failures counted (this window and the one before) and the limit they reached. */
  count: number;
  limit: number;
  /** When it lifts by itself if nothing more fails. */
  liftsAt: string;
}

export interface HeldBack {
  holds: Hold[];
  /** The portal-wide count of wrong codes; past its limit, clients with a few wrong attempts wait too. */
  portalWide: { wrongCodes: number; limit: number; active: boolean; liftsAt: string | null };
}

async function holdRecords() {
  const start = counters.windowStart();
  const items = (
    await useDeps()
      .store.rateHold.query.byWindow({ key: "holds" })
      .gte({ window: String(start - counters.windowSeconds) })
      .go({ pages: "all" })
  ).data;
  return items;
}

type HoldRecord = Awaited<ReturnType<typeof holdRecords>>[number];

/** The noted holds that still hold (their counter is still at its limit), one per counter. */
async function inForce(records: HoldRecord[]): Promise<{ hold: Hold; counter: string }[]> {
  const byCounter = new Map(records.map((r) => [r.counter, r]));
  const found = await Promise.all(
    [...byCounter.values()].map(async (r) => {
      const counts = await counters.count(r.counter);
      const limit = LIMIT[r.scope];
      const lifts = counters.liftsAt(counts, limit);
      if (!lifts) return undefined;
      const hold: Hold = {
        address: r.address,
        scope: r.scope,
        ...(r.scope === "browser" ? { browser: r.counter.slice(-6) } : {}),
        count: counts.total,
        limit,
        liftsAt: lifts.toISOString(),
      };
      return { hold, counter: r.counter };
    }),
  );
  return found.filter((f) => f !== undefined);
}

const ORDER: Record<HoldScope, number> = { address: 0, new_browsers: 1, browser: 2 };

/** Every hold in force now, by address; the portal's limits are for the whole portal, every workshop. */
export async function heldBack(): Promise<HeldBack> {
  assertActor("instructor", "system");
  const [found, wrong] = await Promise.all([holdRecords().then(inForce), counters.count(KEYS.wrongCodes)]);
  const holds = found
    .map((f) => f.hold)
    .sort((a, b) => a.address.localeCompare(b.address) || ORDER[a.scope] - ORDER[b.scope]);
  const portalLifts = counters.liftsAt(wrong, RATE.globalWrongCodes);
  return {
    holds,
    portalWide: {
      wrongCodes: wrong.total,
      limit: RATE.globalWrongCodes,
      active: portalLifts !== undefined,
      liftsAt: portalLifts?.toISOString() ?? null,
    },
  };
}

/**
 * Lets an address in again (or every held address): its counters and those of its held browsers start
 * from zero, and its holds are gone. Returns the addresses that were held back. The holds are the whole
 * portal's; when the instructor acts from a workshop's page (`workshop`), a `portal.unblocked` event on that
 * workshop says who let which addresses in again.
 */
export async function unblock(
  target: { address: string } | { all: true },
  workshop?: string,
): Promise<{ addresses: string[] }> {
  assertActor("instructor", "system");
  const records = await holdRecords();
  const chosen = "all" in target ? records : records.filter((r) => r.address === target.address);
  const found = await inForce(chosen);
  const keys = new Set(chosen.map((r) => r.counter));
  if ("address" in target) {
    keys.add(KEYS.address(target.address));
    keys.add(KEYS.newBrowsers(target.address));
  }
  const { store } = useDeps();
  await Promise.all([
    ...[...keys].map((k) => counters.reset(k)),
    ...chosen.map((r) => store.rateHold.delete({ key: "holds", window: r.window, counter: r.counter }).go()),
  ]);
  const addresses = [...new Set(found.map((f) => f.hold.address))].sort();
  log.info("portal: holds lifted", {
    target: "all" in target ? "all" : target.address,
    lifted: addresses.length,
  });
  if (workshop && addresses.length > 0)
    await recordEvent({ workshop, type: "portal.unblocked", detail: { addresses, all: "all" in target } });
  return { addresses };
}
