// Benchmark: control-plane fan-out over SSH. Starts fake hosts (real sshd processes on 127.10.0.x, see
// tests/harness/ssh-hosts.ts) and times doctor, status refresh and deploy dispatch (sync the lab source,
// push secrets, start setup detached) over 8, 32 and 64 of them. Run as root: `npm run bench:fanout`.
// The last line is a summary for comparing runs.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { startLocalRuntime } from "../cli/local/runtime.ts";
import { doctor, refreshHosts, startDeploy } from "../shared/fleet/ops.ts";
import { startRun } from "../shared/fleet/runs.ts";
import { listHosts, submitWorkshop } from "../shared/fleet/workshops.ts";
import { withActor } from "../shared/runtime/actor.ts";
import { setLogSink } from "../shared/runtime/logger.ts";
import { loadSshIdentity, publicKeyLine } from "../shared/transports/ssh-identity.ts";
import { tempDir } from "../tests/harness/runtime.ts";
import { startFakeHosts } from "../tests/harness/ssh-hosts.ts";

const sizes = (process.env.BENCH_SIZES ?? "8,32,64").split(",").map(Number);
const jobs = Number(process.env.BENCH_JOBS ?? 32);
const lab = new URL("./lab", import.meta.url).pathname;
const max = Math.max(...sizes);
setLogSink(() => {}, "error");

const dataDir = tempDir("labfleet-fanout-");
const home = join(dataDir, "home");
mkdirSync(home, { recursive: true });
const identity = await loadSshIdentity({ labfleetHome: home });
const t0 = performance.now();
const fleet = await startFakeHosts(max, { authorizedKeys: `${publicKeyLine(identity)}\n` });
console.log(`${max} fake hosts up in ${((performance.now() - t0) / 1000).toFixed(1)} s; -j ${jobs}\n`);
const rt = await startLocalRuntime({ dataDir, labfleetHome: home, waitMs: 200 });

const secs = (ms: number) => (ms / 1000).toFixed(2);
let last = { hosts: 0, deploy: 0, doctor: 0, status: 0 };
console.log("hosts | deploy dispatch | per host | doctor  | per host | status  | per host");
try {
  await withActor({ type: "instructor", id: "bench" }, async () => {
    for (const n of sizes) {
      const name = `fan-${n}`;
      const hosts = fleet.hosts.slice(0, n);
      await submitWorkshop(`name: ${name}
lab:
  source: ${lab}
  setup: bash setup.sh
  health: test -f built
  concurrency: ${jobs}
provider:
  type: static
hosts:
${hosts.map((h) => `  - { id: ${h.id}, ssh: "${h.address}" }`).join("\n")}
`);
      // Warm: a first up pins every host key and builds every lab, as a workshop would before these.
      await startRun(name, "up", { concurrency: jobs });
      await rt.executor.idle();

      let t = performance.now();
      const d = await doctor(name, {}, jobs);
      const doctorMs = performance.now() - t;
      if (d.some((r) => !r.ok))
        throw new Error(
          `doctor failed on ${d
            .filter((r) => !r.ok)
            .map((r) => r.host)
            .join(", ")}`,
        );

      // Deploy dispatch: from the start of a forced deploy until every host's setup has been started
      // (its lab synced, secrets pushed and the wrapper running detached).
      const since = new Date().toISOString();
      t = performance.now();
      await startDeploy(name, {}, { force: true, concurrency: jobs });
      for (;;) {
        const hs = await listHosts(name);
        const started = hs.filter(
          (h) => (h.deployStartedAt ?? "") >= since && h.phase !== "sync" && h.phase !== "starting",
        );
        if (started.length === n) break;
        if (hs.some((h) => h.state === "failed"))
          throw new Error(`a host failed: ${hs.find((h) => h.state === "failed")?.error}`);
        await new Promise((r) => setTimeout(r, 10));
      }
      const deployMs = performance.now() - t;
      await rt.executor.idle();

      t = performance.now();
      await refreshHosts(name, {}, jobs);
      const statusMs = performance.now() - t;

      console.log(
        `${String(n).padStart(5)} | ${secs(deployMs).padStart(13)} s | ${(deployMs / n).toFixed(0).padStart(5)} ms | ${secs(doctorMs).padStart(5)} s | ${(doctorMs / n).toFixed(0).padStart(5)} ms | ${secs(statusMs).padStart(5)} s | ${(statusMs / n).toFixed(0).padStart(5)} ms`,
      );
      last = { hosts: n, deploy: deployMs, doctor: doctorMs, status: statusMs };
    }
  });
} finally {
  await rt.close();
  await fleet.stop();
}
console.log(
  `\nfanout hosts=${last.hosts} deploy_dispatch_s=${secs(last.deploy)} doctor_s=${secs(last.doctor)} status_s=${secs(last.status)}`,
);
