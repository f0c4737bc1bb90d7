import { z } from "zod";
import { recordEvent } from "../fleet/events.ts";
import { isConditionalFailure } from "../fleet/runs.ts";
import { getWorkshop, listHosts } from "../fleet/workshops.ts";
import { forgetStudentReads } from "../portal/reads.ts";
import { assertActor, withActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { type HostFacts, recordEnrolledHost } from "./enrolled-hosts.ts";
import { dropHostSecret, forgetHostSecret } from "./host-secrets.ts";
import { unmetRequirements } from "./join-requirements.ts";
import {
  checkJoinToken,
  giveJoinTokenUseBack,
  JOIN_TOKEN_PATTERN,
  type JoinClaimant,
  noteJoinedHost,
  takeJoinTokenUse,
} from "./join-tokens.ts";
import { afterApproval } from "./lifecycle.ts";

/**
 * Enrollment: a machine joins a workshop with a join token (POST /agent/v1/enroll) and becomes one of its hosts,
 * approved at once or pending until an instructor approves it (pending hosts get no work). A refused join uses
 * nothing and leaves nothing behind.
 */

const count = (what: string, max: number) =>
  z
    .number({ error: `expected ${what} (a number)` })
    .nonnegative({ error: `expected ${what}: 0 or more` })
    .max(max, { error: `expected ${what}: at most ${max}` });

/** What a machine reports about itself at join (shared/agent/enrolled-hosts.ts HostFacts); unknown facts are dropped. */
export const HostFactsInput = z.object({
  hostname: z.string().max(253).optional(),
  os: z.string().max(200).optional(),
  arch: z.string().max(40).optional(),
  cpus: count("a CPU count", 4096).int({ error: "expected a CPU count: a whole number" }).optional(),
  memoryMb: count("memory in MiB", 1 << 30).optional(),
  diskGb: count("free disk in GiB", 1 << 30).optional(),
  kvm: z.boolean({ error: "expected true or false" }).optional(),
  nested: z.boolean({ error: "expected true or false" }).optional(),
  commands: z
    .array(z.string().regex(/^[\w.+-]{1,64}$/, { error: "expected a command name (no path, no spaces)" }))
    .max(4096, { error: "expected at most 4096 command names" })
    .optional(),
  agentVersion: z.string().max(40).optional(),
});

export const JoinInput = z.strictObject({
  token: z
    .string({ error: "expected the join token (a string)" })
    .max(200, { error: "expected a join token" }),
  name: z
    .string({ error: "expected the machine's name (a string)" })
    .trim()
    .min(1, { error: "expected the machine's name, got an empty string" })
    .max(100, { error: "expected a name of at most 100 characters" })
    .optional(),
  facts: HostFactsInput.default({}),
});
export type JoinInput = z.input<typeof JoinInput>;

export interface JoinAnswer {
  workshop: string;
  hostId: string;
  /** The host's signing secret: returned here once, kept by the agent, never shown again. */
  secret: string;
  enrollment: "pending" | "approved";
}

/**
 * Joins a machine to the workshop its token is for. Refused, using nothing: a token that is not valid, revoked
 * or expired (401 `join.invalid`, `join.revoked`, `join.expired`), used up (409 `join.used_up`), a workshop torn
 * down (409 `join.workshop_ended`), and a machine that does not meet `lab.requires` (`join.requirements`, with
 * one detail per unmet requirement). A claimed use is given back if recording the host fails.
 */
export async function joinWorkshop(input: JoinInput): Promise<JoinAnswer> {
  const body = JoinInput.parse(input);
  // The token names its workshop: both are read at once.
  const named = JOIN_TOKEN_PATTERN.exec(body.token)?.[1] ?? "";
  const [token, w] = await Promise.all([
    checkJoinToken(body.token),
    named ? useDeps().store.workshop.get({ name: named }).go() : { data: null },
  ]);
  const workshop = token.workshop;
  if (!w.data || w.data.state === "tearing_down" || w.data.state === "torn_down")
    throw new VisibleError("conflict", "join.workshop_ended", `the workshop ${workshop} has ended`);
  const facts = body.facts as HostFacts;
  const unmet = unmetRequirements((w.data.spec as Workshop).lab.requires ?? {}, facts);
  if (unmet.length > 0)
    throw new VisibleError(
      "input",
      "join.requirements",
      `the machine does not meet the lab's requirements (lab.requires): ${unmet.map((u) => u.path.replace(/^facts\./, "")).join(", ")}`,
      unmet,
    );
  await takeJoinTokenUse(token);
  const enrollment = token.approve === "auto" ? "approved" : "pending";
  let joined: { hostId: string; secret: string };
  try {
    joined = await recordEnrolledHost({
      workshop,
      ...(body.name ? { name: body.name } : {}),
      facts,
      enrollment,
    });
  } catch (err) {
    await giveJoinTokenUseBack(token).catch(() => undefined);
    throw err;
  }
  const { hostId } = joined;
  const claimant = token.claimant as JoinClaimant | undefined;
  if (claimant) {
    try {
      await claimForStudent(workshop, hostId, claimant);
    } catch (err) {
      // The machine is not kept without its student's claim: the host and its secret go, the use too.
      await useDeps()
        .store.host.delete({ workshop, hostId })
        .go()
        .catch(() => undefined);
      await dropHostSecret(workshop, hostId).catch(() => undefined);
      await giveJoinTokenUseBack(token).catch(() => undefined);
      throw err;
    }
  }
  log.info("host joined", { workshop, hostId, tok: token.tokenId, enrollment });
  await Promise.all([
    noteJoinedHost(token, hostId),
    withActor({ type: "host", workshop, hostId }, () =>
      recordEvent({
        workshop,
        type: "host.joined",
        hostId,
        detail: { enrollment, tokenId: token.tokenId, ...(claimant ? { student: claimant.name } : {}) },
      }),
    ),
  ]);
  if (enrollment === "approved") await runAfterApproval(workshop, hostId);
  return { workshop, hostId, secret: joined.secret, enrollment };
}

/**
 * BYOD: the machine that joined with a student's token becomes their claimed lab, in one transaction with the
 * student's email record and personal link (the link that led to their join page now opens the lab), as the
 * portal's own claims are written; an email that got a lab meanwhile refuses the join (`join.email_has_lab`).
 */
async function claimForStudent(workshop: string, hostId: string, c: JoinClaimant): Promise<void> {
  const { store, clock } = useDeps();
  const r = await store.service.transaction
    .write(({ claim, claimEmail, claimLink, joinLink }) => [
      claim
        .create({
          workshop,
          hostId,
          name: c.name,
          emailHash: c.emailHash,
          emailSealed: c.emailSealed,
          pinHash: c.pinHash,
          linkHash: c.linkHash,
          how: "open",
          claimedAt: isoNow(clock),
        })
        .commit(),
      claimEmail.create({ workshop, emailHash: c.emailHash, hostId, failedPins: 0, locked: false }).commit(),
      claimLink.create({ linkHash: c.linkHash, workshop, hostId }).commit(),
      joinLink.delete({ linkHash: c.linkHash }).commit(),
    ])
    .go();
  if (r.canceled) {
    const [, emailLost] = r.data.map((d) => d.rejected);
    throw emailLost
      ? new VisibleError(
          "conflict",
          "join.email_has_lab",
          "the student this join token was made for has a lab already: this machine was not added",
        )
      : new VisibleError("conflict", "join.busy", "labfleet is busy: run the line again");
  }
  forgetStudentReads(workshop);
  await recordEvent({ workshop, type: "lab.claimed", hostId, detail: { how: "byod", student: c.name } });
}

async function runAfterApproval(workshop: string, hostId: string): Promise<void> {
  try {
    await withActor({ type: "system", id: "enrollment" }, () => afterApproval(workshop, hostId));
  } catch (err) {
    // The host is approved either way; what follows approval is retried by the fleet's own runs.
    log.warn("after approval failed", { workshop, hostId, error: errorMessage(err) });
  }
}

/** An enrolled host as the instructor sees it while it waits (or once it was let in). */
export interface EnrolledHostView {
  id: string;
  enrollment: "pending" | "approved";
  state: string;
  joinedAt: string;
  lastSeenAt: string | null;
  facts: HostFacts;
}

export function enrolledHostView(h: HostItem): EnrolledHostView {
  return {
    id: h.hostId,
    enrollment: h.enrollment ?? "approved",
    state: h.state,
    joinedAt: h.createdAt,
    lastSeenAt: h.lastSeenAt ?? null,
    facts: (h.facts as HostFacts | undefined) ?? {},
  };
}

/** The workshop's hosts that joined and wait for an instructor's approval, oldest first. */
export async function listPendingHosts(workshop: string): Promise<EnrolledHostView[]> {
  assertActor("instructor", "system");
  await getWorkshop(workshop);
  const hosts = await listHosts(workshop);
  return hosts
    .filter((h) => h.provider === "enrolled" && h.enrollment === "pending")
    .sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.hostId.localeCompare(b.hostId))
    .map(enrolledHostView);
}

export const HostIds = z
  .array(z.string().regex(/^[a-z0-9](?:[a-z0-9-]{0,46}[a-z0-9])?$/, { error: "expected a host id" }))
  .min(1, { error: "expected at least one host id" })
  .max(1000, { error: "expected at most 1000 host ids" });

async function enrolledHost(workshop: string, hostId: string): Promise<HostItem> {
  const h = (await useDeps().store.host.get({ workshop, hostId }).go({ consistent: true })).data;
  if (!h) throw new VisibleError("not_found", "host.not_found", `${workshop} has no host ${hostId}`);
  if (h.provider !== "enrolled")
    throw new VisibleError("conflict", "host.not_enrolled", `${hostId} did not join with a join token`);
  return h;
}

export interface EnrollmentDecision {
  hostId: string;
  /** approved / rejected now, or `unchanged` (approving a host already approved). */
  result: "approved" | "rejected" | "unchanged";
}

/**
 * Approves pending hosts: they may be given work from now on (afterApproval runs for each). Every id is checked
 * before any is changed, so a typo changes nothing; approving one already approved is `unchanged`.
 */
export async function approveHosts(workshop: string, hostIds: string[]): Promise<EnrollmentDecision[]> {
  assertActor("instructor", "system");
  const ids = [...new Set(HostIds.parse(hostIds))];
  await getWorkshop(workshop);
  const hosts = await Promise.all(ids.map((id) => enrolledHost(workshop, id)));
  const { store, clock } = useDeps();
  const out: EnrollmentDecision[] = [];
  for (const h of hosts) {
    if (h.enrollment !== "pending") {
      out.push({ hostId: h.hostId, result: "unchanged" });
      continue;
    }
    try {
      await store.host
        .patch({ workshop, hostId: h.hostId })
        .set({ enrollment: "approved", updatedAt: clock.now().toISOString() })
        .where((a, op) => op.eq(a.enrollment, "pending"))
        .go();
    } catch (err) {
      if (!isConditionalFailure(err)) throw err;
      out.push({ hostId: h.hostId, result: "unchanged" }); // approved (or removed) meanwhile
      continue;
    }
    await recordEvent({ workshop, type: "host.approved", hostId: h.hostId });
    await runAfterApproval(workshop, h.hostId);
    out.push({ hostId: h.hostId, result: "approved" });
  }
  return out;
}

/**
 * Rejects pending hosts: each is deleted and its signing secret forgotten (forgetHostSecret), so its later calls
 * are refused with `agent.forgotten` and its agent forgets the workshop and stops instead of calling again. Only
 * pending hosts (`enrollment.not_pending` for an approved one: `labfleet hosts remove` takes those out); every id
 * is checked before any is changed.
 */
export async function rejectHosts(workshop: string, hostIds: string[]): Promise<EnrollmentDecision[]> {
  assertActor("instructor", "system");
  const ids = [...new Set(HostIds.parse(hostIds))];
  await getWorkshop(workshop);
  const hosts = await Promise.all(ids.map((id) => enrolledHost(workshop, id)));
  const approved = hosts.filter((h) => h.enrollment !== "pending").map((h) => h.hostId);
  if (approved.length > 0)
    throw new VisibleError(
      "conflict",
      "enrollment.not_pending",
      `${approved.join(", ")} ${approved.length === 1 ? "is" : "are"} approved already: reject takes out pending hosts only (labfleet hosts remove takes out an approved one)`,
    );
  const { store } = useDeps();
  const out: EnrollmentDecision[] = [];
  for (const h of hosts) {
    try {
      await store.host
        .delete({ workshop, hostId: h.hostId })
        .where((a, op) => op.eq(a.enrollment, "pending"))
        .go();
    } catch (err) {
      if (!isConditionalFailure(err)) throw err;
      throw new VisibleError(
        "conflict",
        "enrollment.not_pending",
        `${h.hostId} was approved or removed meanwhile: it was not rejected`,
      );
    }
    await forgetHostSecret(workshop, h.hostId);
    await recordEvent({ workshop, type: "host.rejected", hostId: h.hostId });
    out.push({ hostId: h.hostId, result: "rejected" });
  }
  return out;
}
