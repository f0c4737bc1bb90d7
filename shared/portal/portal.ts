import { randomBytes } from "node:crypto";
import { type EventType, recordEvent } from "../fleet/events.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { open, seal } from "../runtime/crypto.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { byNumber, controlCharProblem } from "../runtime/text.ts";
import type { ClaimEmailItem, ClaimItem, PortalItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { forgetChecks } from "./checks.ts";
import { codeHash, emailHash, generateCode, linkHash } from "./codes.ts";
import { csvLine } from "./csv.ts";
import { purgeQueue, serveQueueAfter } from "./queue.ts";
import { forgetStudentReads } from "./reads.ts";

/** The instructor's side of the portal: the claim window, the code, the claims and what to do with them. */

async function workshopSpec(workshop: string): Promise<Workshop> {
  const { store } = useDeps();
  const w = (await store.workshop.get({ name: workshop }).go()).data;
  if (!w) throw new VisibleError("not_found", "workshop.not_found", `no workshop named ${workshop}`);
  return w.spec as Workshop;
}

export async function getPortal(workshop: string): Promise<PortalItem | undefined> {
  return (await useDeps().store.portal.get({ workshop }).go()).data ?? undefined;
}

async function requirePortal(workshop: string): Promise<PortalItem> {
  const p = await getPortal(workshop);
  if (!p)
    throw new VisibleError(
      "not_found",
      "portal.not_found",
      `workshop ${workshop} has no portal yet: labfleet portal open ${workshop}`,
    );
  return p;
}

async function putCode(
  workshop: string,
  version: number,
  letters: number,
): Promise<{ code: string; hash: string }> {
  const { store, clock } = useDeps();
  const code = generateCode(letters, clock.now());
  const hash = codeHash(code);
  await store.portalCode.put({ codeHash: hash, workshop, codeVersion: version }).go();
  return { code, hash };
}

/**
 * Sets the claim window, creating the portal and its first code on first use. `published`: the code works
 * and the board shows the labs as they pass their health check, but nobody can claim yet; the workflow
 * opens claiming at `portal.open_at_percent`.
 */
export async function openPortal(
  workshop: string,
  state: "open" | "closed" | "published" = "open",
): Promise<PortalView> {
  assertActor("instructor", "system");
  const { store, clock, accessKey } = useDeps();
  const spec = await workshopSpec(workshop);
  const existing = await getPortal(workshop);
  if (!existing) {
    const { code, hash } = await putCode(workshop, 1, spec.portal.code_letters);
    await store.portal
      .create({
        workshop,
        state,
        mode: spec.portal.mode,
        codeSealed: seal(accessKey, code),
        codeHash: hash,
        codeVersion: 1,
        updatedAt: isoNow(clock),
      })
      .go()
      .catch(async (err) => {
        await store.portalCode.delete({ codeHash: hash }).go(); // created meanwhile by another call
        if (!(await getPortal(workshop))) throw err;
      });
  }
  await store.portal
    .patch({ workshop })
    // The mode follows workshop.yaml: submit the file again to change it.
    .set({ state, mode: spec.portal.mode, updatedAt: isoNow(clock) })
    .go();
  forgetStudentReads(workshop);
  if (existing?.state !== state || !existing)
    await recordEvent({ workshop, type: PORTAL_EVENT[state], detail: { mode: spec.portal.mode } });
  if (state === "open") await serveQueueAfter(workshop); // claiming opens again: the line first
  return portalInfo(workshop);
}

export const closePortal = (workshop: string) => openPortal(workshop, "closed");

const PORTAL_EVENT = {
  open: "portal.opened",
  closed: "portal.closed",
  published: "portal.published",
} as const satisfies Record<PortalView["state"], EventType>;

/**
 * `labfleet portal publish`: the board goes live before claiming opens, so students can enter the code and
 * watch their labs pass the health check. A portal already open or closed is left as it is.
 */
export async function publishPortal(workshop: string): Promise<PortalView> {
  assertActor("instructor", "system");
  const p = await getPortal(workshop);
  if (p) return portalInfo(workshop);
  return openPortal(workshop, "published");
}

/** A new code: everyone on the board must enter it again; personal links keep working. */
export async function rotateCode(workshop: string): Promise<PortalView> {
  assertActor("instructor", "system");
  const { store, clock, accessKey } = useDeps();
  const p = await requirePortal(workshop);
  const spec = await workshopSpec(workshop);
  const version = p.codeVersion + 1;
  const { code, hash } = await putCode(workshop, version, spec.portal.code_letters);
  await store.portal
    .patch({ workshop })
    .set({
      codeSealed: seal(accessKey, code),
      codeHash: hash,
      codeVersion: version,
      updatedAt: isoNow(clock),
    })
    .where((a, op) => op.eq(a.codeVersion, p.codeVersion))
    .go();
  await store.portalCode.delete({ codeHash: p.codeHash }).go();
  forgetStudentReads(workshop);
  // The code itself never goes into an event: only that it changed, and its number.
  await recordEvent({ workshop, type: "portal.code_rotated", detail: { version } });
  return portalInfo(workshop);
}

export interface PortalView {
  workshop: string;
  state: "published" | "open" | "closed";
  mode: string;
  code: string;
  codeVersion: number;
  path: string;
}

/** What goes on the slide: where to go and the code to type. */
export async function portalInfo(workshop: string): Promise<PortalView> {
  assertActor("instructor", "system");
  const p = await requirePortal(workshop);
  return {
    workshop,
    state: p.state,
    mode: p.mode,
    code: open(useDeps().accessKey, p.codeSealed),
    codeVersion: p.codeVersion,
    path: "/",
  };
}

export interface ClaimRow {
  lab: string;
  name: string;
  email: string;
  how: string;
  claimedAt: string;
  firstOpenedAt: string | null;
  locked: boolean;
}

/** Every claim with its email (decrypted for the instructor only). */
export async function listClaims(workshop: string): Promise<ClaimRow[]> {
  assertActor("instructor", "system");
  const [claims, emails] = await readClaims(workshop);
  return claimRowsOf(claims, emails);
}

/** A workshop's claims and their emails' records, one query each. */
export async function readClaims(workshop: string): Promise<[ClaimItem[], ClaimEmailItem[]]> {
  const { store } = useDeps();
  const [claims, emails] = await Promise.all([
    store.claim.query.byWorkshop({ workshop }).go({ pages: "all" }),
    store.claimEmail.query.byWorkshop({ workshop }).go({ pages: "all" }),
  ]);
  return [claims.data, emails.data];
}

/** The instructor's rows of claims read once, by lab number, with each email opened and its lock. */
export function claimRowsOf(claims: readonly ClaimItem[], emails: readonly ClaimEmailItem[]): ClaimRow[] {
  const locked = new Set(emails.filter((e) => e.locked).map((e) => e.emailHash));
  const { accessKey } = useDeps();
  return claims
    .map((c) => ({
      lab: c.hostId,
      name: c.name,
      email: open(accessKey, c.emailSealed),
      how: c.how,
      claimedAt: c.claimedAt,
      firstOpenedAt: c.firstOpenedAt ?? null,
      locked: locked.has(c.emailHash),
    }))
    .sort((a, b) => byNumber(a.lab, b.lab));
}

export async function exportClaims(workshop: string): Promise<string> {
  const rows = await listClaims(workshop);
  const lines = [csvLine(["lab", "name", "email", "how", "claimed at", "first opened"])];
  for (const r of rows) lines.push(csvLine([r.lab, r.name, r.email, r.how, r.claimedAt, r.firstOpenedAt]));
  return `${lines.join("\n")}\n`;
}

async function claimOfEmail(workshop: string, email: string) {
  const { store } = useDeps();
  const e = (await store.claimEmail.get({ workshop, emailHash: emailHash(workshop, email) }).go()).data;
  if (!e) throw new VisibleError("not_found", "portal.no_claim", "no lab is claimed with that email");
  return e;
}

/**
 * Frees a lab: its claim, its email and its personal link go (`how`: released by lab, revoked by email, or removed
 * with its enrolled machine).
 */
export async function releaseLab(
  workshop: string,
  hostId: string,
  how: "released" | "revoked" | "removed" = "released",
): Promise<{ lab: string }> {
  assertActor("instructor", "system");
  const { store } = useDeps();
  const c = (await store.claim.get({ workshop, hostId }).go()).data;
  if (!c) throw new VisibleError("not_found", "portal.not_claimed", `lab ${hostId} is not claimed`);
  await store.service.transaction
    .write(({ claim, claimEmail, claimLink }) => [
      claim
        .delete({ workshop, hostId })
        .where((a, op) => op.eq(a.linkHash, c.linkHash))
        .commit(),
      claimEmail.delete({ workshop, emailHash: c.emailHash }).commit(),
      claimLink.delete({ linkHash: c.linkHash }).commit(),
    ])
    .go();
  forgetStudentReads(workshop);
  await forgetChecks(workshop, hostId);
  await recordEvent({ workshop, type: "lab.released", hostId, detail: { how, student: c.name } });
  await serveQueueAfter(workshop); // the first in line gets it (spares first)
  return { lab: hostId };
}

export async function revokeEmail(workshop: string, email: string): Promise<{ lab: string }> {
  const e = await claimOfEmail(workshop, email);
  return releaseLab(workshop, e.hostId, "revoked");
}

export async function unlockEmail(workshop: string, email: string): Promise<{ unlocked: boolean }> {
  assertActor("instructor", "system");
  const { store } = useDeps();
  const inLine = (await store.queueEmail.get({ workshop, emailHash: emailHash(workshop, email) }).go()).data;
  if (inLine) {
    await store.queueEmail
      .patch({ workshop, emailHash: inLine.emailHash })
      .set({ failedPins: 0, locked: false })
      .go();
    const entry = (await store.queueEntry.get({ workshop, place: inLine.place }).go()).data;
    await recordEvent({ workshop, type: "lab.unlocked", detail: { student: entry?.name, inLine: true } });
    return { unlocked: true };
  }
  const e = await claimOfEmail(workshop, email);
  await useDeps()
    .store.claimEmail.patch({ workshop, emailHash: e.emailHash })
    .set({ failedPins: 0, locked: false })
    .go();
  const c = (await store.claim.get({ workshop, hostId: e.hostId }).go()).data;
  await recordEvent({ workshop, type: "lab.unlocked", hostId: e.hostId, detail: { student: c?.name } });
  return { unlocked: true };
}

/** Moves a student to another (free, ready) lab, keeping their PIN; their old link stops, a new one is returned. */
export async function reassign(
  workshop: string,
  email: string,
  hostId: string,
): Promise<{ lab: string; token: string }> {
  assertActor("instructor", "system");
  const { store, clock } = useDeps();
  const e = await claimOfEmail(workshop, email);
  const old = (await store.claim.get({ workshop, hostId: e.hostId }).go()).data;
  if (!old) throw new VisibleError("not_found", "portal.no_claim", "no lab is claimed with that email");
  const host = (await store.host.get({ workshop, hostId }).go()).data;
  if (host?.state !== "ready")
    throw new VisibleError("conflict", "portal.lab_not_ready", `lab ${hostId} is not ready`);
  const token = randomBytes(24).toString("base64url");
  const hash = linkHash(token);
  const r = await store.service.transaction
    .write(({ claim, claimEmail, claimLink, host: hostEntity }) => [
      claim
        .delete({ workshop, hostId: old.hostId })
        .where((a, op) => op.eq(a.linkHash, old.linkHash))
        .commit(),
      claim
        .create({
          ...old,
          hostId,
          linkHash: hash,
          how: "reassign",
          claimedAt: isoNow(clock),
          firstOpenedAt: undefined,
        })
        .commit(),
      claimEmail.patch({ workshop, emailHash: e.emailHash }).set({ hostId }).commit(),
      claimLink.delete({ linkHash: old.linkHash }).commit(),
      claimLink.create({ linkHash: hash, workshop, hostId }).commit(),
      // Still ready: not taken off the board since it was read (as an in-place rollout's update does).
      hostEntity
        .check({ workshop, hostId })
        .where((a, op) => op.eq(a.state, "ready"))
        .commit(),
    ])
    .go();
  forgetStudentReads(workshop);
  if (r.canceled && r.data[5]?.rejected && !r.data[1]?.rejected)
    throw new VisibleError("conflict", "portal.lab_not_ready", `lab ${hostId} is not ready`);
  if (r.canceled) throw new VisibleError("conflict", "portal.lab_taken", `lab ${hostId} is already claimed`);
  // The work was done on the old lab: its check results go with it (the new claim starts with none).
  await forgetChecks(workshop, old.hostId);
  await recordEvent({
    workshop,
    type: "lab.moved",
    hostId: old.hostId,
    detail: { to: hostId, student: old.name },
  });
  await serveQueueAfter(workshop); // the lab the student left is free
  return { lab: hostId, token };
}

/** A new secret link to the instructor page; the previous one stops working. */
export async function newAdminLink(workshop: string): Promise<{ token: string }> {
  assertActor("instructor", "system");
  await requirePortal(workshop);
  const token = randomBytes(24).toString("base64url");
  await useDeps()
    .store.portal.patch({ workshop })
    .set({ adminHash: linkHash(`admin:${token}`), updatedAt: isoNow(useDeps().clock) })
    .go();
  return { token };
}

/**
 * Teardown forgets the portal: its code, every claim, email record and personal link, every check result,
 * and the waiting line. Old links and cookies
 * then lead nowhere, and a workshop brought up again under the same name starts with an empty board.
 */
export async function purgePortal(workshop: string): Promise<void> {
  const { store } = useDeps();
  await purgeQueue(workshop);
  const [portal, claims, emails] = await Promise.all([
    getPortal(workshop),
    store.claim.query.byWorkshop({ workshop }).go({ pages: "all" }),
    store.claimEmail.query.byWorkshop({ workshop }).go({ pages: "all" }),
  ]);
  for (const c of claims.data) {
    await store.claimLink.delete({ linkHash: c.linkHash }).go();
    await store.claim.delete({ workshop, hostId: c.hostId }).go();
  }
  for (const e of emails.data) await store.claimEmail.delete({ workshop, emailHash: e.emailHash }).go();
  await forgetChecks(workshop);
  if (portal) {
    await store.portalCode.delete({ codeHash: portal.codeHash }).go();
    await store.portal.delete({ workshop }).go();
  }
  forgetStudentReads(workshop);
}

export async function checkAdminLink(workshop: string, token: string): Promise<boolean> {
  const p = await getPortal(workshop);
  return Boolean(p?.adminHash && p.adminHash === linkHash(`admin:${token}`));
}

export interface Invite {
  name: string;
  email: string;
  lab: string;
  token: string;
}

/**
 * `name,email[,host_id]` lines (a header line is skipped); quoted fields may hold commas. A cell holding a
 * control character is refused with its line: names and emails end up on the instructor's screen.
 */
export function parseRoster(csv: string): { name: string; email: string; hostId?: string }[] {
  const rows: { name: string; email: string; hostId?: string }[] = [];
  const lines = csv
    .replace(/^\uFEFF/, "") // the byte order mark spreadsheets write
    .split(/\r?\n/)
    .filter((l) => l.trim() !== "");
  lines.forEach((line, i) => {
    const cells = [...line.matchAll(/\s*("([^"]*(?:""[^"]*)*)"|[^,]*)\s*(,|$)/g)]
      .map((m) => (m[2] !== undefined ? m[2].replace(/""/g, '"') : (m[1] ?? "")).trim())
      .slice(0, -1);
    const [name = "", email = "", hostId] = cells;
    const control = (["name", "email", "host_id"] as const).flatMap((field, k) => {
      const problem = controlCharProblem(cells[k] ?? "");
      return problem ? [{ path: `roster[${i}].${field}`, message: `the ${field} ${problem}` }] : [];
    });
    if (control.length) {
      throw new VisibleError(
        "input",
        "portal.roster_invalid",
        `roster line ${i + 1}: ${control.map((d) => d.message).join("; ")}`,
        control,
      );
    }
    if (i === 0 && name.toLowerCase() === "name" && email.toLowerCase() === "email") return;
    if (!name || !/^[^\s@]+@[^\s@]+\.[^\s@]+$/.test(email)) {
      throw new VisibleError(
        "input",
        "portal.roster_invalid",
        `roster line ${i + 1}: expected name,email[,host_id]`,
        [{ path: `roster[${i}]`, message: "expected name,email[,host_id]" }],
      );
    }
    rows.push({ name, email, ...(hostId ? { hostId } : {}) });
  });
  return rows;
}

/**
 * Roster mode: reserves a lab for each listed student (the named host, or the lowest free lab that has
 * not failed) and returns their personal invite links. Everyone on the list is reserved or nobody is
 * told a wrong lab: rows already holding a lab keep it and are reported as they are.
 */
export async function inviteRoster(
  workshop: string,
  csv: string,
): Promise<{ invites: Invite[]; skipped: { email: string; reason: string }[] }> {
  assertActor("instructor", "system");
  const { store, clock, accessKey } = useDeps();
  await requirePortal(workshop);
  const spec = await workshopSpec(workshop);
  if (spec.portal.mode === "open") {
    throw new VisibleError(
      "conflict",
      "portal.not_roster",
      'invitations need portal.mode "roster" or "both" in workshop.yaml',
    );
  }
  const rows = parseRoster(csv);
  const invites: Invite[] = [];
  const skipped: { email: string; reason: string }[] = [];
  for (const row of rows) {
    const eHash = emailHash(workshop, row.email);
    const [hosts, claims] = await Promise.all([
      store.host.query.byWorkshop({ workshop }).go({ pages: "all" }),
      store.claim.query.byWorkshop({ workshop }).go({ pages: "all" }),
    ]);
    if (claims.data.some((c) => c.emailHash === eHash)) {
      skipped.push({ email: row.email, reason: "already holds a lab" });
      continue;
    }
    const taken = new Set(claims.data.map((c) => c.hostId));
    const usable = hosts.data.filter(
      (h) => h.state !== "failed" && h.state !== "torn_down" && !taken.has(h.hostId),
    );
    const lab = row.hostId
      ? usable.find((h) => h.hostId === row.hostId)?.hostId
      : usable.map((h) => h.hostId).sort(byNumber)[0];
    if (!lab) {
      skipped.push({
        email: row.email,
        reason: row.hostId ? `lab ${row.hostId} is not available` : "no lab is free",
      });
      continue;
    }
    const token = randomBytes(24).toString("base64url");
    const hash = linkHash(token);
    const r = await store.service.transaction
      .write(({ claim, claimEmail, claimLink, queueEmail }) => [
        claim
          .create({
            workshop,
            hostId: lab,
            name: row.name,
            emailHash: eHash,
            emailSealed: seal(accessKey, row.email.trim().toLowerCase()),
            pinHash: "",
            linkHash: hash,
            how: "roster",
            claimedAt: isoNow(clock),
          })
          .commit(),
        claimEmail.create({ workshop, emailHash: eHash, hostId: lab, failedPins: 0, locked: false }).commit(),
        claimLink.create({ linkHash: hash, workshop, hostId: lab }).commit(),
        // An email holds a lab or a place in line, never both.
        queueEmail
          .check({ workshop, emailHash: eHash })
          .where((a, op) => op.notExists(a.place))
          .commit(),
      ])
      .go();
    if (r.canceled) skipped.push({ email: row.email, reason: "claimed meanwhile; run invite again" });
    else {
      invites.push({ name: row.name, email: row.email.trim().toLowerCase(), lab, token });
      // Who invited whom to which lab: the display name, never the email.
      await recordEvent({ workshop, type: "lab.invited", hostId: lab, detail: { student: row.name } });
    }
  }
  forgetStudentReads(workshop);
  return { invites, skipped };
}

/** Whether the workflow may still open the workshop's portal by itself: it has none yet, or one only published. */
export async function portalMayOpen(workshop: string): Promise<boolean> {
  const p = await getPortal(workshop);
  return !p || p.state === "published";
}

/**
 * The workflow opens the portal by itself once `portal.open_at_percent` of the labs are ready, the first
 * time only (or when it was only published): a portal the instructor closed stays closed.
 */
export async function openWhenReady(spec: Workshop, ready: number, total: number): Promise<boolean> {
  if (!spec.portal.enabled || total === 0 || (ready * 100) / total < spec.portal.open_at_percent)
    return false;
  if (!(await portalMayOpen(spec.name))) return false;
  await openPortal(spec.name);
  return true;
}
