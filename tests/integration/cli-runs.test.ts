import { spawn } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type CliResult, cliBin, runCli } from "../harness/cli.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/** `labfleet runs`, `submit`, and --output json where it used to be ignored, against the local runtime. */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const file = (name: string) => join(work, name);

interface Run {
  id: string;
  kind: string;
  state: string;
  startedAt: string;
  durationSeconds?: number;
  transitions: number;
  hosts?: Record<string, { state: string; error?: string }>;
  error?: string;
}

const json = async (args: string[], extra: Record<string, string | undefined> = {}) => {
  const r = await runCli([...args, "--output", "json"], { env: { ...env, ...extra } });
  expect(r.code, r.stderr).toBe(0);
  expect(r.stderr).toBe("");
  return JSON.parse(r.stdout);
};

/** runCli with text on stdin (the harness's runCli closes stdin). */
function runCliWithInput(args: string[], input: string, childEnv: Record<string, string | undefined>) {
  return new Promise<CliResult>((resolve, reject) => {
    const child = spawn(process.execPath, [cliBin, ...args], {
      cwd: work,
      env: { ...process.env, NO_COLOR: "1", ...childEnv } as NodeJS.ProcessEnv,
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

beforeAll(async () => {
  work = tempDir("labfleet-cli-runs-");
  const home = join(work, "operator-home");
  mkdirSync(home, { recursive: true });
  rt = await testRuntime({ dataDir: join(work, ".labfleet"), labfleetHome: home });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  writeFileSync(file("ok.yaml"), workshopYaml({ name: "cli-runs", count: 2 }));
  writeFileSync(file("ok-3.yaml"), workshopYaml({ name: "cli-runs", count: 3 }));
  writeFileSync(file("fail.yaml"), workshopYaml({ name: "cli-runs-fail", lab: "fail", count: 2 }));
  writeFileSync(
    file("bad.yaml"),
    "name: cli-runs-bad\nlab:\n  source: ./lab\n  setup: ''\nprovider:\n  type: local\n  count: 0\n",
  );
});
afterAll(async () => {
  await runCli(["down", "cli-runs", "--yes"], { env });
  await runCli(["down", "cli-runs-fail", "--yes"], { env });
  await rt?.close();
  if (work) removeDir(work);
});

describe("labfleet submit", () => {
  it("creates, then updates, the workshop and starts nothing", async () => {
    const created = await runCli(["submit", "-f", file("ok.yaml")], { env });
    expect(created.stderr).toBe("");
    expect(created.code).toBe(0);
    expect(created.stdout).toBe(
      `cli-runs: created from ${file("ok.yaml")}; nothing was started (labfleet up -f ${file("ok.yaml")} runs it)\n`,
    );
    expect(await json(["submit", "-f", file("ok-3.yaml")])).toEqual({ name: "cli-runs", created: false });
    const again = await runCli(["submit", "-f", file("ok.yaml")], { env });
    expect(again.code).toBe(0);
    expect(again.stdout).toMatch(/^cli-runs: updated from /);

    // Stored, with no run and no lab built.
    expect(await json(["runs", "cli-runs"])).toEqual({ workshop: "cli-runs", runs: [] });
    const text = await runCli(["runs", "cli-runs"], { env });
    expect(text.code).toBe(0);
    expect(text.stdout).toBe("cli-runs: no runs yet (labfleet up starts one)\n");
    const { workshops } = await json(["workshops"]);
    const w = workshops.find((x: { name: string }) => x.name === "cli-runs");
    expect(w.hosts.ready).toBe(0);
    const events = await json(["events", "cli-runs"]);
    expect(events.events.filter((e: { type: string }) => e.type.startsWith("run."))).toEqual([]);
  });

  it("refuses an invalid file before sending it (exit 1), and bad usage with exit 2", async () => {
    const bad = await runCli(["submit", "-f", file("bad.yaml"), "--output", "json"], { env });
    expect(bad.code).toBe(1);
    expect(bad.stdout).toBe("");
    expect(bad.stderr).toContain("bad.yaml is not valid");
    expect(bad.stderr).toContain("provider.count");
    expect((await runCli(["runs", "cli-runs-bad"], { env })).code).toBe(1); // never stored

    const none = await runCli(["submit"], { env });
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("submit needs -f workshop.yaml");
    const extra = await runCli(["submit", "-f", file("ok.yaml"), "other"], { env });
    expect(extra.code).toBe(2);
    expect(extra.stderr).toContain("submit takes no arguments besides -f");
    const missing = await runCli(["submit", "-f", file("nope.yaml")], { env });
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/cannot read .*nope\.yaml: ENOENT/);
    expect((await runCli(["submit", "-f", file("ok.yaml"), "-o", "yaml"], { env })).code).toBe(2);
  });
});

describe("labfleet runs", () => {
  let first: string;
  let second: string;
  let failed: string;

  beforeAll(async () => {
    first = (await json(["up", "-f", file("ok.yaml")])).run.id;
    second = (await json(["up", "-f", file("ok.yaml")])).run.id; // ready labs are skipped: a quick run
    const up = await runCli(["up", "-f", file("fail.yaml"), "--output", "json"], { env });
    expect(up.code).toBe(1); // student-02 fails by design
    failed = JSON.parse(up.stdout).run.id;
  });

  it("lists the workshop's runs newest first, as text and as JSON", async () => {
    const doc = await json(["runs", "cli-runs"]);
    expect(doc.workshop).toBe("cli-runs");
    const runs = doc.runs as Run[];
    expect(runs.map((r) => r.id)).toEqual([second, first]);
    for (const r of runs) {
      expect(r).toMatchObject({ kind: "up", state: "succeeded" });
      expect(r.transitions).toBeGreaterThan(0);
      expect(r.durationSeconds).toBeGreaterThanOrEqual(0);
    }

    const text = await runCli(["runs", "cli-runs"], { env });
    expect(text.stderr).toBe("");
    expect(text.code).toBe(0);
    const lines = text.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^id +kind +state +started +duration +transitions$/);
    expect(lines.slice(1).map((l) => l.split(/\s+/)[0])).toEqual([second, first]);
    expect(lines[1]).toMatch(
      new RegExp(`^${second} +up +succeeded +(\\d{4}-\\d\\d-\\d\\d )?\\d\\d:\\d\\d +\\d+ s +\\d+$`),
    );

    // -f names the workshop without submitting anything.
    const byFile = await json(["runs", "-f", file("ok.yaml")]);
    expect(byFile.runs.map((r: Run) => r.id)).toEqual([second, first]);
  });

  it("shows one run with its result on each host", async () => {
    const doc = await json(["runs", "cli-runs", first]);
    expect(doc.workshop).toBe("cli-runs");
    expect(doc.run).toMatchObject({
      id: first,
      kind: "up",
      state: "succeeded",
      hosts: { "student-01": { state: "ready" }, "student-02": { state: "ready" } },
    });
    // The same document with -f and the run id after it.
    expect(await json(["runs", "-f", file("ok.yaml"), first])).toEqual(doc);

    const text = await runCli(["runs", "cli-runs", first], { env });
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(new RegExp(`^run: +${first}$`, "m"));
    expect(text.stdout).toMatch(/^workshop: +cli-runs$/m);
    expect(text.stdout).toMatch(/^state: +succeeded$/m);
    expect(text.stdout).toMatch(/^duration: +\d+ s$/m);
    expect(text.stdout).toMatch(/^host +result +error or detail$/m);
    expect(text.stdout).toMatch(/^student-01 +ready$/m);
    expect(text.stdout).toMatch(/^student-02 +ready$/m);
  });

  it("shows a failed run's reasons per host, and exits 0 for reading it", async () => {
    const doc = await json(["runs", "cli-runs-fail", failed]);
    expect(doc.run.state).toBe("failed");
    expect(doc.run.error).toBe("1 of 2 labs are not ready");
    expect(doc.run.hosts["student-01"]).toEqual({ state: "ready" });
    expect(doc.run.hosts["student-02"].state).toBe("failed");
    expect(doc.run.hosts["student-02"].error).toContain("setup exited with code 7");

    const text = await runCli(["runs", "cli-runs-fail", failed], { env });
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^state: +failed$/m);
    expect(text.stdout).toMatch(/^error: +1 of 2 labs are not ready$/m);
    expect(text.stdout).toMatch(/^student-02 +failed +setup exited with code 7/m);
    // The log tail in the error is shown in full below the table.
    expect(text.stdout).toMatch(/^student-02:\n {2}setup exited with code 7/m);

    const list = await runCli(["runs", "cli-runs-fail"], { env });
    expect(list.stdout).toMatch(new RegExp(`^${failed} +up +failed `, "m"));
  });

  it("exits 1 for an unknown run or workshop and 2 for bad usage", async () => {
    const nope = "run_00000000000000000000000000"; // well formed, and no run of this workshop
    const unknown = await runCli(["runs", "cli-runs", nope], { env });
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toBe("");
    expect(unknown.stderr).toContain(`no run ${nope} in workshop cli-runs`);
    const malformed = await runCli(["runs", "cli-runs", "run_nope"], { env });
    expect(malformed.code).toBe(1);
    expect(malformed.stderr).toContain("runId: expected a run id: run_ and 26 letters and digits");
    const unknownJson = await runCli(["runs", "cli-runs", nope, "-o", "json"], { env });
    expect(unknownJson.code).toBe(1);
    expect(unknownJson.stdout).toBe("");
    // A run of another workshop is not this one's.
    expect((await runCli(["runs", "cli-runs", failed], { env })).code).toBe(1);
    const noWorkshop = await runCli(["runs", "no-such-workshop"], { env });
    expect(noWorkshop.code).toBe(1);
    expect(noWorkshop.stderr).toContain("no-such-workshop");

    const noName = await runCli(["runs"], { env });
    expect(noName.code).toBe(2);
    expect(noName.stderr).toContain("usage: labfleet runs");
    const tooMany = await runCli(["runs", "cli-runs", first, "extra"], { env });
    expect(tooMany.code).toBe(2);
    expect(tooMany.stderr).toContain("too many arguments: extra");
    expect((await runCli(["runs", "-f", file("ok.yaml"), first, "extra"], { env })).code).toBe(2);
    expect((await runCli(["runs", "cli-runs", "--output", "yaml"], { env })).code).toBe(2);
    expect((await runCli(["runs", "cli-runs", "--frobnicate"], { env })).code).toBe(2);
    // An invalid file is exit 1, as for every command that reads one.
    expect((await runCli(["runs", "-f", file("bad.yaml")], { env })).code).toBe(1);
  });
});

describe("--output json where it used to be ignored", () => {
  it("hosts pubkey prints the key line as text and as a document", async () => {
    const text = await runCli(["hosts", "pubkey", "cli-runs"], { env });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^ssh-ed25519 \S+ labfleet\n$/);
    expect(await json(["hosts", "pubkey", "cli-runs"])).toEqual({ publicKey: text.stdout.trimEnd() });
  });

  it("hosts forget-key reports what it forgot, keeping what was done when a later host fails", async () => {
    const pin = (hostId: string) =>
      rt.store.hostKey
        .put({
          workshop: "cli-runs",
          hostId,
          key: "AAAAC3NzaC1lZDI1NTE5",
          fingerprint: `SHA256:${hostId}`,
          pinnedAt: new Date().toISOString(),
        })
        .go();
    await pin("student-01");
    await pin("student-02");
    expect(
      await json(["hosts", "forget-key", "cli-runs", "--host", "student-01", "--host", "student-02"]),
    ).toEqual({
      forgotten: [
        { hostId: "student-01", fingerprint: "SHA256:student-01" },
        { hostId: "student-02", fingerprint: "SHA256:student-02" },
      ],
    });
    expect(await json(["hosts", "keys", "cli-runs"])).toEqual({ keys: [] });

    // The first host fails: no document, the error on stderr, exit 1 (as any command's API error).
    const none = await runCli(["hosts", "forget-key", "cli-runs", "--host", "student-01", "-o", "json"], {
      env,
    });
    expect(none.code).toBe(1);
    expect(none.stdout).toBe("");
    expect(none.stderr).toContain("no pinned key for student-01");

    // A later host fails: what was forgotten is still reported.
    await pin("student-01");
    const partial = await runCli(
      ["hosts", "forget-key", "cli-runs", "--host", "student-01", "--host", "student-02", "-o", "json"],
      { env },
    );
    expect(partial.code).toBe(1);
    expect(JSON.parse(partial.stdout)).toEqual({
      forgotten: [{ hostId: "student-01", fingerprint: "SHA256:student-01" }],
      failed: { hostId: "student-02", message: "no pinned key for student-02 in workshop cli-runs" },
    });
    expect(partial.stderr).toContain("no pinned key for student-02");

    // Without --host it is still bad usage.
    expect((await runCli(["hosts", "forget-key", "cli-runs", "-o", "json"], { env })).code).toBe(2);
  });

  it("login --token and logout print one document, never the token", async () => {
    const home = join(work, "cli-home");
    const cliEnv = { LABFLEET_HOME: home, LABFLEET_URL: undefined, LABFLEET_TOKEN: undefined };
    const out = await runCli(["logout", "--output", "json"], { env: cliEnv });
    expect(out.code).toBe(0);
    expect(JSON.parse(out.stdout)).toEqual({
      wasSignedIn: false,
      url: null,
      revocation: null,
      note: "not signed in",
      credentialsFile: join(home, "credentials"),
    });

    const created = await json(["tokens", "create", "cli-runs-test"]);
    const token = created.token as string;
    const login = await runCliWithInput(
      ["login", "--url", rt.url, "--token", "--output", "json"],
      `${token}\n`,
      {
        ...cliEnv,
        LABFLEET_DATA_DIR: undefined,
      },
    );
    expect(login.code, login.stderr).toBe(0);
    expect(login.stdout + login.stderr).not.toContain(token);
    const signedIn = JSON.parse(login.stdout);
    expect(signedIn).toEqual({
      url: rt.url,
      owner: expect.any(String),
      credentialsFile: join(home, "credentials"),
    });
    expect(JSON.parse(readFileSync(join(home, "credentials"), "utf8"))).toEqual({ url: rt.url, token });

    const loggedOut = await runCli(["logout", "-o", "json"], { env: cliEnv });
    expect(loggedOut.code).toBe(0);
    expect(JSON.parse(loggedOut.stdout)).toEqual({
      wasSignedIn: true,
      url: rt.url,
      revocation: "revoked",
      note: "the token is revoked",
      credentialsFile: join(home, "credentials"),
    });
    expect(existsSync(join(home, "credentials"))).toBe(false);
    const { tokens } = await json(["tokens", "list"]);
    expect(tokens.map((t: { id: string }) => t.id)).not.toContain(created.info.id);
  });
});
