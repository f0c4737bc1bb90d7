import type { JsonWebKey } from "node:crypto";
import { z } from "zod";

/**
 * What sign-in needs from a provider over HTTP: its discovery document and its signing keys, each cached
 * in memory (per Lambda instance, or per local runtime) and fetched again when stale or when an id_token names
 * a key the cache does not hold.
 */

export class ProviderError extends Error {
  override name = "ProviderError";
  /** A short reason fit for logs and pages: never a token, code or email. */
  constructor(readonly reason: string) {
    super(reason);
  }
}

const TIMEOUT_MS = 10_000;
const DISCOVERY_TTL_MS = 60 * 60 * 1000;
const JWKS_TTL_MS = 10 * 60 * 1000;
/** An unknown `kid` refetches the keys, but not more often than this (a forged kid must not hammer the provider). */
const JWKS_MIN_REFRESH_MS = 30 * 1000;

export async function getJson(url: string, what: string, init: RequestInit = {}): Promise<unknown> {
  let res: Response;
  try {
    res = await fetch(url, {
      ...init,
      headers: { accept: "application/json", ...(init.headers ?? {}) },
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
  } catch {
    throw new ProviderError(`cannot reach the ${what}`);
  }
  if (!res.ok) {
    await res.body?.cancel();
    throw new ProviderError(`the ${what} answered HTTP ${res.status}`);
  }
  try {
    return await res.json();
  } catch {
    throw new ProviderError(`the ${what} did not answer JSON`);
  }
}

export const Discovery = z.object({
  issuer: z.string(),
  authorization_endpoint: z.url(),
  token_endpoint: z.url(),
  jwks_uri: z.url(),
  userinfo_endpoint: z.url().optional(),
});
export type Discovery = z.output<typeof Discovery>;

const discoveries = new Map<string, { doc: Discovery; at: number }>();

/** The issuer's discovery document; its `issuer` must be the configured one, character for character. */
export async function discover(issuer: string): Promise<Discovery> {
  const cached = discoveries.get(issuer);
  if (cached && Date.now() - cached.at < DISCOVERY_TTL_MS) return cached.doc;
  const url = `${issuer.replace(/\/+$/, "")}/.well-known/openid-configuration`;
  const parsed = Discovery.safeParse(await getJson(url, "OIDC discovery document"));
  if (!parsed.success) throw new ProviderError("the OIDC discovery document lacks required fields");
  if (parsed.data.issuer !== issuer)
    throw new ProviderError("the OIDC discovery document names another issuer");
  discoveries.set(issuer, { doc: parsed.data, at: Date.now() });
  return parsed.data;
}

const Jwks = z.object({ keys: z.array(z.looseObject({ kty: z.string() })) });
const keySets = new Map<string, { keys: JsonWebKey[]; at: number }>();

/** The signing keys at `jwksUri`, for verifyIdToken's `keys(refresh)`. */
export function jwksKeys(jwksUri: string): (refresh: boolean) => Promise<JsonWebKey[]> {
  return async (refresh) => {
    const cached = keySets.get(jwksUri);
    const age = cached ? Date.now() - cached.at : Number.POSITIVE_INFINITY;
    if (cached && (refresh ? age < JWKS_MIN_REFRESH_MS : age < JWKS_TTL_MS)) return cached.keys;
    const parsed = Jwks.safeParse(await getJson(jwksUri, "provider's key set (JWKS)"));
    if (!parsed.success) throw new ProviderError("the provider's key set (JWKS) is malformed");
    const keys = parsed.data.keys as JsonWebKey[];
    keySets.set(jwksUri, { keys, at: Date.now() });
    return keys;
  };
}

/** Forgets cached discovery documents and key sets (tests that restart a fake provider). */
export function clearProviderCache(): void {
  discoveries.clear();
  keySets.clear();
}
