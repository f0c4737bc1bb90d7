import { type ChildProcess, execSync, spawn } from "node:child_process";
import { existsSync, mkdirSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { settleEndedExecution } from "../../shared/fleet/teardown.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { isoNow } from "../../shared/runtime/clock.ts";
import { runCli, runCliOnTty } from "../harness/cli.ts";
import { movableClock, removeDir, tempDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The teardown receipt on the local runtime, through the real CLI: what a teardown removed, a host folder and a
 * process left on purpose (with the commands that remove them), the host-hours, the sweeper's later look, and
 * `down`'s question on a terminal (`script` gives the CLI a pseudo-terminal).
 */

// biome-ignore lint/suspicious/noExplicitAny: JSON answers, read field by field
type Json = Record<string, any>;
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const strays: ChildProcess[] = [];
const clock = movableClock();

beforeAll(async () => {
  work = tempDir("labfleet-receipt-");
  rt = await testRuntime({ clock });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
}, 60_000);
afterAll(async () => {
  for (const c of strays) if (c.exitCode === null) c.kill("SIGKILL");
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

async function upLocal(name: string, count = 2): Promise<string> {
  const file = join(work, `${name}.yaml`);
  writeFileSync(file, workshopYaml({ name, count }));
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stderr).toBe(0);
  return file;
}

async function api(path: string) {
  const res = await fetch(`${rt.url}/api/workshops${path}`, {
    headers: { authorization: `Bearer ${rt.token}` },
  });
  return { status: res.status, body: (await res.json()) as Json };
}

async function events(name: string) {
  return (await api(`/${name}/events`)).body.events as { type: string; detail: Record<string, unknown> }[];
}

describe("a clean local teardown", { timeout: 120_000 }, () => {
  it("prints a receipt with the removed host folders, nothing left and the host-hours at no cost", async () => {
    const W = "receipt-clean";
    await upLocal(W);
    const dirs = ["student-01", "student-02"].map((h) => rt.provider.hostDir(W, h));
    const down = await runCli(["down", W, "--yes"], { env });
    expect(down.code, down.stderr + down.stdout).toBe(0);
    expect(down.stdout).toContain(`receipt ${W} (local), teardown ended`);
    expect(down.stdout).toMatch(/used: 0\.\d\d host-hours on 2 hosts · \$0\.00 \(local hosts cost nothing\)/);
    for (const d of dirs) expect(down.stdout).toContain(d);
    expect(down.stdout).toContain("nothing left");

    const { body } = await api(`/${W}/receipt`);
    expect(body.receipt.left).toEqual([]);
    expect(body.receipt.removed.map((e: { kind: string; id: string }) => `${e.kind} ${e.id}`)).toEqual([
      `host-folder ${dirs[0]}`,
      `host-folder ${dirs[1]}`,
      expect.stringMatching(/^schedule teardown at /),
      `portal ${W}`,
    ]);
    expect(body.receipt.usage).toMatchObject({ hosts: 2, costUsd: 0, basis: "local hosts cost nothing" });
    expect(body.receipt.usage.hostHours).toBeGreaterThanOrEqual(0);

    const receipt = (await events(W)).filter((e) => e.type === "teardown.receipt");
    expect(receipt).toHaveLength(1);
    expect(receipt[0]?.detail).toMatchObject({ left: [], removed: 4 });
    expect(typeof receipt[0]?.detail.by).toBe("string");

    const again = await runCli(["receipt", W], { env });
    expect(again.code).toBe(0);
    expect(again.stdout).toContain("nothing left");
    const status = await runCli(["status", W], { env });
    expect(status.stdout).toContain(`receipt ${W} (local)`);
  });

  it("answers 404 receipt.not_found for a workshop never torn down, in the CLI too", async () => {
    const W = "receipt-none";
    await upLocal(W, 1);
    const res = await api(`/${W}/receipt`);
    expect(res.status).toBe(404);
    expect(res.body.error.code).toBe("receipt.not_found");
    const cli = await runCli(["receipt", W], { env });
    expect(cli.code).not.toBe(0);
    expect(cli.stderr).toContain(`workshop ${W} has no teardown receipt: it was never torn down`);
    await runCli(["down", W, "--yes"], { env });
  });
});

describe("hosts removed before the teardown", { timeout: 120_000 }, () => {
  it("count on the receipt from their creation to their removal, and the receipt says so", async () => {
    const W = "receipt-earlier";
    await upLocal(W, 3);
    const scaled = await runCli(["down", W, "--unclaimed", "1"], { env });
    expect(scaled.code, scaled.stderr).toBe(0);
    expect(scaled.stdout).toContain("removed 1 lab: student-03");
    // Two hours on: the two hosts still there used them, the one scaled down did not.
    clock.advance(2 * 3_600_000);
    const down = await runCli(["down", W, "--yes"], { env });
    expect(down.code, down.stdout).toBe(0);
    const { usage } = (await api(`/${W}/receipt`)).body.receipt;
    expect(usage.hosts).toBe(3);
    expect(usage.earlier.hosts).toBe(1);
    expect(usage.earlier.hostHours).toBeLessThan(0.1);
    expect(usage.hostHours).toBeGreaterThanOrEqual(4);
    expect(usage.hostHours).toBeLessThan(4.2);
    expect(usage.basis).toBe("local hosts cost nothing; includes 1 host removed before the teardown");
    expect(down.stdout).toMatch(
      /used: 4\.\d\d host-hours on 3 hosts \(1 removed earlier: 0\.\d\d\) · \$0\.00/,
    );

    // The next teardown of the workshop counts its own hosts only.
    await upLocal(W, 1);
    expect((await runCli(["down", W, "--yes"], { env })).code).toBe(0);
    const next = (await api(`/${W}/receipt`)).body.receipt.usage;
    expect(next.hosts).toBe(1);
    expect(next.earlier).toBeUndefined();
  });
});

describe("what a teardown leaves", { timeout: 120_000 }, () => {
  it("lists a host folder and a process left on purpose with the commands that remove them; the sweeper sees them go", async () => {
    const W = "receipt-left";
    await upLocal(W);
    // A folder the workshop's records do not know, and a process running in it: the teardown does not touch them.
    const stray = rt.provider.hostDir(W, "student-99");
    mkdirSync(stray, { recursive: true });
    const sleeper = spawn("sleep", ["600"], { cwd: stray, stdio: "ignore" });
    strays.push(sleeper);
    await waitFor("the stray process", () => readlinkSync(`/proc/${sleeper.pid}/cwd`) === stray || undefined);

    const down = await runCli(["down", W, "--yes"], { env });
    expect(down.code, down.stdout).toBe(1); // something is left
    expect(down.stdout).toContain("left (2):");
    expect(down.stdout).toContain(
      `process ${sleeper.pid} (student-99): still running in ${stray}: sleep 600`,
    );
    expect(down.stdout).toContain(`    remove it: kill ${sleeper.pid}`);
    expect(down.stdout).toContain(`host-folder ${stray} (student-99): the host's folder is still there`);
    expect(down.stdout).toContain(`    remove it: rm -rf '${stray}'`);
    const { body } = await api(`/${W}/receipt`);
    expect(body.receipt.left.map((l: { kind: string }) => l.kind)).toEqual(["process", "host-folder"]);
    expect(body.receipt.left.every((l: { foundBy: string }) => l.foundBy === "teardown")).toBe(true);

    // The commands the receipt gives remove what is left; the sweeper's next look moves them to removed.
    for (const l of body.receipt.left as { command: string }[]) execSync(l.command);
    await waitFor(
      "the stray to end",
      () => sleeper.exitCode !== null || sleeper.signalCode !== null || undefined,
    );
    await rt.tick();
    const after = (await api(`/${W}/receipt`)).body.receipt;
    expect(after.left).toEqual([]);
    expect(
      after.removed.filter((e: { detail?: string }) => /seen by the sweeper/.test(e.detail ?? "")),
    ).toHaveLength(2);
    expect(existsSync(stray)).toBe(false);
    expect((await runCli(["receipt", W], { env })).code).toBe(0);
  });

  it("the sweeper adds what it finds left after a clean teardown, with an event", async () => {
    const W = "receipt-sweep";
    await upLocal(W, 1);
    expect((await runCli(["down", W, "--yes"], { env })).code).toBe(0);
    const late = rt.provider.hostDir(W, "student-01");
    mkdirSync(late, { recursive: true }); // something recreated the host's folder after the teardown
    await rt.tick();
    const { receipt } = (await api(`/${W}/receipt`)).body;
    expect(receipt.left).toEqual([
      expect.objectContaining({ kind: "host-folder", id: late, hostId: "student-01", foundBy: "sweeper" }),
    ]);
    const found = (await events(W)).filter((e) => e.type === "teardown.receipt");
    expect(found.map((e) => e.detail.by)).toEqual([expect.any(String), "sweeper"]);
    expect(found[1]?.detail.left).toEqual([`host-folder ${late}`]);
    const cli = await runCli(["receipt", W], { env });
    expect(cli.code).toBe(1);
    expect(cli.stdout).toMatch(/found by the sweeper at /);
    removeDir(late);
  });
});

describe("a teardown that fails outright", { timeout: 180_000 }, () => {
  it("still takes a receipt: the teardown failed, why, what is left and what removes it; down again clears it", async () => {
    const W = "receipt-fail";
    await upLocal(W);
    // A file no one may delete (chattr +i, as root): removing the host's folder throws, so Deprovision fails
    // after its retries and the workflow ends on its failure path.
    const dir = rt.provider.hostDir(W, "student-01");
    const pinned = join(dir, "pinned");
    writeFileSync(pinned, "x");
    execSync(`chattr +i '${pinned}'`);
    try {
      const down = await runCli(["down", W, "--yes"], { env });
      expect(down.code, down.stdout + down.stderr).not.toBe(0);
      expect(down.stdout).toMatch(new RegExp(`receipt ${W} \\(local\\), teardown FAILED `));
      expect(down.stdout).toContain(`run it again to remove what is left: labfleet down ${W} --yes`);
      expect(down.stdout).toContain(`host-folder ${dir} (student-01): the host's folder is still there`);
      expect(down.stdout).toContain(`    remove it: labfleet down ${W} --yes`);
      expect(down.stdout).toContain(`    or by hand: rm -rf '${dir}'`);

      const { body } = await api(`/${W}/receipt`);
      expect(body.receipt.failed).toMatch(/^the teardown failed: .+student-01/);
      expect(body.receipt.removed).toEqual([]);
      const left = body.receipt.left as Json[];
      expect(left.map((l) => `${l.kind} ${l.hostId}`)).toEqual(
        expect.arrayContaining(["host-folder student-01", "host-folder student-02"]),
      );
      for (const l of left.filter((x) => x.kind === "host-folder"))
        expect(l).toMatchObject({ command: `labfleet down ${W} --yes`, byHand: `rm -rf '${l.id}'` });
      // Both hosts were still there: their hours so far are counted.
      expect(body.receipt.usage.hosts).toBe(2);
      const receipts = (await events(W)).filter((e) => e.type === "teardown.receipt");
      expect(receipts.at(-1)?.detail).toMatchObject({ failed: true, removed: 0 });
      expect((await api(`/${W}`)).body.state).toBe("failed");
      const again = await runCli(["receipt", W], { env });
      expect(again.code).toBe(1);
      expect(again.stdout).toContain("teardown FAILED");
      // The sweeper looks again at a failed teardown's receipt: what was removed by hand since moves over.
      const other = left.find((l) => l.hostId === "student-02");
      execSync(other?.byHand);
      await rt.tick();
      const swept = (await api(`/${W}/receipt`)).body.receipt;
      expect(swept.left.map((l: Json) => l.hostId)).not.toContain("student-02");
      expect(swept.left.map((l: Json) => `${l.kind} ${l.hostId}`)).toContain("host-folder student-01");
      expect(swept.removed).toEqual([
        expect.objectContaining({
          kind: "host-folder",
          hostId: "student-02",
          detail: expect.stringMatching(/seen by the sweeper/),
        }),
      ]);
    } finally {
      execSync(`chattr -i '${pinned}'`);
    }
    // The command the receipt gives works: the teardown runs again, ends, and nothing is left.
    const down = await runCli(["down", W, "--yes"], { env });
    expect(down.code, down.stdout + down.stderr).toBe(0);
    expect(down.stdout).toContain("nothing left");
    const { body } = await api(`/${W}/receipt`);
    expect(body.receipt.failed).toBeUndefined();
    expect(body.receipt.left).toEqual([]);
    expect(existsSync(dir)).toBe(false);
  });
});

describe("a teardown whose execution ends outside its own steps", { timeout: 120_000 }, () => {
  it("is settled with a receipt, as the local executor and ReconcileRun settle it: failed, why, what is left", async () => {
    const W = "receipt-lost";
    await upLocal(W);
    // The teardown's run as its execution left it: still running, no step of its own got to record the end.
    const runId = "run_01LOSTTEARDOWN";
    await rt.store.run
      .create({
        workshop: W,
        runId,
        kind: "teardown",
        state: "running",
        force: false,
        startedAt: isoNow(clock),
      })
      .go();
    await rt.store.workshop
      .patch({ name: W })
      .set({ activeRunId: runId, lastRunId: runId, state: "tearing_down" })
      .go();
    const settled = await withActor({ type: "system", id: "workflow:teardown" }, () =>
      settleEndedExecution(W, runId, "TIMED_OUT", "States.Timeout"),
    );
    expect(settled).toBe(true);
    const { body } = await api(`/${W}/receipt`);
    expect(body.receipt.runId).toBe(runId);
    expect(body.receipt.failed).toBe(
      "the teardown failed: the workflow's execution timed out: States.Timeout",
    );
    expect(body.receipt.removed).toEqual([]);
    const left = body.receipt.left as Json[];
    expect(left.map((l) => `${l.kind} ${l.hostId}`)).toEqual(
      expect.arrayContaining(["host-folder student-01", "host-folder student-02"]),
    );
    for (const l of left.filter((x) => x.kind === "host-folder"))
      expect(l).toMatchObject({ command: `labfleet down ${W} --yes`, byHand: `rm -rf '${l.id}'` });
    const run = (await rt.store.run.get({ workshop: W, runId }).go()).data;
    expect(run?.state).toBe("failed");
    expect(run?.error).toBe("the workflow's execution timed out: States.Timeout");
    expect((await api(`/${W}`)).body.state).toBe("failed");
    expect((await events(W)).filter((e) => e.type === "teardown.receipt").at(-1)?.detail).toMatchObject({
      failed: true,
    });
    // A second report of the same end changes nothing.
    expect(
      await withActor({ type: "system", id: "x" }, () => settleEndedExecution(W, runId, "FAILED", "x")),
    ).toBe(false);
    // The receipt's command works.
    const down = await runCli(["down", W, "--yes"], { env });
    expect(down.code, down.stdout + down.stderr).toBe(0);
    expect(down.stdout).toContain("nothing left");
  });
});

describe("down asks first", { timeout: 120_000 }, () => {
  it("on a terminal it asks for the name: anything else aborts and nothing changes; the name tears down", async () => {
    const W = "receipt-ask";
    await upLocal(W, 1);
    const wrong = await runCliOnTty(["down", W], { env, waitFor: "to confirm: ", answer: "demo" });
    expect(wrong.code).toBe(1);
    expect(wrong.output).toContain(
      `This tears down ${W}: its 1 host and everything labfleet made for them go`,
    );
    expect(wrong.output).toContain(`aborted: "demo" is not ${W}; nothing was changed`);
    expect((await api(`/${W}`)).body.state).toBe("ready");
    expect(existsSync(rt.provider.hostDir(W, "student-01"))).toBe(true);

    const ended = await runCliOnTty(["down", W], { env, waitFor: "to confirm: " });
    expect(ended.code).toBe(1);
    expect(ended.output).toContain("nothing was changed");
    expect((await api(`/${W}`)).body.state).toBe("ready");

    const right = await runCliOnTty(["down", W], {
      env,
      waitFor: "to confirm: ",
      answer: W,
      timeoutMs: 60_000,
    });
    expect(right.code, right.output).toBe(0);
    expect(right.output).toContain(`receipt ${W} (local)`);
    expect((await api(`/${W}`)).body.state).toBe("torn_down");
  });

  it("off a terminal it refuses without --yes (exit 1), and --yes needs no terminal", async () => {
    const W = "receipt-script";
    await upLocal(W, 1);
    const refused = await runCli(["down", W], { env });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      `down ${W} tears the workshop down and asks for its name on a terminal; this is not one: pass --yes to confirm (labfleet down ${W} --yes)`,
    );
    expect((await api(`/${W}`)).body.state).toBe("ready");
    const yes = await runCliOnTty(["down", W, "-y"], { env, timeoutMs: 60_000 });
    expect(yes.code, yes.output).toBe(0);
    expect(yes.output).not.toContain("to confirm");
    expect((await api(`/${W}`)).body.state).toBe("torn_down");
  });
});
