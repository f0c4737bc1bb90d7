import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshotPath } from "../harness/browser.ts";
import { type E2e, startE2e } from "../harness/e2e.ts";

/**
 * The API reference from the console: a signed-in instructor follows "API docs" in the console's navigation and
 * reads /api/docs and /api/openapi.json with the session cookie alone (no token in a URL). The cookie opens
 * nothing else under /api, and signing out closes the docs again.
 */
const SHOT = "api-docs-from-console";
let e: E2e;
let page: Page;

beforeAll(async () => {
  clearScreenshots([SHOT]);
  e = await startE2e();
  const context = await e.newContext({ viewport: { width: 1280, height: 800 } });
  page = await context.newPage();
});
afterAll(async () => {
  await e?.close();
});

describe("the API docs from a console session", () => {
  it("opens from the console's navigation, with no token in the URL", async () => {
    await page.goto("/console/login");
    await page.getByLabel("Instructor token").fill(e.rt.token);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();

    await page.getByRole("navigation", { name: "Console" }).getByRole("link", { name: "API docs" }).click();
    await page.waitForURL((u) => u.pathname === "/api/docs");
    await page.getByRole("heading", { level: 1, name: /labfleet instructor API/ }).waitFor();
    await page.getByRole("link", { name: "GET /api/workshops", exact: true }).waitFor();
    expect(page.url()).not.toContain(e.rt.token);
    // The top of the page only: the whole reference is many screens long.
    await page.screenshot({ path: screenshotPath(SHOT) });

    const doc = await page.request.get("/api/openapi.json");
    expect(doc.status()).toBe(200);
    const body = (await doc.json()) as { openapi: string; paths: Record<string, unknown> };
    expect(body.openapi).toBe("3.1.0");
    expect(body.paths).toHaveProperty("/api/workshops");
    expect(doc.headers()["cache-control"]).toBe("no-store");
  });

  it("opens nothing else under /api with the cookie alone", async () => {
    for (const path of ["/api/workshops", "/api/tokens", "/api/tokens/current"]) {
      const res = await page.request.get(path);
      expect(res.status(), path).toBe(401);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("auth.missing");
    }
    const post = await page.request.post("/api/tokens", { data: { name: "from a cookie" } });
    expect(post.status()).toBe(401);
  });

  it("fits the console's top bar, with its new link, on a 390 px phone", async () => {
    const phone = await e.newContext({ viewport: { width: 390, height: 844 }, isMobile: true });
    const p = await phone.newPage();
    await p.goto(`/console#token=${encodeURIComponent(e.rt.token)}`);
    await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
    await p.getByRole("navigation", { name: "Console" }).getByRole("link", { name: "API docs" }).waitFor();
    const { scrollWidth, innerWidth } = await pageWidths(p);
    expect(scrollWidth).toBeLessThanOrEqual(innerWidth);
    await p.goto("/api/docs");
    await p.getByRole("heading", { level: 1, name: /labfleet instructor API/ }).waitFor();
    await phone.close();
  });

  it("closes again when the instructor signs out", async () => {
    await page.goto("/console");
    await page.getByRole("button", { name: "Sign out" }).click();
    await page.waitForURL(/\/console\/login\?signed_out=1$/);
    for (const path of ["/api/docs", "/api/openapi.json"]) {
      const res = await page.request.get(path);
      expect(res.status(), path).toBe(401);
    }
    expect(e.pageErrors.flat()).toEqual([]);
  });
});
