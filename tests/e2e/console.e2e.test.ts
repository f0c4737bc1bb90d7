import { readFileSync } from "node:fs";
import type { Browser, BrowserContext, Locator, Page } from "playwright-core";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { recordEvent } from "../../shared/fleet/events.ts";
import { RATE } from "../../shared/portal/constants.ts";
import { recordFailure } from "../../shared/portal/rate-limit.ts";
import {
  clearScreenshots,
  collectPageErrors,
  launchChromium,
  pageWidths,
  screenshot,
} from "../harness/browser.ts";
import { removeDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The instructor console in headless Chromium against the local runtime on 127.0.0.1: sign in with the local
 * token (typed, and through the link `labfleet dev` prints), create a workshop from YAML (a bad one first),
 * watch its labs build live, retry the failed one after fixing the lab, hand a lab out and release it, read
 * the runs, tear down. On the way it makes, uses and revokes an API token, and reads the workshop's activity
 * list as it gets a new event live. Controls are found by their labels and roles, which also checks that they have them.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
const WS = "e2ec";
const STUDENT = { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" };
const SHOTS = {
  login: "console-01-sign-in",
  yamlErrors: "console-02-new-workshop-errors",
  failed: "console-03-workshop-one-failed",
  ready: "console-04-workshop-all-ready",
  list: "console-05-workshops",
  tablet: "console-06-tablet-workshop",
  portal: "console-07-portal-claimed",
  release: "console-08-release-confirm",
  runs: "console-09-runs",
  teardown: "console-10-teardown-confirm",
  tornDown: "console-11-torn-down",
  tokenCreated: "console-12-token-created",
  tokens: "console-13-tokens",
  tokenRevoke: "console-14-token-revoke-confirm",
  activity: "console-15-workshop-activity",
  heldBack: "console-16-portal-held-back",
} as const;

let rt: Runtime | undefined;
let browser: Browser | undefined;
let desk: BrowserContext;
let page: Page;
/** Console errors, page errors and failed subresources, one list per browser context. */
const pageErrors: string[][] = [];
/** Every URL a browser asked for: none may carry a token, a session id, an email or a workshop code. */
const urls: string[] = [];
let code = "";
/** The API token made on the tokens page: it must not reach a URL either. */
let apiToken = "";

function runtime(): Runtime {
  if (!rt) throw new Error("the runtime did not start");
  return rt;
}

async function newContext(options: Parameters<Browser["newContext"]>[0] = {}): Promise<BrowserContext> {
  if (!browser) throw new Error("Chromium did not start");
  const context = await browser.newContext({ baseURL: runtime().url, acceptDownloads: true, ...options });
  context.setDefaultTimeout(8_000);
  pageErrors.push(collectPageErrors(context));
  context.on("request", (r) => urls.push(r.url()));
  return context;
}

/** Clicks a button and checks the status of the POST it sends, before any redirect is followed. */
async function submit(p: Page, button: string, path: string, expected = 303): Promise<void> {
  const answered = p.waitForResponse(
    (r) => r.request().method() === "POST" && new URL(r.url()).pathname === path,
  );
  await p.getByRole("button", { name: button, exact: true }).click();
  const res = await answered;
  if (res.status() === expected) return;
  const heading = /<h1>([^<]*)<\/h1>/.exec(await res.text().catch(() => ""))?.[1] ?? "";
  expect.fail(`POST ${path} answered ${res.status()} "${heading}", not ${expected}`);
}

/** Main-frame navigations of a page: a live update must not add any. */
function countNavigations(p: Page): { count: number } {
  const seen = { count: 0 };
  p.on("framenavigated", (f) => {
    if (f === p.mainFrame()) seen.count++;
  });
  return seen;
}

const hostState = (p: Page, id: string) =>
  p.locator(`#host-${id}`).getAttribute("data-state", { timeout: 500 });
const states = async (p: Page) =>
  Promise.all(["student-01", "student-02", "student-03"].map((id) => hostState(p, id).catch(() => null)));
/** An element's text with runs of white space made one space. */
const text = async (l: Locator) => ((await l.textContent()) ?? "").replace(/\s+/g, " ").trim();
/** A table row's cells, one string each. */
const cells = async (row: Locator) =>
  (await row.locator("th, td").allTextContents()).map((t) => t.replace(/\s+/g, " ").trim());
const polls = async (p: Page) => Number((await p.locator("main").getAttribute("data-polls")) ?? "0");

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  const [started, launched] = await Promise.allSettled([testRuntime(), launchChromium()]);
  if (started.status === "fulfilled") rt = started.value;
  if (launched.status === "fulfilled") browser = launched.value;
  if (started.status === "rejected") throw started.reason;
  if (launched.status === "rejected") throw launched.reason;
  desk = await newContext({ viewport: { width: 1280, height: 800 } });
  page = await desk.newPage();
});

afterAll(async () => {
  try {
    await browser?.close();
  } finally {
    await rt?.close();
    if (rt) removeDir(rt.dataDir);
  }
});

describe("an instructor's day in the console", () => {
  // One story: after a failed step the later ones are skipped instead of timing out one by one.
  let failed = "";
  beforeEach((ctx) => {
    if (failed) ctx.skip(`an earlier step failed: ${failed}`);
    ctx.onTestFailed(() => {
      failed ||= ctx.task.name;
    });
  });

  it("sends a visitor to sign in, refuses a wrong token and signs in with the local one", async () => {
    await page.goto("/console");
    await page.waitForURL(/\/console\/login\?next=%2Fconsole$/);
    await page.getByRole("heading", { level: 1, name: "Sign in to the instructor console" }).waitFor();
    await page.getByLabel("Instructor token").fill("not-the-token");
    await submit(page, "Sign in", "/console/login", 401);
    await page.getByRole("alert").getByText("That is not a valid instructor token").waitFor();
    await screenshot(page, SHOTS.login);
    await page.getByLabel("Instructor token").fill(runtime().token);
    await submit(page, "Sign in", "/console/login");
    await page.waitForURL((u) => u.pathname === "/console");
    await page.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
    await page.getByText("Signed in: instructor token").waitFor();
    await page.getByText("No workshops yet").waitFor();
  });

  it("signs another browser in straight from the link labfleet dev prints, and drops the token from it", async () => {
    const other = await newContext({ viewport: { width: 1280, height: 800 } });
    const p = await other.newPage();
    await p.goto(`/console#token=${encodeURIComponent(runtime().token)}`);
    await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
    expect(new URL(p.url()).pathname).toBe("/console");
    expect(p.url()).not.toContain(runtime().token);
    expect((await other.cookies()).find((c) => c.name === "lf_console")?.httpOnly).toBe(true);
    // Signing out there ends only that browser's session.
    await p.getByRole("button", { name: "Sign out" }).click();
    await p.waitForURL(/\/console\/login\?signed_out=1$/);
    await p.getByText("You are signed out.").waitFor();
    await p.goto("/console");
    await p.waitForURL(/\/console\/login/);
    await other.close();
    await page.reload();
    await page.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  });

  it("makes an API token that is shown once and works on the API, and revokes it after confirming", async () => {
    await page.getByRole("link", { name: "API tokens", exact: true }).click();
    await page.getByRole("heading", { level: 1, name: "API tokens" }).waitFor();
    await page.getByText("No API tokens yet.").waitFor();
    await page.getByLabel("Name", { exact: true }).fill("e2e laptop");
    await page.getByLabel("Expires after (days)").fill("7");
    await submit(page, "Create token", "/console/tokens", 201);
    await page.getByRole("heading", { level: 1, name: "Token created: e2e laptop" }).waitFor();
    apiToken = await page.getByLabel("The new API token").inputValue();
    expect(apiToken).toMatch(/^lf_[\w-]{43}$/);
    expect(await text(page.locator("#login-hint"))).toBe(`labfleet login --url ${runtime().url} --token`);
    expect(new URL(page.url()).pathname).toBe("/console/tokens");
    await screenshot(page, SHOTS.tokenCreated);
    const call = () =>
      fetch(`${runtime().url}/api/workshops`, { headers: { authorization: `Bearer ${apiToken}` } });
    expect((await call()).status).toBe(200);

    await page.getByRole("link", { name: "Back to API tokens" }).click();
    const row = page.getByRole("row", { name: /e2e laptop/ });
    const [name, owner, created, lastUsed, expires] = await cells(row);
    expect([name, owner]).toEqual(["e2e laptop", "bootstrap (you)"]);
    // Local clock times, as the CLI shows them; the expiry also says how far off it is.
    for (const at of [created, lastUsed]) expect(at).toMatch(/^(\d{4}-\d\d-\d\d )?\d\d:\d\d$/);
    expect(expires).toMatch(/^(\d{4}-\d\d-\d\d )?\d\d:\d\d \(in [67] d \d+ h\)$/);
    expect(await page.content()).not.toContain(apiToken);
    await screenshot(page, SHOTS.tokens);

    await row.getByRole("button", { name: "Revoke the token e2e laptop" }).click();
    await page.getByRole("heading", { level: 1, name: "Revoke the token e2e laptop?" }).waitFor();
    await screenshot(page, SHOTS.tokenRevoke);
    await submit(page, "Revoke e2e laptop", "/console/tokens/revoke");
    await page.getByText("The token was revoked").waitFor();
    await page.getByText("No API tokens yet.").waitFor();
    expect((await call()).status).toBe(401);
  });

  it("shows a bad workshop.yaml's errors at their path and line, then creates the workshop", async () => {
    await page.getByRole("link", { name: "New workshop" }).first().click();
    await page.getByRole("heading", { level: 1, name: "New workshop" }).waitFor();
    const bad = workshopYaml({ name: WS, lab: "fail" }).replace("count: 3", "count: 999");
    await page.getByLabel("workshop.yaml", { exact: true }).fill(bad);
    await submit(page, "Save workshop", "/console/new", 400);
    const errors = page.getByRole("alert");
    await errors.getByRole("heading", { name: "workshop.yaml is not valid" }).waitFor();
    const item = errors.locator('li[data-path="provider.count"]');
    expect(await text(item)).toMatch(/^provider\.count \(line 10, column 10\): expected/);
    expect(await item.locator("code.yaml-line").textContent()).toBe("10:   count: 999");
    // The text stays in the field to be fixed.
    expect(await page.getByLabel("workshop.yaml", { exact: true }).inputValue()).toBe(bad);
    expect(await page.getByLabel("workshop.yaml", { exact: true }).getAttribute("aria-invalid")).toBe("true");
    await screenshot(page, SHOTS.yamlErrors);

    await page
      .getByLabel("workshop.yaml", { exact: true })
      .fill(workshopYaml({ name: WS, lab: "fail", count: 3 }));
    await submit(page, "Save workshop", "/console/new");
    await page.waitForURL((u) => u.pathname === `/console/w/${WS}`);
    await page.getByText("Workshop saved. Press Up to bring it up.").waitFor();
    await page.getByText("No hosts yet").waitFor();
  });

  it("follows the labs building live, without reloading, until two are ready and one failed", async () => {
    await submit(page, "Up", `/console/w/${WS}/up`);
    await page.waitForURL((u) => u.pathname === `/console/w/${WS}` && u.search === "?notice=up");
    const nav = countNavigations(page);
    await waitFor(
      "student-01 and -03 ready, student-02 failed",
      async () => (await states(page)).join(",") === "ready,failed,ready",
      30_000,
    );
    expect(nav.count).toBe(0);
    expect(await polls(page)).toBeGreaterThan(0);
    const row = page.locator("#host-student-02");
    expect(await text(row.locator(".state"))).toBe("failed");
    await row
      .getByText(/exit(ed)? .*7|mirror unreachable/)
      .first()
      .waitFor();
    expect(await page.getByRole("progressbar", { name: "student-01: 1 of 1 phases done" }).count()).toBe(1);
    await page.locator("#live-summary").getByText("2/3 ready").waitFor();
    await screenshot(page, SHOTS.failed);
  });

  it("downloads a diagnosis of the failed lab", async () => {
    const downloaded = page.waitForEvent("download");
    await page.getByRole("button", { name: "Download diagnosis" }).click();
    const file = await downloaded;
    expect(file.suggestedFilename()).toMatch(new RegExp(`^${WS}\\.diagnose-\\w+\\.tar\\.gz$`));
    const path = await file.path();
    expect(readFileSync(path).subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b])); // gzip
  });

  it("retries the failed lab after the lab is fixed, and watches all three reach ready live", async () => {
    // Fix the lab: the same workshop with a lab that builds everywhere.
    await page.getByRole("link", { name: "New workshop" }).first().click();
    await page
      .getByLabel("workshop.yaml", { exact: true })
      .fill(workshopYaml({ name: WS, lab: "quick", count: 3 }));
    await submit(page, "Save workshop", "/console/new");
    await page.getByText("Workshop updated.").waitFor();

    await submit(page, "Retry failed hosts", `/console/w/${WS}/retry`);
    await page.waitForURL((u) => u.search === "?notice=retry");
    const nav = countNavigations(page);
    const before = await polls(page);
    expect(await hostState(page, "student-02")).not.toBe("ready");
    await waitFor(
      "all three labs ready",
      async () => (await states(page)).join(",") === "ready,ready,ready",
      30_000,
    );
    expect(nav.count).toBe(0);
    expect(await polls(page)).toBeGreaterThan(before);
    await page.locator("#live-summary").getByText("3/3 ready").waitFor();
    expect(await page.locator("#host-student-02 pre.error").count()).toBe(0);
    await screenshot(page, SHOTS.ready);

    await page.getByRole("link", { name: "Workshops", exact: true }).click();
    const row = page.locator(`#workshop-${WS}`);
    const [name, state, hosts, claims, left] = await cells(row);
    expect([name, state, hosts, claims]).toEqual([WS, "ready", "3/3 ready", "0"]);
    expect(left).toMatch(/^\d+ h \d+ min left$/);
    await screenshot(page, SHOTS.list);
  });

  it("reaches every action by keyboard, with a visible focus", async () => {
    await page.goto(`/console/w/${WS}`);
    await page.keyboard.press("Tab");
    expect(await page.evaluate<string>("document.activeElement.textContent.trim()")).toBe("Skip to content");
    let found = false;
    for (let i = 0; i < 60 && !found; i++) {
      await page.keyboard.press("Tab");
      found = await page.evaluate<boolean>(
        "document.activeElement.tagName === 'BUTTON' && document.activeElement.textContent.trim() === 'Retry failed hosts'",
      );
    }
    expect(found).toBe(true);
    expect(await page.evaluate<string>("getComputedStyle(document.activeElement).outlineStyle")).toBe(
      "solid",
    );
    expect(await page.evaluate<string>("getComputedStyle(document.activeElement).outlineWidth")).toBe("3px");
  });

  it("fits a tablet without scrolling sideways", async () => {
    const tablet = await newContext({ viewport: { width: 768, height: 1024 }, hasTouch: true });
    const p = await tablet.newPage();
    await p.goto(`/console#token=${encodeURIComponent(runtime().token)}`);
    await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
    for (const path of [
      "/console",
      `/console/w/${WS}`,
      `/console/w/${WS}/portal`,
      `/console/w/${WS}/runs`,
      "/console/tokens",
    ]) {
      await p.goto(path);
      const widths = await pageWidths(p);
      expect(widths.innerWidth, path).toBe(768);
      expect(widths.scrollWidth, path).toBeLessThanOrEqual(widths.innerWidth);
    }
    await p.goto(`/console/w/${WS}`);
    await screenshot(p, SHOTS.tablet);
    await tablet.close();
  });

  it("opens claiming, sees a student's claim arrive live, exports it and releases it after confirming", async () => {
    await page.goto(`/console/w/${WS}`);
    await page.getByRole("link", { name: "Portal", exact: true }).click();
    await page.getByText("No portal yet").waitFor();
    await submit(page, "Open claiming", `/console/w/${WS}/portal/open`);
    await page.getByText("Claiming is open.").waitFor();
    code = await text(page.locator("code.code-big"));
    expect(code).toMatch(/^LAB-[A-Z]{6}-\d{8}$/);
    const nav = countNavigations(page);

    // A student claims a lab in their own browser.
    const student = await newContext({ viewport: { width: 390, height: 844 } });
    const s = await student.newPage();
    await s.goto("/");
    await s.getByLabel("Workshop code").fill(code);
    await s.getByRole("button", { name: "Continue" }).click();
    await s.waitForURL(/\/board$/);
    await s.getByLabel("Your name", { exact: true }).fill(STUDENT.name);
    await s.getByLabel("Your email", { exact: true }).fill(STUDENT.email);
    await s.getByLabel("Choose a 6-digit PIN").fill(STUDENT.pin);
    await s.getByRole("button", { name: "Claim my lab" }).click();
    await s.getByRole("heading", { level: 1, name: "Your lab: student-01" }).waitFor();

    // The console shows it without a reload.
    const claim = page.locator("#claim-student-01");
    await claim.waitFor({ timeout: 15_000 });
    expect((await cells(claim)).slice(0, 3)).toEqual(["student-01", STUDENT.name, STUDENT.email]);
    await page.locator("#live-board").getByText("claimed by Ada").waitFor();
    await page.locator("#live-portal").getByText("1 claimed, 2 free of 3").waitFor();
    expect(nav.count).toBe(0);
    await screenshot(page, SHOTS.portal);

    const downloaded = page.waitForEvent("download");
    await page.getByRole("link", { name: "Export claims (CSV)" }).click();
    const csv = readFileSync(await (await downloaded).path(), "utf8");
    expect(csv).toContain(`student-01,${STUDENT.name},${STUDENT.email},open,`);

    await claim.getByRole("button", { name: "Release student-01" }).click();
    await page.getByRole("heading", { level: 1, name: "Release student-01?" }).waitFor();
    await page.getByText(`${STUDENT.name} loses lab student-01`).waitFor();
    await screenshot(page, SHOTS.release);
    await submit(page, "Release student-01", `/console/w/${WS}/portal/release`);
    await page.getByText("The lab was released and is free again.").waitFor();
    await page.getByText("No claims yet.").waitFor();
    await page.locator("#live-portal").getByText("0 claimed, 3 free of 3").waitFor();

    // The student's personal link is gone with the claim.
    await s.reload();
    await s.getByRole("heading", { level: 1, name: "This link no longer works" }).waitFor();
    await student.close();
  });

  it("shows a network the rate limits hold back, live, and lets it in with a button", async () => {
    await page.getByText("Nobody is held back by the rate limits.").waitFor();
    const nav = countNavigations(page);
    // A guesser on this machine's address that drops its cookies: new browsers, wrong codes.
    for (let i = 0; i < RATE.perAddressNewBrowsers; i++) await recordFailure("127.0.0.1", "code");
    const row = page.locator("#live-held tbody tr").first();
    await row.waitFor({ timeout: 15_000 });
    const [address, held, count] = await cells(row);
    expect([address, held, count]).toEqual([
      "127.0.0.1",
      "browsers that never entered a right code",
      `${RATE.perAddressNewBrowsers} of ${RATE.perAddressNewBrowsers}`,
    ]);
    expect(nav.count).toBe(0);

    // A student in a new browser on that address waits, even with the right code.
    const student = await newContext({ viewport: { width: 390, height: 844 } });
    const s = await student.newPage();
    await s.goto("/");
    await s.getByLabel("Workshop code").fill(code);
    await s.getByRole("button", { name: "Continue" }).click();
    await s.getByRole("alert").getByText("Too many wrong codes from your network").waitFor();
    await screenshot(page, SHOTS.heldBack);

    await submit(page, "Let 127.0.0.1 in again", `/console/w/${WS}/portal/unblock`);
    await page.getByText("Let in again: the address's wrong attempts start from zero.").waitFor();
    await page.locator("#live-held").getByText("Nobody is held back by the rate limits.").waitFor();
    await s.getByLabel("Workshop code").fill(code);
    await s.getByRole("button", { name: "Continue" }).click();
    await s.waitForURL(/\/board$/);
    await student.close();
  });

  it("lists the claim and its release in the workshop's activity, and adds a new event live", async () => {
    await page.getByRole("link", { name: "Hosts", exact: true }).click();
    await page.waitForURL((u) => u.pathname === `/console/w/${WS}`);
    const list = page.locator("#live-activity");
    const released = list.locator('tr[data-type="lab.released"]').first();
    const claimed = list.locator('tr[data-type="lab.claimed"]').first();
    const [at, ...rest] = await cells(released);
    expect(at).toMatch(/^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d$/);
    expect(rest[0]).toBe("lab released");
    expect(rest[1]).toBe("student-01");
    expect(rest[2]).toMatch(/^\S.* released lab student-01 from .+; it is free again\.$/);
    const [, type, host, what] = await cells(claimed);
    expect([type, host]).toEqual(["lab claimed", "student-01"]);
    expect(what).toMatch(/ claimed lab student-01\.$/);
    // Newest first: the release is above the claim.
    const rows = list.locator("tr[data-type]");
    const ids: string[] = [];
    for (let i = 0; i < (await rows.count()); i++) ids.push((await rows.nth(i).getAttribute("id")) ?? "");
    const releasedId = (await released.getAttribute("id")) ?? "";
    expect(ids.indexOf(releasedId)).toBeGreaterThanOrEqual(0);
    expect(ids.indexOf(releasedId)).toBeLessThan(ids.indexOf((await claimed.getAttribute("id")) ?? ""));

    // An event recorded now appears at the top without a reload, once.
    const nav = countNavigations(page);
    await recordEvent({
      workshop: WS,
      type: "host.failed",
      hostId: "student-03",
      detail: { reason: "injected by the e2e test" },
    });
    const before = await polls(page);
    await list
      .locator("tr[data-type]")
      .first()
      .getByText("student-03 failed: injected by the e2e test")
      .waitFor({ timeout: 15_000 });
    await waitFor("two more polls", async () => (await polls(page)) >= before + 2, 15_000);
    expect(await list.getByText("injected by the e2e test").count()).toBe(1);
    expect(await list.locator(`#${releasedId}`).count()).toBe(1);
    expect(nav.count).toBe(0);
    await screenshot(page, SHOTS.activity);
  });

  it("lists the runs with their per-host results and build times", async () => {
    await page.getByRole("link", { name: "Runs", exact: true }).click();
    await page.getByRole("heading", { level: 1, name: `${WS}: runs` }).waitFor();
    const runs = page.locator("section.run");
    expect(await runs.count()).toBe(2);
    const [retry, up] = [runs.nth(0), runs.nth(1)];
    expect(await text(retry.getByRole("heading", { level: 2 }))).toMatch(/^retry succeeded/);
    expect(await text(up.getByRole("heading", { level: 2 }))).toMatch(/^up failed/);
    await up.getByText("1 of 3 labs are not ready").waitFor();
    const upRows = up.getByRole("row");
    expect(await upRows.count()).toBe(4);
    expect((await cells(up.getByRole("row", { name: /student-02/ }))).slice(0, 3)).toEqual([
      "student-02",
      "failed",
      "",
    ]);
    expect(await retry.getByRole("row").count()).toBe(2); // the header and student-02
    const [host, result, took] = await cells(retry.getByRole("row", { name: /student-02/ }));
    expect([host, result]).toEqual(["student-02", "ready"]);
    expect(took).toMatch(/^\d+ s$/);
    await screenshot(page, SHOTS.runs);
  });

  it("tears the workshop down after the name is typed, and shows it torn down live", async () => {
    await page.getByRole("link", { name: "Hosts", exact: true }).click();
    await page.getByRole("link", { name: "Tear down…" }).click();
    await page.getByRole("heading", { level: 1, name: `Tear down ${WS}?` }).waitFor();
    await page.getByLabel(`Type ${WS} to confirm`).fill("wrong");
    await submit(page, `Tear down ${WS}`, `/console/w/${WS}/teardown`, 400);
    await page.getByRole("alert").getByText(`type ${WS} exactly`).waitFor();
    await page.getByLabel(`Type ${WS} to confirm`).fill(WS);
    await screenshot(page, SHOTS.teardown);
    await submit(page, `Tear down ${WS}`, `/console/w/${WS}/teardown`);
    await page.locator("p.notice").getByText("Teardown started").waitFor();
    const nav = countNavigations(page);
    await page.locator("#live-summary").getByText("torn down").waitFor({ timeout: 30_000 });
    await page.getByText("No hosts yet").waitFor();
    expect(nav.count).toBe(0);
    await screenshot(page, SHOTS.tornDown);
  });
});

describe("the pages themselves", () => {
  it("logged no console or page errors and no failed subresources (CSP refusals, script, stylesheet)", () => {
    expect(pageErrors.length).toBeGreaterThanOrEqual(3);
    // A poll still in flight when a form or link leaves the page is aborted by the browser: expected, not an error.
    const leftPage =
      /^request failed: http:\/\/127\.0\.0\.1:\d+\/console\/(w\/[a-z0-9-]+\/)?(portal\/|runs\/)?live(\?after=[0-9A-Z]{26})? net::ERR_ABORTED$/;
    expect(pageErrors.flat().filter((e) => !leftPage.test(e))).toEqual([]);
  });

  it("never put the token, the API token, an email or the workshop code in a URL", () => {
    expect(urls.length).toBeGreaterThan(20);
    const token = runtime().token;
    const leaks = urls.filter(
      (u) =>
        u.includes(token) ||
        u.includes(encodeURIComponent(token)) ||
        u.includes(STUDENT.email) ||
        (apiToken && u.includes(apiToken)) ||
        (code && u.includes(code)),
    );
    expect(leaks).toEqual([]);
  });
});
