import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  clearScreenshots,
  collectPageErrors,
  launchChromium,
  pageWidths,
  screenshot,
} from "../harness/browser.ts";
import { movableClock, removeDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * Warnings before the end, in headless Chromium against the local runtime with its clock moved forward: the
 * lab page and the board show the time left, warn 30 and 10 minutes before the teardown (in the page and in
 * its title), the lab page looks again by itself when a warning is due, and an extend shows its new time.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
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

let rt: Runtime | undefined;
let browser: Browser | undefined;
let expiry = 0;
let labPath = "";
let phone: Page;
let desk: Page;
const pageErrors: string[][] = [];

function runtime(): Runtime {
  if (!rt) throw new Error("the runtime did not start");
  return rt;
}

async function api(method: string, path: string, body: unknown = {}) {
  const r = runtime();
  const res = await fetch(`${r.url}/api/workshops${path}`, {
    method,
    headers: { authorization: `Bearer ${r.token}`, "content-type": "application/json" },
    ...(method === "GET" ? {} : { body: JSON.stringify(body) }),
  });
  // biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field
  const json: any = await res.json();
  expect(res.status, JSON.stringify(json)).toBeLessThan(300);
  return json;
}

async function newPage(viewport: { width: number; height: number }): Promise<Page> {
  if (!browser) throw new Error("Chromium did not start");
  const context: BrowserContext = await browser.newContext({ baseURL: runtime().url, viewport });
  context.setDefaultTimeout(8_000);
  pageErrors.push(collectPageErrors(context));
  return context.newPage();
}

/** Moves the runtime's clock so the workshop has `ms` left. */
const leave = (ms: number) => clock.advance(expiry - ms - clock.now().getTime());
const notice = (p: Page) => p.locator("#time-left");
const refreshOf = (p: Page) => p.locator('meta[http-equiv="refresh"]').getAttribute("content");

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  const [started, launched] = await Promise.allSettled([testRuntime({ clock }), launchChromium()]);
  if (started.status === "fulfilled") rt = started.value;
  if (launched.status === "fulfilled") browser = launched.value;
  if (started.status === "rejected") throw started.reason;
  if (launched.status === "rejected") throw launched.reason;

  await api("POST", "", { yaml: workshopYaml({ name: WS, count: 1, ttlHours: 6 }) });
  await api("POST", `/${WS}/up`);
  await waitFor("the lab ready", async () => {
    const s = await api("GET", `/${WS}`);
    return s.hostList.length === 1 && s.hostList[0].state === "ready" ? s : undefined;
  });
  expiry = Date.parse((await api("GET", `/${WS}`)).expiry);
  const { code } = await api("POST", `/${WS}/portal/open`);

  phone = await newPage({ width: 390, height: 844 });
  desk = await newPage({ width: 1280, height: 800 });
  await phone.goto("/");
  await phone.getByLabel("Workshop code").fill(code);
  await phone.getByRole("button", { name: "Continue" }).click();
  await phone.waitForURL(/\/board$/);
  await phone.getByLabel("Your name", { exact: true }).fill(STUDENT.name);
  await phone.getByLabel("Your email", { exact: true }).fill(STUDENT.email);
  await phone.getByLabel("Choose a 6-digit PIN").fill(STUDENT.pin);
  await phone.getByRole("button", { name: "Claim my lab" }).click();
  await phone.waitForURL(/\/l\/[\w-]{32}$/);
  labPath = new URL(phone.url()).pathname;
});

afterAll(async () => {
  try {
    await browser?.close();
  } finally {
    await rt?.close();
    if (rt) removeDir(rt.dataDir);
  }
});

describe("the time a workshop has left, on the student pages", () => {
  it("shows the time left without a warning while more than 30 minutes remain", async () => {
    leave(2 * 60 * MIN + 5 * MIN);
    await phone.goto(labPath);
    expect(await notice(phone).textContent()).toMatch(
      /^Time left: 2 h 5 min \(the lab is removed at .* UTC\)\.$/,
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
    expect(await notice(phone).textContent()).toMatch(/^30 min left: the lab is removed at .* UTC\./);
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
      /^Only 9 min left: the lab is removed at .* UTC\. Save your work now\.$/,
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
    expect(pageErrors.flat()).toEqual([]);
  });
});
