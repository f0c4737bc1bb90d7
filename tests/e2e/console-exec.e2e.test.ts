import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { workshopYaml } from "../harness/runtime.ts";

/**
 * Run a command from the console, in headless Chromium against the local runtime: the form on the workshop
 * page, the confirmation that names the student whose claimed lab the command reaches, and the results page
 * with one row per host (status, exit code, output). On a desktop and on a phone.
 */

const WS = "execws";
const SHOTS = {
  form: "exec-01-form-desktop",
  confirm: "exec-02-confirm-desktop",
  results: "exec-03-results-desktop",
  phoneConfirm: "exec-04-confirm-phone",
  phoneResults: "exec-05-results-phone",
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
    expect((await q.locator("#exec-summary").textContent())?.trim()).toBe("2 ok");
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
