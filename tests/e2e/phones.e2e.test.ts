import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab } from "../../shared/portal/claims.ts";
import { clearScreenshots, pageWidths, screenshot, screenshotPath } from "../harness/browser.ts";
import { claimInBrowser, type E2e, startE2e } from "../harness/e2e.ts";
import { waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * Every console page (and the API reference it links to) and every student page on a 390 px phone: none scrolls sideways
 * (`document.documentElement.scrollWidth <= 390`); wide tables scroll inside their own `.scroll` box. The
 * workshop has a failed host (a long setup error), a student with a long name, a waiting line and a claimed
 * lab, so the tables are as wide as on a workshop day. Each page is shot as `phone-*.png`. The console's
 * confirmation before rebuilding a claimed lab is walked through on the phone, to its end.
 */

const WS = "phones-and-tablets";
const PHONE = { width: 390, height: 844 };
const LONG_NAME = "Maximiliana Konstantinopoulou-Wolfeschlegelsteinhausen";
const STUDENT = { name: LONG_NAME, email: "maximiliana.konstantinopoulou@example.test", pin: "480271" };
const SHOTS = [
  "login",
  "workshops",
  "new",
  "workshop",
  "portal",
  "slide",
  "runs",
  "tokens",
  "teardown-confirm",
  "scale-confirm",
  "rebuild-confirm",
  "not-found",
  "admin-page",
  "api-docs",
  "student-code",
  "student-board",
  "student-lab",
  "student-waiting",
  "student-recover",
  "student-privacy",
  "student-link-gone",
].map((s) => `phone-${s}`);

let e: E2e | undefined;
let consoleCtx: BrowserContext;
let studentCtx: BrowserContext;
let code = "";
const world = (): E2e => {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
};
/** Pages wider than the phone, by name: the test expects none. */
const tooWide: string[] = [];

async function check(p: Page, name: string): Promise<void> {
  await screenshot(p, `phone-${name}`);
  const { scrollWidth, innerWidth } = await pageWidths(p);
  expect(innerWidth).toBe(PHONE.width);
  if (scrollWidth > PHONE.width) tooWide.push(`${name} (${p.url()}): ${scrollWidth} px`);
}

/** Opens `path` in the console, waits for its heading, and checks its width. */
async function consolePage(p: Page, path: string, heading: string | RegExp, name: string) {
  await p.goto(path);
  await p.getByRole("heading", { level: 1, name: heading }).waitFor();
  await check(p, name);
}

beforeAll(async () => {
  clearScreenshots(SHOTS);
  e = await startE2e();
  const yaml = `${workshopYaml({ name: WS, lab: "fail", count: 6 })}portal:\n  enabled: true\n  mode: both\n`;
  await e.api("POST", "", { yaml });
  await e.api("POST", `/${WS}/up`);
  await waitFor(
    "every host ready or failed",
    async () => {
      const s = await world().api("GET", `/${WS}`);
      return s.hostList.length === 6 &&
        s.hostList.every((h: { state: string }) => h.state === "ready" || h.state === "failed")
        ? true
        : undefined;
    },
    60_000,
  );
  await e.rt.executor.idle();
  code = (await e.api("POST", `/${WS}/portal/open`)).code;
  consoleCtx = await e.newContext({ viewport: PHONE, isMobile: true, hasTouch: true });
  studentCtx = await e.newContext({ viewport: PHONE, isMobile: true, hasTouch: true });
}, 120_000);
afterAll(async () => {
  await e?.close();
});

describe("on a 390 px phone", () => {
  it("the student's pages fit: code, board, lab, waiting line, recovery, privacy, a link that is gone", async () => {
    const look = await (await world().newContext({ viewport: PHONE, isMobile: true })).newPage();
    await look.goto("/");
    await look.getByLabel("Workshop code").waitFor();
    await check(look, "student-code");
    await look.getByLabel("Workshop code").fill(code);
    await look.getByRole("button", { name: "Continue" }).click();
    await look.waitForURL(/\/board$/);
    await check(look, "student-board");
    const p = await studentCtx.newPage();
    expect(await claimInBrowser(p, code, STUDENT)).toMatch(/^\/l\/[\w-]{32}$/);
    await p.getByRole("heading", { level: 1 }).first().waitFor();
    await check(p, "student-lab");

    // The other ready labs go to others, so the next student waits in line.
    for (let i = 0; i < 4; i++)
      await claimLab(
        WS,
        { name: `Student ${i} ${"Longname".repeat(4)}`, email: `s${i}@example.test`, pin: "503917" },
        "127.0.0.1",
      );
    const waiting = await (await world().newContext({ viewport: PHONE, isMobile: true })).newPage();
    await claimInBrowserToLine(waiting);
    await check(waiting, "student-waiting");

    await p.goto("/recover");
    await p.getByRole("heading", { level: 1 }).first().waitFor();
    await check(p, "student-recover");
    await p.goto("/privacy");
    await p.getByRole("heading", { level: 1 }).first().waitFor();
    await check(p, "student-privacy");
    await p.goto(`/l/${"x".repeat(32)}`);
    await p.getByRole("heading", { level: 1, name: "This link no longer works" }).waitFor();
    await check(p, "student-link-gone");
  });

  it("every console page fits", async () => {
    const p = await consoleCtx.newPage();
    await p.goto("/console");
    await p.getByRole("heading", { level: 1, name: "Sign in to the instructor console" }).waitFor();
    await check(p, "login");
    await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
    await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
    await check(p, "workshops");
    await consolePage(p, "/console/new", /workshop/i, "new");
    await consolePage(p, `/console/w/${WS}`, WS, "workshop");
    await consolePage(p, `/console/w/${WS}/portal`, WS, "portal");
    await consolePage(p, `/console/w/${WS}/portal/slide`, /./, "slide");
    await consolePage(p, `/console/w/${WS}/runs`, WS, "runs");
    await consolePage(p, "/console/tokens", /token/i, "tokens");
    await consolePage(p, `/console/w/${WS}/teardown`, /Tear down/i, "teardown-confirm");
    await consolePage(p, "/console/w/no-such-workshop", /./, "not-found");
    // The API reference opens from the console session (its navigation links to it). It is many screens long:
    // its width is measured on the whole page, the shot is of its top.
    await p.goto("/api/docs");
    await p.getByRole("heading", { level: 1, name: /labfleet instructor API/ }).waitFor();
    await p.screenshot({ path: screenshotPath("phone-api-docs") });
    const docs = await pageWidths(p);
    expect(docs.innerWidth).toBe(PHONE.width);
    expect(await p.evaluate<number>("document.documentElement.scrollHeight")).toBeGreaterThan(
      10 * PHONE.height,
    );
    if (docs.scrollWidth > PHONE.width) tooWide.push(`api-docs (${p.url()}): ${docs.scrollWidth} px`);

    await p.goto(`/console/w/${WS}`);
    await p
      .getByLabel(/Hosts to have|Number of hosts|hosts/i, { exact: false })
      .last()
      .waitFor();
    await p.locator("#scale-count").fill("8");
    await p.getByRole("button", { name: "Scale up…" }).click();
    await p.getByRole("heading", { level: 1, name: `Scale ${WS} up to 8 hosts?` }).waitFor();
    await check(p, "scale-confirm");

    // Rebuilding claimed labs asks first, naming each student; confirming starts the deploy.
    await p.goto(`/console/w/${WS}`);
    await p.locator("#deploy-force").check();
    await p.locator('form[action$="/deploy"]').getByRole("button", { name: "Deploy", exact: true }).click();
    await p.getByRole("heading", { level: 1, name: `Rebuild 5 claimed labs in ${WS}?` }).waitFor();
    await p.getByRole("cell", { name: LONG_NAME }).waitFor();
    expect(await p.getByText(STUDENT.email).count()).toBe(0);
    await check(p, "rebuild-confirm");
    await p.getByRole("button", { name: "Rebuild 5 claimed labs" }).click();
    await p.waitForURL((u) => u.pathname === `/console/w/${WS}` && u.searchParams.get("notice") === "deploy");
    await p
      .getByText(/bootstrap token started a deploy/)
      .first()
      .waitFor();

    const admin = await world().api("POST", `/${WS}/portal/admin-link`);
    await p.goto(admin.path);
    await p.getByRole("heading", { level: 1 }).first().waitFor();
    await check(p, "admin-page");

    expect(tooWide).toEqual([]);
  }, 90_000);

  it("puts every table in a box that scrolls sideways on its own", async () => {
    const p = await consoleCtx.newPage();
    const loose: string[] = [];
    for (const path of [`/console/w/${WS}`, `/console/w/${WS}/portal`, `/console/w/${WS}/runs`, "/privacy"]) {
      await p.goto(path);
      await p.getByRole("heading", { level: 1 }).first().waitFor();
      // Each table's nearest .scroll box, and whether it scrolls sideways (overflow-x: auto).
      const tables = await p.evaluate<{ id: string; boxed: boolean }[]>(
        `[...document.querySelectorAll("table")].map((t, i) => {
          const box = t.closest(".scroll");
          return { id: t.querySelector("caption")?.textContent?.trim() || t.getAttribute("aria-labelledby") || String(i),
                   boxed: !!box && getComputedStyle(box).overflowX === "auto" && box.clientWidth <= ${PHONE.width} };
        })`,
      );
      expect(tables.length, path).toBeGreaterThan(0);
      loose.push(...tables.filter((t) => !t.boxed).map((t) => `${path}: ${t.id}`));
    }
    expect(loose).toEqual([]);
  });

  it("saw no page errors", () => {
    expect(world().pageErrors.flat()).toEqual([]);
  });
});

/** A student arriving when every ready lab is taken: the claim form puts them in the waiting line. */
async function claimInBrowserToLine(p: Page): Promise<void> {
  await p.goto("/");
  await p.getByLabel("Workshop code").fill(code);
  await p.getByRole("button", { name: "Continue" }).click();
  await p.waitForURL(/\/board$/);
  await p.getByLabel("Your name", { exact: true }).fill(`Waiting ${LONG_NAME}`);
  await p.getByLabel("Your email", { exact: true }).fill("waiting@example.test");
  await p.getByLabel("Choose a 6-digit PIN").fill("193847");
  await p.getByRole("button", { name: /Claim my lab|Wait for a lab|Join/ }).click();
  await p.waitForURL(/\/l\/[\w-]{32}$/);
  await p.getByRole("heading", { level: 1 }).first().waitFor();
}
