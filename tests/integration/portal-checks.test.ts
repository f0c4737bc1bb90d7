import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checksForLink } from "../../shared/portal/checks.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { runCli } from "../harness/cli.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import {
  movableClock,
  processesUnder,
  removeDir,
  tempDir,
  testRuntime,
  waitFor,
  workshopYaml,
} from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "portal-checks-suite-token";
const WS = "pchk";
const SECRET = "tok-9f8e7d6c5b4a";
const clock = movableClock();
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();
const home = tempDir("labfleet-checks-home-");

const CHECKS = `  operator_secrets: [API_TOKEN]
  checks:
    - name: lab built
      run: test -f built
    - name: answer
      run: bash check-answer.sh
      hint: Write 42 into ~/answer.txt
    - name: who runs checks
      run: id -un
    - name: secret stays secret
      run: . "$LABFLEET_SECRETS"; echo "the token is $API_TOKEN"; exit 3
      hint: This one always fails
    - name: hangs
      run: sleep 600
      timeout_seconds: 1
portal:
  enabled: true
`;

class Browser {
  readonly jar = new Map<string, string>();
  csrf = "";
  private async take(res: Response) {
    storeCookies(this.jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { res, status: res.status, text, location: res.headers.get("location") ?? "" };
  }
  private env() {
    return { incoming: { socket: { remoteAddress: "192.0.2.44" } } };
  }
  async get(path: string) {
    return this.take(await app.request(path, { headers: cookieHeader(this.jar) }, this.env()));
  }
  async post(path: string, fields: Record<string, string> = {}) {
    return this.take(
      await app.request(
        path,
        {
          method: "POST",
          headers: { ...cookieHeader(this.jar), "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ _csrf: this.csrf, ...fields }),
        },
        this.env(),
      ),
    );
  }
}

async function claim(code: string, who: { name: string; email: string; pin: string }) {
  const b = new Browser();
  await b.get("/");
  expect((await b.post("/code", { code })).status).toBe(303);
  await b.get("/board");
  const r = await b.post("/claim", who);
  expect(r.status, r.text).toBe(303);
  const token = /^\/l\/([\w-]+)$/.exec(r.location)?.[1] ?? "";
  expect(token).not.toBe("");
  return { b, token };
}

const resultOf = async (token: string, name: string) =>
  (await checksForLink(token))?.checks.find((c) => c.name === name);

let code = "";
let student: { b: Browser; token: string };

beforeAll(async () => {
  writeFileSync(join(home, "secrets.yaml"), `API_TOKEN: "${SECRET}"\n`);
  chmodSync(join(home, "secrets.yaml"), 0o600);
  rt = await testRuntime({ token: TOKEN, clock, labfleetHome: home });
  const yaml = workshopYaml({ name: WS, lab: "checked", count: 2, extraLab: CHECKS });
  const created = await app.request("/api/workshops", {
    method: "POST",
    headers: auth,
    body: JSON.stringify({ yaml }),
  });
  expect(created.status, await created.clone().text()).toBe(201);
  expect(
    (await app.request(`/api/workshops/${WS}/up`, { method: "POST", headers: auth, body: "{}" })).status,
  ).toBe(202);
  await rt.executor.idle();
  const opened = await app.request(`/api/workshops/${WS}/portal/open`, { method: "POST", headers: auth });
  expect(opened.status).toBe(200);
  code = (await j(opened)).code;
  student = await claim(code, { name: "Grace Checker", email: "grace@example.test", pin: "271828" });
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  removeDir(home);
});

const hostHome = (lab: string) => join(rt.dataDir, "hosts", WS, lab);

describe("check my work, on the local runtime", () => {
  it("offers the form on the lab page, with every check not run yet", async () => {
    const r = await student.b.get(`/l/${student.token}`);
    expect(r.status).toBe(200);
    expect(r.text).toContain(`action="/l/${student.token}/check#checks"`);
    expect(r.text).toContain("Check my work");
    expect(r.text.split("not checked yet").length - 1).toBe(5);
  });

  it("runs the checks on the student's host: pass, fail with the hint, as the lab's user, bounded, redacted", async () => {
    const started = Date.now();
    const r = await student.b.post(`/l/${student.token}/check`);
    expect(r.status, r.text).toBe(200);
    // The hanging check is cut at its 1 s timeout: the press does not wait for it.
    expect(Date.now() - started).toBeLessThan(10_000);
    expect(r.text).toContain("2 of 5 checks passed");
    expect(r.text).toContain("Hint: Write 42 into ~/answer.txt");
    expect(r.text).toContain("did not finish in time");
    expect(r.text).not.toContain(SECRET);
    expect((await resultOf(student.token, "lab built"))?.passed).toBe(true);
    const answer = await resultOf(student.token, "answer");
    expect(answer).toMatchObject({ passed: false, attempts: 1 });
    expect(answer?.output).toContain("no answer in");
    const who = await resultOf(student.token, "who runs checks");
    // Local hosts run the lab's commands as the user running labfleet, like setup and health.
    expect(who).toMatchObject({ passed: true, output: userInfo().username });
    const secret = await resultOf(student.token, "secret stays secret");
    expect(secret?.passed).toBe(false);
    expect(secret?.output).toBe("the token is [redacted]");
    expect(await resultOf(student.token, "hangs")).toMatchObject({ passed: false, timedOut: true });
    // Nothing of the hanging check is left on the host.
    await waitFor(
      "the hanging check's processes to end",
      () => processesUnder(hostHome(labOf())).length === 0,
      10_000,
    );
  });

  it("refuses a second press within 30 s with when to try again, and lets one of many concurrent presses through", async () => {
    const again = await student.b.post(`/l/${student.token}/check`);
    expect(again.status).toBe(429);
    expect(again.text).toMatch(/Try again in \d+ seconds?/);
    expect(Number(again.res.headers.get("retry-after"))).toBeGreaterThan(0);
    expect((await resultOf(student.token, "answer"))?.attempts).toBe(1);
    clock.advance(31_000);
    const presses = await Promise.all([1, 2, 3].map(() => student.b.post(`/l/${student.token}/check`)));
    expect(presses.map((p) => p.status).sort()).toEqual([200, 429, 429]);
    expect((await resultOf(student.token, "answer"))?.attempts).toBe(2);
  });

  it("passes once the student did the work, and keeps the results", async () => {
    mkdirSync(hostHome(labOf()), { recursive: true });
    writeFileSync(join(hostHome(labOf()), "answer.txt"), "42\n");
    clock.advance(31_000);
    const r = await student.b.post(`/l/${student.token}/check`);
    expect(r.status).toBe(200);
    expect(await resultOf(student.token, "answer")).toMatchObject({ passed: true, attempts: 3 });
    const page = await student.b.get(`/l/${student.token}`);
    expect(page.text).toContain("Check my work again");
    // A <time> the browser shows in the student's zone; without a script it reads in UTC.
    expect(page.text).toMatch(
      /Checked at <time datetime="[\d-]+T[\d:.]+Z" data-time="exact">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC<\/time>/,
    );
  });

  it("shows the instructor the students x checks matrix: the API and labfleet portal checks", async () => {
    const m = await j(await app.request(`/api/workshops/${WS}/portal/checks`, { headers: auth }));
    expect(m.checks.map((k: { name: string }) => k.name)).toEqual([
      "lab built",
      "answer",
      "who runs checks",
      "secret stays secret",
      "hangs",
    ]);
    expect(m.checks.map((k: { passed: number }) => k.passed)).toEqual([1, 1, 1, 0, 0]);
    expect(m.students).toEqual([
      expect.objectContaining({
        lab: labOf(),
        name: "Grace Checker",
        results: [true, true, true, false, false],
      }),
    ]);
    expect(JSON.stringify(m)).not.toContain(SECRET);
    const env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: TOKEN };
    const text = await runCli(["portal", "checks", WS], { env });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(
      new RegExp(`${labOf()}\\s+Grace Checker\\s+pass\\s+pass\\s+pass\\s+FAIL\\s+FAIL`),
    );
    expect(text.stdout).toMatch(/passed\s+1\/1\s+1\/1\s+1\/1\s+0\/1\s+0\/1/);
    const json = await runCli(["portal", "checks", WS, "--output", "json"], { env });
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toEqual(m);
  });

  it("forgets a lab's results when it is released: the next student starts with none", async () => {
    const released = await app.request(`/api/workshops/${WS}/portal/release`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ lab: labOf() }),
    });
    expect(released.status).toBe(200);
    const rows = await useDeps().store.checkResult.query.byWorkshop({ workshop: WS, hostId: labOf() }).go();
    expect(rows.data).toEqual([]);
    const m = await j(await app.request(`/api/workshops/${WS}/portal/checks`, { headers: auth }));
    expect(m.students).toEqual([]);
  });

  it("a student moved to another lab starts there with no results; the old lab's are forgotten", async () => {
    const moved = await claim(code, { name: "Moe Mover", email: "moe@example.test", pin: "141421" });
    const from = (await checksForLink(moved.token))?.lab ?? "";
    clock.advance(31_000);
    expect((await moved.b.post(`/l/${moved.token}/check`)).status).toBe(200);
    expect(
      (await useDeps().store.checkResult.query.byWorkshop({ workshop: WS, hostId: from }).go()).data,
    ).toHaveLength(5);
    const to = from === "student-01" ? "student-02" : "student-01";
    const r = await app.request(`/api/workshops/${WS}/portal/reassign`, {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ email: "moe@example.test", lab: to }),
    });
    expect(r.status, await r.clone().text()).toBe(200);
    const token = (await j(r)).token as string;
    const now = await checksForLink(token);
    expect(now?.lab).toBe(to);
    expect(now?.checks.map((c) => c.passed)).toEqual([null, null, null, null, null]);
    expect(
      (await useDeps().store.checkResult.query.byWorkshop({ workshop: WS, hostId: from }).go()).data,
    ).toEqual([]);
  });

  it("offers nothing, and refuses a press, when the workshop has no checks", async () => {
    const none = "pchk-none";
    const yaml = workshopYaml({ name: none, count: 1, extraLab: "portal:\n  enabled: true\n" });
    expect(
      (await app.request("/api/workshops", { method: "POST", headers: auth, body: JSON.stringify({ yaml }) }))
        .status,
    ).toBe(201);
    await app.request(`/api/workshops/${none}/up`, { method: "POST", headers: auth, body: "{}" });
    await rt.executor.idle();
    const opened = await app.request(`/api/workshops/${none}/portal/open`, { method: "POST", headers: auth });
    const other = await claim((await j(opened)).code, {
      name: "No Checks",
      email: "nc@example.test",
      pin: "161803",
    });
    const page = await other.b.get(`/l/${other.token}`);
    expect(page.status).toBe(200);
    expect(page.text).not.toContain("Check my work");
    expect(page.text).not.toContain("/check");
    const pressed = await other.b.post(`/l/${other.token}/check`);
    expect(pressed.status).toBe(404);
    expect(pressed.text).toContain("This lab has no checks.");
    const m = await j(await app.request(`/api/workshops/${none}/portal/checks`, { headers: auth }));
    expect(m.checks).toEqual([]);
    // A link that leads nowhere is the portal's 404, checks or not.
    expect((await other.b.post("/l/AAAAAAAAAAAAAAAAAAAAAAAA/check")).status).toBe(404);
  });

  it("refuses bad checks in workshop.yaml with the field paths", async () => {
    const yaml = workshopYaml({
      name: "pchk-bad",
      extraLab: `  checks:
    - name: same
      run: "true"
      timeout_seconds: 99
    - name: same
      run: ""
`,
    });
    const r = await app.request("/api/workshops", {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ yaml }),
    });
    expect(r.status).toBe(400);
    const body = await j(r);
    const paths = body.error.details.map((d: { path: string }) => d.path);
    expect(paths).toEqual(
      expect.arrayContaining(["lab.checks[0].timeout_seconds", "lab.checks[1].run", "lab.checks[1].name"]),
    );
    const msg = body.error.details.map((d: { message: string }) => d.message).join("\n");
    expect(msg).toContain("a whole number from 1 to 15");
    expect(msg).toContain('"same" is already used by checks[0]');
  });
});

let lab = "";
function labOf(): string {
  return lab;
}
beforeAll(async () => {
  lab = (await checksForLink(student.token))?.lab ?? "";
  expect(lab).toMatch(/^student-0[12]$/);
});
