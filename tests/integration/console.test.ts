import { createHash } from "node:crypto";
import { gunzipSync } from "node:zlib";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab } from "../../shared/portal/claims.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { consoleRoutes } from "../../web/console/index.tsx";
import { SESSION_COOKIE, SESSION_SECONDS } from "../../web/console/session.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import { movableClock, removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * The instructor console through app.request(): sign-in with the instructor token, the session cookie and its
 * record, refusals without a session, CSRF and Origin checks, no-store, YAML errors at their path, and the
 * actions of the workshop, portal and runs pages, each checked by what it changed.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "console-suite-token-0123456789";
const WS = "cons";
const ORIGIN = "http://localhost";
const STUDENT = { name: "Grace Hopper", email: "grace@example.test", pin: "480271" };
const clock = movableClock();
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const logs: string[] = [];

const count = (text: string, needle: string) => text.split(needle).length - 1;
const sha256 = (v: string) => createHash("sha256").update(v).digest("base64url");

/** A browser for app.request(): a cookie jar, the CSRF field of the last page it saw, its own Origin. */
class Browser {
  readonly jar = new Map<string, string>();
  readonly setCookies: string[] = [];
  csrf = "";
  constructor(readonly base = ORIGIN) {}

  private cookieHeader(): Record<string, string> {
    return cookieHeader(this.jar);
  }
  private async take(res: Response) {
    this.setCookies.push(...storeCookies(this.jar, res));
    const type = res.headers.get("content-type") ?? "";
    const text = type.startsWith("text/") || type.includes("json") ? await res.text() : "";
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { res, status: res.status, text, location: res.headers.get("location") ?? "" };
  }
  async get(path: string) {
    return this.take(await app.request(`${this.base}${path}`, { headers: this.cookieHeader() }));
  }
  async post(
    path: string,
    fields: Record<string, string> = {},
    opts: { headers?: Record<string, string>; csrf?: string | null } = {},
  ) {
    const csrf = opts.csrf === undefined ? this.csrf : opts.csrf;
    const body = new URLSearchParams({ ...(csrf === null ? {} : { _csrf: csrf }), ...fields });
    return this.take(
      await app.request(`${this.base}${path}`, {
        method: "POST",
        headers: {
          ...this.cookieHeader(),
          "content-type": "application/x-www-form-urlencoded",
          origin: this.base,
          "sec-fetch-site": "same-origin",
          ...opts.headers,
        },
        body,
      }),
    );
  }
  async postMultipart(path: string, form: FormData) {
    form.set("_csrf", this.csrf);
    return this.take(
      await app.request(`${this.base}${path}`, {
        method: "POST",
        headers: { ...this.cookieHeader(), origin: this.base },
        body: form,
      }),
    );
  }
  /** The sign-in page, then the token: a browser with a console session. */
  async signIn(token = TOKEN) {
    await this.get("/console/login");
    return this.post("/console/login", { token });
  }
  lastSetCookie(name: string): string | undefined {
    return this.setCookies.filter((l) => l.startsWith(`${name}=`)).at(-1);
  }
}

// biome-ignore lint/suspicious/noExplicitAny: live regions are checked field by field
const json = (text: string): any => JSON.parse(text);
const sessions = async () => (await rt.store.session.scan.go({ pages: "all" })).data;

let signedIn: Browser;

beforeAll(async () => {
  setLogSink((line) => logs.push(line), "info");
  rt = await testRuntime({ token: TOKEN, clock });
  signedIn = new Browser();
  const r = await signedIn.signIn();
  expect(r.status).toBe(303);
});
afterAll(async () => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("without a session", () => {
  it.each([
    ["/console"],
    ["/console/new"],
    ["/console/w/anything"],
    ["/console/w/anything/portal"],
    ["/console/w/anything/runs"],
    ["/console/w/anything/teardown"],
    ["/console/w/anything/portal/export"],
    ["/console/w/anything/portal/slide"],
  ])("GET %s goes to the sign-in page, remembering where it was going", async (path) => {
    const r = await new Browser().get(path);
    expect(r.status).toBe(303);
    expect(r.location).toBe(`/console/login?next=${encodeURIComponent(path)}`);
    expect(r.res.headers.get("cache-control")).toBe("no-store");
  });

  it("answers the live endpoints with 401 JSON, so a page's script can say the session ended", async () => {
    for (const path of [
      "/console/live",
      "/console/w/x/live",
      "/console/w/x/portal/live",
      "/console/w/x/runs/live",
    ]) {
      const r = await new Browser().get(path);
      expect(r.status, path).toBe(401);
      expect(json(r.text).error.code).toBe("console.signed_out");
    }
  });

  it("refuses every action and changes nothing", async () => {
    const b = new Browser();
    const before = (await signedIn.get("/console")).text;
    for (const path of ["/console/new", "/console/w/x/up", "/console/w/x/teardown", "/console/logout"]) {
      const r = await b.post(path, { yaml: workshopYaml({ name: "sneaky" }), confirm: "x" });
      expect(r.status, path).toBe(303);
      expect(r.location).toBe("/console/login");
    }
    expect((await signedIn.get("/console")).text).toBe(before);
    expect(before).not.toContain("sneaky");
  });

  it("serves the script and the stylesheet to anyone (they hold nothing)", async () => {
    const js = await new Browser().get("/console/console.js");
    expect(js.status).toBe(200);
    expect(js.res.headers.get("content-type")).toMatch(/^text\/javascript/);
    expect(js.text).toContain("data-live");
    const css = await new Browser().get("/console/console.css");
    expect(css.status).toBe(200);
    expect(css.res.headers.get("content-type")).toMatch(/^text\/css/);
    expect(css.text).toContain(":focus-visible");
  });
});

describe("signing in with the instructor token", () => {
  it("shows a labelled token field, no-store, under the app's CSP", async () => {
    const r = await new Browser().get("/console/login");
    expect(r.status).toBe(200);
    expect(r.res.headers.get("cache-control")).toBe("no-store");
    expect(r.text).toContain('<label for="token">Instructor token</label>');
    expect(r.text).toMatch(/<input id="token" name="token" type="password"/);
    expect(r.text).toContain('<script src="/console/console.js" defer=""></script>');
    expect(r.text).not.toMatch(/<script>/);
    const csp = r.res.headers.get("content-security-policy") ?? "";
    expect(csp).toContain("script-src 'self'");
    expect(csp).toContain("frame-ancestors 'none'");
    // No OAuth providers were configured: no links to them.
    expect(r.text).not.toContain("/auth/");
  });

  it("links the OAuth providers it is given", async () => {
    const host = new Hono().route(
      "/console",
      consoleRoutes(bootstrapAuth(TOKEN), {
        providers: [
          { id: "github", label: "Sign in with GitHub", href: "/auth/github/start" },
          { id: "oidc", label: "Sign in with Example SSO", href: "/auth/oidc/start" },
        ],
      }),
    );
    const text = await (await host.request("/console/login")).text();
    expect(text).toMatch(
      /<a class="button secondary" href="\/auth\/github\/start" data-provider="github">Sign in with GitHub<\/a>/,
    );
    expect(text).toContain('href="/auth/oidc/start"');
  });

  it("refuses a wrong token with 401 and sets no session", async () => {
    const b = new Browser();
    const r = await b.signIn("not-the-token");
    expect(r.status).toBe(401);
    expect(r.text).toContain("That is not a valid instructor token");
    expect(r.text).toContain('aria-invalid="true"');
    expect(b.jar.has(SESSION_COOKIE)).toBe(false);
    expect((await b.get("/console")).status).toBe(303);
  });

  it("refuses a sign-in form that did not come from its own page or site", async () => {
    const noCookie = new Browser();
    const r1 = await noCookie.post("/console/login", { token: TOKEN }, { csrf: "made-up" });
    expect(r1.status).toBe(403);
    expect(noCookie.jar.has(SESSION_COOKIE)).toBe(false);
    const foreign = new Browser();
    await foreign.get("/console/login");
    const r2 = await foreign.post(
      "/console/login",
      { token: TOKEN },
      { headers: { origin: "https://evil.example" } },
    );
    expect(r2.status).toBe(403);
    expect(foreign.jar.has(SESSION_COOKIE)).toBe(false);
  });

  it("starts a session: a random HttpOnly SameSite=Lax cookie for 8 h, kept only as its SHA-256", async () => {
    const b = new Browser();
    const before = (await sessions()).length;
    const r = await b.signIn();
    expect(r.status).toBe(303);
    expect(r.location).toBe("/console");
    const cookie = b.lastSetCookie(SESSION_COOKIE) ?? "";
    expect(cookie).toMatch(/HttpOnly/);
    expect(cookie).toMatch(/SameSite=Lax/);
    expect(cookie).toMatch(/Path=\//);
    expect(cookie).not.toMatch(/Secure/);
    expect(cookie).toContain(`Max-Age=${SESSION_SECONDS}`);
    expect(SESSION_SECONDS).toBe(8 * 3600);
    const id = b.jar.get(SESSION_COOKIE) ?? "";
    expect(id).toMatch(/^[\w-]{43}$/); // 32 random bytes
    const all = await sessions();
    expect(all.length).toBe(before + 1);
    const mine = all.find((s) => s.idHash === sha256(id));
    expect(mine?.via).toBe("token");
    expect(mine?.userId).toBe("bootstrap");
    const ttl = (mine?.expiresAt ?? 0) - Math.floor(clock.now().getTime() / 1000);
    expect(ttl).toBeGreaterThan(SESSION_SECONDS - 60);
    expect(ttl).toBeLessThanOrEqual(SESSION_SECONDS);
    expect(JSON.stringify(all)).not.toContain(id);
    expect(JSON.stringify(all)).not.toContain(TOKEN);
    const home = await b.get("/console");
    expect(home.status).toBe(200);
    expect(home.text).toContain("Signed in: instructor token");
  });

  it("marks the cookie Secure over https", async () => {
    const b = new Browser("https://localhost");
    const r = await b.signIn();
    expect(r.status).toBe(303);
    expect(b.lastSetCookie(SESSION_COOKIE)).toMatch(/; Secure/);
  });

  it("goes on to the page it was sent from, and never to another site", async () => {
    const b = new Browser();
    await b.get("/console/login?next=%2Fconsole%2Fnew");
    const r = await b.post("/console/login", { token: TOKEN, next: "/console/new" });
    expect(r.location).toBe("/console/new");
    const c = new Browser();
    await c.get("/console/login");
    const evil = await c.post("/console/login", { token: TOKEN, next: "//evil.example/console" });
    expect(evil.location).toBe("/console");
  });

  it("ends a session at sign-out: the record and the cookie go, and the old cookie no longer works", async () => {
    const b = new Browser();
    await b.signIn();
    const id = b.jar.get(SESSION_COOKIE) ?? "";
    await b.get("/console");
    const out = await b.post("/console/logout");
    expect(out.status).toBe(303);
    expect(out.location).toBe("/console/login?signed_out=1");
    expect(b.lastSetCookie(SESSION_COOKIE)).toMatch(/Max-Age=0/);
    expect((await sessions()).some((s) => s.idHash === sha256(id))).toBe(false);
    expect((await b.get("/console/login?signed_out=1")).text).toContain("You are signed out.");
    const replay = new Browser();
    replay.jar.set(SESSION_COOKIE, id);
    expect((await replay.get("/console")).status).toBe(303);
  });

  it("ends a session after 8 hours", async () => {
    const b = new Browser();
    await b.signIn();
    expect((await b.get("/console")).status).toBe(200);
    clock.advance(SESSION_SECONDS * 1000 + 60_000);
    try {
      const r = await b.get("/console");
      expect(r.status).toBe(303);
      expect(r.location).toMatch(/^\/console\/login/);
    } finally {
      clock.advance(-(SESSION_SECONDS * 1000 + 60_000));
    }
    expect((await signedIn.get("/console")).status).toBe(200);
  });
});

describe("CSRF and Origin", () => {
  it("refuses a POST without the session's CSRF secret, with another's, or from another site; nothing changes", async () => {
    const other = new Browser();
    await other.signIn();
    await other.get("/console");
    await signedIn.get("/console/new");
    const yaml = workshopYaml({ name: "csrf-victim" });
    const attempts = [
      await signedIn.post("/console/new", { yaml }, { csrf: null }),
      await signedIn.post("/console/new", { yaml }, { csrf: "x".repeat(43) }),
      await signedIn.post("/console/new", { yaml }, { csrf: other.csrf }),
      await signedIn.post("/console/new", { yaml }, { headers: { origin: "https://evil.example" } }),
      await signedIn.post("/console/new", { yaml }, { headers: { "sec-fetch-site": "cross-site" } }),
    ];
    for (const r of attempts) {
      expect(r.status).toBe(403);
      expect(r.text).toContain("This form could not be accepted");
    }
    expect((await signedIn.get("/console")).text).not.toContain("csrf-victim");
  });

  it("takes the secret in a header too (for scripts)", async () => {
    await signedIn.get("/console/new");
    const res = await app.request(`${ORIGIN}/console/new`, {
      method: "POST",
      headers: {
        cookie: `${SESSION_COOKIE}=${signedIn.jar.get(SESSION_COOKIE)}`,
        "content-type": "application/x-www-form-urlencoded",
        origin: ORIGIN,
        "x-csrf-token": signedIn.csrf,
      },
      body: new URLSearchParams({ yaml: "" }),
    });
    expect(res.status).toBe(400); // past the CSRF check, refused for the empty YAML
    expect(await res.text()).toContain("Paste workshop.yaml or choose the file.");
  });
});

describe("creating a workshop from workshop.yaml", () => {
  it("shows every error at its YAML path and line, with the text kept, and stores nothing", async () => {
    await signedIn.get("/console/new");
    const yaml =
      "name: Bad Name\nlab:\n  source: x\n  concurrency: 0\nprovider:\n  type: local\n  count: 999\n";
    const r = await signedIn.post("/console/new", { yaml: yaml.replace(/\n/g, "\r\n") });
    expect(r.status).toBe(400);
    expect(r.res.headers.get("cache-control")).toBe("no-store");
    expect(r.text).toContain("workshop.yaml is not valid");
    for (const path of ["name", "lab.setup", "lab.concurrency", "provider.count"])
      expect(r.text).toContain(`data-path="${path}"`);
    expect(r.text).toMatch(/<code>provider.count<\/code> \(line 7, column 10\): expected/);
    expect(r.text).toContain('<code class="yaml-line">7:   count: 999</code>');
    expect(r.text).toContain('aria-invalid="true"');
    // The text comes back as typed (CRLF made LF), after the newline the HTML parser drops.
    expect(r.text).toContain(
      `spellcheck="false" aria-describedby="yaml-hint yaml-errors" aria-invalid="true">\n${yaml}</textarea>`,
    );
    expect((await signedIn.get("/console")).text).toContain("No workshops yet");
  });

  it("shows a YAML syntax error at its line", async () => {
    await signedIn.get("/console/new");
    const r = await signedIn.post("/console/new", { yaml: "name: x\nlab: [unclosed\n" });
    expect(r.status).toBe(400);
    expect(r.text).toContain('data-path="(yaml)"');
    expect(r.text).toMatch(/not valid YAML/);
  });

  it("creates a workshop from an uploaded file and lands on its page", async () => {
    await signedIn.get("/console/new");
    const form = new FormData();
    form.set("yaml", "");
    form.set(
      "file",
      new File([workshopYaml({ name: WS, count: 3 })], "workshop.yaml", { type: "text/yaml" }),
    );
    const r = await signedIn.postMultipart("/console/new", form);
    expect(r.status, r.text).toBe(303);
    expect(r.location).toBe(`/console/w/${WS}?notice=created`);
    const p = await signedIn.get(r.location);
    expect(p.status).toBe(200);
    expect(p.text).toContain("Workshop saved. Press Up to bring it up.");
    expect(p.text).toContain("No hosts yet");
    const list = await signedIn.get("/console");
    expect(list.text).toContain(`<a href="/console/w/${WS}">${WS}</a>`);
    expect(list.text).toContain("draft");
  });
});

describe("a workshop's page and its actions", () => {
  it("brings the workshop up and shows every host ready, on the page and in its live regions", async () => {
    await signedIn.get(`/console/w/${WS}`);
    const up = await signedIn.post(`/console/w/${WS}/up`);
    expect(up.status).toBe(303);
    expect(up.location).toBe(`/console/w/${WS}?notice=up`);
    await rt.executor.idle();
    const live = await signedIn.get(`/console/w/${WS}/live`);
    expect(live.status).toBe(200);
    expect(live.res.headers.get("cache-control")).toBe("no-store");
    const regions = json(live.text).regions;
    expect(Object.keys(regions).sort()).toEqual([
      "live-fleet",
      "live-hosts",
      "live-pager",
      "live-receipt",
      "live-rollout",
      "live-summary",
    ]);
    expect(count(regions["live-hosts"], 'data-state="ready"')).toBe(3);
    expect(regions["live-hosts"]).toContain('aria-label="student-02: 3 of 3 phases done"');
    expect(regions["live-summary"]).toContain("3/3 ready");
    // Three labs fit one page of the fleet table: no pager.
    expect(regions["live-pager"]).toBe("");
    const p = await signedIn.get(`/console/w/${WS}`);
    expect(p.text).toContain('data-live="/console/w/cons/live"');
    expect(count(p.text, 'data-state="ready"')).toBe(3);
    // Every visible control has a label: buttons their text, fields a <label for>.
    for (const id of ["deploy-hosts", "deploy-force", "diagnose-all", "extend-hours"])
      expect(p.text).toMatch(new RegExp(`<label[^>]*(for="${id}"[^>]*>|>\\s*<input id="${id}")`));
    const list = json((await signedIn.get("/console/live")).text).regions["live-workshops"];
    expect(list).toMatch(/3\/3 ready/);
    expect(list).toMatch(/\d+ h \d+ min left|\d+ d \d+ h left/);
  });

  it("lists the run with its per-host results and durations", async () => {
    const r = await signedIn.get(`/console/w/${WS}/runs`);
    expect(r.status).toBe(200);
    expect(r.text).toMatch(/<h2 id="run-run_\w+-h">up <span class="state st-succeeded">succeeded<\/span>/);
    expect(count(r.text, '<span class="state st-ready">ready</span>')).toBe(3);
    expect(r.text).toMatch(/took \d+ s/);
    expect((r.text.match(/<td class="num">\d+ s<\/td>/g) ?? []).length).toBe(3);
    const live = json((await signedIn.get(`/console/w/${WS}/runs/live`)).text).regions["live-runs"];
    expect(live).toContain("succeeded");
  });

  it("starts a deploy of selected hosts, and refuses an unknown host at its field", async () => {
    await signedIn.get(`/console/w/${WS}`);
    const bad = await signedIn.post(`/console/w/${WS}/deploy`, { hosts: "student-09" });
    expect(bad.status).toBe(400);
    expect(bad.text).toContain("no such host in this workshop: student-09");
    expect(bad.text).toContain(`href="/console/w/${WS}"`);
    const ok = await signedIn.post(`/console/w/${WS}/deploy`, { hosts: "student-01, student-03" });
    expect(ok.status).toBe(303);
    expect(ok.location).toBe(`/console/w/${WS}?notice=deploy`);
    await rt.executor.idle();
    const runs = await signedIn.get(`/console/w/${WS}/runs`);
    expect(runs.text).toContain("hosts: student-01, student-03");
  });

  it("says there is nothing to retry when nothing failed", async () => {
    await signedIn.get(`/console/w/${WS}`);
    const r = await signedIn.post(`/console/w/${WS}/retry`);
    expect(r.location).toBe(`/console/w/${WS}?notice=retry-none`);
    expect((await signedIn.get(r.location)).text).toContain("No host has failed");
  });

  it("downloads a diagnosis archive", async () => {
    await signedIn.get(`/console/w/${WS}`);
    const res = await app.request(`${ORIGIN}/console/w/${WS}/diagnose`, {
      method: "POST",
      headers: {
        cookie: `${SESSION_COOKIE}=${signedIn.jar.get(SESSION_COOKIE)}`,
        "content-type": "application/x-www-form-urlencoded",
        origin: ORIGIN,
      },
      body: new URLSearchParams({ _csrf: signedIn.csrf, all: "yes" }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/gzip");
    expect(res.headers.get("content-disposition")).toMatch(
      /^attachment; filename="cons\.diagnose-\w+\.tar\.gz"$/,
    );
    const tar = gunzipSync(Buffer.from(await res.arrayBuffer())).toString("latin1");
    for (const f of ["student-01/summary.json", "student-03/lab.log.tail", "index.json"])
      expect(tar).toContain(f);
  });

  it("extends the teardown time, and shows a bad number at its field", async () => {
    const before = (await rt.store.workshop.get({ name: WS }).go()).data?.expiry ?? "";
    await signedIn.get(`/console/w/${WS}`);
    const bad = await signedIn.post(`/console/w/${WS}/extend`, { hours: "-3" });
    expect(bad.status).toBe(400);
    expect(bad.text).toMatch(/<code>hours<\/code>: expected hours greater than 0/);
    const r = await signedIn.post(`/console/w/${WS}/extend`, { hours: "2" });
    expect(r.status).toBe(303);
    expect(r.location).toBe(`/console/w/${WS}?notice=extended`);
    const after = (await rt.store.workshop.get({ name: WS }).go()).data?.expiry ?? "";
    // Two hours later, to the whole second (the teardown time is kept in whole seconds).
    expect(Date.parse(after) - Date.parse(before)).toBeGreaterThan(2 * 3600 * 1000 - 1000);
    expect(Date.parse(after) - Date.parse(before)).toBeLessThanOrEqual(2 * 3600 * 1000);
    expect((await signedIn.get(r.location)).text).toContain("Extended: the new teardown time");
  });
});

describe("the portal panel", () => {
  it("opens claiming and shows the code, the board and the claims with name and email", async () => {
    const none = await signedIn.get(`/console/w/${WS}/portal`);
    expect(none.text).toContain("No portal yet");
    const r = await signedIn.post(`/console/w/${WS}/portal/open`);
    expect(r.location).toBe(`/console/w/${WS}/portal?notice=portal-open`);
    await claimLab(WS, STUDENT, "192.0.2.20");
    const p = await signedIn.get(r.location);
    expect(p.text).toContain("Claiming is open.");
    expect(p.text).toMatch(/<code class="code-big">LAB-[A-Z]{6}-\d{8}<\/code>/);
    expect(p.text).toContain("1 claimed, 2 free of 3");
    expect(p.text).toContain(`<td>${STUDENT.name}</td>`);
    expect(p.text).toContain(`<td>${STUDENT.email}</td>`);
    expect(p.text).toContain("claimed by Grace");
    expect(p.text).toContain('<label class="sr-only" for="move-student-01">');
    const regions = json((await signedIn.get(`/console/w/${WS}/portal/live`)).text).regions;
    expect(Object.keys(regions).sort()).toEqual([
      "live-board",
      "live-claims",
      "live-held",
      "live-portal",
      "live-waiting",
    ]);
    expect(regions["live-claims"]).toContain(STUDENT.email);
  });

  it("exports the claims as CSV, not cached", async () => {
    const r = await signedIn.get(`/console/w/${WS}/portal/export`);
    expect(r.status).toBe(200);
    expect(r.res.headers.get("content-type")).toMatch(/^text\/csv/);
    expect(r.res.headers.get("cache-control")).toBe("no-store");
    expect(r.res.headers.get("content-disposition")).toBe(`attachment; filename="${WS}-claims.csv"`);
    expect(r.text).toContain(`student-01,${STUDENT.name},${STUDENT.email},open,`);
  });

  it("moves a student to another lab after a confirmation, and shows the new personal link once", async () => {
    await signedIn.get(`/console/w/${WS}/portal`);
    const ask = await signedIn.post(`/console/w/${WS}/portal/reassign`, {
      lab: "student-01",
      to: "student-02",
    });
    expect(ask.status).toBe(200);
    expect(ask.text).toContain("Move Grace Hopper to student-02?");
    expect(ask.text).toContain('name="confirm" value="yes"');
    const claims = await rt.store.claim.query.byWorkshop({ workshop: WS }).go();
    expect(claims.data.map((c) => c.hostId)).toEqual(["student-01"]); // not yet
    const r = await signedIn.post(`/console/w/${WS}/portal/reassign`, {
      lab: "student-01",
      to: "student-02",
      confirm: "yes",
    });
    expect(r.status).toBe(200);
    expect(r.text).toMatch(/<code id="new-link">http:\/\/localhost\/l\/[\w-]{32}<\/code>/);
    const moved = await rt.store.claim.query.byWorkshop({ workshop: WS }).go();
    expect(moved.data.map((c) => c.hostId)).toEqual(["student-02"]);
  });

  it("releases a claim only after the confirmation step", async () => {
    await signedIn.get(`/console/w/${WS}/portal`);
    const ask = await signedIn.post(`/console/w/${WS}/portal/release`, { lab: "student-02" });
    expect(ask.status).toBe(200);
    expect(ask.text).toContain("Release student-02?");
    expect(ask.text).toContain("Grace Hopper loses lab student-02");
    expect((await rt.store.claim.query.byWorkshop({ workshop: WS }).go()).data).toHaveLength(1);
    const r = await signedIn.post(`/console/w/${WS}/portal/release`, { lab: "student-02", confirm: "yes" });
    expect(r.location).toBe(`/console/w/${WS}/portal?notice=released`);
    expect((await rt.store.claim.query.byWorkshop({ workshop: WS }).go()).data).toHaveLength(0);
    const p = await signedIn.get(r.location);
    expect(p.text).toContain("No claims yet.");
    expect(p.text).toContain("0 claimed, 3 free of 3");
  });

  it("makes a new code after a confirmation", async () => {
    const before = (await rt.store.portal.get({ workshop: WS }).go()).data?.codeVersion;
    await signedIn.get(`/console/w/${WS}/portal`);
    const ask = await signedIn.post(`/console/w/${WS}/portal/rotate-code`);
    expect(ask.text).toContain(`New code for ${WS}?`);
    expect((await rt.store.portal.get({ workshop: WS }).go()).data?.codeVersion).toBe(before);
    await signedIn.post(`/console/w/${WS}/portal/rotate-code`, { confirm: "yes" });
    expect((await rt.store.portal.get({ workshop: WS }).go()).data?.codeVersion).toBe((before ?? 0) + 1);
  });

  it("closes claiming", async () => {
    await signedIn.get(`/console/w/${WS}/portal`);
    const r = await signedIn.post(`/console/w/${WS}/portal/close`);
    expect(r.location).toBe(`/console/w/${WS}/portal?notice=portal-closed`);
    expect((await rt.store.portal.get({ workshop: WS }).go()).data?.state).toBe("closed");
  });
});

describe("tearing down", () => {
  it("asks for the workshop's name and does nothing on a wrong one", async () => {
    const ask = await signedIn.get(`/console/w/${WS}/teardown`);
    expect(ask.status).toBe(200);
    expect(ask.text).toContain(`<label for="confirm">Type ${WS} to confirm</label>`);
    const wrong = await signedIn.post(`/console/w/${WS}/teardown`, { confirm: "con" });
    expect(wrong.status).toBe(400);
    expect(wrong.text).toContain(`type ${WS} exactly`);
    expect((await rt.store.workshop.get({ name: WS }).go()).data?.state).toBe("ready");
  });

  it("tears down on the typed name", async () => {
    await signedIn.get(`/console/w/${WS}/teardown`);
    const r = await signedIn.post(`/console/w/${WS}/teardown`, { confirm: WS });
    expect(r.status).toBe(303);
    expect(r.location).toBe(`/console/w/${WS}?notice=teardown`);
    await rt.executor.idle();
    expect((await rt.store.workshop.get({ name: WS }).go()).data?.state).toBe("torn_down");
    const p = await signedIn.get(`/console/w/${WS}`);
    expect(p.text).toContain('<span class="state st-torn_down">torn down</span>');
    // Only Up is left to do.
    expect(p.text).toContain('action="/console/w/cons/up"');
    for (const gone of ["/deploy", "/retry", "/diagnose", "/extend", "/teardown"])
      expect(p.text).not.toContain(`/console/w/cons${gone}"`);
  });

  it("answers an unknown workshop with a 404 page", async () => {
    const r = await signedIn.get("/console/w/nope");
    expect(r.status).toBe(404);
    expect(r.text).toContain("no workshop named nope");
    expect((await signedIn.get("/console/w/Not_A_Name")).status).toBe(404);
  });
});

describe("the logs", () => {
  it("never hold the token, a session id, a CSRF secret, an email or a workshop code", async () => {
    const text = logs.join("\n");
    expect(text).toContain("console session started");
    expect(text).not.toContain(TOKEN);
    expect(text).not.toContain(signedIn.jar.get(SESSION_COOKIE) ?? "(none)");
    expect(text).not.toContain(signedIn.csrf || "(none)");
    expect(text).not.toContain(STUDENT.email);
    expect(text).not.toMatch(/LAB-[A-Z]{6}-\d{8}/);
  });
});
