import { existsSync, mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { type Browser, type BrowserContext, chromium, type Page } from "playwright-core";

/** Debian's Chromium (`apt-get install -y --no-install-recommends chromium`); playwright-core brings no browser. */
export const CHROMIUM_PATH = "/usr/bin/chromium";

export const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH))
    throw new Error(
      `no Chromium at ${CHROMIUM_PATH}: apt-get install -y --no-install-recommends chromium (see NOTES.md)`,
    );
  return chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS });
}

/** test-output/screenshots/ (gitignored), created on first use. */
export const screenshotsDir = new URL("../../test-output/screenshots/", import.meta.url).pathname;

export function screenshotPath(name: string): string {
  mkdirSync(screenshotsDir, { recursive: true });
  return join(screenshotsDir, `${name}.png`);
}

/**
 * A full-page shot of `page`, which is left scrolled where it was. Chromium takes a full page by rendering
 * beyond the viewport, and afterwards the page's scroll offset can read up to a few hundred pixels off what is
 * shown; the next focus change (a mousedown on a button moves the focus) puts it back, which moves the page
 * under the pointer between the button's mousedown and its mouseup, and the click never reaches the button.
 * Scrolling back to the offset read before the shot keeps the page and its scroll offset in step.
 */
export async function screenshot(page: Page, name: string): Promise<string> {
  const path = screenshotPath(name);
  const at = await page.evaluate<[number, number]>("[scrollX, scrollY]");
  await page.screenshot({ path, fullPage: true });
  await page.evaluate<void, [number, number]>(([x, y]) => {
    (globalThis as unknown as { scrollTo(x: number, y: number): void }).scrollTo(x, y);
  }, at);
  return path;
}

/**
 * The page's width against the viewport's. A string, not a function: the tests' tsconfig has no DOM lib.
 * `scrollWidth <= innerWidth` means nothing needs horizontal scrolling.
 */
export function pageWidths(page: Page): Promise<{ scrollWidth: number; innerWidth: number }> {
  return page.evaluate<{ scrollWidth: number; innerWidth: number }>(
    "({ scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth })",
  );
}

/**
 * Opens `path` again on a page that may be refreshing itself (a `<meta http-equiv="refresh">`): when the page's
 * own refresh of the same address interrupts the navigation, that refresh is waited for instead, since it
 * loads the same page. Any other interruption, or a refresh that lands elsewhere, still fails.
 */
export async function reopen(page: Page, path: string): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await page.goto(path);
      return;
    } catch (err) {
      if (attempt >= 2 || !/interrupted by another navigation/.test(String(err))) throw err;
      await page.waitForLoadState("load");
      if (new URL(page.url()).pathname === new URL(path, page.url()).pathname) return;
    }
  }
}

/**
 * What went wrong in the pages of `context`, as lines, for a test to expect none: console errors (such as
 * CSP refusals), uncaught page errors, and subresources (the stylesheet...) that failed or answered >= 400.
 * Navigations are left out: their status is the test's to check (a refused link is a 404 page on purpose),
 * and so is Chromium's "Failed to load resource" line that echoes them. /favicon.ico is not asked of a page.
 */
export function collectPageErrors(context: BrowserContext): string[] {
  const errors: string[] = [];
  const ignored = (url: string) => new URL(url).pathname === "/favicon.ico";
  context.on("console", (m) => {
    if (m.type() === "error" && !m.text().startsWith("Failed to load resource"))
      errors.push(`console: ${m.text()} (${m.page()?.url() ?? "?"})`);
  });
  context.on("weberror", (e) => errors.push(`page error: ${e.error().message}`));
  context.on("requestfailed", (r) => {
    // The pages' scripts never cancel their own requests: a fetch cancelled (ERR_ABORTED) was in flight when
    // its page navigated away, as a console page's live poll is when the instructor follows a link.
    const leftBehind = r.resourceType() === "fetch" && r.failure()?.errorText === "net::ERR_ABORTED";
    if (!r.isNavigationRequest() && !ignored(r.url()) && !leftBehind)
      errors.push(`request failed: ${r.url()} ${r.failure()?.errorText ?? ""}`);
  });
  context.on("response", (r) => {
    if (r.status() >= 400 && !r.request().isNavigationRequest() && !ignored(r.url()))
      errors.push(`response ${r.status()}: ${r.url()}`);
  });
  return errors;
}

/** Removes earlier screenshots of these names, so the folder never shows a page from another run. */
export function clearScreenshots(names: readonly string[]): void {
  for (const name of names) rmSync(join(screenshotsDir, `${name}.png`), { force: true });
}
