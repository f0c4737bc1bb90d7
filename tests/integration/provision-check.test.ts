import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ScanCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CheckReport } from "../../shared/fleet/check.ts";
import { runCli } from "../harness/cli.ts";
import { processesUnder, removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * `labfleet provision (NAME | -f FILE) --check` on the local runtime, through the real CLI: per host, what
 * provisioning would create or reuse, with nothing stored, created or started; exit 0 when nothing would
 * change, 2 when something would, 1 on an error.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const WS = "pcheck";

const cli = (...args: string[]) => runCli(args, { env, cwd: work });
const writeYaml = (count: number) => {
  const f = join(work, `${WS}-${count}.yaml`);
  writeFileSync(f, workshopYaml({ name: WS, count }));
  return f;
};
const check = async (...args: string[]): Promise<{ code: number | null; report: CheckReport }> => {
  const r = await cli("provision", ...args, "--check", "--output", "json");
  expect(r.stderr).toBe("");
  return { code: r.code, report: JSON.parse(r.stdout) as CheckReport };
};

/** Every item of the table and every file under the hosts' folder: what a check must leave as it was. */
async function snapshot(): Promise<string> {
  const items = (await rt.store.doc.send(new ScanCommand({ TableName: rt.table }))).Items ?? [];
  const files: string[] = [];
  const walk = (dir: string) => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const st = statSync(p);
      if (st.isDirectory()) {
        files.push(`${p}/`);
        walk(p);
      } else files.push(`${p} ${st.mtimeMs} ${createHash("sha256").update(readFileSync(p)).digest("hex")}`);
    }
  };
  walk(join(rt.dataDir, "hosts"));
  return [...items.map((i) => JSON.stringify(i, Object.keys(i).sort())).sort(), ...files].join("\n");
}

beforeAll(async () => {
  work = tempDir("labfleet-provision-check-");
  rt = await testRuntime({
    dataDir: join(work, ".labfleet"),
    labfleetHome: join(work, "home"),
    schedulerIntervalMs: 3_600_000,
  });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
});
afterAll(async () => {
  await rt?.close();
  if (work) {
    expect(processesUnder(work)).toEqual([]);
    removeDir(work);
  }
});

describe("labfleet provision --check", () => {
  it("on a file never submitted: every host to create (exit 2); nothing submitted or created", async () => {
    const file = writeYaml(2);
    const before = await snapshot();
    const { code, report } = await check("-f", file);
    expect(code).toBe(2);
    expect(report).toEqual({
      workshop: WS,
      command: "provision",
      changes: true,
      items: [
        expect.objectContaining({ hostId: "student-01", stage: "provision", action: "create" }),
        expect.objectContaining({ hostId: "student-02", stage: "provision", action: "create" }),
      ],
    });
    // Only the provision stage, whatever --only/--skip would say: no deploy, wait or publish items.
    const skipped = await check("-f", file, "--skip", "provision");
    expect(skipped.report.items.map((i) => i.stage)).toEqual(["provision", "provision"]);
    const text = await cli("provision", "-f", file, "--check");
    expect(text.code).toBe(2);
    expect(text.stdout).toContain("check pcheck (provision): 2 changes on 2 hosts · nothing was changed");
    expect(text.stdout).toMatch(/^student-01 +provision +create +/m);
    expect(await snapshot()).toBe(before);
    expect((await rt.store.workshop.get({ name: WS }).go()).data).toBeNull();
    expect(existsSync(join(rt.dataDir, "hosts", WS))).toBe(false);
  });

  it("by name, of a workshop that does not exist: exit 1 with the reason", async () => {
    const r = await cli("provision", WS, "--check");
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`no workshop named ${WS}`);
    expect(r.stdout).toBe("");
  });

  it("after provisioning: every host reused (exit 0); a file with one more host: that one created (exit 2)", async () => {
    const file = writeYaml(2);
    const p = await cli("provision", "-f", file);
    expect(p.code, p.stderr + p.stdout).toBe(0);
    const before = await snapshot();

    const byName = await check(WS);
    expect(byName.code).toBe(0);
    expect(byName.report.changes).toBe(false);
    expect(byName.report.items.map((i) => [i.hostId, i.stage, i.action])).toEqual([
      ["student-01", "provision", "reuse"],
      ["student-02", "provision", "reuse"],
    ]);
    const text = await cli("provision", WS, "--check");
    expect(text.code).toBe(0);
    expect(text.stdout).toContain("check pcheck (provision): nothing would change · nothing was changed");

    const bigger = await check("-f", writeYaml(3));
    expect(bigger.code).toBe(2);
    expect(bigger.report.items.map((i) => [i.hostId, i.action])).toEqual([
      ["student-01", "reuse"],
      ["student-02", "reuse"],
      ["student-03", "create"],
    ]);
    // None of the checks stored, created or started anything.
    expect(await snapshot()).toBe(before);
    expect(existsSync(rt.provider.hostDir(WS, "student-03"))).toBe(false);
  });
});
