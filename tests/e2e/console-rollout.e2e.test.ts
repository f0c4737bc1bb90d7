import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { git } from "../harness/git-http.ts";
import { makeRolloutLab, type RolloutLab, rolloutYaml } from "../harness/rollout-lab.ts";
import { waitFor } from "../harness/runtime.ts";

/**
 * Rollouts from the console in headless Chromium, on local labs of the rollout lab (`v2` a good ref, `broken`
 * one whose setup fails, `gated` one that builds until the test lets it): Check, then Roll out with the
 * confirmation that names the claimed lab, and the rollout region followed live to its end; a canary that fails,
 * with its log and Resume (after a fix pushed to the ref); Abort; and the Check button of Deploy. On a desktop
 * and on a 390 px phone, which never scrolls sideways.
 */

const WS = "rollui";
const SHOTS = {
  check: "rollout-01-check-desktop",
  confirm: "rollout-02-confirm-desktop",
  running: "rollout-03-running-desktop",
  done: "rollout-04-completed-desktop",
  donePhone: "rollout-05-completed-phone",
  halted: "rollout-06-halted-desktop",
  haltedPhone: "rollout-07-halted-phone",
  deployCheck: "rollout-08-deploy-check-desktop",
  checkPhone: "rollout-09-check-phone",
} as const;
const DESKTOP = { width: 1280, height: 900 };
const PHONE = { width: 390, height: 844 };

let e: E2e | undefined;
let lab: RolloutLab;

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

async function expectNoOverflow(p: Page) {
  const w = await pageWidths(p);
  expect(w.scrollWidth).toBeLessThanOrEqual(w.innerWidth);
}

const region = (p: Page) => p.locator("#live-rollout section.rollout");
/** Which machine a lab is on now (shared/fleet/machines.ts): its id, or the one a rollout built beside it. */
const machineOf = async (hostId: string) =>
  (await world().rt.store.host.get({ workshop: WS, hostId }).go()).data?.machine ?? hostId;
const rowState = (p: Page, host: string) =>
  p.locator(`#rollout-hosts tr[data-host="${host}"]`).getAttribute("data-state");
const cells = async (p: Page, host: string) =>
  (await p.locator(`#rollout-hosts tr[data-host="${host}"]`).locator("th, td").allTextContents()).map((t) =>
    t.trim(),
  );

/** Polls the page (which is never reloaded) until the region says `state`; returns every state it saw. */
async function follow(p: Page, state: string, hosts: string[] = []) {
  const seen = { rollout: new Set<string>(), hosts: new Map<string, Set<string>>() };
  await waitFor(
    `the rollout region to say ${state}`,
    async () => {
      const s = (await region(p).getAttribute("data-state")) ?? "";
      seen.rollout.add(s);
      for (const h of hosts) {
        const hs = (await rowState(p, h)) ?? "";
        seen.hosts.set(h, (seen.hosts.get(h) ?? new Set()).add(hs));
      }
      return s === state ? true : undefined;
    },
    120_000,
  );
  return seen;
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  lab = makeRolloutLab();
  e = await startE2e();
  const code = await readyWorkshop(e, WS, rolloutYaml(WS, lab.source, 3), 3);
  const student = await (await e.newContext()).newPage();
  await claimInBrowser(student, code, { name: "Ada Lovelace", email: "ada@example.test", pin: "271828" });
}, 150_000);

afterAll(async () => {
  await e?.close();
  lab?.remove();
});

describe("rollouts from the console", { timeout: 240_000 }, () => {
  it("checks, asks naming the claimed lab, starts a rollout and follows it live to completion", async () => {
    const p = await workshopPage(DESKTOP);
    const form = p.locator("#rollout-form");
    await p.locator("#rollout-ref").fill("v2");
    await p.locator("#rollout-batch").fill("1");
    await p.locator("#rollout-claimed").check();
    await form.getByRole("button", { name: "Check", exact: true }).click();

    // Check: what it would do per lab, and nothing changed.
    await p.getByRole("heading", { level: 1, name: `Check: a rollout of ${WS} to v2` }).waitFor();
    expect((await p.locator("#check-summary").textContent())?.trim()).toMatch(
      /^3 changes on 3 hosts\. Nothing was changed/,
    );
    expect(await p.locator("#check-items tr[data-action=promote]").count()).toBe(3);
    expect(await p.locator('#check-items tr[data-host="student-01"] td.what').textContent()).toMatch(
      /batch 2: a new host at v2 beside it \(now main\), promoted once lab\.health passes; Ada Lovelace is told before and after/,
    );
    await screenshot(p, SHOTS.check);
    expect((await world().api("GET", `/${WS}`)).runs.map((r: { kind: string }) => r.kind)).toEqual(["up"]);
    await p.getByRole("link", { name: "Back" }).click();

    // Roll out: the confirmation names the claimed lab and its student, and wants the workshop's name.
    await p.locator("#rollout-ref").fill("v2");
    await p.locator("#rollout-batch").fill("1");
    await p.locator("#rollout-claimed").check();
    await form.getByRole("button", { name: "Roll out…" }).click();
    await p.getByRole("heading", { level: 1, name: "Roll v2 out to 3 labs, 1 of them claimed?" }).waitFor();
    expect(await p.locator("#rollout-claimed-count").textContent()).toContain(
      "1 claimed lab would be touched",
    );
    expect(
      await p
        .getByRole("table", { name: "Claimed labs this rollout updates" })
        .locator("tbody tr")
        .allTextContents(),
    ).toEqual(["student-01Ada Lovelacebatch 2"]);
    await p.getByLabel(`Type ${WS} to confirm`).fill(WS);
    await screenshot(p, SHOTS.confirm);
    await p.getByRole("button", { name: "Update 3 labs, 1 claimed" }).click();

    // Back on the workshop page, which follows the rollout live without a reload.
    await p.waitForURL(new RegExp(`/console/w/${WS}\\?notice=rollout$`));
    await p.evaluate("window.__notReloaded = true");
    await region(p).waitFor();
    await screenshot(p, SHOTS.running);
    const seen = await follow(p, "completed", ["student-01", "student-02"]);
    expect(await p.evaluate("window.__notReloaded")).toBe(true);
    expect(seen.rollout.has("running")).toBe(true);
    // The claimed lab goes last: it was seen waiting while others went first.
    expect(seen.hosts.get("student-01")?.has("pending")).toBe(true);
    for (const h of ["student-01", "student-02", "student-03"]) {
      const [lab, batch, from, to, stage, gate] = await cells(p, h);
      expect({ lab, from, to, stage, gate }).toEqual({
        lab: h,
        from: "main",
        to: "v2",
        stage: "gate passed, promoted",
        gate: "passed",
      });
      expect(batch).toBe(h === "student-02" ? "canary" : h === "student-03" ? "batch 1" : "batch 2");
    }
    expect(await p.locator('#rollout-hosts tr[data-host="student-01"] td.student').textContent()).toBe(
      "Ada Lovelace",
    );
    expect(await p.locator("#rollout-summary").textContent()).toContain("3/3 labs on v2");
    expect(await region(p).getByRole("button").count()).toBe(0);
    await screenshot(p, SHOTS.done);

    const phone = await workshopPage(PHONE);
    await region(phone).waitFor();
    await expectNoOverflow(phone);
    await screenshot(phone, SHOTS.donePhone);
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("a failing canary halts: the page shows its log and Resume, which completes after a fix", async () => {
    const p = await workshopPage(DESKTOP);
    await p.locator("#rollout-ref").fill("broken");
    await p.locator("#rollout-form").getByRole("button", { name: "Roll out…" }).click();
    // Without include-claimed: the claimed lab is left alone, and said so.
    await p.getByRole("heading", { level: 1, name: "Roll broken out to 2 labs?" }).waitFor();
    expect(await p.locator("#rollout-claimed-count").textContent()).toContain(
      "1 claimed lab stays as it is (student-01: Ada Lovelace)",
    );
    await p.getByRole("button", { name: "Start the rollout" }).click();
    await p.waitForURL(/notice=rollout$/);
    await follow(p, "halted");

    const halt = p.locator("#rollout-halt");
    expect(await halt.getAttribute("role")).toBe("alert");
    expect(await halt.textContent()).toContain("The rollout halted: student-02 failed the update to broken.");
    expect(await halt.textContent()).toContain("then press Resume");
    expect(await cells(p, "student-02")).toEqual([
      "student-02",
      "canary",
      "v2",
      "broken",
      "build failed",
      "—",
      "",
    ]);
    expect(await rowState(p, "student-03")).toBe("pending");
    expect(await p.locator('#rollout-hosts tr[data-host="student-01"]').count()).toBe(0);
    const failure = p.locator('[data-failure="student-02"]');
    expect(await failure.locator("pre.log-tail").textContent()).toContain("broken build of version 3");
    expect(await failure.locator("pre.error").textContent()).toContain("setup exited with code 1");
    const resume = region(p).getByRole("button", { name: "Resume rollout" });
    await resume.waitFor();
    expect(await region(p).getByRole("button", { name: "Abort rollout…" }).count()).toBe(0);
    await screenshot(p, SHOTS.halted);
    // Nothing else changed: every lab is still ready on v2, student-02 on its machine of the first rollout; the
    // canary's new machine (beside it, in the lab's first folder) was removed.
    for (const h of (await world().api("GET", `/${WS}`)).hostList as { id: string; state: string }[])
      expect(h.state).toBe("ready");
    expect(await machineOf("student-02")).toBe("student-02.b");
    expect(existsSync(join(world().rt.dataDir, "hosts", WS, "student-02.b"))).toBe(true);
    expect(existsSync(join(world().rt.dataDir, "hosts", WS, "student-02"))).toBe(false);

    const phone = await workshopPage(PHONE);
    await phone.locator('[data-failure="student-02"] pre.log-tail').waitFor();
    await expectNoOverflow(phone);
    await screenshot(phone, SHOTS.haltedPhone);

    // The fix is pushed to the ref; Resume tries the failed canary again, then the batch not reached.
    git(lab.dir, "checkout", "-q", "broken");
    git(lab.dir, "checkout", "v2", "--", "setup.sh");
    git(lab.dir, "commit", "-q", "--no-gpg-sign", "-am", "fix the broken build");
    git(lab.dir, "checkout", "-q", "main");
    await resume.click();
    await p.waitForURL(/notice=rollout-resumed$/);
    await follow(p, "completed");
    expect(await cells(p, "student-02")).toEqual([
      "student-02",
      "canary",
      "v2",
      "broken",
      "gate passed, promoted",
      "passed",
      "",
    ]);
    expect(await rowState(p, "student-03")).toBe("promoted");
    expect(await p.locator("[data-failure]").count()).toBe(0);
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("Abort stops a running rollout after asking, and removes its new host", async () => {
    const p = await workshopPage(DESKTOP);
    await p.locator("#rollout-ref").fill("gated");
    await p.locator("#rollout-form").getByRole("button", { name: "Roll out…" }).click();
    await p.getByRole("button", { name: "Start the rollout" }).click();
    await p.waitForURL(/notice=rollout$/);
    // The canary's new machine is built beside its current one (student-02 since the resumed rollout), and waits.
    expect(await machineOf("student-02")).toBe("student-02");
    const candidate = join(world().rt.dataDir, "hosts", WS, "student-02.b");
    const seen = await waitFor(
      "the canary to build",
      async () =>
        (await rowState(p, "student-02")) === "building" && existsSync(join(candidate, "builds"))
          ? true
          : undefined,
      60_000,
    );
    expect(seen).toBe(true);
    await region(p).getByRole("button", { name: "Abort rollout…" }).click();
    await p.getByRole("heading", { level: 1, name: `Abort the rollout of ${WS} to gated?` }).waitFor();
    expect(await p.locator("#abort-what").textContent()).toContain(
      "The new hosts still building (student-02) are removed",
    );
    await p.getByRole("button", { name: "Abort the rollout" }).click();
    await p.waitForURL(/notice=rollout-aborted$/);
    expect(await region(p).getAttribute("data-state")).toBe("aborted");
    expect((await cells(p, "student-02"))[4]).toBe("stopped by abort");
    await region(p).getByRole("button", { name: "Resume rollout" }).waitFor();
    const host = (await world().api("GET", `/${WS}`)).hostList.find(
      (h: { id: string }) => h.id === "student-02",
    );
    expect(host).toMatchObject({ state: "ready" });
    // The new host is gone, folder and record: the lab is on the machine it was on, at the ref it was at.
    expect(existsSync(candidate)).toBe(false);
    expect(await machineOf("student-02")).toBe("student-02");
    const rec = (await world().rt.store.host.get({ workshop: WS, hostId: "student-02" }).go()).data;
    expect(rec).toMatchObject({
      ref: "broken",
      address: join(world().rt.dataDir, "hosts", WS, "student-02"),
    });
    expect(readFileSync(join(rec?.address as string, "lab", "VERSION"), "utf8").trim()).toBe("2");
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("the Deploy form's Check button shows what a deploy would do, per host, changing nothing", async () => {
    const p = await workshopPage(DESKTOP);
    const deploy = p.locator('form[action$="/deploy"]');
    await p.locator("#deploy-hosts").fill("student-02 student-03");
    await p.locator("#deploy-force").check();
    await deploy.getByRole("button", { name: "Check", exact: true }).click();
    await p.getByRole("heading", { level: 1, name: `Check: deploy of ${WS}` }).waitFor();
    expect((await p.locator("#check-summary").textContent())?.trim()).toMatch(
      /^2 changes on 2 hosts and 1 to the workshop \(publish\)\. Nothing was changed/,
    );
    expect(
      await p
        .locator("#check-items tr[data-stage=deploy]")
        .evaluateAll((rows) =>
          rows.map((r) => `${r.getAttribute("data-host")} ${r.getAttribute("data-action")}`),
        ),
    ).toEqual(["student-02 rebuild", "student-03 rebuild"]);
    await screenshot(p, SHOTS.deployCheck);
    // On a phone, the report's table scrolls inside its box: the page never scrolls sideways.
    const phone = await workshopPage(PHONE);
    await phone.locator("#rollout-ref").fill("v2");
    await phone.locator("#rollout-form").getByRole("button", { name: "Check", exact: true }).click();
    await phone.getByRole("heading", { level: 1, name: `Check: a rollout of ${WS} to v2` }).waitFor();
    await expectNoOverflow(phone);
    await screenshot(phone, SHOTS.checkPhone);
    const runs = (await world().api("GET", `/${WS}`)).runs.map((r: { kind: string }) => r.kind);
    expect(runs.filter((k: string) => k === "deploy")).toEqual([]);
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
