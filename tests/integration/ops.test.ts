import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listHosts } from "../../shared/fleet/workshops.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import {
  fixturesDir,
  removeDir,
  tempDir,
  testRuntime,
  workshopYaml,
  wrapperGroup,
} from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let home: string;
const TOKEN = "ops-suite-token";
const SECRET = "tok-3f9a71c2e8d4b6";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();
const post = (path: string, body: unknown = {}) =>
  app.request(`/api/workshops${path}`, { method: "POST", headers: auth, body: JSON.stringify(body) });
const get = (path: string) => app.request(`/api/workshops${path}`, { headers: auth });

function writeSecrets(values: Record<string, string>, mode = 0o600) {
  mkdirSync(home, { recursive: true });
  const file = join(home, "secrets.yaml");
  writeFileSync(
    file,
    Object.entries(values)
      .map(([k, v]) => `${k}: "${v}"\n`)
      .join(""),
  );
  chmodSync(file, mode);
}

async function submit(yaml: string) {
  const res = await post("", { yaml });
  expect([200, 201]).toContain(res.status);
}

async function runToEnd(res: Response) {
  expect(res.status).toBe(202);
  const { run } = await j(res);
  await rt.executor.idle();
  return run.id as string;
}

const secretYaml = (name: string, count = 3) =>
  workshopYaml({
    name,
    lab: "secret",
    count,
    extraLab:
      "  operator_secrets: [API_TOKEN]\n  ui_ports:\n    - { name: console, port: 9443 }\n    - { name: grafana, port: 3000, scheme: http, path: /d }\n",
  });

beforeAll(async () => {
  const data = tempDir();
  home = join(data, "operator-home");
  rt = await testRuntime({ dataDir: data, token: TOKEN, labfleetHome: home });
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("operator secrets", () => {
  it("refuses to deploy before touching any host when a secret is missing", async () => {
    await submit(secretYaml("sec"));
    const res = await post("/sec/up");
    expect(res.status).toBe(400);
    const body = await j(res);
    expect(body.error.code).toBe("secrets.missing");
    expect(body.error.message).toContain("API_TOKEN");
    expect(existsSync(join(rt.dataDir, "hosts", "sec"))).toBe(false);
    expect((await listHosts("sec")).length).toBe(0);
    expect((await j(await get("/sec"))).runs).toEqual([]);
  });

  it("refuses a secrets file that others can read", async () => {
    writeSecrets({ API_TOKEN: SECRET }, 0o644);
    const res = await post("/sec/up");
    expect(res.status).toBe(400);
    expect((await j(res)).error.message).toMatch(/readable by others .*chmod 600/);
  });

  it("copies exactly the listed keys to each host, 0600, before setup runs", async () => {
    writeSecrets({ API_TOKEN: SECRET, OTHER_SECRET: "not-for-hosts" });
    await runToEnd(await post("/sec/up"));
    const dir = join(rt.dataDir, "hosts", "sec", "student-01");
    const file = join(dir, ".labfleet", "sec", "secrets.env");
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(readFileSync(file, "utf8")).toBe(`API_TOKEN='${SECRET}'\n`);
    expect(readFileSync(join(dir, "lab", "secrets.mode"), "utf8").trim()).toBe("600");
    const s = await j(await get("/sec"));
    expect(s.hostList.map((h: { state: string }) => h.state)).toEqual(["ready", "failed", "ready"]);
  });
});

describe("diagnose", () => {
  it("collects what explains a failed host, and no secret", async () => {
    const res = await post("/sec/diagnose", {});
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/gzip");
    const folder = res.headers.get("x-labfleet-diagnose-name") ?? "";
    expect(folder).toMatch(/^sec\.diagnose-\d{8}T\d{6}Z$/);
    const tar = gunzipSync(Buffer.from(await res.arrayBuffer()));
    const work = tempDir("labfleet-diag-");
    const archive = join(work, "d.tar");
    writeFileSync(archive, tar);
    execFileSync("tar", ["-xf", archive, "-C", work]);
    const read = (p: string) => readFileSync(join(work, folder, p), "utf8");
    const index = JSON.parse(read("index.json"));
    expect(index.hosts.map((h: { id: string }) => h.id)).toEqual(["student-02"]);
    const summary = JSON.parse(read("student-02/summary.json"));
    expect(summary).toMatchObject({ host: "student-02", state: "failed", verdict: "failed", exitCode: 4 });
    expect(read("student-02/lab.log.tail")).toContain("registry refused token [redacted]");
    expect(read("student-02/status.jsonl")).toContain('"phase":"configure"');
    expect(read("student-02/wrapper.txt")).toContain("labfleet lab wrapper");
    // Nor does the failure reason on the host's record, which status and the API show.
    expect(JSON.stringify(await j(await get("/sec")))).not.toContain(SECRET);
    const everything =
      execFileSync(
        "cat",
        index.hosts[0].files.map((f: string) => join(work, folder, f)),
      ).toString() + tar.toString("latin1");
    expect(everything).not.toContain(SECRET);
    expect(everything).not.toContain("xyzzy");
    expect(existsSync(join(work, folder, "student-02", "access.json"))).toBe(false);
    rmSync(work, { recursive: true, force: true });

    const all = await post("/sec/diagnose", { allSelected: true });
    const allTar = gunzipSync(Buffer.from(await all.arrayBuffer())).toString("latin1");
    expect(allTar).toContain("student-01/summary.json");
    expect(allTar).not.toContain(SECRET);
    expect(allTar).not.toContain("pw-student-01-xyzzy");
  });
});

describe("retry, deploy and status on a selection", () => {
  it("retry redeploys only the failed host", async () => {
    const before = Object.fromEntries((await listHosts("sec")).map((h) => [h.hostId, h.attempt]));
    const res = await post("/sec/retry", {});
    expect(res.status).toBe(202);
    const body = await j(res);
    expect(body.hosts).toEqual(["student-02"]);
    await rt.executor.idle();
    const after = Object.fromEntries((await listHosts("sec")).map((h) => [h.hostId, h.attempt]));
    expect(after).toEqual({ ...before, "student-02": (before["student-02"] ?? 0) + 1 });
    const run = (await j(await get("/sec"))).runs[0];
    expect(run.kind).toBe("retry");
    expect(Object.keys(run.hosts)).toEqual(["student-02"]);
  });

  it("retry with nothing failed in the selection starts nothing", async () => {
    const res = await post("/sec/retry", { hosts: ["student-01"] });
    expect(res.status).toBe(200);
    expect(await j(res)).toEqual({ run: null, hosts: [] });
  });

  it("deploy --host --force rebuilds just that host; without --force a complete lab is skipped", async () => {
    const before = Object.fromEntries((await listHosts("sec")).map((h) => [h.hostId, h.attempt]));
    await runToEnd(await post("/sec/deploy", { hosts: ["student-03"] }));
    expect(Object.fromEntries((await listHosts("sec")).map((h) => [h.hostId, h.attempt]))).toEqual(before);
    await runToEnd(await post("/sec/deploy", { hosts: ["student-03"], force: true, concurrency: 1 }));
    const after = Object.fromEntries((await listHosts("sec")).map((h) => [h.hostId, h.attempt]));
    expect(after).toEqual({ ...before, "student-03": (before["student-03"] ?? 0) + 1 });
  });

  it("names an unknown host instead of doing nothing", async () => {
    const res = await post("/sec/deploy", { hosts: ["student-09"] });
    expect(res.status).toBe(400);
    expect((await j(res)).error.message).toContain("student-09");
  });

  it("status refresh finds a lab whose wrapper died mid-build and fails it", async () => {
    await submit(workshopYaml({ name: "dies", lab: "hang", count: 2 }));
    const up = await post("/dies/up");
    expect(up.status).toBe(202);
    const pidFile = join(rt.dataDir, "hosts", "dies", "student-01", ".labfleet", "dies", "pid");
    const pid = await wrapperGroup(pidFile);
    process.kill(-pid, "SIGKILL");
    const res = await post("/dies/refresh", { hosts: ["student-01"] });
    const hosts = (await j(res)).hosts;
    expect(hosts.map((h: { id: string; state: string }) => [h.id, h.state])).toEqual([
      ["student-01", "failed"],
    ]);
    expect(hosts[0].error).toMatch(/wrapper died without an exit code/);
    await runToEnd(await post("/dies/teardown"));
  });
});

describe("doctor", () => {
  it("passes hosts that meet lab.requires and spells out what fails", async () => {
    await submit(
      workshopYaml({
        name: "doc",
        count: 2,
        extraLab: "  requires:\n    cpus: 1\n    commands: [bash, awk]\n",
      }),
    );
    await runToEnd(await post("/doc/up"));
    const ok = await j(await post("/doc/doctor"));
    expect(ok.ok).toBe(true);
    expect(ok.reports.map((r: { host: string; ok: boolean }) => [r.host, r.ok])).toEqual([
      ["student-01", true],
      ["student-02", true],
    ]);
    expect(ok.reports[0].checks.map((c: { name: string }) => c.name)).toEqual(
      expect.arrayContaining([
        "reachable",
        "sudo",
        "os",
        "cpus",
        "command:bash",
        "command:awk",
        "command:setsid",
      ]),
    );

    await submit(
      workshopYaml({
        name: "doc",
        count: 2,
        extraLab: "  requires:\n    cpus: 512\n    memory_gib: 100000\n    commands: [no-such-tool-here]\n",
      }),
    );
    const bad = await j(await post("/doc/doctor", { hosts: ["student-02"] }));
    expect(bad.ok).toBe(false);
    expect(bad.reports).toHaveLength(1);
    const failing = bad.reports[0].checks
      .filter((c: { ok: boolean }) => !c.ok)
      .map((c: { name: string; expected: string }) => [c.name, c.expected]);
    expect(failing).toEqual([
      ["cpus", "at least 512"],
      ["memory", "at least 100000 GiB"],
      ["command:no-such-tool-here", "installed"],
    ]);
  });
});

describe("access sheet", () => {
  it("has one column per UI and never a password", async () => {
    const sheet = await j(await get("/sec/access"));
    expect(sheet.columns).toEqual(["console", "grafana"]);
    expect(sheet.rows[0]).toEqual({
      host: "student-01",
      state: "ready",
      address: "127.0.0.1",
      urls: { console: "https://127.0.0.1:9443/", grafana: "http://127.0.0.1:3000/d" },
      credentials: true,
    });
    expect(JSON.stringify(sheet)).not.toContain("xyzzy");
    const one = await j(await get("/sec/access?host=student-03"));
    expect(one.rows.map((r: { host: string }) => r.host)).toEqual(["student-03"]);
  });
});

describe("git sources", () => {
  it("checks the ref before touching any host, then clones and resets to it", async () => {
    const repo = tempDir("labfleet-git-");
    const git = (...args: string[]) =>
      execFileSync("git", ["-C", repo, ...args], {
        env: {
          ...process.env,
          GIT_AUTHOR_NAME: "t",
          GIT_AUTHOR_EMAIL: "t@example.test",
          GIT_COMMITTER_NAME: "t",
          GIT_COMMITTER_EMAIL: "t@example.test",
        },
      });
    git("init", "-q", "-b", "main");
    writeFileSync(join(repo, "setup.sh"), readFileSync(join(fixturesDir, "labs", "quick", "setup.sh")));
    git("add", ".");
    git("commit", "-qm", "v1");
    git("tag", "v1");
    writeFileSync(join(repo, "VERSION"), "2\n");
    git("add", ".");
    git("commit", "-qm", "v2");
    const yaml = `name: gitlab
lab:
  source: git:file://${repo}
  ref: main
  setup: bash setup.sh
  health: test -f built
provider:
  type: local
  count: 1
`;
    await submit(yaml);
    const bad = await post("/gitlab/deploy", { ref: "no-such-branch" });
    expect(bad.status).toBe(400);
    expect((await j(bad)).error.code).toBe("deploy.unknown_ref");
    expect(existsSync(join(rt.dataDir, "hosts", "gitlab"))).toBe(false);

    await runToEnd(await post("/gitlab/up"));
    const labDir = join(rt.dataDir, "hosts", "gitlab", "student-01", "lab");
    expect(readFileSync(join(labDir, "VERSION"), "utf8")).toBe("2\n");
    await runToEnd(await post("/gitlab/deploy", { ref: "v1", force: true }));
    expect(existsSync(join(labDir, "VERSION"))).toBe(false);
    expect((await j(await get("/gitlab"))).hostList[0].state).toBe("ready");
    removeDir(repo);
  });
});
