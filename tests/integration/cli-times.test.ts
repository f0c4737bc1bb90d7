import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab } from "../../shared/portal/claims.ts";
import { formatClock } from "../../shared/runtime/time-format.ts";
import { runCli } from "../harness/cli.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/** What the CLI prints about times, claims and a lab's phase and URLs, read as an instructor reads it. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
let expiry: string;
const WS = "times";
const ISO = /\d{4}-\d\d-\d\dT\d\d:\d\d/;

beforeAll(async () => {
  work = tempDir("labfleet-cli-times-");
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  const file = join(work, "workshop.yaml");
  writeFileSync(file, `${workshopYaml({ name: WS, count: 2, ttlHours: 6 })}portal:\n  mode: both\n`);
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stderr).toBe(0);
  expect((await runCli(["portal", "open", WS], { env })).code).toBe(0);
  await claimLab(WS, { name: "Dana Scully", email: "dana@example.test", pin: "582913" }, "127.0.0.1");
  const doc = JSON.parse((await runCli(["status", WS, "--output", "json"], { env })).stdout);
  expiry = doc.expiry;
  expect(expiry).toMatch(ISO);
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("the CLI's times, claims and URLs", () => {
  it("status shows the claims, the time left with the local teardown time, and a ready lab's phase as ready", async () => {
    for (const tz of ["UTC", "Asia/Kolkata"]) {
      const r = await runCli(["status", WS], { env: { ...env, TZ: tz } });
      expect(r.code, r.stderr).toBe(0);
      const [head, ...rows] = r.stdout.split("\n");
      const at = formatClock(expiry, Date.now(), { timeZone: tz });
      expect(head).toMatch(
        new RegExp(
          `^${WS}: ready · 2/2 ready · 1 claimed · 1 free · 5 h [0-5]\\d min left, torn down at ${at}$`,
        ),
      );
      expect(rows).toContainEqual(expect.stringMatching(/^student-01 +ready +ready +\d+ s +Dana Scully$/));
      expect(rows).toContainEqual(expect.stringMatching(/^student-02 +ready +ready +\d+ s$/));
      expect(r.stdout).not.toContain("verify"); // the lab's last phase
      expect(r.stdout).not.toMatch(ISO);
      expect(r.stdout).not.toContain("dana@example.test"); // names only; emails stay in portal status
    }
    // Half an hour apart, the zones print different teardown times: the time is local, not UTC.
    expect(formatClock(expiry, Date.now(), { timeZone: "UTC" })).not.toBe(
      formatClock(expiry, Date.now(), { timeZone: "Asia/Kolkata" }),
    );
  });

  it("access lists each lab's URLs", async () => {
    const r = await runCli(["access", WS], { env });
    expect(r.code, r.stderr).toBe(0);
    for (const id of ["student-01", "student-02"])
      expect(r.stdout).toMatch(
        new RegExp(`^${id} +ready +\\S+ +https://${id}\\.example\\.test/ +stored`, "m"),
      );
    expect(r.stdout).not.toContain("s3cret");
  });

  it("runs, workshops, events and tokens print local clock times and durations, never ISO times", async () => {
    for (const args of [
      ["runs", WS],
      ["workshops"],
      ["events", WS],
      ["portal", "status", WS],
      ["tokens", "list"],
    ]) {
      const r = await runCli(args, { env: { ...env, TZ: "UTC" } });
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(0);
      expect(r.stdout, args.join(" ")).not.toMatch(ISO);
      expect(r.stdout, args.join(" ")).not.toContain("UTC");
    }
    const runs = await runCli(["runs", WS], { env });
    expect(runs.stdout).toMatch(/ up +succeeded +(\d{4}-\d\d-\d\d )?\d\d:\d\d +\d+ s +\d+$/m);
    const workshops = await runCli(["workshops"], { env });
    expect(workshops.stdout).toMatch(
      new RegExp(`^${WS} .* 5 h [0-5]\\d min left, torn down at [\\d :-]+$`, "m"),
    );
    const events = await runCli(["events", WS], { env });
    expect(events.stdout).toMatch(/^(\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d +host\.ready /m);
    const portal = await runCli(["portal", "status", WS], { env });
    expect(portal.stdout).toMatch(
      /^student-01 +claimed +Dana Scully +dana@example\.test +(\d{4}-\d\d-\d\d )?\d\d:\d\d/m,
    );
  });
});
