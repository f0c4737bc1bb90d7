import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { workshopYaml } from "../harness/runtime.ts";

/**
 * Run a command from the console, in headless Chromium against the local runtime: the form on the workshop
 * page, the confirmation that names the student whose claimed lab the command reaches, and the job's page, which
 * follows the job live (one row per host as its result arrives: status, exit code, output) and cancels it; hosts
 * at once and the failures after which no further host starts, with bad input sent back at its field. On a
 * desktop and on a phone.
 */

const WS = "execws";
const SHOTS = {
  form: "exec-01-form-desktop",
  confirm: "exec-02-confirm-desktop",
  results: "exec-03-results-desktop",
  phoneConfirm: "exec-04-confirm-phone",
  phoneResults: "exec-05-results-phone",
  badInput: "exec-06-bad-input-desktop",
} as const;

let e: E2e | undefined;
let code = "";

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}

async function workshopPage(viewport: { width: number; height: number }): Promise<Page> {
  const p = await (await world().newContext({ viewport })).newPage();
  await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
  await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  await p.goto(`/console/w/${WS}`);
  await p.getByRole("heading", { level: 1, name: WS }).waitFor();
  return p;
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  code = await readyWorkshop(e, WS, workshopYaml({ name: WS, count: 3 }), 3);
  const student = await (await e.newContext()).newPage();
  await claimInBrowser(student, code, { name: "Grace Hopper", email: "grace@example.test", pin: "271828" });
}, 90_000);

afterAll(async () => {
  await e?.close();
});

/** The job's page once the job has ended (it follows the job live until then). */
const ended = (p: Page) =>
  p
    .locator('#exec-summary:is([data-state="succeeded"], [data-state="failed"], [data-state="cancelled"])')
    .waitFor({ timeout: 60_000 });

const claimedLab = async () =>
  ((await world().api("GET", `/${WS}/portal/status`)).claims as { lab: string; name: string }[])[0];

describe("running a command from the console", () => {
  it("asks first for a claimed lab, naming the student, then shows each host's result", async () => {
    const claim = await claimedLab();
    expect(claim?.name).toBe("Grace Hopper");
    const p = await workshopPage({ width: 1280, height: 900 });
    const form = p.locator('form[action$="/exec"]');
    await p
      .getByLabel("Command (bash, on each host)")
      .fill('echo "hi from $(basename "$PWD")"; [ "$(basename "$PWD")" != student-02 ] || exit 3');
    await form.scrollIntoViewIfNeeded();
    await screenshot(p, SHOTS.form);
    await form.getByRole("button", { name: "Run" }).click();

    await p.getByRole("heading", { level: 1, name: "Run on 1 claimed lab?" }).waitFor();
    expect(await p.locator("main li, body li").allTextContents()).toContain(`${claim?.lab}: Grace Hopper`);
    await screenshot(p, SHOTS.confirm);
    await p.getByRole("button", { name: "Run on 3 hosts" }).click();

    await p.getByRole("heading", { level: 1, name: `Command on ${WS}` }).waitFor();
    await ended(p);
    expect((await p.locator("#exec-summary").textContent())?.trim()).toBe(
      "2 ok, 1 failed (exit 3): student-02",
    );
    const rows = p.locator("#exec-results tr");
    expect(await rows.count()).toBe(3);
    const second = p.locator('#exec-results tr[data-host="student-02"]');
    expect(await second.getAttribute("data-status")).toBe("failed");
    expect(await second.locator("td").nth(1).textContent()).toBe("3");
    expect(await p.locator('#exec-results tr[data-host="student-01"] pre').textContent()).toBe(
      "hi from student-01\n",
    );
    await screenshot(p, SHOTS.results);

    // The activity records who ran what, with the summary, never the output.
    const events = (await world().api("GET", `/${WS}/events`)).events as {
      type: string;
      detail: Record<string, unknown>;
    }[];
    const ran = events.filter((ev) => ev.type === "exec").at(-1);
    expect(ran?.detail).toMatchObject({ hosts: 3, summary: "2 ok, 1 failed (exit 3): student-02" });
    expect(JSON.stringify(ran)).not.toContain("hi from student-01");
  });

  it("runs at once on unclaimed labs only, and fits a phone", async () => {
    const p = await workshopPage({ width: 390, height: 844 });
    let widths = await pageWidths(p);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    await p.getByLabel("Command (bash, on each host)").fill("seq 1 3; echo warning >&2");
    await p.getByLabel("Hosts (blank: all)", { exact: true }).last().fill("student-01 student-02 student-03");
    await p.locator('form[action$="/exec"]').getByRole("button", { name: "Run" }).click();
    await p.getByRole("heading", { level: 1, name: "Run on 1 claimed lab?" }).waitFor();
    widths = await pageWidths(p);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    await screenshot(p, SHOTS.phoneConfirm);
    await p.getByRole("button", { name: "Run on 3 hosts" }).click();
    await p.getByRole("heading", { level: 1, name: `Command on ${WS}` }).waitFor();
    await ended(p);
    expect((await p.locator("#exec-summary").textContent())?.trim()).toBe("3 ok");
    widths = await pageWidths(p);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    await screenshot(p, SHOTS.phoneResults);

    // Unclaimed labs only: no question, the results at once.
    const claim = await claimedLab();
    const free = ["student-01", "student-02", "student-03"].filter((id) => id !== claim?.lab);
    const q = await workshopPage({ width: 1280, height: 900 });
    await q.getByLabel("Command (bash, on each host)").fill("true");
    await q.locator("#exec-hosts").fill(free.join(" "));
    await q.locator('form[action$="/exec"]').getByRole("button", { name: "Run" }).click();
    await q.getByRole("heading", { level: 1, name: `Command on ${WS}` }).waitFor();
    await ended(q);
    expect((await q.locator("#exec-summary").textContent())?.trim()).toBe("2 ok");
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("runs hosts one at a time and stops after the failures asked for; bad input comes back at its field", async () => {
    const claim = await claimedLab();
    const free = ["student-01", "student-02", "student-03"].filter((id) => id !== claim?.lab);
    const p = await workshopPage({ width: 1280, height: 900 });
    const form = p.locator('form[action$="/exec"]');
    await p.getByLabel("Command (bash, on each host)").fill("echo trying; exit 4");
    await p.locator("#exec-hosts").fill(free.join(" "));
    expect(await p.getByLabel("Hosts at once").inputValue()).toBe("16");
    expect(await p.getByLabel("Stop after this many failures").inputValue()).toBe("");
    // Out of range: the browser's own check would hold the form back; one that skips it reaches the server,
    // which sends the form back with the error at its field.
    await p.getByLabel("Hosts at once").fill("65");
    await form.evaluate((f) => {
      (f as unknown as { noValidate: boolean }).noValidate = true;
    });
    await form.getByRole("button", { name: "Run" }).click();
    await p.getByRole("heading", { level: 1, name: `Run a command on ${WS}` }).waitFor();
    const error = p.locator('#exec-errors li[data-field="concurrency"]');
    expect(await error.textContent()).toBe(
      "Hosts at once (concurrency): expected a whole number from 1 to 64, or blank for 16 at once",
    );
    const field = p.getByLabel("Hosts at once");
    expect(await field.getAttribute("aria-invalid")).toBe("true");
    expect(await field.inputValue()).toBe("65");
    expect(await p.locator("#exec-concurrency-error").textContent()).toContain("expected a whole number");
    // What was typed is kept: the command and the hosts.
    expect(await p.getByLabel("Command (bash, on each host)").inputValue()).toBe("echo trying; exit 4");
    expect(await p.locator("#exec-hosts").inputValue()).toBe(free.join(" "));
    await screenshot(p, SHOTS.badInput);

    // Corrected on the same form: one host at a time, no further host after the first failure.
    await field.fill("1");
    await p.getByLabel("Stop after this many failures").fill("1");
    await p.locator('form[action$="/exec"]').getByRole("button", { name: "Run" }).click();
    await p.getByRole("heading", { level: 1, name: `Command on ${WS}` }).waitFor();
    await ended(p);
    expect((await p.locator("#exec-options").textContent())?.replace(/\s+/g, " ").trim()).toBe(
      "2 hosts, 1 at once, timeout 60 s per host, no further host starts after 1 failure.",
    );
    expect((await p.locator("#exec-summary").textContent())?.trim()).toBe(
      `0 ok, 1 failed (exit 4): ${free[0]}; 1 skipped`,
    );
    const skipped = p.locator(`#exec-results tr[data-host="${free[1]}"]`);
    expect(await skipped.getAttribute("data-status")).toBe("skipped");
    expect(await skipped.textContent()).toContain("not started: 1 host failed (max errors 1)");
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("follows a running command live, without a reload, and cancels it", async () => {
    const claim = await claimedLab();
    const free = ["student-01", "student-02", "student-03"].filter((id) => id !== claim?.lab);
    const [quick, slow] = free as [string, string];
    const p = await workshopPage({ width: 1280, height: 900 });
    await p
      .getByLabel("Command (bash, on each host)")
      .fill(`case "$(basename "$PWD")" in ${slow}) sleep 46;; *) echo quick;; esac`);
    await p.locator("#exec-hosts").fill(free.join(" "));
    await p.locator('form[action$="/exec"]').getByRole("button", { name: "Run" }).click();
    await p.getByRole("heading", { level: 1, name: `Command on ${WS}` }).waitFor();
    // Marked so a reload would show: the page must change in place.
    await p.evaluate(() => {
      (globalThis as unknown as { execMarker?: number }).execMarker = 1;
    });
    await p.locator(`#exec-results tr[data-host="${quick}"][data-status="ok"]`).waitFor({ timeout: 30_000 });
    await p
      .locator(`#exec-results tr[data-host="${slow}"][data-status="running"]`)
      .waitFor({ timeout: 30_000 });
    expect(await p.locator("#exec-summary").getAttribute("data-state")).toBe("running");
    // The same document: the rows came in place, without a reload.
    expect(await p.evaluate(() => (globalThis as unknown as { execMarker?: number }).execMarker)).toBe(1);
    // Cancelling is a form (it works without JavaScript): the job's page comes back.
    await p.getByRole("button", { name: "Cancel the command" }).click();
    await ended(p);
    expect((await p.locator("#exec-summary").textContent())?.trim()).toBe("cancelled: 1 ok, 1 cancelled");
    expect(await p.locator(`#exec-results tr[data-host="${slow}"]`).getAttribute("data-status")).toBe(
      "cancelled",
    );
    expect(await p.getByRole("button", { name: "Cancel the command" }).count()).toBe(0);
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
