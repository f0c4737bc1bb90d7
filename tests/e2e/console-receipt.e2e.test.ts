import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdirSync, readlinkSync, rmSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The teardown receipt in the console, in headless Chromium against the local runtime: the instructor tears a
 * workshop down from its page (typing its name); while the teardown runs the page says so, and the receipt
 * appears when it is taken, without a reload (the `live-receipt` region). It shows the
 * host-hours at no cost, the host folder and the process left on purpose with the commands that remove them,
 * and what was removed. On a desktop and on a 390 px phone, where the tables scroll inside their own box.
 */

const WS = "rcptws";
const SHOTS = {
  progress: "receipt-00-tearing-down-desktop",
  desktop: "receipt-01-torn-down-desktop",
  phone: "receipt-02-torn-down-phone",
} as const;

let e: E2e | undefined;
let stray: ChildProcess | undefined;
let strayDir = "";
let holdStop: { release(): void } | undefined;

/**
 * Holds the teardown at one host's lab stop until released: the lab's pid file becomes a FIFO, which the stop
 * script's read waits on until the test writes to it.
 */
function holdLabStop(hostDir: string, workshop: string): { release(): void } {
  const pid = join(hostDir, ".labfleet", workshop, "pid");
  rmSync(pid, { force: true });
  execFileSync("mkfifo", [pid]);
  return { release: () => void writeFile(pid, "\n").catch(() => undefined) };
}

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
  holdStop = holdLabStop(e.rt.provider.hostDir(WS, "student-01"), WS);
}, 90_000);

afterAll(async () => {
  holdStop?.release();
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
    // While the teardown runs (held at student-01's lab stop), the page says so where the receipt will be.
    await p
      .locator("#receipt-progress")
      .getByText(/^Tearing down since .*the 2 hosts back/)
      .waitFor();
    await screenshot(p, SHOTS.progress);
    const polls = Number(await p.locator("main").getAttribute("data-polls"));
    // A mark a reload would lose.
    await p.evaluate(`document.body.setAttribute("data-mark", "same page")`);
    holdStop?.release();
    // The receipt appears without a reload, once the teardown has taken it.
    const receipt = p.locator("#live-receipt #receipt");
    await receipt.getByText(/Used: \d+\.\d\d host-hours on 2 hosts, \$0\.00/).waitFor({ timeout: 30_000 });
    await receipt.getByRole("heading", { level: 2, name: "Teardown receipt" }).waitFor();
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
    expect(await p.locator("#receipt-progress").count()).toBe(0);
    // It came by a live update: the page polled since, and was never loaded again.
    expect(Number(await p.locator("main").getAttribute("data-polls"))).toBeGreaterThan(polls);
    expect(await p.locator("body").getAttribute("data-mark")).toBe("same page");
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
