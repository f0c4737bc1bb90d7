import { randomBytes } from "node:crypto";
import {
  ArcticFetchError,
  CodeChallengeMethod,
  GitHub,
  Google,
  generateCodeVerifier,
  OAuth2Client,
  OAuth2RequestError,
  type OAuth2Tokens,
} from "arctic";
import { z } from "zod";
import { emailVerified, IdTokenError, verifyIdToken } from "../../shared/auth/id-token.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import type { AuthConfig, ProviderName } from "./config.ts";
import { discover, getJson, jwksKeys, ProviderError } from "./oidc.ts";

/**
 * The three ways an instructor signs in. Each provider turns an authorization code into an Identity: who the
 * provider says this is, and which of their emails it has verified. Deciding whether they may sign in is
 * the caller's (routes.ts), from the allow-list.
 */

export interface Identity {
  via: ProviderName;
  /** The provider's stable id for the account (GitHub's numeric id, the OIDC `sub`). */
  subject: string;
  name?: string | undefined;
  /** Verified emails only, the primary one first. */
  verifiedEmails: string[];
  /** GitHub only, and only when an organisation is configured: an active member of it. */
  orgMember?: boolean;
}

/** What the callback needs back from the start of the sign-in (kept in the signed, HttpOnly cookie). */
export interface Pending {
  verifier?: string | undefined;
  nonce?: string | undefined;
}

export interface Provider {
  name: ProviderName;
  label: string;
  start(state: string, redirectUri: string): Promise<{ url: URL } & Pending>;
  finish(code: string, redirectUri: string, pending: Pending): Promise<Identity>;
}

const OIDC_SCOPES = ["openid", "email", "profile"];
const GOOGLE_ISSUERS = ["https://accounts.google.com", "accounts.google.com"];
const GOOGLE_JWKS = "https://www.googleapis.com/oauth2/v3/certs";

const randomNonce = () => randomBytes(24).toString("base64url");

/** Token endpoint failures, as a reason without the provider's free text. */
async function exchange(what: string, fn: () => Promise<OAuth2Tokens>): Promise<OAuth2Tokens> {
  try {
    return await fn();
  } catch (err) {
    if (err instanceof OAuth2RequestError)
      throw new ProviderError(`the ${what} refused the code (${err.code})`);
    if (err instanceof ArcticFetchError) throw new ProviderError(`cannot reach the ${what}`);
    throw new ProviderError(`the ${what} answered unexpectedly`);
  }
}

function idTokenOf(tokens: OAuth2Tokens): string {
  try {
    return tokens.idToken();
  } catch {
    throw new ProviderError("the provider sent no id_token");
  }
}

async function checkedClaims(
  idToken: string,
  opts: { issuers: string[]; clientId: string; nonce: string | undefined; jwksUri: string },
) {
  if (!opts.nonce) throw new ProviderError("the sign-in lost its nonce");
  try {
    return await verifyIdToken(idToken, {
      issuers: opts.issuers,
      clientId: opts.clientId,
      nonce: opts.nonce,
      now: useDeps().clock.now(),
      keys: jwksKeys(opts.jwksUri),
    });
  } catch (err) {
    if (err instanceof IdTokenError) throw new ProviderError(err.message);
    throw err;
  }
}

// --- GitHub -------------------------------------------------------------------------------------------

const GitHubUser = z.object({ id: z.number(), login: z.string(), name: z.string().nullish() });
const GitHubEmails = z.array(z.object({ email: z.string(), verified: z.boolean(), primary: z.boolean() }));

function githubProvider(cfg: NonNullable<AuthConfig["github"]>, org: string | undefined): Provider {
  const client = (redirectUri: string) => new GitHub(cfg.clientId, cfg.clientSecret, redirectUri);
  const api = async (path: string, token: string): Promise<Response> => {
    try {
      return await fetch(`${cfg.apiUrl}${path}`, {
        headers: {
          accept: "application/vnd.github+json",
          authorization: `Bearer ${token}`,
          "x-github-api-version": "2022-11-28",
          "user-agent": "labfleet",
        },
        signal: AbortSignal.timeout(10_000),
      });
    } catch {
      throw new ProviderError("cannot reach the GitHub API");
    }
  };
  const json = async (path: string, token: string): Promise<unknown> => {
    const res = await api(path, token);
    if (!res.ok) {
      await res.body?.cancel();
      throw new ProviderError(`the GitHub API answered HTTP ${res.status}`);
    }
    return res.json();
  };
  return {
    name: "github",
    label: "GitHub",
    async start(state, redirectUri) {
      // read:org lets /user/memberships/orgs/ORG see private memberships too.
      const scopes = ["read:user", "user:email", ...(org ? ["read:org"] : [])];
      const url = client(redirectUri).createAuthorizationURL(state, scopes);
      url.searchParams.set("allow_signup", "false"); // signing in, not creating GitHub accounts
      return { url };
    },
    async finish(code, redirectUri) {
      const tokens = await exchange("GitHub token endpoint", () =>
        client(redirectUri).validateAuthorizationCode(code),
      );
      const token = tokens.accessToken();
      const user = GitHubUser.safeParse(await json("/user", token));
      if (!user.success) throw new ProviderError("the GitHub API answered an unexpected user");
      const emails = GitHubEmails.safeParse(await json("/user/emails", token));
      if (!emails.success) throw new ProviderError("the GitHub API answered unexpected emails");
      const verified = emails.data
        .filter((e) => e.verified)
        .sort((a, b) => Number(b.primary) - Number(a.primary))
        .map((e) => e.email);
      let orgMember: boolean | undefined;
      if (org) {
        // 200 with state "active" for a member; 404 (or 403 when the organisation restricts OAuth apps) otherwise.
        const res = await api(`/user/memberships/orgs/${encodeURIComponent(org)}`, token);
        const body = res.ok ? ((await res.json()) as { state?: unknown }) : undefined;
        if (!res.ok) await res.body?.cancel();
        orgMember = body?.state === "active";
      }
      return {
        via: "github",
        subject: String(user.data.id),
        name: user.data.name ?? user.data.login,
        verifiedEmails: verified,
        ...(orgMember === undefined ? {} : { orgMember }),
      };
    },
  };
}

// --- Google -------------------------------------------------------------------------------------------

function googleProvider(cfg: NonNullable<AuthConfig["google"]>): Provider {
  const client = (redirectUri: string) => new Google(cfg.clientId, cfg.clientSecret, redirectUri);
  return {
    name: "google",
    label: "Google",
    async start(state, redirectUri) {
      const verifier = generateCodeVerifier();
      const nonce = randomNonce();
      const url = client(redirectUri).createAuthorizationURL(state, verifier, OIDC_SCOPES);
      url.searchParams.set("nonce", nonce);
      // After a refusal, the instructor can pick another Google account instead of being signed in again.
      url.searchParams.set("prompt", "select_account");
      return { url, verifier, nonce };
    },
    async finish(code, redirectUri, pending) {
      if (!pending.verifier) throw new ProviderError("the sign-in lost its PKCE verifier");
      const verifier = pending.verifier;
      const tokens = await exchange("Google token endpoint", () =>
        client(redirectUri).validateAuthorizationCode(code, verifier),
      );
      const claims = await checkedClaims(idTokenOf(tokens), {
        issuers: GOOGLE_ISSUERS,
        clientId: cfg.clientId,
        nonce: pending.nonce,
        jwksUri: GOOGLE_JWKS,
      });
      return {
        via: "google",
        subject: claims.sub,
        name: typeof claims.name === "string" ? claims.name : undefined,
        verifiedEmails: typeof claims.email === "string" && emailVerified(claims) ? [claims.email] : [],
      };
    },
  };
}

// --- any OpenID Connect provider, by issuer URL ------------------------------------------------------

const UserInfo = z.object({
  sub: z.string(),
  email: z.string().optional(),
  email_verified: z.union([z.boolean(), z.string()]).optional(),
  name: z.string().optional(),
});

function oidcProvider(cfg: NonNullable<AuthConfig["oidc"]>): Provider {
  const client = (redirectUri: string) =>
    new OAuth2Client(cfg.clientId, cfg.clientSecret ?? null, redirectUri);
  return {
    name: "oidc",
    label: cfg.name,
    async start(state, redirectUri) {
      const doc = await discover(cfg.issuer);
      const verifier = generateCodeVerifier();
      const nonce = randomNonce();
      const url = client(redirectUri).createAuthorizationURLWithPKCE(
        doc.authorization_endpoint,
        state,
        CodeChallengeMethod.S256,
        verifier,
        OIDC_SCOPES,
      );
      url.searchParams.set("nonce", nonce);
      return { url, verifier, nonce };
    },
    async finish(code, redirectUri, pending) {
      if (!pending.verifier) throw new ProviderError("the sign-in lost its PKCE verifier");
      const verifier = pending.verifier;
      const doc = await discover(cfg.issuer);
      const tokens = await exchange("OIDC token endpoint", () =>
        client(redirectUri).validateAuthorizationCode(doc.token_endpoint, code, verifier),
      );
      const claims = await checkedClaims(idTokenOf(tokens), {
        issuers: [cfg.issuer],
        clientId: cfg.clientId,
        nonce: pending.nonce,
        jwksUri: doc.jwks_uri,
      });
      let email = typeof claims.email === "string" ? claims.email : undefined;
      let verified = emailVerified(claims);
      let name = typeof claims.name === "string" ? claims.name : undefined;
      // Some providers keep the email out of the id_token: ask userinfo, for the same subject only (OIDC §5.3.2).
      if (!email && doc.userinfo_endpoint) {
        const info = UserInfo.safeParse(
          await getJson(doc.userinfo_endpoint, "OIDC userinfo endpoint", {
            headers: { authorization: `Bearer ${tokens.accessToken()}` },
          }),
        );
        if (info.success && info.data.sub === claims.sub) {
          email = info.data.email;
          verified = info.data.email_verified === true || info.data.email_verified === "true";
          name ??= info.data.name;
        }
      }
      return { via: "oidc", subject: claims.sub, name, verifiedEmails: email && verified ? [email] : [] };
    },
  };
}

export function providersOf(config: AuthConfig): Map<ProviderName, Provider> {
  const out = new Map<ProviderName, Provider>();
  if (config.github) out.set("github", githubProvider(config.github, config.allow.githubOrg));
  if (config.google) out.set("google", googleProvider(config.google));
  if (config.oidc) out.set("oidc", oidcProvider(config.oidc));
  return out;
}
