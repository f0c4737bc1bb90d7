// Benchmark: the embedded runtime's own overhead. Starts the local runtime with its own DynamoDB Local,
// then runs `up` and `teardown` on fleets of growing size with a lab that does no work, and prints
// wall time, state transitions and memory. Run with `npm run bench` (figures vary by machine).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLocalRuntime } from "../cli/local/runtime.ts";
import { startRun } from "../shared/fleet/runs.ts";
import { submitWorkshop, workshopStatus } from "../shared/fleet/workshops.ts";
import { withActor } from "../shared/runtime/actor.ts";
import { setLogSink } from "../shared/runtime/logger.ts";

const sizes = (process.env.BENCH_SIZES ?? "3,10,30").split(",").map(Number);
const waitMs = Number(process.env.BENCH_WAIT_MS ?? 250);
const lab = new URL("./lab", import.meta.url).pathname;
const dataDir = mkdtempSync(join(tmpdir(), "labfleet-bench-"));
setLogSink(() => {}, "error");

const mib = (n: number) => `${(n / 1024 / 1024).toFixed(0)} MiB`;
const t0 = performance.now();
const rt = await startLocalRuntime({ dataDir, waitMs });
console.log(
  `runtime start (DynamoDB Local + table + API): ${((performance.now() - t0) / 1000).toFixed(2)} s`,
);
console.log(`wait between polls: ${waitMs} ms\n`);
console.log("hosts | up to all ready | transitions | transitions/host | teardown | node RSS");

try {
  await withActor({ type: "instructor", id: "bench" }, async () => {
    for (const n of sizes) {
      const name = `bench-${n}`;
      await submitWorkshop(`name: ${name}
lab:
  source: ${lab}
  setup: bash setup.sh
  health: test -f built
  concurrency: 16
provider:
  type: local
  count: ${n}
`);
      const upStart = performance.now();
      const run = await startRun(name, "up");
      await rt.executor.idle();
      const upSeconds = (performance.now() - upStart) / 1000;
      const s = await workshopStatus(name);
      const r = s.runs.find((x) => x.id === run.runId);
      if (s.hosts.ready !== n) throw new Error(`${name}: only ${s.hosts.ready}/${n} ready: ${r?.error}`);
      const tdStart = performance.now();
      await startRun(name, "teardown");
      await rt.executor.idle();
      const tdSeconds = (performance.now() - tdStart) / 1000;
      const t = r?.transitions ?? 0;
      console.log(
        `${String(n).padStart(5)} | ${upSeconds.toFixed(2).padStart(13)} s | ${String(t).padStart(11)} | ${(t / n).toFixed(1).padStart(16)} | ${tdSeconds.toFixed(2).padStart(6)} s | ${mib(process.memoryUsage().rss)}`,
      );
    }
  });
} finally {
  await rt.close();
  rmSync(dataDir, { recursive: true, force: true });
}
