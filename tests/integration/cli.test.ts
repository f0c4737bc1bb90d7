import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { runCli } from "../harness/cli.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;

beforeAll(async () => {
  work = tempDir("labfleet-cli-");
  rt = await testRuntime({ dataDir: join(work, ".labfleet") });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  writeFileSync(join(work, "ok.yaml"), workshopYaml({ name: "cli-ok", count: 2 }));
  writeFileSync(join(work, "fail.yaml"), workshopYaml({ name: "cli-fail", lab: "fail", count: 2 }));
  writeFileSync(
    join(work, "bad.yaml"),
    "name: BAD\nlab:\n  source: ./lab\n  setup: ''\nprovider:\n  type: local\n  count: 0\n",
  );
});
afterAll(async () => {
  await rt?.close();
  if (work) removeDir(work);
});

describe("labfleet CLI", () => {
  it("validate checks a file offline and prints every error with its path", async () => {
    const bad = await runCli(["validate", "-f", join(work, "bad.yaml")], { cwd: "/" });
    expect(bad.code).toBe(1);
    expect(bad.stdout).toContain("3 errors");
    expect(bad.stdout).toMatch(/^name: expected a name of lowercase letters.*\(line 1, column 7\)$/m);
    expect(bad.stdout).toMatch(/^lab\.setup: expected the command that builds the lab, got an empty string/m);
    expect(bad.stdout).toMatch(/^provider\.count: expected a host count: a whole number from 1 to 500/m);

    const json = await runCli(["validate", "-f", join(work, "bad.yaml"), "--output", "json"], { cwd: "/" });
    expect(json.code).toBe(1);
    expect(
      JSON.parse(json.stdout)
        .errors.map((e: { path: string }) => e.path)
        .sort(),
    ).toEqual(["lab.setup", "name", "provider.count"]);

    const good = await runCli(["validate", "-f", join(work, "ok.yaml")], { cwd: "/" });
    expect(good.code).toBe(0);
    expect(good.stdout).toContain("valid (workshop cli-ok)");
  });

  it("up --plan says what would be created or reused per host and changes nothing", async () => {
    const yaml = join(work, "plan.yaml");
    writeFileSync(yaml, workshopYaml({ name: "cli-plan", count: 2 }));
    const r = await runCli(["up", "-f", yaml, "--plan"], { env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(
      "plan cli-plan (local): 2 to create, 0 to reuse, 0 unchanged · nothing was changed",
    );
    expect(r.stdout).toMatch(/^student-01 +create/m);
    expect(r.stdout).toMatch(/^student-02 +create/m);
    const json = await runCli(["up", "-f", yaml, "--plan", "--output", "json"], { env });
    expect(JSON.parse(json.stdout).items.map((i: { action: string }) => i.action)).toEqual([
      "create",
      "create",
    ]);
    // Nothing was stored: the workshop is unknown to the runtime.
    const status = await runCli(["status", "cli-plan"], { env });
    expect(status.code).toBe(1);
    expect(status.stderr).toContain("cli-plan");
    // A bad file is refused with its path, as up would.
    const bad = await runCli(["up", "-f", join(work, "bad.yaml"), "--plan"], { env });
    expect(bad.code).toBe(1);
    expect(bad.stdout + bad.stderr).toContain("provider.count");
  });

  it("up exits 0 with every lab ready and prints one JSON document", async () => {
    const r = await runCli(["up", "-f", join(work, "ok.yaml"), "--output", "json"], { env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.workshop).toBe("cli-ok");
    expect(doc.run.state).toBe("succeeded");
    expect(doc.hosts).toHaveLength(2);
    for (const h of doc.hosts) {
      expect(h).toMatchObject({ state: "ready", phase: "verify", error: null });
      expect(h.id).toMatch(/^student-0[12]$/);
    }
  });

  it("workshops lists them and events shows what happened, oldest first", async () => {
    const list = await runCli(["workshops", "--output", "json"], { env });
    expect(list.code, list.stderr).toBe(0);
    const ok = JSON.parse(list.stdout).workshops.find((w: { name: string }) => w.name === "cli-ok");
    expect(ok).toMatchObject({ state: "ready", provider: "local", hosts: { total: 2, ready: 2, failed: 0 } });
    const text = await runCli(["workshops"], { env });
    expect(text.stdout).toMatch(/^cli-ok +ready +local +2\/2 +0/m);

    const events = await runCli(["events", "cli-ok", "--output", "json"], { env });
    expect(events.code, events.stderr).toBe(0);
    const doc = JSON.parse(events.stdout) as {
      events: { id: string; type: string; hostId: string | null }[];
    };
    const types = doc.events.map((e) => e.type);
    expect(types[0]).toBe("run.started");
    expect(types.at(-1)).toBe("run.finished");
    expect(
      doc.events
        .filter((e) => e.type === "host.ready")
        .map((e) => e.hostId)
        .sort(),
    ).toEqual(["student-01", "student-02"]);
    const ids = doc.events.map((e) => e.id);
    expect([...ids].sort()).toEqual(ids);
    // --after: only what came later.
    const second = ids[1] ?? "";
    const later = JSON.parse(
      (await runCli(["events", "cli-ok", "--after", second, "--output", "json"], { env })).stdout,
    );
    expect(later.events.map((e: { id: string }) => e.id)).toEqual(ids.slice(2));
    const bad = await runCli(["events", "cli-ok", "--after", "nope"], { env });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("after");
  });

  it("hosts credentials prints one lab's access details, and only for one named host", async () => {
    const r = await runCli(["hosts", "credentials", "cli-ok", "--host", "student-02"], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      urls: { ui: "https://student-02.example.test/" },
      credentials: { password: "s3cret-student-02" },
    });
    const doc = JSON.parse(
      (await runCli(["hosts", "credentials", "cli-ok", "--host", "student-01", "-o", "json"], { env }))
        .stdout,
    );
    expect(doc).toEqual({
      host: "student-01",
      access: {
        urls: { ui: "https://student-01.example.test/" },
        credentials: { password: "s3cret-student-01" },
      },
    });
    expect((await runCli(["hosts", "credentials", "cli-ok"], { env })).code).toBe(2);
    const unknown = await runCli(["hosts", "credentials", "cli-ok", "--host", "student-09"], { env });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("no host student-09");
  });

  it("up exits non-zero when a lab fails, naming the host and the reason", async () => {
    const r = await runCli(["up", "-f", join(work, "fail.yaml")], { env });
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/student-02 failed: setup exited with code 7/);
    expect(r.stdout).toContain("1 of 2 labs are not ready");
  });

  it("finds the local runtime through .labfleet/runtime.json with no flags", async () => {
    // The runtime file carries the token, the key file the credential key: both are the owner's alone.
    expect(statSync(join(work, ".labfleet", "runtime.json")).mode & 0o777).toBe(0o600);
    expect(statSync(join(work, ".labfleet", "access.key")).mode & 0o777).toBe(0o600);
    const nested = join(work, "sub", "dir");
    mkdirSync(nested, { recursive: true });
    const r = await runCli(["status", "cli-ok", "--output", "json"], { cwd: nested });
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.hosts.map((h: { state: string }) => h.state)).toEqual(["ready", "ready"]);
    expect(doc.runs[0].transitions).toBeGreaterThan(0);

    const text = await runCli(["status", "cli-ok"], { cwd: nested });
    expect(text.stdout).toMatch(/^cli-ok: ready · 2\/2 ready/m);
    expect(text.stdout).toMatch(/up succeeded in \d+ s · \d+ state transitions/);
  });

  it("says how to start a runtime when none is reachable", async () => {
    const r = await runCli(["status", "cli-ok"], { cwd: "/" });
    expect(r.code).toBe(3);
    expect(r.stderr).toContain("no labfleet runtime found: start one with `npx labfleet dev`");
  });

  it("down tears the workshop down and exits 0", async () => {
    const r = await runCli(["down", "-f", join(work, "ok.yaml"), "--yes", "--output", "json"], { env });
    expect(r.code).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.state).toBe("torn_down");
    expect(doc.hosts.every((h: { state: string }) => h.state === "torn_down")).toBe(true);
    expect((await runCli(["down", "cli-fail", "--yes"], { env })).code).toBe(0);
  });

  it("dev refuses a port that is taken, and an unreadable file, with exit code 2", async () => {
    const port = new URL(rt.url).port;
    const dir = join(work, "dev-port");
    const busy = await runCli(["dev", "--data-dir", dir, "--port", port], {
      env: { LABFLEET_DYNAMODB_ENDPOINT: inject("dynamoEndpoint"), LABFLEET_TABLE: "dev_port_test" },
    });
    expect(busy.code).toBe(2);
    expect(busy.stderr).toContain(`port ${port} on 127.0.0.1 is in use`);
    const missing = await runCli(["dev", "-f", join(work, "nope.yaml"), "--data-dir", dir]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/cannot read .*nope\.yaml: ENOENT/);
  });

  it("rejects bad usage with exit code 2", async () => {
    expect((await runCli(["frobnicate"], { env })).code).toBe(2);
    expect((await runCli(["up"], { env })).code).toBe(2);
    expect((await runCli(["status", "x", "--output", "yaml"], { env })).code).toBe(2);
    const help = await runCli(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain("labfleet up -f workshop.yaml");
  });
});
