import { createHash, generateKeyPairSync, type KeyObject, randomBytes, sign } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Hono } from "hono";
import type { TokenVerifier } from "../../shared/auth/tokens.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { onError } from "../../web/api/errors.ts";
import { type AuthConfig, authRoutes } from "../../web/auth/routes.ts";
import { tokensApi } from "../../web/auth/tokens-api.ts";
import { currentSession } from "../../web/console/session.ts";
import { cookieHeader, storeCookies } from "./cookies.ts";

/**
 * Fake identity providers served on 127.0.0.1 (node:http, port 0), and the small browser the auth tests
 * drive them with.
 *
 * - startFakeOidc: discovery, /authorize (auto-approves the configured user and redirects back with code and
 *   state), /token (checks the code, the PKCE verifier, the redirect URI and the client secret; answers an
 *   RS256 id_token), /jwks, /userinfo.
 * - startFakeGitHub: GitHub's /login/oauth/authorize and /login/oauth/access_token, and the REST API calls
 *   sign-in makes (/user, /user/emails, /user/memberships/orgs/:org).
 */

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

function send(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  res.writeHead(status, {
    "content-type": typeof body === "string" ? "text/plain" : "application/json",
    ...headers,
  });
  res.end(text);
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function close(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

function basicAuth(req: IncomingMessage): { id: string; secret: string } | undefined {
  const m = /^Basic\s+(\S+)$/i.exec(req.headers.authorization ?? "");
  if (!m?.[1]) return undefined;
  const text = Buffer.from(m[1], "base64").toString("utf8");
  const i = text.indexOf(":");
  return i < 0 ? undefined : { id: text.slice(0, i), secret: text.slice(i + 1) };
}

const s256 = (verifier: string) => createHash("sha256").update(verifier).digest("base64url");

// --- OpenID Connect ------------------------------------------------------------------------------------

export interface FakeUser {
  sub: string;
  email?: string;
  email_verified?: boolean;
  name?: string;
}

export interface FakeOidc {
  issuer: string;
  clientId: string;
  clientSecret: string;
  /** Who /authorize signs in; change it between tests. */
  user: FakeUser;
  /** Claims merged into the next id_tokens (a wrong `aud`, an old `exp`, ...); `undefined` removes one. */
  claims: Record<string, unknown>;
  /** Sign the id_tokens with a key that is not in the JWKS. */
  signWithStrangerKey: boolean;
  /** What /token saw, newest last. */
  tokenRequests: { pkce: "ok" | "mismatch" | "missing"; clientAuth: "ok" | "bad"; grant: string }[];
  close(): Promise<void>;
}

export async function startFakeOidc(opts: {
  clientId?: string;
  clientSecret?: string;
  user: FakeUser;
}): Promise<FakeOidc> {
  const keys = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const stranger = generateKeyPairSync("rsa", { modulusLength: 2048 });
  const kid = randomBytes(6).toString("hex");
  const codes = new Map<
    string,
    { redirectUri: string; challenge: string; nonce: string | undefined; user: FakeUser; clientId: string }
  >();
  const accessTokens = new Map<string, FakeUser>();

  const server = createServer();
  const issuer = await listen(server);
  const fake: FakeOidc = {
    issuer,
    clientId: opts.clientId ?? "labfleet-test-client",
    clientSecret: opts.clientSecret ?? randomBytes(16).toString("hex"),
    user: opts.user,
    claims: {},
    signWithStrangerKey: false,
    tokenRequests: [],
    close: () => close(server),
  };

  const idToken = (user: FakeUser, nonce: string | undefined, key: KeyObject) => {
    const now = Math.floor(Date.now() / 1000);
    const header = { alg: "RS256", typ: "JWT", kid };
    const payload: Record<string, unknown> = {
      iss: issuer,
      aud: fake.clientId,
      iat: now,
      exp: now + 300,
      ...(nonce ? { nonce } : {}),
      ...user,
      ...fake.claims,
    };
    for (const [k, v] of Object.entries(payload)) if (v === undefined) delete payload[k];
    const enc = (v: unknown) => Buffer.from(JSON.stringify(v)).toString("base64url");
    const data = `${enc(header)}.${enc(payload)}`;
    return `${data}.${sign("sha256", Buffer.from(data), key).toString("base64url")}`;
  };

  server.on("request", async (req, res) => {
    const url = new URL(req.url ?? "/", issuer);
    try {
      if (req.method === "GET" && url.pathname === "/.well-known/openid-configuration") {
        return send(res, 200, {
          issuer,
          authorization_endpoint: `${issuer}/authorize`,
          token_endpoint: `${issuer}/token`,
          jwks_uri: `${issuer}/jwks`,
          userinfo_endpoint: `${issuer}/userinfo`,
          response_types_supported: ["code"],
          subject_types_supported: ["public"],
          id_token_signing_alg_values_supported: ["RS256"],
          code_challenge_methods_supported: ["S256"],
        });
      }
      if (req.method === "GET" && url.pathname === "/jwks") {
        const jwk = keys.publicKey.export({ format: "jwk" });
        return send(res, 200, { keys: [{ ...jwk, kid, alg: "RS256", use: "sig" }] });
      }
      if (req.method === "GET" && url.pathname === "/authorize") {
        const q = url.searchParams;
        const redirectUri = q.get("redirect_uri");
        const challenge = q.get("code_challenge");
        if (q.get("client_id") !== fake.clientId) return send(res, 400, "unknown client_id");
        if (q.get("response_type") !== "code") return send(res, 400, "response_type must be code");
        if (!redirectUri) return send(res, 400, "no redirect_uri");
        if (q.get("code_challenge_method") !== "S256" || !challenge)
          return send(res, 400, "PKCE S256 required");
        if (!(q.get("scope") ?? "").split(" ").includes("openid"))
          return send(res, 400, "scope openid required");
        const code = randomBytes(16).toString("base64url");
        codes.set(code, {
          redirectUri,
          challenge,
          nonce: q.get("nonce") ?? undefined,
          user: { ...fake.user },
          clientId: fake.clientId,
        });
        const back = new URL(redirectUri);
        back.searchParams.set("code", code);
        back.searchParams.set("state", q.get("state") ?? "");
        return send(res, 302, "", { location: back.toString() });
      }
      if (req.method === "POST" && url.pathname === "/token") {
        const form = new URLSearchParams(await readBody(req));
        const creds = basicAuth(req);
        const clientAuth = creds?.id === fake.clientId && creds.secret === fake.clientSecret ? "ok" : "bad";
        const code = form.get("code") ?? "";
        const saved = codes.get(code);
        codes.delete(code); // one use
        const verifier = form.get("code_verifier");
        const pkce = !verifier ? "missing" : saved && s256(verifier) === saved.challenge ? "ok" : "mismatch";
        fake.tokenRequests.push({ pkce, clientAuth, grant: form.get("grant_type") ?? "" });
        if (clientAuth !== "ok") return send(res, 401, { error: "invalid_client" });
        if (
          form.get("grant_type") !== "authorization_code" ||
          !saved ||
          saved.redirectUri !== form.get("redirect_uri")
        )
          return send(res, 400, { error: "invalid_grant" });
        if (pkce !== "ok") return send(res, 400, { error: "invalid_grant", error_description: "PKCE" });
        const access = randomBytes(16).toString("base64url");
        accessTokens.set(access, saved.user);
        return send(res, 200, {
          access_token: access,
          token_type: "Bearer",
          expires_in: 3600,
          id_token: idToken(
            saved.user,
            saved.nonce,
            fake.signWithStrangerKey ? stranger.privateKey : keys.privateKey,
          ),
        });
      }
      if (req.method === "GET" && url.pathname === "/userinfo") {
        const token = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? "")?.[1] ?? "";
        const user = accessTokens.get(token);
        return user ? send(res, 200, user) : send(res, 401, { error: "invalid_token" });
      }
      send(res, 404, "not found");
    } catch (err) {
      send(res, 500, String(err));
    }
  });
  return fake;
}

// --- GitHub --------------------------------------------------------------------------------------------

export interface FakeGitHub {
  /** Both the web (github.com) and the API (api.github.com) side, on one port. */
  url: string;
  clientId: string;
  clientSecret: string;
  user: { id: number; login: string; name: string | null };
  emails: { email: string; verified: boolean; primary: boolean }[];
  /** Organisation logins and this user's membership state in each. */
  orgs: Record<string, "active" | "pending">;
  /** The API paths called, with whether they carried the user's token. */
  apiCalls: { path: string; authorized: boolean }[];
  close(): Promise<void>;
}

export async function startFakeGitHub(
  opts: Pick<FakeGitHub, "user" | "emails" | "orgs">,
): Promise<FakeGitHub> {
  const server = createServer();
  const url = await listen(server);
  const codes = new Map<string, string>(); // code -> redirect_uri
  const tokens = new Set<string>();
  const fake: FakeGitHub = {
    url,
    clientId: "gh-test-client",
    clientSecret: randomBytes(16).toString("hex"),
    ...opts,
    apiCalls: [],
    close: () => close(server),
  };
  server.on("request", async (req, res) => {
    const u = new URL(req.url ?? "/", url);
    if (req.method === "GET" && u.pathname === "/login/oauth/authorize") {
      if (u.searchParams.get("client_id") !== fake.clientId) return send(res, 400, "unknown client_id");
      const redirectUri = u.searchParams.get("redirect_uri") ?? "";
      const code = randomBytes(10).toString("hex");
      codes.set(code, redirectUri);
      const back = new URL(redirectUri);
      back.searchParams.set("code", code);
      back.searchParams.set("state", u.searchParams.get("state") ?? "");
      return send(res, 302, "", { location: back.toString() });
    }
    if (req.method === "POST" && u.pathname === "/login/oauth/access_token") {
      const form = new URLSearchParams(await readBody(req));
      const creds = basicAuth(req);
      if (creds?.id !== fake.clientId || creds.secret !== fake.clientSecret)
        return send(res, 200, { error: "incorrect_client_credentials" }); // GitHub answers 200 with an error
      const code = form.get("code") ?? "";
      const redirectUri = codes.get(code);
      codes.delete(code);
      if (redirectUri === undefined || redirectUri !== form.get("redirect_uri"))
        return send(res, 200, { error: "bad_verification_code" });
      const token = `gho_${randomBytes(12).toString("hex")}`;
      tokens.add(token);
      return send(res, 200, {
        access_token: token,
        token_type: "bearer",
        scope: "read:user,user:email,read:org",
      });
    }
    const token = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? "")?.[1] ?? "";
    const authorized = tokens.has(token);
    fake.apiCalls.push({ path: u.pathname, authorized });
    if (!authorized) return send(res, 401, { message: "Bad credentials" });
    if (req.method === "GET" && u.pathname === "/user") return send(res, 200, fake.user);
    if (req.method === "GET" && u.pathname === "/user/emails") return send(res, 200, fake.emails);
    const org = /^\/user\/memberships\/orgs\/([^/]+)$/.exec(u.pathname)?.[1];
    if (req.method === "GET" && org) {
      const state = fake.orgs[decodeURIComponent(org)];
      return state
        ? send(res, 200, { state, role: "member", organization: { login: org } })
        : send(res, 404, { message: "Not Found" });
    }
    send(res, 404, { message: "Not Found" });
  });
  return fake;
}

/**
 * arctic's GitHub provider posts to https://github.com/login/oauth/access_token. In tests that request goes to
 * the fake instead (nothing leaves 127.0.0.1); every other request is sent as it is.
 */
export function routeGitHubTo(fake: FakeGitHub, realFetch: typeof fetch): typeof fetch {
  return async (input, init) => {
    const req = new Request(input, init);
    if (!req.url.startsWith("https://github.com/")) return realFetch(req);
    const body = req.method === "GET" ? undefined : await req.arrayBuffer();
    return realFetch(req.url.replace("https://github.com", fake.url), {
      method: req.method,
      headers: req.headers,
      ...(body ? { body } : {}),
    });
  };
}

// --- the app under test and a browser for it ----------------------------------------------------------

/**
 * What web/app.ts mounts for sign-in: /auth, and /api/tokens behind the instructor bearer check; plus
 * /whoami, which shows the console session a browser holds. `rest` (the app's own routes) comes last.
 */
export function authTestApp(config: AuthConfig, auth: TokenVerifier, rest?: Hono) {
  const app = new Hono();
  app.onError(onError);
  app.route("/auth", authRoutes(config));
  const api = new Hono();
  api.use(async (c, next) => {
    const token = /^Bearer\s+(\S+)$/i.exec(c.req.header("authorization") ?? "")?.[1];
    const who = token ? await auth.verify(token) : undefined;
    if (!who) throw new VisibleError("auth", "auth.invalid", "the instructor token is not valid");
    await withActor({ type: "instructor", id: who.id }, () => next());
  });
  api.route("/", tokensApi);
  app.route("/api/tokens", api);
  app.get("/whoami", async (c) => {
    const s = await currentSession(c);
    return c.json({ user: s ? { id: s.id, via: s.via, email: s.email ?? null } : null });
  });
  if (rest) app.route("/", rest);
  return app;
}

/** A cookie jar over any fetch-like function: `app.request` in-process, or fetch against a served app. */
export class Browser {
  readonly jar = new Map<string, string>();
  readonly setCookies: string[] = [];
  constructor(readonly send: (path: string, init: RequestInit) => Response | Promise<Response>) {}

  async request(
    path: string,
    init: RequestInit = {},
  ): Promise<{ res: Response; text: string; location: string }> {
    const headers = new Headers(init.headers);
    const cookie = cookieHeader(this.jar).cookie;
    if (cookie) headers.set("cookie", cookie);
    const res = await this.send(path, { ...init, headers, redirect: "manual" });
    this.setCookies.push(...storeCookies(this.jar, res));
    return { res, text: await res.text(), location: res.headers.get("location") ?? "" };
  }

  get(path: string) {
    return this.request(path);
  }

  postForm(path: string, fields: Record<string, string>, headers: Record<string, string> = {}) {
    return this.request(path, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded", ...headers },
      body: new URLSearchParams(fields).toString(),
    });
  }
}

/** `path?query` of an absolute URL, for a browser that talks to the app by path. */
export function pathOf(url: string): string {
  const u = new URL(url);
  return `${u.pathname}${u.search}`;
}

/**
 * A whole provider sign-in: /auth/<provider>/start on the app, the provider's authorize page (which redirects
 * straight back), then the app's callback. `providerUrl` rewrites the authorize URL (GitHub's fake).
 */
export async function signIn(
  browser: Browser,
  provider: "oidc" | "github" | "google",
  opts: {
    next?: string;
    providerUrl?: (url: string) => string;
    editCallback?: (path: string) => string;
  } = {},
) {
  const start = await browser.get(
    `/auth/${provider}/start${opts.next ? `?next=${encodeURIComponent(opts.next)}` : ""}`,
  );
  if (start.res.status !== 302) throw new Error(`start answered ${start.res.status}: ${start.text}`);
  const authorize = opts.providerUrl ? opts.providerUrl(start.location) : start.location;
  const back = await fetch(authorize, { redirect: "manual" });
  if (back.status !== 302) throw new Error(`authorize answered ${back.status}: ${await back.text()}`);
  const callback = pathOf(back.headers.get("location") ?? "");
  return browser.get(opts.editCallback ? opts.editCallback(callback) : callback);
}
