import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { type E2e, startE2e } from "../harness/e2e.ts";
import { readQr } from "../harness/qr.ts";
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
    expect(await readQr(world().browser, p)).toBe(url());
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
    expect(await readQr(world().browser, p)).toBe(url());
  });

  it("fits a phone without scrolling sideways, and its QR code still reads", async () => {
    const p = await consolePage({ width: 390, height: 844 });
    await p.goto(`/console/w/${WS}/portal/slide`);
    const widths = await pageWidths(p);
    expect(widths.innerWidth).toBe(390);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    expect(await readQr(world().browser, p)).toBe(url());
    await screenshot(p, SHOTS.phone);
  });

  it("logged no console or page errors and no failed subresources", () => {
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
