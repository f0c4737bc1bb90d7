import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { Context, MiddlewareHandler } from "hono";
import { deleteCookie, getCookie, setCookie } from "hono/cookie";
import { accessValid, type CodeAccess } from "../../shared/portal/claims.ts";
import { COOKIES } from "../../shared/portal/constants.ts";
import type { PortalClient } from "../../shared/portal/rate-limit.ts";
import { derivedKey } from "../../shared/runtime/crypto.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { clientAddress, trustProxy } from "../client-address.ts";

/**
 * The portal's cookies, CSRF check and who a request comes from (address and browser). Cookie values are signed with a key derived from the
 * runtime's access key (HMAC with a fixed label), so a changed access key ends every session.
 */

export type PortalEnv = { Variables: { csrf: string } };
type Ctx = Context<PortalEnv>;

const cookieKey = () => derivedKey(useDeps().accessKey, "labfleet portal cookies v1");

const mac = (purpose: string, value: string) =>
  createHmac("sha256", cookieKey()).update(`${purpose}\n${value}`).digest("base64url");

function same(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

export { clientAddress } from "../client-address.ts";

function isHttps(c: Context): boolean {
  if (trustProxy() && c.req.header("x-forwarded-proto")?.split(",")[0]?.trim() === "https") return true;
  return new URL(c.req.url).protocol === "https:";
}

function ownOrigin(c: Context): string {
  const url = new URL(c.req.url);
  return `${isHttps(c) ? "https:" : url.protocol}//${url.host}`;
}

const base = (c: Context) => ({ httpOnly: true, sameSite: "Lax" as const, path: "/", secure: isHttps(c) });

// --- access cookie: workshop, code version and expiry, signed ---------------------------------------------

export function setAccessCookie(c: Context, access: CodeAccess): void {
  const exp = Math.floor(useDeps().clock.now().getTime() / 1000) + COOKIES.access.maxAgeSeconds;
  const payload = `${access.workshop}.${access.codeVersion}.${exp}`;
  setCookie(c, COOKIES.access.name, `${payload}.${mac("access", payload)}`, {
    ...base(c),
    maxAge: COOKIES.access.maxAgeSeconds,
  });
}

/** The workshop this browser may see, when its access cookie is genuine, unexpired and for the current code. */
export async function readAccess(c: Context): Promise<CodeAccess | undefined> {
  const raw = getCookie(c, COOKIES.access.name);
  if (!raw) return undefined;
  const m = /^([a-z0-9-]{1,40})\.(\d{1,9})\.(\d{1,12})\.([\w-]{43})$/.exec(raw);
  if (!m?.[1] || !m[2] || !m[3] || !m[4]) return undefined;
  if (!same(m[4], mac("access", `${m[1]}.${m[2]}.${m[3]}`))) return undefined;
  if (Number(m[3]) * 1000 <= useDeps().clock.now().getTime()) return undefined;
  const access = { workshop: m[1], codeVersion: Number(m[2]) };
  return (await accessValid(access)) ? access : undefined;
}

export const clearAccessCookie = (c: Context) => deleteCookie(c, COOKIES.access.name, base(c));

// --- lab cookie: the personal link ------------------------------------------------------------------------

export function setLabCookie(c: Context, token: string): void {
  setCookie(c, COOKIES.lab.name, token, { ...base(c), maxAge: COOKIES.lab.maxAgeSeconds });
}

export function readLabCookie(c: Context): string | undefined {
  const v = getCookie(c, COOKIES.lab.name);
  return v && /^[\w-]{20,64}$/.test(v) ? v : undefined;
}

export const clearLabCookie = (c: Context) => deleteCookie(c, COOKIES.lab.name, base(c));

// --- browser cookie: a random id, and whether this browser entered a right code, signed ----------------------

interface BrowserCookie {
  id: string;
  vouched: boolean;
}

function readBrowser(c: Context): BrowserCookie | undefined {
  const m = /^([\w-]{22})\.([01])\.([\w-]{43})$/.exec(getCookie(c, COOKIES.browser.name) ?? "");
  if (!m?.[1] || !m[2] || !m[3] || !same(m[3], mac("browser", `${m[1]}.${m[2]}`))) return undefined;
  return { id: m[1], vouched: m[2] === "1" };
}

function setBrowser(c: Context, b: BrowserCookie): void {
  const payload = `${b.id}.${b.vouched ? 1 : 0}`;
  setCookie(c, COOKIES.browser.name, `${payload}.${mac("browser", payload)}`, {
    ...base(c),
    maxAge: COOKIES.browser.maxAgeSeconds,
  });
}

/** Gives this browser its id when it has none (every page with a form does, before any attempt). */
function ensureBrowser(c: Context): void {
  if (!readBrowser(c)) setBrowser(c, { id: randomBytes(16).toString("base64url"), vouched: false });
}

/** This browser entered a right code: from now on its cookie vouches for it (shared/portal/rate-limit.ts). */
export function vouchForBrowser(c: Context): void {
  const b = readBrowser(c);
  if (!b?.vouched) setBrowser(c, { id: b?.id ?? randomBytes(16).toString("base64url"), vouched: true });
}

/** Who makes this request, for the rate limits: the address, and the browser when its cookie is genuine. */
export function portalClient(c: Context): PortalClient {
  const b = readBrowser(c);
  return { address: clientAddress(c), ...(b ? { browser: b.id, vouched: b.vouched } : {}) };
}

// --- CSRF: a random value per browser in a session cookie, its HMAC in each form ---------------------------

/** The hidden field value for this browser's forms, setting the CSRF cookie first when it has none. */
export function csrfField(c: Ctx): string {
  const known = c.get("csrf");
  if (known) return known;
  ensureBrowser(c);
  let value = getCookie(c, COOKIES.csrf.name);
  if (!value || !/^[\w-]{43}$/.test(value)) {
    value = randomBytes(32).toString("base64url");
    // No Max-Age: COOKIES.csrf lasts the browser session.
    setCookie(c, COOKIES.csrf.name, value, base(c));
  }
  const field = mac("csrf", value);
  c.set("csrf", field);
  return field;
}

export const CSRF_FIELD = "_csrf";

/**
 * Every portal POST: refused (403) when its Origin names another site, or when the form's CSRF field does
 * not match this browser's CSRF cookie.
 */
export function guardPost(forbidden: (c: Ctx) => Response | Promise<Response>): MiddlewareHandler<PortalEnv> {
  return async (c, next) => {
    // Browsers send Origin on form posts; "null" is what they send when the referrer policy hides it, and
    // is accepted only when the browser itself says the request came from this site. The CSRF field below
    // is checked either way.
    const origin = c.req.header("origin");
    const site = c.req.header("sec-fetch-site");
    const sameSite = origin === ownOrigin(c) || (origin === "null" && site === "same-origin");
    if (origin !== undefined && !sameSite) return forbidden(c);
    if (site === "cross-site" || site === "same-site") return forbidden(c);
    const cookie = getCookie(c, COOKIES.csrf.name);
    const body = await c.req.parseBody();
    const field = body[CSRF_FIELD];
    if (!cookie || typeof field !== "string" || !same(field, mac("csrf", cookie))) return forbidden(c);
    await next();
  };
}

// --- HTTP status of a visible error (the same map as web/api/errors.ts) -----------------------------------

export { answerStatus, asVisible, statusOf } from "../api/errors.ts";
