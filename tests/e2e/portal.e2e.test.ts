import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import {
  clearScreenshots,
  collectPageErrors,
  launchChromium,
  pageWidths,
  screenshot,
} from "../harness/browser.ts";
import { movableClock, removeDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The student claim portal in headless Chromium against the local runtime over HTTP on 127.0.0.1: code,
 * board, claim, credentials, reload, continue, forget, recover on another device, old link refused, phone.
 * Pages are found by their labels and roles, so this also checks that they are labelled.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
const WS = "e2e";
const STUDENT = { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" };
const LINK = /\/l\/([\w-]{32})$/;
const SHOTS = {
  front: "01-front-code-only",
  board: "02-board-three-free",
  lab: "03-lab-page",
  recover: "04-recover",
  refused: "05-link-refused",
  phone: "06-phone-board",
} as const;
const clock = movableClock();

let rt: Runtime | undefined;
let browser: Browser | undefined;
let code = "";
let desk: BrowserContext;
let page: Page;
let firstLink = "";
/** Console errors, page errors and failed subresources, one list per browser context. */
const pageErrors: string[][] = [];

function runtime(): Runtime {
  if (!rt) throw new Error("the runtime did not start");
  return rt;
}

function api(method: string, path: string, body: unknown = {}): Promise<Response> {
  const r = runtime();
  return fetch(`${r.url}/api/workshops${path}`, {
    method,
    headers: { authorization: `Bearer ${r.token}`, "content-type": "application/json" },
    ...(method === "GET" ? {} : { body: JSON.stringify(body) }),
  });
}

async function newContext(options: Parameters<Browser["newContext"]>[0] = {}): Promise<BrowserContext> {
  if (!browser) throw new Error("Chromium did not start");
  const context = await browser.newContext({ baseURL: runtime().url, ...options });
  context.setDefaultTimeout(8_000);
  pageErrors.push(collectPageErrors(context));
  return context;
}

/**
 * Clicks a form's button and checks the status of the POST it sends (before any redirect is followed),
 * naming the Origin the browser sent and the page's heading when the portal refuses it.
 */
async function submit(p: Page, button: string, path: string, expected = 303): Promise<void> {
  const answered = p.waitForResponse(
    (r) => r.request().method() === "POST" && new URL(r.url()).pathname === path,
  );
  await p.getByRole("button", { name: button, exact: true }).click();
  const res = await answered;
  if (res.status() === expected) return;
  const origin = await res.request().headerValue("origin");
  const heading = /<h1>([^<]*)<\/h1>/.exec(await res.text().catch(() => ""))?.[1] ?? "";
  expect.fail(`POST ${path} (Origin: ${origin}) answered ${res.status()} "${heading}", not ${expected}`);
}

/** The front page, the code as typed, then the board. */
async function enterCode(p: Page, typed: string): Promise<void> {
  await p.goto("/");
  await p.getByLabel("Workshop code").fill(typed);
  await submit(p, "Continue", "/code");
  await p.waitForURL(/\/board$/);
}

const continueLink = (p: Page) => p.getByRole("link", { name: /^Continue to your lab/ });
const boardRows = async (p: Page) =>
  (await p.getByRole("list", { name: "Labs" }).getByRole("listitem").allInnerTexts()).map((t) =>
    t.replace(/\s+/g, " ").trim(),
  );

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  const [started, launched] = await Promise.allSettled([testRuntime({ clock }), launchChromium()]);
  if (started.status === "fulfilled") rt = started.value;
  if (launched.status === "fulfilled") browser = launched.value;
  if (started.status === "rejected") throw started.reason;
  if (launched.status === "rejected") throw launched.reason;

  const created = await api("POST", "", { yaml: workshopYaml({ name: WS, count: 3, ttlHours: 72 }) });
  expect(created.status, await created.clone().text()).toBe(201);
  const up = await api("POST", `/${WS}/up`);
  expect(up.status, await up.clone().text()).toBe(202);
  await runtime().executor.idle();
  await waitFor("three ready labs", async () => {
    const status = (await (await api("GET", `/${WS}`)).json()) as { hostList: { state: string }[] };
    return status.hostList.length === 3 && status.hostList.every((h) => h.state === "ready");
  });
  const opened = await api("POST", `/${WS}/portal/open`);
  expect(opened.status).toBe(200);
  code = ((await opened.json()) as { code: string }).code;
  expect(code).toMatch(/^LAB-[A-Z]{6}-\d{8}$/);
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

describe("a student's way through the portal in Chromium", () => {
  // One story: after a failed step the later ones are skipped instead of timing out one by one.
  let failed = "";
  beforeEach((ctx) => {
    if (failed) ctx.skip(`an earlier step failed: ${failed}`);
    ctx.onTestFailed(() => {
      failed ||= ctx.task.name;
    });
  });

  it("shows only the workshop-code field on the front page", async () => {
    const res = await page.goto("/");
    expect(res?.status()).toBe(200);
    expect(await page.title()).toBe("Workshop labs");
    await page.getByRole("heading", { level: 1, name: "Get your workshop lab" }).waitFor();
    await page.getByLabel("Workshop code").waitFor();
    expect(await page.getByRole("textbox").count()).toBe(1);
    expect(await page.getByRole("button").allInnerTexts()).toEqual(["Continue"]);
    expect(await page.locator("form").count()).toBe(1);
    expect(await page.getByRole("list", { name: "Labs" }).count()).toBe(0);
    expect(await continueLink(page).count()).toBe(0);
    expect(await page.getByText(/student-0\d/).count()).toBe(0);
    expect(await page.getByRole("link", { name: /^Privacy/ }).getAttribute("href")).toBe("/privacy");
    await screenshot(page, SHOTS.front);
  });

  it("takes the code in another spelling and shows a board of three free labs", async () => {
    const typed = ` ${code.toLowerCase().replace(/-/g, " ")} `;
    expect(typed).not.toContain(code);
    await enterCode(page, typed);
    await page.getByRole("heading", { level: 1, name: "Workshop labs" }).waitFor();
    expect(await boardRows(page)).toEqual(["student-01 free", "student-02 free", "student-03 free"]);
    await page.getByText("3 of 3 labs free.").waitFor();
    await page.getByRole("heading", { name: "Claim a lab" }).waitFor();
    for (const label of ["Your name", "Your email", "Choose a 6-digit PIN"])
      await page.getByLabel(label, { exact: true }).waitFor();
    expect(await page.getByLabel("Choose a 6-digit PIN").getAttribute("inputmode")).toBe("numeric");
    expect(await page.getByRole("link", { name: "Get it back" }).getAttribute("href")).toBe("/recover");
    await screenshot(page, SHOTS.board);
  });

  it("claims a lab and shows its URL and password, also after a reload", async () => {
    await page.getByLabel("Your name", { exact: true }).fill(STUDENT.name);
    await page.getByLabel("Your email", { exact: true }).fill(STUDENT.email);
    await page.getByLabel("Choose a 6-digit PIN").fill(STUDENT.pin);
    await submit(page, "Claim my lab", "/claim");
    await page.waitForURL(LINK);
    firstLink = new URL(page.url()).pathname;

    const showsTheLab = async (p: Page) => {
      await p.getByRole("heading", { level: 1, name: "Your lab: student-01" }).waitFor();
      const url = p.getByRole("link", { name: "https://student-01.example.test/" });
      expect(await url.getAttribute("href")).toBe("https://student-01.example.test/");
      await p.getByText("s3cret-student-01", { exact: true }).waitFor();
      await p.getByText(/^Time left: \d+ days? \d+ h/).waitFor();
    };
    await showsTheLab(page);
    await screenshot(page, SHOTS.lab);

    const again = await page.reload();
    expect(again?.status()).toBe(200);
    expect(again?.headers()["cache-control"]).toBe("no-store");
    expect(new URL(page.url()).pathname).toBe(firstLink);
    await showsTheLab(page);

    // The board now shows the claim by first name only.
    await page.goto("/board");
    expect((await boardRows(page))[0]).toBe("student-01 claimed by Ada");
    expect(await page.getByText("Lovelace").count()).toBe(0);
    expect(await page.getByText("s3cret").count()).toBe(0);
  });

  it("takes the same browser back to the lab from /, and forgets the device on request", async () => {
    // With the code still valid, / goes to the board, which offers the remembered lab.
    await page.goto("/");
    await page.waitForURL(/\/board$/);
    expect(await continueLink(page).getAttribute("href")).toBe(firstLink);
    await continueLink(page).click();
    await page.waitForURL((u) => u.pathname === firstLink);
    await page.getByRole("heading", { level: 1, name: "Your lab: student-01" }).waitFor();

    // A day later the code's access cookie has expired: / offers the lab even before the code.
    clock.advance(25 * 3600 * 1000);
    await page.goto("/");
    expect(new URL(page.url()).pathname).toBe("/");
    await page.getByLabel("Workshop code").waitFor();
    await page.getByRole("link", { name: "Continue to your lab (student-01)", exact: true }).waitFor();
    await continueLink(page).click();
    await page.waitForURL((u) => u.pathname === firstLink);
    await page.getByText("s3cret-student-01", { exact: true }).waitFor();

    await page.goto("/");
    await submit(page, "Forget this device", "/forget");
    await continueLink(page).waitFor({ state: "detached" });
    expect(new URL(page.url()).pathname).toBe("/");
    await page.getByLabel("Workshop code").waitFor();
    expect(await page.getByRole("textbox").count()).toBe(1);
    expect(await page.getByRole("button").allInnerTexts()).toEqual(["Continue"]);
    expect((await desk.cookies()).map((c) => c.name)).not.toContain("lf_lab");
    // And it stays forgotten.
    await page.reload();
    await page.getByLabel("Workshop code").waitFor();
    expect(await continueLink(page).count()).toBe(0);
  });

  it("gets the lab back on another device with email and PIN; the first link is then refused", async () => {
    const other = await newContext({ viewport: { width: 1280, height: 800 } });
    const p = await other.newPage();
    await enterCode(p, code);
    expect(await continueLink(p).count()).toBe(0);
    await p.getByRole("link", { name: "Get it back" }).click();
    await p.waitForURL(/\/recover$/);
    await p.getByRole("heading", { level: 1, name: "Get your lab back" }).waitFor();
    await p.getByLabel("Your email").fill(STUDENT.email);
    await p.getByLabel("Your 6-digit PIN").fill(STUDENT.pin);
    await screenshot(p, SHOTS.recover);
    await submit(p, "Get my lab back", "/recover");
    await p.waitForURL(LINK);
    const secondLink = new URL(p.url()).pathname;
    expect(secondLink).not.toBe(firstLink);
    await p.getByRole("heading", { level: 1, name: "Your lab: student-01" }).waitFor();
    await p.getByText("s3cret-student-01", { exact: true }).waitFor();

    const refused = await p.goto(firstLink);
    expect(refused?.status()).toBe(404);
    await p.getByRole("heading", { level: 1, name: "This link no longer works" }).waitFor();
    expect(await p.getByText("s3cret").count()).toBe(0);
    expect(await p.getByRole("link", { name: "Get it back" }).getAttribute("href")).toBe("/recover");
    await screenshot(p, SHOTS.refused);

    // Refused in the first browser too, in a fresh page; the new link works there.
    const fresh = await desk.newPage();
    expect((await fresh.goto(firstLink))?.status()).toBe(404);
    await fresh.getByRole("heading", { level: 1, name: "This link no longer works" }).waitFor();
    expect((await fresh.goto(secondLink))?.status()).toBe(200);
    await fresh.getByText("s3cret-student-01", { exact: true }).waitFor();
    await other.close();
  });
});

describe("the portal on a phone", () => {
  it("fits the board and the claim form in 390 px without horizontal scrolling", async () => {
    const phone = await newContext({
      viewport: { width: 390, height: 844 },
      deviceScaleFactor: 2,
      isMobile: true,
      hasTouch: true,
    });
    const p = await phone.newPage();
    await enterCode(p, code.replace(/-/g, ""));
    const widths = await pageWidths(p);
    expect(widths.innerWidth).toBe(390);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    for (const label of ["Your name", "Your email", "Choose a 6-digit PIN"]) {
      const field = p.getByLabel(label, { exact: true });
      await field.waitFor();
      const box = await field.boundingBox();
      expect(box, label).not.toBeNull();
      expect(box?.x, label).toBeGreaterThanOrEqual(0);
      expect((box?.x ?? 0) + (box?.width ?? Number.POSITIVE_INFINITY), label).toBeLessThanOrEqual(390);
      expect(box?.width, label).toBeGreaterThan(200);
    }
    const claim = await p.getByRole("button", { name: "Claim my lab" }).boundingBox();
    expect(claim).not.toBeNull();
    expect((claim?.x ?? -1) >= 0 && (claim?.x ?? 0) + (claim?.width ?? 999) <= 390).toBe(true);
    await screenshot(p, SHOTS.phone);
    await phone.close();
  });
});

describe("the pages themselves", () => {
  it("logged no console or page errors and no failed subresources (CSP refusals, stylesheet)", () => {
    expect(pageErrors.length).toBeGreaterThanOrEqual(2);
    expect(pageErrors.flat()).toEqual([]);
  });
});
