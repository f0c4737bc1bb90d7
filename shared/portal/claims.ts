import { randomBytes, randomInt } from "node:crypto";
import { reachableAt, takesNewClaims } from "../agent/reachability.ts";
import { recordEvent } from "../fleet/events.ts";
import { trustedHostKeys } from "../fleet/host-key-records.ts";
import { isConditionalFailure } from "../fleet/runs.ts";
import { isoNow } from "../runtime/clock.ts";
import { open, seal } from "../runtime/crypto.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { byNumber, controlCharProblem } from "../runtime/text.ts";
import type { ClaimItem, HostItem, PortalItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { type AccessView, accessView } from "./access-view.ts";
import { codeHash, emailHash, linkHash } from "./codes.ts";
import { MAX_PIN_FAILURES } from "./constants.ts";
import { anyoneWaiting, freeLabs, sparesOf } from "./free-labs.ts";
import { hashPin, pinProblem, verifyPin } from "./pins.ts";
import { getPortal } from "./portal.ts";
import { assertAttemptAllowed, type ClientLike, recordFailure, recordWrongCode } from "./rate-limit.ts";
import {
  claimRows,
  codeRecord,
  forgetStudentReads,
  labStates,
  portalRecord,
  workshopRecord,
} from "./reads.ts";

/**
 * The student's side of the portal. Invariants are DynamoDB's to enforce: a claim is one transaction of
 * three conditional creates (the lab's claim, the email's claim, the personal link), so a lab is never
 * given twice and an email never holds two labs, however many students press the button at once.
 */

export interface CodeAccess {
  workshop: string;
  codeVersion: number;
}

/**
 * Student-supplied text goes on the instructor's screen (`labfleet portal status`, the CSV export): a field
 * with a control character is refused, naming the field, before anything is looked up or counted.
 */
export function refuseControlChars(code: string, fields: Record<string, string>): void {
  const details = Object.entries(fields).flatMap(([path, value]) => {
    const problem = controlCharProblem(value);
    return problem ? [{ path, message: `${FIELD_NAMES[path] ?? path} ${problem}` }] : [];
  });
  if (details.length)
    throw new VisibleError("input", code, details.map((d) => d.message).join("; "), details);
}

const FIELD_NAMES: Record<string, string> = {
  code: "the workshop code",
  name: "your name",
  email: "your email",
  pin: "your PIN",
};

/**
 * A typed workshop code: the workshop and code version it opens, or a counted failure. `client` is who typed
 * it (shared/portal/rate-limit.ts): an address, and the browser when the page knows it.
 */
export async function enterCode(code: string, client: ClientLike): Promise<CodeAccess> {
  // Never a right code, so refusing it uncounted tells a guesser nothing.
  refuseControlChars("portal.code_invalid", { code });
  const [, lookup] = await Promise.all([
    assertAttemptAllowed(client, "code"),
    code.trim() ? codeRecord(codeHash(code)) : Promise.resolve(null),
  ]);
  const found = lookup;
  const portal = found ? await portalRecord(found.workshop) : undefined;
  if (!found || !portal || portal.codeVersion !== found.codeVersion) {
    await recordWrongCode(client);
    throw new VisibleError(
      "input",
      "portal.wrong_code",
      "That workshop code is not right. Check it on the slide and try again.",
    );
  }
  return { workshop: found.workshop, codeVersion: found.codeVersion };
}

/** Whether an access cookie's code version is still the current one (rotate-code ends the others). */
export async function accessValid(access: CodeAccess): Promise<boolean> {
  const p = await portalRecord(access.workshop);
  return Boolean(p && p.codeVersion === access.codeVersion);
}

/**
 * A lab's place on the student board. `unavailable`: ready, unclaimed, but taking no claim now (an enrolled host
 * that is drained, disabled or not calling in).
 */
export type LabStatus = "free" | "claimed" | "building" | "failed" | "unavailable";

export interface BoardLab {
  lab: string;
  status: LabStatus;
  /** The claimant's first name only. */
  firstName?: string;
}

function firstName(name: string): string {
  return name.trim().split(/\s+/)[0] ?? "";
}

/** The student board: every lab but the kept spares, with its place and its claimant's first name. */
export interface Board {
  open: boolean;
  labs: BoardLab[];
  expiry: string | null;
  /** Free ready labs kept off the board for swaps (`portal.spares`). */
  spares: number;
}

/** The board as the student pages show it, from the portal's shared student reads (shared/portal/reads.ts). */
export async function board(workshop: string): Promise<Board> {
  const [hosts, claims, portal, w] = await Promise.all([
    labStates(workshop),
    claimRows(workshop),
    portalRecord(workshop),
    workshopRecord(workshop),
  ]);
  return boardOf({ hosts, claims, portal, workshop: w }, useDeps().clock.now());
}

/**
 * The board from one read of a workshop's labs, claims, portal and record: the instructor's status builds it
 * from the same claims it lists, so the two always agree.
 */
export function boardOf(
  read: {
    hosts: Parameters<typeof freeLabs>[0];
    claims: readonly { hostId: string; name: string }[];
    portal: Pick<PortalItem, "state" | "paused" | "mode"> | undefined;
    workshop: { spec?: unknown; expiry?: string | null } | null | undefined;
  },
  now: Date,
): Board {
  const { hosts, claims, portal, workshop: w } = read;
  const claimed = new Map(claims.map((c) => [c.hostId, c]));
  const kept = new Set(freeLabs(hosts, claims, sparesOf(w?.spec), now).spares);
  const labs = hosts
    .filter((h) => h.state !== "torn_down" && !kept.has(h.hostId))
    .map((h): BoardLab => {
      const c = claimed.get(h.hostId);
      if (c) return { lab: h.hostId, status: "claimed", firstName: firstName(c.name) };
      if (h.state === "ready" && h.health !== "failing")
        return { lab: h.hostId, status: takesNewClaims(h, now) ? "free" : "unavailable" };
      if (h.state === "ready") return { lab: h.hostId, status: "failed" }; // failing its health check
      return { lab: h.hostId, status: h.state === "failed" ? "failed" : "building" };
    })
    .sort((a, b) => byNumber(a.lab, b.lab));
  // `open` means the claim form is offered: not in roster mode, where labs come by invitation.
  return {
    open: portal?.state === "open" && !portal.paused && portal.mode !== "roster",
    labs,
    expiry: w?.expiry ?? null,
    spares: kept.size,
  };
}

export interface ClaimInput {
  name: string;
  email: string;
  pin: string;
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;

export function checkClaimInput(input: ClaimInput) {
  refuseControlChars("portal.claim_invalid", { name: input.name, email: input.email, pin: input.pin });
  const details = [];
  const name = input.name.trim();
  if (name.length < 1 || name.length > 80)
    details.push({ path: "name", message: "expected your name (1 to 80 characters)" });
  if (!EMAIL.test(input.email.trim()) || input.email.length > 200)
    details.push({ path: "email", message: "expected an email address" });
  const pinWhy = pinProblem(input.pin);
  if (pinWhy) details.push({ path: "pin", message: pinWhy });
  if (details.length)
    throw new VisibleError(
      "input",
      "portal.claim_invalid",
      details.map((d) => d.message).join("; "),
      details,
    );
}

/**
 * Gives the student the lowest-numbered free ready lab (spares excepted, shared/portal/free-labs.ts).
 * Candidates come from a read, the guarantee from the transaction: on a lost race the claims are read again
 * and the next free lab is tried. Nobody jumps the waiting line: while anyone is in it (a strongly consistent
 * read) the claim is refused with `portal.line_waiting`, and the portal's form puts the student in line
 * instead (shared/portal/queue.ts, claimOrWait).
 */
export async function claimLab(
  workshop: string,
  input: ClaimInput,
  client: ClientLike,
): Promise<{ lab: string; token: string }> {
  // Only guesses count as failures (codes, PINs): a classroom behind one address typing an easy PIN, or
  // finding every lab taken, must not lock the others out.
  checkClaimInput(input);
  const { store, clock, accessKey } = useDeps();
  const [, portal, waiting, w] = await Promise.all([
    assertAttemptAllowed(client),
    getPortal(workshop),
    anyoneWaiting(workshop),
    workshopRecord(workshop),
  ]);
  if (portal?.state !== "open" || portal.paused) {
    throw new VisibleError("conflict", "portal.closed", "Claiming is closed right now. Ask your instructor.");
  }
  if (portal.mode === "roster")
    throw new VisibleError(
      "forbidden",
      "portal.roster_only",
      "This workshop hands out labs by invitation: use the link you were sent.",
    );
  if (waiting) throw lineWaiting();
  const spares = sparesOf(w?.spec);
  const eHash = emailHash(workshop, input.email);
  const token = randomBytes(24).toString("base64url");
  const lHash = linkHash(token);
  const claimBase = {
    workshop,
    name: input.name.trim(),
    emailHash: eHash,
    emailSealed: seal(accessKey, input.email.trim().toLowerCase()),
    linkHash: lHash,
    how: "open" as const,
  };
  const tried = new Set<string>();
  let pinHash: string | undefined;
  let freshRead = false;
  let waits = 0;
  for (let round = 0; round < 1000; round++) {
    // Only what choosing a lab needs: the shared read first; after a lost race, or when it shows no free lab,
    // the store's own answer.
    const read = tried.size === 0 && !freshRead ? "shared" : "fresh";
    const [hosts, claims] = await Promise.all(
      read === "shared"
        ? [labStates(workshop), claimRows(workshop)]
        : [labStates.fresh(workshop), claimRows.fresh(workshop)],
    );
    if (claims.some((c) => c.emailHash === eHash)) throw alreadyHasLab();
    const free = freeLabs(hosts, claims, spares).forStudents.filter((id) => !tried.has(id));
    // The lowest free lab first, skipping labs another claim in this process is trying right now. When
    // all of them are, wait for one of those claims to end and look again: a classroom pressing the button
    // at once then hashes PINs and writes transactions only for the labs there are. After a lost race
    // (another process), spread out over the lowest 2, 4, 8... free labs (the transaction still decides).
    const busy = attempts.get(workshop);
    const idle = free.filter((id) => !busy?.has(id));
    if (idle.length === 0 && free.length > 0 && waits < MAX_WAITS) {
      waits++;
      await attemptEnded(workshop);
      continue;
    }
    const pool = idle.length > 0 ? idle : free;
    const spread = tried.size === 0 ? 1 : Math.min(pool.length, 2 ** Math.min(tried.size, 10));
    const lab = pool[spread > 1 ? randomInt(spread) : 0];
    if (!lab && read === "shared") {
      freshRead = true;
      continue;
    }
    if (!lab) {
      throw new VisibleError(
        "conflict",
        "portal.no_lab_free",
        "No lab is free right now. Ask your instructor.",
      );
    }
    const release = attempt(workshop, lab);
    // Hashed only once a lab is in sight (and held for this claim here): students turned away cost no scrypt.
    if (!pinHash) {
      try {
        pinHash = await hashPin(input.pin);
      } catch (err) {
        release();
        throw err;
      }
    }
    const hashed = pinHash;
    const r = await store.service.transaction
      .write(({ claim, claimEmail, claimLink, queueEmail, host }) => [
        claim.create({ ...claimBase, pinHash: hashed, hostId: lab, claimedAt: isoNow(clock) }).commit(),
        claimEmail.create({ workshop, emailHash: eHash, hostId: lab, failedPins: 0, locked: false }).commit(),
        claimLink.create({ linkHash: lHash, workshop, hostId: lab }).commit(),
        // An email holds a lab or a place in line, never both.
        queueEmail
          .check({ workshop, emailHash: eHash })
          .where((a, op) => op.notExists(a.place))
          .commit(),
        // The lab is still ready: one taken off the board meanwhile (an in-place rollout's update,
        // shared/fleet/rollout-steps.ts) is never handed out from a read a moment old.
        host
          .check({ workshop, hostId: lab })
          .where((a, op) => op.eq(a.state, "ready"))
          .commit(),
      ])
      .go()
      .finally(release);
    if (!r.canceled) {
      forgetStudentReads(workshop);
      await recordEvent({
        workshop,
        type: "lab.claimed",
        hostId: lab,
        detail: { how: "open", student: claimBase.name },
      });
      return { lab, token };
    }
    const [labLost, emailLost, , inLine, notReady] = r.data.map((d) => d.rejected);
    if (emailLost) throw alreadyHasLab();
    if (inLine) throw alreadyInLine();
    if (labLost || notReady)
      tried.add(lab); // the next round reads the claims and the labs again
    else throw new VisibleError("conflict", "portal.busy", "The portal is busy. Try again.");
  }
  throw new VisibleError("conflict", "portal.busy", "The portal is busy. Try again.");
}

/** Labs a claim in this process is committing right now, so concurrent claims here try different labs. */
const attempts = new Map<string, Map<string, number>>();
/** Claims waiting for one of those to end, per workshop. */
const waiting = new Map<string, Set<() => void>>();
const MAX_WAITS = 50;
const WAIT_MS = 5000;

function attemptEnded(workshop: string): Promise<void> {
  return new Promise((resolve) => {
    const set = waiting.get(workshop) ?? new Set<() => void>();
    waiting.set(workshop, set);
    const done = () => {
      clearTimeout(timer);
      set.delete(done);
      if (set.size === 0 && waiting.get(workshop) === set) waiting.delete(workshop);
      resolve();
    };
    const timer = setTimeout(done, WAIT_MS);
    timer.unref?.();
    set.add(done);
  });
}

function attempt(workshop: string, lab: string): () => void {
  const labs = attempts.get(workshop) ?? new Map<string, number>();
  attempts.set(workshop, labs);
  labs.set(lab, (labs.get(lab) ?? 0) + 1);
  return () => {
    const n = (labs.get(lab) ?? 1) - 1;
    if (n > 0) labs.set(lab, n);
    else labs.delete(lab);
    if (labs.size === 0 && attempts.get(workshop) === labs) attempts.delete(workshop);
    for (const wake of [...(waiting.get(workshop) ?? [])]) wake();
  };
}

export const lineWaiting = () =>
  new VisibleError("conflict", "portal.line_waiting", "Students are waiting for a lab: join the line.");

export const alreadyInLine = () =>
  new VisibleError(
    "conflict",
    "portal.email_in_line",
    "This email is already in line for a lab. Use “Get it back” with your email and PIN.",
  );

export const alreadyHasLab = () =>
  new VisibleError(
    "conflict",
    "portal.email_has_lab",
    "This email already has a lab. Use “Get it back” with your email and PIN.",
  );

export const lockedError = () =>
  new VisibleError(
    "forbidden",
    "portal.locked",
    "Too many wrong PINs: this email is locked. Ask your instructor to unlock it.",
  );

/** Which lab a personal link leads to, without opening it (no access details, nothing recorded). */
export async function linkLab(token: string): Promise<{ workshop: string; lab: string } | undefined> {
  if (!/^[\w-]{20,64}$/.test(token)) return undefined;
  const { store } = useDeps();
  const hash = linkHash(token);
  const link = (await store.claimLink.get({ linkHash: hash }).go()).data;
  if (!link) return undefined;
  const claim = (await store.claim.get({ workshop: link.workshop, hostId: link.hostId }).go()).data;
  return claim?.linkHash === hash ? { workshop: link.workshop, lab: link.hostId } : undefined;
}

export const DUMMY_PIN_HASH =
  "scrypt$16384$8$1$AAAAAAAAAAAAAAAAAAAAAA$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

/** `ssh -p PORT user@host` for a lab: its public IP when it has one, the login user of its address. */
export function studentSsh(
  address: string,
  publicIp: string | undefined,
  defaultUser: string | undefined,
): string {
  const m = /^(?:([^@]+)@)?(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(address);
  const user = m?.[1] ?? defaultUser;
  const host = publicIp ?? (m?.[2] ?? address).replace(/^\[|\]$/g, "");
  const port = m?.[3] && m[3] !== "22" ? `-p ${m[3]} ` : "";
  return `ssh ${port}${user ? `${user}@` : ""}${host}`;
}

export interface LabPage {
  workshop: string;
  lab: string;
  name: string;
  /** What the lab wrote to $LABFLEET_ACCESS, read for showing (shared/portal/access-view.ts). */
  access: AccessView | null;
  sshCommand: string | null;
  /** With sshCommand: the host keys labfleet trusts for the lab, so the student can check what ssh shows. */
  hostKeys: { type: string; fingerprint: string }[];
  guideUrl: string | null;
  expiry: string | null;
  /** The in-use health check flagged this lab (shared/fleet/health.ts); `autoSwap`: the student is being moved. */
  failing: boolean;
  autoSwap: boolean;
  /** A rollout's notice (shared/fleet/rollout.ts): the lab is about to be updated, or just was. */
  update: "updating" | "updated" | null;
  /**
   * Where the lab's build is: `ready` once it passed its health gate; `waiting` while its machine waits for the
   * workshop's up or an instructor's approval (BYOD: the student's own machine claimed before its lab is built).
   */
  build: "waiting" | "building" | "ready" | "failed";
  /** The phase the build reports, while building. */
  phase: string | null;
  /** An enrolled machine that stopped calling in (judged now: shared/agent/reachability.ts), with its last call. */
  unreachable: boolean;
  lastSeenAt: string | null;
}

/** The lab a personal link leads to, with its access details; undefined for an unknown (or replaced) link. */
export async function labForLink(token: string): Promise<LabPage | undefined> {
  const { store, accessKey, clock } = useDeps();
  if (!/^[\w-]{20,64}$/.test(token)) return undefined;
  const hash = linkHash(token);
  const link = (await store.claimLink.get({ linkHash: hash }).go()).data;
  if (!link) return undefined;
  const [c, host, w] = await Promise.all([
    store.claim.get({ workshop: link.workshop, hostId: link.hostId }).go(),
    store.host.get({ workshop: link.workshop, hostId: link.hostId }).go(),
    workshopRecord(link.workshop),
  ]);
  const claim: ClaimItem | null = c.data;
  if (!claim || claim.linkHash !== hash || !w) return undefined;
  if (!claim.firstOpenedAt) {
    await store.claim
      .patch({ workshop: link.workshop, hostId: link.hostId })
      .set({ firstOpenedAt: isoNow(clock) })
      .where((a, op) => op.notExists(a.firstOpenedAt))
      .go()
      .catch(() => undefined);
  }
  const spec = w.spec as Workshop;
  let access: LabPage["access"] = null;
  if (host.data?.access) {
    try {
      access = accessView(JSON.parse(open(accessKey, host.data.access)));
    } catch {
      access = null;
    }
  }
  const sshCommand =
    spec.portal.student_ssh && host.data?.address && host.data.provider !== "local"
      ? studentSsh(host.data.address, host.data.publicIp, spec.defaults.ssh_user)
      : null;
  return {
    workshop: link.workshop,
    lab: link.hostId,
    name: claim.name,
    access,
    sshCommand,
    hostKeys: sshCommand ? await trustedHostKeys(spec, link.hostId) : [],
    guideUrl: spec.portal.guide_url ?? null,
    expiry: w.expiry ?? null,
    failing: host.data?.health === "failing",
    autoSwap: spec.portal.auto_swap === true,
    update: host.data?.notice ?? null,
    build: buildOf(host.data ?? undefined),
    phase: host.data?.state === "deploying" ? (host.data.phase ?? null) : null,
    unreachable: host.data ? reachableAt(host.data, clock.now()) === "unreachable" : false,
    lastSeenAt: host.data?.provider === "enrolled" ? (host.data.lastSeenAt ?? null) : null,
  };
}

function buildOf(h: HostItem | undefined): LabPage["build"] {
  if (!h) return "waiting";
  if (h.state === "ready") return "ready";
  if (h.state === "failed") return "failed";
  if (h.state === "pending") return "waiting";
  return "building";
}

/**
 * Another device: email and PIN give the same lab under a new personal link; the old link stops working.
 * Works while claiming is closed. Five wrong PINs lock the email until the instructor unlocks it.
 */
export async function recoverLab(
  workshop: string,
  email: string,
  pin: string,
  client: ClientLike,
): Promise<{ lab: string; token: string }> {
  refuseControlChars("portal.recover_invalid", { email, pin });
  await assertAttemptAllowed(client);
  const { store } = useDeps();
  const eHash = emailHash(workshop, email);
  const wrong = new VisibleError("input", "portal.wrong_pin", "That email and PIN do not match a lab.");
  const e = (await store.claimEmail.get({ workshop, emailHash: eHash }).go()).data;
  if (!e) {
    // As slow as a wrong PIN, so the answer's timing does not tell which emails hold a lab.
    await verifyPin(pin, DUMMY_PIN_HASH);
    await recordFailure(client);
    throw wrong;
  }
  const invited = (await store.claim.get({ workshop, hostId: e.hostId }).go()).data;
  if (invited && !invited.pinHash) {
    throw new VisibleError(
      "forbidden",
      "portal.invited",
      "This lab was given by invitation: open the link in your invitation.",
    );
  }
  if (e.locked) throw lockedError();
  // Each attempt takes one of the five tries before the PIN is even checked, in one conditional write:
  // guesses sent at the same time cannot get past the limit. A right PIN gives the tries back.
  let attempt: number;
  try {
    const r = await store.claimEmail
      .patch({ workshop, emailHash: eHash })
      .add({ failedPins: 1 })
      .where((a, op) => `${op.lt(a.failedPins, MAX_PIN_FAILURES)} AND ${op.eq(a.locked, false)}`)
      .go({ response: "all_new" });
    attempt = r.data.failedPins ?? 1;
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    await store.claimEmail.patch({ workshop, emailHash: eHash }).set({ locked: true }).go();
    throw lockedError();
  }
  const c = (await store.claim.get({ workshop, hostId: e.hostId }).go()).data;
  if (!c || !(await verifyPin(pin, c.pinHash))) {
    await recordFailure(client);
    if (attempt >= MAX_PIN_FAILURES)
      await store.claimEmail.patch({ workshop, emailHash: eHash }).set({ locked: true }).go();
    throw wrong;
  }
  const token = randomBytes(24).toString("base64url");
  const hash = linkHash(token);
  const r = await store.service.transaction
    .write(({ claim, claimEmail, claimLink }) => [
      claim
        .patch({ workshop, hostId: c.hostId })
        .set({ linkHash: hash })
        .where((a, op) => op.eq(a.linkHash, c.linkHash))
        .commit(),
      claimEmail.patch({ workshop, emailHash: eHash }).set({ failedPins: 0 }).commit(),
      claimLink.delete({ linkHash: c.linkHash }).commit(),
      claimLink.create({ linkHash: hash, workshop, hostId: c.hostId }).commit(),
    ])
    .go();
  if (r.canceled) throw new VisibleError("conflict", "portal.busy", "The portal is busy. Try again.");
  await recordEvent({ workshop, type: "lab.recovered", hostId: c.hostId, detail: { student: c.name } });
  return { lab: c.hostId, token };
}
