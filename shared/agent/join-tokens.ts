import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { ulid } from "ulid";
import { z } from "zod";
import { recordEvent } from "../fleet/events.ts";
import { isConditionalFailure } from "../fleet/runs.ts";
import { getWorkshop } from "../fleet/workshops.ts";
import { actorName, assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { JoinTokenItem } from "../store/entities.ts";

/**
 * Join tokens: what a machine presents to join a workshop as one of its hosts (POST /agent/v1/enroll). A token is
 * shown once, when it is made; the store keeps its SHA-256 only. It has an expiry (24 h by default), a number of
 * uses (1 by default; a room may share one token among 40 machines) and says whether the hosts that join with it
 * start approved or wait for an instructor. `lfj_<workshop>_<32 random bytes, base64url>`: the workshop's name
 * finds the record, the random part is the secret.
 */

export const JOIN_TOKEN_PATTERN = /^lfj_([a-z0-9](?:[a-z0-9-]{0,38}[a-z0-9])?)_([A-Za-z0-9_-]{43})$/;
export const JOIN_TOKEN_DEFAULT_SECONDS = 24 * 3600;
export const JOIN_TOKEN_MAX_SECONDS = 30 * 24 * 3600;
export const JOIN_TOKEN_MAX_USES = 1000;
/** Records are kept this long after their expiry (so a late machine is told "expired", not "invalid"). */
const KEPT_AFTER_EXPIRY_SECONDS = 7 * 24 * 3600;

export const JoinTokenId = z.string().regex(/^jtk_[0-9A-HJKMNP-TV-Z]{26}$/, {
  error: "expected a join token id: jtk_ and 26 letters and digits",
});

export const JoinTokenOptions = z.strictObject({
  uses: z
    .number({ error: `expected a number of uses: a whole number from 1 to ${JOIN_TOKEN_MAX_USES}` })
    .int({ error: `expected a number of uses: a whole number from 1 to ${JOIN_TOKEN_MAX_USES}` })
    .min(1, { error: `expected a number of uses: a whole number from 1 to ${JOIN_TOKEN_MAX_USES}` })
    .max(JOIN_TOKEN_MAX_USES, {
      error: `expected a number of uses: a whole number from 1 to ${JOIN_TOKEN_MAX_USES}`,
    })
    .default(1)
    .meta({ description: "how many machines may join with it (default 1)" }),
  expiresInSeconds: z
    .number({
      error: `expected seconds until it expires: a whole number from 60 to ${JOIN_TOKEN_MAX_SECONDS}`,
    })
    .int({ error: `expected seconds until it expires: a whole number from 60 to ${JOIN_TOKEN_MAX_SECONDS}` })
    .min(60, {
      error: `expected seconds until it expires: a whole number from 60 to ${JOIN_TOKEN_MAX_SECONDS}`,
    })
    .max(JOIN_TOKEN_MAX_SECONDS, {
      error: `expected seconds until it expires: a whole number from 60 to ${JOIN_TOKEN_MAX_SECONDS} (30 days)`,
    })
    .default(JOIN_TOKEN_DEFAULT_SECONDS)
    .meta({ description: "seconds until it stops working (default 86400: 24 h; at most 30 days)" }),
  approve: z.enum(["auto", "manual"], { error: "expected auto or manual" }).default("auto").meta({
    description:
      "auto: hosts that join with it are approved at once; manual: they wait as pending (default auto)",
  }),
});
export type JoinTokenOptions = z.input<typeof JoinTokenOptions>;

export const JOIN_TOKEN_STATES = ["active", "used_up", "expired", "revoked"] as const;

/** What may be shown about a token: never the token, never its hash. */
export interface JoinTokenInfo {
  id: string;
  workshop: string;
  uses: number;
  used: number;
  approve: "auto" | "manual";
  state: (typeof JOIN_TOKEN_STATES)[number];
  expiry: string;
  createdAt: string;
  by: string;
  revokedAt: string | null;
  /** The hosts that joined with it, in order. */
  hosts: string[];
  /** BYOD: the student it was given to (display name), else null. */
  student: string | null;
}

/** A student bound to a token (BYOD): what their claim will hold once their machine joins. */
export interface JoinClaimant {
  name: string;
  emailHash: string;
  emailSealed: string;
  pinHash: string;
  linkHash: string;
}

export function joinTokenHash(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

function stateOf(item: JoinTokenItem, now: Date): JoinTokenInfo["state"] {
  if (item.revokedAt) return "revoked";
  if (Date.parse(item.expiry) <= now.getTime()) return "expired";
  return item.remaining <= 0 ? "used_up" : "active";
}

export function joinTokenView(item: JoinTokenItem, now: Date = useDeps().clock.now()): JoinTokenInfo {
  const claimant = item.claimant as JoinClaimant | undefined;
  return {
    id: item.tokenId,
    workshop: item.workshop,
    uses: item.uses,
    used: item.uses - Math.max(item.remaining, 0),
    approve: item.approve,
    state: stateOf(item, now),
    expiry: item.expiry,
    createdAt: item.createdAt,
    by: item.by,
    revokedAt: item.revokedAt ?? null,
    hosts: item.hostIds ?? [],
    student: claimant?.name ?? null,
  };
}

/**
 * A new join token for the workshop (which must exist and not be torn down), returned once with what may be
 * shown about it. An instructor makes them; the portal makes a student's own (`claimant`, one use) as the system.
 */
export async function createJoinToken(
  workshop: string,
  options: JoinTokenOptions,
  claimant?: JoinClaimant,
): Promise<{ token: string; info: JoinTokenInfo }> {
  assertActor("instructor", "system");
  const o = JoinTokenOptions.parse(options);
  const w = await getWorkshop(workshop);
  if (w.state === "tearing_down" || w.state === "torn_down")
    throw new VisibleError("conflict", "workshop.torn_down", `${workshop} is ${w.state.replace("_", " ")}`);
  const { store, clock } = useDeps();
  const token = `lfj_${workshop}_${randomBytes(32).toString("base64url")}`;
  const now = clock.now();
  const expiry = new Date(now.getTime() + o.expiresInSeconds * 1000);
  const item = {
    workshop,
    hash: joinTokenHash(token),
    tokenId: `jtk_${ulid(now.getTime())}`,
    uses: o.uses,
    remaining: o.uses,
    approve: o.approve,
    expiry: expiry.toISOString(),
    createdAt: now.toISOString(),
    by: actorName(),
    hostIds: [] as string[],
    ...(claimant ? { claimant } : {}),
    expiresAt: Math.floor(expiry.getTime() / 1000) + KEPT_AFTER_EXPIRY_SECONDS,
  };
  await store.joinToken.create(item).go();
  log.info("join token created", { workshop, tok: item.tokenId, uses: o.uses, approve: o.approve });
  await recordEvent({
    workshop,
    type: "join_token.created",
    detail: {
      tokenId: item.tokenId,
      uses: o.uses,
      approve: o.approve,
      expiry: item.expiry,
      ...(claimant ? { student: claimant.name } : {}),
    },
  });
  return { token, info: joinTokenView(item as JoinTokenItem, now) };
}

/** The workshop's join tokens, newest first, with their state (expired and revoked ones too, until removed). */
export async function listJoinTokens(workshop: string): Promise<JoinTokenInfo[]> {
  assertActor("instructor", "system");
  await getWorkshop(workshop);
  const { store, clock } = useDeps();
  const items = (await store.joinToken.query.byWorkshop({ workshop }).go({ pages: "all" })).data;
  const now = clock.now();
  return items.sort((a, b) => b.tokenId.localeCompare(a.tokenId)).map((i) => joinTokenView(i, now));
}

async function byId(workshop: string, id: string): Promise<JoinTokenItem> {
  const tokenId = JoinTokenId.parse(id);
  const item = (await useDeps().store.joinToken.query.byWorkshop({ workshop, tokenId }).go()).data[0];
  if (!item)
    throw new VisibleError("not_found", "join_token.not_found", `${workshop} has no join token ${id}`);
  return item;
}

/** Revokes a token: machines that present it afterwards are refused (`join.revoked`); hosts that joined stay. */
export async function revokeJoinToken(workshop: string, id: string): Promise<JoinTokenInfo> {
  assertActor("instructor", "system");
  const item = await byId(workshop, id);
  const { store, clock } = useDeps();
  if (item.revokedAt) return joinTokenView(item);
  const revokedAt = clock.now().toISOString();
  await store.joinToken.patch({ workshop, hash: item.hash }).set({ revokedAt }).go();
  log.info("join token revoked", { workshop, tok: item.tokenId });
  await recordEvent({ workshop, type: "join_token.revoked", detail: { tokenId: item.tokenId } });
  return joinTokenView({ ...item, revokedAt });
}

const invalid = () =>
  new VisibleError("auth", "join.invalid", "the join token is not valid: ask the instructor for a new one");

/** Why a token cannot be used now, as the refusal a machine is given; undefined while it can. */
function refusal(item: JoinTokenItem, now: Date): VisibleError | undefined {
  const state = stateOf(item, now);
  if (state === "revoked")
    return new VisibleError(
      "auth",
      "join.revoked",
      "the join token was revoked: ask the instructor for a new one",
    );
  if (state === "expired")
    return new VisibleError(
      "auth",
      "join.expired",
      "the join token has expired: ask the instructor for a new one",
    );
  if (state === "used_up")
    return new VisibleError(
      "conflict",
      "join.used_up",
      `the join token has been used ${item.uses === 1 ? "once, its only use" : `${item.uses} times, all its uses`}: ask the instructor for a new one`,
    );
  return undefined;
}

/**
 * The token's record while the token can be used, else the refusal: `join.invalid` (malformed, unknown, or not
 * this token), `join.revoked`, `join.expired` (401), `join.used_up` (409). Uses nothing.
 */
export async function checkJoinToken(token: string): Promise<JoinTokenItem> {
  const m = JOIN_TOKEN_PATTERN.exec(token);
  if (!m?.[1]) throw invalid();
  const hash = joinTokenHash(token);
  const { store, clock } = useDeps();
  const item = (await store.joinToken.get({ workshop: m[1], hash }).go({ consistent: true })).data;
  if (!item || !timingSafeEqual(Buffer.from(item.hash), Buffer.from(hash))) throw invalid();
  const refused = refusal(item, clock.now());
  if (refused) throw refused;
  return item;
}

/**
 * Takes one use of the token, atomically: a conditional write that succeeds only while uses remain, the token is
 * not revoked and has not expired, so N uses admit exactly N machines however many race. Refused as checkJoinToken.
 */
export async function takeJoinTokenUse(item: JoinTokenItem): Promise<void> {
  const { store, clock } = useDeps();
  const now = clock.now();
  try {
    await store.joinToken
      .patch({ workshop: item.workshop, hash: item.hash })
      .subtract({ remaining: 1 })
      .where(
        (a, op) =>
          `${op.gt(a.remaining, 0)} AND ${op.notExists(a.revokedAt)} AND ${op.gt(a.expiry, now.toISOString())}`,
      )
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    const fresh = (
      await store.joinToken.get({ workshop: item.workshop, hash: item.hash }).go({ consistent: true })
    ).data;
    throw (fresh && refusal(fresh, now)) ?? invalid();
  }
}

/** Gives a use back (the join failed after taking it), and notes the host that joined otherwise. */
export async function giveJoinTokenUseBack(item: JoinTokenItem): Promise<void> {
  await useDeps()
    .store.joinToken.patch({ workshop: item.workshop, hash: item.hash })
    .add({ remaining: 1 })
    .go();
}

export async function noteJoinedHost(item: JoinTokenItem, hostId: string): Promise<void> {
  try {
    await useDeps()
      .store.joinToken.patch({ workshop: item.workshop, hash: item.hash })
      .append({ hostIds: [hostId] })
      .go();
  } catch (err) {
    // Only the token's list of hosts is lost: the host itself is recorded.
    log.warn("joined host not noted on its token", {
      workshop: item.workshop,
      tok: item.tokenId,
      hostId,
      error: errorMessage(err),
    });
  }
}

/** A word for a shell: as it is when it holds nothing the shell would read, else in single quotes. */
const shellWord = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`);

/**
 * The one line to run on a machine: fetch the agent from the API and join with the token. The token goes in the
 * environment of bash, never on a command line (where other users of the machine could read it in ps).
 */
export function joinCommand(apiUrl: string, token: string): string {
  const api = apiUrl.replace(/\/+$/, "");
  return `curl -fsSL ${shellWord(`${api}/agent/v1/agent.sh`)} | LABFLEET_JOIN_TOKEN=${shellWord(token)} bash -s -- join ${shellWord(api)}`;
}
