import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  clearScreenshots,
  collectPageErrors,
  launchChromium,
  pageWidths,
  screenshot,
} from "../harness/browser.ts";
import { decodeQr } from "../harness/qr.ts";
import { removeDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The slide page in headless Chromium against the local runtime: the instructor opens it from the Portal tab,
 * the QR code drawn on it decodes to the portal's address, a new code replaces the old one on the projected
 * page without a reload, and it fits a phone.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
const WS = "slidews";
const SHOTS = { desktop: "slide-01-desktop", phone: "slide-02-phone", closed: "slide-03-not-open" } as const;

let rt: Runtime | undefined;
let browser: Browser | undefined;
const contexts: BrowserContext[] = [];
const pageErrors: string[][] = [];

function runtime(): Runtime {
  if (!rt) throw new Error("the runtime did not start");
  return rt;
}

async function api(method: string, path: string, body?: unknown): Promise<{ code?: string }> {
  const res = await fetch(`${runtime().url}/api${path}`, {
    method,
    headers: { authorization: `Bearer ${runtime().token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const json = (await res.json()) as { code?: string };
  expect(res.status, JSON.stringify(json)).toBeLessThan(300);
  return json;
}

/** A signed-in console page in a browser of this size. */
async function consolePage(viewport: { width: number; height: number }): Promise<Page> {
  if (!browser) throw new Error("Chromium did not start");
  const context = await browser.newContext({ baseURL: runtime().url, viewport });
  context.setDefaultTimeout(8_000);
  contexts.push(context);
  pageErrors.push(collectPageErrors(context));
  const p = await context.newPage();
  await p.goto(`/console#token=${encodeURIComponent(runtime().token)}`);
  await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  return p;
}

/**
 * What a camera would read: the page's SVG drawn on a canvas in a page of its own (no CSP there), its pixels
 * decoded. Returns the text of the QR code, or undefined when none is found.
 */
async function readQr(p: Page): Promise<string | undefined> {
  const svg = await p.locator(".slide-qr svg").evaluate((e) => e.outerHTML);
  if (!browser) throw new Error("Chromium did not start");
  const blank = await browser.newPage();
  try {
    const size = 600;
    const pixels = await blank.evaluate(
      `new Promise((resolve, reject) => {
        const img = new Image();
        img.onload = () => {
          const canvas = document.createElement("canvas");
          canvas.width = ${size}; canvas.height = ${size};
          const ctx = canvas.getContext("2d");
          ctx.drawImage(img, 0, 0, ${size}, ${size});
          resolve(Array.from(ctx.getImageData(0, 0, ${size}, ${size}).data));
        };
        img.onerror = () => reject(new Error("the SVG did not load as an image"));
        img.src = "data:image/svg+xml;base64," + ${JSON.stringify(Buffer.from(svg).toString("base64"))};
      })`,
    );
    return decodeQr(pixels as number[], size, size);
  } finally {
    await blank.close();
  }
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  const [started, launched] = await Promise.allSettled([testRuntime(), launchChromium()]);
  if (started.status === "fulfilled") rt = started.value;
  if (launched.status === "fulfilled") browser = launched.value;
  if (started.status === "rejected") throw started.reason;
  if (launched.status === "rejected") throw launched.reason;
  await api("POST", "/workshops", { yaml: workshopYaml({ name: WS, count: 1 }) });
});

afterAll(async () => {
  try {
    await browser?.close();
  } finally {
    await rt?.close();
    if (rt) removeDir(rt.dataDir);
  }
});

describe("the slide for the room", () => {
  it("says the portal is not open yet until it is", async () => {
    const p = await consolePage({ width: 1280, height: 800 });
    await p.goto(`/console/w/${WS}/portal/slide`);
    await p.getByText("The portal has not been opened yet").waitFor();
    expect(await p.locator(".slide-qr").count()).toBe(0);
    await screenshot(p, SHOTS.closed);
  });

  it("opens from the Portal tab with the address, the code and a QR code that decodes to the address", async () => {
    const opened = await api("POST", `/workshops/${WS}/portal/open`, {});
    const p = await consolePage({ width: 1280, height: 800 });
    await p.goto(`/console/w/${WS}/portal`);
    await p.getByRole("link", { name: "Slide for the room" }).click();
    await p.waitForURL((u) => u.pathname === `/console/w/${WS}/portal/slide`);
    const url = `${runtime().url}/`;
    expect((await p.locator(".slide-url").textContent())?.trim()).toBe(url);
    expect((await p.getByTestId("slide-code").textContent())?.trim()).toBe(opened.code);
    expect(await readQr(p)).toBe(url);
    // Large enough to project: the QR code takes a good part of a 1280 px screen, the code is big type.
    // Read in one step: the page's live update may replace the element between two steps.
    const qrWidth = await p.evaluate<number>(
      `document.querySelector(".slide-qr svg").getBoundingClientRect().width`,
    );
    expect(qrWidth).toBeGreaterThanOrEqual(300);
    const codeSize = await p.evaluate<string>(
      `getComputedStyle(document.querySelector('[data-testid="slide-code"]')).fontSize`,
    );
    expect(Number.parseFloat(codeSize)).toBeGreaterThanOrEqual(48);
    await screenshot(p, SHOTS.desktop);

    // A new code reaches the projected page by itself.
    const rotated = await api("POST", `/workshops/${WS}/portal/rotate-code`, {});
    expect(rotated.code).not.toBe(opened.code);
    await waitFor(
      "the new code on the slide",
      async () =>
        (await p.getByTestId("slide-code").textContent())?.trim() === rotated.code ? true : undefined,
      15_000,
    );
    expect(await readQr(p)).toBe(url);
  });

  it("fits a phone without scrolling sideways, and its QR code still reads", async () => {
    const p = await consolePage({ width: 390, height: 844 });
    await p.goto(`/console/w/${WS}/portal/slide`);
    const widths = await pageWidths(p);
    expect(widths.innerWidth).toBe(390);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    expect(await readQr(p)).toBe(`${runtime().url}/`);
    await screenshot(p, SHOTS.phone);
  });

  it("logged no console or page errors and no failed subresources", () => {
    expect(pageErrors.flat()).toEqual([]);
  });
});
