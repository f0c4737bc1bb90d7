import { rmSync } from "node:fs";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { movableClock, workshopYaml } from "../harness/runtime.ts";

/**
 * A claimed lab breaks while in use, in headless Chromium against the local runtime (its clock moved past
 * lab.health_interval_seconds between health passes): the student's lab page says so, the instructor sees the
 * flag on the console's Portal tab and presses Swap, and the student's same page, at the same address, shows the
 * new lab by itself.
 */

const WS = "swapday";
const STUDENT = { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" };
const SHOTS = {
  flaggedPhone: "swap-01-lab-failing-phone",
  flaggedDesk: "swap-02-lab-failing-desktop",
  consoleDesk: "swap-03-console-flagged-desktop",
  confirmPhone: "swap-04-swap-confirm-phone",
  confirmDesk: "swap-05-swap-confirm-desktop",
  movedPhone: "swap-06-new-lab-phone",
  movedDesk: "swap-07-new-lab-desktop",
} as const;
const clock = movableClock();

let e: E2e | undefined;
let labPath = "";
let phone: Page;
let desk: Page;
let instructor: Page;
let instructorPhone: Page;

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}
const newPage = async (viewport: { width: number; height: number }) =>
  (await world().newContext({ viewport })).newPage();
const pass = async () => {
  clock.advance(61_000);
  return world().rt.health();
};

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e({ clock });
  const yaml = workshopYaml({ name: WS, count: 2, extraLab: "  health_interval_seconds: 60\n" });
  const code = await readyWorkshop(e, WS, yaml, 2);
  phone = await newPage({ width: 390, height: 844 });
  desk = await newPage({ width: 1280, height: 800 });
  labPath = await claimInBrowser(phone, code, STUDENT);
  instructor = await newPage({ width: 1280, height: 900 });
  await instructor.goto(`/console#token=${encodeURIComponent(e.rt.token)}`);
  await instructor.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  instructorPhone = await (await world().newContext({ viewport: { width: 390, height: 844 } })).newPage();
  await instructorPhone.goto(`/console#token=${encodeURIComponent(e.rt.token)}`);
  await instructorPhone.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
}, 120_000);

afterAll(async () => {
  await e?.close();
});

describe("a lab that fails its health check while in use, swapped under the same link", () => {
  it("the student's lab page says their lab is not answering once two checks failed", async () => {
    await phone.goto(labPath);
    await phone.getByRole("heading", { level: 1, name: "Your lab: student-01" }).waitFor();
    expect(await phone.locator("#lab-health").count()).toBe(0);

    rmSync(join(world().rt.dataDir, "hosts", WS, "student-01", "lab", "built"));
    expect((await pass()).flagged).toEqual([]);
    expect((await pass()).flagged).toEqual([`${WS}/student-01`]);

    await phone.goto(labPath);
    const flag = phone.locator("#lab-health");
    expect(await flag.textContent()).toContain("Your lab is not answering; your instructor has been told.");
    expect(await flag.getAttribute("role")).toBe("alert");
    const widths = await pageWidths(phone);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    await screenshot(phone, SHOTS.flaggedPhone);
    await desk.goto(labPath);
    await desk.locator("#lab-health").waitFor();
    await screenshot(desk, SHOTS.flaggedDesk);
  });

  it("the instructor sees the flag on the Portal tab and swaps the lab after confirming", async () => {
    await instructor.goto(`/console/w/${WS}/portal`);
    const row = instructor.locator("#claim-student-01");
    expect(await row.getAttribute("data-health")).toBe("failing");
    await row.getByText("health check failing").waitFor();
    await screenshot(instructor, SHOTS.consoleDesk);

    // The confirmation page, on a phone too.
    await instructorPhone.goto(`/console/w/${WS}/portal`);
    await instructorPhone.getByRole("button", { name: "Swap the lab of Ada Lovelace (student-01)" }).click();
    await instructorPhone.getByRole("heading", { level: 1, name: "Swap Ada Lovelace's lab?" }).waitFor();
    const phoneWidths = await pageWidths(instructorPhone);
    expect(phoneWidths.scrollWidth).toBeLessThanOrEqual(phoneWidths.innerWidth);
    await screenshot(instructorPhone, SHOTS.confirmPhone);

    await row.getByRole("button", { name: "Swap the lab of Ada Lovelace (student-01)" }).click();
    await instructor.getByRole("heading", { level: 1, name: "Swap Ada Lovelace's lab?" }).waitFor();
    await instructor.getByText("Ada Lovelace moves from student-01 to student-02").waitFor();
    await screenshot(instructor, SHOTS.confirmDesk);
    await instructor.getByRole("button", { name: "Swap to student-02", exact: true }).click();
    await instructor.getByText("The student was moved to a new lab").waitFor();
    expect(new URL(instructor.url()).pathname).toBe(`/console/w/${WS}/portal`);
    await instructor.locator("#claim-student-02").getByText("Ada Lovelace").waitFor();
  });

  it("the student's same page shows the new lab by itself, at the same address", async () => {
    // No reload from the test: the flagged page looks again by itself.
    await phone.getByRole("heading", { level: 1, name: "Your lab: student-02" }).waitFor({ timeout: 40_000 });
    expect(new URL(phone.url()).pathname).toBe(labPath);
    expect(await phone.locator("#lab-health").count()).toBe(0);
    expect(await phone.getByText("s3cret-student-02").count()).toBe(1);
    await screenshot(phone, SHOTS.movedPhone);
    // The desktop tab also shows the flagged page, which reloads itself: navigating it from the test could collide
    // with that reload, so it is left to look again by itself too.
    await desk.getByRole("heading", { level: 1, name: "Your lab: student-02" }).waitFor({ timeout: 40_000 });
    expect(new URL(desk.url()).pathname).toBe(labPath);
    await screenshot(desk, SHOTS.movedDesk);
    // The old lab is being rebuilt: the board shows it as not free.
    await world().rt.executor.idle();
    const s = await world().api("GET", `/${WS}`);
    expect(s.hostList.map((h: { id: string; state: string }) => [h.id, h.state])).toEqual([
      ["student-01", "ready"],
      ["student-02", "ready"],
    ]);
  }, 90_000);

  it("logged no console or page errors and no failed subresources", () => {
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
