import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { instructorAuth, tokenHash } from "../../shared/auth/tokens.ts";
import { type EventInput, listEvents, recordEvent } from "../../shared/fleet/events.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { SESSION_COOKIE } from "../../web/console/session.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import { movableClock, removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * The console's API tokens page and a workshop's activity list, through app.request(): a token is shown once
 * and works as a bearer token on the API until it is revoked (after a confirmation); the forms need the
 * session's CSRF secret; the activity list shows recorded events newest first, and the page's live endpoint
 * sends only the events after the id it is given.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "console-tokens-suite-token-0123";
const ORIGIN = "http://localhost";
const WS = "acts";
const OTHER = "acts-other";
const clock = movableClock();
// The API checks hashed API tokens first, then the bootstrap token: as `labfleet dev` and the cloud do.
const app = createApp({ auth: instructorAuth(bootstrapAuth(TOKEN)) });
const logs: string[] = [];

const count = (text: string, needle: string) => text.split(needle).length - 1;
// biome-ignore lint/suspicious/noExplicitAny: JSON answers are checked field by field
const json = (text: string): any => JSON.parse(text);

/** A browser for app.request(): a cookie jar, the CSRF field of the last page it saw, its own Origin. */
class Browser {
  readonly jar = new Map<string, string>();
  csrf = "";

  private cookieHeader(): Record<string, string> {
    return cookieHeader(this.jar);
  }
  private async take(res: Response) {
    storeCookies(this.jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { res, status: res.status, text, location: res.headers.get("location") ?? "" };
  }
  async get(path: string) {
    return this.take(await app.request(`${ORIGIN}${path}`, { headers: this.cookieHeader() }));
  }
  async post(
    path: string,
    fields: Record<string, string> = {},
    opts: { headers?: Record<string, string>; csrf?: string | null } = {},
  ) {
    const csrf = opts.csrf === undefined ? this.csrf : opts.csrf;
    return this.take(
      await app.request(`${ORIGIN}${path}`, {
        method: "POST",
        headers: {
          ...this.cookieHeader(),
          "content-type": "application/x-www-form-urlencoded",
          origin: ORIGIN,
          "sec-fetch-site": "same-origin",
          ...opts.headers,
        },
        body: new URLSearchParams({ ...(csrf === null ? {} : { _csrf: csrf }), ...fields }),
      }),
    );
  }
  async signIn() {
    await this.get("/console/login");
    return this.post("/console/login", { token: TOKEN });
  }
}

const api = (path: string, bearer: string) =>
  app.request(`${ORIGIN}${path}`, { headers: { authorization: `Bearer ${bearer}` } });
const storedTokens = async () => (await rt.store.apiToken.scan.go({ pages: "all" })).data;
/** The row of a token on the tokens page, by its name. */
const rowOf = (page: string, name: string) =>
  [...page.matchAll(/<tr id="tok-(tok_[0-9A-Z]{26})">([\s\S]*?)<\/tr>/g)].find((m) =>
    m[2]?.includes(`<th scope="row">${name}</th>`),
  );

/** Creates a token through the form, as a browser would, and returns it with its id. */
async function createThroughForm(b: Browser, name: string, days = "") {
  await b.get("/console/tokens");
  const r = await b.post("/console/tokens", { name, days });
  expect(r.status, r.text).toBe(201);
  const token = /<input id="new-token" class="secret" type="text" readonly="" value="(lf_[\w-]{43})"/.exec(
    r.text,
  )?.[1];
  if (!token) throw new Error("no token on the result page");
  const id = rowOf((await b.get("/console/tokens")).text, name)?.[1];
  if (!id) throw new Error(`no row for ${name}`);
  return { r, token, id };
}

let signedIn: Browser;

beforeAll(async () => {
  setLogSink((line) => logs.push(line), "info");
  rt = await testRuntime({ token: TOKEN, clock });
  signedIn = new Browser();
  expect((await signedIn.signIn()).status).toBe(303);
});
afterAll(async () => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("the API tokens page", () => {
  it("is in the console's navigation, lists no token yet, and offers a labelled create form", async () => {
    const home = await signedIn.get("/console");
    expect(home.text).toContain('<a href="/console/tokens">API tokens</a>');
    const r = await signedIn.get("/console/tokens");
    expect(r.status).toBe(200);
    expect(r.res.headers.get("cache-control")).toBe("no-store");
    expect(r.text).toContain('<a href="/console/tokens" aria-current="page">API tokens</a>');
    expect(r.text).toContain("No API tokens yet.");
    expect(r.text).toContain('<label for="token-name">Name</label>');
    expect(r.text).toContain('<label for="token-days">Expires after (days)</label>');
    expect(r.text).toContain('<form method="post" action="/console/tokens"');
  });

  it("needs a session, like every console page, and creates nothing without one", async () => {
    const r = await new Browser().get("/console/tokens");
    expect(r.status).toBe(303);
    expect(r.location).toBe("/console/login?next=%2Fconsole%2Ftokens");
    const before = (await storedTokens()).length;
    const post = await new Browser().post("/console/tokens", { name: "sneaky", days: "" }, { csrf: null });
    expect(post.status).toBe(303);
    expect(post.location).toBe("/console/login");
    const revoke = await new Browser().post("/console/tokens/revoke", { id: "tok_x", confirm: "yes" });
    expect(revoke.location).toBe("/console/login");
    expect((await storedTokens()).length).toBe(before);
  });

  it("shows a new token exactly once, with the CLI hint, and never in a URL, the list or the table", async () => {
    const { r, token, id } = await createThroughForm(signedIn, "laptop CLI", "30");
    expect(r.res.headers.get("cache-control")).toBe("no-store");
    expect(r.location).toBe(""); // the page itself, not a redirect that would put the token in a URL
    expect(count(r.text, token)).toBe(1);
    expect(r.text).toContain("It is shown only on this page, once");
    expect(r.text).toContain(`<code id="login-hint">labfleet login --url ${ORIGIN} --token</code>`);
    expect(r.text).toContain('<label for="new-token">The new API token</label>');

    const list = await signedIn.get("/console/tokens");
    expect(list.text).not.toContain(token);
    expect(list.text).not.toContain(token.slice(3));
    expect(list.text).not.toContain(tokenHash(token));
    const row = rowOf(list.text, "laptop CLI")?.[2] ?? "";
    expect(row).toContain("bootstrap (you)");
    // Times are <time> elements the browser shows in its own zone; without a script they read in UTC.
    expect(row).toMatch(
      /<td class="num"><time datetime="[\d-]+T[\d:.]+Z" data-time="clock">\d{4}-\d\d-\d\d \d\d:\d\d UTC<\/time><\/td>\s*<td class="num">never<\/td>/,
    );
    // Thirty days on, to the minute shown.
    const stored = (await storedTokens()).find((t) => t.tokenId === id);
    expect(stored?.hash).toBe(tokenHash(token));
    const expires = new Date((stored?.expiresAt ?? 0) * 1000).toISOString();
    expect(Date.parse(expires) - clock.now().getTime()).toBeGreaterThan(30 * 86_400_000 - 60_000);
    expect(row).toContain(`${expires.replace("T", " ").slice(0, 16)} UTC`);
    expect(JSON.stringify(await storedTokens())).not.toContain(token);
  });

  it("makes a token that works as a bearer token on /api/workshops, and shows when it was last used", async () => {
    const { token } = await createThroughForm(signedIn, "CI deploy job");
    expect((await api("/api/workshops", "lf_not-a-real-token")).status).toBe(401);
    const r = await api("/api/workshops", token);
    expect(r.status).toBe(200);
    expect(Array.isArray(json(await r.text()).workshops)).toBe(true);
    const row = rowOf((await signedIn.get("/console/tokens")).text, "CI deploy job")?.[2] ?? "";
    // Created and last used are dates now; no expiry was asked for.
    expect(row).toMatch(
      /(<td class="num"><time datetime="[\d-]+T[\d:.]+Z" data-time="clock">\d{4}-\d\d-\d\d \d\d:\d\d UTC<\/time><\/td>\s*){2}<td class="num">never<\/td>/,
    );
  });

  it("sends back a bad name or number of days at its field, and creates nothing", async () => {
    const before = (await storedTokens()).length;
    await signedIn.get("/console/tokens");
    const noName = await signedIn.post("/console/tokens", { name: "  ", days: "7" });
    expect(noName.status).toBe(400);
    expect(noName.text).toContain("Name: name the token");
    expect(noName.text).toMatch(/<input id="token-name"[^>]*aria-invalid="true"/);
    expect(noName.text).toMatch(/<input id="token-days"[^>]*value="7"/);
    for (const days of ["0", "1.5", "abc", "4000", "-2"]) {
      const r = await signedIn.post("/console/tokens", { name: "fine name", days });
      expect(r.status, days).toBe(400);
      expect(r.text).toContain("Expires after: expected a whole number of days from 1 to 3650");
      expect(r.text).toMatch(/<input id="token-days"[^>]*aria-invalid="true"/);
      expect(r.text).toContain('value="fine name"');
    }
    const odd = await signedIn.post("/console/tokens", { name: "<b>x</b>", days: "" });
    expect(odd.status).toBe(400);
    expect(odd.text).not.toContain("<b>x</b>");
    expect((await storedTokens()).length).toBe(before);
  });

  it("revokes a token only after the confirmation, and then the API refuses it with 401", async () => {
    const { token, id } = await createThroughForm(signedIn, "old laptop");
    const ask = await signedIn.post("/console/tokens/revoke", { id });
    expect(ask.status).toBe(200);
    expect(ask.text).toContain("Revoke the token old laptop?");
    expect(ask.text).toContain("stops working at once");
    expect(ask.text).toContain(`<input type="hidden" name="id" value="${id}"/>`);
    expect(ask.text).toContain('<input type="hidden" name="confirm" value="yes"/>');
    expect(ask.text).not.toContain(token);
    // Not yet.
    expect((await api("/api/workshops", token)).status).toBe(200);

    const r = await signedIn.post("/console/tokens/revoke", { id, confirm: "yes" });
    expect(r.status).toBe(303);
    expect(r.location).toBe("/console/tokens?notice=token-revoked");
    const refused = await api("/api/workshops", token);
    expect(refused.status).toBe(401);
    expect(json(await refused.text()).error.code).toBe("auth.invalid");
    const list = await signedIn.get(r.location);
    expect(list.text).toContain("The token was revoked");
    expect(rowOf(list.text, "old laptop")).toBeUndefined();
    expect(list.text).toContain("laptop CLI"); // the others stay

    const again = await signedIn.post("/console/tokens/revoke", { id });
    expect(again.status).toBe(404);
    expect(again.text).toContain('href="/console/tokens"');
    const bad = await signedIn.post("/console/tokens/revoke", { id: "not-a-token-id" });
    expect(bad.status).toBe(400);
  });

  it("refuses a create or a revoke without the session's CSRF secret or from another site; nothing changes", async () => {
    const { token, id } = await createThroughForm(signedIn, "kept token");
    const before = (await storedTokens()).length;
    const other = new Browser();
    await other.signIn();
    await other.get("/console/tokens");
    const forged: { csrf?: string | null; headers?: Record<string, string> }[] = [
      { csrf: null },
      { csrf: "x".repeat(43) },
      { csrf: other.csrf },
      { headers: { origin: "https://evil.example" } },
      { headers: { "sec-fetch-site": "cross-site" } },
    ];
    for (const opts of forged) {
      const create = await signedIn.post("/console/tokens", { name: "csrf victim", days: "" }, opts);
      expect(create.status).toBe(403);
      expect(create.text).toContain("This form could not be accepted");
      expect(create.text).not.toMatch(/lf_[\w-]{43}/);
      const revoke = await signedIn.post("/console/tokens/revoke", { id, confirm: "yes" }, opts);
      expect(revoke.status).toBe(403);
    }
    expect((await storedTokens()).length).toBe(before);
    expect((await api("/api/workshops", token)).status).toBe(200);
  });
});

describe("a workshop's activity list", () => {
  /** The events, as their recorders would write them, one second apart (so their order is certain). */
  const recorded: EventInput[] = [
    { workshop: WS, type: "run.started", runId: "run_1", detail: { kind: "up", by: "Alice Admin" } },
    { workshop: WS, type: "host.ready", hostId: "student-01", detail: { seconds: 42 } },
    {
      workshop: WS,
      type: "host.failed",
      hostId: "student-02",
      detail: { reason: "setup exited with code 7; last lines of the log: mirror unreachable" },
    },
    { workshop: WS, type: "host.failed", hostId: "student-03" },
    { workshop: WS, type: "lab.claimed", hostId: "student-01", detail: { how: "open", student: "Ada" } },
    {
      workshop: WS,
      type: "lab.released",
      hostId: "student-01",
      detail: { how: "released", student: "Ada", by: "Alice Admin" },
    },
    { workshop: WS, type: "run.finished", runId: "run_1", detail: { kind: "up", state: "failed" } },
    { workshop: WS, type: "workshop.torn_down" },
  ];
  const sentences = [
    "Alice Admin started up.",
    "student-01 is ready (built in 42 s).",
    "student-02 failed: setup exited with code 7; last lines of the log: mirror unreachable",
    "student-03 failed.",
    "Ada claimed lab student-01.",
    "Alice Admin released lab student-01 from Ada; it is free again.",
    "Up failed.",
    "The workshop was torn down: its hosts and portal are gone.",
  ];
  let ids: string[] = [];
  const typesIn = (html: string) => [...html.matchAll(/<tr id="event-(\w{26})" data-type="([\w.]+)"/g)];

  beforeAll(async () => {
    for (const name of [WS, OTHER]) {
      await signedIn.get("/console/new");
      const r = await signedIn.post("/console/new", { yaml: workshopYaml({ name }) });
      expect(r.status, r.text).toBe(303);
    }
  });

  it("says that nothing has happened yet, with no event to continue from", async () => {
    const r = await signedIn.get(`/console/w/${WS}`);
    expect(r.text).toContain('<h2 id="activity-h">Activity</h2>');
    expect(r.text).toContain('<tbody id="live-activity" data-after="">');
    expect(r.text).toContain("Nothing has happened yet");
    const live = json((await signedIn.get(`/console/w/${WS}/live`)).text);
    expect(live.activity).toEqual({ events: [], last: null, html: "" });
  });

  it("shows the recorded events newest first, each with its type, host, time and sentence", async () => {
    for (const e of recorded) {
      clock.advance(1000);
      await recordEvent(e);
    }
    await recordEvent({ workshop: OTHER, type: "host.failed", hostId: "student-09" });
    ids = (await listEvents(WS)).events.map((e) => e.id);
    expect(ids).toHaveLength(recorded.length);

    const r = await signedIn.get(`/console/w/${WS}`);
    expect(r.status).toBe(200);
    const rows = typesIn(r.text);
    expect(rows.map((m) => m[1])).toEqual([...ids].reverse());
    expect(rows.map((m) => m[2])).toEqual(recorded.map((e) => e.type).reverse());
    expect(r.text).toContain(`<tbody id="live-activity" data-after="${ids.at(-1)}">`);
    expect(r.text).not.toContain("Nothing has happened yet");
    expect(r.text).not.toContain("student-09"); // another workshop's event
    // Sentences in the same order as the rows.
    const at = sentences.map((s) => r.text.indexOf(`<td class="what">${s}</td>`));
    expect(at.every((i) => i > 0)).toBe(true);
    expect([...at].sort((a, b) => b - a)).toEqual(at);
    const failed = /<tr id="event-\w{26}" data-type="host.failed">([\s\S]*?)<\/tr>/.exec(r.text)?.[1] ?? "";
    expect(failed).toMatch(
      /<time datetime="[\d-]+T[\d:.]+Z" data-time="exact">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<\/time>/,
    );
    expect(failed).toContain('<span class="state ev-host-failed">host failed</span>');
    expect(failed).toContain("<td>student-03</td>");
  });

  it("sends only the events after the given id on the live endpoint, newest first in its rows", async () => {
    const after = ids[4] ?? "";
    const r = await signedIn.get(`/console/w/${WS}/live?after=${after}`);
    expect(r.status).toBe(200);
    expect(r.res.headers.get("cache-control")).toBe("no-store");
    const body = json(r.text);
    expect(Object.keys(body.regions).sort()).toEqual([
      "live-fleet",
      "live-hosts",
      "live-pager",
      "live-receipt",
      "live-rollout",
      "live-summary",
    ]);
    expect(body.activity.events.map((e: { id: string }) => e.id)).toEqual(ids.slice(5));
    expect(body.activity.last).toBe(ids.at(-1));
    expect(typesIn(body.activity.html).map((m) => m[1])).toEqual(ids.slice(5).reverse());
    expect(body.activity.html).toContain("Alice Admin released lab student-01 from Ada; it is free again.");
    expect(body.activity.html).not.toContain("Ada claimed lab student-01.");
    expect(body.activity.html).not.toContain("data-empty");

    const none = json((await signedIn.get(`/console/w/${WS}/live?after=${ids.at(-1)}`)).text);
    expect(none.activity).toEqual({ events: [], last: ids.at(-1), html: "" });

    // One more event: the next poll, from the last id, gets it and only it.
    clock.advance(1000);
    await recordEvent({ workshop: WS, type: "host.ready", hostId: "student-03" });
    const next = json((await signedIn.get(`/console/w/${WS}/live?after=${none.activity.last}`)).text);
    expect(next.activity.events).toHaveLength(1);
    expect(next.activity.events[0].hostId).toBe("student-03");
    expect(next.activity.html).toContain("student-03 is ready.");
    expect(next.activity.last).toBe(next.activity.events[0].id);
  });

  it("refuses an `after` that is not an event id, as JSON", async () => {
    const r = await signedIn.get(`/console/w/${WS}/live?after=not-an-id`);
    expect(r.status).toBe(400);
    expect(json(r.text).error.code).toBe("input.invalid");
  });
});

describe("the logs", () => {
  it("never hold an API token, the bootstrap token or a session id", async () => {
    const { token } = await createThroughForm(signedIn, "log check");
    const text = logs.join("\n");
    expect(text).toContain("api token created");
    expect(text).toContain("api token revoked");
    expect(text).not.toContain(token);
    expect(text).not.toMatch(/lf_[\w-]{43}/);
    expect(text).not.toContain(TOKEN);
    expect(text).not.toContain(signedIn.jar.get(SESSION_COOKIE) ?? "(none)");
  });
});
