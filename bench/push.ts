// Benchmark: how soon a lab is claimable once its health passes, with pushed progress and with polling alone.
// Starts the local runtime (its own DynamoDB Local) and brings up BENCH_LABS labs on local sandbox hosts twice:
// `lab.push: true` and `lab.push: false`, polling every BENCH_POLL_SECONDS (5: the least workshop.yaml allows).
// Each lab's health check writes the time it first passed, and its setup the time health could first pass (its
// build done); the bench looks at the board every 20 ms and prints, per mode, the median and the worst of both
// times to claimable. `npm run bench:push`.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLocalRuntime } from "../cli/local/runtime.ts";
import { startRun } from "../shared/fleet/runs.ts";
import { submitWorkshop } from "../shared/fleet/workshops.ts";
import { board } from "../shared/portal/claims.ts";
import { openPortal } from "../shared/portal/portal.ts";
import { withActor } from "../shared/runtime/actor.ts";

const labs = Number(process.env.BENCH_LABS ?? 4);
const pollSeconds = Number(process.env.BENCH_POLL_SECONDS ?? 5);
const lab = new URL("./push-lab", import.meta.url).pathname;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "bench" }, fn);

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;

async function once(push: boolean): Promise<{ fromHealth: number[]; fromBuilt: number[] }> {
  const dataDir = mkdtempSync(join(tmpdir(), "labfleet-bench-push-"));
  const rt = await startLocalRuntime({ dataDir, waitMs: pollSeconds * 1000, schedulerIntervalMs: 60_000 });
  try {
    const name = push ? "bench-push" : "bench-poll";
    await asInstructor(() =>
      submitWorkshop(`name: ${name}
lab:
  source: ${lab}
  setup: bash setup.sh
  health: test -f built && { [ -f healthy_at ] || date +%s%3N > healthy_at; }
  poll_seconds: ${pollSeconds}
  push: ${push}
  concurrency: ${labs}
provider:
  type: local
  count: ${labs}
portal:
  enabled: true
`),
    );
    await asInstructor(() => openPortal(name));
    await asInstructor(() => startRun(name, "up"));
    const claimable = new Map<string, number>();
    const deadline = Date.now() + 120_000;
    while (claimable.size < labs && Date.now() < deadline) {
      const b = await board(name);
      for (const l of b.labs)
        if (b.open && l.status === "free" && !claimable.has(l.lab)) claimable.set(l.lab, Date.now());
      await new Promise((r) => setTimeout(r, 20));
    }
    await rt.executor.idle();
    const fromHealth: number[] = [];
    const fromBuilt: number[] = [];
    for (const [hostId, at] of claimable) {
      const dir = join(dataDir, "hosts", name, hostId, "lab");
      fromHealth.push(at - Number(readFileSync(join(dir, "healthy_at"), "utf8")));
      fromBuilt.push(at - Number(readFileSync(join(dir, "built_at"), "utf8")));
    }
    return { fromHealth, fromBuilt };
  } finally {
    await rt.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

for (const push of [true, false]) {
  const r = await once(push);
  const fmt = (xs: number[]) => `median ${median(xs)} ms, worst ${Math.max(...xs)} ms`;
  console.log(
    `${push ? "with push   " : "polling only"} (${labs} labs, poll every ${pollSeconds} s): health passed -> claimable ${fmt(r.fromHealth)}; build done -> claimable ${fmt(r.fromBuilt)}`,
  );
}
