import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkMyWork } from "../../shared/portal/checks.ts";
import { claimLab, recoverLab } from "../../shared/portal/claims.ts";
import { claimOrWait } from "../../shared/portal/waiting.ts";
import { formatClock } from "../../shared/runtime/time-format.ts";
import { runCli } from "../harness/cli.ts";
import { ConsoleClient, pageText } from "../harness/console-client.ts";
import { removeDir, tempDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The activity tells the story: a workshop day done through the CLI (as the instructor whose API token is
 * named "Alice laptop"), the portal's students and the console, then the console's activity list and
 * `labfleet events` say each step as the same sentence, with who did it and the student's name, and never
 * an email.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
let file: string;
const WS = "story";
const CHECKS = "  checks:\n    - name: lab built\n      run: test -f built\n";
const student = (name: string, email: string) => ({ name, email, pin: "503917" });
const ADA = student("Ada Lovelace", "ada@example.test");
const GRACE = student("Grace Hopper", "grace@example.test");
const ALAN = student("Alan Turing", "alan@example.test");
const EVE = student("Eve Moneypenny", "eve@example.test");
const DANA = student("Dana Scully", "dana@example.test");
const EMAILS = [ADA, GRACE, ALAN, EVE, DANA].map((s) => s.email);
const ALICE = "Alice laptop";

const cli = async (...args: string[]) => {
  const r = await runCli(args, { env });
  expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(0);
  return r;
};
const idle = async () => {
  await rt.executor.idle();
  await waitFor("the workshop to be idle", async () => {
    const w = (await rt.store.workshop.get({ name: WS }).go()).data;
    return w && !w.activeRunId ? true : undefined;
  });
};
const hostState = async (hostId: string) =>
  (await rt.store.host.get({ workshop: WS, hostId }).go()).data?.state;

/** What the day's steps must read as, in the order they happened. */
const story = [
  `${ALICE} started up.`,
  /student-01 is ready \(built in \d+ s\)\./,
  `${ALICE} published the portal: students see the board; claiming is not open yet.`,
  `${ALICE} opened claiming in the portal.`,
  "Ada Lovelace claimed lab student-01.",
  "Eve Moneypenny claimed lab student-04.",
  "Dana Scully joined the waiting line.",
  "Ada Lovelace pressed Check my work on lab student-01: 1 of 1 check passes.",
  "Ada Lovelace opened lab student-01 again with their email and PIN (a new personal link).",
  `${ALICE} took Dana Scully out of the waiting line.`,
  `${ALICE} released lab student-04 from Eve Moneypenny; it is free again.`,
  `${ALICE} swapped Ada Lovelace's lab student-01 for student-04; student-01 is rebuilt.`,
  `${ALICE} started a retry on student-01.`,
  `${ALICE} moved Grace Hopper from lab student-02 to student-01.`,
  `${ALICE} revoked Alan Turing's claim on lab student-03; the lab is free again.`,
  `${ALICE} unlocked Grace Hopper's PIN for lab student-01.`,
  `${ALICE} changed the workshop code: students type the new one; personal links keep working.`,
  "EXTENDED",
  `${ALICE} started a scale-up (4 → 5 hosts) on student-05.`,
  `${ALICE} removed lab student-05 (scaled down).`,
  `${ALICE} closed claiming in the portal.`,
  "bootstrap token released lab student-01 from Grace Hopper; it is free again.",
];

/**
 * The extend's sentence: the teardown time as a `<time>` the page's script rewrites in the viewer's zone (its
 * text without a script says UTC), and in the CLI's human format in the terminal's zone.
 */
const EXTENDED = {
  page: /Alice laptop extended the workshop by 1 h; the teardown is at \d{4}-\d\d-\d\d \d\d:\d\d UTC ?\./,
  cli: /Alice laptop extended the workshop by 1 h; the teardown is at (\d{4}-\d\d-\d\d )?\d\d:\d\d \(in \d+ h( \d+ min)?\)\./,
};
const storyFor = (how: keyof typeof EXTENDED) => story.map((s) => (s === "EXTENDED" ? EXTENDED[how] : s));

/** Each part of the story, found in `text` in that order. */
function expectStory(text: string, parts: (string | RegExp)[]) {
  let from = 0;
  for (const part of parts) {
    const rest = text.slice(from);
    const at = typeof part === "string" ? rest.indexOf(part) : (part.exec(rest)?.index ?? -1);
    expect(at, `${String(part)} after position ${from} of:\n${text}`).toBeGreaterThanOrEqual(0);
    from += at + 1;
  }
}

beforeAll(async () => {
  work = tempDir("labfleet-activity-");
  rt = await testRuntime();
  const made = await fetch(`${rt.url}/api/tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    body: JSON.stringify({ name: ALICE }),
  });
  expect(made.status).toBe(201);
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: ((await made.json()) as { token: string }).token };
  file = join(work, "workshop.yaml");
  writeFileSync(file, workshopYaml({ name: WS, count: 4, extraLab: CHECKS }));
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("a workshop day's activity", () => {
  it("starts: up, publish and open, by the instructor", async () => {
    await cli("up", "-f", file);
    await cli("portal", "publish", WS);
    await cli("portal", "open", WS);
  });

  it("goes on with students claiming, waiting, checking and recovering, and the instructor helping", async () => {
    const ada = await claimLab(WS, ADA, "127.0.0.1");
    expect(ada.lab).toBe("student-01");
    expect((await claimLab(WS, GRACE, "127.0.0.1")).lab).toBe("student-02");
    expect((await claimLab(WS, ALAN, "127.0.0.1")).lab).toBe("student-03");
    expect((await claimLab(WS, EVE, "127.0.0.1")).lab).toBe("student-04");
    expect((await claimOrWait(WS, DANA, "127.0.0.1")).lab).toBeUndefined();
    const checked = await checkMyWork(ada.token);
    expect(checked.checks.map((c) => c.passed)).toEqual([true]);
    await recoverLab(WS, ADA.email, ADA.pin, "127.0.0.1");
    await cli("portal", "unqueue", WS, DANA.email);
    await cli("portal", "release", WS, "student-04");
    await cli("portal", "swap", WS, "student-01");
    await idle();
    await waitFor("student-01 rebuilt", async () =>
      (await hostState("student-01")) === "ready" ? true : undefined,
    );
  });

  it("ends with moves, revokes, a new code, an extend, a scale up and down, and claiming closed", async () => {
    await cli("portal", "reassign", WS, GRACE.email, "student-01");
    await cli("portal", "revoke", WS, ALAN.email);
    await cli("portal", "unlock", WS, GRACE.email);
    await cli("portal", "rotate-code", WS);
    await cli("extend", WS, "--hours", "1");
    await cli("scale", WS, "--count", "5");
    await idle();
    const down = await cli("down", WS, "--unclaimed", "1");
    expect(down.stdout).toContain("removed 1 lab: student-05");
    await cli("portal", "close", WS);
  }, 120_000);

  it("reads as sentences in the console, with a console action by the signed-in instructor, and no email", async () => {
    const browser = new ConsoleClient(rt.url);
    await browser.signIn(rt.token);
    await browser.get(`/console/w/${WS}/portal`);
    const released = await browser.post(`/console/w/${WS}/portal/release`, {
      lab: "student-01",
      confirm: "yes",
    });
    expect(released.status).toBe(303);
    const page = await browser.get(`/console/w/${WS}`);
    expect(page.status).toBe(200);
    // Newest first on the page: read it bottom up.
    const rows = [...page.text.matchAll(/<td class="what">([\s\S]*?)<\/td>/g)].map((m) =>
      pageText(m[1] ?? ""),
    );
    expectStory(rows.reverse().join("\n"), storyFor("page"));
    const expiry = (await rt.store.workshop.get({ name: WS }).go()).data?.expiry;
    expect(expiry).toBeTruthy();
    const extendRow =
      /<tr[^>]*data-type="workshop.extended"[^>]*>([\s\S]*?)<\/tr>/.exec(page.text)?.[1] ?? "";
    expect(extendRow).toContain(`<time datetime="${expiry}" data-time="when">`);
    for (const email of EMAILS) expect(page.text).not.toContain(email);
  });

  it("reads as the same sentences in labfleet events, and its JSON has who and whose, never an email", async () => {
    const r = await cli("events", WS);
    expectStory(r.stdout, storyFor("cli"));
    expect(r.stdout.split("\n")[0]).toMatch(/^at\s+event\s+id\s+what happened$/);
    for (const email of EMAILS) expect(r.stdout).not.toContain(email);

    const json = JSON.parse((await cli("events", WS, "--output", "json")).stdout) as {
      events: { type: string; hostId: string | null; detail: Record<string, unknown> }[];
    };
    for (const email of EMAILS) expect(JSON.stringify(json)).not.toContain(email);
    const of = (type: string) => json.events.filter((e) => e.type === type).map((e) => e.detail);
    expect(of("lab.moved")).toEqual([{ to: "student-01", student: "Grace Hopper", by: ALICE }]);
    expect(of("lab.recovered")).toEqual([{ student: "Ada Lovelace", by: "student" }]);
    expect(of("checks.run")).toEqual([{ student: "Ada Lovelace", passed: 1, total: 1, by: "student" }]);
    expect(of("workshop.extended")[0]).toMatchObject({ hours: 1, ok: true, by: ALICE });
    // The teardown time reads in the terminal's zone, as every CLI time does.
    const expiry = String(of("workshop.extended")[0]?.expiry);
    const kolkata = await runCli(["events", WS], { env: { ...env, TZ: "Asia/Kolkata" } });
    const local = formatClock(expiry, Date.now(), { timeZone: "Asia/Kolkata" });
    expect(local).not.toBe(formatClock(expiry, Date.now(), { timeZone: "UTC" }));
    expect(kolkata.stdout).toContain(`the teardown is at ${local} (in `);
    expect(of("portal.code_rotated")).toEqual([{ version: 2, by: ALICE }]);
    // What labfleet did by itself is by labfleet; every ready host has its build time.
    const ready = json.events.filter((e) => e.type === "host.ready");
    expect(ready.length).toBeGreaterThanOrEqual(6);
    for (const e of ready) expect(e.detail).toEqual({ seconds: expect.any(Number), by: "labfleet" });
    expect(json.events.every((e) => typeof e.detail.by === "string" && e.detail.by !== "")).toBe(true);
  });
});
