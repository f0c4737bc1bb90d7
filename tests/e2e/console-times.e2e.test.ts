import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatClock, formatWhen } from "../../shared/runtime/time-format.ts";
import { clearScreenshots, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { workshopYaml } from "../harness/runtime.ts";

/**
 * Times on the console's and the portal's pages in the viewer's own zone, in the CLI's format: a browser in
 * Asia/Kolkata (UTC+5:30, so no minute matches UTC's) reads the activity, a token's expiry and a student's
 * time left in its local time, kept current as time passes and after a live update; a browser without
 * JavaScript reads the same times in UTC, said so.
 */

const WS = "timesws";
const ZONE = "Asia/Kolkata";
const SHOTS = {
  console: "times-01-activity-kolkata",
  lab: "times-02-lab-kolkata-phone",
  nojs: "times-03-no-js",
};

let e: E2e | undefined;
let labPath = "";
const world = (): E2e => {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
};

async function consolePage(options: Parameters<E2e["newContext"]>[0], path: string): Promise<Page> {
  const p = await (await world().newContext(options)).newPage();
  await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
  await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  await p.goto(path);
  return p;
}

/** Each `<time>` in `scope` as [its datetime, its text]. */
async function times(p: Page, scope: string): Promise<[string, string][]> {
  const els = p.locator(`${scope} time`);
  const out: [string, string][] = [];
  for (let i = 0; i < (await els.count()); i++)
    out.push([(await els.nth(i).getAttribute("datetime")) ?? "", (await els.nth(i).textContent()) ?? ""]);
  return out;
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  const code = await readyWorkshop(e, WS, workshopYaml({ name: WS, count: 2 }), 2);
  const student = await (
    await e.newContext({ timezoneId: ZONE, viewport: { width: 390, height: 844 } })
  ).newPage();
  labPath = await claimInBrowser(student, code, {
    name: "Ada Lovelace",
    email: "ada@example.test",
    pin: "314159",
  });
}, 90_000);

afterAll(async () => {
  await e?.close();
});

describe("times in the viewer's zone", () => {
  it("shows the console's activity in local time, with seconds, and a new event's too", async () => {
    const p = await consolePage({ timezoneId: ZONE }, `/console/w/${WS}`);
    await p.getByRole("heading", { level: 1, name: WS }).waitFor();
    const shown = await times(p, "#live-activity");
    expect(shown.length).toBeGreaterThan(2);
    for (const [at, text] of shown) {
      expect(text).toBe(formatClock(at, Date.now(), { timeZone: ZONE, seconds: true }));
      expect(text).not.toBe(formatClock(at, Date.now(), { timeZone: "UTC", seconds: true }));
    }
    // The tooltip is the full date in the browser's locale, with its zone.
    expect(await p.locator("#live-activity time").first().getAttribute("title")).toMatch(
      /India Standard Time|GMT\+5:30/,
    );
    // An event that arrives live reads in local time as well.
    await world().api("POST", `/${WS}/extend`, { hours: 1 });
    const extended = p.locator('#live-activity tr[data-type="workshop.extended"] td.num time');
    await extended.waitFor({ timeout: 15_000 });
    const at = (await extended.getAttribute("datetime")) ?? "";
    expect(await extended.textContent()).toBe(formatClock(at, Date.now(), { timeZone: ZONE, seconds: true }));
    // Its sentence names the new teardown time, in local time too.
    const until = p.locator('#live-activity tr[data-type="workshop.extended"] td.what time');
    const expiry = (await until.getAttribute("datetime")) ?? "";
    expect(await until.textContent()).toBe(formatWhen(expiry, Date.now(), { timeZone: ZONE }));
    await screenshot(p, SHOTS.console);
  });

  it("shows a token's expiry as a local time and how far off it is, kept current as time passes", async () => {
    const context = await world().newContext({ timezoneId: ZONE });
    const p = await context.newPage();
    await p.clock.install();
    await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
    await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
    await p.goto("/console/tokens");
    await p.getByLabel("Name", { exact: true }).fill("times laptop");
    await p.getByLabel("Expires after (days)").fill("7");
    await p.getByRole("button", { name: "Create token" }).click();
    await p.getByRole("heading", { level: 1, name: "Token created: times laptop" }).waitFor();
    await p.getByRole("link", { name: "Back to API tokens" }).click();
    const expiry = p.getByRole("row", { name: /times laptop/ }).locator("time[data-time=when]");
    const at = (await expiry.getAttribute("datetime")) ?? "";
    const pageNow = async () => Number(await p.evaluate("Date.now()"));
    expect(await expiry.textContent()).toBe(formatWhen(at, await pageNow(), { timeZone: ZONE }));
    expect(await expiry.textContent()).toMatch(/ \(in 6 d 23 h\)$/);
    // Two hours later, without a reload, the page says so.
    await p.clock.fastForward("02:00:00");
    await p.clock.runFor(6_000);
    expect(await expiry.textContent()).toMatch(/ \(in 6 d 2[01] h\)$/);
    expect(await expiry.textContent()).toBe(formatWhen(at, await pageNow(), { timeZone: ZONE }));
  });

  it("shows the student's time left with the local time the lab is removed", async () => {
    const p = await (
      await world().newContext({ timezoneId: ZONE, viewport: { width: 390, height: 844 } })
    ).newPage();
    await p.goto(labPath);
    const notice = p.locator("#time-left");
    const at = (await notice.locator("time").getAttribute("datetime")) ?? "";
    expect(await notice.textContent()).toContain(
      `the lab is removed at ${formatClock(at, Date.now(), { timeZone: ZONE })})`,
    );
    await screenshot(p, SHOTS.lab);
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("reads in UTC, said so, in a browser without JavaScript", async () => {
    const p = await (await world().newContext({ javaScriptEnabled: false, timezoneId: ZONE })).newPage();
    await p.goto(labPath);
    expect(await p.locator("#time-left").textContent()).toMatch(
      /the lab is removed at \d{4}-\d\d-\d\d \d\d:\d\d UTC\)\.$/,
    );
    // The console's sign-in link needs its script; the form does not.
    await p.goto("/console/login");
    await p.getByLabel(/token/i).first().fill(world().rt.token);
    await p.getByRole("button", { name: /sign in/i }).click();
    await p.goto(`/console/w/${WS}`);
    await p.getByRole("heading", { level: 1, name: WS }).waitFor();
    for (const [, text] of await times(p, "#live-activity td.num"))
      expect(text).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
    const until = await times(p, "#live-activity td.what");
    expect(until.length).toBeGreaterThan(0);
    for (const [, text] of until) expect(text).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d UTC$/);
    await screenshot(p, SHOTS.nojs);
  });
});
