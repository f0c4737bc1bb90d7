// Benchmark: control-plane fan-out over SSH. Starts fake hosts (real sshd processes on 127.10.0.x, see
// tests/harness/ssh-hosts.ts) and times deploy dispatch (sync the lab source, push secrets, start setup
// detached), doctor and a status refresh over 64 of them at -j 32, cold (every connection opened anew, host
// keys already pinned) and warm (the same runtime again, its connections pooled), then doctor over 250 hosts,
// cold. Deploy dispatch is timed with a lab still installing when the dispatch ends (as a lab of an hour is: it
// waits for a gate file the bench creates afterwards), then with an instant lab, whose wrappers push their
// progress while the deploy is still dispatching, with and without `lab.push`; for each deploy the machine's CPU
// time is split between the control plane (this process), DynamoDB Local and the hosts (sshd and what it runs:
// the rest). Run as root:
// `npm run bench:fanout`. BENCH_HOSTS, BENCH_WIDE and BENCH_JOBS change the sizes (BENCH_WIDE=0 skips the wide
// run). Beside doctor it times the floor: the same doctor script on the same hosts over bare ssh2 connections (no
// store, no pool, no host-key check): what the hosts and ssh2 cost alone on this machine. The last line is a
// summary for comparing runs.
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { Session } from "node:inspector/promises";
import { availableParallelism, loadavg } from "node:os";
import { join } from "node:path";
import { Client } from "ssh2";
import { startLocalRuntime } from "../cli/local/runtime.ts";
import { withTransport } from "../shared/fleet/hosts.ts";
import { doctor, doctorScript, refreshHosts, selected, startDeploy } from "../shared/fleet/ops.ts";
import { startRun } from "../shared/fleet/runs.ts";
import { listHosts, submitWorkshop } from "../shared/fleet/workshops.ts";
import { withActor } from "../shared/runtime/actor.ts";
import { mapLimit } from "../shared/runtime/concurrency.ts";
import { setLogSink } from "../shared/runtime/logger.ts";
import { loadSshIdentity, publicKeyLine } from "../shared/transports/ssh-identity.ts";
import { shq } from "../shared/transports/types.ts";
import { tempDir } from "../tests/harness/runtime.ts";
import { type FakeHost, type FakeHosts, startFakeHosts } from "../tests/harness/ssh-hosts.ts";

const size = Number(process.env.BENCH_HOSTS ?? 64);
const wide = Number(process.env.BENCH_WIDE ?? 250);
const jobs = Number(process.env.BENCH_JOBS ?? 32);
const lab = new URL("./lab", import.meta.url).pathname;
/**
 * Setups started, counted from the control plane's own log line as each host's deploy ends: the dispatch is timed
 * without reading the store over and over meanwhile (which would load DynamoDB Local and the control plane).
 */
let labsStarted = 0;
setLogSink((line) => {
  if (line.includes('"msg":"lab started"')) labsStarted++;
}, "info");

const dataDir = tempDir("labfleet-fanout-");
/**
 * The file the installing lab waits for (read -t on a pipe nobody writes: no process while it waits); under
 * /var/tmp, which the fake hosts share with this machine (their /tmp is their own).
 */
const gateDir = mkdtempSync("/var/tmp/labfleet-fanout-gate-");
chmodSync(gateDir, 0o755);
const gate = join(gateDir, "gate");
const home = join(dataDir, "home");
mkdirSync(home, { recursive: true });
const identity = await loadSshIdentity({ labfleetHome: home });
const t0 = performance.now();
// Started 40 at a time: hundreds of sshd starting at once on a busy machine miss the harness's ready timeout.
const fleets: FakeHosts[] = [];
for (let n = 0; n < Math.max(size, wide); n += 40) {
  const batch = Math.min(40, Math.max(size, wide) - n);
  fleets.push(
    await startFakeHosts(batch, { authorizedKeys: `${publicKeyLine(identity)}\n`, firstIndex: n + 1 }),
  );
}
const fleet = {
  hosts: fleets.flatMap((f) => f.hosts),
  stop: () => Promise.all(fleets.map((f) => f.stop())),
};
const load = () =>
  loadavg()
    .map((l) => l.toFixed(1))
    .join(" ");
console.log(
  `${fleet.hosts.length} fake hosts up in ${((performance.now() - t0) / 1000).toFixed(1)} s; -j ${jobs}; load average ${load()}\n`,
);
const rt = await startLocalRuntime({ dataDir, labfleetHome: home, waitMs: 200 });

const secs = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const figures: Record<string, number> = {};
/** CPU time (user + system) of this process, the control plane itself: what a busy machine does not inflate. */
const cpu: Record<string, number> = {};
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
/** CPU time of the whole machine (every core, busy), of DynamoDB Local, ms; from /proc (Linux). */
const ticksMs = 10; // USER_HZ is 100 on Linux
const machineBusyMs = () => {
  const f = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "")
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return (total - (f[3] ?? 0) - (f[4] ?? 0)) * ticksMs;
};
const dynamoPid = () => Number(readFileSync(join(dataDir, "dynamodb.pid"), "utf8").trim());
const dynamoMs = () => {
  const st = readFileSync(`/proc/${dynamoPid()}/stat`, "utf8");
  const f = st.slice(st.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) * ticksMs;
};
/**
 * BENCH_PROFILE=KEY (a key of the summary line, such as installing_warm) writes a CPU profile of that phase alone
 * to KEY.cpuprofile in the working folder (open it in Chrome's DevTools or speedscope).
 */
async function profiled<T>(key: string, fn: () => Promise<T>): Promise<T> {
  if (process.env.BENCH_PROFILE !== key) return fn();
  const session = new Session();
  session.connect();
  await session.post("Profiler.enable");
  await session.post("Profiler.start");
  try {
    return await fn();
  } finally {
    const { profile } = await session.post("Profiler.stop");
    writeFileSync(`${key}.cpuprofile`, JSON.stringify(profile));
    session.disconnect();
    console.log(`(profile of ${key} written to ${key}.cpuprofile)`);
  }
}

/** For each deploy: [machine, control plane, DynamoDB Local] CPU ms. */
const split: Record<string, [number, number, number]> = {};

/** Each timed key's CPU time on the whole machine (every core, every process: the hosts' sshd too). */
const busy: Record<string, number> = {};

async function measure(key: string, fn: () => Promise<unknown>): Promise<void> {
  const t = performance.now();
  const c = cpuMs();
  const m = machineBusyMs();
  await profiled(key, fn);
  figures[key] = performance.now() - t;
  cpu[key] = cpuMs() - c;
  busy[key] = machineBusyMs() - m;
}

/** installing: setup waits for the gate file before the instant lab's steps. */
function workshopYaml(name: string, hosts: FakeHost[], push = true, installing = false): string {
  const setup = installing
    ? `|
    exec 9<> <(:)
    while [ ! -e ${gate} ]; do read -r -t 1 -u 9 || :; done
    bash setup.sh`
    : "bash setup.sh";
  return `name: ${name}
lab:
  source: ${lab}
  setup: ${setup}
  health: test -f built
  concurrency: ${jobs}
  push: ${push}
provider:
  type: static
hosts:
${hosts.map((h) => `  - { id: ${h.id}, ssh: "${h.address}" }`).join("\n")}
`;
}

/** A bare ssh2 login to a fake host (for the floor): no host-key check, no pool. */
function bareConnect(h: FakeHost): Promise<Client> {
  return new Promise((resolve, reject) => {
    const c = new Client();
    c.once("ready", () => resolve(c)).once("error", reject);
    c.connect({
      host: h.ip,
      port: h.port,
      username: "lab",
      privateKey: identity.privateKey,
      readyTimeout: 30_000,
    });
    c.setNoDelay(true);
  });
}

/** Runs a command on a bare connection; rejects unless it exits 0. */
function bareExec(c: Client, command: string): Promise<void> {
  return new Promise((resolve, reject) =>
    c.exec(command, (err, stream) => {
      if (err) return reject(err);
      let code: number | undefined;
      stream.on("exit", (n: number) => (code = n)).on("data", () => {});
      stream.stderr.on("data", () => {});
      stream.on("close", () => (code === 0 ? resolve() : reject(new Error(`exit ${code}`))));
    }),
  );
}

/**
 * The floor: the command doctor sends (without the host-side timeout, as doctor does) over bare ssh2 connections,
 * on every host at -j, timed as `KEY_cold`; then again on the same connections, as `KEY_warm`.
 */
async function bareDoctor(key: string, hosts: FakeHost[]): Promise<void> {
  // as doctor sends it for the bench's lab, which requires neither root nor free disk
  const command = `exec bash --noprofile --norc -c ${shq(doctorScript(["bash", "tar", "setsid"], { sudo: false, disk: false }))}`;
  const bare: Client[] = [];
  try {
    await measure(`${key}_cold`, () =>
      mapLimit(hosts, jobs, async (h) => {
        const c = await bareConnect(h);
        bare.push(c);
        await bareExec(c, command);
      }),
    );
    await measure(`${key}_warm`, () => mapLimit(bare, jobs, (c) => bareExec(c, command)));
  } finally {
    for (const c of bare) c.end();
  }
}

async function doctorAll(name: string): Promise<void> {
  const d = await doctor(name, {}, jobs);
  const bad = d.filter((r) => !r.ok);
  if (bad.length) throw new Error(`doctor failed on ${bad.map((r) => `${r.host}: ${r.checks[0]?.detail}`)}`);
}

/**
 * From the start of a forced deploy until every host's setup has been started (its lab synced, secrets pushed
 * and the wrapper running detached); then the run is let finish.
 */
async function deployDispatch(key: string, name: string, n: number): Promise<void> {
  const since = new Date().toISOString();
  const t = performance.now();
  const c = cpuMs();
  const [m, j] = [machineBusyMs(), dynamoMs()];
  labsStarted = 0;
  await profiled(key, async () => {
    await startDeploy(name, {}, { force: true, concurrency: jobs });
    for (let i = 1; labsStarted < n; i++) {
      // A failed host is looked for now and then (every 250 ms), not on each turn.
      if (i % 25 === 0) {
        const failed = (await listHosts(name)).find(
          (h) => h.state === "failed" && (h.updatedAt ?? "") >= since,
        );
        if (failed) throw new Error(`a host failed: ${failed.error}`);
      }
      await new Promise((r) => setTimeout(r, 10));
    }
  });
  figures[key] = performance.now() - t;
  cpu[key] = cpuMs() - c;
  split[key] = [machineBusyMs() - m, cpu[key] ?? 0, dynamoMs() - j];
  // The installing lab's install is over; then the run polls every lab to ready.
  writeFileSync(gate, "");
  await rt.executor.idle();
  rmSync(gate, { force: true });
}

try {
  await withActor({ type: "instructor", id: "bench" }, async () => {
    const name = `fan-${size}`;
    await submitWorkshop(workshopYaml(name, fleet.hosts.slice(0, size)));
    // A first up pins every host key and builds every lab, as a workshop would before these.
    await startRun(name, "up", { concurrency: jobs });
    await rt.executor.idle();

    // Cold: no connection open (each operation logs in to every host); warm: the pool's connections again.
    // First with the lab still installing when every setup has started, as a lab of an hour is.
    await submitWorkshop(workshopYaml(name, fleet.hosts.slice(0, size), true, true));
    await rt.connections.release(name);
    await deployDispatch("installing_cold", name, size);
    await deployDispatch("installing_warm", name, size);
    // An instant lab: every wrapper pushes its progress while the deploy is still dispatching.
    await submitWorkshop(workshopYaml(name, fleet.hosts.slice(0, size)));
    await rt.connections.release(name);
    await deployDispatch("deploy_cold", name, size);
    await deployDispatch("deploy_warm", name, size);
    await rt.connections.release(name);
    // The same without push: the control plane alone follows the labs (its polls).
    await submitWorkshop(workshopYaml(name, fleet.hosts.slice(0, size), false));
    await deployDispatch("nopush_cold", name, size);
    await deployDispatch("nopush_warm", name, size);
    await submitWorkshop(workshopYaml(name, fleet.hosts.slice(0, size)));
    await rt.connections.release(name);
    await measure("doctor_cold", () => doctorAll(name));
    await measure("doctor_warm", () => doctorAll(name));
    await bareDoctor("floor", fleet.hosts.slice(0, size));
    await rt.connections.release(name);
    await measure("status_cold", () => refreshHosts(name, {}, jobs));
    await measure("status_warm", () => refreshHosts(name, {}, jobs));
    // Latency, not throughput: one host, commands one after another on its open connection.
    const one = await selected(name, {});
    const first = one.hosts[0];
    if (!first) throw new Error("no host");
    const rounds = 100;
    await measure("sequential", () =>
      withTransport(one.spec, one.provider, first, async (t) => {
        for (let i = 0; i < rounds; i++) await t.exec("true", { timeoutMs: 10_000 });
      }),
    );
    await rt.connections.release(name);

    console.log(`${size} hosts, -j ${jobs}  |    cold |    warm | CPU cold | CPU warm | target`);
    const row = (what: string, key: string, target: string) =>
      console.log(
        `${what.padEnd(18)} | ${[
          figures[`${key}_cold`],
          figures[`${key}_warm`],
          cpu[`${key}_cold`],
          cpu[`${key}_warm`],
        ]
          .map((ms, i) => secs(ms ?? 0).padStart(i < 2 ? 7 : 8))
          .join(" | ")} | ${target}`,
      );
    row("deploy dispatch", "installing", "< 1.5 s");
    row("  instant lab", "deploy", "");
    row("  instant, no push", "nopush", "");
    row("doctor", "doctor", "< 1.0 s cold, < 0.4 s warm");
    row("  bare ssh2 floor", "floor", "");
    row("status refresh", "status", "");
    console.log(
      `one host, ${rounds} commands one after another on one connection: ${((figures.sequential ?? 0) / rounds).toFixed(1)} ms each`,
    );
    console.log(`\nCPU during deploy dispatch (the machine's ${availableParallelism()} cores):`);
    console.log("                   | machine | control plane | DynamoDB Local | hosts (the rest)");
    for (const [what, key] of [
      ["installing, cold", "installing_cold"],
      ["installing, warm", "installing_warm"],
      ["instant, cold", "deploy_cold"],
      ["instant, warm", "deploy_warm"],
      ["no push, cold", "nopush_cold"],
      ["no push, warm", "nopush_warm"],
    ] as const) {
      const [mach, plane, db] = split[key] ?? [0, 0, 0];
      console.log(
        `${what.padEnd(18)} | ${secs(mach).padStart(7)} | ${secs(plane).padStart(13)} | ${secs(db).padStart(14)} | ${secs(mach - plane - db).padStart(8)}`,
      );
    }

    if (wide > 0) {
      const wideName = `fan-${wide}`;
      await submitWorkshop(workshopYaml(wideName, fleet.hosts.slice(0, wide)));
      // Provisioning checks every host answers and pins its key; then no connection is left open.
      await startRun(wideName, "provision", { concurrency: jobs });
      await rt.executor.idle();
      await rt.connections.release(wideName);
      await measure("doctor_wide_cold", () => doctorAll(wideName));
      await measure("doctor_wide_warm", () => doctorAll(wideName));
      await bareDoctor("floor_wide", fleet.hosts.slice(0, wide));
      console.log(
        `\n${wide} hosts, -j ${jobs}: doctor ${secs(figures.doctor_wide_cold ?? 0)} cold (target < 3 s; CPU ${secs(cpu.doctor_wide_cold ?? 0)}), ${secs(figures.doctor_wide_warm ?? 0)} warm (CPU ${secs(cpu.doctor_wide_warm ?? 0)}); bare ssh2 floor ${secs(figures.floor_wide_cold ?? 0)} cold, ${secs(figures.floor_wide_warm ?? 0)} warm`,
      );
      // What one cold login and its doctor script cost the machine's cores, on both sides: the floor's wall time
      // cannot be less than that times the hosts, over the cores.
      const perHost = (key: string) => `${((busy[key] ?? 0) / wide).toFixed(1)} ms`;
      console.log(
        `CPU of the whole machine per host, cold: doctor ${perHost("doctor_wide_cold")} (this process ${((cpu.doctor_wide_cold ?? 0) / wide).toFixed(1)} ms), floor ${perHost("floor_wide_cold")}; ${availableParallelism()} cores busy ${Math.round((100 * (busy.doctor_wide_cold ?? 0)) / ((figures.doctor_wide_cold ?? 1) * availableParallelism()))} % of the doctor`,
      );
    }
  });
} finally {
  await rt.close();
  await fleet.stop();
  rmSync(gateDir, { recursive: true, force: true });
}
const s = (k: string) => ((figures[k] ?? 0) / 1000).toFixed(2);
console.log(
  `\nfanout hosts=${size} jobs=${jobs} installing_cold_s=${s("installing_cold")} installing_warm_s=${s("installing_warm")} deploy_cold_s=${s("deploy_cold")} deploy_warm_s=${s("deploy_warm")} nopush_cold_s=${s("nopush_cold")} nopush_warm_s=${s("nopush_warm")} doctor_cold_s=${s("doctor_cold")} doctor_warm_s=${s("doctor_warm")} floor_cold_s=${s("floor_cold")} floor_warm_s=${s("floor_warm")} status_cold_s=${s("status_cold")} status_warm_s=${s("status_warm")} sequential_ms=${((figures.sequential ?? 0) / 100).toFixed(1)}${wide > 0 ? ` doctor${wide}_cold_s=${s("doctor_wide_cold")} floor${wide}_cold_s=${s("floor_wide_cold")} doctor${wide}_machine_ms_per_host=${((busy.doctor_wide_cold ?? 0) / wide).toFixed(1)}` : ""} load=${load()}`,
);
