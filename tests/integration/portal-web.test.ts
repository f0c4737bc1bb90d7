import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { COOKIES, RATE } from "../../shared/portal/constants.ts";
import { counters, failures, recordWrongCode } from "../../shared/portal/rate-limit.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import { movableClock, removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "portal-web-suite-token";
const WS = "pw";
const clock = movableClock();
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();
const api = (method: string, path: string, body?: unknown, headers: Record<string, string> = auth) =>
  app.request(`/api/workshops/${WS}/portal/${path}`, {
    method,
    headers,
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });

let code = "";

/** A browser for `app.request()`: a cookie jar, the CSRF field of the last form it saw, and an address. */
class Browser {
  readonly jar = new Map<string, string>();
  /** Every Set-Cookie header this browser received, newest last. */
  readonly setCookies: string[] = [];
  csrf = "";
  constructor(readonly address = "192.0.2.10") {}

  private env() {
    return { incoming: { socket: { remoteAddress: this.address } } };
  }
  private cookieHeader(): Record<string, string> {
    return cookieHeader(this.jar);
  }
  private async take(res: Response) {
    this.setCookies.push(...storeCookies(this.jar, res));
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { res, status: res.status, text, location: res.headers.get("location") ?? "" };
  }
  async get(path: string) {
    return this.take(await app.request(path, { headers: this.cookieHeader() }, this.env()));
  }
  async post(path: string, fields: Record<string, string>, headers: Record<string, string> = {}) {
    const body = new URLSearchParams({ _csrf: this.csrf, ...fields });
    return this.take(
      await app.request(
        path,
        {
          method: "POST",
          headers: {
            ...this.cookieHeader(),
            "content-type": "application/x-www-form-urlencoded",
            ...headers,
          },
          body,
        },
        this.env(),
      ),
    );
  }
  /** Front page, code, board: a browser that may see the board. */
  async enter(withCode = code) {
    await this.get("/");
    const r = await this.post("/code", { code: withCode });
    expect(r.status, r.text).toBe(303);
    return this.get("/board");
  }
  lastSetCookie(name: string): string | undefined {
    return this.setCookies.filter((l) => l.startsWith(`${name}=`)).at(-1);
  }
}

const tokenOf = (location: string) => {
  const m = /^\/l\/([\w-]+)$/.exec(location);
  expect(m, location).toBeTruthy();
  return m?.[1] ?? "";
};
const maxAge = (setCookie: string | undefined) => {
  const m = /Max-Age=(\d+)/.exec(setCookie ?? "");
  return m ? Number(m[1]) : undefined;
};
const count = (text: string, needle: string) => text.split(needle).length - 1;

let aliceToken = "";
const ALICE = { name: "Alice Qwertyson", email: "alice@example.test", pin: "480271" };

/** Moves the clock past the next rate-limit window boundary when it is close, so counters cannot reset mid-test. */
function roomInWindow() {
  const windowMs = RATE.windowSeconds * 1000;
  const left = windowMs - (clock.now().getTime() % windowMs);
  if (left < 60_000) clock.advance(left + 1000);
}

beforeAll(async () => {
  rt = await testRuntime({ token: TOKEN, clock });
  const yaml = workshopYaml({
    name: WS,
    count: 3,
    extraLab: "portal:\n  enabled: true\n  guide_url: https://guide.example.test/workshop\n",
  });
  const created = await app.request("/api/workshops", {
    method: "POST",
    headers: auth,
    body: JSON.stringify({ yaml }),
  });
  expect(created.status).toBe(201);
  const up = await app.request(`/api/workshops/${WS}/up`, { method: "POST", headers: auth, body: "{}" });
  expect(up.status).toBe(202);
  await rt.executor.idle();
  const status = await j(await app.request(`/api/workshops/${WS}`, { headers: auth }));
  expect(status.hostList.map((h: { state: string }) => h.state)).toEqual(["ready", "ready", "ready"]);
  const opened = await api("POST", "open");
  expect(opened.status).toBe(200);
  code = (await j(opened)).code;
  expect(code).toMatch(/^LAB-[A-Z]{6}-\d{8}$/);
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("student portal", () => {
  it("shows only the workshop-code form before a valid code, with the footer and security headers", async () => {
    const b = new Browser();
    const r = await b.get("/");
    expect(r.status).toBe(200);
    expect(r.text).toContain('name="code"');
    expect(r.text).toContain('name="viewport"');
    expect(r.text).toMatch(/<label for="code">Workshop code<\/label>/);
    expect(r.text).not.toContain("student-0");
    expect(r.text).not.toContain("/claim");
    expect(r.text).not.toContain("Continue to your lab");
    expect(count(r.text, "<form")).toBe(1);
    expect(r.text).toContain('href="/privacy"');
    const csp = r.res.headers.get("content-security-policy") ?? "";
    for (const d of ["default-src 'self'", "frame-ancestors 'none'", "form-action 'self'"])
      expect(csp).toContain(d);
    expect(r.res.headers.get("x-content-type-options")).toBe("nosniff");
    expect(r.res.headers.get("referrer-policy")).toBe("same-origin");
    // The CSRF cookie is a session cookie: no Max-Age, as COOKIES.csrf says.
    expect(b.lastSetCookie(COOKIES.csrf.name)).toMatch(/HttpOnly/);
    expect(maxAge(b.lastSetCookie(COOKIES.csrf.name))).toBeUndefined();
    expect(COOKIES.csrf.maxAgeSeconds).toBe(0);
    // The board needs the code first.
    expect((await b.get("/board")).location).toBe("/");
    expect((await b.get("/recover")).location).toBe("/");
  });

  it("refuses a wrong code with 400 and counts it against the address", async () => {
    const b = new Browser("198.51.100.7");
    await b.get("/");
    const r = await b.post("/code", { code: "LAB-NOPENO-20261130" });
    expect(r.status).toBe(400);
    expect(r.text).toContain("That workshop code is not right");
    expect(r.text).toContain('name="code"');
    expect(b.jar.has(COOKIES.access.name)).toBe(false);
    expect(await failures("addr:198.51.100.7")).toBe(1);
    // A browser that never entered a right code: a new browser, counted as such for its address too.
    expect(await failures("new:198.51.100.7")).toBe(1);
    const browser = /^([\w-]{22})\.0\.[\w-]{43}$/.exec(b.jar.get(COOKIES.browser.name) ?? "")?.[1];
    expect(browser).toBeTruthy();
    expect(await failures(`browser:${browser}`)).toBe(1);
  });

  it("accepts the code in any case, with spaces or without dashes, and shows the board of free labs", async () => {
    const variants = [code, code.toLowerCase().replace(/-/g, " "), ` ${code.replace(/-/g, "")} `];
    for (const v of variants) {
      const b = new Browser();
      await b.get("/");
      const r = await b.post("/code", { code: v });
      expect(r.status, v).toBe(303);
      expect(r.location).toBe("/board");
      const cookie = b.lastSetCookie(COOKIES.access.name) ?? "";
      expect(maxAge(cookie)).toBe(COOKIES.access.maxAgeSeconds);
      expect(cookie).toMatch(/HttpOnly/);
      expect(cookie).toMatch(/SameSite=Lax/);
      expect(cookie).not.toMatch(/Secure/);
      const board = await b.get("/board");
      expect(board.status).toBe(200);
      expect(board.res.headers.get("cache-control")).toBe("no-store");
      expect(count(board.text, '<li class="free">')).toBe(3);
      for (const lab of ["student-01", "student-02", "student-03"]) expect(board.text).toContain(lab);
      expect(board.text).toContain('inputmode="numeric"');
      for (const f of ["name", "email", "pin"]) expect(board.text).toContain(`<label for="${f}">`);
      expect(board.text).toContain('href="/recover"');
      expect(board.text).toContain('href="/privacy"');
      // With a valid access cookie the front page goes straight to the board.
      expect((await b.get("/")).location).toBe("/board");
    }
  });

  it("marks the access cookie Secure over https", async () => {
    const b = new Browser();
    await b.get("/");
    // Served under a public name (behind a TLS proxy): the runtime answers for it once it is configured.
    vi.stubEnv("LABFLEET_PUBLIC_URL", "https://portal.example.test");
    const served = createApp({ auth: bootstrapAuth(TOKEN) });
    vi.unstubAllEnvs();
    const res = await served.request(
      "https://portal.example.test/code",
      {
        method: "POST",
        headers: {
          cookie: `${COOKIES.csrf.name}=${b.jar.get(COOKIES.csrf.name)}`,
          "content-type": "application/x-www-form-urlencoded",
          origin: "https://portal.example.test",
        },
        body: new URLSearchParams({ _csrf: b.csrf, code }),
      },
      { incoming: { socket: { remoteAddress: "192.0.2.10" } } },
    );
    expect(res.status).toBe(303);
    expect(res.headers.getSetCookie().find((l) => l.startsWith(`${COOKIES.access.name}=`))).toMatch(
      /; Secure/,
    );
  });

  it("refuses an obvious PIN with the reason next to the field", async () => {
    const b = new Browser();
    await b.enter();
    const r = await b.post("/claim", { name: "Mallory", email: "mallory@example.test", pin: "123456" });
    expect(r.status).toBe(400);
    expect(r.text).toMatch(/<p class="field-error" id="pin-error">a PIN of consecutive digits/);
    expect(r.text).toContain('value="Mallory"');
    expect(b.jar.has(COOKIES.lab.name)).toBe(false);
    const again = await b.post("/claim", { name: "Mallory", email: "mallory@example.test", pin: "777777" });
    expect(again.text).toContain("one repeated digit");
    expect(count((await b.get("/board")).text, '<li class="free">')).toBe(3);
  });

  it("gives the first claim student-01, remembers it in the lab cookie and shows credentials", async () => {
    const b = new Browser();
    await b.enter();
    const r = await b.post("/claim", ALICE);
    expect(r.status).toBe(303);
    aliceToken = tokenOf(r.location);
    expect(aliceToken).toMatch(/^[\w-]{32}$/); // 24 random bytes
    const labCookie = b.lastSetCookie(COOKIES.lab.name) ?? "";
    expect(labCookie.startsWith(`${COOKIES.lab.name}=${aliceToken};`)).toBe(true);
    expect(maxAge(labCookie)).toBe(COOKIES.lab.maxAgeSeconds);
    expect(labCookie).toMatch(/HttpOnly/);
    expect(labCookie).toMatch(/SameSite=Lax/);

    const page = await b.get(r.location);
    expect(page.status).toBe(200);
    expect(page.res.headers.get("cache-control")).toBe("no-store");
    expect(page.text).toContain("Your lab: student-01");
    expect(page.text).toContain("s3cret-student-01");
    expect(page.text).toContain('href="https://student-01.example.test/"');
    expect(page.text).toContain('href="https://guide.example.test/workshop"');
    expect(page.text).toMatch(/Time left: [5-6] h \d+ min/);
    expect(page.text).toContain('href="/privacy"');
    expect(page.res.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");

    const board = await b.get("/board");
    expect(board.text).toContain("claimed by Alice");
    expect(board.text).not.toContain("Qwertyson");
    expect(board.text).not.toContain(ALICE.email);
    expect(board.text).not.toContain("s3cret");
    expect(count(board.text, '<li class="free">')).toBe(2);
    // The remembered lab: "Continue to your lab" on the board and on the front page.
    expect(board.text).toContain(`href="/l/${aliceToken}"`);
  });

  it("does not give the same email a second lab", async () => {
    const b = new Browser();
    await b.enter();
    const r = await b.post("/claim", { name: "Alice Again", email: " ALICE@example.test", pin: "582039" });
    expect(r.status).toBe(409);
    expect(r.text).toMatch(/id="email-error">This email already has a lab/);
    expect(b.jar.has(COOKIES.lab.name)).toBe(false);
    expect(count((await b.get("/board")).text, '<li class="free">')).toBe(2);
  });

  it("gets a lab back with email and PIN under a new link; the old link then 404s", async () => {
    const b = new Browser();
    await b.enter();
    expect((await b.get("/recover")).status).toBe(200);
    const r = await b.post("/recover", { email: ALICE.email, pin: ALICE.pin });
    expect(r.status).toBe(303);
    const fresh = tokenOf(r.location);
    expect(fresh).not.toBe(aliceToken);
    expect(b.jar.get(COOKIES.lab.name)).toBe(fresh);
    expect(maxAge(b.lastSetCookie(COOKIES.lab.name))).toBe(COOKIES.lab.maxAgeSeconds);
    const page = await b.get(r.location);
    expect(page.status).toBe(200);
    expect(page.text).toContain("Your lab: student-01");
    const old = await b.get(`/l/${aliceToken}`);
    expect(old.status).toBe(404);
    expect(old.text).toContain("This link no longer works");
    expect(old.text).toContain('href="/recover"');
    expect(old.text).toContain('href="/privacy"');
    expect(old.res.headers.get("cache-control")).toBe("no-store");
    aliceToken = fresh;
  });

  it("locks an email after five wrong PINs until the instructor unlocks it", async () => {
    const b = new Browser("192.0.2.55");
    await b.enter();
    await b.get("/recover");
    for (let i = 0; i < 5; i++) {
      const r = await b.post("/recover", { email: ALICE.email, pin: "905318" });
      expect(r.status).toBe(400);
      expect(r.text).toContain("That email and PIN do not match a lab.");
    }
    const locked = await b.post("/recover", { email: ALICE.email, pin: ALICE.pin });
    expect(locked.status).toBe(403);
    expect(locked.text).toContain("this email is locked");
    expect(await failures("addr:192.0.2.55")).toBe(5);

    const unlock = await api("POST", "unlock", { email: ALICE.email });
    expect(unlock.status).toBe(200);
    expect(await j(unlock)).toEqual({ unlocked: true });
    const ok = await b.post("/recover", { email: ALICE.email, pin: ALICE.pin });
    expect(ok.status).toBe(303);
    aliceToken = tokenOf(ok.location);
  });

  it("rotate-code logs the board out while personal links keep working", async () => {
    const b = new Browser();
    await b.enter();
    const rotated = await api("POST", "rotate-code");
    expect(rotated.status).toBe(200);
    const next = (await j(rotated)).code as string;
    expect(next).not.toBe(code);
    const board = await b.get("/board");
    expect(board.status).toBe(303);
    expect(board.location).toBe("/");
    expect(maxAge(b.lastSetCookie(COOKIES.access.name))).toBe(0); // the stale cookie is cleared
    expect((await b.get("/")).text).toContain('name="code"');
    expect((await b.post("/code", { code })).status).toBe(400); // the old code is gone
    expect((await b.get(`/l/${aliceToken}`)).status).toBe(200);
    code = next;
    expect((await b.enter()).status).toBe(200);
  });

  it("refuses claims while the window is closed, but recovery still works", async () => {
    const b = new Browser();
    await b.enter();
    expect((await api("POST", "close")).status).toBe(200);
    try {
      const board = await b.get("/board");
      expect(board.text).toContain("Claiming is closed right now");
      expect(board.text).not.toContain('action="/claim"');
      const r = await b.post("/claim", { name: "Late Larry", email: "larry@example.test", pin: "602817" });
      expect(r.status).toBe(409);
      expect(r.text).toContain("Claiming is closed right now. Ask your instructor.");
      const back = await b.post("/recover", { email: ALICE.email, pin: ALICE.pin });
      expect(back.status).toBe(303);
      aliceToken = tokenOf(back.location);
      expect((await b.get(back.location)).text).toContain("s3cret-student-01");
    } finally {
      expect((await api("POST", "open")).status).toBe(200);
    }
  });

  it("refuses POSTs without the CSRF field, with another browser's field, or from another origin", async () => {
    const b = new Browser();
    await b.get("/");
    const noField = await app.request(
      "/code",
      {
        method: "POST",
        headers: {
          cookie: `${COOKIES.csrf.name}=${b.jar.get(COOKIES.csrf.name)}`,
          "content-type": "application/x-www-form-urlencoded",
        },
        body: new URLSearchParams({ code }),
      },
      { incoming: { socket: { remoteAddress: "192.0.2.10" } } },
    );
    expect(noField.status).toBe(403);
    expect(await noField.text()).toContain('href="/privacy"');

    const other = new Browser();
    await other.get("/");
    const stolen = b.csrf;
    b.csrf = other.csrf;
    expect((await b.post("/code", { code })).status).toBe(403);
    b.csrf = stolen;

    const foreign = await b.post("/code", { code }, { origin: "https://evil.example" });
    expect(foreign.status).toBe(403);
    expect(b.jar.has(COOKIES.access.name)).toBe(false);
    // "Origin: null" passes only when the browser says the post came from this very site.
    expect((await b.post("/forget", {}, { origin: "null" })).status).toBe(403);
    expect((await b.post("/forget", {}, { origin: "null", "sec-fetch-site": "cross-site" })).status).toBe(
      403,
    );
    expect(
      (await b.post("/forget", {}, { origin: "http://localhost", "sec-fetch-site": "same-site" })).status,
    ).toBe(403);
    expect((await b.post("/forget", {}, { origin: "null", "sec-fetch-site": "same-origin" })).status).toBe(
      303,
    );
    // The same form from this site's own origin goes through.
    const same = await b.post("/code", { code }, { origin: "http://localhost" });
    expect(same.status).toBe(303);
  });

  it("offers 'Continue to your lab' before the code, and forgets the device on request", async () => {
    const b = new Browser();
    b.jar.set(COOKIES.lab.name, aliceToken);
    const front = await b.get("/");
    expect(front.text).toContain("Continue to your lab (student-01)");
    expect(front.text).toContain(`href="/l/${aliceToken}"`);
    expect(front.text).toContain('action="/forget"');
    expect(front.text).toContain('name="code"');
    expect(front.text).not.toContain("student-02");
    const forget = await b.post("/forget", {});
    expect(forget.status).toBe(303);
    expect(forget.location).toBe("/");
    expect(maxAge(b.lastSetCookie(COOKIES.lab.name))).toBe(0);
    expect(b.jar.has(COOKIES.lab.name)).toBe(false);
    expect((await b.get("/")).text).not.toContain("Continue to your lab");
    // A link that no longer resolves is not offered.
    b.jar.set(COOKIES.lab.name, "x".repeat(32));
    expect((await b.get("/")).text).not.toContain("Continue to your lab");
  });

  it("/privacy lists the four cookies with the durations the responses set (drift test)", async () => {
    const b = new Browser();
    await b.enter();
    const r = await b.post("/recover", { email: ALICE.email, pin: ALICE.pin });
    expect(r.status).toBe(303);
    aliceToken = tokenOf(r.location);
    const setBy = {
      access: maxAge(b.lastSetCookie(COOKIES.access.name)) ?? 0,
      lab: maxAge(b.lastSetCookie(COOKIES.lab.name)) ?? 0,
      csrf: maxAge(b.lastSetCookie(COOKIES.csrf.name)) ?? 0, // a session cookie has none
      browser: maxAge(b.lastSetCookie(COOKIES.browser.name)) ?? 0,
    };
    expect(Object.keys(setBy).sort()).toEqual(Object.keys(COOKIES).sort());
    const privacy = await new Browser().get("/privacy");
    expect(privacy.status).toBe(200);
    expect(privacy.text).toContain('href="/privacy"');
    const unit: Record<string, number> = { minute: 60, hour: 3600, day: 86_400 };
    for (const key of ["access", "lab", "csrf", "browser"] as const) {
      const k = COOKIES[key];
      expect(setBy[key], key).toBe(k.maxAgeSeconds);
      const row = new RegExp(`<tr id="cookie-${k.name}">(.*?)</tr>`, "s").exec(privacy.text)?.[1] ?? "";
      expect(row, key).toContain(k.purpose);
      const cell = /<td data-seconds="(\d+)">([^<]+)<\/td>/.exec(row);
      expect(Number(cell?.[1]), key).toBe(setBy[key]);
      // The words on the page say the same duration.
      const words = cell?.[2] ?? "";
      const m = /^(\d+) (minute|hour|day)s?$/.exec(words);
      const seconds = m?.[1] && m[2] ? Number(m[1]) * (unit[m[2]] ?? 0) : 0;
      if (setBy[key] === 0) expect(words).toBe("until you close the browser");
      else expect(seconds, `${key}: ${words}`).toBe(setBy[key]);
    }
    expect(privacy.text).toContain("until the workshop is torn down");
    expect(privacy.text).toContain("10 minutes");
  });

  it("logs a whole claim flow without a token, email, code, PIN or password", async () => {
    const lines: string[] = [];
    setLogSink((line) => lines.push(line), "debug");
    const bob = { name: "Bob Plumb", email: "bob.plumb@example.test", pin: "739204" };
    const tokens: string[] = [];
    try {
      const b = new Browser("192.0.2.77");
      await b.get("/");
      await b.post("/code", { code: code.toLowerCase() });
      await b.post("/code", { code: "LAB-WRONGG-20261130" });
      await b.post("/code", { code });
      await b.get("/board");
      await b.post("/claim", { ...bob, pin: "111111" });
      const claimed = await b.post("/claim", bob);
      expect(claimed.status).toBe(303);
      tokens.push(tokenOf(claimed.location));
      expect((await b.get(claimed.location)).text).toContain("Your lab: student-02");
      await b.get("/recover");
      await b.post("/recover", { email: bob.email, pin: "000001" });
      const back = await b.post("/recover", { email: bob.email, pin: bob.pin });
      tokens.push(tokenOf(back.location));
      await b.get(`/l/${tokens[0]}`);
      await b.get(back.location);
      await b.post("/forget", {});
      tokens.push(b.csrf, ...[...b.jar.values()]);
    } finally {
      setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
    }
    const all = lines.join("\n");
    expect(lines.length).toBeGreaterThan(10);
    expect(all).toContain('"path":"/l/:token"');
    expect(all).toContain('"msg":"lab claimed"');
    const secrets = [
      ...tokens,
      bob.email,
      "bob.plumb",
      bob.pin,
      "000001",
      "111111",
      code,
      code.replace(/-/g, ""),
      code.toLowerCase(),
      "WRONGG",
      "s3cret",
    ];
    for (const s of secrets) expect(all, s).not.toContain(s);
  });
});

describe("instructor portal routes", () => {
  it.each([
    ["POST", "open"],
    ["POST", "close"],
    ["POST", "rotate-code"],
    ["GET", "info"],
    ["GET", "status"],
    ["GET", "export"],
    ["POST", "admin-link"],
    ["POST", "release"],
    ["POST", "revoke"],
    ["POST", "reassign"],
    ["POST", "unlock"],
    ["POST", "unblock"],
  ])("%s %s needs the bearer token", async (method, path) => {
    const res = await api(method, path, method === "POST" ? {} : undefined, {
      "content-type": "application/json",
    });
    expect(res.status).toBe(401);
    expect((await j(res)).error.code).toBe("auth.missing");
  });

  it("info gives the code; status lists labs and claims with emails; export is a CSV attachment", async () => {
    const info = await j(await api("GET", "info"));
    expect(info).toMatchObject({ workshop: WS, state: "open", code, path: "/" });
    const res = await api("GET", "status");
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    const status = await j(res);
    expect(status.portal).toMatchObject({ workshop: WS, state: "open", open: true });
    expect(status.portal.code).toBeUndefined();
    expect(status.labs.map((l: { lab: string; status: string }) => [l.lab, l.status])).toEqual([
      ["student-01", "claimed"],
      ["student-02", "claimed"],
      ["student-03", "free"],
    ]);
    expect(status.claims.map((c: { lab: string; email: string }) => [c.lab, c.email])).toEqual([
      ["student-01", ALICE.email],
      ["student-02", "bob.plumb@example.test"],
    ]);

    const csv = await api("GET", "export");
    expect(csv.status).toBe(200);
    expect(csv.headers.get("content-type")).toMatch(/^text\/csv/);
    expect(csv.headers.get("content-disposition")).toBe(`attachment; filename="${WS}-claims.csv"`);
    const lines = (await csv.text()).trim().split("\n");
    expect(lines[0]).toBe("lab,name,email,how,claimed at,first opened");
    expect(lines[1]).toMatch(/^student-01,Alice Qwertyson,alice@example\.test,open,\d{4}-.*Z,\d{4}-.*Z$/);
    expect(lines[2]).toMatch(/^student-02,Bob Plumb,bob\.plumb@example\.test,open,/);
  });

  it("validates bodies and answers 404 for what is not there", async () => {
    const bad = await api("POST", "release", { lab: "../etc" });
    expect(bad.status).toBe(400);
    expect((await j(bad)).error.details[0].path).toBe("lab");
    expect((await api("POST", "revoke", { email: "nope" })).status).toBe(400);
    expect((await api("POST", "reassign", { email: ALICE.email })).status).toBe(400);
    expect((await api("POST", "release", { lab: "student-03" })).status).toBe(404);
    expect((await api("POST", "unlock", { email: "nobody@example.test" })).status).toBe(404);
    const none = await app.request("/api/workshops/nope/portal/info", { headers: auth });
    expect(none.status).toBe(404);
  });

  it("release and revoke free labs; reassign moves a student and replaces the link", async () => {
    const released = await api("POST", "release", { lab: "student-02" });
    expect(released.status).toBe(200);
    expect(await j(released)).toEqual({ lab: "student-02" });
    const revoked = await api("POST", "revoke", { email: ALICE.email });
    expect(await j(revoked)).toEqual({ lab: "student-01" });
    expect((await new Browser().get(`/l/${aliceToken}`)).status).toBe(404);

    const b = new Browser();
    const board = await b.enter();
    expect(count(board.text, '<li class="free">')).toBe(3);
    const carol = { name: "Carol Danvers", email: "carol@example.test", pin: "615243" };
    const claimed = await b.post("/claim", carol);
    expect(claimed.status).toBe(303);
    expect((await b.get(claimed.location)).text).toContain("Your lab: student-01");

    const moved = await api("POST", "reassign", { email: carol.email, lab: "student-03" });
    expect(moved.status).toBe(200);
    const m = await j(moved);
    expect(m.lab).toBe("student-03");
    expect(m.path).toBe(`/l/${m.token}`);
    expect((await b.get(claimed.location)).status).toBe(404);
    expect((await b.get(m.path)).text).toContain("s3cret-student-03");
    expect((await api("POST", "reassign", { email: carol.email, lab: "student-09" })).status).toBe(409);
  });

  it("admin-link opens the instructor page with claimants and credentials; old and wrong links 404", async () => {
    const first = await j(await api("POST", "admin-link"));
    const res = await j(await api("POST", "admin-link"));
    expect(res.path).toBe(`/admin/${WS}/${res.token}`);
    const page = await app.request(res.path);
    expect(page.status).toBe(200);
    expect(page.headers.get("cache-control")).toBe("no-store");
    expect(page.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
    const text = await page.text();
    expect(text).toContain("Carol Danvers");
    expect(text).toContain("carol@example.test");
    expect(text).toContain("s3cret-student-03");
    expect(text).toContain("s3cret-student-01");
    expect(text).toMatch(/<td class="st-ready">ready<\/td>/);
    expect((await app.request(first.path)).status).toBe(404);
    expect((await app.request(`/admin/${WS}/${"A".repeat(32)}`)).status).toBe(404);
    expect((await app.request(`/admin/nope/${res.token}`)).status).toBe(404);
  });
});

describe("portal rate limits", () => {
  it("let a room of 150 behind one address in, a quarter mistyping once; a cookie-dropping guesser from it is refused", async () => {
    roomInWindow();
    const ROOM = "198.51.100.150";
    const wrong = "LAB-TYPOQX-20261130";
    const room = Array.from({ length: 150 }, () => new Browser(ROOM));
    const typos = Math.ceil(room.length / 4);
    // Arriving together, in groups of 25: the front page, a typo for a quarter of them, then the code.
    for (let i = 0; i < room.length; i += 25)
      await Promise.all(
        room.slice(i, i + 25).map(async (b, k) => {
          await b.get("/");
          if (i + k < typos) expect((await b.post("/code", { code: wrong })).status).toBe(400);
          const r = await b.post("/code", { code });
          expect(r.status, r.text).toBe(303);
          expect((await b.get("/board")).status).toBe(200);
        }),
      );
    expect(await failures(`new:${ROOM}`)).toBe(typos);
    let held = (await j(await api("GET", "status"))).heldBack;
    expect(held.holds.filter((h: { address: string }) => h.address === ROOM)).toEqual([]);

    // A guesser at the same address that drops its cookies: a new browser at every guess.
    let guesses = 0;
    for (;;) {
      const g = new Browser(ROOM);
      await g.get("/");
      const r = await g.post("/code", { code: `LAB-GUESS${String(guesses).padStart(2, "0")}A-20261130` });
      if (r.status === 429) {
        expect(r.text).toContain("Too many wrong codes from your network");
        expect(Number(r.res.headers.get("retry-after"))).toBeGreaterThan(0);
        break;
      }
      expect(r.status).toBe(400);
      guesses++;
      expect(guesses, "the guesser is never refused").toBeLessThan(300);
    }
    // Refused once the address's new browsers made their limit, the room's typos included: far from 300.
    expect(guesses + typos).toBe(RATE.perAddressNewBrowsers);
    expect(RATE.perAddressNewBrowsers).toBeLessThanOrEqual(100);
    // New browsers from the address wait now, even with the right code; the room's students go on.
    const late = new Browser(ROOM);
    await late.get("/");
    expect((await late.post("/code", { code })).status).toBe(429);
    const student = room[0] as Browser;
    expect((await student.post("/code", { code })).status).toBe(303);
    expect((await student.get("/board")).status).toBe(200);

    // The instructor sees who is held back, and lets the address in.
    held = (await j(await api("GET", "status"))).heldBack;
    expect(held.holds.filter((h: { address: string }) => h.address === ROOM)).toEqual([
      {
        address: ROOM,
        scope: "new_browsers",
        count: RATE.perAddressNewBrowsers,
        limit: RATE.perAddressNewBrowsers,
        liftsAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      },
    ]);
    expect(new Date(held.holds[0].liftsAt).getTime()).toBeGreaterThan(clock.now().getTime());
    const lifted = await api("POST", "unblock", { address: ROOM });
    expect(lifted.status).toBe(200);
    expect(await j(lifted)).toEqual({ addresses: [ROOM] });
    expect((await late.post("/code", { code })).status).toBe(303);
    held = (await j(await api("GET", "status"))).heldBack;
    expect(held.holds.filter((h: { address: string }) => h.address === ROOM)).toEqual([]);
    expect(await j(await api("POST", "unblock", { address: ROOM }))).toEqual({ addresses: [] });
  });

  it("unblock validates its body and needs a workshop", async () => {
    for (const body of [
      {},
      { address: "1.2.3.4", all: true },
      { address: "a b" },
      { all: false },
      { x: 1 },
    ]) {
      const r = await api("POST", "unblock", body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect((await j(r)).error.details.length).toBeGreaterThan(0);
    }
    const bad = await j(await api("POST", "unblock", { address: "a b" }));
    expect(bad.error.details[0].path).toBe("address");
    const none = await app.request("/api/workshops/nope/portal/unblock", {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ all: true }),
    });
    expect(none.status).toBe(404);
  });

  it("answers 429 with Retry-After to a browser after 10 wrong attempts; its address's other browsers go on", async () => {
    roomInWindow();
    const b = new Browser("203.0.113.30");
    await b.get("/");
    for (let i = 0; i < RATE.perBrowser; i++) {
      const r = await b.post("/code", { code: `LAB-GUESS${String.fromCharCode(65 + (i % 26))}-20261130` });
      expect(r.status, `attempt ${i + 1}`).toBe(400);
    }
    const next = await b.post("/code", { code });
    expect(next.status).toBe(429);
    expect(next.text).toContain("Too many wrong attempts from this browser");
    const retry = Number(next.res.headers.get("retry-after"));
    expect(retry).toBeGreaterThan(0);
    expect(retry).toBeLessThanOrEqual(2 * RATE.windowSeconds);
    expect(b.jar.has(COOKIES.access.name)).toBe(false);
    // Another browser behind the same address is not affected, nor is another address.
    expect((await new Browser("203.0.113.30").enter()).status).toBe(200);
    expect((await new Browser("203.0.113.31").enter()).status).toBe(200);
  });

  it("past 200 wrong codes portal-wide, stops only clients with 3 wrong attempts of their own", async () => {
    roomInWindow();
    const have = await failures("code:all");
    const missing = Math.max(0, RATE.globalWrongCodes - have);
    for (let i = 0; i < missing; i += 50)
      await Promise.all(Array.from({ length: Math.min(50, missing - i) }, () => counters.record("code:all")));
    expect(await failures("code:all")).toBeGreaterThanOrEqual(RATE.globalWrongCodes);

    const fresh = new Browser("203.0.113.40");
    expect((await fresh.enter()).status).toBe(200);

    // A browser's own wrong attempts: two, then the right code, then its third.
    const two = new Browser("203.0.113.41");
    await two.get("/");
    for (let i = 0; i < 2; i++)
      expect((await two.post("/code", { code: "LAB-ZZZZZZ-20261130" })).status).toBe(400);
    expect((await two.post("/code", { code })).status).toBe(303);
    expect((await two.post("/code", { code: "LAB-ZZZZZZ-20261130" })).status).toBe(400); // its third
    expect((await two.post("/code", { code })).status).toBe(429);

    // New browsers from an address whose new browsers sent 3 wrong codes (a guesser dropping cookies).
    const three = new Browser("203.0.113.42");
    for (let i = 0; i < RATE.wrongCodesBeforeGlobalLimit; i++) await recordWrongCode(three.address);
    await three.get("/");
    const r = await three.post("/code", { code });
    expect(r.status).toBe(429);
    expect(r.text).toContain("The portal is getting too many wrong codes");
    expect(r.text).toContain('name="code"');
  });
});
