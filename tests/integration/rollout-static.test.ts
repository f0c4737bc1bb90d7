import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { board, claimLab, labForLink } from "../../shared/portal/claims.ts";
import { loadSshIdentity, publicKeyLine } from "../../shared/transports/ssh-identity.ts";
import { type GitHttpServer, startGitHttp } from "../harness/git-http.ts";
import { makeRolloutLab, missNextClaimRead, type RolloutLab } from "../harness/rollout-lab.ts";
import { removeDir, tempDir, testRuntime, waitFor, workshopsApi } from "../harness/runtime.ts";
import { type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/**
 * `labfleet rollout` on bring-your-own hosts over real OpenSSH (tests/harness/ssh-hosts.ts): they cannot be
 * replaced, so they are updated in place, one that fails stays off the board until a later rollout or a retry
 * rebuilds it, and a claimed one is left alone without includeClaimed (with it, its student is told before and
 * after). The lab is the rollout lab's git repository (tests/harness/rollout-lab.ts), over HTTP.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: FakeHosts;
let lab: RolloutLab;
let gitServer: GitHttpServer;
/** Ada's personal link: she claims a lab in the first test. */
let adaToken = "";
const WS = "rbyo";

const api = (path: string, body?: unknown) => workshopsApi(rt)(path, body);
const versionOn = (i: number) =>
  readFileSync(join(fleet.hosts[i]?.root as string, "home", "lab", "VERSION"), "utf8").trim();
const host = async (hostId: string) => (await rt.store.host.get({ workshop: WS, hostId }).go()).data;
const rollout = async (body: unknown) => {
  const started = await api(`/${WS}/rollout`, body);
  expect(started.status, JSON.stringify(started.body)).toBe(202);
  await rt.executor.idle();
  return (await api(`/${WS}/rollout`)).body.rollout;
};

beforeAll(async () => {
  lab = makeRolloutLab();
  // Over HTTP: the hosts' login user does not own the repository, and git refuses a file:// clone of it.
  gitServer = await startGitHttp({ repos: { "lab.git": lab.dir } });
  const data = tempDir();
  const home = join(data, "operator-home");
  mkdirSync(home, { recursive: true });
  const identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(3, { authorizedKeys: `${publicKeyLine(identity)}\n` });
  rt = await testRuntime({ dataDir: data, labfleetHome: home });
  const hosts = fleet.hosts.map((h) => `  - id: ${h.id}\n    ssh: ${h.address}\n`).join("");
  const yaml = `name: ${WS}
lab:
  source: git:${gitServer.url("lab.git")}
  ref: main
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 2
provider:
  type: static
portal:
  enabled: true
hosts:
${hosts}`;
  expect((await api("", { yaml })).status).toBe(201);
  expect((await api(`/${WS}/up`, {})).status).toBe(202);
  await rt.executor.idle();
  expect((await api(`/${WS}/portal/open`, {})).status).toBe(200);
}, 180_000);

afterAll(async () => {
  await rt?.close();
  await fleet?.stop();
  await gitServer?.close();
  if (rt) removeDir(rt.dataDir);
  lab?.remove();
});

describe("a rollout on bring-your-own hosts", { timeout: 180_000 }, () => {
  it("a bad ref fails the canary in place: that host goes off the board, the others are untouched", async () => {
    const r = await rollout({ ref: "broken" });
    expect(r.state).toBe("halted");
    expect(
      r.hosts.map((h: { hostId: string; state: string; mode: string }) => [h.hostId, h.state, h.mode]),
    ).toEqual([
      ["byo-01", "failed", "in_place"],
      ["byo-02", "pending", "in_place"],
      ["byo-03", "pending", "in_place"],
    ]);
    expect(r.hosts[0].logTail).toContain("broken build of version 3");
    const canary = await host("byo-01");
    expect(canary?.state).toBe("failed");
    expect(canary?.error).toMatch(
      /^needs attention: its update to broken failed \(labfleet retry or a rollout rebuilds it\)/,
    );
    for (const [i, id] of [
      [1, "byo-02"],
      [2, "byo-03"],
    ] as const) {
      expect((await host(id))?.state).toBe("ready");
      expect(versionOn(i)).toBe("1");
    }
    // Off the board: a student is given a lab that is ready, never the one that needs attention.
    const ada = await claimLab(
      WS,
      { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" },
      "127.0.0.1",
    );
    expect(ada.lab).toBe("byo-02");
    adaToken = ada.token;
  });

  it("a rollout back to the old ref takes the host that needs attention, and only it", async () => {
    const check = await api(`/${WS}/rollout/check`, { ref: "main" });
    expect(check.status, JSON.stringify(check.body)).toBe(200);
    expect(check.body.items).toEqual([
      {
        hostId: "byo-01",
        stage: "rollout",
        action: "rebuild",
        detail:
          "canary: needs attention since its update to broken failed; updated in place to main (bring-your-own host)",
      },
      { hostId: "byo-02", stage: "rollout", action: "skip", detail: "already at main" },
      { hostId: "byo-03", stage: "rollout", action: "skip", detail: "already at main" },
    ]);
    // Each build appends to $HOME/builds (the host's /home/lab is its folder's home/).
    const builds = (i: number) =>
      readFileSync(join(fleet.hosts[i]?.root as string, "home", "builds"), "utf8");
    const before = [builds(1), builds(2)];

    const r = await rollout({ ref: "main" });
    expect(r.state).toBe("completed");
    expect(r.hosts).toEqual([
      expect.objectContaining({
        hostId: "byo-01",
        mode: "in_place",
        state: "updated",
        gate: "passed",
        fromRef: "broken",
        toRef: "main",
        needsAttention: true,
      }),
    ]);
    const back = await host("byo-01");
    expect(back).toMatchObject({ state: "ready", ref: "main" });
    expect(back?.error).toBeUndefined();
    expect(versionOn(0)).toBe("1");
    // The others were not touched: no build ran on them.
    expect([builds(1), builds(2)]).toEqual(before);
    // Back on the board.
    expect((await board(WS)).labs.find((l) => l.lab === "byo-01")).toEqual({ lab: "byo-01", status: "free" });
  });

  it("retry rebuilds a host that needs attention at the workshop's ref", async () => {
    const failed = await rollout({ ref: "broken" });
    expect(failed.state).toBe("halted");
    expect((await host("byo-01"))?.state).toBe("failed");
    const res = await api(`/${WS}/retry`, { hosts: ["byo-01"] });
    expect(res.status, JSON.stringify(res.body)).toBe(202);
    await rt.executor.idle();
    expect((await host("byo-01"))?.state).toBe("ready");
    expect(versionOn(0)).toBe("1");
  });

  it("a good ref updates the unclaimed hosts in place; the claimed one is untouched without includeClaimed", async () => {
    const r = await rollout({ ref: "v2" });
    expect(r.state).toBe("completed");
    expect(r.hosts.map((h: { hostId: string; state: string }) => [h.hostId, h.state])).toEqual([
      ["byo-01", "updated"],
      ["byo-03", "updated"],
    ]);
    expect(versionOn(0)).toBe("2");
    expect(versionOn(2)).toBe("2");
    expect(versionOn(1)).toBe("1");
    expect(await host("byo-02")).toMatchObject({ state: "ready", ref: "main" });
    expect(await host("byo-01")).toMatchObject({ state: "ready", ref: "v2" });
    expect(existsSync(join(fleet.hosts[1]?.root as string, "home", "lab", "built"))).toBe(true);
    const claimed = (await rt.store.claim.query.byWorkshop({ workshop: WS }).go()).data;
    expect(claimed.map((c) => c.hostId)).toEqual(["byo-02"]);
  });

  it("with includeClaimed the claimed host is updated in place and its student is told before and after", async () => {
    const link = (await rt.store.claim.query.byWorkshop({ workshop: WS }).go()).data[0];
    expect(link?.hostId).toBe("byo-02");
    expect((await labForLink(adaToken))?.update).toBeNull();
    const started = await api(`/${WS}/rollout`, { ref: "v2", includeClaimed: true });
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    // Told before the update: the page says so while the host is still on the old version.
    await waitFor(
      "Ada's page to say her lab is being updated",
      async () => (await labForLink(adaToken))?.update === "updating",
      60_000,
    );
    const page = await (await fetch(`${rt.url}/l/${adaToken}`)).text();
    expect(page).toContain("Your instructor is updating this lab.");
    const during = (await api(`/${WS}/rollout`)).body.rollout;
    expect(during.hosts[0]).toMatchObject({ hostId: "byo-02", student: "Ada Lovelace" });
    expect(["pending", "building"]).toContain(during.hosts[0].state);
    await rt.executor.idle();
    const r = (await api(`/${WS}/rollout`)).body.rollout;
    expect(r.state).toBe("completed");
    expect(r.hosts).toEqual([
      expect.objectContaining({
        hostId: "byo-02",
        state: "updated",
        student: "Ada Lovelace",
        gate: "passed",
      }),
    ]);
    expect(versionOn(1)).toBe("2");
    expect(await host("byo-02")).toMatchObject({ state: "ready", ref: "v2", notice: "updated" });
    expect(await labForLink(adaToken)).toMatchObject({ lab: "byo-02", update: "updated" });
    expect(await (await fetch(`${rt.url}/l/${adaToken}`)).text()).toContain("Your lab was updated");
  });

  it("a host claimed after the rollout was planned is left alone, even when the read of its claim missed it", async () => {
    // byo-01 (the canary) builds `gated` until the test lets it; byo-03, still free, is claimed meanwhile.
    const started = await api(`/${WS}/rollout`, { ref: "gated", batch: 1 });
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    expect(
      started.body.rollout.hosts.map((h: { hostId: string; batch: number }) => `${h.hostId} ${h.batch}`),
    ).toEqual(["byo-01 0", "byo-03 1"]);
    const home = (i: number) => join(fleet.hosts[i]?.root as string, "home");
    await waitFor(
      "the canary's build to start",
      () => readFileSync(join(home(0), "builds"), "utf8").includes("build 4") || undefined,
      60_000,
    );
    const bo = await claimLab(
      WS,
      { name: "Bo Germain", email: "bo@example.test", pin: "480277" },
      "127.0.0.1",
    );
    expect(bo.lab).toBe("byo-03"); // byo-01 is off the board, byo-02 is Ada's
    const buildsBefore = readFileSync(join(home(2), "builds"), "utf8");
    // The batch's read of byo-03's claim answers as if made a moment before the claim; the transaction that takes
    // the host off the board checks the claim itself, and is cancelled.
    const miss = missNextClaimRead(rt.store, WS, "byo-03");
    try {
      writeFileSync(join(home(0), "go"), "");
      await rt.executor.idle();
    } finally {
      miss.restore();
    }
    expect(miss.misses()).toBe(1);
    const r = (await api(`/${WS}/rollout`)).body.rollout;
    expect(r.state).toBe("completed");
    expect(r.hosts).toEqual([
      expect.objectContaining({ hostId: "byo-01", state: "updated" }),
      expect.objectContaining({
        hostId: "byo-03",
        state: "skipped",
        student: "Bo Germain",
        reason:
          "claimed by Bo Germain during the rollout: left as it was (--include-claimed updates claimed labs)",
      }),
    ]);
    // Bo's host was never taken off the board nor rebuilt, and his page says nothing of an update.
    expect(await host("byo-03")).toMatchObject({ state: "ready", ref: "v2" });
    expect((await host("byo-03"))?.notice).toBeUndefined();
    expect(versionOn(2)).toBe("2");
    expect(readFileSync(join(home(2), "builds"), "utf8")).toBe(buildsBefore);
    expect(await labForLink(bo.token)).toMatchObject({ lab: "byo-03", update: null, build: "ready" });
    expect(versionOn(0)).toBe("4");
  });
});
