// Benchmark: how close the ready estimate comes on the demo's second run. Starts the local runtime with its own
// DynamoDB Local, builds the demo lab (examples/demo/lab) once, tears it down, builds it again, and while the
// second run builds reads the fleet view's estimate; once every lab is ready it prints, at several points of
// that run, the time that really remained, the estimate's and its error. Run with `npm run bench:estimate`
// (figures vary by machine). BENCH_HOSTS (default 3), BENCH_CONCURRENCY (default 3), BENCH_SCALE (the demo's
// DEMO_SCALE, default 1: the demo as `npm start` builds it), BENCH_WAIT_MS (between polls, default 1000 as
// `labfleet dev`).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLocalRuntime } from "../cli/local/runtime.ts";
import { fleetView } from "../shared/fleet/fleet-view.ts";
import { startRun } from "../shared/fleet/runs.ts";
import { submitWorkshop } from "../shared/fleet/workshops.ts";
import { withActor } from "../shared/runtime/actor.ts";
import { setLogSink } from "../shared/runtime/logger.ts";

const hosts = Number(process.env.BENCH_HOSTS ?? 3);
const concurrency = Number(process.env.BENCH_CONCURRENCY ?? 3);
const scale = process.env.BENCH_SCALE ?? "1";
const waitMs = Number(process.env.BENCH_WAIT_MS ?? 1000);
const lab = new URL("../examples/demo/lab", import.meta.url).pathname;
const dataDir = mkdtempSync(join(tmpdir(), "labfleet-bench-estimate-"));
const name = "bench-estimate";
setLogSink(() => {}, "error");

const rt = await startLocalRuntime({ dataDir, waitMs });
console.log(
  `demo lab, ${hosts} hosts, lab.concurrency ${concurrency}, DEMO_SCALE=${scale}, ${waitMs} ms between polls\n`,
);

interface Sample {
  at: number;
  predicted: number;
}

/** Runs `up` to its end, reading the estimate every 200 ms; the samples and when the last lab was ready. */
async function up(): Promise<{ samples: Sample[]; readyAt: number; startedAt: number }> {
  const startedAt = Date.now();
  await startRun(name, "up");
  const samples: Sample[] = [];
  let idle = false;
  const done = rt.executor.idle().then(() => (idle = true));
  while (!idle) {
    const f = await fleetView(name);
    if (f.estimate.kind === "estimated")
      samples.push({ at: Date.parse(f.at), predicted: Date.parse(f.estimate.readyAt) });
    await Promise.race([done, new Promise((r) => setTimeout(r, 200))]);
  }
  const f = await fleetView(name);
  if (f.counts.ready !== hosts) throw new Error(`only ${f.counts.ready}/${hosts} labs ready`);
  return { samples, readyAt: Math.max(...f.labs.map((l) => Date.parse(l.readyAt ?? ""))), startedAt };
}

try {
  await withActor({ type: "instructor", id: "bench" }, async () => {
    await submitWorkshop(`name: ${name}
lab:
  source: ${lab}
  setup: DEMO_SCALE=${scale} bash setup.sh
  health: bash health.sh
  concurrency: ${concurrency}
provider:
  type: local
  count: ${hosts}
`);
    const first = await up();
    console.log(
      `first run: every lab ready ${((first.readyAt - first.startedAt) / 1000).toFixed(1)} s after up`,
    );
    await startRun(name, "teardown");
    await rt.executor.idle();
    const second = await up();
    const took = (second.readyAt - second.startedAt) / 1000;
    console.log(`second run: every lab ready ${took.toFixed(1)} s after up\n`);
    console.log("into the run | really left | estimate | error");
    const rows = second.samples.map((s) => ({
      into: (s.at - second.startedAt) / 1000,
      left: (second.readyAt - s.at) / 1000,
      error: (s.predicted - second.readyAt) / 1000,
    }));
    // About ten points spread over the run.
    const step = Math.max(1, Math.floor(rows.length / 10));
    for (const r of rows.filter((_, i) => i % step === 0)) {
      const pct = r.left > 0 ? ` (${((100 * r.error) / r.left).toFixed(0)} %)` : "";
      console.log(
        `${r.into.toFixed(1).padStart(10)} s | ${r.left.toFixed(1).padStart(9)} s | ${(r.left + r.error).toFixed(1).padStart(6)} s | ${r.error >= 0 ? "+" : ""}${r.error.toFixed(1)} s${pct}`,
      );
    }
    const judged = rows.filter((r) => r.left >= 5);
    const worst = Math.max(...judged.map((r) => Math.abs(r.error) / r.left));
    console.log(
      `\nworst error with at least 5 s left: ${(100 * worst).toFixed(0)} % of the time left (${judged.length} samples)`,
    );
  });
} finally {
  await rt.close();
  rmSync(dataDir, { recursive: true, force: true });
}
