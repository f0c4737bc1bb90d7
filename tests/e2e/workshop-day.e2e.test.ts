import { rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, reopen, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { readQr } from "../harness/qr.ts";
import { movableClock, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The workshop day as a room of students lives it, in headless Chromium against the local runtime (its clock
 * injected): a room bigger than the fleet arrives and the late ones wait in line; the instructor releases a lab
 * and the first in line gets it on the page they already have; the instructor scales up and the next in line
 * gets a new lab; a claimed lab fails its health check while in use, the instructor swaps it from the console and
 * the student's same link shows the new lab; "Check my work" fails, then passes; the 10-minute warning appears;
 * the slide's QR code decodes to the portal's address. Each step's student page is shot on a phone and a desktop.
 */

const WS = "roomday";
const CHECKS = `  health_interval_seconds: 60
  checks:
    - name: Answer saved
      run: grep -qsx 42 "$HOME/answer.txt" || { echo "no answer yet"; exit 1; }
      hint: Save the answer, 42, in ~/answer.txt on your lab.
`;
const PHONE = { width: 390, height: 844 };
const DESK = { width: 1280, height: 800 };
const MIN = 60_000;
const clock = movableClock();
const STEPS = [
  "01-waiting",
  "02-served-from-line",
  "03-served-after-scale",
  "04-lab-failing",
  "05-swapped",
  "06-check-failed",
  "07-check-passed",
  "08-ten-minutes-left",
];
const SHOTS = [
  ...STEPS.flatMap((step) => [`day-${step}-phone`, `day-${step}-desktop`]),
  "day-09-slide-desktop",
  "day-09-slide-phone",
];

interface Student {
  name: string;
  email: string;
  pin: string;
  page: Page;
  path: string;
}

let e: E2e | undefined;
let code = "";
/** The desktop browser; each shot opens the link in a new tab, so no earlier page's refresh races it. */
let desk: BrowserContext;
let instructor: Page;
const room: Record<string, Student> = {};

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}
const browser = (): Browser => world().browser;
const hostHome = (lab: string) => join(world().rt.dataDir, "hosts", WS, lab);
const heading = (p: Page) => p.locator("h1").textContent();
/** The student's page, left alone, shows `title` by its own refresh: the test never reloads it. */
const showsByItself = (s: Student, title: string) =>
  waitFor(
    `${s.name}'s page to show "${title}"`,
    async () => ((await heading(s.page)) === title ? true : undefined),
    45_000,
  );
const labOf = async (name: string): Promise<string | undefined> =>
  (await world().api("GET", `/${WS}/portal/status`)).claims.find((c: { name: string }) => c.name === name)
    ?.lab;

/** The same personal link on a desktop (a personal link opens the student's page in any browser). */
async function shootBoth(s: Student, step: string): Promise<void> {
  expect(
    (await pageWidths(s.page)).scrollWidth,
    `${step}: no sideways scrolling on a phone`,
  ).toBeLessThanOrEqual(PHONE.width);
  await screenshot(s.page, `day-${step}-phone`);
  const tab = await desk.newPage();
  try {
    await tab.goto(s.path);
    expect(await heading(tab)).toBe(await heading(s.page));
    await screenshot(tab, `day-${step}-desktop`);
  } finally {
    await tab.close();
  }
}

async function arrive(name: string, email: string, pin: string): Promise<Student> {
  const page = await (await world().newContext({ viewport: PHONE })).newPage();
  const path = await claimInBrowser(page, code, { name, email, pin });
  const s = { name, email, pin, page, path };
  room[name] = s;
  return s;
}

/** What a student does when the room is full: the code, the board, the line's form. */
async function joinLine(name: string, email: string, pin: string): Promise<Student> {
  const page = await (await world().newContext({ viewport: PHONE })).newPage();
  await page.goto("/");
  await page.getByLabel("Workshop code").fill(code);
  await page.getByRole("button", { name: "Continue" }).click();
  await page.waitForURL(/\/board$/);
  await page.getByRole("heading", { name: "Join the line for a lab" }).waitFor();
  await page.getByLabel("Your name", { exact: true }).fill(name);
  await page.getByLabel("Your email", { exact: true }).fill(email);
  await page.getByLabel("Choose a 6-digit PIN").fill(pin);
  await page.getByRole("button", { name: "Join the line" }).click();
  await page.waitForURL(/\/l\/[\w-]{32}$/);
  const s = { name, email, pin, page, path: new URL(page.url()).pathname };
  room[name] = s;
  return s;
}

beforeAll(async () => {
  clearScreenshots(SHOTS);
  e = await startE2e({ clock });
  code = await readyWorkshop(e, WS, workshopYaml({ name: WS, count: 2, ttlHours: 6, extraLab: CHECKS }), 2);
  desk = await e.newContext({ viewport: DESK });
  instructor = await (await e.newContext({ viewport: { width: 1280, height: 900 } })).newPage();
  await instructor.goto(`/console#token=${encodeURIComponent(e.rt.token)}`);
  await instructor.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
}, 120_000);

afterAll(async () => {
  await e?.close();
});

describe("the workshop day for students", () => {
  it("a room bigger than the fleet arrives: two get labs, the late ones wait in line, in order", async () => {
    await arrive("Ada Lovelace", "ada@example.test", "480271");
    await arrive("Bob Babbage", "bob@example.test", "480272");
    expect(await heading(room["Ada Lovelace"]?.page as Page)).toBe("Your lab: student-01");
    expect(await heading(room["Bob Babbage"]?.page as Page)).toBe("Your lab: student-02");

    const cy = await joinLine("Cy Young", "cy@example.test", "480273");
    const dee = await joinLine("Dee Dennis", "dee@example.test", "480274");
    const eve = await joinLine("Eve Evans", "eve@example.test", "480275");
    expect(await heading(cy.page)).toBe("You are number 1 in line");
    expect(await heading(dee.page)).toBe("You are number 2 in line");
    expect(await heading(eve.page)).toBe("You are number 3 in line");
    expect(await cy.page.locator('meta[http-equiv="refresh"]').count()).toBe(1);
    await shootBoth(dee, "01-waiting");

    // The instructor sees the line, in order.
    const status = await world().api("GET", `/${WS}/portal/status`);
    expect(status.waiting.map((w: { name: string }) => w.name)).toEqual([
      "Cy Young",
      "Dee Dennis",
      "Eve Evans",
    ]);
  }, 60_000);

  it("the instructor releases a lab: the first in line gets it on the page they have, the others move up", async () => {
    await instructor.goto(`/console/w/${WS}/portal`);
    await instructor.locator("#live-waiting").getByText("Cy Young").waitFor();
    await instructor.getByRole("button", { name: "Release student-02" }).click();
    await instructor.getByRole("heading", { level: 1, name: "Release student-02?" }).waitFor();
    await instructor.getByText("Bob Babbage loses lab student-02").waitFor();
    await instructor.getByRole("button", { name: "Release student-02" }).click();
    await instructor.getByText("The lab was released and is free again.").waitFor();

    const cy = room["Cy Young"] as Student;
    await showsByItself(cy, "Your lab: student-02");
    expect(new URL(cy.page.url()).pathname).toBe(cy.path);
    await showsByItself(room["Dee Dennis"] as Student, "You are number 1 in line");
    await shootBoth(cy, "02-served-from-line");
  }, 90_000);

  it("scaling up hands the new lab to the next in line", async () => {
    await world().api("POST", `/${WS}/scale`, { count: 4 });
    const dee = room["Dee Dennis"] as Student;
    const eve = room["Eve Evans"] as Student;
    // Each new lab goes to the first in line as it becomes ready, and either of the two may be ready first.
    const served = await waitFor(
      "Dee and Eve served",
      async () => {
        const [d, v] = [await labOf("Dee Dennis"), await labOf("Eve Evans")];
        return d && v ? [d, v] : undefined;
      },
      45_000,
    );
    expect([...served].sort()).toEqual(["student-03", "student-04"]);
    await showsByItself(dee, `Your lab: ${served[0]}`);
    await showsByItself(eve, `Your lab: ${served[1]}`);
    expect(new URL(eve.page.url()).pathname).toBe(eve.path);
    expect((await world().api("GET", `/${WS}/portal/status`)).waiting).toEqual([]);
    await shootBoth(eve, "03-served-after-scale");
  }, 90_000);

  it("a claimed lab fails its health check: the student is told, the instructor swaps it, the same link shows the new lab", async () => {
    // A spare lab to move to: one more host, nobody waiting for it.
    await world().api("POST", `/${WS}/scale`, { count: 5 });
    await waitFor("student-05 ready", async () => {
      const s = await world().api("GET", `/${WS}`);
      return s.hostList.some(
        (h: { id: string; state: string }) => h.id === "student-05" && h.state === "ready",
      )
        ? true
        : undefined;
    });
    const ada = room["Ada Lovelace"] as Student;
    rmSync(join(hostHome("student-01"), "lab", "built"));
    for (let pass = 0; pass < 2; pass++) {
      clock.advance(61_000);
      await world().rt.health();
    }
    await reopen(ada.page, ada.path);
    const flag = ada.page.locator("#lab-health");
    expect(await flag.textContent()).toContain("Your lab is not answering; your instructor has been told.");
    await shootBoth(ada, "04-lab-failing");

    await instructor.goto(`/console/w/${WS}/portal`);
    const row = instructor.locator("#claim-student-01");
    expect(await row.getAttribute("data-health")).toBe("failing");
    await row.getByRole("button", { name: "Swap the lab of Ada Lovelace (student-01)" }).click();
    await instructor.getByText("Ada Lovelace moves from student-01 to student-05").waitFor();
    await instructor.getByRole("button", { name: "Swap to student-05", exact: true }).click();
    await instructor.getByText("The student was moved to a new lab").waitFor();

    // Ada's flagged page looks again by itself and shows the new lab, at the same address.
    await showsByItself(ada, "Your lab: student-05");
    expect(new URL(ada.page.url()).pathname).toBe(ada.path);
    expect(await ada.page.locator("#lab-health").count()).toBe(0);
    await shootBoth(ada, "05-swapped");
    expect(await labOf("Ada Lovelace")).toBe("student-05");
  }, 120_000);

  it("Check my work fails with its hint, then passes once the work is done", async () => {
    const cy = room["Cy Young"] as Student;
    await reopen(cy.page, cy.path);
    const answer = cy.page.locator("ul.checks li", { hasText: "Answer saved" });
    await cy.page.getByRole("button", { name: /^Check my work/ }).click();
    await cy.page.waitForURL(/\/check#checks$/);
    expect(await answer.textContent()).toContain("Hint: Save the answer, 42, in ~/answer.txt on your lab.");
    expect(await cy.page.locator("#checks [role=status]").textContent()).toBe("The check did not pass yet.");
    await shootBoth(cy, "06-check-failed");

    writeFileSync(join(hostHome("student-02"), "answer.txt"), "42\n");
    clock.advance(31_000); // past the one-press-per-30-seconds limit
    await reopen(cy.page, cy.path);
    await cy.page.getByRole("button", { name: /^Check my work/ }).click();
    await cy.page.waitForURL(/\/check#checks$/);
    expect(await cy.page.locator("#checks [role=status]").textContent()).toBe("The check passed.");
    await shootBoth(cy, "07-check-passed");
    const matrix = await world().api("GET", `/${WS}/portal/checks`);
    const row = matrix.students.find((s: { name: string }) => s.name === "Cy Young");
    expect(row.results).toEqual([true]);
  }, 60_000);

  it("ten minutes before the end, every lab page warns, in the page and its title", async () => {
    const expiry = Date.parse((await world().api("GET", `/${WS}`)).expiry);
    clock.advance(expiry - 10 * MIN + 2_000 - clock.now().getTime());
    const eve = room["Eve Evans"] as Student;
    await reopen(eve.page, eve.path);
    const alert = eve.page.getByRole("alert").filter({ hasText: "10 min left" });
    await alert.waitFor();
    expect(await eve.page.title()).toBe(`10 min left · Your lab: ${await labOf("Eve Evans")}`);
    await shootBoth(eve, "08-ten-minutes-left");
  });

  it("the slide for the room shows a QR code that decodes to the portal's address", async () => {
    await instructor.goto(`/console/w/${WS}/portal/slide`);
    const url = `${world().rt.url}/`;
    expect((await instructor.locator(".slide-url").textContent())?.trim()).toBe(url);
    expect(await readQr(browser(), instructor)).toBe(url);
    await screenshot(instructor, "day-09-slide-desktop");
    const phoneSlide = await (await world().newContext({ viewport: PHONE })).newPage();
    await phoneSlide.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
    await phoneSlide.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
    await phoneSlide.goto(`/console/w/${WS}/portal/slide`);
    expect(await readQr(browser(), phoneSlide)).toBe(url);
    await screenshot(phoneSlide, "day-09-slide-phone");
  });

  it("logged no console or page errors and no failed subresources", () => {
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
