import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { ScanCommand } from "@aws-sdk/lib-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { CheckReport } from "../../shared/fleet/check.ts";
import { listHosts } from "../../shared/fleet/workshops.ts";
import { loadSshIdentity, publicKeyLine } from "../../shared/transports/ssh-identity.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { fixturesDir, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";
import { type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/**
 * Stages and check mode on bring-your-own hosts over real OpenSSH (two fake hosts, each its own sshd and
 * files): a run does only the stages it selects, and a check reads the store and the provider's plan without
 * touching a host or writing a record.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: FakeHosts;
const WS = "byo-stages";
const TOKEN = "ssh-stages-token";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
const post = (path: string, body: unknown = {}) =>
  app.request(`/api/workshops${path}`, { method: "POST", headers: auth, body: JSON.stringify(body) });

const yaml = () => `name: ${WS}
lab:
  source: ${join(fixturesDir, "labs", "quick")}
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 2
provider:
  type: static
hosts:
${fleet.hosts.map((h) => `  - id: ${h.id}\n    ssh: ${h.address}\n`).join("")}`;

async function run(path: string, body: unknown = {}) {
  const res = await post(path, body);
  expect(res.status, JSON.stringify(await res.clone().json())).toBe(202);
  const { run } = (await res.json()) as { run: { id: string } };
  await rt.executor.idle();
  return (await rt.store.run.get({ workshop: WS, runId: run.id }).go()).data;
}
async function check(body: Record<string, unknown>): Promise<CheckReport> {
  const res = await post(`/${WS}/check`, body);
  expect(res.status, JSON.stringify(await res.clone().json())).toBe(200);
  return (await res.json()) as CheckReport;
}
const states = async () => Object.fromEntries((await listHosts(WS)).map((h) => [h.hostId, h.state]));
const actions = (r: CheckReport, stage: string) =>
  Object.fromEntries(r.items.filter((i) => i.stage === stage).map((i) => [i.hostId, i.action]));

/** The table's items and every file on the hosts (their /home/lab, /srv, /tmp) with its content. */
async function snapshot(): Promise<{ items: string; files: string }> {
  const items = (await rt.store.doc.send(new ScanCommand({ TableName: rt.table }))).Items ?? [];
  const files: string[] = [];
  const walk = (dir: string) => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const st = statSync(p, { throwIfNoEntry: false });
      if (!st) continue;
      if (st.isDirectory()) walk(p);
      else if (st.isFile())
        files.push(`${p} ${st.mtimeMs} ${createHash("sha256").update(readFileSync(p)).digest("hex")}`);
    }
  };
  for (const h of fleet.hosts) for (const d of ["home", "srv"]) walk(join(h.root, d));
  return {
    items: items
      .map((i) => JSON.stringify(i, Object.keys(i).sort()))
      .sort()
      .join("\n"),
    files: files.join("\n"),
  };
}

/**
 * Once no lab wrapper runs on either host: a wrapper goes on after the poll has seen its lab ready (it runs
 * health for its own push, then removes its output), and a snapshot taken meanwhile would see that as a change.
 */
function wrappersDone(): Promise<true> {
  const running = (pid: number) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("wrapper.sh");
    } catch {
      return false; // gone meanwhile
    }
  };
  return waitFor("every lab wrapper on the hosts to end", () =>
    fleet.hosts.every((h) => !h.processes().some(running)) ? true : undefined,
  );
}

beforeAll(async () => {
  const data = tempDir("labfleet-ssh-stages-");
  const home = join(data, "operator-home");
  mkdirSync(home, { recursive: true });
  const identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(2, { authorizedKeys: `${publicKeyLine(identity)}\n`, firstIndex: 41 });
  // No scheduler or health pass during the tests: checks are compared with the store before and after.
  rt = await testRuntime({ dataDir: data, token: TOKEN, labfleetHome: home, schedulerIntervalMs: 3_600_000 });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await fleet?.stop();
  if (rt) removeDir(rt.dataDir);
});

describe("stages and check mode over SSH", { timeout: 180_000 }, () => {
  it("checks a workshop not submitted yet: hosts reused, labs to create; nothing written, no host touched", async () => {
    const before = await snapshot();
    const r = await check({ command: "up", yaml: yaml() });
    expect(r.changes).toBe(true);
    expect(actions(r, "provision")).toEqual({ "byo-41": "reuse", "byo-42": "reuse" });
    expect(actions(r, "deploy")).toEqual({ "byo-41": "create", "byo-42": "create" });
    expect(await snapshot()).toEqual(before);
    // No SSH session was opened for it: sshd logged no accepted key.
    for (const h of fleet.hosts) expect(h.log()).not.toContain("Accepted publickey");
  });

  it("--only provision,deploy starts the labs and ends; --only wait follows them to ready, --only publish hands out", async () => {
    expect((await post("", { yaml: yaml() })).status).toBe(201);
    const deployed = await run(`/${WS}/up`, { only: ["provision", "deploy"] });
    expect(deployed).toMatchObject({ state: "succeeded", stages: ["provision", "deploy"] });
    // No poll ran: the records say deploying, whatever the setups have done since.
    expect(await states()).toEqual({ "byo-41": "deploying", "byo-42": "deploying" });
    const waited = await run(`/${WS}/up`, { only: ["wait"] });
    expect(waited).toMatchObject({ state: "succeeded", stages: ["wait"] });
    expect(await states()).toEqual({ "byo-41": "ready", "byo-42": "ready" });
    expect((await rt.store.workshop.get({ name: WS }).go()).data?.state).toBe("deploying");

    const pending = await check({ command: "up" });
    expect(
      pending.items.filter((i) => i.action !== "reuse").map((i) => [i.hostId, i.stage, i.action]),
    ).toEqual([["*", "publish", "promote"]]);
    await run(`/${WS}/up`, { only: ["publish"] });
    expect((await rt.store.workshop.get({ name: WS }).go()).data?.state).toBe("ready");
    expect((await check({ command: "up" })).changes).toBe(false);
  });

  it("deploy --skip provision rebuilds only the host selected; retry --check names the failed one", async () => {
    const startedOf = async () =>
      Object.fromEntries((await listHosts(WS)).map((h) => [h.hostId, h.deployStartedAt]));
    const first = await startedOf();
    const r = await run(`/${WS}/deploy`, { hosts: ["byo-42"], force: true, skip: ["provision"] });
    expect(r).toMatchObject({ kind: "deploy", state: "succeeded", stages: ["deploy", "wait", "publish"] });
    const second = await startedOf();
    expect(second["byo-41"]).toBe(first["byo-41"]);
    expect(second["byo-42"]).not.toBe(first["byo-42"]);

    await rt.store.host.patch({ workshop: WS, hostId: "byo-41" }).set({ state: "failed" }).go();
    await wrappersDone();
    const before = await snapshot();
    const retry = await check({ command: "retry" });
    expect(retry.items.map((i) => [i.hostId, i.stage, i.action, i.detail])).toEqual([
      ["byo-41", "provision", "reuse", `bring-your-own host ${fleet.hosts[0]?.address}`],
      ["byo-41", "deploy", "rebuild", "failed: will rebuild"],
      ["byo-41", "wait", "reuse", "polled until lab.health passes (at most 2 min)"],
      ["*", "publish", "promote", "the workshop becomes ready once every lab is"],
    ]);
    expect(await snapshot()).toEqual(before);
  });
});
