import { randomBytes } from "node:crypto";
import { recordEvent } from "../fleet/events.ts";
import { isConditionalFailure } from "../fleet/runs.ts";
import { isoNow } from "../runtime/clock.ts";
import { seal } from "../runtime/crypto.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { QueueEntryItem } from "../store/entities.ts";
import {
  alreadyHasLab,
  alreadyInLine,
  type ClaimInput,
  claimLab,
  lockedError,
  recoverLab,
  refuseControlChars,
} from "./claims.ts";
import { emailHash, linkHash } from "./codes.ts";
import { MAX_PIN_FAILURES } from "./constants.ts";
import { hashPin, verifyPin } from "./pins.ts";
import { leaveEntry, newPlace, serveQueue } from "./queue.ts";
import { assertAttemptAllowed, type ClientLike, recordFailure } from "./rate-limit.ts";
import { labStates } from "./reads.ts";

/**
 * The student's side of the waiting line. A student who finds no lab free for them (or finds others already
 * waiting) joins the line with the claim's own form; their answer is a personal link and cookie exactly like
 * a claim's, and when a lab is handed to them the same link opens it. Email and PIN get the place back on
 * another device, as they get a lab back.
 */

/**
 * PIN hashes for joins, at most HASHING at a time in this process. A room arriving at a full workshop joins the
 * line all at once, and each join hashes a PIN (scrypt, about 34 ms of CPU): unbounded, they would take every
 * core from the store and the other requests, and nobody would be answered until all were done.
 */
const HASHING = 2;
let hashing = 0;
const hashQueue: (() => void)[] = [];

async function boundedHash(pin: string): Promise<string> {
  if (hashing >= HASHING) await new Promise<void>((resolve) => hashQueue.push(resolve));
  hashing++;
  try {
    return await hashPin(pin);
  } finally {
    hashing--;
    hashQueue.shift()?.();
  }
}

const busy = () => new VisibleError("conflict", "portal.busy", "The portal is busy. Try again.");

/**
 * The portal's claim form: the lowest free lab when nobody waits and one is free (claimLab, with its
 * validation and limits), else a place at the end of the line. Returns the personal link's token, and the lab
 * when one was claimed or handed over at once.
 */
export async function claimOrWait(
  workshop: string,
  input: ClaimInput,
  client: ClientLike,
): Promise<{ token: string; lab?: string }> {
  try {
    return await claimLab(workshop, input, client);
  } catch (err) {
    const full =
      err instanceof VisibleError && ["portal.no_lab_free", "portal.line_waiting"].includes(err.code);
    if (!full) throw err;
  }
  const token = await joinLine(workshop, input);
  // A lab may have come free while joining: the line (this student included) gets it now.
  await serveQueue(workshop);
  return { token };
}

/**
 * A place at the end of the line: the entry, the email's record and the link in one transaction, which also
 * checks that the email holds no lab (and the claim's transaction checks the email is not in line).
 * Validation and limits are claimLab's, which the caller went through.
 */
async function joinLine(workshop: string, input: ClaimInput): Promise<string> {
  const { store, clock, accessKey } = useDeps();
  const eHash = emailHash(workshop, input.email);
  const token = randomBytes(24).toString("base64url");
  const lHash = linkHash(token);
  const pinHash = await boundedHash(input.pin);
  const place = newPlace();
  const r = await store.service.transaction
    .write(({ queueEntry, queueEmail, queueLink, claimEmail }) => [
      queueEntry
        .create({
          workshop,
          place,
          name: input.name.trim(),
          emailHash: eHash,
          emailSealed: seal(accessKey, input.email.trim().toLowerCase()),
          pinHash,
          linkHash: lHash,
          joinedAt: isoNow(clock),
        })
        .commit(),
      queueEmail.create({ workshop, emailHash: eHash, place, failedPins: 0, locked: false }).commit(),
      queueLink.create({ linkHash: lHash, workshop, place }).commit(),
      claimEmail
        .check({ workshop, emailHash: eHash })
        .where((a, op) => op.notExists(a.hostId))
        .commit(),
    ])
    .go();
  if (r.canceled) {
    const [, inLine, , hasLab] = r.data.map((d) => d.rejected);
    if (inLine) throw alreadyInLine();
    if (hasLab) throw alreadyHasLab();
    throw busy();
  }
  await recordEvent({ workshop, type: "queue.joined", detail: { student: input.name.trim() } });
  log.info("queue: a student joined the line", { workshop });
  return token;
}

async function entryOfLink(token: string): Promise<QueueEntryItem | undefined> {
  if (!/^[\w-]{20,64}$/.test(token)) return undefined;
  const { store } = useDeps();
  const hash = linkHash(token);
  const link = (await store.queueLink.get({ linkHash: hash }).go({ consistent: true })).data;
  if (!link) return undefined;
  const e = (
    await store.queueEntry.get({ workshop: link.workshop, place: link.place }).go({ consistent: true })
  ).data;
  return e?.linkHash === hash ? e : undefined;
}

export interface WaitingPage {
  workshop: string;
  name: string;
  /** 1 for the first in line. */
  number: number;
  waiting: number;
  /** The workshop's labs, and how many of them are still being built. */
  labs: number;
  building: number;
}

/** A personal link of a student in line: their place, or undefined (an unknown link, or no longer in line). */
export async function waitingForLink(token: string): Promise<WaitingPage | undefined> {
  const e = await entryOfLink(token);
  if (!e) return undefined;
  const { store } = useDeps();
  const [line, hosts] = await Promise.all([
    store.queueEntry.query
      .byWorkshop({ workshop: e.workshop })
      .go({ pages: "all", attributes: ["place"], consistent: true }),
    labStates(e.workshop),
  ]);
  const number = line.data.findIndex((x) => x.place === e.place) + 1;
  if (number === 0) return undefined;
  const live = hosts.filter((h) => h.state !== "torn_down");
  return {
    workshop: e.workshop,
    name: e.name,
    number,
    waiting: line.data.length,
    labs: live.length,
    building: live.filter(
      (h) => h.state === "pending" || h.state === "provisioning" || h.state === "deploying",
    ).length,
  };
}

/** The waiting workshop of a link, for the page to serve the line before it answers; undefined if none. */
export async function workshopOfWaitingLink(token: string): Promise<string | undefined> {
  return (await entryOfLink(token))?.workshop;
}

/** The waiting page's "Leave the line": the place, the email's record and the link go. */
export async function leaveLine(token: string): Promise<boolean> {
  const e = await entryOfLink(token);
  if (!e) return false;
  const left = await leaveEntry(e.workshop, e);
  if (left) log.info("queue: a student left the line", { workshop: e.workshop });
  return left;
}

/** Whether a personal link is a place in line (looking only). */
export async function isWaitingLink(token: string): Promise<boolean> {
  return (await entryOfLink(token)) !== undefined;
}

/**
 * "Get it back": email and PIN give the lab (recoverLab) or the place in line under a new personal link; the
 * old link stops. The place is counted and locked as a lab's recovery is (five wrong PINs lock the email).
 */
export async function recoverLabOrPlace(
  workshop: string,
  email: string,
  pin: string,
  client: ClientLike,
): Promise<{ token: string; lab?: string }> {
  refuseControlChars("portal.recover_invalid", { email, pin });
  const { store } = useDeps();
  const eHash = emailHash(workshop, email);
  const q = (await store.queueEmail.get({ workshop, emailHash: eHash }).go({ consistent: true })).data;
  if (!q) return recoverLab(workshop, email, pin, client);
  await assertAttemptAllowed(client);
  if (q.locked) throw lockedError();
  let attempt: number;
  try {
    const r = await store.queueEmail
      .patch({ workshop, emailHash: eHash })
      .add({ failedPins: 1 })
      .where((a, op) => `${op.lt(a.failedPins, MAX_PIN_FAILURES)} AND ${op.eq(a.locked, false)}`)
      .go({ response: "all_new" });
    attempt = r.data.failedPins ?? 1;
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    await store.queueEmail.patch({ workshop, emailHash: eHash }).set({ locked: true }).go();
    throw lockedError();
  }
  const e = (await store.queueEntry.get({ workshop, place: q.place }).go({ consistent: true })).data;
  if (!e || !(await verifyPin(pin, e.pinHash))) {
    await recordFailure(client);
    if (attempt >= MAX_PIN_FAILURES)
      await store.queueEmail.patch({ workshop, emailHash: eHash }).set({ locked: true }).go();
    throw new VisibleError("input", "portal.wrong_pin", "That email and PIN do not match a lab.");
  }
  const token = randomBytes(24).toString("base64url");
  const hash = linkHash(token);
  const r = await store.service.transaction
    .write(({ queueEntry, queueEmail, queueLink }) => [
      queueEntry
        .patch({ workshop, place: e.place })
        .set({ linkHash: hash })
        .where((a, op) => op.eq(a.linkHash, e.linkHash))
        .commit(),
      queueEmail.patch({ workshop, emailHash: eHash }).set({ failedPins: 0 }).commit(),
      queueLink.delete({ linkHash: e.linkHash }).commit(),
      queueLink.create({ linkHash: hash, workshop, place: e.place }).commit(),
    ])
    .go();
  // Handed a lab meanwhile: the lab's own recovery answers.
  if (r.canceled) {
    const served = (await store.claimEmail.get({ workshop, emailHash: eHash }).go()).data;
    if (served) return recoverLab(workshop, email, pin, client);
    throw busy();
  }
  return { token };
}
