import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { movableClock, workshopYaml } from "../harness/runtime.ts";

/**
 * "Check my work" in headless Chromium, as a student and the instructor see it: the student presses the button
 * (a plain form: scripts are off on the phone), sees a failed check with its hint, does the work, is told to
 * wait when pressing again at once, presses again once the window has passed (the clock is moved) and sees
 * every check pass; the console's Portal tab shows the matrix. Screenshots on a phone and a desktop.
 */

const WS = "checkwork";
const STUDENT = { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" };
const SHOTS = {
  before: "checks-01-phone-before",
  failed: "checks-02-phone-failed",
  wait: "checks-03-phone-wait",
  passed: "checks-04-phone-passed",
  desk: "checks-05-desktop-passed",
  matrix: "checks-06-console-matrix",
  matrixPhone: "checks-07-console-matrix-phone",
};
const CHECKS = `  checks:
    - name: Lab is built
      run: test -f built
    - name: Answer saved
      run: grep -qsx 42 "$HOME/answer.txt" || { echo "no answer in ~/answer.txt yet"; exit 1; }
      hint: Save the answer, 42, in ~/answer.txt on your lab.
portal:
  enabled: true
`;

const clock = movableClock();
let e: E2e | undefined;
let labPath = "";

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}

const press = async (p: Page) => {
  await p.getByRole("button", { name: /^Check my work/ }).click();
  await p.waitForURL(/\/check#checks$/);
};
const item = (p: Page, name: string) => p.locator("ul.checks li", { hasText: name });

async function consolePage(viewport: { width: number; height: number }): Promise<Page> {
  const p = await (await world().newContext({ viewport })).newPage();
  await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
  await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  return p;
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e({ clock });
  await readyWorkshop(e, WS, workshopYaml({ name: WS, count: 1, extraLab: CHECKS }), 1);
});

afterAll(async () => {
  await e?.close();
});

describe("check my work", () => {
  it("a student presses Check my work without scripts, sees a fail with its hint, fixes it and passes", async () => {
    const context = await world().newContext({
      viewport: { width: 390, height: 844 },
      javaScriptEnabled: false,
    });
    const p = await context.newPage();
    const code = (await world().api("GET", `/${WS}/portal/info`)).code;
    labPath = await claimInBrowser(p, code, STUDENT);
    await expect.poll(() => item(p, "Answer saved").textContent()).toContain("not checked yet");
    await screenshot(p, SHOTS.before);

    await press(p);
    expect(await p.getByRole("status").filter({ hasText: "checks passed" }).textContent()).toBe(
      "1 of 2 checks passed.",
    );
    expect(await item(p, "Lab is built").textContent()).toContain("✓");
    const failed = await item(p, "Answer saved").textContent();
    expect(failed).toContain("✗");
    expect(failed).toContain("not yet");
    expect(failed).toContain("Hint: Save the answer, 42, in ~/answer.txt on your lab.");
    await item(p, "Answer saved").getByText("What the check printed").click();
    expect(await item(p, "Answer saved").locator("pre").textContent()).toBe("no answer in ~/answer.txt yet");
    expect((await pageWidths(p)).scrollWidth).toBeLessThanOrEqual(390);
    await screenshot(p, SHOTS.failed);

    // The student does the work on their lab (its home is the local host's folder).
    const home = join(world().rt.dataDir, "hosts", WS, "student-01");
    mkdirSync(home, { recursive: true });
    writeFileSync(join(home, "answer.txt"), "42\n");
    await press(p);
    expect(await p.getByRole("alert").textContent()).toMatch(
      /less than 30 seconds ago\. Try again in \d+ seconds?\./,
    );
    await screenshot(p, SHOTS.wait);

    clock.advance(31_000);
    await press(p);
    expect(await p.getByRole("status").filter({ hasText: "checks passed" }).textContent()).toBe(
      "All 2 checks passed.",
    );
    expect(await item(p, "Answer saved").textContent()).toContain("✓");
    expect(await item(p, "Answer saved").textContent()).not.toContain("Hint:");
    expect(await item(p, "Answer saved").textContent()).toMatch(
      /Checked at (\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d\b/,
    );
    await screenshot(p, SHOTS.passed);
    await context.close();
  });

  it("shows the kept results on a desktop, and the instructor's matrix on the console's Portal tab", async () => {
    const context = await world().newContext({ viewport: { width: 1280, height: 800 } });
    const p = await context.newPage();
    await p.goto(labPath);
    expect(await item(p, "Answer saved").textContent()).toContain("passed");
    await p.getByRole("button", { name: "Check my work again" }).waitFor();
    await screenshot(p, SHOTS.desk);
    await context.close();

    for (const [viewport, shot] of [
      [{ width: 1280, height: 900 }, SHOTS.matrix],
      [{ width: 390, height: 844 }, SHOTS.matrixPhone],
    ] as const) {
      const c = await consolePage(viewport);
      await c.goto(`/console/w/${WS}/portal`);
      const table = c.getByRole("table", { name: "Check my work" });
      await table.waitFor();
      const headers = await table.locator("thead th").allInnerTexts();
      expect(headers).toEqual(["Lab", "Name", "Lab is built", "Answer saved", "Last checked"]);
      const row = await table.locator("tbody tr").first().locator("td").allInnerTexts();
      expect(row.slice(0, 4)).toEqual(["student-01", "Ada Lovelace", "✓", "✓"]);
      expect(await table.locator("tr.checks-total").textContent()).toMatch(/Passed\s*1 of 1\s*1 of 1/);
      await table.scrollIntoViewIfNeeded();
      await screenshot(c, shot);
      await c.context().close();
    }
  });

  it("logged no console or page errors and no failed subresources", () => {
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
