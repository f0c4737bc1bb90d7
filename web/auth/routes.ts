import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { type Context, Hono } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { z } from "zod";
import { allowedEmail } from "../../shared/auth/allow.ts";
import {
  DeviceCode,
  decideDeviceLogin,
  normalizeUserCode,
  pendingDeviceLogin,
  pollDeviceLogin,
  StartDeviceInput,
  startDeviceLogin,
} from "../../shared/auth/device.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { derivedKey } from "../../shared/runtime/crypto.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { isVisibleError } from "../../shared/runtime/errors.ts";
import { log } from "../../shared/runtime/logger.ts";
import { onError } from "../api/errors.ts";
import {
  type CurrentSession,
  csrfValid,
  currentSession,
  isHttps,
  type SessionUser,
  startSession,
} from "../console/session.ts";
import { type AuthConfig, configuredProviders, type ProviderName } from "./config.ts";
import { ProviderError } from "./oidc.ts";
import {
  deviceConfirmPage,
  deviceDonePage,
  deviceEnterPage,
  deviceSignInPage,
  notAllowedPage,
  problemPage,
} from "./pages.ts";
import { type Identity, providersOf } from "./providers.ts";

export { type AuthConfig, authConfigFromEnv } from "./config.ts";

/**
 * Instructor sign-in, mounted at /auth:
 *   GET  /auth/:provider/start      (github | google | oidc; `?next=/console/...`) -> the provider
 *   GET  /auth/:provider/callback   the provider comes back: state, code, identity, allow-list, session
 *   POST /auth/device               the CLI asks for a device login: {deviceCode, userCode, verifyUrl, ...}
 *   POST /auth/device/token         the CLI polls: {status: "pending"} until {status: "approved", token}
 *   GET  /auth/device/verify        a signed-in instructor sees the code to confirm (`?code=`)
 *   POST /auth/device/verify        ...and approves or refuses it (session CSRF)
 */

/** Where a visitor without a console session signs in (the console's page: token or provider buttons). */
export const SIGN_IN_PATH = "/console/login";
const OAUTH_COOKIE = "lf_oauth";
/** Ten minutes to get through the provider's pages. */
const OAUTH_SECONDS = 600;

/** The console's "Sign in with ..." buttons; `next` is carried through the provider and back. */
export function signInLinks(
  config: AuthConfig,
  next?: string,
): { id: ProviderName; label: string; href: string }[] {
  const providers = providersOf(config);
  const safe = safeNext(next);
  return configuredProviders(config).map((id) => ({
    id,
    label: `Sign in with ${providers.get(id)?.label ?? id}`,
    href: `/auth/${id}/start${safe ? `?next=${encodeURIComponent(safe)}` : ""}`,
  }));
}

/** A path on this site only: `/console/x?y`, never `//evil.example` or `/\evil.example`. */
export function safeNext(next: string | undefined): string | undefined {
  if (!next || next.length > 512) return undefined;
  return /^\/(?![/\\])[\x21-\x7e]*$/.test(next) ? next : undefined;
}

// --- the signed, HttpOnly cookie that carries state, PKCE verifier and nonce to the callback ------------

const OAuthCookie = z.object({
  p: z.enum(["github", "google", "oidc"]),
  s: z.string(),
  v: z.string().optional(),
  n: z.string().optional(),
  next: z.string().optional(),
  exp: z.number(),
});
type OAuthCookie = z.output<typeof OAuthCookie>;

const cookieKey = () => derivedKey(useDeps().accessKey, "labfleet oauth cookie v1");
const mac = (value: string) => createHmac("sha256", cookieKey()).update(value).digest("base64url");

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function sealCookie(data: OAuthCookie): string {
  const body = Buffer.from(JSON.stringify(data)).toString("base64url");
  return `${body}.${mac(body)}`;
}

function openCookie(raw: string | undefined, nowMs: number): OAuthCookie | undefined {
  const [body, sig, extra] = (raw ?? "").split(".");
  if (!body || !sig || extra !== undefined || !same(sig, mac(body))) return undefined;
  try {
    const data = OAuthCookie.parse(JSON.parse(Buffer.from(body, "base64url").toString("utf8")));
    return data.exp * 1000 > nowMs ? data : undefined;
  } catch {
    return undefined;
  }
}

// --- the decision: who may sign in ---------------------------------------------------------------------

function admit(config: AuthConfig, identity: Identity): SessionUser | undefined {
  const email = allowedEmail(config.allow, identity.verifiedEmails);
  const viaOrg =
    identity.via === "github" && config.allow.githubOrg !== undefined && identity.orgMember === true;
  if (!email && !viaOrg) return undefined;
  const shown = email ?? identity.verifiedEmails[0];
  return {
    id: `${identity.via}:${identity.subject}`,
    via: identity.via,
    ...(shown ? { email: shown } : {}),
    ...(identity.name ? { name: identity.name } : {}),
  };
}

const asInstructor = <T>(session: CurrentSession, fn: () => Promise<T>) =>
  withActor({ type: "instructor", id: session.id, ...(session.name ? { name: session.name } : {}) }, fn);

async function jsonBody(req: Request): Promise<unknown> {
  const text = await req.text();
  return text === "" ? {} : JSON.parse(text);
}

const PollBody = z.strictObject({ deviceCode: DeviceCode });
const Decision = z.object({ code: z.string().max(20), decision: z.enum(["approve", "deny"]) });

export function authRoutes(config: AuthConfig) {
  const providers = providersOf(config);
  // LABFLEET_PUBLIC_URL, else this request's own origin (https behind a trusted proxy, as the console decides).
  const base = (c: Context) => {
    if (config.publicUrl) return config.publicUrl;
    const url = new URL(c.req.url);
    return `${isHttps(c) ? "https:" : url.protocol}//${url.host}`;
  };
  const redirectUri = (c: Context, p: ProviderName) => `${base(c)}/auth/${p}/callback`;
  const cookieOptions = (c: Context) => ({
    httpOnly: true,
    sameSite: "Lax" as const, // sent on the provider's top-level redirect back, not on cross-site posts
    secure: base(c).startsWith("https:"),
    path: "/auth/",
  });
  const page = (
    c: Context,
    body: ReturnType<typeof problemPage>,
    status: 200 | 400 | 401 | 403 | 404 | 502,
  ) => {
    c.header("Cache-Control", "no-store");
    return c.html(body, status);
  };

  const router = new Hono();
  // The device endpoints answer JSON errors like the rest of the API; the pages handle their own.
  router.onError(onError);

  router.get("/:provider/start", async (c) => {
    const provider = providers.get(c.req.param("provider") as ProviderName);
    if (!provider)
      return page(
        c,
        problemPage("Unknown sign-in", "That sign-in is not configured here.", SIGN_IN_PATH),
        404,
      );
    const state = randomBytes(32).toString("base64url");
    let started: Awaited<ReturnType<typeof provider.start>>;
    try {
      started = await provider.start(state, redirectUri(c, provider.name));
    } catch (err) {
      if (!(err instanceof ProviderError)) throw err;
      log.warn("sign-in could not start", { via: provider.name, reason: err.reason });
      return page(c, problemPage("Sign-in failed", `${provider.label}: ${err.reason}.`, SIGN_IN_PATH), 502);
    }
    const next = safeNext(c.req.query("next"));
    const exp = Math.floor(useDeps().clock.now().getTime() / 1000) + OAUTH_SECONDS;
    setCookie(
      c,
      OAUTH_COOKIE,
      sealCookie({
        p: provider.name,
        s: state,
        exp,
        ...(started.verifier ? { v: started.verifier } : {}),
        ...(started.nonce ? { n: started.nonce } : {}),
        ...(next ? { next } : {}),
      }),
      { ...cookieOptions(c), maxAge: OAUTH_SECONDS },
    );
    c.header("Cache-Control", "no-store");
    return c.redirect(started.url.toString(), 302);
  });

  router.get("/:provider/callback", async (c) => {
    const provider = providers.get(c.req.param("provider") as ProviderName);
    if (!provider)
      return page(
        c,
        problemPage("Unknown sign-in", "That sign-in is not configured here.", SIGN_IN_PATH),
        404,
      );
    // One use only, whatever happens next.
    const saved = openCookie(getCookie(c, OAUTH_COOKIE), useDeps().clock.now().getTime());
    deleteCookie(c, OAUTH_COOKIE, cookieOptions(c));
    const state = c.req.query("state") ?? "";
    if (!saved || saved.p !== provider.name || !same(state, saved.s)) {
      log.warn("sign-in refused", { via: provider.name, reason: "state mismatch or expired" });
      return page(
        c,
        problemPage(
          "Sign-in expired",
          "This sign-in was not started from this browser, took longer than ten minutes, or was altered on the way. Start it again.",
          SIGN_IN_PATH,
        ),
        400,
      );
    }
    if (c.req.query("error")) {
      return page(
        c,
        problemPage("Sign-in cancelled", `${provider.label} did not sign you in.`, SIGN_IN_PATH),
        400,
      );
    }
    const code = c.req.query("code");
    if (!code)
      return page(c, problemPage("Sign-in failed", `${provider.label} sent no code.`, SIGN_IN_PATH), 400);

    let identity: Identity;
    try {
      identity = await provider.finish(code, redirectUri(c, provider.name), {
        verifier: saved.v,
        nonce: saved.n,
      });
    } catch (err) {
      if (!(err instanceof ProviderError)) throw err;
      log.warn("sign-in failed", { via: provider.name, reason: err.reason });
      return page(c, problemPage("Sign-in failed", `${provider.label}: ${err.reason}.`, SIGN_IN_PATH), 502);
    }
    const user = admit(config, identity);
    if (!user) {
      // Nothing is stored: no session, no record. The log names the provider, never the account's email.
      log.warn("sign-in refused", { via: provider.name, reason: "not on the allow-list" });
      return page(c, notAllowedPage(provider.label, config.allow.githubOrg, SIGN_IN_PATH), 403);
    }
    await startSession(c, user);
    log.info("instructor signed in", { via: user.via, user: user.id });
    c.header("Cache-Control", "no-store");
    return c.redirect(saved.next ?? "/console", 302);
  });

  // --- device login: the CLI's side (JSON, no auth: the device code is the secret) --------------------

  router.post("/device", async (c) => {
    const input = StartDeviceInput.parse(await jsonBody(c.req.raw));
    const started = await startDeviceLogin(input, config.device);
    const verifyUrl = `${base(c)}/auth/device/verify`;
    c.header("Cache-Control", "no-store");
    return c.json({
      ...started,
      verifyUrl,
      verifyUrlComplete: `${verifyUrl}?code=${started.userCode}`,
    });
  });

  router.post("/device/token", async (c) => {
    const { deviceCode } = PollBody.parse(await jsonBody(c.req.raw));
    c.header("Cache-Control", "no-store");
    return c.json(await pollDeviceLogin(deviceCode, config.device));
  });

  // --- device login: the instructor's side (a console session) ----------------------------------------

  router.get("/device/verify", async (c) => {
    const code = c.req.query("code");
    const session = await currentSession(c);
    if (!session) {
      const normal = code ? normalizeUserCode(code) : undefined;
      const here = `/auth/device/verify${normal ? `?code=${normal}` : ""}`;
      return page(
        c,
        deviceSignInPage(signInLinks(config, here), `${SIGN_IN_PATH}?next=${encodeURIComponent(here)}`, here),
        200,
      );
    }
    if (!code) return page(c, deviceEnterPage(), 200);
    const pending = await asInstructor(session, () => pendingDeviceLogin(code));
    if (!pending) {
      return page(
        c,
        deviceEnterPage(
          "No sign-in is waiting for that code: it may have expired or been used. Check the code, or run labfleet login again.",
        ),
        404,
      );
    }
    return page(
      c,
      deviceConfirmPage({
        userCode: pending.userCode,
        clientName: pending.clientName,
        csrf: session.csrf,
        who: session.email ?? session.name ?? session.id,
      }),
      200,
    );
  });

  router.post("/device/verify", async (c) => {
    const session = await currentSession(c);
    if (!session)
      return page(c, problemPage("Signed out", "Sign in to the console first.", SIGN_IN_PATH), 401);
    if (!(await csrfValid(c, session))) {
      return page(
        c,
        problemPage("Refused", "This form did not come from this page. Open the link again.", SIGN_IN_PATH),
        403,
      );
    }
    const form = Decision.safeParse(await c.req.parseBody());
    if (!form.success) return page(c, deviceEnterPage("Choose Approve or Refuse."), 400);
    try {
      await asInstructor(session, () => decideDeviceLogin(form.data.code, form.data.decision));
    } catch (err) {
      if (!isVisibleError(err)) throw err;
      return page(c, deviceEnterPage("That sign-in request has expired or was already decided."), 404);
    }
    return page(c, deviceDonePage(form.data.decision === "approve"), 200);
  });

  return router;
}
