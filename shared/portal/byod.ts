import { randomBytes } from "node:crypto";
import { createJoinToken, type JoinClaimant, joinCommand } from "../agent/join-tokens.ts";
import { withActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { open, seal } from "../runtime/crypto.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import type { Workshop } from "../workshop/schema.ts";
import { alreadyHasLab, type ClaimInput, checkClaimInput } from "./claims.ts";
import { emailHash, linkHash } from "./codes.ts";
import { hashPin } from "./pins.ts";
import { getPortal } from "./portal.ts";
import { assertAttemptAllowed, type ClientLike } from "./rate-limit.ts";
import { workshopRecord } from "./reads.ts";

/**
 * Bring your own device (`portal.enrollment: claim` with `provider.type: enrolled`): a student who claims gets no
 * lab from the fleet. They get a join page instead, at their personal link: the one line to run on their own
 * machine, with a join token made for them alone (one use, BYOD_JOIN_SECONDS to use it). The machine that joins
 * with it becomes a host of the workshop and the student's claimed lab (shared/agent/enrollment.ts: the claim,
 * its email record and the same personal link are written in one transaction with the join), so the same link
 * shows the lab building, then ready, as for any claimed lab.
 */

/** How long a student's join token works. */
export const BYOD_JOIN_SECONDS = 2 * 3600;
/** How long a join link's record is kept after its token expired (it then says so). */
const KEPT_AFTER_EXPIRY_SECONDS = 24 * 3600;

/** Whether the workshop's students enroll their own machines from the portal. */
export function isByod(spec: Pick<Workshop, "portal" | "provider"> | undefined): boolean {
  return spec?.portal.enrollment === "claim" && spec.provider.type === "enrolled";
}

/**
 * A student's claim in a BYOD workshop: checks what a claim checks (the fields, the portal open, the address's
 * failures, the email holding no lab), then makes the student's join token (bound to them) and their personal link,
 * which leads to their join page until their machine joins. Returns the personal link's token.
 */
export async function startOwnMachine(
  workshop: string,
  input: ClaimInput,
  client: ClientLike,
): Promise<string> {
  checkClaimInput(input);
  const { store, clock, accessKey } = useDeps();
  const [, portal, w] = await Promise.all([
    assertAttemptAllowed(client),
    getPortal(workshop),
    workshopRecord(workshop),
  ]);
  if (portal?.state !== "open" || portal.paused)
    throw new VisibleError("conflict", "portal.closed", "Claiming is closed right now. Ask your instructor.");
  if (portal.mode === "roster")
    throw new VisibleError(
      "forbidden",
      "portal.roster_only",
      "This workshop hands out labs by invitation: use the link you were sent.",
    );
  const spec = w?.spec as Workshop | undefined;
  if (!spec || !isByod(spec))
    throw new VisibleError(
      "conflict",
      "portal.not_byod",
      "This workshop does not enroll students' own machines.",
    );
  const eHash = emailHash(workshop, input.email);
  const held = (await store.claimEmail.get({ workshop, emailHash: eHash }).go({ consistent: true })).data;
  if (held) throw alreadyHasLab();
  const link = randomBytes(24).toString("base64url");
  const claimant: JoinClaimant = {
    name: input.name.trim(),
    emailHash: eHash,
    emailSealed: seal(accessKey, input.email.trim().toLowerCase()),
    pinHash: await hashPin(input.pin),
    linkHash: linkHash(link),
  };
  const approve = spec.provider.type === "enrolled" ? (spec.provider.approve ?? "auto") : "auto";
  const made = await withActor({ type: "system", id: "portal" }, () =>
    createJoinToken(workshop, { uses: 1, expiresInSeconds: BYOD_JOIN_SECONDS, approve }, claimant),
  );
  const expiry = made.info.expiry;
  await store.joinLink
    .create({
      linkHash: claimant.linkHash,
      workshop,
      name: claimant.name,
      tokenSealed: seal(accessKey, made.token),
      expiry,
      createdAt: isoNow(clock),
      expiresAt: Math.floor(Date.parse(expiry) / 1000) + KEPT_AFTER_EXPIRY_SECONDS,
    })
    .go();
  return link;
}

export interface JoinPage {
  workshop: string;
  name: string;
  /** The one line to run on the student's machine; null once the token expired (or the workshop ended). */
  command: string | null;
  expiry: string;
  state: "waiting" | "expired" | "ended";
}

/**
 * The join page a personal link leads to before the student's machine joined, or undefined (not such a link).
 * `apiUrl` is where the machine reaches labfleet's agent endpoints.
 */
export async function joinPageForLink(token: string, apiUrl: string): Promise<JoinPage | undefined> {
  if (!/^[\w-]{20,64}$/.test(token)) return undefined;
  const { store, clock, accessKey } = useDeps();
  const item = (await store.joinLink.get({ linkHash: linkHash(token) }).go({ consistent: true })).data;
  if (!item) return undefined;
  const w = await workshopRecord(item.workshop);
  const ended = !w || w.state === "tearing_down" || w.state === "torn_down";
  const expired = Date.parse(item.expiry) <= clock.now().getTime();
  const state = ended ? "ended" : expired ? "expired" : "waiting";
  return {
    workshop: item.workshop,
    name: item.name,
    command: state === "waiting" ? joinCommand(apiUrl, open(accessKey, item.tokenSealed)) : null,
    expiry: item.expiry,
    state,
  };
}
