import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../harness/cli.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;

beforeAll(async () => {
  work = tempDir("labfleet-cliops-");
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  writeFileSync(
    join(work, "fleet.yaml"),
    workshopYaml({
      name: "ops",
      lab: "fail",
      count: 3,
      extraLab: "  requires:\n    commands: [bash]\n  ui_ports:\n    - { name: web, port: 8443 }\n",
    }),
  );
  writeFileSync(
    join(work, "strict.yaml"),
    workshopYaml({
      name: "ops",
      lab: "fail",
      count: 3,
      extraLab: "  requires:\n    commands: [no-such-tool-here]\n",
    }),
  );
  const up = await runCli(["up", "-f", join(work, "fleet.yaml")], { env });
  expect(up.code).toBe(1); // student-02 fails by design
});
afterAll(async () => {
  await runCli(["down", "ops", "--yes"], { env });
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("fleet operations from the CLI", () => {
  it("doctor exits 0 when every selected host passes and 1 with the failing checks spelled out", async () => {
    const ok = await runCli(["doctor", "-f", join(work, "fleet.yaml")], { env });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/^student-01\s+pass\s+-$/m);
    expect(ok.stdout).toContain("3/3 hosts pass");

    const bad = await runCli(["doctor", "-f", join(work, "strict.yaml"), "--host", "student-01", "-j", "2"], {
      env,
    });
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/^student-01\s+FAIL\s+command:no-such-tool-here$/m);
    expect(bad.stdout).toContain("command:no-such-tool-here: not found on PATH (expected installed)");
    expect(bad.stdout).toContain("0/1 hosts pass");
    const json = JSON.parse((await runCli(["doctor", "ops", "--output", "json"], { env })).stdout);
    expect(json.reports).toHaveLength(3);
    // -f submits the file it names: put the first one back for the tests below.
    expect((await runCli(["doctor", "-f", join(work, "fleet.yaml")], { env })).code).toBe(0);
  });

  it("status refreshes and shows only the selected hosts", async () => {
    const r = await runCli(["status", "ops", "--host", "student-02", "--output", "json"], { env });
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.hosts.map((h: { id: string; state: string }) => [h.id, h.state])).toEqual([
      ["student-02", "failed"],
    ]);
  });

  it("retry redeploys the failed host and exits 1 while it still fails", async () => {
    const r = await runCli(["retry", "ops"], { env });
    expect(r.stdout).toMatch(/^retry ops: run run_\w+ on student-02$/m);
    expect(r.stdout).toMatch(/student-02 failed: setup exited with code 7/);
    expect(r.code).toBe(1);
    const none = await runCli(["retry", "ops", "--host", "student-01"], { env });
    expect(none.code).toBe(0);
    expect(none.stdout).toContain("nothing to retry");
    expect((await runCli(["retry", "ops", "--failed-only", "--all-selected"], { env })).code).toBe(2);
  });

  it("deploy on one healthy host exits 0", async () => {
    const r = await runCli(["deploy", "ops", "--host", "student-03", "--force", "--output", "json"], { env });
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.hosts.map((h: { id: string }) => h.id)).toEqual(["student-03"]);
    expect(doc.run.kind).toBe("deploy");
  });

  it("diagnose writes <workshop>.diagnose-<utc>/<host>/... with an index", async () => {
    const r = await runCli(["diagnose", "ops"], { env, cwd: work });
    expect(r.code).toBe(0);
    const folder = readdirSync(work).find((f) => f.startsWith("ops.diagnose-"));
    expect(folder).toMatch(/^ops\.diagnose-\d{8}T\d{6}Z$/);
    expect(r.stdout).toContain(`wrote ${folder}/ (1 hosts)`);
    const index = JSON.parse(readFileSync(join(work, folder as string, "index.json"), "utf8"));
    expect(index.hosts.map((h: { id: string }) => h.id)).toEqual(["student-02"]);
    expect(readdirSync(join(work, folder as string, "student-02")).sort()).toEqual([
      "lab.log.tail",
      "setup.sh",
      "status.json",
      "status.jsonl",
      "summary.json",
      "wrapper.txt",
    ]);
    expect(existsSync(join(work, folder as string, "student-01"))).toBe(false);
  });

  it("access prints one column per UI", async () => {
    const r = await runCli(["access", "ops"], { env });
    expect(r.code).toBe(0);
    expect(r.stdout.split("\n")[0]).toMatch(/^host\s+state\s+address\s+web\s+credentials$/);
    expect(r.stdout).toMatch(/^student-01\s+ready\s+127\.0\.0\.1\s+https:\/\/127\.0\.0\.1:8443\/\s+-$/m);
  });

  it("hosts keys lists pinned keys, forget-key needs --host", async () => {
    const keys = await runCli(["hosts", "keys", "ops"], { env });
    expect(keys.code).toBe(0);
    expect(keys.stdout.trim()).toBe("host  origin  type  fingerprint  pinned at");
    const forget = await runCli(["hosts", "forget-key", "ops"], { env });
    expect(forget.code).toBe(2);
    const unknown = await runCli(["hosts", "forget-key", "ops", "--host", "student-01"], { env });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("no pinned key for student-01");
  });
});
