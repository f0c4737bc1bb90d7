import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  clearScreenshots,
  collectPageErrors,
  launchChromium,
  pageWidths,
  screenshot,
} from "../harness/browser.ts";
import { removeDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The lab page in headless Chromium: the workshop's guide framed beside the lab's details on a wide screen (below
 * them on a phone, with a link to open it), Copy buttons that put a credential on the clipboard, and the same
 * page, values selectable and no buttons, when scripts are off. The guide is served on 127.0.0.1 by the test.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
const WS = "labpage";
const STUDENT = { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" };
const SHOTS = {
  desk: "lab-page-01-guide-beside",
  phone: "lab-page-02-phone",
  noscript: "lab-page-03-no-script",
};

let rt: Runtime | undefined;
let browser: Browser | undefined;
let guide: Server | undefined;
let guideUrl = "";
let labPath = "";
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

async function newContext(options: Parameters<Browser["newContext"]>[0]): Promise<BrowserContext> {
  if (!browser) throw new Error("Chromium did not start");
  const context = await browser.newContext({ baseURL: runtime().url, ...options });
  context.setDefaultTimeout(8_000);
  pageErrors.push(collectPageErrors(context));
  return context;
}

const box = async (p: Page, selector: string) => {
  const b = await p.locator(selector).boundingBox();
  if (!b) throw new Error(`${selector} is not on the page`);
  return b;
};

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  guide = createServer((_req, res) => {
    res.writeHead(200, { "content-type": "text/html; charset=utf-8" });
    res.end("<!doctype html><title>Guide</title><h1>Step 1: open the lab</h1>");
  });
  await new Promise<void>((resolve) => guide?.listen(0, "127.0.0.1", resolve));
  guideUrl = `http://127.0.0.1:${(guide.address() as AddressInfo).port}/guide`;

  const [started, launched] = await Promise.allSettled([testRuntime(), launchChromium()]);
  if (started.status === "fulfilled") rt = started.value;
  if (launched.status === "fulfilled") browser = launched.value;
  if (started.status === "rejected") throw started.reason;
  if (launched.status === "rejected") throw launched.reason;
  const yaml = workshopYaml({ name: WS, count: 1, extraLab: `portal:\n  guide_url: ${guideUrl}\n` });
  await api("POST", "", { yaml });
  await api("POST", `/${WS}/up`);
  await waitFor("the lab ready", async () => {
    const s = await api("GET", `/${WS}`);
    return s.hostList.length === 1 && s.hostList[0].state === "ready" ? true : undefined;
  });
  const { code } = await api("POST", `/${WS}/portal/open`);

  const context = await newContext({ viewport: { width: 390, height: 844 } });
  const p = await context.newPage();
  await p.goto("/");
  await p.getByLabel("Workshop code").fill(code);
  await p.getByRole("button", { name: "Continue" }).click();
  await p.waitForURL(/\/board$/);
  await p.getByLabel("Your name", { exact: true }).fill(STUDENT.name);
  await p.getByLabel("Your email", { exact: true }).fill(STUDENT.email);
  await p.getByLabel("Choose a 6-digit PIN").fill(STUDENT.pin);
  await p.getByRole("button", { name: "Claim my lab" }).click();
  await p.waitForURL(/\/l\/[\w-]{32}$/);
  labPath = new URL(p.url()).pathname;
  await context.close();
});

afterAll(async () => {
  try {
    await browser?.close();
  } finally {
    await rt?.close();
    if (rt) removeDir(rt.dataDir);
    guide?.close();
  }
});

describe("the lab page", () => {
  it("frames the guide beside the lab's details on a wide screen, and allows framing only the guide", async () => {
    const context = await newContext({ viewport: { width: 1440, height: 900 } });
    const p = await context.newPage();
    const res = await p.goto(labPath);
    const csp = res?.headers()["content-security-policy"] ?? "";
    expect(csp).toContain(`frame-src ${new URL(guideUrl).origin}`);
    expect(csp).toContain("frame-ancestors 'none'");
    expect(csp).toContain("script-src 'self'");
    const frame = p.frameLocator("iframe[title='Workshop guide']");
    await frame.getByRole("heading", { name: "Step 1: open the lab" }).waitFor();
    const details = await box(p, ".lab-details");
    const aside = await box(p, "aside.guide");
    expect(aside.x).toBeGreaterThanOrEqual(details.x + details.width); // beside, to the right
    expect(Math.abs(aside.y - details.y)).toBeLessThan(40);
    expect(await p.getByRole("link", { name: "Open the guide in a new tab" }).getAttribute("href")).toBe(
      guideUrl,
    );
    // The board, like every page but this one, may frame nothing.
    const board = await p.goto("/board");
    expect(board?.headers()["content-security-policy"]).not.toContain("frame-src");
    await p.goto(labPath);
    await frame.getByRole("heading", { name: "Step 1: open the lab" }).waitFor();
    await screenshot(p, SHOTS.desk);
    await context.close();
  });

  it("copies a credential to the clipboard with its Copy button", async () => {
    const context = await newContext({ viewport: { width: 1440, height: 900 } });
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: runtime().url });
    const p = await context.newPage();
    await p.goto(labPath);
    const button = p.getByRole("button", { name: "Copy password" });
    await button.click();
    await p.getByRole("button", { name: "Copy password" }).filter({ hasText: "Copied" }).waitFor();
    expect(await p.evaluate<string>("navigator.clipboard.readText()")).toBe("s3cret-student-01");
    expect(await p.locator("#copy-status").textContent()).toBe("Copied password.");
    await context.close();
  });

  it("puts the guide below the details on a phone, without scrolling sideways", async () => {
    const context = await newContext({ viewport: { width: 390, height: 844 } });
    const p = await context.newPage();
    await p.goto(labPath);
    await p.frameLocator("iframe[title='Workshop guide']").getByRole("heading").waitFor();
    const details = await box(p, ".lab-details");
    const aside = await box(p, "aside.guide");
    expect(aside.y).toBeGreaterThanOrEqual(details.y + details.height);
    const widths = await pageWidths(p);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    await screenshot(p, SHOTS.phone);
    await context.close();
  });

  it("without scripts shows the same details, selectable, and no Copy buttons", async () => {
    const context = await newContext({ viewport: { width: 390, height: 844 }, javaScriptEnabled: false });
    const p = await context.newPage();
    await p.goto(labPath);
    expect((await p.locator("code[data-copy='password']").textContent())?.trim()).toBe("s3cret-student-01");
    expect(await p.getByRole("button", { name: /^Copy/ }).count()).toBe(0);
    await screenshot(p, SHOTS.noscript);
    await context.close();
  });

  it("logged no console or page errors and no failed subresources", () => {
    expect(pageErrors.flat()).toEqual([]);
  });
});
