// Benchmark: a conference-sized workshop, 500 hosts (BENCH_HOSTS), the most a workshop may have.
// 1. Local: the embedded runtime with its own DynamoDB Local brings up 500 local hosts with a lab that does no
//    work (tests/fixtures/labs/instant), then tears them down: wall time of `up` to all ready and of the
//    teardown, state transitions, Deploy Map items, and the runtime's memory.
// 2. Cloud: bench/cloud.ts on the AWS double with the same number of hosts, polled BENCH_POLLS times (default
//    3): Step Functions transitions and history events per execution, Lambda durations (the longest invocation
//    of each function against its timeout), and AWS calls per API.
// `npm run bench:scale`; BENCH_SKIP_CLOUD=1 runs the local part only. Figures vary by machine and load.
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLocalRuntime } from "../cli/local/runtime.ts";
import { startRun } from "../shared/fleet/runs.ts";
import { submitWorkshop, workshopStatus } from "../shared/fleet/workshops.ts";
import { withActor } from "../shared/runtime/actor.ts";
import { setLogSink } from "../shared/runtime/logger.ts";
import { deployItems } from "../shared/workshop/limits.ts";

const HOSTS = Number(process.env.BENCH_HOSTS ?? 500);
const POLLS = Number(process.env.BENCH_POLLS ?? 3);
const waitMs = Number(process.env.BENCH_WAIT_MS ?? 250);
const lab = new URL("../tests/fixtures/labs/instant", import.meta.url).pathname;
const secs = (ms: number) => (ms / 1000).toFixed(2);
const mib = (n: number) => `${(n / 1024 / 1024).toFixed(0)} MiB`;

setLogSink(() => {}, "error");
const dataDir = mkdtempSync(join(tmpdir(), "labfleet-bench-scale-"));
const t0 = performance.now();
const rt = await startLocalRuntime({ dataDir, waitMs });
console.log(`local runtime start (DynamoDB Local + table + API): ${secs(performance.now() - t0)} s`);
let summary = "";
try {
  await withActor({ type: "instructor", id: "bench" }, async () => {
    const name = "bench-scale";
    await submitWorkshop(`name: ${name}
lab:
  source: ${lab}
  setup: bash setup.sh
  health: test -f built
  concurrency: 40
  timeout_minutes: 60
provider:
  type: local
  count: ${HOSTS}
`);
    const upStart = performance.now();
    const run = await startRun(name, "up");
    await rt.executor.idle();
    const upMs = performance.now() - upStart;
    const s = await workshopStatus(name);
    const r = s.runs.find((x) => x.id === run.runId);
    if (s.hosts.ready !== HOSTS) throw new Error(`only ${s.hosts.ready}/${HOSTS} ready: ${r?.error}`);
    const rss = process.memoryUsage().rss;
    const tdStart = performance.now();
    const td = await startRun(name, "teardown");
    await rt.executor.idle();
    const tdMs = performance.now() - tdStart;
    const after = await workshopStatus(name);
    const tdRun = after.runs.find((x) => x.id === td.runId);
    console.log(`\nlocal, ${HOSTS} hosts, an instant lab, lab.concurrency 40, ${waitMs} ms between polls:`);
    console.log(
      `  up to all ready      ${secs(upMs)} s (${r?.state}; ${r?.transitions} transitions, ${deployItems(HOSTS)} Deploy Map items)`,
    );
    console.log(`  teardown             ${secs(tdMs)} s (${tdRun?.state})`);
    console.log(`  runtime memory       ${mib(rss)} RSS after up`);
    summary = `scale local hosts=${HOSTS} up_s=${secs(upMs)} teardown_s=${secs(tdMs)} transitions=${r?.transitions}`;
  });
} finally {
  await rt.close();
  rmSync(dataDir, { recursive: true, force: true });
}

if (!process.env.BENCH_SKIP_CLOUD) {
  console.log(`\ncloud, ${HOSTS} hosts on the AWS double (bench/cloud.ts, BENCH_POLLS=${POLLS}):\n`);
  const r = spawnSync(
    process.execPath,
    [...process.execArgv, new URL("./cloud.ts", import.meta.url).pathname],
    {
      stdio: "inherit",
      env: {
        ...process.env,
        BENCH_HOSTS: String(HOSTS),
        BENCH_POLLS: String(POLLS),
        // As the local part deploys: 40 at once, what an inline Map runs (8 batches of 5 hosts).
        BENCH_CONCURRENCY: process.env.BENCH_CONCURRENCY ?? "40",
      },
    },
  );
  if (r.status !== 0) process.exitCode = r.status ?? 1;
}
console.log(`\n${summary}`);
