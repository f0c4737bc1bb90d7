import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { workshopYaml } from "../harness/runtime.ts";

/**
 * The lab page in headless Chromium: the workshop's guide framed beside the lab's details on a wide screen (below
 * them on a phone, with a link to open it), Copy buttons that put a credential on the clipboard, and the same
 * page, values selectable and no buttons, when scripts are off. The guide is served on 127.0.0.1 by the test.
 */

const WS = "labpage";
const STUDENT = { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" };
const SHOTS = {
  desk: "lab-page-01-guide-beside",
  phone: "lab-page-02-phone",
  noscript: "lab-page-03-no-script",
};

let e: E2e | undefined;
let guide: Server | undefined;
let guideUrl = "";
let labPath = "";

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}
const newContext = (options: Parameters<E2e["newContext"]>[0]) => world().newContext(options);

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

  e = await startE2e();
  const yaml = workshopYaml({ name: WS, count: 1, extraLab: `portal:\n  guide_url: ${guideUrl}\n` });
  const code = await readyWorkshop(e, WS, yaml, 1);
  const context = await newContext({ viewport: { width: 390, height: 844 } });
  labPath = await claimInBrowser(await context.newPage(), code, STUDENT);
  await context.close();
});

afterAll(async () => {
  try {
    await e?.close();
  } finally {
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
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: world().rt.url });
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
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
