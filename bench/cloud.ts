// Benchmark: what the cloud path costs in AWS's billing units, on the AWS double (tests/harness/aws/). One
// aws workshop of BENCH_HOSTS hosts (default 50) with one operator secret and a lab install polled every
// minute goes through `up` to all ready, then its teardown, with the Lambda bundles as SST builds them. The
// lab waits for a gate file on each instance, which the bench writes once it has seen BENCH_POLLS Poll
// invocations (default 120: a 2-hour install polled every minute); Wait states last WAIT_MS here instead of
// 60 s, so the run's transitions, history events, invocations and AWS calls are a 2-hour run's in minutes.
// Prints Step Functions transitions and history events per execution, Lambda invocations, billed duration and
// GB-seconds per function, AWS calls per API, DynamoDB request units, and the control plane's price from them.
// `npm run bench:cloud`; a quick run: `BENCH_HOSTS=5 BENCH_POLLS=10 npm run bench:cloud`. The last line is a
// summary for comparing runs. BENCH_CONCURRENCY sets lab.concurrency (8) and BENCH_WAIT_MS the Waits (150).
// Durations are the double's (local processes), not AWS latencies.
import { randomBytes } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type DynamoLocal, startDynamoLocal } from "../cli/local/dynamodb.ts";
import { FUNCTIONS, type FunctionName } from "../infra/permissions.ts";
import { buildLambdas } from "../scripts/build-lambdas.ts";
import { ensureTable } from "../shared/store/table.ts";
import { FakeAwsAccount } from "../tests/harness/aws/account.ts";
import { awsWorkshopYaml } from "../tests/harness/aws/cloud.ts";
import type { RawReply } from "../tests/harness/aws/core.ts";
import type { CallRecord } from "../tests/harness/aws/server.ts";
import type { ExecutionRecord } from "../tests/harness/aws/sfn.ts";
import {
  type FixtureRepo,
  type GitHttpServer,
  makeFixtureRepo,
  startGitHttp,
} from "../tests/harness/git-http.ts";
import { fixturesDir, removeDir, tempDir } from "../tests/harness/runtime.ts";

const HOSTS = Number(process.env.BENCH_HOSTS ?? 50);
const POLLS = Number(process.env.BENCH_POLLS ?? 120);
/**
 * lab.concurrency: how many hosts deploy at once (the deploy Map's MaxConcurrency). The cost figures do not
 * depend on it; each deploy at once is a cold start, and on a small busy machine many at once can exceed the
 * 10-second Init limit the Lambda double enforces.
 */
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 8);
/** Every Wait state's length on the double, ms (lab.poll_seconds stays 60, as the workshop says). */
const WAIT_MS = Number(process.env.BENCH_WAIT_MS ?? 150);
for (const [name, v] of Object.entries({ HOSTS, POLLS, CONCURRENCY, WAIT_MS })) {
  if (!Number.isInteger(v) || v < 1) throw new Error(`BENCH_${name} must be a whole number of at least 1`);
}

const W = "cloud-bench";
const STAGE = "bench";

// Prices, USD, first tier, before free tiers (Europe (Ireland) is the workshop's region; the Step Functions and
// Lambda prices are the same there as in US East (N. Virginia)).
/** Step Functions Standard: $0.025 per 1,000 state transitions, retries included (aws.amazon.com/step-functions/pricing/). */
const SFN_PER_TRANSITION = 0.025 / 1000;
/** Lambda: $0.20 per 1M requests (aws.amazon.com/lambda/pricing/). */
const LAMBDA_PER_REQUEST = 0.2 / 1_000_000;
/** Lambda x86, first 6 billion GB-seconds a month: $0.0000166667 per GB-second (aws.amazon.com/lambda/pricing/). */
const LAMBDA_PER_GB_S = 0.0000166667;
/**
 * DynamoDB on-demand, US East (N. Virginia) since the November 2024 price cut: $0.125 per million read request
 * units, $0.625 per million write request units. An assumption: the pricing page renders its table client-side;
 * Europe (Ireland) is about 13% more.
 */
const DDB_PER_RRU = 0.125 / 1_000_000;
const DDB_PER_WRU = 0.625 / 1_000_000;
/** EventBridge: $1.00 per million custom events put on a bus (64 KB chunks). */
const EVENTS_PER_ENTRY = 1 / 1_000_000;

const ac = new AbortController();
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, () => ac.abort(new Error(`stopped by ${signal}`)));
}

/** Polls `fn` every 100 ms until it returns a value; its errors end the wait at once (unlike waitFor). */
async function until<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    ac.signal.throwIfAborted();
    const v = await fn();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const secs = (ms: number) => (ms / 1000).toFixed(1);
const usd = (x: number) => `$${x.toFixed(x < 0.01 ? 6 : 4)}`;
const pad = (s: string | number, n: number) => String(s).padStart(n);
const padEnd = (s: string | number, n: number) => String(s).padEnd(n);

/** Request units one DynamoDB request consumed, as DynamoDB Local reports them (ReturnConsumedCapacity INDEXES). */
interface Consumed {
  op: string;
  table: number;
  indexes: number;
  at: number;
}

const DDB_READS = new Set(["GetItem", "BatchGetItem", "Query", "Scan", "TransactGetItems"]);
const DDB_WRITES = new Set(["PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"]);

/**
 * Asks DynamoDB Local for the capacity each data request of the deployment consumes: the double forwards
 * requests unchanged, so ReturnConsumedCapacity INDEXES is added on the way there (the server records the
 * code's own input before this) and the ConsumedCapacity of the answer is kept.
 */
function meterDynamoDb(account: FakeAwsAccount, out: Consumed[]): void {
  const ddb = account.dynamodb;
  const forward = ddb.forward.bind(ddb);
  ddb.forward = async (op: string, input: Record<string, unknown>, target?: string): Promise<RawReply> => {
    const metered = target === undefined && (DDB_READS.has(op) || DDB_WRITES.has(op));
    const reply = await forward(
      op,
      metered ? { ...input, ReturnConsumedCapacity: "INDEXES" } : input,
      target,
    );
    if (metered && reply.status === 200) {
      const body = JSON.parse(reply.body.toString("utf8")) as {
        ConsumedCapacity?: CapacityOut | CapacityOut[];
      };
      const list = [body.ConsumedCapacity ?? []].flat();
      let table = 0;
      let indexes = 0;
      for (const c of list) {
        table += c.Table?.CapacityUnits ?? c.CapacityUnits ?? 0;
        for (const i of Object.values(c.GlobalSecondaryIndexes ?? {})) indexes += i.CapacityUnits ?? 0;
        for (const i of Object.values(c.LocalSecondaryIndexes ?? {})) indexes += i.CapacityUnits ?? 0;
      }
      out.push({ op, table, indexes, at: Date.now() });
    }
    return reply;
  };
}

interface CapacityOut {
  CapacityUnits?: number;
  Table?: { CapacityUnits?: number };
  GlobalSecondaryIndexes?: Record<string, { CapacityUnits?: number }>;
  LocalSecondaryIndexes?: Record<string, { CapacityUnits?: number }>;
}

const root = tempDir("labfleet-bench-cloud-");
let ddb: DynamoLocal | undefined;
let repo: FixtureRepo | undefined;
let git: GitHttpServer | undefined;
let account: FakeAwsAccount | undefined;
let summary = "";

const t0 = performance.now();
try {
  console.log(
    `cloud bench: ${HOSTS} hosts, lab.poll_seconds 60, the gate opened after ${POLLS} polls, ` +
      `lab.concurrency ${CONCURRENCY}, every Wait ${WAIT_MS} ms on the double\n`,
  );
  const t = performance.now();
  const [build, db] = await Promise.all([
    buildLambdas({ outDir: join(root, "lambdas") }),
    startDynamoLocal(),
  ]);
  ddb = db;
  const table = `bench_cloud_${Date.now().toString(36)}`;
  await ensureTable(ddb.client, table);
  repo = makeFixtureRepo({ from: join(fixturesDir, "labs", "quick") });
  git = await startGitHttp({ repos: { "quick.git": repo.dir } });
  const token = `bench-${randomBytes(16).toString("hex")}`;
  mkdirSync(join(root, "aws"));
  account = await FakeAwsAccount.start({
    dir: join(root, "aws"),
    dynamoEndpoint: ddb.endpoint,
    table,
    stage: STAGE,
    build,
    secrets: { AccessKey: randomBytes(32).toString("base64"), InstructorToken: token },
    timing: { waitMs: WAIT_MS, retryMs: 100 },
    // The account's On-Demand vCPU quota raised to fit the workshop (m7i.large: 2 vCPUs), as an operator would
    // ask Service Quotas before a large workshop; at 256 the quota check refuses more than 128 hosts.
    vcpuQuota: Math.max(256, 2 * HOSTS),
    ec2: { vcpuLimit: Math.max(256, 2 * HOSTS) },
  });
  const aws = account;
  const consumed: Consumed[] = [];
  meterDynamoDb(aws, consumed);
  // The operator stored the lab's secret in Parameter Store, as `labfleet secret set` does in the cloud.
  aws.ssm.putParameter(`/labfleet/${STAGE}/secrets/DB_TOKEN`, randomBytes(12).toString("hex"));
  const setupMs = performance.now() - t;
  console.log(`set-up (bundles, DynamoDB Local, the double): ${secs(setupMs)} s`);

  const api = async (path: string, body?: unknown): Promise<{ status: number; body: unknown }> => {
    const res = await fetch(`${aws.apiEndpoint}/api/workshops${path}`, {
      method: body === undefined ? "GET" : "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      signal: ac.signal,
    });
    return { status: res.status, body: await res.json() };
  };
  const expectStatus = (what: string, res: { status: number; body: unknown }, status: number) => {
    if (res.status !== status) throw new Error(`${what}: HTTP ${res.status} ${JSON.stringify(res.body)}`);
    return res.body as { run?: { id: string }; state?: string };
  };

  // The lab: the operator secret read from $LABFLEET_SECRETS, progress lines, then the gate the bench opens,
  // looked for every 2 s without starting a process (read -t on a pipe nobody writes): hundreds of instances
  // waiting on one machine would otherwise fork a sleep each, every time.
  const yaml = awsWorkshopYaml({
    name: W,
    source: `git:${git.url("quick.git")}`,
    count: HOSTS,
    pollSeconds: 60,
    timeoutMinutes: 180,
    setup: `. "$LABFLEET_SECRETS"
test -n "$DB_TOKEN"
echo '{"phase":"install","state":"running"}' >> "$LABFLEET_STATUS"
exec 9<> <(:)
while [ ! -e "$HOME/release-gate" ]; do read -r -t 2 -u 9 || :; done
echo '{"phase":"install","state":"done"}' >> "$LABFLEET_STATUS"
printf '{"urls":{"ui":"https://%s.example.test/"}}' "$LABFLEET_HOST_ID" > "$LABFLEET_ACCESS"
touch built`,
    extraLab: `ref: v1
concurrency: ${CONCURRENCY}
operator_secrets: [DB_TOKEN]
ui_ports:
  - { name: ui, port: 8443 }`,
  });
  expectStatus("submitting the workshop", await api("", { yaml }), 201);
  // Let the stream deliver the submit's events, so the counts below start with `up`.
  await new Promise((r) => setTimeout(r, 600));
  await aws.settle();

  const since = Date.now();
  const inWindow = <R extends { at: number }>(xs: R[]) => xs.filter((x) => x.at >= since);
  const execution = (machineArn: string, name: string) =>
    [...aws.sfn.executions.values()].find((e) => e.stateMachineArn === machineArn && e.name === name);
  const ended = (machineArn: string, name: string, timeoutMs: number) =>
    until<ExecutionRecord>(
      `execution ${name} to end`,
      () => {
        const e = execution(machineArn, name);
        return e && e.status !== "RUNNING" ? e : undefined;
      },
      timeoutMs,
    );
  const pollFn = aws.deployed.functionName("Poll");
  const polls = () =>
    aws.lambda.invocations.filter((i) => i.functionName === pollFn && i.start >= since).length;

  // ------------------------------------------------------------------------------------------------ up
  const tUp = performance.now();
  const upRun = expectStatus("up", await api(`/${W}/up`, {}), 202).run?.id as string;
  const upMachine = aws.deployed.upStateMachineArn;
  const failedEarly = async () => {
    const e = execution(upMachine, upRun);
    if (e && e.status !== "RUNNING") {
      // The execution's cause points at the run record, which holds the reason.
      const s = (await api(`/${W}`)).body as { runs?: { id: string; error?: string }[] };
      const reason = s.runs?.find((r) => r.id === upRun)?.error ?? "";
      throw new Error(`up ended ${e.status} before the gate: ${e.error} ${e.cause} ${reason}`);
    }
  };
  await until(
    "the first poll (every host deployed)",
    async () => {
      await failedEarly();
      return polls() > 0 ? true : undefined;
    },
    30 * 60_000,
  );
  const deployMs = performance.now() - tUp;
  console.log(`up: every host deployed, first poll after ${secs(deployMs)} s`);
  const tPolls = performance.now();
  let shown = 0;
  await until(
    `${POLLS} polls`,
    async () => {
      await failedEarly();
      const n = polls();
      const step = Math.max(1, Math.round(POLLS / 6));
      if (n >= shown + step && n < POLLS) {
        shown = n - (n % step);
        console.log(`  poll ${n}/${POLLS} at ${secs(performance.now() - tPolls)} s`);
      }
      return n >= POLLS ? true : undefined;
    },
    POLLS * 5 * 60_000,
  );
  const pollPhaseMs = performance.now() - tPolls;
  // The install is done: the gate opens on every instance of the workshop.
  const hostIds = [...aws.ec2.instances.values()]
    .filter((i) => i.launch && i.instance.Tags?.some((x) => x.Key === "labfleet-workshop" && x.Value === W))
    .map((i) => i.instance.Tags?.find((x) => x.Key === "labfleet-host-id")?.Value as string);
  if (hostIds.length !== HOSTS) throw new Error(`${hostIds.length} instances for ${HOSTS} hosts`);
  for (const hostId of hostIds) writeFileSync(join(aws.ec2.instanceOf(W, hostId).home, "release-gate"), "");
  console.log(`  gate opened after ${polls()} polls, ${secs(pollPhaseMs)} s of polling`);
  const tGate = performance.now();
  const up = await ended(upMachine, upRun, 10 * 60_000);
  await aws.settle();
  const upMs = performance.now() - tUp;
  const status = expectStatus("status", await api(`/${W}`), 200);
  console.log(
    `up: ${up.status}, workshop ${status.state}, ${secs(performance.now() - tGate)} s after the gate, ` +
      `${secs(upMs)} s in all`,
  );
  if (up.status !== "SUCCEEDED" || status.state !== "ready")
    throw new Error(`up ended ${up.status} (${up.error ?? ""} ${up.cause ?? ""}), workshop ${status.state}`);
  const totalPolls = polls();

  // ------------------------------------------------------------------------------------------ teardown
  const tDown = performance.now();
  const downRun = expectStatus("teardown", await api(`/${W}/teardown`, {}), 202).run?.id as string;
  const down = await ended(aws.deployed.teardownStateMachineArn, downRun, 10 * 60_000);
  await aws.settle();
  // The last events reach the bus through the table's stream and ForwardEvents.
  await until(
    "workshop.torn_down on the stage's bus",
    () =>
      (aws.events.buses.get(aws.deployed.eventBus) ?? []).some(
        (e) => e["detail-type"] === "workshop.torn_down",
      )
        ? true
        : undefined,
    60_000,
  );
  await aws.settle();
  const downMs = performance.now() - tDown;
  console.log(`teardown: ${down.status} in ${secs(downMs)} s\n`);
  if (down.status !== "SUCCEEDED")
    throw new Error(`teardown ended ${down.status}: ${down.error} ${down.cause}`);

  // ------------------------------------------------------------------------------------------- figures
  console.log("Step Functions (Standard) executions:");
  console.log("  execution  status     transitions  history events (of 25,000)  wall s");
  let transitions = 0;
  let historyEvents = 0;
  for (const [kind, e] of [
    ["up", up],
    ["teardown", down],
  ] as const) {
    const f = aws.sfn.figures(e.executionArn);
    transitions += f.transitions;
    historyEvents += f.historyEvents;
    const wall = ((e.stopDate?.getTime() ?? Date.now()) - e.startDate.getTime()) / 1000;
    console.log(
      `  ${padEnd(kind, 10)} ${padEnd(f.status, 10)} ${pad(f.transitions, 11)}  ${pad(f.historyEvents, 26)}  ${pad(wall.toFixed(1), 6)}`,
    );
  }
  // Each poll is three states (WaitBeforePoll, Poll, CheckReady); the rest are up's other states.
  const upTransitions = aws.sfn.figures(up.executionArn).transitions;
  console.log(
    `  ${totalPolls} polls: ${3 * totalPolls} of up's transitions are the polls (3 each), ` +
      `${upTransitions - 3 * totalPolls} its other states\n`,
  );

  const byDeployed = new Map(
    (Object.keys(FUNCTIONS) as FunctionName[]).map((fn) => [aws.deployed.functionName(fn), fn]),
  );
  const invocations = aws.lambda.invocations.filter((i) => i.start >= since);
  const perFn = new Map<
    string,
    {
      n: number;
      cold: number;
      billedMs: number;
      gbS: number;
      memoryMb: number;
      durMs: number;
      maxMs: number;
      timeoutMs: number;
      notOk: number;
    }
  >();
  for (const inv of invocations) {
    const name = byDeployed.get(inv.functionName) ?? inv.functionName;
    const memoryMb = aws.lambda.config(inv.functionName)?.memoryMb ?? inv.memoryMb;
    const config = aws.lambda.config(inv.functionName);
    const timeoutMs = config ? aws.lambda.timeoutOf(config) : 0;
    const f = perFn.get(name) ?? {
      n: 0,
      cold: 0,
      billedMs: 0,
      gbS: 0,
      memoryMb,
      durMs: 0,
      maxMs: 0,
      timeoutMs,
      notOk: 0,
    };
    f.n++;
    if (inv.coldStart) f.cold++;
    if (inv.outcome !== "ok") f.notOk++;
    f.billedMs += inv.billedDurationMs;
    f.durMs += inv.durationMs;
    f.maxMs = Math.max(f.maxMs, (inv.initDurationMs ?? 0) + inv.durationMs);
    f.gbS += (inv.billedDurationMs / 1000) * (memoryMb / 1024);
    perFn.set(name, f);
  }
  const lambdaN = invocations.length;
  const gbS = [...perFn.values()].reduce((s, f) => s + f.gbS, 0);
  const billedMs = [...perFn.values()].reduce((s, f) => s + f.billedMs, 0);
  console.log("Lambda (billed duration = Init of a cold start + Invoke, rounded up to 1 ms; on the double):");
  console.log(
    "  function            memory  invocations  cold  mean ms  billed s      GB-s   max ms of timeout (share)",
  );
  for (const [name, f] of [...perFn.entries()].sort((a, b) => b[1].gbS - a[1].gbS)) {
    console.log(
      `  ${padEnd(name, 18)} ${pad(`${f.memoryMb} MB`, 7)}  ${pad(f.n, 11)}  ${pad(f.cold, 4)}  ${pad((f.durMs / f.n).toFixed(0), 7)}  ${pad(secs(f.billedMs), 8)}  ${pad(f.gbS.toFixed(2), 8)}  ${pad(f.maxMs.toFixed(0), 7)} of ${pad(f.timeoutMs, 6)} (${((100 * f.maxMs) / Math.max(1, f.timeoutMs)).toFixed(0)}%)${f.notOk ? `  (${f.notOk} not ok)` : ""}`,
    );
  }
  console.log(
    `  ${padEnd("all", 18)} ${pad("", 7)}  ${pad(lambdaN, 11)}  ${pad("", 4)}  ${pad("", 7)}  ${pad(secs(billedMs), 8)}  ${pad(gbS.toFixed(2), 8)}`,
  );
  const apiN = perFn.get("Api")?.n ?? 0;
  console.log(
    `  Api: the bench's own instructor requests (up, status, teardown): ${apiN}. ForwardEvents: the table's\n` +
      "  stream, batches of new event records (the subscription's filter drops the rest).\n",
  );

  // Calls the deployment made (its functions and its instances); not the operator's. The double's own
  // event source mapping reads the stream without going through the endpoint, so it is not among them
  // (on AWS, GetRecords calls Lambda makes for a DynamoDB trigger are free).
  const calls = inWindow(aws.server.calls).filter((c: CallRecord) => c.principal !== "operator");
  const perApi = new Map<string, { n: number; failed: number; by: Map<string, number> }>();
  for (const c of calls) {
    const key = `${c.service}:${c.operation}`;
    const a = perApi.get(key) ?? { n: 0, failed: 0, by: new Map<string, number>() };
    a.n++;
    if (c.outcome !== "ok") a.failed++;
    a.by.set(c.principal, (a.by.get(c.principal) ?? 0) + 1);
    perApi.set(key, a);
  }
  console.log("AWS calls by API (the deployment's functions and instances; the operator's excluded):");
  for (const [key, a] of [...perApi.entries()].sort((x, y) => y[1].n - x[1].n)) {
    const by = [...a.by.entries()]
      .sort((x, y) => y[1] - x[1])
      .map(([p, n]) => `${p} ${n}`)
      .join(", ");
    console.log(`  ${padEnd(key, 36)} ${pad(a.n, 7)}  ${by}${a.failed ? `  (${a.failed} not ok)` : ""}`);
  }
  const awsCalls = calls.length;
  const ofPoll = calls.filter((c) => c.principal === "Poll");
  const perPoll = (op: string) =>
    (ofPoll.filter((c) => c.operation === op).length / Math.max(1, totalPolls)).toFixed(1);
  console.log(
    `  all ${awsCalls}. Each poll: ${(ofPoll.length / Math.max(1, totalPolls)).toFixed(1)} calls, ` +
      `${perPoll("SendCommand")} SendCommand, ${perPoll("GetCommandInvocation")} GetCommandInvocation ` +
      `(polled with backoff from 500 ms: their number follows the double's latency), ${perPoll("UpdateItem")} ` +
      `UpdateItem, ${perPoll("GetItem")} GetItem, ${perPoll("Query")} Query`,
  );
  // The double's always-on request rates (EC2's token buckets, Parameter Store's 40 reads a second).
  const refused = Object.entries(aws.server.rateLimits.stats.refused);
  console.log(
    `  refused past AWS's published rates (retried by the SDK): ${
      refused.length ? refused.map(([api, n]) => `${api} ${n}`).join(", ") : "none"
    }\n`,
  );

  // DynamoDB request units, as DynamoDB Local reports them; transactional requests use two units per item
  // (prepare and commit), which DynamoDB Local does not count, so their table units are doubled here.
  const units = inWindow(consumed);
  let rru = 0;
  let wru = 0;
  const ddbOps = new Map<string, { n: number; units: number }>();
  for (const u of units) {
    const factor = u.op.startsWith("Transact") ? 2 : 1;
    const n = u.table * factor + u.indexes;
    if (DDB_READS.has(u.op)) rru += n;
    else wru += n;
    const o = ddbOps.get(u.op) ?? { n: 0, units: 0 };
    o.n++;
    o.units += n;
    ddbOps.set(u.op, o);
  }
  console.log("DynamoDB on-demand (request units as DynamoDB Local computes them; transactions doubled):");
  for (const [op, o] of [...ddbOps.entries()].sort((a, b) => b[1].n - a[1].n)) {
    console.log(
      `  ${padEnd(op, 20)} ${pad(o.n, 7)} requests ${pad(o.units.toFixed(1), 9)} ${DDB_READS.has(op) ? "RRU" : "WRU"}`,
    );
  }
  const readReqs = units.filter((u) => DDB_READS.has(u.op)).length;
  const writeReqs = units.length - readReqs;
  console.log(
    `  reads ${readReqs} requests, ${rru.toFixed(1)} RRU; writes ${writeReqs} requests, ${wru.toFixed(1)} WRU\n`,
  );

  const putEntries = inWindow(aws.server.calls)
    .filter((c) => c.service === "events" && c.operation === "PutEvents" && c.outcome === "ok")
    .reduce((s, c) => s + ((c.input as { Entries?: unknown[] }).Entries?.length ?? 0), 0);

  const sfnUsd = transitions * SFN_PER_TRANSITION;
  const reqUsd = lambdaN * LAMBDA_PER_REQUEST;
  const gbUsd = gbS * LAMBDA_PER_GB_S;
  const controlUsd = sfnUsd + reqUsd + gbUsd;
  const ddbUsd = rru * DDB_PER_RRU + wru * DDB_PER_WRU;
  const eventsUsd = putEntries * EVENTS_PER_ENTRY;
  console.log("Price of this run (USD, first tier, before free tiers):");
  console.log(
    `  Step Functions Standard  ${pad(transitions, 8)} transitions x $0.025/1,000       ${usd(sfnUsd)}`,
  );
  console.log(
    `  Lambda requests          ${pad(lambdaN, 8)} requests x $0.20/1M               ${usd(reqUsd)}`,
  );
  console.log(
    `  Lambda duration          ${pad(gbS.toFixed(1), 8)} GB-s x $0.0000166667 (x86)        ${usd(gbUsd)}`,
  );
  console.log(`  control plane (usd= below)                                          ${usd(controlUsd)}`);
  // The double's durations are local: on AWS a Run Command round trip and an instance's first boot take
  // longer, and each second more of a function's mean duration costs its invocations x its memory.
  const gbPerSecond = (fn: string) => {
    const f = perFn.get(fn);
    return f ? f.n * (f.memoryMb / 1024) : 0;
  };
  console.log(
    `  (each second added to Poll's mean duration adds ${gbPerSecond("Poll").toFixed(0)} GB-s, ` +
      `${usd(gbPerSecond("Poll") * LAMBDA_PER_GB_S)}; to DeployHost's, ${gbPerSecond("DeployHost").toFixed(0)} GB-s, ` +
      `${usd(gbPerSecond("DeployHost") * LAMBDA_PER_GB_S)})`,
  );
  console.log("  priced separately:");
  console.log(
    `  DynamoDB on-demand       ${rru.toFixed(0)} RRU x $0.125/1M + ${wru.toFixed(0)} WRU x $0.625/1M (assumed, us-east-1)  ${usd(ddbUsd)}`,
  );
  console.log(
    `  EventBridge custom events ${putEntries} x $1.00/1M (ForwardEvents' PutEvents)  ${usd(eventsUsd)}`,
  );
  console.log(
    "  SSM Run Command on EC2 instances and Parameter Store standard parameters (standard throughput): no\n" +
      "  additional charge; EventBridge Scheduler: 14M invocations a month free (this run fires none: the\n" +
      "  teardown deletes the TTL schedule); Step Functions' status-change events are AWS service events (free).\n" +
      "  EC2 is excluded: it is the hosts.",
  );
  console.log(
    `\nWall time on the double: set-up ${secs(setupMs)} s, deploy ${secs(deployMs)} s, ${POLLS} polls to the gate ${secs(pollPhaseMs)} s ` +
      `(${(pollPhaseMs / Math.max(1, POLLS)).toFixed(0)} ms a poll cycle, Wait ${WAIT_MS} ms), teardown ${secs(downMs)} s. ` +
      "Local processes, not AWS latencies.",
  );
  const streamErrors = aws.streamErrors;
  const problems = [
    ...aws.server.failures.map((f) => `double failure: ${f.split("\n")[0]}`),
    ...aws.server.unhandled.map((u) => `unhandled: ${u}`),
    ...aws.events.targetFailures.map((f) => `rule target: ${f}`),
    ...streamErrors.map((s) => `stream: ${s}`),
  ];
  if (problems.length) console.log(`problems:\n  ${problems.slice(0, 10).join("\n  ")}`);

  summary =
    `cloud hosts=${HOSTS} polls=${totalPolls} transitions=${transitions} history_events=${historyEvents} ` +
    `lambda_invocations=${lambdaN} gb_s=${gbS.toFixed(1)} aws_calls=${awsCalls} usd=${controlUsd.toFixed(4)}`;
} catch (err) {
  console.error(`\ncloud bench failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  process.exitCode = 1;
} finally {
  await account?.close().catch((err: unknown) => console.error(`closing the double: ${String(err)}`));
  await git?.close().catch(() => undefined);
  repo?.remove();
  await ddb?.stop().catch(() => undefined);
  removeDir(root);
}
if (summary) console.log(`\n${summary} wall_s=${secs(performance.now() - t0)}`);
