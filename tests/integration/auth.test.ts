import { createHash, randomBytes } from "node:crypto";
import { ScanCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi } from "vitest";
import { localClient } from "../../cli/local/dynamodb.ts";
import { instructorAuth, tokenHash, verifyToken } from "../../shared/auth/tokens.ts";
import { configure } from "../../shared/runtime/deps.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { createStore, type Store } from "../../shared/store/entities.ts";
import { ensureTable } from "../../shared/store/table.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { type AuthConfig, authConfigFromEnv } from "../../web/auth/config.ts";
import { clearProviderCache } from "../../web/auth/oidc.ts";
import { safeNext } from "../../web/auth/routes.ts";
import {
  authTestApp,
  Browser,
  type FakeGitHub,
  type FakeOidc,
  routeGitHubTo,
  signIn,
  startFakeGitHub,
  startFakeOidc,
} from "../harness/fake-oidc.ts";
import { movableClock, uniqueTable } from "../harness/runtime.ts";

const BOOT = "auth-suite-bootstrap-token";
const ALLOWED = "ada@example.org";
const clock = movableClock();
let store: Store;
let oidc: FakeOidc;
const logs: string[] = [];

const device = { ttlSeconds: 600, intervalSeconds: 5, tokenDays: 90 };
let oidcConfig: AuthConfig;
const auth = instructorAuth(bootstrapAuth(BOOT));
const appFor = (config: AuthConfig) => authTestApp(config, auth, createApp({ auth }));
const browserFor = (app: ReturnType<typeof appFor>) => new Browser((path, init) => app.request(path, init));
const bootHeaders = { authorization: `Bearer ${BOOT}`, "content-type": "application/json" };
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field
const j = async (res: Response | Promise<Response>): Promise<any> => (await res).json();
// biome-ignore lint/suspicious/noExplicitAny: scanned items are checked field by field
async function scan(entity: string): Promise<any[]> {
  const items = (await store.doc.send(new ScanCommand({ TableName: store.table }))).Items ?? [];
  return items.filter((i) => i.__edb_e__ === entity);
}

beforeAll(async () => {
  const client = localClient(inject("dynamoEndpoint"));
  const table = uniqueTable();
  await ensureTable(client, table);
  store = createStore(client, table);
  configure({
    store,
    clock,
    providers: {},
    transport: () => {
      throw new Error("no hosts in the auth tests");
    },
    workflows: { start: async () => {}, stop: async () => {} },
    secrets: { get: async (keys: string[]) => ({ values: {}, missing: keys }) },
    accessKey: randomBytes(32),
  });
  setLogSink((line) => logs.push(line), "debug");
  oidc = await startFakeOidc({ user: { sub: "ada-sub", email: ALLOWED, email_verified: true, name: "Ada" } });
  oidcConfig = {
    oidc: { issuer: oidc.issuer, clientId: oidc.clientId, clientSecret: oidc.clientSecret, name: "Fake SSO" },
    allow: { emails: [ALLOWED, "@trusted.example"] },
    device,
  };
});

afterAll(async () => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  await oidc?.close();
});

afterEach(() => {
  oidc.user = { sub: "ada-sub", email: ALLOWED, email_verified: true, name: "Ada" };
  oidc.claims = {};
  oidc.signWithStrangerKey = false;
  vi.unstubAllGlobals();
});

describe("OIDC sign-in against a fake provider", () => {
  it("signs an allowed email in: PKCE checked, a session, back to the page it started from", async () => {
    const app = appFor(oidcConfig);
    const browser = browserFor(app);
    const before = (await scan("session")).length;
    const done = await signIn(browser, "oidc", { next: "/console/workshops/demo" });
    expect(done.res.status).toBe(302);
    expect(done.location).toBe("/console/workshops/demo");
    expect(oidc.tokenRequests.at(-1)).toEqual({ pkce: "ok", clientAuth: "ok", grant: "authorization_code" });
    // The state cookie is gone after one use; the session cookie is HttpOnly.
    expect(browser.jar.has("lf_oauth")).toBe(false);
    const sessionCookie = browser.setCookies.find((l) => l.startsWith("lf_console="));
    expect(sessionCookie).toMatch(/HttpOnly/i);
    const me = await j(
      app.request("/whoami", { headers: { cookie: `lf_console=${browser.jar.get("lf_console")}` } }),
    );
    expect(me.user).toEqual({ id: "oidc:ada-sub", via: "oidc", email: ALLOWED });
    expect((await scan("session")).length).toBe(before + 1);
    // The email reached the session (sealed), never the logs.
    expect(logs.join("\n")).not.toContain(ALLOWED);
  });

  it("admits a whole @domain entry, and never an email the provider has not verified", async () => {
    oidc.user = { sub: "grace-sub", email: "grace@trusted.example", email_verified: true };
    const ok = await signIn(browserFor(appFor(oidcConfig)), "oidc");
    expect(ok.res.status).toBe(302);
    expect(ok.location).toBe("/console");

    oidc.user = { sub: "mallory-sub", email: ALLOWED, email_verified: false };
    const browser = browserFor(appFor(oidcConfig));
    const refused = await signIn(browser, "oidc");
    expect(refused.res.status).toBe(403);
    expect(browser.jar.has("lf_console")).toBe(false);
  });

  it("refuses an email that is not on the list: a 403 page, no session, nothing stored or logged", async () => {
    const outsider = "eve@elsewhere.example";
    oidc.user = { sub: "eve-sub", email: outsider, email_verified: true, name: "Eve" };
    const app = appFor(oidcConfig);
    const browser = browserFor(app);
    const sessions = (await scan("session")).length;
    const logged = logs.length;
    const done = await signIn(browser, "oidc");
    expect(done.res.status).toBe(403);
    expect(done.res.headers.get("content-type")).toMatch(/text\/html/);
    expect(done.text).toContain("not allowed to use this labfleet console");
    expect(done.text).not.toContain(outsider);
    expect(browser.jar.has("lf_console")).toBe(false);
    expect(browser.jar.has("lf_oauth")).toBe(false);
    expect((await scan("session")).length).toBe(sessions);
    const me = await (await browser.get("/whoami")).res;
    expect(me.status).toBe(200);
    const newLogs = logs.slice(logged).join("\n");
    expect(newLogs).toContain("sign-in refused");
    expect(newLogs).not.toContain(outsider);
  });

  it("refuses a tampered state, a forged state cookie, and a callback with no sign-in started", async () => {
    const app = appFor(oidcConfig);
    const tampered = await signIn(browserFor(app), "oidc", {
      editCallback: (path) => path.replace(/state=([^&]+)/, (_, s: string) => `state=${s.slice(0, -2)}xx`),
    });
    expect(tampered.res.status).toBe(400);
    expect(tampered.text).toContain("Sign-in expired");
    expect(tampered.res.headers.getSetCookie().some((l) => l.startsWith("lf_console="))).toBe(false);

    // A cookie whose signature does not match its content.
    const browser = browserFor(app);
    const start = await browser.get("/auth/oidc/start");
    const cookie = browser.jar.get("lf_oauth") ?? "";
    const [body = "", sig = ""] = cookie.split(".");
    const forged = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
    forged.next = "/console/elsewhere";
    browser.jar.set("lf_oauth", `${Buffer.from(JSON.stringify(forged)).toString("base64url")}.${sig}`);
    const back = await fetch(start.location, { redirect: "manual" });
    const location = new URL(back.headers.get("location") ?? "");
    const forgedCallback = await browser.get(`${location.pathname}${location.search}`);
    expect(forgedCallback.res.status).toBe(400);

    const none = await browserFor(app).get("/auth/oidc/callback?code=x&state=y");
    expect(none.res.status).toBe(400);
    expect(oidc.tokenRequests.filter((r) => r.clientAuth === "ok").length).toBeGreaterThan(0);
  });

  it("refuses id_tokens with the wrong audience, issuer, nonce, expiry or signature", async () => {
    const cases: [string, () => void][] = [
      ["audience", () => (oidc.claims = { aud: "someone-else" })],
      ["issuer", () => (oidc.claims = { iss: "https://evil.example" })],
      ["nonce", () => (oidc.claims = { nonce: "not-the-nonce" })],
      ["expired", () => (oidc.claims = { exp: Math.floor(Date.now() / 1000) - 3600 })],
      ["signature", () => (oidc.signWithStrangerKey = true)],
    ];
    for (const [what, arrange] of cases) {
      oidc.claims = {};
      oidc.signWithStrangerKey = false;
      arrange();
      const browser = browserFor(appFor(oidcConfig));
      const done = await signIn(browser, "oidc");
      expect(done.res.status, what).toBe(502);
      expect(done.text, what).toContain("id_token refused");
      expect(browser.jar.has("lf_console"), what).toBe(false);
    }
  });

  it("redirects only to paths on this site after sign-in", () => {
    expect(safeNext("/console/workshops/a?b=c")).toBe("/console/workshops/a?b=c");
    for (const bad of ["//evil.example", "/\\evil.example", "https://evil.example", "console", "/a b"]) {
      expect(safeNext(bad), bad).toBeUndefined();
    }
  });
});

describe("GitHub sign-in with an organisation", () => {
  let gh: FakeGitHub;
  const realFetch = globalThis.fetch;
  const ghConfig = (allow: AuthConfig["allow"]): AuthConfig => ({
    github: { clientId: gh.clientId, clientSecret: gh.clientSecret, apiUrl: gh.url },
    allow,
    device,
  });
  const toFake = (url: string) => url.replace("https://github.com", gh.url);

  beforeAll(async () => {
    gh = await startFakeGitHub({
      user: { id: 4242, login: "octo", name: "Octo Cat" },
      emails: [
        { email: "octo@users.example", verified: true, primary: true },
        { email: "octo@work.example", verified: false, primary: false },
      ],
      orgs: { "other-org": "active" },
    });
  });
  afterAll(async () => gh?.close());

  it("refuses a user who is not a member of the organisation, checking with the user's token", async () => {
    vi.stubGlobal("fetch", routeGitHubTo(gh, realFetch));
    const browser = browserFor(appFor(ghConfig({ emails: [], githubOrg: "labfleet-instructors" })));
    const start = await browser.get("/auth/github/start");
    expect(new URL(start.location).searchParams.get("scope")).toContain("read:org");
    const done = await signIn(browser, "github", { providerUrl: toFake });
    expect(done.res.status).toBe(403);
    expect(done.text).toContain("labfleet-instructors");
    expect(browser.jar.has("lf_console")).toBe(false);
    expect(gh.apiCalls).toContainEqual({
      path: "/user/memberships/orgs/labfleet-instructors",
      authorized: true,
    });
  });

  it("admits an active member, and a pending invitation is not membership", async () => {
    vi.stubGlobal("fetch", routeGitHubTo(gh, realFetch));
    gh.orgs["labfleet-instructors"] = "pending";
    const pending = await signIn(
      browserFor(appFor(ghConfig({ emails: [], githubOrg: "labfleet-instructors" }))),
      "github",
      {
        providerUrl: toFake,
      },
    );
    expect(pending.res.status).toBe(403);

    gh.orgs["labfleet-instructors"] = "active";
    const app = appFor(ghConfig({ emails: [], githubOrg: "labfleet-instructors" }));
    const browser = browserFor(app);
    const done = await signIn(browser, "github", { providerUrl: toFake });
    expect(done.res.status).toBe(302);
    const me = JSON.parse((await browser.get("/whoami")).text);
    expect(me.user).toEqual({ id: "github:4242", via: "github", email: "octo@users.example" });
  });

  it("admits by email only when GitHub has verified that email", async () => {
    vi.stubGlobal("fetch", routeGitHubTo(gh, realFetch));
    const unverified = await signIn(
      browserFor(appFor(ghConfig({ emails: ["octo@work.example"] }))),
      "github",
      {
        providerUrl: toFake,
      },
    );
    expect(unverified.res.status).toBe(403);
    const verified = await signIn(
      browserFor(appFor(ghConfig({ emails: ["OCTO@users.example"] }))),
      "github",
      {
        providerUrl: toFake,
      },
    );
    expect(verified.res.status).toBe(302);
  });
});

describe("API tokens", () => {
  const app = () => appFor(oidcConfig);

  it("creates a token shown once and stored only as its SHA-256; lists it without the secret; revokes it", async () => {
    const created = await app().request("/api/tokens", {
      method: "POST",
      headers: bootHeaders,
      body: JSON.stringify({ name: "ci pipeline" }),
    });
    expect(created.status).toBe(201);
    const { token, info } = await j(created);
    expect(token).toMatch(/^lf_[A-Za-z0-9_-]{43}$/);
    expect(info).toMatchObject({ name: "ci pipeline", owner: "bootstrap" });

    // The store holds the hash, never the token.
    const items = await scan("apiToken");
    const mine = items.find((i) => i.tokenId === info.id);
    expect(mine.hash).toBe(createHash("sha256").update(token).digest("hex"));
    expect(mine.hash).toBe(tokenHash(token));
    expect(JSON.stringify(items)).not.toContain(token);
    expect(JSON.stringify(items)).not.toContain(token.slice(3));

    const listed = await j(app().request("/api/tokens", { headers: bootHeaders }));
    const row = listed.tokens.find((t: { id: string }) => t.id === info.id);
    expect(row).toMatchObject({ id: info.id, name: "ci pipeline", owner: "bootstrap", mine: true });
    expect(JSON.stringify(listed)).not.toContain(token);
    expect(JSON.stringify(listed)).not.toContain(mine.hash);

    // The token works for the instructor API, and records its use.
    const bearer = { authorization: `Bearer ${token}` };
    expect((await app().request("/api/workshops", { headers: bearer })).status).toBe(200);
    const me = await j(app().request("/api/tokens/current", { headers: bearer }));
    expect(me).toMatchObject({ owner: "bootstrap", token: { id: info.id } });
    expect(me.token.lastUsedAt).toBeDefined();
    expect(await verifyToken(token)).toEqual({ id: "bootstrap", tokenId: info.id, name: "ci pipeline" });

    const revoked = await app().request(`/api/tokens/${info.id}`, { method: "DELETE", headers: bootHeaders });
    expect(revoked.status).toBe(200);
    expect((await app().request("/api/workshops", { headers: bearer })).status).toBe(401);
    expect(await verifyToken(token)).toBeUndefined();
    const after = await j(app().request("/api/tokens", { headers: bootHeaders }));
    expect(after.tokens.map((t: { id: string }) => t.id)).not.toContain(info.id);
    expect(
      (await app().request(`/api/tokens/${info.id}`, { method: "DELETE", headers: bootHeaders })).status,
    ).toBe(404);
  });

  it("stops accepting a token at its expiry, and refuses bad input and strangers", async () => {
    const { token } = await j(
      app().request("/api/tokens", {
        method: "POST",
        headers: bootHeaders,
        body: JSON.stringify({ name: "short lived", expiresInDays: 1 }),
      }),
    );
    expect(await verifyToken(token)).toBeDefined();
    clock.advance(25 * 3600 * 1000);
    try {
      expect(await verifyToken(token)).toBeUndefined();
      expect(
        (await app().request("/api/tokens", { headers: { authorization: `Bearer ${token}` } })).status,
      ).toBe(401);
    } finally {
      clock.advance(-25 * 3600 * 1000);
    }
    const bad = await app().request("/api/tokens", {
      method: "POST",
      headers: bootHeaders,
      body: JSON.stringify({ name: "", expiresInDays: 0 }),
    });
    expect(bad.status).toBe(400);
    expect((await app().request("/api/tokens")).status).toBe(401);
    expect(
      (await app().request("/api/tokens", { headers: { authorization: "Bearer lf_guess" } })).status,
    ).toBe(401);
    // Logs carry token ids, never tokens.
    expect(logs.join("\n")).not.toContain(token);
  });

  it("revokes the token the caller presents (labfleet logout)", async () => {
    const { token } = await j(
      app().request("/api/tokens", {
        method: "POST",
        headers: bootHeaders,
        body: JSON.stringify({ name: "laptop" }),
      }),
    );
    const bearer = { authorization: `Bearer ${token}` };
    const r = await app().request("/api/tokens/current", { method: "DELETE", headers: bearer });
    expect(await j(r)).toEqual({ revoked: true });
    expect((await app().request("/api/tokens/current", { headers: bearer })).status).toBe(401);
  });
});

describe("device login over HTTP", () => {
  it("is pending until a signed-in instructor approves it; then hands out one token, once", async () => {
    const app = appFor(oidcConfig);
    const started = await j(app.request("/auth/device", { method: "POST", body: "{}" }));
    expect(started.userCode).toMatch(/^[B-Z]{4}-[B-Z]{4}$/);
    expect(started.verifyUrlComplete).toBe(`http://localhost/auth/device/verify?code=${started.userCode}`);
    const poll = () =>
      app.request("/auth/device/token", {
        method: "POST",
        body: JSON.stringify({ deviceCode: started.deviceCode }),
      });
    expect(await j(poll())).toEqual({ status: "pending" });
    // Polling faster than the interval (5 s here) is told to slow down.
    const fast = await poll();
    expect(fast.status).toBe(429);
    expect((await j(fast)).error.code).toBe("device.slow_down");

    // Without a session the page offers the sign-ins, each coming back here after.
    const anonymous = await browserFor(app).get(`/auth/device/verify?code=${started.userCode}`);
    expect(anonymous.res.status).toBe(200);
    const here = `/auth/device/verify?code=${started.userCode}`;
    expect(anonymous.text).toContain(`href="/auth/oidc/start?next=${encodeURIComponent(here)}"`);
    expect(anonymous.text).toContain(`href="/console/login?next=${encodeURIComponent(here)}"`);
    expect(anonymous.text).not.toContain('name="_csrf"');

    const browser = browserFor(app);
    expect((await signIn(browser, "oidc")).res.status).toBe(302);
    const page = await browser.get(`/auth/device/verify?code=${started.userCode.toLowerCase()}`);
    expect(page.res.status).toBe(200);
    expect(page.text).toContain(started.userCode);
    const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1] ?? "";
    expect(csrf).not.toBe("");

    // A post without the session's CSRF value, or from another site, changes nothing.
    const noCsrf = await browser.postForm("/auth/device/verify", {
      code: started.userCode,
      decision: "approve",
    });
    expect(noCsrf.res.status).toBe(403);
    const crossSite = await browser.postForm(
      "/auth/device/verify",
      { _csrf: csrf, code: started.userCode, decision: "approve" },
      { origin: "https://evil.example" },
    );
    expect(crossSite.res.status).toBe(403);
    clock.advance(5000); // the poll interval, without waiting for it
    expect(await j(poll())).toEqual({ status: "pending" });

    const approved = await browser.postForm("/auth/device/verify", {
      _csrf: csrf,
      code: started.userCode,
      decision: "approve",
    });
    expect(approved.res.status).toBe(200);
    expect(approved.text).toContain("CLI signed in");

    clock.advance(5000);
    const got = await j(poll());
    expect(got.status).toBe("approved");
    expect(await verifyToken(got.token)).toEqual({
      id: "oidc:ada-sub",
      tokenId: got.tokenId,
      name: "labfleet login (labfleet CLI)",
    });
    const item = (await scan("apiToken")).find((i) => i.tokenId === got.tokenId);
    expect(item.name).toBe("labfleet login (labfleet CLI)");
    expect(item.expiresAt).toBeGreaterThan(Date.now() / 1000 + 89 * 24 * 3600);
    // Once only: the device code is spent.
    const again = await poll();
    expect(again.status).toBe(404);
    expect((await j(again)).error.code).toBe("device.expired");
    // No device or user code reaches the logs or the store in the clear.
    const everything = JSON.stringify(await scan("deviceLogin")) + logs.join("\n");
    expect(everything).not.toContain(started.deviceCode);
    expect(everything).not.toContain(started.userCode);
  });

  it("tells the CLI when the instructor refuses, and when the code expired", async () => {
    const app = appFor(oidcConfig);
    const browser = browserFor(app);
    await signIn(browser, "oidc");
    const started = await j(app.request("/auth/device", { method: "POST", body: "{}" }));
    const page = await browser.get(`/auth/device/verify?code=${started.userCode}`);
    const csrf = /name="_csrf" value="([^"]+)"/.exec(page.text)?.[1] ?? "";
    const denied = await browser.postForm("/auth/device/verify", {
      _csrf: csrf,
      code: started.userCode,
      decision: "deny",
    });
    expect(denied.text).toContain("Sign-in refused");
    const poll = await app.request("/auth/device/token", {
      method: "POST",
      body: JSON.stringify({ deviceCode: started.deviceCode }),
    });
    expect(poll.status).toBe(403);
    expect((await j(poll)).error.code).toBe("device.denied");

    const late = await j(app.request("/auth/device", { method: "POST", body: "{}" }));
    clock.advance(11 * 60 * 1000);
    try {
      const expired = await browser.get(`/auth/device/verify?code=${late.userCode}`);
      expect(expired.res.status).toBe(404);
      const polled = await app.request("/auth/device/token", {
        method: "POST",
        body: JSON.stringify({ deviceCode: late.deviceCode }),
      });
      expect(polled.status).toBe(404);
    } finally {
      clock.advance(-11 * 60 * 1000);
    }
  });
});

describe("authConfigFromEnv", () => {
  it("reads every provider and the allow-lists", () => {
    const config = authConfigFromEnv({
      LABFLEET_PUBLIC_URL: "https://labfleet.example.org/",
      LABFLEET_GITHUB_CLIENT_ID: "gh-id",
      LABFLEET_GITHUB_CLIENT_SECRET: "gh-secret",
      LABFLEET_GOOGLE_CLIENT_ID: "g-id",
      LABFLEET_GOOGLE_CLIENT_SECRET: "g-secret",
      LABFLEET_OIDC_ISSUER: "https://sso.example.org/realms/staff",
      LABFLEET_OIDC_CLIENT_ID: "oidc-id",
      LABFLEET_ALLOW_EMAILS: "Ada@Example.org, @staff.example.org\nbob@example.org",
      LABFLEET_ALLOW_GITHUB_ORG: "my-org",
    });
    expect(config.publicUrl).toBe("https://labfleet.example.org");
    expect(config.github).toEqual({
      clientId: "gh-id",
      clientSecret: "gh-secret",
      apiUrl: "https://api.github.com",
    });
    expect(config.google).toEqual({ clientId: "g-id", clientSecret: "g-secret" });
    expect(config.oidc).toMatchObject({
      issuer: "https://sso.example.org/realms/staff",
      clientId: "oidc-id",
    });
    expect(config.oidc?.clientSecret).toBeUndefined();
    expect(config.allow).toEqual({
      emails: ["ada@example.org", "@staff.example.org", "bob@example.org"],
      githubOrg: "my-org",
    });
    // Nothing configured: no providers, nothing required.
    expect(authConfigFromEnv({}).github).toBeUndefined();
    // SST's placeholder for a secret that was never set counts as unset.
    expect(
      authConfigFromEnv({ LABFLEET_GITHUB_CLIENT_ID: "not-set", LABFLEET_GITHUB_CLIENT_SECRET: "not-set" })
        .github,
    ).toBeUndefined();
  });

  it("refuses half a provider, a provider nobody may use, and an org without GitHub", () => {
    expect(() =>
      authConfigFromEnv({ LABFLEET_GITHUB_CLIENT_ID: "x", LABFLEET_ALLOW_EMAILS: "a@b.org" }),
    ).toThrow(/LABFLEET_GITHUB_CLIENT_SECRET/);
    expect(() =>
      authConfigFromEnv({ LABFLEET_GOOGLE_CLIENT_ID: "x", LABFLEET_GOOGLE_CLIENT_SECRET: "y" }),
    ).toThrow(/nobody may sign in/);
    expect(() => authConfigFromEnv({ LABFLEET_ALLOW_GITHUB_ORG: "org" })).toThrow(/needs GitHub sign-in/);
    expect(() =>
      authConfigFromEnv({
        LABFLEET_OIDC_ISSUER: "http://sso.example.org",
        LABFLEET_OIDC_CLIENT_ID: "x",
        LABFLEET_ALLOW_EMAILS: "a@b.org",
      }),
    ).toThrow(/https/);
    const err = (() => {
      try {
        authConfigFromEnv({ LABFLEET_ALLOW_EMAILS: "ok@example.org, secret-person@" });
      } catch (e) {
        return (e as Error).message;
      }
      return "";
    })();
    expect(err).toContain("entry 2");
    expect(err).not.toContain("secret-person");
  });
});

// The provider cache is per process: another file's fake would otherwise meet this one's documents.
afterAll(() => clearProviderCache());
