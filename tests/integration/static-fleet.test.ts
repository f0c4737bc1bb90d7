import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { withTransport } from "../../shared/fleet/hosts.ts";
import { runHealth } from "../../shared/fleet/lab.ts";
import { selected } from "../../shared/fleet/ops.ts";
import { listHosts } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { loadSshIdentity, publicKeyLine } from "../../shared/transports/ssh-identity.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { fixturesDir, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";
import { type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/** Bring-your-own hosts over real OpenSSH: five fake hosts, each its own sshd, host key and files. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: FakeHosts;
let stranger: FakeHosts;
let home: string;
const TOKEN = "static-suite-token";
const SECRET = "byo-secret-5d1e0a7c";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();
const post = (path: string, body: unknown = {}) =>
  app.request(`/api/workshops${path}`, { method: "POST", headers: auth, body: JSON.stringify(body) });
const get = (path: string) => app.request(`/api/workshops${path}`, { headers: auth });

function yaml(lab: string, extra = "") {
  const hosts = fleet.hosts
    .map(
      (h, i) =>
        `  - id: ${h.id}\n    ssh: ${h.address}\n    public_ip: 203.0.113.${10 + i}\n    labels: { room: ${i < 3 ? "a" : "b"} }\n`,
    )
    .join("");
  return `name: byo
lab:
  source: ${join(fixturesDir, "labs", lab)}
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 2
  operator_secrets: [API_TOKEN]
  ui_ports:
    - { name: ui, port: 8443 }
${extra}provider:
  type: static
hosts:
${hosts}`;
}

async function submit(text: string) {
  const res = await post("", { yaml: text });
  expect([200, 201], JSON.stringify(await res.clone().json())).toContain(res.status);
}

async function runToEnd(res: Response) {
  expect(res.status, JSON.stringify(await res.clone().json())).toBe(202);
  const { run } = await j(res);
  await rt.executor.idle();
  return run.id as string;
}

const states = async () => Object.fromEntries((await listHosts("byo")).map((h) => [h.hostId, h.state]));

beforeAll(async () => {
  const data = tempDir();
  home = join(data, "operator-home");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "secrets.yaml"), `API_TOKEN: "${SECRET}"\n`);
  chmodSync(join(home, "secrets.yaml"), 0o600);
  const identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(5, { authorizedKeys: `${publicKeyLine(identity)}\n` });
  stranger = await startFakeHosts(1, { authorizedKeys: "", firstIndex: 9 });
  rt = await testRuntime({ dataDir: data, token: TOKEN, labfleetHome: home });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await fleet?.stop();
  await stranger?.stop();
  if (rt) removeDir(rt.dataDir);
});

describe("a static fleet over SSH", () => {
  it("up brings 5 hosts to ready, pinning each host key", async () => {
    await submit(yaml("secret-ok"));
    await runToEnd(await post("/byo/up"));
    const errors = (await listHosts("byo")).map((h) => `${h.hostId}: ${h.error ?? ""}`).join("\n");
    expect(await states(), errors).toEqual({
      "byo-01": "ready",
      "byo-02": "ready",
      "byo-03": "ready",
      "byo-04": "ready",
      "byo-05": "ready",
    });
    const keys = (await j(await get("/byo/host-keys"))).keys;
    expect(keys.map((k: { hostId: string }) => k.hostId)).toEqual(fleet.hosts.map((h) => h.id));
    // The lab ran as the login user in its own home, with the operator secret in a 0600 file.
    const host = fleet.hosts[0];
    if (!host) throw new Error("no host");
    const secrets = join(host.root, "home", ".labfleet", "byo", "secrets.env");
    expect(statSync(secrets).mode & 0o777).toBe(0o600);
    expect(readFileSync(secrets, "utf8")).toBe(`API_TOKEN='${SECRET}'\n`);
    expect(existsSync(join(host.root, "home", "lab", "built"))).toBe(true);
  });

  it("the access sheet uses each host's public_ip", async () => {
    const sheet = await j(await get("/byo/access?label=room=b"));
    expect(sheet.rows.map((r: { host: string; urls: { ui: string } }) => [r.host, r.urls.ui])).toEqual([
      ["byo-04", "https://203.0.113.13:8443/"],
      ["byo-05", "https://203.0.113.14:8443/"],
    ]);
  });

  it("a status refresh reads each ready lab, its health check included, in the connection's resident shell", async () => {
    const sessions = () => fleet.hosts.reduce((n, h) => n + h.log().split("Starting session:").length - 1, 0);
    // The first refresh may log in again (a kept connection closes after a minute idle) and start the shell.
    expect((await post("/byo/refresh")).status).toBe(200);
    const before = sessions();
    const res = await post("/byo/refresh");
    expect(res.status).toBe(200);
    const views = (await j(res)).hosts as { id: string; state: string }[];
    expect(views.map((h) => h.state)).toEqual(["ready", "ready", "ready", "ready", "ready"]);
    // Probe and health on five hosts, and not one new session: each ran as a fork of the resident shell.
    expect(sessions()).toBe(before);
  });

  it("a health check runs under the host's own timeout, and past its time it is ended on the host", async () => {
    const sleeping = () =>
      readdirSync("/proc").some((pid) => {
        try {
          return readFileSync(`/proc/${pid}/cmdline`, "utf8") === "sleep\u00007.25\u0000";
        } catch {
          return false;
        }
      });
    const health = (command: string, timeoutMs: number) =>
      withActor({ type: "instructor", id: "test" }, async () => {
        const { spec, provider, hosts } = await selected("byo", { hosts: ["byo-01"] });
        const host = hosts[0];
        if (!host) throw new Error("no host byo-01");
        const lab = { ...spec, lab: { ...spec.lab, health: command } };
        return withTransport(lab, provider, host, (t) => runHealth(t, lab, host.hostId, timeoutMs));
      });
    // The check's ancestors on the host: the host's own bound (a second past labfleet's, should labfleet's end not
    // reach the host), started by the connection's resident shell rather than a session of its own.
    const above = await health(
      `p=$PPID; while [ "$p" -gt 1 ]; do tr '\\0' ' ' < /proc/$p/cmdline; echo; read -r _ _ _ p _ < /proc/$p/stat; done`,
      2000,
    );
    expect(above.exitCode, above.stderr).toBe(0);
    const chain = above.stdout.split("\n");
    const bound = chain.findIndex((l) => /^timeout -s KILL 3\.000 bash --noprofile --norc -c /.test(l));
    expect(bound, above.stdout).toBeGreaterThanOrEqual(0);
    expect(chain[bound + 1]).toMatch(/^bash --noprofile --norc -c labfleet_next\(\)/);
    const slow = await health("sleep 7.25", 500);
    expect(slow.timedOut).toBe(true);
    await waitFor("the host to end the health check", () => !sleeping() || undefined, 4000);
  });

  it("doctor passes the hosts of a label and reports an unreachable host without stopping the others", async () => {
    const ok = await j(await post("/byo/doctor", { labels: { room: "b" } }));
    expect(ok.reports.map((r: { host: string; ok: boolean }) => [r.host, r.ok])).toEqual([
      ["byo-04", true],
      ["byo-05", true],
    ]);
    expect(ok.reports[0].facts.user).toBe("lab");
    expect(ok.reports[0].checks.find((c: { name: string }) => c.name === "sudo").ok).toBe(true);

    await fleet.hosts[4]?.kill();
    const res = await j(await post("/byo/doctor", { labels: { room: "b" } }));
    expect(res.ok).toBe(false);
    const byHost = Object.fromEntries(res.reports.map((r: { host: string }) => [r.host, r]));
    expect(byHost["byo-04"].ok).toBe(true);
    expect(byHost["byo-05"].checks[0]).toMatchObject({ name: "reachable", ok: false });
    expect(byHost["byo-05"].checks[0].detail).toMatch(/byo-05.*unreachable/);
    await fleet.hosts[4]?.restart();
  });

  it("refuses a host whose key changed, naming both fingerprints and the remedy; forget-key lets it back", async () => {
    await fleet.hosts[2]?.restart({ newHostKey: true });
    const res = await j(await post("/byo/doctor", { hosts: ["byo-03"] }));
    const detail = res.reports[0].checks[0].detail as string;
    expect(detail).toMatch(/byo-03/);
    expect(detail.match(/SHA256:[A-Za-z0-9+/]{43}/g)?.length).toBe(2);
    expect(detail).toContain("labfleet hosts forget-key");
    expect(detail).toContain("--host byo-03");

    const forget = await app.request("/api/workshops/byo/host-keys/byo-03", {
      method: "DELETE",
      headers: auth,
    });
    expect(forget.status).toBe(200);
    expect((await j(await post("/byo/doctor", { hosts: ["byo-03"] }))).ok).toBe(true);
  });

  it("reports auth refused per host", async () => {
    const other = stranger.hosts[0];
    if (!other) throw new Error("no host");
    await submit(
      `name: locked\nlab: { source: ${join(fixturesDir, "labs", "quick")}, setup: bash setup.sh }\nprovider: { type: static }\nhosts:\n  - { id: ${other.id}, ssh: ${other.address} }\n  - { id: ${fleet.hosts[0]?.id}, ssh: ${fleet.hosts[0]?.address} }\n`,
    );
    const res = await j(await post("/locked/doctor"));
    const byHost = Object.fromEntries(res.reports.map((r: { host: string }) => [r.host, r]));
    expect(byHost[other.id].checks[0].detail).toMatch(/auth/i);
    expect(byHost[fleet.hosts[0]?.id as string].ok).toBe(true);
  });

  it("a host killed mid-setup ends failed, not running forever; retry rebuilds only it", async () => {
    await submit(yaml("hang"));
    const deploy = await post("/byo/deploy", { hosts: ["byo-02"], force: true });
    expect(deploy.status).toBe(202);
    const host = fleet.hosts[1];
    if (!host) throw new Error("no host");
    // The hang lab's first progress line says its setup is running (an earlier lab left a pid file).
    const status = join(host.root, "home", ".labfleet", "byo", "status.jsonl");
    await waitFor("the setup to run on byo-02", () =>
      existsSync(status) && readFileSync(status, "utf8").includes('"forever"') ? true : undefined,
    );
    await host.kill();
    await host.restart();
    await rt.executor.idle();
    const s = await j(await get("/byo"));
    const h2 = s.hostList.find((h: { id: string }) => h.id === "byo-02");
    expect(h2.state).toBe("failed");
    expect(h2.error).toMatch(/wrapper died without an exit code/);

    // diagnose reads the failed host over SSH, and carries no secret off it.
    const diag = await post("/byo/diagnose", {});
    expect(diag.status).toBe(200);
    const archive = gunzipSync(Buffer.from(await diag.arrayBuffer())).toString("latin1");
    expect(archive).toContain("byo-02/summary.json");
    expect(archive).not.toContain("byo-01/");
    expect(archive).toMatch(/"verdict": "failed"/);
    expect(archive).toContain('"phase":"forever"');
    expect(archive).not.toContain(SECRET);

    await submit(yaml("secret-ok"));
    const before = Object.fromEntries((await listHosts("byo")).map((h) => [h.hostId, h.attempt]));
    const retry = await post("/byo/retry", {});
    expect((await j(retry.clone())).hosts).toEqual(["byo-02"]);
    await runToEnd(retry);
    const after = Object.fromEntries((await listHosts("byo")).map((h) => [h.hostId, h.attempt]));
    expect(after).toEqual({ ...before, "byo-02": (before["byo-02"] ?? 0) + 1 });
    expect((await states())["byo-02"]).toBe("ready");
  });

  it("refuses to deploy when a secret is missing, before touching any host", async () => {
    const text = yaml("secret-ok")
      .replace("name: byo", "name: byo-nokey")
      .replace("[API_TOKEN]", "[API_TOKEN, DB_PASSWORD]");
    await submit(text);
    const res = await post("/byo-nokey/up");
    expect(res.status).toBe(400);
    expect((await j(res)).error.message).toContain("DB_PASSWORD");
    for (const h of fleet.hosts)
      expect(existsSync(join(h.root, "home", ".labfleet", "byo-nokey"))).toBe(false);
    expect((await j(await get("/byo-nokey"))).runs).toEqual([]);
  });

  it("teardown leaves bring-your-own hosts as they are", async () => {
    await runToEnd(await post("/byo/teardown"));
    const s = await j(await get("/byo"));
    expect(s.state).toBe("torn_down");
    expect(s.runs[0].hosts["byo-01"]).toEqual({
      state: "skipped",
      detail: "bring-your-own host: left as it is",
    });
    expect(existsSync(join(fleet.hosts[0]?.root as string, "home", "lab", "built"))).toBe(true);
  });
});
