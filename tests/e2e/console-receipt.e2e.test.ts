import { type ChildProcess, spawn } from "node:child_process";
import { mkdirSync, readlinkSync } from "node:fs";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The teardown receipt in the console, in headless Chromium against the local runtime: the instructor tears a
 * workshop down from its page (typing its name), and the torn-down workshop's page shows the receipt: the
 * host-hours at no cost, the host folder and the process left on purpose with the commands that remove them,
 * and what was removed. On a desktop and on a 390 px phone, where the tables scroll inside their own box.
 */

const WS = "rcptws";
const SHOTS = { desktop: "receipt-01-torn-down-desktop", phone: "receipt-02-torn-down-phone" } as const;

let e: E2e | undefined;
let stray: ChildProcess | undefined;
let strayDir = "";

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}

async function signedIn(viewport: { width: number; height: number }): Promise<Page> {
  const p = await (await world().newContext({ viewport })).newPage();
  await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
  await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  return p;
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  await readyWorkshop(e, WS, workshopYaml({ name: WS, count: 2 }), 2);
  // Left on purpose: a folder the workshop's records do not know, with a process running in it.
  strayDir = e.rt.provider.hostDir(WS, "student-99");
  mkdirSync(strayDir, { recursive: true });
  stray = spawn("sleep", ["600"], { cwd: strayDir, stdio: "ignore" });
  await waitFor("the stray process", () => readlinkSync(`/proc/${stray?.pid}/cwd`) === strayDir || undefined);
}, 90_000);

afterAll(async () => {
  if (stray && stray.exitCode === null) stray.kill("SIGKILL");
  await e?.close();
});

describe("the teardown receipt in the console", () => {
  it("shows what is left with the commands that remove it, what was removed and the host-hours", async () => {
    const p = await signedIn({ width: 1280, height: 900 });
    await p.goto(`/console/w/${WS}`);
    expect(await p.locator("#receipt").count()).toBe(0); // not torn down: no receipt
    await p.getByRole("link", { name: "Tear down…" }).click();
    await p.getByLabel(`Type ${WS} to confirm`).fill(WS);
    await p.getByRole("button", { name: `Tear down ${WS}`, exact: true }).click();
    await p.locator("#live-summary").getByText("torn down").waitFor({ timeout: 30_000 });
    await p.reload();
    const receipt = p.locator("#receipt");
    await receipt.getByRole("heading", { level: 2, name: "Teardown receipt" }).waitFor();
    await receipt.getByText(/Used: \d+\.\d\d host-hours on 2 hosts, \$0\.00/).waitFor();
    await receipt.getByText("(local hosts cost nothing)").waitFor();
    const left = receipt.getByRole("table", { name: "Left (2)" });
    await left.getByRole("row", { name: new RegExp(`process ${stray?.pid} student-99`) }).waitFor();
    await left.getByText(`kill ${stray?.pid}`, { exact: true }).waitFor();
    await left.getByText(`rm -rf '${strayDir}'`, { exact: true }).waitFor();
    const removed = receipt.getByRole("table", { name: "Removed (4)" });
    for (const h of ["student-01", "student-02"])
      await removed.getByText(world().rt.provider.hostDir(WS, h), { exact: true }).waitFor();
    await removed.getByRole("row", { name: /^portal/ }).waitFor();
    await p
      .locator("#live-activity")
      .getByText(/^Teardown receipt: 2 things left \(process \d+, host-folder .*student-99\)/)
      .waitFor();
    await receipt.scrollIntoViewIfNeeded();
    await screenshot(p, SHOTS.desktop);
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("fits a 390 px phone: the receipt's tables scroll inside their own box", async () => {
    const p = await signedIn({ width: 390, height: 844 });
    await p.goto(`/console/w/${WS}`);
    await p.locator("#receipt").getByRole("heading", { name: "Teardown receipt" }).waitFor();
    const widths = await pageWidths(p);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    // A command is never broken across lines: its table scrolls instead.
    const command = p.locator("#receipt code", { hasText: `rm -rf '${strayDir}'` });
    const box = await command.boundingBox();
    expect(box?.height).toBeLessThan(30);
    await p.locator("#receipt").scrollIntoViewIfNeeded();
    await screenshot(p, SHOTS.phone);
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
