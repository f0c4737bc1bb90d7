import type { Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, pageWidths, screenshot } from "../harness/browser.ts";
import { type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";
import { waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The console's Scale up in headless Chromium against the local runtime: the instructor asks for more hosts on
 * the workshop's page, the next page says what will happen ("adds 2 labs (2 → 4)"), and once confirmed the
 * page follows the new labs until they are ready; a count that is not more is refused with the way to remove
 * labs. On a desktop and on a phone.
 */

const WS = "scalews";
const SHOTS = {
  form: "scale-01-form-desktop",
  confirm: "scale-02-confirm-desktop",
  done: "scale-03-done-desktop",
  refused: "scale-04-refused-desktop",
  phoneForm: "scale-05-form-phone",
  phoneConfirm: "scale-06-confirm-phone",
  phoneDone: "scale-07-done-phone",
} as const;

let e: E2e | undefined;

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

const readyHosts = async () =>
  (await world().api("GET", `/${WS}`)).hostList.filter((h: { state: string }) => h.state === "ready").length;

/** The page's live hosts table shows every one of these hosts ready. */
const allReadyOnPage = (p: Page, n: number) =>
  waitFor(
    `${n} ready hosts on the page`,
    async () => ((await p.locator('#live-hosts tr[data-state="ready"]').count()) === n ? true : undefined),
    30_000,
  );

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  await readyWorkshop(e, WS, workshopYaml({ name: WS, count: 2 }), 2);
}, 60_000);

afterAll(async () => {
  await e?.close();
});

describe("scaling up from the console", () => {
  it("asks for the new count, says what it adds, and follows the new labs to ready", async () => {
    const p = await workshopPage({ width: 1280, height: 900 });
    const form = p.locator('form[action$="/scale"]');
    const count = p.getByLabel("Hosts to have (now 2, at most 500)");
    expect(await count.inputValue()).toBe("3");
    await count.fill("4");
    await form.scrollIntoViewIfNeeded();
    await screenshot(p, SHOTS.form);

    await p.getByRole("button", { name: "Scale up…" }).click();
    await p.getByRole("heading", { level: 1, name: `Scale ${WS} up to 4 hosts?` }).waitFor();
    expect((await p.locator("#scale-what").textContent())?.trim()).toBe(
      "Adds 2 labs (2 → 4): student-03, student-04.",
    );
    // Nothing happened yet: the confirmation only says what will.
    expect((await world().api("GET", `/${WS}`)).spec.provider.count).toBe(2);
    await screenshot(p, SHOTS.confirm);

    await p.getByRole("button", { name: "Add 2 labs" }).click();
    await p.waitForURL((u) => u.pathname === `/console/w/${WS}` && u.search === "?notice=scale");
    await p.getByText("Scale up started: the new hosts are provisioned").waitFor();
    await allReadyOnPage(p, 4);
    // The run ends once its last poll has recorded the new labs' builds: moments after the page shows them ready.
    const s = await waitFor("the scale run to succeed", async () => {
      const w = await world().api("GET", `/${WS}`);
      return w.runs[0]?.state === "running" ? undefined : w;
    });
    expect(s.spec.provider.count).toBe(4);
    expect(s.runs[0]).toMatchObject({ kind: "scale", state: "succeeded" });
    // The activity list says what the run did.
    await p
      .getByText("bootstrap token started a scale-up (2 → 4 hosts) on student-03, student-04.")
      .waitFor();
    await screenshot(p, SHOTS.done);
  });

  it("refuses a count that is not more, naming down --unclaimed", async () => {
    const p = await workshopPage({ width: 1280, height: 900 });
    // The browser would stop a number under the field's minimum; the server refuses it too.
    await p.evaluate(`document.querySelector('form[action$="/scale"]').noValidate = true`);
    await p.getByLabel(/^Hosts to have/).fill("3");
    const [answer] = await Promise.all([
      p.waitForResponse((r) => r.url().endsWith(`/console/w/${WS}/scale`)),
      p.getByRole("button", { name: "Scale up…" }).click(),
    ]);
    expect(answer.status()).toBe(400);
    await p.getByRole("heading", { name: "That did not work" }).waitFor();
    await p
      .getByText(
        `workshop ${WS} has 4 hosts: scale only adds hosts; to remove 1 lab nobody claimed, use labfleet down ${WS} --unclaimed 1`,
      )
      .waitFor();
    await screenshot(p, SHOTS.refused);
    expect(await readyHosts()).toBe(4);
  });

  it("works on a phone, without scrolling sideways", async () => {
    const p = await workshopPage({ width: 390, height: 844 });
    let widths = await pageWidths(p);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    const form = p.locator('form[action$="/scale"]');
    await p.getByLabel("Hosts to have (now 4, at most 500)").fill("5");
    await form.scrollIntoViewIfNeeded();
    await screenshot(p, SHOTS.phoneForm);

    // The button is clicked right after a full-page screenshot: the page must still be where it shows.
    await p.getByRole("button", { name: "Scale up…" }).click();
    await p.getByRole("heading", { level: 1, name: `Scale ${WS} up to 5 hosts?` }).waitFor();
    expect((await p.locator("#scale-what").textContent())?.trim()).toBe("Adds 1 lab (4 → 5): student-05.");
    widths = await pageWidths(p);
    expect(widths.scrollWidth).toBeLessThanOrEqual(widths.innerWidth);
    await screenshot(p, SHOTS.phoneConfirm);

    await p.getByRole("button", { name: "Add 1 lab" }).click();
    await p.waitForURL((u) => u.search === "?notice=scale");
    await allReadyOnPage(p, 5);
    await screenshot(p, SHOTS.phoneDone);
  });

  it("logged no console or page errors and no failed subresources", () => {
    expect(world().pageErrors.flat()).toEqual([]);
  });
});
