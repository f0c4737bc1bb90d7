import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRetry } from "../../shared/fleet/ops.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { listHosts, submitWorkshop } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { loadSshIdentity, publicKeyLine } from "../../shared/transports/ssh-identity.ts";
import {
  fixturesDir,
  processesLeftUnder,
  processesUnder,
  removeDir,
  tempDir,
  testRuntime,
  waitFor,
  workshopYaml,
  wrapperGroup,
} from "../harness/runtime.ts";
import { type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/**
 * `kill -9` of a lab's wrapper (the host-side process that runs `lab.setup` and records its pid, heartbeat and
 * exit code): nothing the wrapper started outlives it. Its heartbeat ends by itself, and a retry or teardown
 * ends the setup the killed wrapper left running, on a local host and on a real sshd host.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: FakeHosts;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

beforeAll(async () => {
  const data = tempDir();
  const home = join(data, "operator-home");
  const identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(1, { authorizedKeys: `${publicKeyLine(identity)}\n` });
  rt = await testRuntime({ dataDir: data, labfleetHome: home });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await fleet?.stop();
  if (rt) {
    // Whatever a failed test left running is ended (it is this suite's), and then reported.
    const left = await processesLeftUnder(rt.dataDir);
    removeDir(rt.dataDir);
    expect(left).toEqual([]);
  }
});

interface Proc {
  pid: number;
  /** The pid as the host's own pid namespace numbers it (the same as `pid` on a local host). */
  nsPid: number;
  pgid: number;
  cmdline: string;
  environ: string;
}

function proc(pid: number): Proc | undefined {
  try {
    // /proc/PID/stat: "pid (comm) state ppid pgrp ...": comm may hold spaces, so split after its ")".
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
    if (fields[0] === "Z") return undefined;
    const nsPids = readFileSync(`/proc/${pid}/status`, "utf8")
      .match(/^NSpid:\s+(.+)$/m)?.[1]
      ?.split(/\s+/);
    return {
      pid,
      nsPid: Number(nsPids?.at(-1) ?? pid),
      pgid: Number(fields[2]),
      cmdline: readFileSync(`/proc/${pid}/cmdline`, "utf8").replaceAll("\0", " "),
      environ: readFileSync(`/proc/${pid}/environ`, "utf8"),
    };
  } catch {
    return undefined; // gone
  }
}

function allProcs(
  pids: number[] = readdirSync("/proc")
    .filter((e) => /^\d+$/.test(e))
    .map(Number),
): Proc[] {
  return pids.map(proc).filter((p): p is Proc => p !== undefined);
}

/** The processes of a lab: its state folder in the command line (wrapper, heartbeat) or the environment (setup). */
function labProcesses(stateDir: string, procs: Proc[]): Proc[] {
  return procs.filter(
    (p) =>
      p.cmdline.includes(`${stateDir}/`) || p.environ.includes(`LABFLEET_STATUS=${stateDir}/status.jsonl`),
  );
}

/**
 * The wrapper's helpers: the heartbeat, and the watcher of status.jsonl when the lab pushes its progress. They run
 * wrapper.sh as the wrapper does (subshells of it); the wrapper is the one that is `pid`.
 */
const heartbeats = (procs: Proc[], wrapperNsPid: number) =>
  procs.filter((p) => p.cmdline.includes("wrapper.sh") && p.nsPid !== wrapperNsPid);

/** Waits for one run to end (not for every run: a test that failed may leave its run going). */
const runEnd = (workshop: string, runId: string) =>
  waitFor(
    `run ${runId} to end`,
    async () => {
      const state = (await rt.store.run.get({ workshop, runId }).go()).data?.state;
      return state && state !== "running" ? state : undefined;
    },
    60_000,
  );

describe("a wrapper killed with SIGKILL", () => {
  it("on a local host: the heartbeat ends with it; retry and teardown end the setup it left", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "wrapkill", lab: "hang", count: 1 })));
    const up = await asInstructor(() => startRun("wrapkill", "up"));
    const hostDir = join(rt.dataDir, "hosts", "wrapkill", "student-01");
    const state = join(hostDir, ".labfleet", "wrapkill");
    const pidFile = join(state, "pid");
    const first = await wrapperGroup(pidFile);
    const group = () => allProcs().filter((p) => p.pgid === first);
    await waitFor("the heartbeat and setup to run", () => {
      const g = group();
      return heartbeats(g, first).length >= 1 && g.some((p) => p.cmdline.startsWith("sleep "))
        ? true
        : undefined;
    });
    const beat = readFileSync(join(state, "heartbeat"), "utf8");
    expect(Number(beat)).toBeGreaterThan(0);

    process.kill(first, "SIGKILL");
    await waitFor(
      "the heartbeat to end with its wrapper",
      () => heartbeats(group(), first).length === 0 || undefined,
      20_000,
    );
    // The setup is left running (a dead wrapper with no exit code fails the lab); the run fails the host.
    expect(group().some((p) => p.cmdline.startsWith("sleep 600"))).toBe(true);
    await runEnd("wrapkill", up.runId);
    const [failed] = await listHosts("wrapkill");
    expect(failed?.state).toBe("failed");
    expect(failed?.error).toMatch(/setup wrapper died without an exit code/);

    // Retry ends what the killed wrapper left before it starts the setup again.
    const retry = await asInstructor(() => startRetry("wrapkill", {}));
    expect(retry.hosts).toEqual(["student-01"]);
    const second = await waitFor("the retried setup", async () => {
      const pid = await wrapperGroup(pidFile);
      return pid !== first ? pid : undefined;
    });
    await waitFor("the killed wrapper's group to be gone", () => group().length === 0 || undefined);
    expect(labProcesses(state, allProcs()).every((p) => p.pgid === second)).toBe(true);

    // Killed again, then torn down: nothing of the lab keeps running or writing into the removed folder.
    await waitFor(
      "the second heartbeat",
      () =>
        heartbeats(
          allProcs().filter((p) => p.pgid === second),
          second,
        ).length >= 1 || undefined,
    );
    process.kill(second, "SIGKILL");
    const down = await asInstructor(() => startRun("wrapkill", "teardown"));
    expect(await runEnd("wrapkill", down.runId)).toBe("succeeded");
    expect(existsSync(hostDir)).toBe(false);
    await waitFor("no lab process left", () => processesUnder(hostDir).length === 0 || undefined);
    expect(labProcesses(state, allProcs())).toEqual([]);
    expect(existsSync(hostDir)).toBe(false);
  }, 90_000);

  it("on an SSH host: the heartbeat ends with it; teardown ends the setup it left", async () => {
    const host = fleet.hosts[0];
    if (!host) throw new Error("no host");
    await asInstructor(() =>
      submitWorkshop(`name: sshkill
lab:
  source: ${join(fixturesDir, "labs", "hang")}
  setup: bash setup.sh
  timeout_minutes: 2
provider:
  type: static
hosts:
  - id: ${host.id}
    ssh: ${host.address}
`),
    );
    await asInstructor(() => startRun("sshkill", "up"));
    const state = "/home/lab/.labfleet/sshkill";
    const pidFile = join(host.root, "home", ".labfleet", "sshkill", "pid");
    const onHost = () => allProcs(host.processes());
    const wrapper = await waitFor("the wrapper on the host", () => {
      const nsPid = existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8")) : Number.NaN;
      const p = onHost().find((x) => x.nsPid === nsPid && x.cmdline.includes("wrapper.sh"));
      return p && heartbeats(onHost(), nsPid).length >= 1 ? p : undefined;
    });
    expect(labProcesses(state, onHost()).length).toBeGreaterThanOrEqual(3); // wrapper, heartbeat, setup

    process.kill(wrapper.pid, "SIGKILL");
    await waitFor(
      "the heartbeat to end with its wrapper",
      () => heartbeats(onHost(), wrapper.nsPid).length === 0 || undefined,
      20_000,
    );
    expect(labProcesses(state, onHost()).some((p) => p.cmdline.startsWith("sleep 600"))).toBe(true);

    const down = await asInstructor(() => startRun("sshkill", "teardown"));
    expect(await runEnd("sshkill", down.runId)).toBe("succeeded");
    await waitFor(
      "no lab process left on the host",
      () => labProcesses(state, onHost()).length === 0 || undefined,
    );
    const [h] = await listHosts("sshkill");
    expect(h?.state).toBe("torn_down");
  }, 90_000);
});
