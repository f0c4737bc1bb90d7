import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab } from "../../shared/portal/claims.ts";
import { ConsoleClient, pageText } from "../harness/console-client.ts";
import { makeRolloutLab, type RolloutLab, rolloutYaml } from "../harness/rollout-lab.ts";
import { processesUnder, removeDir, testRuntime, waitFor } from "../harness/runtime.ts";

/**
 * Rollouts and check mode from the console over real HTTP, as a browser without JavaScript uses it: Check
 * (the report, nothing changed), Roll out (a confirmation that names the claimed labs and, when it touches
 * them, wants the workshop's name typed), bad input at its field, CSRF, the live rollout region with a
 * failure's log and Resume, and Check for up, deploy and retry.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let lab: RolloutLab;
let web: ConsoleClient;
const WS = "crol";

// biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field
async function api(method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${rt.url}/api/workshops${path}`, {
    method,
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: res.status, json: await res.json() };
}
const noRollout = async () => expect((await api("GET", `/${WS}/rollout`)).status).toBe(404);
const liveRegion = async (): Promise<string> => {
  const r = await web.get(`/console/w/${WS}/live`);
  expect(r.status).toBe(200);
  return JSON.parse(r.text).regions["live-rollout"] as string;
};

beforeAll(async () => {
  lab = makeRolloutLab();
  rt = await testRuntime();
  expect((await api("POST", "", { yaml: rolloutYaml(WS, lab.source, 3) })).status).toBeLessThan(300);
  expect((await api("POST", `/${WS}/up`, {})).status).toBe(202);
  await waitFor(
    "3 ready labs",
    async () => {
      const s = (await api("GET", `/${WS}`)).json;
      return s.state === "ready" && s.hostList.every((h: { state: string }) => h.state === "ready")
        ? true
        : undefined;
    },
    90_000,
  );
  await api("POST", `/${WS}/portal/open`, {});
  await claimLab(WS, { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" }, "127.0.0.1");
  web = new ConsoleClient(rt.url);
  await web.signIn(rt.token);
}, 150_000);

afterAll(async () => {
  await rt?.close();
  if (rt) {
    expect(processesUnder(join(rt.dataDir, "hosts"))).toEqual([]);
    removeDir(rt.dataDir);
  }
  lab?.remove();
});

describe("rollouts from the console", { timeout: 180_000 }, () => {
  it("Check shows what a rollout would do per lab, with reasons, and changes nothing", async () => {
    const page = await web.get(`/console/w/${WS}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain('action="/console/w/crol/rollout"');
    expect(page.text).toContain('formaction="/console/w/crol/rollout/check"');
    const r = await web.post(`/console/w/${WS}/rollout/check`, { ref: "v2", canary: "1", batch: "" });
    expect(r.status).toBe(200);
    const text = pageText(r.text);
    expect(text).toContain("Check: a rollout of crol to v2");
    expect(text).toContain("2 changes on 2 hosts. Nothing was changed");
    expect(r.text).toMatch(/data-host="student-01" data-stage="rollout" data-action="skip"/);
    expect(text).toContain("claimed by Ada Lovelace (--include-claimed updates it)");
    expect(r.text).toMatch(/data-host="student-02" data-stage="rollout" data-action="promote"/);
    expect(text).toContain("canary: a new host at v2 beside it (now main)");
    await noRollout();
  });

  it("asks before a rollout, naming the claimed labs it touches; a wrong confirmation starts nothing", async () => {
    const ask = await web.post(`/console/w/${WS}/rollout`, { ref: "v2", includeClaimed: "yes" });
    expect(ask.status).toBe(200);
    const text = pageText(ask.text);
    expect(text).toContain("Roll v2 out to 3 labs, 1 of them claimed?");
    expect(text).toContain("1 claimed lab would be touched");
    expect(ask.text).toMatch(/<th scope="row">student-01<\/th><td>Ada Lovelace<\/td><td>batch \d<\/td>/);
    expect(text).toContain("Type crol to confirm");
    expect(ask.text).toContain('name="includeClaimed" value="yes"');
    // A plain "yes" is not enough when claimed labs would be touched: the page asks again, 400.
    const wrong = await web.post(`/console/w/${WS}/rollout`, {
      ref: "v2",
      includeClaimed: "yes",
      confirm: "yes",
    });
    expect(wrong.status).toBe(400);
    expect(pageText(wrong.text)).toContain("That is not the workshop's name: type crol exactly.");
    await noRollout();

    // Without include-claimed: the claimed lab is named as left alone, and a plain confirmation is asked.
    const plain = await web.post(`/console/w/${WS}/rollout`, { ref: "v2" });
    expect(plain.status).toBe(200);
    expect(pageText(plain.text)).toContain("Roll v2 out to 2 labs?");
    expect(pageText(plain.text)).toContain(
      "No claimed lab is touched: 1 claimed lab stays as it is (student-01: Ada Lovelace)",
    );
    expect(plain.text).toContain('name="confirm" value="yes"');
    await noRollout();
  });

  it("refuses bad input at its field with a 400, and a form without the CSRF field with a 403", async () => {
    await web.get(`/console/w/${WS}`); // the page's CSRF field
    const badRef = await web.post(`/console/w/${WS}/rollout`, { ref: "v2;rm -rf" });
    expect(badRef.status).toBe(400);
    expect(pageText(badRef.text)).toMatch(
      /Some fields are not right\. ref : expected a git branch, tag or commit/,
    );
    const badCanary = await web.post(`/console/w/${WS}/rollout/check`, { ref: "v2", canary: "two" });
    expect(badCanary.status).toBe(400);
    expect(pageText(badCanary.text)).toContain("canary : expected a whole number from 1 to 1000");
    const unknown = await web.post(`/console/w/${WS}/rollout`, { ref: "no-such-branch", confirm: "yes" });
    expect(unknown.status).toBeGreaterThanOrEqual(400);
    expect(unknown.status).toBeLessThan(500);
    const badCommand = await web.post(`/console/w/${WS}/check`, { command: "teardown" });
    expect(badCommand.status).toBe(400);
    expect(pageText(badCommand.text)).toContain("command : expected up, deploy or retry");
    for (const path of ["rollout", "rollout/check", "rollout/resume", "rollout/abort", "check"]) {
      const forged = await web.post(`/console/w/${WS}/${path}`, {
        _csrf: "not-the-session-secret",
        ref: "v2",
        confirm: "yes",
        command: "deploy",
      });
      expect(forged.status, path).toBe(403);
    }
    await noRollout();
  });

  it("Check for up, deploy and retry reports per host and stage, changing nothing", async () => {
    await web.get(`/console/w/${WS}`);
    const up = await web.post(`/console/w/${WS}/check`, { command: "up" });
    expect(up.status).toBe(200);
    expect(pageText(up.text)).toContain("Check: up of crol");
    expect(pageText(up.text)).toContain("Nothing would change. Nothing was changed");
    expect(up.text).toMatch(/<th scope="row">the workshop<\/th><td>publish<\/td>/);
    const deploy = await web.post(`/console/w/${WS}/check`, {
      command: "deploy",
      hosts: "student-01 student-02",
      force: "yes",
    });
    expect(deploy.status).toBe(200);
    expect(pageText(deploy.text)).toContain("2 changes on 2 hosts and 1 to the workshop (publish).");
    expect(deploy.text).toMatch(/data-host="student-01" data-stage="deploy" data-action="rebuild"/);
    expect(pageText(deploy.text)).toContain("claimed by Ada Lovelace: rebuilt under them");
    expect(deploy.text).not.toContain('data-host="student-03"');
    const retry = await web.post(`/console/w/${WS}/check`, { command: "retry" });
    expect(retry.status).toBe(200);
    expect(pageText(retry.text)).toContain("No host to act on.");
    const runs = (await rt.store.run.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data;
    expect(runs.map((r) => r.kind)).toEqual(["up"]);
  });

  it("a failed canary halts: the live region shows why, the redacted log tail and Resume", async () => {
    expect(await liveRegion()).toBe("");
    const start = await web.post(`/console/w/${WS}/rollout`, { ref: "broken", confirm: "yes" });
    expect(start.status).toBe(303);
    expect(start.location).toBe(`/console/w/${WS}?notice=rollout`);
    const region = await waitFor(
      "the rollout to halt",
      async () => {
        const html = await liveRegion();
        return html.includes('data-state="halted"') ? html : undefined;
      },
      90_000,
    );
    const text = pageText(region);
    expect(text).toContain("Rollout to broken");
    expect(text).toContain("The rollout halted: student-02 failed the update to broken.");
    expect(text).toContain("fix the lab at broken (push the fix to that ref), then press Resume");
    expect(region).toMatch(/<tr data-host="student-02" data-state="failed">/);
    expect(text).toMatch(/student-02 canary main broken build failed/);
    expect(region).toMatch(/<tr data-host="student-03" data-state="pending">/);
    expect(text).toContain("student-02: why its update failed");
    expect(region).toMatch(/<pre class="command log-tail">[^<]*broken build of version 3/);
    expect(region).toContain(`action="/console/w/${WS}/rollout/resume"`);
    expect(region).not.toContain("/rollout/abort");
    // The page itself shows the same region.
    expect((await web.get(`/console/w/${WS}`)).text).toContain("broken build of version 3");
    // Nothing else changed: the other labs are still ready on main.
    for (const id of ["student-01", "student-03"]) {
      const h = (await rt.store.host.get({ workshop: WS, hostId: id }).go()).data;
      expect(h).toMatchObject({ state: "ready", ref: "main" });
    }
    expect(existsSync(join(rt.dataDir, "hosts", WS, "student-02.b"))).toBe(false);

    // Resume starts again (the ref is still broken, so it halts again), and says so on the page.
    const resume = await web.post(`/console/w/${WS}/rollout/resume`);
    expect(resume.status).toBe(303);
    expect(resume.location).toBe(`/console/w/${WS}?notice=rollout-resumed`);
    expect(pageText((await web.get(resume.location)).text)).toContain("Rollout resumed");
    await waitFor(
      "the resumed rollout to halt again",
      async () => ((await liveRegion()).includes('data-state="halted"') ? true : undefined),
      90_000,
    );
  });
});
