import { randomBytes } from "node:crypto";
import { isConditionalFailure } from "../fleet/runs.ts";
import { isoNow } from "../runtime/clock.ts";
import { open, seal } from "../runtime/crypto.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { AGENT_HEADERS, NONCE_PATTERN, SIGNATURE_WINDOW_SECONDS, signatureMatches } from "./signing.ts";

/**
 * Each host's own signing secret: 32 random bytes as 64 hex characters, sealed at rest with the runtime's access key
 * (never logged, shown only to the host it belongs to, once). A rotation keeps the previous secret valid for
 * ROTATION_GRACE_SECONDS so a call signed just before it is not refused.
 */
export const ROTATION_GRACE_SECONDS = 600;

function newSecret(): string {
  return randomBytes(32).toString("hex");
}

/** Makes the host a new secret (replacing any it had, the previous one ends at once) and returns it. */
export async function issueHostSecret(workshop: string, hostId: string): Promise<string> {
  const { store, clock, accessKey } = useDeps();
  const secret = newSecret();
  await store.hostSecret
    .put({ workshop, hostId, current: seal(accessKey, secret), rotatedAt: isoNow(clock) })
    .go();
  return secret;
}

/** A new secret for the host; the old one stays valid for ROTATION_GRACE_SECONDS. Refused for a host without one. */
export async function rotateHostSecret(workshop: string, hostId: string): Promise<string> {
  const { store, clock, accessKey } = useDeps();
  const item = (await store.hostSecret.get({ workshop, hostId }).go()).data;
  if (!item?.current)
    throw new VisibleError("not_found", "agent.no_secret", `${hostId} has no signing secret`);
  const secret = newSecret();
  const now = clock.now();
  await store.hostSecret
    .put({
      workshop,
      hostId,
      current: seal(accessKey, secret),
      previous: item.current,
      previousUntil: new Date(now.getTime() + ROTATION_GRACE_SECONDS * 1000).toISOString(),
      rotatedAt: now.toISOString(),
    })
    .go();
  return secret;
}

/** Forgets the host's secret: every later call it signs is refused. */
export async function dropHostSecret(workshop: string, hostId: string): Promise<void> {
  await useDeps().store.hostSecret.delete({ workshop, hostId }).go();
}

/** How long a forgotten host's mark is kept (its agent, if it calls in that long after, is told to forget). */
export const FORGOTTEN_KEPT_SECONDS = 30 * 24 * 3600;

/**
 * A teardown's or a rejection's drop of a host's secret (an enrolled host's, or the push secret of any host that pushed): the
 * secret is deleted, so nothing it signs is accepted any more (a push, a poll, a rotation: 401), and a mark stays
 * for FORGOTTEN_KEPT_SECONDS so the host's agent, calling with it, is told `agent.forgotten` and forgets the
 * workshop. A host without a secret is left as it is. Returns whether there was a secret.
 */
export async function forgetHostSecret(workshop: string, hostId: string): Promise<boolean> {
  const { store, clock } = useDeps();
  const item = (await store.hostSecret.get({ workshop, hostId }).go()).data;
  if (!item?.current) return false;
  const now = clock.now();
  await store.hostSecret
    .put({
      workshop,
      hostId,
      rotatedAt: now.toISOString(),
      forgottenAt: now.toISOString(),
      expiresAt: Math.floor(now.getTime() / 1000) + FORGOTTEN_KEPT_SECONDS,
    })
    .go();
  return true;
}

/** The secrets a call from this host may be signed with now: the current one, and the previous inside its grace. */
export async function validHostSecrets(workshop: string, hostId: string): Promise<string[]> {
  const { store, clock, accessKey } = useDeps();
  const item = (await store.hostSecret.get({ workshop, hostId }).go()).data;
  if (!item?.current) return [];
  const list = [open(accessKey, item.current)];
  if (item.previous && item.previousUntil && Date.parse(item.previousUntil) > clock.now().getTime())
    list.push(open(accessKey, item.previous));
  return list;
}

async function isForgotten(workshop: string, hostId: string): Promise<boolean> {
  const item = (await useDeps().store.hostSecret.get({ workshop, hostId }).go()).data;
  return !!item?.forgottenAt && !item.current;
}

export interface SignedCall {
  method: string;
  /** Path and query as the host sent them. */
  path: string;
  body: string | Uint8Array;
  header(name: string): string | undefined;
}

/**
 * Checks a host's signed call (shared/agent/signing.ts) and returns who made it. Refused, with a 401 that says
 * what is wrong and never why a secret did not match: a call without the headers (`agent.unsigned`), one whose
 * timestamp is outside the window (`agent.stale`), a signature that matches no secret of that host, or a host that
 * has none (`agent.bad_signature`), and a nonce already used inside the window (`agent.replayed`).
 */
export async function verifySignedCall(call: SignedCall): Promise<{ workshop: string; hostId: string }> {
  const who = call.header(AGENT_HEADERS.host) ?? "";
  const timestampText = call.header(AGENT_HEADERS.timestamp) ?? "";
  const nonce = call.header(AGENT_HEADERS.nonce) ?? "";
  const signature = (call.header(AGENT_HEADERS.signature) ?? "").toLowerCase();
  const slash = who.indexOf("/");
  if (
    slash <= 0 ||
    slash === who.length - 1 ||
    !/^\d{1,12}$/.test(timestampText) ||
    !NONCE_PATTERN.test(nonce) ||
    !signature
  )
    throw new VisibleError(
      "auth",
      "agent.unsigned",
      `a host's call needs the headers ${Object.values(AGENT_HEADERS).join(", ")}`,
    );
  const workshop = who.slice(0, slash);
  const hostId = who.slice(slash + 1);
  const timestamp = Number(timestampText);
  const nowSeconds = Math.floor(useDeps().clock.now().getTime() / 1000);
  if (Math.abs(nowSeconds - timestamp) > SIGNATURE_WINDOW_SECONDS)
    throw new VisibleError(
      "auth",
      "agent.stale",
      `the call's timestamp is more than ${SIGNATURE_WINDOW_SECONDS} s from labfleet's clock: check the host's clock`,
    );
  const secrets = await validHostSecrets(workshop, hostId);
  if (secrets.length === 0 && (await isForgotten(workshop, hostId)))
    throw new VisibleError(
      "auth",
      "agent.forgotten",
      "labfleet no longer knows this host (it was rejected, or its workshop was torn down): it should forget the workshop",
    );
  const parts = { method: call.method, path: call.path, body: call.body, timestamp, nonce };
  if (secrets.length === 0 || !signatureMatches(secrets, parts, signature))
    throw new VisibleError("auth", "agent.bad_signature", "the call's signature is not valid for that host");
  try {
    await useDeps()
      .store.agentNonce.create({
        workshop,
        hostId,
        nonce,
        expiresAt: timestamp + SIGNATURE_WINDOW_SECONDS + 60,
      })
      .go();
  } catch (err) {
    if (isConditionalFailure(err))
      throw new VisibleError("auth", "agent.replayed", "the call was already made once (a replay)");
    throw err;
  }
  return { workshop, hostId };
}
