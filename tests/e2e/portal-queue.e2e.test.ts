import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WAITING_REFRESH_SECONDS } from "../../shared/portal/constants.ts";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The waiting room in headless Chromium: a room bigger than the fleet, a late student joins the line and sees
 * their place, the instructor releases a lab, and the waiting page (by its own meta refresh, no script) shows
 * the lab at the same address. A second late student moves up to number 1.
 */

const WS = "queue";
const SHOTS = {
  boardPhone: "queue-01-board-full-phone",
  boardDesk: "queue-02-board-full-desktop",
  waitingPhone: "queue-03-waiting-phone",
  waitingDesk: "queue-04-waiting-desktop",
  servedDesk: "queue-05-served-same-link-desktop",
  servedPhone: "queue-06-next-in-line-phone",
};
const PHONE = { viewport: { width: 390, height: 844 } };
const DESK = { viewport: { width: 1280, height: 800 } };

let e: E2e | undefined;
let code = "";

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}

/** A late student: the code, then the claim form, which offers the line; returns the waiting page's path. */
async function joinInBrowser(p: Page, student: { name: string; email: string; pin: string }, shot?: string) {
  await p.goto("/");
  await p.getByLabel("Workshop code").fill(code);
  await p.getByRole("button", { name: "Continue" }).click();
  await p.waitForURL(/\/board$/);
  await p.getByRole("heading", { name: "Join the line for a lab" }).waitFor();
  if (shot) await screenshot(p, shot);
  await p.getByLabel("Your name", { exact: true }).fill(student.name);
  await p.getByLabel("Your email", { exact: true }).fill(student.email);
  await p.getByLabel("Choose a 6-digit PIN").fill(student.pin);
  await p.getByRole("button", { name: "Join the line" }).click();
  await p.waitForURL(/\/l\/[\w-]{32}$/);
  return new URL(p.url()).pathname;
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  code = await readyWorkshop(e, WS, workshopYaml({ name: WS, count: 1 }), 1);
}, 120_000);

afterAll(async () => {
  await e?.close();
});

describe("the waiting room", () => {
  it("a late student waits, sees their place, and gets the released lab on the same page", async () => {
    const contexts: BrowserContext[] = [];
    const open = async (options: typeof PHONE) => {
      const context = await world().newContext(options);
      contexts.push(context);
      return context.newPage();
    };
    try {
      // The room fills the fleet: one lab, claimed.
      await claimInBrowser(await open(PHONE), code, {
        name: "Ada Lovelace",
        email: "ada@example.test",
        pin: "480271",
      });

      // Two latecomers: the board offers the line; each gets a personal page with their number.
      const grace = await open(DESK);
      const gracePath = await joinInBrowser(
        grace,
        { name: "Grace Hopper", email: "grace@example.test", pin: "615283" },
        SHOTS.boardDesk,
      );
      await grace.getByRole("heading", { name: "You are number 1 in line" }).waitFor();
      expect(await grace.locator("meta[http-equiv=refresh]").getAttribute("content")).toBe(
        String(WAITING_REFRESH_SECONDS),
      );
      // The page refreshes itself without a script: the only one is /portal.js, which shows times locally.
      expect(await grace.locator('script:not([src="/portal.js"])').count()).toBe(0);
      await screenshot(grace, SHOTS.waitingDesk);

      const alan = await open(PHONE);
      const alanPath = await joinInBrowser(
        alan,
        { name: "Alan Turing", email: "alan@example.test", pin: "730914" },
        SHOTS.boardPhone,
      );
      await alan.getByRole("heading", { name: "You are number 2 in line" }).waitFor();
      await alan.getByText("1 other student is waiting").waitFor();
      const widths = await pageWidths(alan);
      expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
      await screenshot(alan, SHOTS.waitingPhone);

      const status = await world().api("GET", `/${WS}/portal/status`);
      expect(status.waiting.map((w: { name: string }) => w.name)).toEqual(["Grace Hopper", "Alan Turing"]);

      // The instructor releases the lab: the first in line gets it, and her page shows it by its own refresh.
      await world().api("POST", `/${WS}/portal/release`, { lab: status.claims[0].lab });
      await waitFor(
        "the waiting page to show the lab after its refresh",
        async () => ((await grace.locator("h1").textContent())?.startsWith("Your lab:") ? true : undefined),
        (WAITING_REFRESH_SECONDS + 15) * 1000,
      );
      expect(new URL(grace.url()).pathname).toBe(gracePath);
      await grace.getByRole("heading", { name: `Your lab: ${status.claims[0].lab}` }).waitFor();
      await screenshot(grace, SHOTS.servedDesk);

      // The next student moved up, on his same page.
      await waitFor(
        "the second student to be number 1",
        async () =>
          (await alan.locator("h1").textContent()) === "You are number 1 in line" ? true : undefined,
        (WAITING_REFRESH_SECONDS + 15) * 1000,
      );
      expect(new URL(alan.url()).pathname).toBe(alanPath);
      await alan.getByText("Nobody else is waiting").waitFor();
      await screenshot(alan, SHOTS.servedPhone);

      // He leaves the line: his page stops, and the instructor's view is empty.
      await alan.getByRole("button", { name: "Leave the line" }).click();
      await alan.waitForURL((u) => u.pathname === "/" || u.pathname === "/board");
      expect((await world().api("GET", `/${WS}/portal/status`)).waiting).toEqual([]);
      for (const errors of world().pageErrors) expect(errors).toEqual([]);
    } finally {
      for (const c of contexts) await c.close();
    }
  }, 120_000);
});
