import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { movableClock, workshopYaml } from "../harness/runtime.ts";

/**
 * Warnings before the end, in headless Chromium against the local runtime with its clock moved forward: the
 * lab page and the board show the time left, warn 30 and 10 minutes before the teardown (in the page and in
 * its title), the lab page looks again by itself when a warning is due, and an extend shows its new time.
 */

const WS = "ttlwarn";
const STUDENT = { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" };
const SHOTS = {
  soon: "time-left-01-30-minutes-phone",
  urgent: "time-left-02-10-minutes-desktop",
  board: "time-left-03-board-phone",
  extended: "time-left-04-extended-phone",
} as const;
const clock = movableClock();
const MIN = 60_000;

let e: E2e | undefined;
let expiry = 0;
let labPath = "";
let phone: Page;
let desk: Page;

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}
const api: E2e["api"] = (...args) => world().api(...args);
const newPage = async (viewport: { width: number; height: number }) =>
  (await world().newContext({ viewport })).newPage();

/** Moves the runtime's clock so the workshop has `ms` left. */
const leave = (ms: number) => clock.advance(expiry - ms - clock.now().getTime());
const notice = (p: Page) => p.locator("#time-left");
const refreshOf = (p: Page) => p.locator('meta[http-equiv="refresh"]').getAttribute("content");

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e({ clock });
  const code = await readyWorkshop(e, WS, workshopYaml({ name: WS, count: 1, ttlHours: 6 }), 1);
  expiry = Date.parse((await api("GET", `/${WS}`)).expiry);
  phone = await newPage({ width: 390, height: 844 });
  desk = await newPage({ width: 1280, height: 800 });
  labPath = await claimInBrowser(phone, code, STUDENT);
});

afterAll(async () => {
  await e?.close();
});

describe("the time a workshop has left, on the student pages", () => {
  it("shows the time left without a warning while more than 30 minutes remain", async () => {
    leave(2 * 60 * MIN + 5 * MIN);
    await phone.goto(labPath);
    expect(await notice(phone).textContent()).toMatch(
      /^Time left: 2 h 5 min \(the lab is removed at (\d{4}-\d\d-\d\d )?\d\d:\d\d\)\.$/,
    );
    expect(await phone.title()).toBe("Your lab: student-01");
    expect(await notice(phone).getAttribute("role")).toBeNull();
    // The page looks again just when the 30-minute warning is due.
    expect(Number(await refreshOf(phone))).toBe(95 * 60);
  });

  it("warns 30 minutes before the end in the page and its title, after refreshing itself", async () => {
    leave(30 * MIN + 2_000);
    await phone.goto(labPath);
    expect(Number(await refreshOf(phone))).toBe(2);
    // No reload from the test: the page's own refresh brings the warning.
    await phone.getByRole("status").filter({ hasText: "Save your work somewhere else now." }).waitFor({
      timeout: 15_000,
    });
    expect(await notice(phone).textContent()).toMatch(
      /^30 min left: the lab is removed at (\d{4}-\d\d-\d\d )?\d\d:\d\d\./,
    );
    expect(await phone.title()).toBe("30 min left · Your lab: student-01");
    expect(Number(await refreshOf(phone))).toBe(60); // the minutes count down
    const widths = await pageWidths(phone);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    await screenshot(phone, SHOTS.soon);
  });

  it("warns again, more strongly, 10 minutes before the end", async () => {
    leave(9 * MIN);
    await desk.goto(labPath);
    const alert = desk.getByRole("alert");
    expect(await alert.textContent()).toMatch(
      /^Only 9 min left: the lab is removed at (\d{4}-\d\d-\d\d )?\d\d:\d\d\. Save your work now\.$/,
    );
    expect(await desk.title()).toBe("9 min left · Your lab: student-01");
    await screenshot(desk, SHOTS.urgent);
  });

  it("shows on the board how long the workshop has left, with the same warning", async () => {
    await phone.goto("/board");
    expect(await phone.getByRole("alert").textContent()).toMatch(/^Only 9 min left: the labs are removed at/);
    expect(await phone.title()).toBe("9 min left · Workshop labs: the board");
    // The board never refreshes itself: it holds the claim form.
    expect(await phone.locator('meta[http-equiv="refresh"]').count()).toBe(0);
    await screenshot(phone, SHOTS.board);
  });

  it("shows the new time once the instructor extends the workshop, and the warning is gone", async () => {
    const before = clock.now().getTime();
    await api("POST", `/${WS}/extend`, { hours: 1 });
    const moved = Date.parse((await api("GET", `/${WS}`)).expiry);
    expect(Math.abs(moved - (expiry + 60 * MIN))).toBeLessThan(1000); // schedules keep whole seconds
    expiry = moved;
    expect(clock.now().getTime() - before).toBeLessThan(MIN); // the clock did not move meanwhile
    await phone.goto(labPath);
    expect(await notice(phone).textContent()).toMatch(/^Time left: 1 h 9 min /);
    expect(await phone.getByRole("alert").count()).toBe(0);
    expect(await phone.title()).toBe("Your lab: student-01");
    await phone.goto("/board");
    expect(await notice(phone).textContent()).toMatch(
      /^The workshop ends in 1 h 9 min \(the labs are removed at/,
    );
    await phone.goto(labPath);
    await screenshot(phone, SHOTS.extended);
  });

  it("says when the time is up", async () => {
    leave(-MIN);
    await phone.goto(labPath);
    expect(await phone.getByRole("alert").textContent()).toBe(
      "This workshop's time is up: the lab is being removed.",
    );
    expect(await phone.locator('meta[http-equiv="refresh"]').count()).toBe(0);
  });

  it("logged no console or page errors and no failed subresources", () => {
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
