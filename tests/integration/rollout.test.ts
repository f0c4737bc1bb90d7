import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab, labForLink } from "../../shared/portal/claims.ts";
import { runCli } from "../harness/cli.ts";
import { makeRolloutLab, missNextClaimRead, type RolloutLab, rolloutYaml } from "../harness/rollout-lab.ts";
import { processesUnder, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";

/**
 * `labfleet rollout` on local hosts, through the real CLI and the local runtime: the rollout lab's `v2` branch
 * is a good ref, `broken` a bad one, `gated` one whose build waits for the test. Each host's folder is its HOME
 * (`<data>/hosts/<workshop>/<machine>`), so a test reads which version a lab is at from its VERSION file.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
let lab: RolloutLab;

const hostsDir = () => join(rt.dataDir, "hosts");
const host = async (ws: string, hostId: string) =>
  (await rt.store.host.get({ workshop: ws, hostId }).go()).data;
const versionOf = (address: string) => readFileSync(join(address, "lab", "VERSION"), "utf8").trim();
const events = async (ws: string) =>
  (await rt.store.event.query.byWorkshop({ workshop: ws }).go({ pages: "all" })).data;
const cli = (args: string[]) => runCli(args, { env });
// biome-ignore lint/suspicious/noExplicitAny: the JSON document is checked field by field
const json = (text: string): any => JSON.parse(text);

async function upWorkshop(name: string, count: number) {
  const file = join(work, `${name}.yaml`);
  writeFileSync(file, rolloutYaml(name, lab.source, count));
  const up = await cli(["up", "-f", file]);
  expect(up.code, up.stderr).toBe(0);
  const open = await cli(["portal", "open", name]);
  expect(open.code, open.stderr).toBe(0);
}

beforeAll(async () => {
  lab = makeRolloutLab();
  work = tempDir("labfleet-rollout-");
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
}, 120_000);

afterAll(async () => {
  await rt?.close();
  if (rt) {
    expect(processesUnder(hostsDir())).toEqual([]);
    removeDir(rt.dataDir);
  }
  if (work) removeDir(work);
  lab?.remove();
});

describe("labfleet rollout on local hosts", { timeout: 300_000 }, () => {
  it("rolls a good ref out canary first, then in batches; claimed labs keep their links and are told", async () => {
    const WS = "rgood";
    await upWorkshop(WS, 4);
    const ada = await claimLab(
      WS,
      { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" },
      "127.0.0.1",
    );
    expect(ada.lab).toBe("student-01");
    const before = await host(WS, "student-01");
    expect(versionOf(before?.address as string)).toBe("1");

    const r = cli(["rollout", WS, "--ref", "v2", "--batch", "2", "--include-claimed"]);
    // The student is told before the lab changes: the page says it is being updated while the new one builds.
    await waitFor(
      "the lab page's update notice",
      async () => (await labForLink(ada.token))?.update === "updating",
      60_000,
    );
    const page = await (await fetch(`${rt.url}/l/${ada.token}`)).text();
    expect(page).toContain("Your instructor is updating this lab.");
    expect(
      (await labForLink(ada.token))?.access?.credentials.find((c) => c.label === "password")?.value,
    ).toBe("v1-student-01");
    const done = await r;
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toMatch(/to v2 from main: completed/);

    // Canary (unclaimed first), then batches of 2; the claimed lab last.
    const status = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(status.state).toBe("completed");
    const batchOf = Object.fromEntries(
      status.hosts.map((h: { hostId: string; batch: number }) => [h.hostId, h.batch]),
    );
    expect(batchOf).toEqual({ "student-02": 0, "student-03": 1, "student-04": 1, "student-01": 2 });
    for (const h of status.hosts) {
      expect(h).toMatchObject({
        state: "promoted",
        gate: "passed",
        fromRef: "main",
        toRef: "v2",
        mode: "replace",
      });
    }
    // No batch started before the one before it had finished.
    const ended = (b: number) =>
      Math.max(
        ...status.hosts
          .filter((h: { batch: number }) => h.batch === b)
          .map((h: { endedAt: string }) => Date.parse(h.endedAt)),
      );
    const started = (b: number) =>
      Math.min(
        ...status.hosts
          .filter((h: { batch: number }) => h.batch === b)
          .map((h: { startedAt: string }) => Date.parse(h.startedAt)),
      );
    expect(started(1)).toBeGreaterThanOrEqual(ended(0));
    expect(started(2)).toBeGreaterThanOrEqual(ended(1));

    // Every lab runs v2 on its new machine; the old machines are gone.
    for (const id of ["student-01", "student-02", "student-03", "student-04"]) {
      const h = await host(WS, id);
      expect(h).toMatchObject({ state: "ready", ref: "v2", machine: `${id}.b` });
      expect(h?.address).toBe(join(hostsDir(), WS, `${id}.b`));
      expect(versionOf(h?.address as string)).toBe("2");
      expect(existsSync(join(hostsDir(), WS, id))).toBe(false);
    }
    // Ada's link (and lab cookie) open the new lab, which says it was updated.
    const after = await labForLink(ada.token);
    expect(after).toMatchObject({ lab: "student-01", name: "Ada Lovelace", update: "updated" });
    expect(after?.access?.credentials.find((c) => c.label === "password")?.value).toBe("v2-student-01");
    expect(await (await fetch(`${rt.url}/l/${ada.token}`)).text()).toContain("Your lab was updated");
    // The new ref is the workshop's now; events say what happened and who was told.
    const st = json((await cli(["status", WS, "--output", "json"])).stdout);
    expect(st.workshop).toBe(WS);
    const w = (await rt.store.workshop.get({ name: WS }).go()).data;
    expect((w?.spec as { lab: { ref: string } } | undefined)?.lab.ref).toBe("v2");
    const ev = await events(WS);
    expect(
      ev
        .filter((e) => e.type === "lab.updated")
        .map((e) => e.hostId)
        .sort(),
    ).toEqual(["student-01", "student-02", "student-03", "student-04"]);
    expect(ev.find((e) => e.type === "lab.updated" && e.hostId === "student-01")?.detail).toMatchObject({
      student: "Ada Lovelace",
      ref: "v2",
    });
    expect(JSON.stringify(ev)).not.toContain("ada@example.test");
    const runs = json((await cli(["runs", WS, "--output", "json"])).stdout);
    const run = (runs.runs ?? runs).find((x: { kind: string }) => x.kind === "rollout");
    expect(run).toMatchObject({ state: "succeeded" });
    expect(run.transitions).toBeGreaterThan(10);

    // Check mode and `up --plan` find each lab on its new machine: reused, nothing created.
    const api = (path: string, body: unknown) =>
      fetch(`${rt.url}/api/workshops${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      }).then(async (res) => ({ status: res.status, body: json(await res.text()) }));
    const check = await api(`/${WS}/check`, { command: "up" });
    expect(check.status).toBe(200);
    expect(
      check.body.items
        .filter((i: { stage: string }) => i.stage === "provision")
        .map((i: { hostId: string; action: string }) => `${i.hostId} ${i.action}`),
    ).toEqual(["student-01 reuse", "student-02 reuse", "student-03 reuse", "student-04 reuse"]);
    const plan = await api("/plan", { yaml: rolloutYaml(WS, lab.source, 4) });
    expect(plan.status).toBe(200);
    expect(plan.body.items.map((i: { hostId: string; action: string }) => `${i.hostId} ${i.action}`)).toEqual(
      ["student-01 reuse", "student-02 reuse", "student-03 reuse", "student-04 reuse"],
    );

    // A second rollout to the same ref would change nothing: --check says so with exit 0.
    const again = await cli(["rollout", WS, "--ref", "v2", "--check", "--include-claimed"]);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain("nothing would change");
  });

  it("records each replaced machine's life, so the receipt counts both machines of every lab", async () => {
    const WS = "rgood";
    const status = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(status.state).toBe("completed");
    // Each old machine's life, from its making to its removal at the promotion, is recorded for the receipt;
    // the lab's own hours now start with its new machine.
    const lives = (await rt.store.hostLife.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data;
    expect(lives.map((l) => `${l.hostId} ${l.why}`).sort()).toEqual([
      "student-01 replaced",
      "student-02 replaced",
      "student-03 replaced",
      "student-04 replaced",
    ]);
    const ada1 = lives.find((l) => l.hostId === "student-01");
    const now1 = await host(WS, "student-01");
    expect(ada1?.createdAt).toBe(now1?.createdAt);
    const promotedAt = status.hosts.find((h: { hostId: string }) => h.hostId === "student-01").endedAt;
    expect(Date.parse(ada1?.removedAt as string)).toBeGreaterThanOrEqual(Date.parse(promotedAt));
    expect(now1?.machineCreatedAt).toBe(
      status.hosts.find((h: { hostId: string }) => h.hostId === "student-01").startedAt,
    );
    // The teardown's receipt counts both machines of each lab: 4 labs, 8 lives, 4 of them before it.
    const down = await cli(["down", WS, "--yes"]);
    expect(down.code, down.stderr + down.stdout).toBe(0);
    const receipt = json((await cli(["receipt", WS, "--output", "json"])).stdout).receipt;
    expect(receipt.usage).toMatchObject({ hosts: 8, earlier: { hosts: 4 } });
    expect(receipt.usage.basis).toContain("includes 4 hosts removed before the teardown");
  });

  it("a bad ref fails the canary and changes nothing else: every lab on the old ref and healthy, no student moved", async () => {
    const WS = "rbad";
    await upWorkshop(WS, 3);
    const bob = await claimLab(
      WS,
      { name: "Bob Babbage", email: "bob@example.test", pin: "480272" },
      "127.0.0.1",
    );
    const before = new Map(
      await Promise.all(
        ["student-01", "student-02", "student-03"].map(async (id) => [id, await host(WS, id)] as const),
      ),
    );

    const r = await cli(["rollout", WS, "--ref", "broken", "--include-claimed"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(/halted/);
    expect(r.stdout).toContain("broken build of version 3");

    const status = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(status.state).toBe("halted");
    const canary = status.hosts.find((h: { batch: number }) => h.batch === 0);
    expect(canary).toMatchObject({ hostId: "student-02", state: "failed" });
    expect(canary.logTail).toContain("broken build of version 3");
    expect(
      status.hosts.filter((h: { batch: number }) => h.batch > 0).map((h: { state: string }) => h.state),
    ).toEqual(["pending", "pending"]);
    // The canary's new host is gone; every lab is where it was, on main, healthy and handed out as before.
    expect(existsSync(join(hostsDir(), WS, "student-02.b"))).toBe(false);
    for (const [id, was] of before) {
      const h = await host(WS, id);
      expect(h).toMatchObject({ state: "ready", address: was?.address });
      expect(h?.ref).toBe("main");
      expect(h?.machine).toBeUndefined();
      expect(versionOf(h?.address as string)).toBe("1");
      expect(existsSync(join(h?.address as string, "lab", "built"))).toBe(true);
      expect(h?.notice).toBeUndefined();
    }
    expect(await labForLink(bob.token)).toMatchObject({ lab: "student-01", update: null });
    const w = (await rt.store.workshop.get({ name: WS }).go()).data;
    expect((w?.spec as { lab: { ref: string } } | undefined)?.lab.ref).toBe("main");
    expect(w?.state).toBe("ready");
    expect((await events(WS)).filter((e) => e.type === "lab.updated")).toEqual([]);
  });

  it("a new lab that builds but fails lab.health halts the rollout at its canary in seconds, with the health output", async () => {
    const WS = "rsick";
    await upWorkshop(WS, 2);
    const rollout = async () =>
      json(
        await (
          await fetch(`${rt.url}/api/workshops/${WS}/rollout`, {
            headers: { authorization: `Bearer ${rt.token}` },
          })
        ).text(),
      ).rollout;
    const started = await fetch(`${rt.url}/api/workshops/${WS}/rollout`, {
      method: "POST",
      headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      body: JSON.stringify({ ref: "unhealthy" }),
    });
    expect(started.status).toBe(202);
    // The setup exits 0 and lab.health fails: the gate decides after a few checks, far inside the 300 s the
    // lab would get after its setup (HEALTH_GRACE_SECONDS), which is past this deadline.
    const status = await waitFor(
      "the rollout to halt",
      async () => {
        const r = await rollout();
        return r.state === "running" ? undefined : r;
      },
      45_000,
    );
    expect(status.state).toBe("halted");
    const canary = status.hosts.find((h: { batch: number }) => h.batch === 0);
    expect(canary).toMatchObject({ hostId: "student-01", state: "failed", gate: "failed" });
    expect(canary.error).toContain(
      "lab.health failed on the new lab 3 times in a row after its setup finished",
    );
    expect(canary.error).toContain("no built marker in the lab folder");
    expect(status.hosts.find((h: { batch: number }) => h.batch > 0)).toMatchObject({
      hostId: "student-02",
      state: "pending",
    });
    await rt.executor.idle();
    // The canary's new machine was built (version 5) and is gone; both labs are where they were, on main.
    expect(existsSync(join(hostsDir(), WS, "student-01.b"))).toBe(false);
    for (const id of ["student-01", "student-02"]) {
      const h = await host(WS, id);
      expect(h).toMatchObject({ state: "ready", ref: "main" });
      expect(h?.machine).toBeUndefined();
      expect(versionOf(h?.address as string)).toBe("1");
    }
    expect((await events(WS)).filter((e) => e.type === "lab.updated")).toEqual([]);
  });

  it("leaves a claimed lab untouched without --include-claimed; --check reports that first and changes nothing", async () => {
    const WS = "rclaim";
    await upWorkshop(WS, 2);
    const cy = await claimLab(
      WS,
      { name: "Cy Hopper", email: "cy@example.test", pin: "480273" },
      "127.0.0.1",
    );
    expect(cy.lab).toBe("student-01");
    const claimed = await host(WS, "student-01");

    const check = await cli(["rollout", WS, "--ref", "v2", "--check", "--output", "json"]);
    expect(check.code, check.stderr).toBe(2);
    const report = json(check.stdout);
    expect(report).toMatchObject({ workshop: WS, command: "rollout", changes: true });
    expect(report.items).toEqual([
      {
        hostId: "student-01",
        stage: "rollout",
        action: "skip",
        detail: "claimed by Cy Hopper (--include-claimed updates it)",
      },
      expect.objectContaining({ hostId: "student-02", stage: "rollout", action: "promote" }),
    ]);
    // The text report is the one up, deploy and retry --check print: the summary line, then host by host.
    const text = await cli(["rollout", WS, "--ref", "v2", "--check"]);
    expect(text.code).toBe(2);
    expect(text.stdout).toMatch(/^check rclaim \(rollout\): 1 change on 1 host · nothing was changed$/m);
    expect(text.stdout).toMatch(/student-01\s+rollout\s+skip\s+claimed by Cy Hopper/);
    expect(text.stdout).toMatch(/student-02\s+rollout\s+promote\s+canary: a new host at v2/);
    // In check mode 2 means "would change": every error, usage errors included, exits 1 there.
    for (const args of [["--ref", "v2", "--canary", "0"], ["--status"], [], ["--ref", "v2", "--bogus"]]) {
      const e = await cli(["rollout", WS, ...args, "--check"]);
      expect(e.code, `${args.join(" ")}: ${e.stderr}`).toBe(1);
      expect(e.stdout).toBe("");
      expect(e.stderr).toMatch(/^labfleet: /);
    }
    const unknown = await cli(["rollout", "no-such-workshop", "--ref", "v2", "--check"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("no-such-workshop");
    // Nothing was changed by the checks: no rollout, no new host.
    const none = await cli(["rollout", WS, "--status"]);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("has had no rollout");
    expect(existsSync(join(hostsDir(), WS, "student-02.b"))).toBe(false);

    const r = await cli(["rollout", WS, "--ref", "v2"]);
    expect(r.code, r.stderr).toBe(0);
    const after = await host(WS, "student-01");
    expect(after).toMatchObject({ state: "ready", address: claimed?.address, ref: "main" });
    expect(versionOf(after?.address as string)).toBe("1");
    expect(await labForLink(cy.token)).toMatchObject({ lab: "student-01", update: null });
    expect(versionOf((await host(WS, "student-02"))?.address as string)).toBe("2");
    // Bad input is refused with the field and what was expected; nothing is started.
    const bad = await cli(["rollout", WS, "--ref", "v2;rm", "--canary", "0"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--canary expects a whole number from 1 to 1000");
    const res = await fetch(`${rt.url}/api/workshops/${WS}/rollout`, {
      method: "POST",
      headers: { authorization: `Bearer ${rt.token}` },
      body: JSON.stringify({ ref: "v2;rm" }),
    });
    expect(res.status).toBe(400);
    expect(json(await res.text()).error.details).toEqual([
      { path: "ref", message: "expected a git branch, tag or commit" },
    ]);
  });
});

describe("a lab claimed while the rollout builds its new machine", { timeout: 300_000 }, () => {
  it("without --include-claimed: the student is not moved, the lab not rebuilt or removed, no notice, and the rollout says why", async () => {
    const WS = "rmid";
    await upWorkshop(WS, 2);
    const old = join(hostsDir(), WS, "student-01");
    const r = cli(["rollout", WS, "--ref", "gated", "--canary", "2"]);
    // Both new machines build and wait for the test's go: the lab is still free on the board, and is claimed.
    for (const id of ["student-01", "student-02"])
      await waitFor(
        `${id}'s new machine to build`,
        () => existsSync(join(hostsDir(), WS, `${id}.b`, "builds")) || undefined,
        60_000,
      );
    const dee = await claimLab(
      WS,
      { name: "Dee Noether", email: "dee@example.test", pin: "480274" },
      "127.0.0.1",
    );
    expect(dee.lab).toBe("student-01");
    for (const id of ["student-01", "student-02"]) writeFileSync(join(hostsDir(), WS, `${id}.b`, "go"), "");
    const done = await r;
    expect(done.code, done.stderr + done.stdout).toBe(0);
    expect(done.stdout).toMatch(/to gated from main: completed/);
    expect(done.stdout).toContain(
      "student-01: left alone: claimed by Dee Noether during the rollout: left as it was (--include-claimed updates claimed labs)",
    );

    // The student stays where they were: the old machine, main, built once, their link and no notice.
    const h = await host(WS, "student-01");
    expect(h).toMatchObject({ state: "ready", address: old, ref: "main" });
    expect(h?.machine).toBeUndefined();
    expect(h?.notice).toBeUndefined();
    expect(versionOf(old)).toBe("1");
    expect(readFileSync(join(old, "builds"), "utf8")).toBe("build 1\n");
    expect(existsSync(join(old, "lab", "built"))).toBe(true);
    // The new machine built for the lab was removed.
    expect(existsSync(join(hostsDir(), WS, "student-01.b"))).toBe(false);
    const page = await labForLink(dee.token);
    expect(page).toMatchObject({ lab: "student-01", name: "Dee Noether", update: null });
    expect(page?.access?.credentials.find((c) => c.label === "password")?.value).toBe("v1-student-01");
    const html = await (await fetch(`${rt.url}/l/${dee.token}`)).text();
    expect(html).toContain("v1-student-01");
    expect(html).not.toContain("Your instructor is updating this lab.");
    expect(html).not.toContain("Your lab was updated");

    // The unclaimed lab was promoted; the rollout records why the other was left alone.
    expect(await host(WS, "student-02")).toMatchObject({ ref: "gated", machine: "student-02.b" });
    const status = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(status.state).toBe("completed");
    expect(status.hosts.find((x: { hostId: string }) => x.hostId === "student-01")).toMatchObject({
      state: "skipped",
      student: "Dee Noether",
      gate: null,
      reason:
        "claimed by Dee Noether during the rollout: left as it was (--include-claimed updates claimed labs)",
    });
    expect(status.hosts.find((x: { hostId: string }) => x.hostId === "student-02")).toMatchObject({
      state: "promoted",
      student: null,
    });
    const text = await cli(["rollout", WS, "--status"]);
    expect(text.stdout).toMatch(/student-01\s+canary\s+replace\s+main\s+gated\s+skipped\s+Dee Noether/);
    const ev = await events(WS);
    expect(ev.filter((e) => e.type === "lab.updated").map((e) => e.hostId)).toEqual(["student-02"]);
    expect(ev.find((e) => e.type === "lab.update_skipped")).toMatchObject({
      hostId: "student-01",
      detail: { ref: "gated", student: "Dee Noether" },
    });
    // The workshop is on gated now; the lab left alone still says main, so a check offers it with the flag.
    const check = json((await cli(["rollout", WS, "--ref", "gated", "--check", "--output", "json"])).stdout);
    expect(check.items).toEqual([
      {
        hostId: "student-01",
        stage: "rollout",
        action: "skip",
        detail: "claimed by Dee Noether (--include-claimed updates it)",
      },
      { hostId: "student-02", stage: "rollout", action: "skip", detail: "already at gated" },
    ]);
  });

  it("with --include-claimed: the student who claimed it is told before and after, and moves with the lab", async () => {
    const WS = "rmidin";
    await upWorkshop(WS, 1);
    const r = cli(["rollout", WS, "--ref", "gated", "--include-claimed"]);
    const candidate = join(hostsDir(), WS, "student-01.b");
    await waitFor(
      "the new machine to build",
      () => existsSync(join(candidate, "builds")) || undefined,
      60_000,
    );
    const eve = await claimLab(
      WS,
      { name: "Eve Hamilton", email: "eve@example.test", pin: "480275" },
      "127.0.0.1",
    );
    expect(eve.lab).toBe("student-01");
    // What the student's page says, read as often as the runtime lets it until the rollout ends.
    const seen: (string | null)[] = [];
    let ended = false;
    const watching = (async () => {
      while (!ended) {
        const u = (await labForLink(eve.token))?.update ?? null;
        if (seen.at(-1) !== u) seen.push(u);
        await new Promise((res) => setTimeout(res, 5));
      }
    })();
    writeFileSync(join(candidate, "go"), "");
    const done = await r;
    ended = true;
    await watching;
    expect(done.code, done.stderr + done.stdout).toBe(0);
    // Told first (nothing until the new lab passed its gate), then moved, then told it was updated.
    expect(seen).toEqual([null, "updating", "updated"]);
    const page = await labForLink(eve.token);
    expect(page).toMatchObject({ lab: "student-01", update: "updated" });
    expect(page?.access?.credentials.find((c) => c.label === "password")?.value).toBe("v4-student-01");
    expect(await host(WS, "student-01")).toMatchObject({ ref: "gated", machine: "student-01.b" });
    const status = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(status.hosts).toEqual([
      expect.objectContaining({ hostId: "student-01", state: "promoted", student: "Eve Hamilton" }),
    ]);
    expect(
      (await events(WS)).find((e) => e.type === "lab.updated" && e.hostId === "student-01")?.detail,
    ).toMatchObject({ student: "Eve Hamilton" });
  });
});

describe("a claim and a promotion that cross", { timeout: 300_000 }, () => {
  it("a claim the promotion's read missed still stops it: the conditional write sees the claim", async () => {
    const WS = "rrace";
    await upWorkshop(WS, 1);
    const old = join(hostsDir(), WS, "student-01");
    const r = cli(["rollout", WS, "--ref", "gated"]);
    const candidate = join(hostsDir(), WS, "student-01.b");
    await waitFor(
      "the new machine to build",
      () => existsSync(join(candidate, "builds")) || undefined,
      60_000,
    );
    const fay = await claimLab(
      WS,
      { name: "Fay Kovalevskaya", email: "fay@example.test", pin: "480276" },
      "127.0.0.1",
    );
    expect(fay.lab).toBe("student-01");
    // The promotion's read of the claim answers as if it had been made a moment before the claim: the crossing
    // a claim and a promotion can have. Only that one read; the steps' later reads see the store.
    const miss = missNextClaimRead(rt.store, WS, "student-01");
    try {
      writeFileSync(join(candidate, "go"), "");
      const done = await r;
      expect(done.code, done.stderr + done.stdout).toBe(0);
    } finally {
      miss.restore();
    }
    expect(miss.misses()).toBe(1);
    // The transaction's check of the claim cancelled the promotion; the next poll read the claim and left the lab.
    const h = await host(WS, "student-01");
    expect(h).toMatchObject({ state: "ready", address: old, ref: "main" });
    expect(h?.machine).toBeUndefined();
    expect(h?.notice).toBeUndefined();
    expect(versionOf(old)).toBe("1");
    expect(existsSync(candidate)).toBe(false);
    expect(await labForLink(fay.token)).toMatchObject({ lab: "student-01", update: null });
    const status = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(status.hosts).toEqual([
      expect.objectContaining({ hostId: "student-01", state: "skipped", student: "Fay Kovalevskaya" }),
    ]);
    expect((await events(WS)).filter((e) => e.type === "lab.updated")).toEqual([]);
  });
});

describe("labfleet rollout --resume and --abort", { timeout: 300_000 }, () => {
  it("a halted rollout resumes after a fix; another is aborted, which removes its new machine", async () => {
    const WS = "rcli";
    await upWorkshop(WS, 2);
    const halted = await cli(["rollout", WS, "--ref", "fixable"]);
    expect(halted.code).toBe(1);
    expect(halted.stdout).toMatch(/to fixable from main: halted/);
    expect(halted.stdout).toContain("broken build of version 6");
    expect(halted.stdout).toContain(`labfleet rollout ${WS} --resume goes on after a fix`);
    let s = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(s.hosts.map((h: { hostId: string; state: string }) => `${h.hostId} ${h.state}`)).toEqual([
      "student-01 failed",
      "student-02 pending",
    ]);

    // The fix is pushed to the ref; --resume tries the canary again, then the batch it had not reached.
    lab.fix("fixable");
    const resumed = await cli(["rollout", WS, "--resume"]);
    expect(resumed.code, resumed.stderr + resumed.stdout).toBe(0);
    expect(resumed.stdout).toContain(`rollout of ${WS} to fixable started`);
    expect(resumed.stdout).toMatch(/student-01 promoted/);
    expect(resumed.stdout).toMatch(/student-02 promoted/);
    expect(resumed.stdout).toMatch(/to fixable from main: completed/);
    s = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(s).toMatchObject({ state: "completed", id: s.id });
    for (const id of ["student-01", "student-02"]) {
      const h = await host(WS, id);
      expect(h).toMatchObject({ state: "ready", ref: "fixable", machine: `${id}.b` });
      expect(versionOf(h?.address as string)).toBe("6");
      expect(existsSync(join(hostsDir(), WS, id))).toBe(false);
    }
    const again = await cli(["rollout", WS, "--resume"]);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("the rollout to fixable has completed");

    // Another rollout, held mid-build, is aborted from a second CLI: its new machine goes, the labs stay.
    const held = cli(["rollout", WS, "--ref", "gated"]);
    const candidate = join(hostsDir(), WS, "student-01");
    await waitFor(
      "the canary's new machine to build",
      () => existsSync(join(candidate, "builds")) || undefined,
      60_000,
    );
    const aborted = await cli(["rollout", WS, "--abort"]);
    expect(aborted.code).toBe(1);
    expect(aborted.stdout).toMatch(/to gated from fixable: aborted/);
    expect(aborted.stdout).toMatch(/student-01\s+canary\s+replace\s+fixable\s+gated\s+aborted/);
    expect(aborted.stdout).toContain("student-01: stopped by --abort");
    const follower = await held;
    expect(follower.code).toBe(1);
    expect(follower.stdout).toMatch(/to gated from fixable: aborted/);
    expect(existsSync(candidate)).toBe(false);
    for (const id of ["student-01", "student-02"]) {
      const h = await host(WS, id);
      expect(h).toMatchObject({ state: "ready", ref: "fixable", machine: `${id}.b` });
      expect(versionOf(h?.address as string)).toBe("6");
    }
    s = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
    expect(s).toMatchObject({ state: "aborted", ref: "gated" });
    expect(s.hosts.map((h: { hostId: string; state: string }) => `${h.hostId} ${h.state}`)).toEqual([
      "student-01 aborted",
      "student-02 aborted",
    ]);
    const w = (await rt.store.workshop.get({ name: WS }).go()).data;
    expect((w?.spec as { lab: { ref: string } } | undefined)?.lab.ref).toBe("fixable");
    const twice = await cli(["rollout", WS, "--abort"]);
    expect(twice.code).toBe(1);
    expect(twice.stderr).toContain(`workshop ${WS} has no rollout running`);
  });
});

describe("a rollout interrupted by a restart of the runtime", { timeout: 180_000 }, () => {
  it("resumes where it stopped: the build it started is followed, not started again", async () => {
    const WS = "rres";
    await upWorkshop(WS, 1);
    const started = await fetch(`${rt.url}/api/workshops/${WS}/rollout`, {
      method: "POST",
      headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      body: JSON.stringify({ ref: "gated" }),
    });
    expect(started.status).toBe(202);
    const runId = json(await started.text()).rollout.runId as string;
    const candidate = join(hostsDir(), WS, "student-01.b");
    await waitFor(
      "the new lab's build to start",
      () => existsSync(join(candidate, "builds")) || undefined,
      60_000,
    );

    // The runtime stops mid-rollout and starts again on the same data.
    const { dataDir, table } = rt;
    await rt.close();
    rt = await testRuntime({ dataDir, table });
    env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
    expect(rt.resumed).toContain(runId);
    writeFileSync(join(candidate, "go"), "");
    const status = await waitFor(
      "the rollout to complete",
      async () => {
        const s = json((await cli(["rollout", WS, "--status", "--output", "json"])).stdout).rollout;
        return s.state === "running" ? undefined : s;
      },
      90_000,
    );
    expect(status).toMatchObject({ state: "completed", runId });
    expect(readFileSync(join(candidate, "builds"), "utf8")).toBe("build 4\n");
    expect(await host(WS, "student-01")).toMatchObject({
      state: "ready",
      ref: "gated",
      machine: "student-01.b",
    });
    expect(versionOf(candidate)).toBe("4");
  });
});
