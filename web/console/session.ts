import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { Context } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { open, seal } from "../../shared/runtime/crypto.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { log } from "../../shared/runtime/logger.ts";

/**
 * Instructor sessions for the console. The cookie holds 32 random bytes; the table keeps only their SHA-256
 * (the `session` entity), with the user, a per-session CSRF secret and an expiry 8 hours on (also the TTL).
 * Sign-in with the instructor token (web/console/index.tsx) and OAuth callbacks both end in startSession.
 */

export interface SessionUser {
  id: string;
  email?: string;
  name?: string;
  via: "token" | "github" | "google" | "oidc";
}

export type CurrentSession = SessionUser & { csrf: string };

export const SESSION_COOKIE = "lf_console";
export const SESSION_SECONDS = 8 * 3600;
/** The form field, or the header for fetch(), that carries the session's CSRF secret. */
export const CSRF_FIELD = "_csrf";
export const CSRF_HEADER = "x-csrf-token";

const ID_FORMAT = /^[\w-]{43}$/;

/**
 * Set LABFLEET_TRUST_PROXY=1 only behind exactly one reverse proxy that sets X-Forwarded-Proto (the same
 * switch as the portal's). Otherwise the header is the client's to forge and is ignored.
 */
export function isHttps(c: Context): boolean {
  if (
    process.env.LABFLEET_TRUST_PROXY === "1" &&
    c.req.header("x-forwarded-proto")?.split(",")[0]?.trim() === "https"
  )
    return true;
  return new URL(c.req.url).protocol === "https:";
}

/** This site's origin as the browser sees it (https behind a trusted proxy): for links shown on a page. */
export function ownOrigin(c: Context): string {
  const url = new URL(c.req.url);
  return `${isHttps(c) ? "https:" : url.protocol}//${url.host}`;
}

const cookieOptions = (c: Context) => ({
  httpOnly: true,
  sameSite: "Lax" as const,
  secure: isHttps(c),
  path: "/",
});

const sha256 = (value: string) => createHash("sha256").update(value).digest("base64url");

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** One lookup per request: pages, the CSRF check and the layout all ask. */
const memo = new WeakMap<Context, Promise<CurrentSession | undefined>>();

export async function startSession(c: Context, user: SessionUser): Promise<void> {
  const { store, clock, accessKey } = useDeps();
  // A fresh id at every sign-in (no session fixation); this browser's previous session ends.
  const previous = getCookie(c, SESSION_COOKIE);
  if (previous && ID_FORMAT.test(previous)) await store.session.delete({ idHash: sha256(previous) }).go();
  const id = randomBytes(32).toString("base64url");
  const csrf = randomBytes(32).toString("base64url");
  const now = clock.now();
  const profile = {
    ...(user.email ? { email: user.email } : {}),
    ...(user.name ? { name: user.name } : {}),
  };
  await store.session
    .create({
      idHash: sha256(id),
      userId: user.id,
      via: user.via,
      ...(Object.keys(profile).length ? { profileSealed: seal(accessKey, JSON.stringify(profile)) } : {}),
      csrf,
      createdAt: now.toISOString(),
      expiresAt: Math.floor(now.getTime() / 1000) + SESSION_SECONDS,
    })
    .go();
  setCookie(c, SESSION_COOKIE, id, { ...cookieOptions(c), maxAge: SESSION_SECONDS });
  memo.set(c, Promise.resolve({ ...user, csrf }));
  log.info("console session started", { via: user.via });
}

async function lookup(c: Context): Promise<CurrentSession | undefined> {
  const raw = getCookie(c, SESSION_COOKIE);
  if (!raw || !ID_FORMAT.test(raw)) return undefined;
  const { store, clock, accessKey } = useDeps();
  const item = (await store.session.get({ idHash: sha256(raw) }).go()).data;
  // The table's TTL removes an expired item some time later: the expiry is checked here.
  if (!item || item.expiresAt * 1000 <= clock.now().getTime()) return undefined;
  let profile: { email?: string; name?: string } = {};
  if (item.profileSealed) {
    try {
      profile = JSON.parse(open(accessKey, item.profileSealed)) as typeof profile;
    } catch {
      return undefined; // sealed under another access key: that session is over
    }
  }
  return {
    id: item.userId,
    via: item.via,
    ...(typeof profile.email === "string" ? { email: profile.email } : {}),
    ...(typeof profile.name === "string" ? { name: profile.name } : {}),
    csrf: item.csrf,
  };
}

/** The signed-in instructor and the session's CSRF secret, or undefined (no cookie, unknown or expired). */
export function currentSession(c: Context): Promise<CurrentSession | undefined> {
  let found = memo.get(c);
  if (!found) {
    found = lookup(c);
    memo.set(c, found);
  }
  return found;
}

/** Signs out: the record goes, and so does the cookie. */
export async function endSession(c: Context): Promise<void> {
  const raw = getCookie(c, SESSION_COOKIE);
  if (raw && ID_FORMAT.test(raw))
    await useDeps()
      .store.session.delete({ idHash: sha256(raw) })
      .go();
  deleteCookie(c, SESSION_COOKIE, cookieOptions(c));
  memo.set(c, Promise.resolve(undefined));
}

/**
 * A POST may come only from this site: a foreign Origin, or Sec-Fetch-Site saying another site, is refused.
 * "null" (a hidden referrer) passes only when the browser itself says same-origin.
 */
export function sameOrigin(c: Context): boolean {
  const origin = c.req.header("origin");
  const site = c.req.header("sec-fetch-site");
  if (site === "cross-site" || site === "same-site") return false;
  if (origin === undefined) return true;
  return origin === ownOrigin(c) || (origin === "null" && site === "same-origin");
}

/** Whether a mutation carries this session's CSRF secret (form field or header) and came from this site. */
export async function csrfValid(c: Context, session: CurrentSession): Promise<boolean> {
  if (!sameOrigin(c)) return false;
  let given = c.req.header(CSRF_HEADER);
  if (!given) {
    const body = await c.req.parseBody();
    const field = body[CSRF_FIELD];
    given = typeof field === "string" ? field : undefined;
  }
  return given !== undefined && same(given, session.csrf);
}

// --- the sign-in form's own CSRF value (there is no session yet): a cookie and the same value in the form ---

export const LOGIN_COOKIE = "lf_console_login";

/** The hidden field's value for the sign-in form, setting the cookie when this browser has none. */
export function loginCsrf(c: Context): string {
  let value = getCookie(c, LOGIN_COOKIE);
  if (!value || !ID_FORMAT.test(value)) {
    value = randomBytes(32).toString("base64url");
    setCookie(c, LOGIN_COOKIE, value, { ...cookieOptions(c), path: "/console/login" });
  }
  return value;
}

export async function loginCsrfValid(c: Context): Promise<boolean> {
  if (!sameOrigin(c)) return false;
  const cookie = getCookie(c, LOGIN_COOKIE);
  const field = (await c.req.parseBody())[CSRF_FIELD];
  return Boolean(cookie && typeof field === "string" && same(field, cookie));
}
