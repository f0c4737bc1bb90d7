import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { ulid } from "ulid";
import { z } from "zod";
import { type Actor, assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";

/**
 * Instructor API tokens: what the CLI (and scripts) send as `Authorization: Bearer lf_...`. A token is shown
 * once, when it is created; the store keeps its SHA-256 only, keyed by that hash, so checking a token is one
 * strongly consistent read and a revoked token stops working at once.
 */

/** `lf_` and 32 random bytes, base64url. */
export const TOKEN_PATTERN = /^lf_[A-Za-z0-9_-]{43}$/;
/** lastUsedAt is written at most this often per token, so a busy CLI does not write on every request. */
const LAST_USED_EVERY_MS = 5 * 60 * 1000;

export const TokenName = z
  .string()
  .trim()
  .min(1, { error: "name the token" })
  .max(80)
  .regex(/^[\p{L}\p{N} ._@()/:+-]+$/u, { error: "letters, digits, spaces and . _ @ ( ) / : + - only" })
  // The pattern restated for the API document: the OpenAPI generator would write the regex's flags into it.
  .meta({ pattern: "^[\\p{L}\\p{N} ._@()/:+-]+$" });
export const TokenId = z.string().regex(/^tok_[0-9A-Z]{26}$/, { error: "expected a token id (tok_...)" });

export const CreateTokenInput = z.strictObject({
  name: TokenName,
  /** Days until the token stops working; none means it works until revoked. */
  expiresInDays: z.number().int().min(1).max(3650).optional(),
});
export type CreateTokenInput = z.input<typeof CreateTokenInput>;

/** What may be shown about a token: never the token, never its hash. */
export const TokenInfo = z.object({
  id: z.string(),
  name: z.string(),
  owner: z.string(),
  createdAt: z.string(),
  lastUsedAt: z.string().optional(),
  expiresAt: z.string().optional(),
});
export type TokenInfo = z.output<typeof TokenInfo>;

/** The same shape as web/app.ts's InstructorAuth (shared imports nothing from web). */
export interface TokenVerifier {
  verify(token: string): Promise<{ id: string; name?: string } | undefined>;
}

/** The acting instructor (refused for anyone else), narrowed so its id can be read. */
export function assertInstructor(): Extract<Actor, { type: "instructor" }> {
  return assertActor("instructor") as Extract<Actor, { type: "instructor" }>;
}

export function tokenHash(token: string): string {
  return createHash("sha256").update(token).digest("hex");
}

export function generateToken(): string {
  return `lf_${randomBytes(32).toString("base64url")}`;
}

interface TokenItem {
  hash: string;
  tokenId: string;
  name: string;
  owner: string;
  createdAt: string;
  lastUsedAt?: string | undefined;
  expiresAt?: number | undefined;
}

function view(item: TokenItem): TokenInfo {
  return {
    id: item.tokenId,
    name: item.name,
    owner: item.owner,
    createdAt: item.createdAt,
    ...(item.lastUsedAt ? { lastUsedAt: item.lastUsedAt } : {}),
    ...(item.expiresAt ? { expiresAt: new Date(item.expiresAt * 1000).toISOString() } : {}),
  };
}

const expired = (item: TokenItem, now: Date) =>
  item.expiresAt !== undefined && item.expiresAt * 1000 <= now.getTime();

/** A new token for the acting instructor (a device login acts as the instructor who approved it). */
export async function createToken(input: CreateTokenInput): Promise<{ token: string; info: TokenInfo }> {
  const actor = assertInstructor();
  const parsed = CreateTokenInput.parse(input);
  const { store, clock } = useDeps();
  const token = generateToken();
  const now = clock.now();
  const item = {
    hash: tokenHash(token),
    tokenId: `tok_${ulid()}`,
    name: parsed.name,
    owner: actor.id,
    createdAt: now.toISOString(),
    ...(parsed.expiresInDays
      ? { expiresAt: Math.floor(now.getTime() / 1000) + parsed.expiresInDays * 24 * 3600 }
      : {}),
  };
  await store.apiToken.create(item).go();
  log.info("api token created", { tok: item.tokenId, owner: item.owner, by: actor.id });
  return { token, info: view(item) };
}

/** Every instructor's tokens, newest first: instructors share one fleet, and any of them may revoke a lost one. */
export async function listTokens(): Promise<(TokenInfo & { mine: boolean })[]> {
  const actor = assertInstructor();
  const { store, clock } = useDeps();
  const now = clock.now();
  const items = (await store.apiToken.query.all({}).go({ pages: "all" })).data;
  return items
    .filter((i) => !expired(i, now))
    .sort((a, b) => b.tokenId.localeCompare(a.tokenId))
    .map((i) => ({ ...view(i), mine: i.owner === actor.id }));
}

async function byId(id: string): Promise<TokenItem | undefined> {
  const tokenId = TokenId.parse(id);
  const { store } = useDeps();
  return (await store.apiToken.query.all({ tokenId }).go()).data[0];
}

export async function revokeToken(id: string): Promise<TokenInfo> {
  const actor = assertInstructor();
  const item = await byId(id);
  if (!item) throw new VisibleError("not_found", "token.not_found", `no token ${id}`);
  await useDeps().store.apiToken.delete({ hash: item.hash }).go();
  log.info("api token revoked", { tok: item.tokenId, owner: item.owner, by: actor.id });
  return view(item);
}

/** Revokes the token the caller holds (`labfleet logout`); false when it is not an API token or already gone. */
export async function revokePresentedToken(token: string): Promise<boolean> {
  const actor = assertInstructor();
  if (!TOKEN_PATTERN.test(token)) return false;
  const { store } = useDeps();
  const hash = tokenHash(token);
  const r = await store.apiToken.delete({ hash }).go({ response: "all_old" });
  if (!r.data) return false;
  log.info("api token revoked", { tok: r.data.tokenId, owner: r.data.owner, by: actor.id });
  return true;
}

/** The token's owner, id and name when it is a live API token. */
export async function verifyToken(
  token: string,
): Promise<{ id: string; tokenId: string; name: string } | undefined> {
  if (!TOKEN_PATTERN.test(token)) return undefined;
  const { store, clock } = useDeps();
  const hash = tokenHash(token);
  const item = (await store.apiToken.get({ hash }).go({ consistent: true })).data;
  // The key is the hash itself; comparing once more in constant time costs nothing.
  if (!item || !timingSafeEqual(Buffer.from(item.hash), Buffer.from(hash))) return undefined;
  const now = clock.now();
  if (expired(item, now)) return undefined;
  if (!item.lastUsedAt || now.getTime() - Date.parse(item.lastUsedAt) >= LAST_USED_EVERY_MS) {
    await store.apiToken
      .patch({ hash })
      .set({ lastUsedAt: now.toISOString() })
      .go()
      .catch(() => undefined); // revoked meanwhile: the next request is refused
  }
  return { id: item.owner, tokenId: item.tokenId, name: item.name };
}

/** Information about one token, by the token itself (`GET /api/tokens/current`). */
export async function presentedTokenInfo(token: string): Promise<TokenInfo | undefined> {
  if (!TOKEN_PATTERN.test(token)) return undefined;
  const item = (
    await useDeps()
      .store.apiToken.get({ hash: tokenHash(token) })
      .go({ consistent: true })
  ).data;
  return item ? view(item) : undefined;
}

/**
 * The instructor API's token check: hashed API tokens first, then each fallback in order (locally the
 * runtime's bootstrap token: `instructorAuth(bootstrapAuth(token))`).
 */
export function instructorAuth(...fallbacks: TokenVerifier[]): TokenVerifier {
  return {
    async verify(token) {
      const who = await verifyToken(token);
      if (who) return { id: who.id, name: who.name };
      for (const f of fallbacks) {
        const other = await f.verify(token);
        if (other) return other;
      }
      return undefined;
    },
  };
}
