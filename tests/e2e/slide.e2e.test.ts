import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { type E2e, startE2e } from "../harness/e2e.ts";
import { decodeQr } from "../harness/qr.ts";
import { waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The slide page in headless Chromium against the local runtime: the instructor opens it from the Portal tab,
 * the QR code drawn on it decodes to the portal's address, a new code replaces the old one on the projected
 * page without a reload, and it fits a phone.
 */

const WS = "slidews";
const SHOTS = { desktop: "slide-01-desktop", phone: "slide-02-phone", closed: "slide-03-not-open" } as const;

let e: E2e | undefined;

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}
const api: E2e["api"] = (...args) => world().api(...args);
const url = () => `${world().rt.url}/`;

/** A signed-in console page in a browser of this size. */
async function consolePage(viewport: { width: number; height: number }): Promise<Page> {
  const p = await (await world().newContext({ viewport })).newPage();
  await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
  await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  return p;
}

/**
 * What a camera would read: the page's SVG drawn on a canvas in a page of its own (no CSP there), its pixels
 * decoded. Returns the text of the QR code, or undefined when none is found.
 */
async function readQr(p: Page): Promise<string | undefined> {
  const svg = await p.locator(".slide-qr svg").evaluate((el) => el.outerHTML);
  const blank = await world().browser.newPage();
  try {
    // Dark or light per pixel, as one string: an array of every channel would take seconds to pass over.
    const size = 320;
    const dark = await blank.evaluate<string>(
      `new Promise((resolve, reject) => {
        const img = new Image();
        img.onload = () => {
          const canvas = document.createElement("canvas");
          canvas.width = ${size}; canvas.height = ${size};
          const ctx = canvas.getContext("2d");
          ctx.drawImage(img, 0, 0, ${size}, ${size});
          const d = ctx.getImageData(0, 0, ${size}, ${size}).data;
          let out = "";
          for (let i = 0; i < d.length; i += 4) out += d[i] + d[i + 1] + d[i + 2] < 384 ? "1" : "0";
          resolve(out);
        };
        img.onerror = () => reject(new Error("the SVG did not load as an image"));
        img.src = "data:image/svg+xml;base64," + ${JSON.stringify(Buffer.from(svg).toString("base64"))};
      })`,
    );
    const pixels = new Uint8ClampedArray(size * size * 4);
    for (let i = 0; i < dark.length; i++) {
      const v = dark[i] === "1" ? 0 : 255;
      pixels.set([v, v, v, 255], i * 4);
    }
    return decodeQr(pixels, size, size);
  } finally {
    await blank.close();
  }
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  await api("POST", "", { yaml: workshopYaml({ name: WS, count: 1 }) });
});

afterAll(async () => {
  await e?.close();
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
    const opened = await api("POST", `/${WS}/portal/open`, {});
    const p = await consolePage({ width: 1280, height: 800 });
    await p.goto(`/console/w/${WS}/portal`);
    await p.getByRole("link", { name: "Slide for the room" }).click();
    await p.waitForURL((u) => u.pathname === `/console/w/${WS}/portal/slide`);
    expect((await p.locator(".slide-url").textContent())?.trim()).toBe(url());
    expect((await p.getByTestId("slide-code").textContent())?.trim()).toBe(opened.code);
    expect(await readQr(p)).toBe(url());
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
    const rotated = await api("POST", `/${WS}/portal/rotate-code`, {});
    expect(rotated.code).not.toBe(opened.code);
    await waitFor(
      "the new code on the slide",
      async () =>
        (await p.getByTestId("slide-code").textContent())?.trim() === rotated.code ? true : undefined,
      15_000,
    );
    expect(await readQr(p)).toBe(url());
  });

  it("fits a phone without scrolling sideways, and its QR code still reads", async () => {
    const p = await consolePage({ width: 390, height: 844 });
    await p.goto(`/console/w/${WS}/portal/slide`);
    const widths = await pageWidths(p);
    expect(widths.innerWidth).toBe(390);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    expect(await readQr(p)).toBe(url());
    await screenshot(p, SHOTS.phone);
  });

  it("logged no console or page errors and no failed subresources", () => {
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
