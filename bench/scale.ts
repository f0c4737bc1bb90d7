// Benchmark: a conference-sized workshop, 500 hosts (BENCH_HOSTS), the most a workshop may have.
// 1. Local: the embedded runtime with its own DynamoDB Local brings up 500 local hosts with a lab that does no
//    work (tests/fixtures/labs/instant), then tears them down: wall time of `up` to all ready and of the
//    teardown, state transitions, Deploy Map items, DynamoDB calls per API and item kind, the CPU the up took
//    (the runtime, DynamoDB Local and the rest: the hosts' processes), and the runtime's memory.
// 2. Cloud: bench/cloud.ts on the AWS double with the same number of hosts, polled BENCH_POLLS times (default
//    3): Step Functions transitions and history events per execution, Lambda durations (the longest invocation
//    of each function against its timeout), and AWS calls per API.
// `npm run bench:scale`; BENCH_SKIP_CLOUD=1 runs the local part only; BENCH_PORTAL=1 gives the local workshop a
// portal (opened by the up once every lab is ready). Figures vary by machine and load.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startLocalRuntime } from "../cli/local/runtime.ts";
import { startRun } from "../shared/fleet/runs.ts";
import { submitWorkshop, workshopStatus } from "../shared/fleet/workshops.ts";
import { getPortal } from "../shared/portal/portal.ts";
import { withActor } from "../shared/runtime/actor.ts";
import { setLogSink } from "../shared/runtime/logger.ts";
import { deployItems } from "../shared/workshop/limits.ts";

const HOSTS = Number(process.env.BENCH_HOSTS ?? 500);
const POLLS = Number(process.env.BENCH_POLLS ?? 3);
const waitMs = Number(process.env.BENCH_WAIT_MS ?? 250);
const portal = process.env.BENCH_PORTAL === "1";
const lab = new URL("../tests/fixtures/labs/instant", import.meta.url).pathname;
const secs = (ms: number) => (ms / 1000).toFixed(2);
const mib = (n: number) => `${(n / 1024 / 1024).toFixed(0)} MiB`;

setLogSink(() => {}, "error");
const dataDir = mkdtempSync(join(tmpdir(), "labfleet-bench-scale-"));
const t0 = performance.now();
const rt = await startLocalRuntime({ dataDir, waitMs });
console.log(`local runtime start (DynamoDB Local + table + API): ${secs(performance.now() - t0)} s`);
/** CPU time so far, ms: the whole machine (every core), this process (the runtime), DynamoDB Local. Linux /proc. */
function cpuNow(): { machine: number; runtime: number; dynamo: number } {
  const f = (readFileSync("/proc/stat", "utf8").split("\n")[0] ?? "")
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  const busy = f.reduce((a, b) => a + b, 0) - (f[3] ?? 0) - (f[4] ?? 0);
  const st = readFileSync(`/proc/${readFileSync(join(dataDir, "dynamodb.pid"), "utf8").trim()}/stat`, "utf8");
  const d = st.slice(st.lastIndexOf(")") + 2).split(" ");
  const u = process.cpuUsage();
  // USER_HZ is 100 on Linux: a tick is 10 ms
  return {
    machine: busy * 10,
    runtime: (u.user + u.system) / 1000,
    dynamo: (Number(d[11]) + Number(d[12])) * 10,
  };
}

/** DynamoDB calls of the phase under way, by API and the kind of item they touch (ElectroDB's entity). */
let calls = new Map<string, number>();
let itemsQueried = 0;
rt.store.doc.middlewareStack.add(
  (next, context) => async (args) => {
    const input = (args.input ?? {}) as {
      Item?: Record<string, unknown>;
      Key?: Record<string, unknown>;
      ExpressionAttributeValues?: Record<string, unknown>;
    };
    // A query's sort key condition names the entity it lists ("$host_1#...").
    const queried = Object.values(input.ExpressionAttributeValues ?? {}).find(
      (v) => typeof v === "string" && /^\$[a-z]+_/.test(v),
    );
    const sk = String(input.Item?.sk ?? input.Key?.sk ?? queried ?? "");
    const kind = String(input.Item?.__edb_e__ ?? sk.match(/^\$([a-z]+)/)?.[1] ?? "");
    const what = `${context.commandName?.replace(/Command$/, "")}${kind ? ` ${kind}` : ""}`;
    calls.set(what, (calls.get(what) ?? 0) + 1);
    const out = await next(args);
    // Items a query read (before any filter): what a listing costs, beyond its one call.
    const scanned = (out.output as { ScannedCount?: number }).ScannedCount;
    if (scanned !== undefined) itemsQueried += scanned;
    return out;
  },
  { step: "initialize", name: "benchCallCounter" },
);
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
${portal ? "portal:\n  enabled: true\n" : ""}`);
    calls = new Map();
    itemsQueried = 0;
    const upStart = performance.now();
    const cpu0 = cpuNow();
    const run = await startRun(name, "up");
    await rt.executor.idle();
    const upMs = performance.now() - upStart;
    const cpu1 = cpuNow();
    const upCalls = [...calls.values()].reduce((a, b) => a + b, 0);
    const upItemsQueried = itemsQueried;
    const upCallText = [...calls].sort((a, b) => b[1] - a[1]).slice(0, 12);
    calls = new Map();
    const s = await workshopStatus(name);
    const r = s.runs.find((x) => x.id === run.runId);
    if (s.hosts.ready !== HOSTS) throw new Error(`only ${s.hosts.ready}/${HOSTS} ready: ${r?.error}`);
    const rss = process.memoryUsage().rss;
    const portalState = portal ? ((await getPortal(name))?.state ?? "not opened") : "";
    const tdStart = performance.now();
    const td = await startRun(name, "teardown");
    await rt.executor.idle();
    const tdMs = performance.now() - tdStart;
    const after = await workshopStatus(name);
    const tdRun = after.runs.find((x) => x.id === td.runId);
    console.log(
      `\nlocal, ${HOSTS} hosts, an instant lab, lab.concurrency 40, ${waitMs} ms between polls${portal ? `, a portal (${portalState} after the up)` : ""}:`,
    );
    console.log(
      `  up to all ready      ${secs(upMs)} s (${r?.state}; ${r?.transitions} transitions, ${deployItems(HOSTS)} Deploy Map items)`,
    );
    console.log(
      `  DynamoDB calls       ${upCalls} in up (${(upCalls / HOSTS).toFixed(1)} per host): ${upCallText.map(([k, n]) => `${n} ${k}`).join(", ")}`,
    );
    console.log(
      `  items queried        ${upItemsQueried} in up (${(upItemsQueried / HOSTS).toFixed(0)} per host)`,
    );
    console.log(
      `  CPU during up        machine ${secs(cpu1.machine - cpu0.machine)} s: runtime ${secs(cpu1.runtime - cpu0.runtime)} s, DynamoDB Local ${secs(cpu1.dynamo - cpu0.dynamo)} s, the rest (hosts) ${secs(cpu1.machine - cpu0.machine - (cpu1.runtime - cpu0.runtime) - (cpu1.dynamo - cpu0.dynamo))} s`,
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
