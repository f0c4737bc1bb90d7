import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RATE } from "../../shared/portal/constants.ts";
import { recordFailure } from "../../shared/portal/rate-limit.ts";
import { runCli } from "../harness/cli.ts";
import { ConsoleClient, pageText } from "../harness/console-client.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * Roster invites and unblocks are in the activity, with who did it and the student's display name (never the
 * email), in the console and in `labfleet events`; a console session opened with an API token acts as the
 * token's name.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
let aliceToken = "";
const WS = "rosterlog";
const ALICE = "Alice laptop";
const FOX = { name: "Fox Mulder", email: "fox@example.test" };

beforeAll(async () => {
  work = tempDir("labfleet-activity-roster-");
  rt = await testRuntime();
  const made = await fetch(`${rt.url}/api/tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    body: JSON.stringify({ name: ALICE }),
  });
  expect(made.status).toBe(201);
  aliceToken = ((await made.json()) as { token: string }).token;
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: aliceToken };
  const file = join(work, "workshop.yaml");
  writeFileSync(file, `${workshopYaml({ name: WS, count: 2 })}portal:\n  mode: both\n`);
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stderr).toBe(0);
  expect((await runCli(["portal", "publish", WS], { env })).code).toBe(0);
}, 60_000);
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

type Event = { type: string; hostId: string | null; detail: Record<string, unknown> };
async function events(): Promise<Event[]> {
  const r = await runCli(["events", WS, "--output", "json"], { env });
  expect(r.code, r.stderr).toBe(0);
  return (JSON.parse(r.stdout) as { events: Event[] }).events;
}

describe("roster and unblock activity", () => {
  it("an invite records lab.invited by the token's name with the student's name, never the email", async () => {
    const roster = join(work, "roster.csv");
    writeFileSync(roster, `name,email\n${FOX.name},${FOX.email}\n`);
    const r = await runCli(["portal", "invite", WS, roster, "--csv", join(work, "links.csv")], { env });
    expect(r.code, r.stderr).toBe(0);
    const invited = (await events()).filter((e) => e.type === "lab.invited");
    expect(invited).toEqual([
      expect.objectContaining({ hostId: "student-01", detail: { student: FOX.name, by: ALICE } }),
    ]);
    const text = await runCli(["events", WS], { env });
    expect(text.stdout).toContain(`${ALICE} invited ${FOX.name} to lab student-01 (roster).`);
    expect(text.stdout).not.toContain(FOX.email);
  });

  it("an unblock from the CLI records portal.unblocked with the addresses let in again", async () => {
    for (let i = 0; i < RATE.perAddressNewBrowsers; i++) await recordFailure("198.51.100.7", "code");
    const r = await runCli(["portal", "unblock", WS, "--address", "198.51.100.7"], { env });
    expect(r.code, r.stderr).toBe(0);
    // Nothing held back: nothing happened, so nothing is recorded.
    expect((await runCli(["portal", "unblock", WS, "--all"], { env })).code).toBe(0);
    const unblocked = (await events()).filter((e) => e.type === "portal.unblocked");
    expect(unblocked.map((e) => e.detail)).toEqual([{ addresses: ["198.51.100.7"], all: false, by: ALICE }]);
    const text = await runCli(["events", WS], { env });
    expect(text.stdout).toContain(
      `${ALICE} let 198.51.100.7 into the portal again (wrong attempts start from zero).`,
    );
  });

  it("a console session opened with the API token acts as the token's name; the activity shows both", async () => {
    const browser = new ConsoleClient(rt.url);
    await browser.signIn(aliceToken);
    for (let i = 0; i < RATE.perAddressNewBrowsers; i++) await recordFailure("198.51.100.8", "code");
    await browser.get(`/console/w/${WS}/portal`);
    const r = await browser.post(`/console/w/${WS}/portal/unblock`, { all: "yes" });
    expect(r.status).toBe(303);
    const last = (await events()).filter((e) => e.type === "portal.unblocked").at(-1);
    expect(last?.detail).toEqual({ addresses: ["198.51.100.8"], all: true, by: ALICE });
    const page = await browser.get(`/console/w/${WS}`);
    const rows = [...page.text.matchAll(/<td class="what">([\s\S]*?)<\/td>/g)].map((m) =>
      pageText(m[1] ?? ""),
    );
    expect(rows).toContain(
      `${ALICE} let 198.51.100.8 into the portal again (wrong attempts start from zero).`,
    );
    expect(rows).toContain(`${ALICE} invited ${FOX.name} to lab student-01 (roster).`);
    expect(page.text).not.toContain(FOX.email);
  });
});
