import { monotonicFactory } from "ulid";
import { recordEvent } from "../fleet/events.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { pause } from "../runtime/concurrency.ts";
import { open } from "../runtime/crypto.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { QueueEntryItem } from "../store/entities.ts";
import { emailHash } from "./codes.ts";
import { anyoneWaiting, freeLabs, sparesOf } from "./free-labs.ts";
import { claimRows, forgetStudentReads, labStates, workshopRecord } from "./reads.ts";

/**
 * The waiting line: students who arrived when no lab was free for them. Entries sort by place (a ULID: the
 * join time, then a tie-break that never goes backwards in one process), so a query of the workshop's entries
 * reads the line in order. `serveQueue` hands free labs to the head of the line, a prefix of it in one
 * transaction per batch: every item is conditional (the lab unclaimed, the email free, the entry still there
 * with the same link), so a lab never goes to two students and nobody is served before someone who was in
 * line when they joined. The student's side (joining, the waiting page, leaving) is shared/portal/waiting.ts.
 */

/** DynamoDB takes at most 100 items in one transaction; serving one student writes (or checks) SERVE_ITEMS. */
const SERVE_ITEMS = 7;
export const SERVE_BATCH = Math.floor(100 / SERVE_ITEMS);
/** Rounds of one serving pass; each lost race reads the line and the labs again. */
const MAX_ROUNDS = 25;

const nextPlace = monotonicFactory();

/** A new place at the end of the line, by the runtime's clock. */
export function newPlace(): string {
  return nextPlace(useDeps().clock.now().getTime());
}

async function lineEntries(workshop: string, count?: number): Promise<QueueEntryItem[]> {
  const r = await useDeps()
    .store.queueEntry.query.byWorkshop({ workshop })
    .go({ consistent: true, ...(count ? { count } : { pages: "all" }) });
  return r.data;
}

/** How many students are in line (a strongly consistent read). */
export async function waitingCount(workshop: string): Promise<number> {
  const r = await useDeps()
    .store.queueEntry.query.byWorkshop({ workshop })
    .go({ consistent: true, pages: "all", attributes: ["place"] });
  return r.data.length;
}

/** Serving passes running in this process, per workshop, and whether another was asked for meanwhile. */
const passes = new Map<string, { running: Promise<number>; next?: Promise<number> }>();

/**
 * Hands free labs (spares excepted) to the first in line; returns how many students were served. Safe to
 * call any time, from any process: concurrent passes in this process coalesce (a call made while one runs
 * gets the pass after it, which sees what changed), and passes in other processes are kept apart by the
 * transactions' conditions. Cheap when nothing is free: two shared reads and no write.
 */
export function serveQueue(workshop: string): Promise<number> {
  const current = passes.get(workshop);
  if (current) {
    current.next ??= current.running.catch(() => 0).then(() => startPass(workshop));
    return current.next;
  }
  return startPass(workshop);
}

function startPass(workshop: string): Promise<number> {
  const entry: { running: Promise<number>; next?: Promise<number> } = {
    running: servePass(workshop).finally(() => {
      if (passes.get(workshop) !== entry) return;
      if (entry.next) passes.set(workshop, { running: entry.next });
      else passes.delete(workshop);
    }),
  };
  passes.set(workshop, entry);
  return entry.running;
}

async function servePass(workshop: string): Promise<number> {
  const { store } = useDeps();
  let served = 0;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    // The first look may use the shared reads (at most a second old): nothing free for students there,
    // nothing to do. Labs are only ever handed over on the store's own answer.
    if (round === 0 && served === 0) {
      const [h, c, w] = await Promise.all([
        labStates(workshop),
        claimRows(workshop),
        workshopRecord(workshop),
      ]);
      if (freeLabs(h, c, sparesOf(w?.spec)).forStudents.length === 0) return served;
    }
    const [hosts, claims, w] = await Promise.all([
      labStates.fresh(workshop),
      claimRows.fresh(workshop),
      workshopRecord(workshop),
    ]);
    const labs = freeLabs(hosts, claims, sparesOf(w?.spec)).forStudents;
    if (labs.length === 0) return served;
    const portal = (await store.portal.get({ workshop }).go()).data;
    if (portal?.state !== "open" || portal.paused || portal.mode === "roster") return served;
    const head = await lineEntries(workshop, Math.min(labs.length, SERVE_BATCH));
    if (head.length === 0) return served;
    const pairs = head.map((e, i) => ({ entry: e, lab: labs[i] as string }));
    const outcome = await serveBatch(workshop, pairs);
    if (outcome === "served") {
      served += pairs.length;
      continue;
    }
    // A lost race (a lab claimed, an entry gone or moved, a concurrent transaction): read again, a little later.
    await pause(5 + Math.floor(Math.random() * 20 * Math.min(round + 1, 10)));
  }
  log.warn("queue: serving stopped after its rounds; the next pass goes on", { workshop, served });
  return served;
}

/** One transaction that gives each entry its lab, or nothing at all. */
async function serveBatch(
  workshop: string,
  pairs: { entry: QueueEntryItem; lab: string }[],
): Promise<"served" | "lost"> {
  const { store, clock } = useDeps();
  const at = isoNow(clock);
  const r = await store.service.transaction
    .write(({ claim, claimEmail, claimLink, queueEntry, queueEmail, queueLink, host }) =>
      pairs.flatMap(({ entry: e, lab }) => [
        claim
          .create({
            workshop,
            hostId: lab,
            name: e.name,
            emailHash: e.emailHash,
            emailSealed: e.emailSealed,
            pinHash: e.pinHash,
            linkHash: e.linkHash,
            how: "queue",
            claimedAt: at,
          })
          .commit(),
        claimEmail
          .create({ workshop, emailHash: e.emailHash, hostId: lab, failedPins: 0, locked: false })
          .commit(),
        queueEntry
          .delete({ workshop, place: e.place })
          .where((a, op) => op.eq(a.linkHash, e.linkHash))
          .commit(),
        queueEmail
          .delete({ workshop, emailHash: e.emailHash })
          .where((a, op) => op.eq(a.place, e.place))
          .commit(),
        queueLink.delete({ linkHash: e.linkHash }).commit(),
        // The same personal link now opens the lab.
        claimLink.create({ linkHash: e.linkHash, workshop, hostId: lab }).commit(),
        // The lab is still ready (not taken off the board meanwhile, as an in-place rollout's update does).
        host
          .check({ workshop, hostId: lab })
          .where((a, op) => op.eq(a.state, "ready"))
          .commit(),
      ]),
    )
    .go();
  if (!r.canceled) {
    forgetStudentReads(workshop);
    for (const { lab, entry } of pairs)
      await recordEvent({
        workshop,
        type: "lab.claimed",
        hostId: lab,
        detail: { how: "queue", student: entry.name, by: "labfleet" },
      });
    log.info("queue: labs handed to the line", { workshop, count: pairs.length });
    return "served";
  }
  // An entry whose email already holds a lab (it cannot, while every path keeps the invariant) would stop
  // the line for good: it leaves the line, and the next round serves the others.
  // (Removal is conditional on the entry being unchanged: one served meanwhile is already gone.)
  const reasons = r.data as { code?: string }[];
  const stuck = pairs.filter((_, i) => reasons[i * SERVE_ITEMS + 1]?.code === "ConditionalCheckFailed");
  for (const { entry } of stuck) await removeEntry(workshop, entry, "removed");
  return "lost";
}

/** Removes an entry with its email record and link (conditional on the entry being the same). */
async function removeEntry(
  workshop: string,
  e: Pick<QueueEntryItem, "place" | "emailHash" | "linkHash" | "name">,
  why: "left" | "removed",
): Promise<boolean> {
  const { store } = useDeps();
  const r = await store.service.transaction
    .write(({ queueEntry, queueEmail, queueLink }) => [
      queueEntry
        .delete({ workshop, place: e.place })
        .where((a, op) => op.eq(a.linkHash, e.linkHash))
        .commit(),
      queueEmail
        .delete({ workshop, emailHash: e.emailHash })
        .where((a, op) => op.eq(a.place, e.place))
        .commit(),
      queueLink.delete({ linkHash: e.linkHash }).commit(),
    ])
    .go();
  if (r.canceled) return false;
  forgetStudentReads(workshop);
  await recordEvent({ workshop, type: "queue.left", detail: { how: why, student: e.name } });
  return true;
}

/** A student leaves the line (the waiting page's button): their place, email record and link go. */
export async function leaveEntry(
  workshop: string,
  e: Pick<QueueEntryItem, "place" | "emailHash" | "linkHash" | "name">,
): Promise<boolean> {
  return removeEntry(workshop, e, "left");
}

export interface WaitingRow {
  number: number;
  name: string;
  email: string;
  joinedAt: string;
  waitedSeconds: number;
}

/** The line in order, with emails (decrypted for the instructor only) and how long each has waited. */
export async function listQueue(workshop: string): Promise<WaitingRow[]> {
  assertActor("instructor", "system");
  const { accessKey, clock } = useDeps();
  const now = clock.now().getTime();
  return (await lineEntries(workshop)).map((e, i) => ({
    number: i + 1,
    name: e.name,
    email: open(accessKey, e.emailSealed),
    joinedAt: e.joinedAt,
    waitedSeconds: Math.max(0, Math.floor((now - Date.parse(e.joinedAt)) / 1000)),
  }));
}

/** The instructor takes someone out of the line (`labfleet portal unqueue EMAIL`). */
export async function unqueueEmail(workshop: string, email: string): Promise<{ removed: true }> {
  assertActor("instructor", "system");
  const { store } = useDeps();
  const eHash = emailHash(workshop, email);
  const q = (await store.queueEmail.get({ workshop, emailHash: eHash }).go({ consistent: true })).data;
  const e = q && (await store.queueEntry.get({ workshop, place: q.place }).go({ consistent: true })).data;
  if (!e || !(await removeEntry(workshop, e, "removed")))
    throw new VisibleError("not_found", "portal.not_in_line", "nobody is in line with that email");
  return { removed: true };
}

/** Teardown: the line, its email records and links are forgotten. */
export async function purgeQueue(workshop: string): Promise<void> {
  const { store } = useDeps();
  const [entries, emails] = await Promise.all([
    store.queueEntry.query.byWorkshop({ workshop }).go({ pages: "all" }),
    store.queueEmail.query.byWorkshop({ workshop }).go({ pages: "all" }),
  ]);
  for (const e of entries.data) {
    await store.queueLink.delete({ linkHash: e.linkHash }).go();
    await store.queueEntry.delete({ workshop, place: e.place }).go();
  }
  for (const e of emails.data) await store.queueEmail.delete({ workshop, emailHash: e.emailHash }).go();
}

/**
 * The periodic pass (the local scheduler, the cloud sweeper): serves the line of every workshop that has one.
 * A workshop's failure is logged and does not stop the others.
 */
export async function serveAllQueues(): Promise<number> {
  const { store } = useDeps();
  const workshops = (await store.workshop.query.all({}).go({ pages: "all", attributes: ["name", "state"] }))
    .data;
  let served = 0;
  for (const w of workshops) {
    if (w.state === "torn_down" || w.state === "tearing_down") continue;
    try {
      if (await anyoneWaiting(w.name)) served += await serveQueue(w.name);
    } catch (err) {
      log.warn("queue: serving pass failed", { workshop: w.name, error: errorMessage(err) });
    }
  }
  return served;
}

/**
 * After something freed or readied a lab (a release, a host that became ready, a workshop submitted again):
 * serve the line, without failing the operation that called it; the periodic pass is the fallback.
 */
export async function serveQueueAfter(workshop: string): Promise<void> {
  try {
    // Nobody in line (a strongly consistent read of its first entry): nothing to serve, and no listing of the
    // labs. A student who joins meanwhile is served by their own join's pass, which runs after it.
    if (await anyoneWaiting(workshop)) await serveQueue(workshop);
  } catch (err) {
    log.warn("queue: serving after a change failed; the periodic pass will", {
      workshop,
      error: errorMessage(err),
    });
  }
}
