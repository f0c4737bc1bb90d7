import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, startE2e } from "../harness/e2e.ts";
import { waitFor } from "../harness/runtime.ts";

/**
 * The fleet view in headless Chromium against the local runtime: 30 demo labs mid-build in one table with the
 * counts, each lab's phase timeline (SVG) and the estimate of when every lab will be ready, from an earlier run
 * of the same lab; the page follows hosts to ready without a reload. Then the Portal tab's Claims table and its
 * Move choices follow students' claims live. Then, on the same 30 labs, what an instructor does on the day:
 * rebuilding a claimed lab asks first and names its student (nothing starts until confirmed), and the fleet
 * view follows the rebuild live; a command runs on all 30 labs from the console, with each lab's output and
 * the summary; tearing down asks for the workshop's name and refuses a wrong one. On a desktop and on a 390 px
 * phone.
 */

const WARM = "fleetwarm";
const WS = "fleet";
const COUNT = 30;
const SHOTS = {
  building: "fleet-01-building-desktop",
  phone: "fleet-02-building-phone",
  ready: "fleet-03-ready-desktop",
  claims: "fleet-04-claims-desktop",
  phoneClaims: "fleet-05-claims-phone",
  rebuildConfirm: "fleet-06-rebuild-confirm-desktop",
  phoneRebuildConfirm: "fleet-07-rebuild-confirm-phone",
  rebuilding: "fleet-08-rebuilding-desktop",
  phoneRebuilding: "fleet-09-rebuilding-phone",
  execConfirm: "fleet-10-exec-confirm-desktop",
  execResults: "fleet-11-exec-results-desktop",
  phoneExecConfirm: "fleet-12-exec-confirm-phone",
  phoneExecResults: "fleet-13-exec-results-phone",
  downRefused: "fleet-14-down-refused-desktop",
  phoneDownRefused: "fleet-15-down-refused-phone",
} as const;
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };

const demoLab = join(import.meta.dirname, "..", "..", "examples", "demo", "lab");
// The demo lab with phases slow enough to catch mid-build: 5 to 8 s each, three of them.
const yaml = (name: string, count: number, portal: boolean) => `name: ${name}
lab:
  source: ${demoLab}
  setup: DEMO_MIN_SECONDS=5 DEMO_SPREAD_SECONDS=3 bash setup.sh
  health: bash health.sh
  concurrency: 10
  timeout_minutes: 5
provider:
  type: local
  count: ${count}
  ttl_hours: 6
portal:
  enabled: ${portal}
`;

let e: E2e | undefined;
/** The labs the two students claimed, and their names, in that order (set by the claims test). */
const claimed: { lab: string; name: string }[] = [];

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}

async function signedIn(viewport: { width: number; height: number }, path: string): Promise<Page> {
  const context = await world().newContext({ viewport });
  // 30 labs build on the same machine as the browser (each starting its own web server, two CPU cores shared
  // with another test file): a page may take far longer than the usual 8 s to load.
  context.setDefaultTimeout(45_000);
  const p = await context.newPage();
  await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
  await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  await p.goto(path);
  await p.getByRole("heading", { level: 1, name: WS }).waitFor();
  return p;
}

const hostStates = async (): Promise<string[]> =>
  (await world().api("GET", `/${WS}`)).hostList.map((h: { state: string }) => h.state);

const count = async (p: Page, what: string) =>
  Number(await p.locator(`#live-fleet [data-count="${what}"] strong`).textContent());

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  // An earlier run of the same lab (same source and setup), for the estimate to stand on.
  await e.api("POST", "", { yaml: yaml(WARM, 2, false) });
  await e.api("POST", `/${WARM}/up`);
  await waitFor(
    "the earlier run's labs ready",
    async () => {
      const s = await world().api("GET", `/${WARM}`);
      return s.hostList.length === 2 && s.hostList.every((h: { state: string }) => h.state === "ready")
        ? true
        : undefined;
    },
    60_000,
  );
}, 90_000);

afterAll(async () => {
  await e?.close();
});

describe("the fleet view", () => {
  it("shows 30 labs mid-build with counts, timelines and the ready estimate, and follows them live", async () => {
    // The instructor has the workshop's page open when the 30 labs start.
    await world().api("POST", "", { yaml: yaml(WS, COUNT, true) });
    const p = await signedIn({ width: 1280, height: 900 }, `/console/w/${WS}`);
    await world().api("POST", `/${WS}/up`);
    let seen = "";
    await waitFor(
      "30 labs with some building, on the page",
      async () => {
        await p.reload();
        const rows = await p.locator("#live-hosts tr[data-state]").count();
        const building = await p.locator('#live-hosts tr[data-state="deploying"] svg.timeline g.bar').count();
        seen = `${rows} rows, ${building} building with a phase; states ${(await hostStates()).join(" ")}`;
        return rows === COUNT && building >= 5 ? true : undefined;
      },
      60_000,
    ).catch((err) => {
      throw new Error(`${(err as Error).message} (last seen: ${seen})`);
    });
    // From here on the page is never reloaded: a marker on the window proves it.
    await p.evaluate(() => {
      (globalThis as unknown as { fleetMarker: number }).fleetMarker = 1;
    });
    const estimate = p.locator("#fleet-estimate");
    await waitFor(
      "an estimate on the page",
      async () => ((await estimate.getAttribute("data-kind")) === "estimated" ? true : undefined),
      10_000,
    );
    expect(await p.locator("#fleet-basis").textContent()).toMatch(
      /^from 1 earlier run( and \d+ labs? of this run)?(, at this run's pace \((as fast as|\d+ % (slower|faster) than) the earlier runs, over \d+ phases?\))?$/,
    );
    expect(await estimate.textContent()).toMatch(/still building ready in about \d+ (s|min)/);
    // Both counts from one reading of the page: a live update between two reads would mix two moments.
    const [buildingNow, readyNow] = await p
      .locator("#live-fleet")
      .evaluate((fleet) =>
        ["building", "ready"].map((what) =>
          Number(fleet.querySelector(`[data-count="${what}"] strong`)?.textContent),
        ),
      );
    expect(buildingNow).toBeGreaterThan(0);
    expect((buildingNow ?? 0) + (readyNow ?? 0)).toBe(COUNT);
    // A building lab's timeline: one bar per phase it reported, each named for screen readers. Read from one
    // moment of the page, while it builds: a live update may turn the row ready between two of Playwright's steps.
    // Every lab's setup starts within seconds, so some have reported no phase yet: the first one that has is read.
    const row = await p.locator("#live-hosts").evaluate((hosts) => {
      const tr = hosts.querySelector('tr[data-state="deploying"]:has(svg.timeline g.bar)');
      return {
        id: tr?.id ?? "",
        bar: tr?.querySelector("svg.timeline g.bar")?.getAttribute("aria-label") ?? "",
        timeline: tr?.querySelector("svg.timeline")?.getAttribute("aria-label") ?? "",
        phase: tr?.querySelectorAll("td")[1]?.textContent ?? "",
      };
    });
    const id = row.id;
    expect(id).toMatch(/^host-student-\d\d$/);
    const polls = Number((await p.locator("main").getAttribute("data-polls")) ?? 0);
    expect(row.bar).toMatch(/^student-\d\d: phase prepare, (running for|\d)/);
    expect(row.timeline).toMatch(/timeline: prepare /);
    expect(row.phase).toMatch(/prepare|install|configure|started|sync/);
    await screenshot(p, SHOTS.building);

    const phone = await signedIn({ width: 390, height: 844 }, `/console/w/${WS}`);
    expect(await phone.locator("#live-hosts tr[data-state]").count()).toBe(COUNT);
    // The wide table scrolls inside its own box: the page itself is no wider than the phone.
    const widths = await pageWidths(phone);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    // From inside the page: a live update may replace the element between Playwright's steps.
    await phone.evaluate(`document.getElementById("fleet-estimate").scrollIntoView({ block: "center" })`);
    await screenshot(phone, SHOTS.phone);

    // A lab that was building turns ready on the page without a reload.
    await waitFor(
      `${id} ready on the page`,
      async () => ((await p.locator(`#${id}`).getAttribute("data-state")) === "ready" ? true : undefined),
      45_000,
    );
    expect(await p.locator(`#${id} td`).nth(1).textContent()).toMatch(/^ready/);
    await waitFor(
      "every lab ready",
      async () => ((await hostStates()).every((s) => s === "ready") ? true : undefined),
      45_000,
    );
    await waitFor(
      "every lab ready on the page",
      async () => ((await estimate.getAttribute("data-kind")) === "ready" ? true : undefined),
      10_000,
    );
    expect(await count(p, "ready")).toBe(COUNT);
    expect(await count(p, "building")).toBe(0);
    expect(await p.locator('#live-hosts tr[data-state="ready"]').count()).toBe(COUNT);
    expect(Number(await p.locator("main").getAttribute("data-polls"))).toBeGreaterThan(polls);
    expect(await p.evaluate(() => (globalThis as unknown as { fleetMarker?: number }).fleetMarker)).toBe(1);
    await screenshot(p, SHOTS.ready);
    expect(world().pageErrors.flat()).toEqual([]);
  }, 120_000);

  it("follows claims live in the Claims table, its Move choices and the fleet view's Student column", async () => {
    const code = (await world().api("POST", `/${WS}/portal/open`)).code as string;
    const portal = await signedIn({ width: 1280, height: 900 }, `/console/w/${WS}/portal`);
    const fleet = await signedIn({ width: 1280, height: 900 }, `/console/w/${WS}`);
    expect(await portal.locator("#live-claims").textContent()).toContain("No claims yet.");
    const students = [
      { name: "Maria Salomea Skłodowska-Curie", email: "marie@example.test", pin: "480271" },
      { name: "Chandrasekhara Venkata Raman", email: "raman@example.test", pin: "519305" },
    ];
    const labs: string[] = [];
    for (const s of students) {
      const student = await (await world().newContext({ viewport: { width: 390, height: 844 } })).newPage();
      await claimInBrowser(student, code, s);
      await student.close();
      const row = portal.locator("#live-claims tr", { hasText: s.name });
      await waitFor(
        `${s.name}'s claim in the Claims table`,
        async () => ((await row.count()) === 1 ? true : undefined),
        15_000,
      );
      labs.push(((await row.getAttribute("id")) ?? "").replace(/^claim-/, ""));
      claimed.push({ lab: labs.at(-1) ?? "", name: s.name });
    }
    // Every Move list offers the free labs only: neither claimed lab is among them.
    const choices = await portal.locator("#live-claims select").first().locator("option").allTextContents();
    expect(choices).toHaveLength(COUNT - 2);
    for (const lab of labs) expect(choices).not.toContain(lab);
    // The fleet view names both students, in full.
    for (const [i, s] of students.entries()) {
      await waitFor(
        `${s.name} in the fleet view`,
        async () =>
          (await fleet.locator(`#host-${labs[i]} td.student`).textContent()) === s.name ? true : undefined,
        15_000,
      );
    }
    expect(await count(fleet, "claimed")).toBe(2);
    expect(await count(fleet, "free")).toBe(COUNT - 2);
    await portal.evaluate(`document.getElementById("live-claims").scrollIntoView({ block: "center" })`);
    await screenshot(portal, SHOTS.claims);
    const phone = await signedIn({ width: 390, height: 844 }, `/console/w/${WS}`);
    await phone.evaluate(`document.getElementById("host-${labs[0]}").scrollIntoView({ block: "center" })`);
    await screenshot(phone, SHOTS.phoneClaims);
    expect(world().pageErrors.flat()).toEqual([]);
  }, 120_000);

  it("asks before rebuilding a claimed lab, naming its student, and follows the rebuild live", async () => {
    const [first] = claimed;
    if (!first) throw new Error("the claims test claimed no lab");
    const runsBefore = (await world().api("GET", `/${WS}`)).runs.length;
    const ask = async (p: Page) => {
      await p.locator("#deploy-hosts").fill(first.lab);
      await p.locator("#deploy-force").check();
      await p.locator('form[action$="/deploy"]').getByRole("button", { name: "Deploy" }).click();
      await p.getByRole("heading", { level: 1, name: `Rebuild 1 claimed lab in ${WS}?` }).waitFor();
      expect(await p.getByRole("row", { name: new RegExp(first.lab) }).textContent()).toContain(first.name);
      // No email on the page: the student is named by the name they gave.
      expect(await p.getByText("@example.test").count()).toBe(0);
    };
    const nothingStarted = async () => {
      const s = await world().api("GET", `/${WS}`);
      expect(s.runs.length).toBe(runsBefore);
      expect(s.hostList.find((h: { id: string }) => h.id === first.lab)?.state).toBe("ready");
    };
    const phone = await signedIn(PHONE, `/console/w/${WS}`);
    await ask(phone);
    const widths = await pageWidths(phone);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    await screenshot(phone, SHOTS.phoneRebuildConfirm);
    // Going back starts nothing.
    await phone.getByRole("link", { name: "Cancel", exact: true }).click();
    await phone.getByRole("heading", { level: 1, name: WS }).waitFor();
    await nothingStarted();

    const p = await signedIn(DESKTOP, `/console/w/${WS}`);
    await ask(p);
    await screenshot(p, SHOTS.rebuildConfirm);
    await nothingStarted();
    await p.getByRole("button", { name: "Rebuild 1 claimed lab" }).click();
    await p.waitForURL((u) => u.pathname === `/console/w/${WS}` && u.searchParams.get("notice") === "deploy");
    // The fleet view follows the rebuild without a reload: building, then ready again, still claimed.
    await p.evaluate(() => {
      (globalThis as unknown as { rebuildMarker: number }).rebuildMarker = 1;
    });
    const row = p.locator(`#host-${first.lab}`);
    await waitFor(
      `${first.lab} building on the page`,
      async () => ((await row.getAttribute("data-state")) === "deploying" ? true : undefined),
      20_000,
    );
    expect(await count(p, "building")).toBe(1);
    expect(await row.locator("td.student").textContent()).toBe(first.name);
    // Scrolled by the page itself: a live update may replace the row while a locator scrolls to it.
    const show = (page: Page) =>
      page.evaluate(`document.getElementById("host-${first.lab}").scrollIntoView({ block: "center" })`);
    await show(p);
    await screenshot(p, SHOTS.rebuilding);
    const phoneNow = await signedIn(PHONE, `/console/w/${WS}`);
    await show(phoneNow);
    await screenshot(phoneNow, SHOTS.phoneRebuilding);
    await waitFor(
      `${first.lab} ready again on the page`,
      async () => ((await row.getAttribute("data-state")) === "ready" ? true : undefined),
      45_000,
    );
    expect(await count(p, "ready")).toBe(COUNT);
    expect(await p.evaluate(() => (globalThis as unknown as { rebuildMarker?: number }).rebuildMarker)).toBe(
      1,
    );
    // Only that lab was rebuilt: the deploy's run names one host.
    const s = await world().api("GET", `/${WS}`);
    expect(s.runs.length).toBe(runsBefore + 1);
    expect(world().pageErrors.flat()).toEqual([]);
  }, 120_000);

  it("runs a command on all 30 labs from the console, asking first for the claimed ones", async () => {
    const command = 'echo "hi from $(basename "$PWD")"';
    const run = async (p: Page, confirmShot: string, resultsShot: string) => {
      await p.getByLabel("Command (bash, on each host)").fill(command);
      await p.locator('form[action$="/exec"]').getByRole("button", { name: "Run" }).click();
      await p.getByRole("heading", { level: 1, name: "Run on 2 claimed labs?" }).waitFor();
      const named = await p.locator("main li").allTextContents();
      for (const c of claimed) expect(named).toContain(`${c.lab}: ${c.name}`);
      let widths = await pageWidths(p);
      expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
      await screenshot(p, confirmShot);
      await p.getByRole("button", { name: `Run on ${COUNT} hosts` }).click();
      await p.getByRole("heading", { level: 1, name: `Command on ${WS}` }).waitFor({ timeout: 30_000 });
      // The page follows the job live until it has ended.
      await p
        .locator(
          '#exec-summary:is([data-state="succeeded"], [data-state="failed"], [data-state="cancelled"])',
        )
        .waitFor({ timeout: 60_000 });
      expect((await p.locator("#exec-summary").textContent())?.trim()).toBe(`${COUNT} ok`);
      expect(await p.locator("#exec-results tr").count()).toBe(COUNT);
      for (let i = 1; i <= COUNT; i++) {
        const host = `student-${String(i).padStart(2, "0")}`;
        const row = p.locator(`#exec-results tr[data-host="${host}"]`);
        expect(await row.getAttribute("data-status"), host).toBe("ok");
        expect(await row.locator("td").nth(1).textContent(), host).toBe("0");
        expect(await row.locator("pre").textContent(), host).toBe(`hi from ${host}\n`);
      }
      widths = await pageWidths(p);
      expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
      await screenshot(p, resultsShot);
    };
    await run(await signedIn(DESKTOP, `/console/w/${WS}`), SHOTS.execConfirm, SHOTS.execResults);
    await run(await signedIn(PHONE, `/console/w/${WS}`), SHOTS.phoneExecConfirm, SHOTS.phoneExecResults);
    // The activity says who ran it on how many labs, and the summary.
    const events = (await world().api("GET", `/${WS}/events`)).events as {
      type: string;
      detail: Record<string, unknown>;
    }[];
    const ran = events.filter((ev) => ev.type === "exec");
    expect(ran).toHaveLength(2);
    expect(ran.at(-1)?.detail).toMatchObject({ hosts: COUNT, summary: `${COUNT} ok` });
    expect(world().pageErrors.flat()).toEqual([]);
  }, 120_000);

  it("asks for the workshop's name before tearing it down, and refuses a wrong one", async () => {
    for (const [viewport, shot] of [
      [DESKTOP, SHOTS.downRefused],
      [PHONE, SHOTS.phoneDownRefused],
    ] as const) {
      const p = await signedIn(viewport, `/console/w/${WS}`);
      await p.getByRole("link", { name: "Tear down…" }).click();
      await p.getByRole("heading", { level: 1, name: `Tear down ${WS}?` }).waitFor();
      await p.getByLabel(`Type ${WS} to confirm`).fill(`${WS}-typo`);
      const [answer] = await Promise.all([
        p.waitForResponse(
          (r) => r.url().endsWith(`/console/w/${WS}/teardown`) && r.request().method() === "POST",
        ),
        p.getByRole("button", { name: `Tear down ${WS}` }).click(),
      ]);
      expect(answer.status()).toBe(400);
      await p.getByText(`That is not the workshop's name: type ${WS} exactly.`).waitFor();
      const widths = await pageWidths(p);
      expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
      await screenshot(p, shot);
    }
    // Nothing was torn down: every lab is ready, both claims stand.
    const s = await world().api("GET", `/${WS}`);
    expect(s.state).not.toMatch(/tearing_down|torn_down/);
    expect((await hostStates()).filter((st) => st === "ready")).toHaveLength(COUNT);
    expect(s.runs.some((r: { kind: string }) => r.kind === "teardown")).toBe(false);
    expect((await world().api("GET", `/${WS}/portal/status`)).claims).toHaveLength(2);
    expect(world().pageErrors.flat()).toEqual([]);
  }, 120_000);
});
