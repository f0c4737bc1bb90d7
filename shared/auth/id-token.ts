import { constants, createPublicKey, type JsonWebKey, timingSafeEqual, verify } from "node:crypto";

/**
 * Verifies an OpenID Connect id_token (OIDC Core §3.1.3.7) with node:crypto: the signature against the
 * provider's JWKS, then issuer, audience, expiry and nonce. Asymmetric algorithms only: `none` and the HMAC
 * family (signed with the client secret) are refused.
 */

export class IdTokenError extends Error {
  override name = "IdTokenError";
  /** A short reason fit for logs; never a claim's value. */
  constructor(readonly reason: string) {
    super(`id_token refused: ${reason}`);
  }
}

export interface IdTokenClaims {
  iss: string;
  sub: string;
  aud: string | string[];
  exp: number;
  iat?: number;
  nonce?: string;
  email?: string;
  email_verified?: boolean | string;
  name?: string;
  [claim: string]: unknown;
}

export interface IdTokenCheck {
  /** The issuers accepted (exactly as the provider writes `iss`). */
  issuers: readonly string[];
  clientId: string;
  /** The nonce this browser's sign-in sent to the provider. */
  nonce: string;
  now: Date;
  /** The provider's signing keys; `refresh` asks for a fresh copy (a key the cached set does not hold). */
  keys(refresh: boolean): Promise<JsonWebKey[]>;
  /** Allowed clock difference, seconds (default 60). */
  skewSeconds?: number;
}

interface Alg {
  hash: string | null;
  kty: "RSA" | "EC" | "OKP";
  crv?: string;
  pss?: boolean;
}

const ALGS: Record<string, Alg> = {
  RS256: { hash: "sha256", kty: "RSA" },
  RS384: { hash: "sha384", kty: "RSA" },
  RS512: { hash: "sha512", kty: "RSA" },
  PS256: { hash: "sha256", kty: "RSA", pss: true },
  PS384: { hash: "sha384", kty: "RSA", pss: true },
  PS512: { hash: "sha512", kty: "RSA", pss: true },
  ES256: { hash: "sha256", kty: "EC", crv: "P-256" },
  ES384: { hash: "sha384", kty: "EC", crv: "P-384" },
  ES512: { hash: "sha512", kty: "EC", crv: "P-521" },
  EdDSA: { hash: null, kty: "OKP" },
};

function decodePart(part: string, what: string): Record<string, unknown> {
  try {
    const value = JSON.parse(Buffer.from(part, "base64url").toString("utf8")) as unknown;
    if (typeof value === "object" && value !== null && !Array.isArray(value))
      return value as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw new IdTokenError(`malformed ${what}`);
}

function pickKeys(keys: JsonWebKey[], kid: string | undefined, alg: string, spec: Alg): JsonWebKey[] {
  return keys.filter(
    (k) =>
      k.kty === spec.kty &&
      (k.use === undefined || k.use === "sig") &&
      (k.alg === undefined || k.alg === alg) &&
      (spec.crv === undefined || k.crv === spec.crv) &&
      (kid === undefined || k.kid === kid),
  );
}

function signatureValid(spec: Alg, jwk: JsonWebKey, data: Buffer, signature: Buffer): boolean {
  try {
    const key = createPublicKey({ key: jwk, format: "jwk" });
    return verify(
      spec.hash,
      data,
      {
        key,
        ...(spec.pss
          ? { padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST }
          : {}),
        ...(spec.kty === "EC" ? { dsaEncoding: "ieee-p1363" as const } : {}),
      },
      signature,
    );
  } catch {
    return false;
  }
}

function sameString(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export async function verifyIdToken(idToken: string, check: IdTokenCheck): Promise<IdTokenClaims> {
  const parts = idToken.split(".");
  if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]*$/.test(p)))
    throw new IdTokenError("not a compact JWS");
  const [h = "", p = "", s = ""] = parts;
  const header = decodePart(h, "header");
  const alg = typeof header.alg === "string" ? header.alg : "";
  const spec = ALGS[alg];
  if (!spec) throw new IdTokenError("unsupported alg");
  if (header.crit !== undefined) throw new IdTokenError("unsupported critical header");
  const kid = typeof header.kid === "string" ? header.kid : undefined;

  const data = Buffer.from(`${h}.${p}`);
  const signature = Buffer.from(s, "base64url");
  let candidates = pickKeys(await check.keys(false), kid, alg, spec);
  // A key we have not seen: the provider may have rotated its keys since they were cached.
  if (candidates.length === 0) candidates = pickKeys(await check.keys(true), kid, alg, spec);
  if (candidates.length === 0) throw new IdTokenError("no matching signing key");
  if (!candidates.some((k) => signatureValid(spec, k, data, signature)))
    throw new IdTokenError("bad signature");

  const claims = decodePart(p, "payload") as Partial<IdTokenClaims>;
  const skew = check.skewSeconds ?? 60;
  const now = Math.floor(check.now.getTime() / 1000);
  if (typeof claims.iss !== "string" || !check.issuers.includes(claims.iss))
    throw new IdTokenError("wrong issuer");
  const aud = claims.aud;
  const audiences = typeof aud === "string" ? [aud] : Array.isArray(aud) ? aud : [];
  if (!audiences.includes(check.clientId)) throw new IdTokenError("wrong audience");
  if (claims.azp !== undefined && claims.azp !== check.clientId) throw new IdTokenError("wrong azp");
  if (audiences.length > 1 && claims.azp === undefined) throw new IdTokenError("several audiences, no azp");
  if (typeof claims.exp !== "number" || claims.exp + skew <= now) throw new IdTokenError("expired");
  if (typeof claims.iat === "number" && claims.iat - skew > now)
    throw new IdTokenError("issued in the future");
  if (typeof claims.nbf === "number" && claims.nbf - skew > now) throw new IdTokenError("not yet valid");
  if (typeof claims.nonce !== "string" || !sameString(claims.nonce, check.nonce))
    throw new IdTokenError("wrong nonce");
  if (typeof claims.sub !== "string" || claims.sub === "") throw new IdTokenError("no subject");
  return claims as IdTokenClaims;
}

/** OIDC says `email_verified` is a boolean; a few providers send the string "true". */
export function emailVerified(claims: IdTokenClaims): boolean {
  return claims.email_verified === true || claims.email_verified === "true";
}
