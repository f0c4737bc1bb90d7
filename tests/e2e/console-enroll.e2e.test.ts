import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { type E2e, startE2e } from "../harness/e2e.ts";
import { workshopYaml } from "../harness/runtime.ts";

/**
 * The console's enrollment page in headless Chromium against the local runtime: make a join token (shown once,
 * with the line to run), see a machine that joined with it wait, approve it, reject another, revoke the token.
 * On a desktop and at 390 px, with screenshots.
 */

const WS = "enrollws";
const SHOTS = {
  made: "enroll-01-token-desktop",
  pending: "enroll-02-pending-desktop",
  approved: "enroll-03-approved-desktop",
  phoneMade: "enroll-04-token-phone",
  phonePending: "enroll-05-pending-phone",
} as const;

let e: E2e | undefined;
const world = (): E2e => {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
};

async function enrollPage(viewport: { width: number; height: number }): Promise<Page> {
  const p = await (await world().newContext({ viewport })).newPage();
  await p.goto(`/console#token=${encodeURIComponent(world().rt.token)}`);
  await p.getByRole("heading", { level: 1, name: "Workshops" }).waitFor();
  await p.goto(`/console/w/${WS}`);
  await p.getByRole("link", { name: "Enrollment" }).click();
  await p.getByRole("heading", { level: 2, name: "Join tokens" }).waitFor();
  return p;
}

async function makeToken(
  p: Page,
  uses: string,
  approve: "auto" | "manual",
): Promise<{ token: string; line: string }> {
  await p.getByLabel("Machines that may join with it").fill(uses);
  await p.getByLabel("Expires after (hours)").fill("4");
  await p.getByLabel("Hosts that join").selectOption(approve);
  await p.getByRole("button", { name: "Make join token" }).click();
  await p.getByRole("heading", { level: 1, name: `Join token for ${WS}` }).waitFor();
  const token = await p.getByLabel("The join token").inputValue();
  const line = (await p.locator("#join-command").textContent()) ?? "";
  return { token, line };
}

async function machineJoins(token: string, name: string): Promise<string> {
  const res = await fetch(`${world().rt.url}/agent/v1/enroll`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      token,
      name,
      facts: { hostname: name, os: "Ubuntu 24.04", cpus: 8, memoryMb: 16384 },
    }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { hostId: string }).hostId;
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  await e.api("POST", "", { yaml: workshopYaml({ name: WS, count: 1 }) });
}, 90_000);

afterAll(async () => {
  await e?.close();
});

describe("the console's enrollment page", () => {
  it("makes a join token shown once, then approves a machine that joined with it", async () => {
    const p = await enrollPage({ width: 1280, height: 900 });
    expect(await p.locator("#live-pending").textContent()).toContain("No machine waits for approval.");
    const { token, line } = await makeToken(p, "2", "manual");
    expect(token).toMatch(/^lfj_enrollws_[A-Za-z0-9_-]{43}$/);
    expect(line).toBe(
      `curl -fsSL ${world().rt.url}/agent/v1/agent.sh | LABFLEET_JOIN_TOKEN=${token} bash -s -- join ${world().rt.url}`,
    );
    expect(p.url()).not.toContain(token);
    await screenshot(p, SHOTS.made);

    // Shown once: the page listing the tokens never holds it.
    await p.getByRole("link", { name: "Back to enrollment" }).click();
    await p.getByRole("heading", { level: 2, name: "Join tokens" }).waitFor();
    expect(await p.content()).not.toContain(token);
    const row = p.locator('tr[id^="jtk-"]').first();
    expect((await row.locator("td").allTextContents()).slice(0, 3)).toEqual([
      "active",
      "0/2",
      "by an instructor",
    ]);

    const hostId = await machineJoins(token, "Lab Mac");
    expect(hostId).toBe("lab-mac");
    await p.reload();
    const pending = p.locator(`#pending-${hostId}`);
    expect(await pending.locator("td").first().textContent()).toBe(
      "Lab Mac · Ubuntu 24.04 · 8 CPUs · 16.0 GiB",
    );
    await screenshot(p, SHOTS.pending);
    await pending.getByRole("button", { name: `Approve ${hostId}` }).click();
    await p.getByText("The host was approved: it may be given work from now on.").waitFor();
    expect(await p.locator("#live-pending").textContent()).toContain("No machine waits for approval.");
    expect(await p.locator('tr[id^="jtk-"]').first().locator("td").nth(4).textContent()).toBe("lab-mac");
    await screenshot(p, SHOTS.approved);
    const host = await world().api("GET", `/${WS}`);
    expect(host.hostList.map((h: { id: string }) => h.id)).toContain("lab-mac");
    const approvedHost = (await world().rt.store.host.get({ workshop: WS, hostId }).go()).data;
    expect(approvedHost?.enrollment).toBe("approved");
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("rejects a pending machine after asking, and revokes the token", async () => {
    const p = await enrollPage({ width: 1280, height: 900 });
    const made = await world().api("POST", `/${WS}/join-tokens`, { uses: 1, approve: "manual" });
    const hostId = await machineJoins(made.token, "Unknown Box");
    await p.reload();
    await p.getByRole("button", { name: `Reject ${hostId}` }).click();
    await p.getByRole("heading", { level: 1, name: `Reject ${hostId}?` }).waitFor();
    await p.getByRole("button", { name: `Reject ${hostId}` }).click();
    await p.getByText("The host was rejected: it was removed and its signing secret dropped.").waitFor();
    expect((await world().rt.store.host.get({ workshop: WS, hostId }).go()).data).toBeNull();

    const first = p.locator('tr[id^="jtk-"]').filter({ hasText: "active" }).first();
    const id = (await first.getAttribute("id"))?.replace(/^jtk-/, "") as string;
    await first.getByRole("button", { name: `Revoke the join token ${id}` }).click();
    await p.getByText("The join token was revoked").waitFor();
    expect(await p.locator(`#jtk-${id} td`).first().textContent()).toBe("revoked");
    expect(world().pageErrors.flat()).toEqual([]);
  });

  it("fits a 390 px phone: the made token and the page with a pending machine", async () => {
    const p = await enrollPage({ width: 390, height: 844 });
    const { token } = await makeToken(p, "1", "manual");
    let w = await pageWidths(p);
    expect(w.scrollWidth).toBeLessThanOrEqual(390);
    await screenshot(p, SHOTS.phoneMade);
    await machineJoins(token, "Student Laptop With A Long Name");
    await p.goto(`/console/w/${WS}/enroll`);
    await p.locator("#pending-student-laptop-with-a-long-name").waitFor();
    w = await pageWidths(p);
    expect(w.scrollWidth).toBeLessThanOrEqual(390);
    await screenshot(p, SHOTS.phonePending);
  });

  it("says what is wrong with the form, and makes nothing", async () => {
    const p = await enrollPage({ width: 1280, height: 900 });
    const before = (await world().api("GET", `/${WS}/join-tokens`)).joinTokens.length;
    await p.getByLabel("Machines that may join with it").evaluate((el) => el.removeAttribute("max"));
    await p.getByLabel("Machines that may join with it").fill("5000");
    await p.getByRole("button", { name: "Make join token" }).click();
    await p.locator("#join-token-errors").waitFor();
    expect(await p.locator("#join-token-errors li").allTextContents()).toEqual([
      "Machines: expected a whole number from 1 to 1000",
    ]);
    expect((await world().api("GET", `/${WS}/join-tokens`)).joinTokens.length).toBe(before);
  });
});
