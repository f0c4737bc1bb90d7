import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { clearScreenshots, screenshot } from "../harness/browser.ts";
import { claimInBrowser, type E2e, readyWorkshop, startE2e } from "../harness/e2e.ts";

/**
 * The demo lab as a newcomer meets it, in headless Chromium: a student claims a demo lab (examples/demo/lab, its
 * pauses cut to nothing), reads the user and password on the lab page, follows the lab's web page link and
 * sees the page the lab host serves. Without the credentials the same address answers 401.
 */

const WS = "demoweb";
const SHOTS = { lab: "demo-01-lab-page", page: "demo-02-web-page" } as const;
const demoLab = join(import.meta.dirname, "..", "..", "examples", "demo", "lab");
const yaml = `name: ${WS}
lab:
  source: ${demoLab}
  setup: DEMO_SCALE=0 bash setup.sh
  health: bash health.sh
provider:
  type: local
  count: 1
portal:
  enabled: true
`;

let e: E2e | undefined;
let code = "";

function world(): E2e {
  if (!e) throw new Error("the runtime or Chromium did not start");
  return e;
}

beforeAll(async () => {
  clearScreenshots(Object.values(SHOTS));
  e = await startE2e();
  code = await readyWorkshop(e, WS, yaml, 1);
}, 90_000);

afterAll(async () => {
  await e?.close();
});

describe("the demo lab's web page", () => {
  it("opens from the student's lab page with the user and password the page shows", async () => {
    const context = await world().newContext({ viewport: { width: 1280, height: 900 } });
    const errors = world().pageErrors.at(-1);
    const p = await context.newPage();
    await claimInBrowser(p, code, { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" });
    const link = p.getByRole("link", { name: /^http:\/\/127\.0\.0\.1:\d+\/$/ });
    const url = (await link.getAttribute("href")) ?? "";
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
    const user = (await p.locator('code[data-copy="user"]').textContent()) ?? "";
    const password = (await p.locator('code[data-copy="password"]').textContent()) ?? "";
    expect(user).toBe("student");
    expect(password).toMatch(/^[A-Za-z0-9]{12,}$/);
    await screenshot(p, SHOTS.lab);

    // Without them, the address is closed (a browser without them gets no page: it has no password to give).
    const closed = await fetch(url);
    expect(closed.status).toBe(401);
    expect(closed.headers.get("www-authenticate")).toMatch(/^Basic realm=/);
    expect(await closed.text()).toContain(
      "This demo lab needs the user and password shown on your lab page.",
    );

    // The browser asks for a user and password; the student types what the lab page shows.
    await context.setHTTPCredentials({ username: user, password, origin: new URL(url).origin });
    const [tab] = await Promise.all([context.waitForEvent("page"), link.click()]);
    await tab.getByRole("heading", { level: 1, name: "Your demo lab: student-01" }).waitFor();
    expect(tab.url()).toBe(url);
    expect(await tab.textContent("body")).toContain("demo service for student-01");
    await screenshot(tab, SHOTS.page);
    expect(errors).toEqual([]);
  });
});
