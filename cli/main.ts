import { readFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { FleetEstimate } from "../shared/fleet/estimate.ts";
import { hostIdsOf } from "../shared/providers/types.ts";
import { byNumber } from "../shared/runtime/text.ts";
import { validateWorkshopYaml } from "../shared/workshop/load.ts";
import type { Workshop } from "../shared/workshop/schema.ts";
import {
  ApiClient,
  CliError,
  type HostView,
  isStoreUnavailable,
  type RunView,
  resolveTarget,
  type WorkshopPlan,
  type WorkshopStatus,
} from "./client.ts";
import { knownCommand, overview, showHelp } from "./help.ts";
import { ProgressView } from "./progress.ts";
import {
  block,
  type Cell,
  clean,
  detailLines,
  duration,
  estimateLine,
  jsonText,
  type Output,
  paint,
  phaseText,
  relative,
  runLine,
  stdoutOutput,
  timeLeftText,
  when,
  writeTable,
} from "./render.ts";
import { runCheck, stageBody } from "./stage-commands.ts";

/** Generated from the command table in help.ts, as are `labfleet help CMD` and the shell completion. */
const HELP = overview();

export const options = {
  file: { type: "string", short: "f" },
  output: { type: "string", short: "o" },
  force: { type: "boolean" },
  plan: { type: "boolean" },
  close: { type: "boolean" },
  port: { type: "string" },
  "data-dir": { type: "string" },
  host: { type: "string", multiple: true },
  label: { type: "string", multiple: true },
  jobs: { type: "string", short: "j" },
  "max-errors": { type: "string" },
  timeout: { type: "string" },
  ref: { type: "string" },
  "failed-only": { type: "boolean" },
  "all-selected": { type: "boolean" },
  unclaimed: { type: "string" },
  csv: { type: "string" },
  hours: { type: "string" },
  count: { type: "string" },
  url: { type: "string" },
  token: { type: "boolean" },
  "expires-days": { type: "string" },
  after: { type: "string" },
  key: { type: "string", multiple: true },
  "key-file": { type: "string" },
  replace: { type: "boolean" },
  address: { type: "string" },
  all: { type: "boolean" },
  yes: { type: "boolean", short: "y" },
  only: { type: "string" },
  skip: { type: "string" },
  check: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  version: { type: "boolean" },
  // rollout
  canary: { type: "string" },
  batch: { type: "string" },
  "include-claimed": { type: "boolean" },
  status: { type: "boolean" },
  resume: { type: "boolean" },
  abort: { type: "boolean" },
  // hosts join-token
  uses: { type: "string" },
  expires: { type: "string" },
  approve: { type: "string" },
} as const;

export interface Args {
  values: {
    file?: string;
    output?: string;
    force?: boolean;
    plan?: boolean;
    close?: boolean;
    port?: string;
    "data-dir"?: string;
    host?: string[];
    label?: string[];
    jobs?: string;
    "max-errors"?: string;
    timeout?: string;
    ref?: string;
    "failed-only"?: boolean;
    "all-selected"?: boolean;
    unclaimed?: string;
    csv?: string;
    hours?: string;
    count?: string;
    url?: string;
    token?: boolean;
    "expires-days"?: string;
    after?: string;
    key?: string[];
    "key-file"?: string;
    replace?: boolean;
    address?: string;
    all?: boolean;
    yes?: boolean;
    only?: string;
    skip?: string;
    check?: boolean;
    help?: boolean;
    version?: boolean;
    // rollout
    canary?: string;
    batch?: string;
    "include-claimed"?: boolean;
    status?: boolean;
    resume?: boolean;
    abort?: boolean;
    // hosts join-token
    uses?: string;
    expires?: string;
    approve?: string;
  };
  positionals: string[];
  /** What follows `--` (`labfleet exec NAME -- CMD`); other commands take it as positionals. */
  rest?: string[];
}

function parse(argv: string[]): Args {
  try {
    const cut = argv.indexOf("--");
    const head = cut < 0 ? argv : argv.slice(0, cut);
    const args = parseArgs({ args: head, options, allowPositionals: true, strict: true }) as Args;
    if (cut >= 0) {
      const rest = argv.slice(cut + 1);
      if (args.positionals[0] === "exec") args.rest = rest;
      else args.positionals.push(...rest);
    }
    jsonOutput(args); // a bad --output is a usage error before anything runs
    return args;
  } catch (err) {
    if (err instanceof CliError) throw err;
    throw new CliError(`${(err as Error).message}\n\`labfleet help COMMAND\` shows its options.`, 2);
  }
}

export function readWorkshopFile(file: string): { yaml: string; baseDir: string } {
  try {
    return { yaml: readFileSync(file, "utf8"), baseDir: dirname(resolve(file)) };
  } catch (err) {
    throw new CliError(
      `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
      2,
    );
  }
}

/** Validates locally first, so a bad file never reaches the runtime; returns the workshop name. */
export function checkedFile(file: string): { yaml: string; baseDir: string; name: string } {
  const { yaml, baseDir } = readWorkshopFile(file);
  const result = validateWorkshopYaml(yaml);
  if (!result.ok) throw new CliError(`${file} is not valid`, 1, result.errors);
  return { yaml, baseDir, name: result.workshop.name };
}

export function workshopName(args: Args): string {
  if (args.values.file) return checkedFile(args.values.file).name;
  const name = args.positionals[1];
  if (!name) throw new CliError("name the workshop: -f workshop.yaml or its name", 2);
  return name;
}

export function jsonOutput(args: Args): boolean {
  const o = args.values.output;
  if (o === undefined || o === "text") return false;
  if (o === "json") return true;
  throw new CliError(`--output must be text or json, got ${o}`, 2);
}

/**
 * An enrolled host's agent as `status` shows it: `online`, or `unreachable, last seen 4 min ago`, then `drained`
 * and `disabled` when the instructor set them.
 */
export function agentCell(out: Output, h: WorkshopStatus["hostList"][number]): Cell {
  if (h.reachable === undefined) return "";
  const parts = [
    h.reachable === "unreachable"
      ? `unreachable${h.lastSeenAt ? `, last seen ${relative(h.lastSeenAt)}` : ""}`
      : "online",
    ...(h.drained ? ["drained"] : []),
    ...(h.disabled ? ["disabled"] : []),
  ];
  const text = parts.join(", ");
  return h.reachable === "unreachable" || h.disabled ? paint(out, "failed", text) : text;
}

export function statusDocument(s: WorkshopStatus) {
  return {
    workshop: s.name,
    state: s.state,
    expiry: s.expiry ?? null,
    hosts: s.hostList.map((h) => ({
      id: h.id,
      state: h.state,
      phase: h.phase,
      error: h.error,
      phases: h.phases,
      elapsedSeconds: h.elapsedSeconds ?? null,
      readyAt: h.readyAt ?? null,
      hostKey: h.hostKey ?? null,
      health: h.health ?? null,
      // Enrolled hosts' agents (null and false for hosts that do not call in).
      reachable: h.reachable ?? null,
      lastSeenAt: h.lastSeenAt ?? null,
      drained: h.drained ?? false,
      disabled: h.disabled ?? false,
    })),
    runs: s.runs,
  };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Runs that create labs: while they go on, the labs not created yet count in the progress view. */
const CREATING_RUNS = new Set(["up", "provision", "scale"]);

/** How many of the labs the workshop's file describes have no record among `shown` yet. */
function uncreatedLabs(spec: Workshop, shown: HostView[]): number {
  const have = new Set(shown.map((h) => h.id));
  return hostIdsOf(spec).filter((id) => !have.has(id)).length;
}

/** Follows a run until it ends, drawing per-host progress; returns the final status. */
export async function follow(
  client: ApiClient,
  name: string,
  runId: string,
  out: Output | undefined,
  intervalMs = 1000,
): Promise<WorkshopStatus> {
  const view = out ? new ProgressView(out) : undefined;
  let waiting = false;
  for (;;) {
    let s: WorkshopStatus;
    try {
      s = await client.status(name);
    } catch (err) {
      // The runtime is up but its store is not, for now: the run is paused, not over; keep following it.
      if (!isStoreUnavailable(err)) throw err;
      if (!waiting) {
        view?.release(); // the note goes below the hosts drawn so far
        out?.write(
          `the store is unreachable for now; still following run ${runId}, which goes on once it is back\n`,
        );
      }
      waiting = true;
      await sleep(intervalMs);
      continue;
    }
    if (waiting) out?.write("the store answers again\n"); // the hosts are drawn anew below
    waiting = false;
    const run = s.runs.find((r) => r.id === runId);
    const shown = s.hostList.filter((h) => h.state !== "torn_down" || s.state === "torn_down");
    view?.update(shown, run && CREATING_RUNS.has(run.kind) ? uncreatedLabs(s.spec, shown) : 0);
    if (run && run.state !== "running") {
      view?.release();
      return s;
    }
    await sleep(intervalMs);
  }
}

async function cmdValidate(args: Args, out: Output): Promise<number> {
  const file = args.values.file;
  if (!file) throw new CliError("validate needs -f workshop.yaml", 2);
  const { yaml } = readWorkshopFile(file);
  const result = validateWorkshopYaml(yaml);
  if (jsonOutput(args)) {
    out.write(
      jsonText(result.ok ? { ok: true, name: result.workshop.name } : { ok: false, errors: result.errors }),
    );
  } else if (result.ok) {
    out.write(`${clean(file)}: ${paint(out, "ready", "valid")} (workshop ${clean(result.workshop.name)})\n`);
  } else {
    out.write(
      `${clean(file)}: ${paint(out, "failed", `${result.errors.length} error${result.errors.length === 1 ? "" : "s"}`)}\n${detailLines(result.errors)}\n`,
    );
  }
  return result.ok ? 0 : 1;
}

async function cmdUp(args: Args, out: Output): Promise<number> {
  const file = args.values.file;
  if (!file) throw new CliError("up needs -f workshop.yaml", 2);
  const { yaml, baseDir, name } = checkedFile(file);
  const json = jsonOutput(args);
  const client = new ApiClient(resolveTarget());
  const stages = stageBody(args);
  if (args.values.plan) return printPlan(await client.plan(yaml, baseDir), json, out);
  const force = args.values.force ?? false;
  if (args.values.check)
    return runCheck(client, name, { command: "up", yaml, baseDir, force, ...stages }, json, out);
  const submitted = await client.submit(yaml, baseDir);
  const { run } = await client.call<{ run: RunView }>("POST", `/workshops/${encodeURIComponent(name)}/up`, {
    force,
    ...stages,
  });
  if (!json) {
    writeCountKept(name, file, submitted.countKept, out);
    out.write(`${run.kind === "provision" ? "provision" : "up"} ${clean(name)}: run ${clean(run.id)}\n`);
  }
  // `--only provision` is a provision run: it ends as `labfleet provision` does.
  if (run.kind === "provision")
    return reportProvision(await follow(client, name, run.id, undefined), run.id, json, out, file);
  const s = await follow(client, name, run.id, json ? undefined : out);
  return report(s, run.id, json, out, "ready", file);
}

/** A file whose provider.count is lower than the workshop's: the workshop kept its count; how to remove labs. */
export function writeCountKept(
  name: string,
  file: string,
  kept: { file: number; kept: number } | undefined,
  out: Output,
): void {
  if (!kept) return;
  const fewer = kept.kept - kept.file;
  out.write(
    `${clean(file)} says provider.count ${kept.file}, but ${clean(name)} has ${kept.kept} hosts: kept ${kept.kept}, no host removed (up never removes hosts); \`labfleet down ${clean(name)} --unclaimed ${fewer}\` removes labs nobody claimed\n`,
  );
}

/**
 * `labfleet provision -f FILE`: submits the file as `up` does, starts a `provision` run (hosts created or
 * reused and recorded, the TTL teardown armed, no lab deployed), follows it and prints each host's id and
 * address. Exit 0 when every host was provisioned. With --plan, the plan `up --plan` prints; nothing changes.
 */
async function cmdProvision(args: Args, out: Output): Promise<number> {
  const file = args.values.file;
  if (args.values.check) return checkProvision(args, out);
  if (!file) throw new CliError("provision needs -f workshop.yaml", 2);
  const { yaml, baseDir, name } = checkedFile(file);
  const json = jsonOutput(args);
  const client = new ApiClient(resolveTarget());
  if (args.values.plan) return printPlan(await client.plan(yaml, baseDir), json, out);
  const submitted = await client.submit(yaml, baseDir);
  const { run } = await client.call<{ run: RunView }>(
    "POST",
    `/workshops/${encodeURIComponent(name)}/provision`,
    {},
  );
  if (!json) {
    writeCountKept(name, file, submitted.countKept, out);
    out.write(`provision ${clean(name)}: run ${clean(run.id)}\n`);
  }
  const s = await follow(client, name, run.id, undefined);
  return reportProvision(s, run.id, json, out, file);
}

/**
 * `labfleet provision (NAME | -f FILE) --check`: what provisioning would create or reuse, per host, changing
 * nothing (a file is checked, not submitted). Exit 0 when nothing would change, 2 when something would.
 */
async function checkProvision(args: Args, out: Output): Promise<number> {
  const file = args.values.file;
  const client = new ApiClient(resolveTarget());
  if (!file) return runCheck(client, workshopName(args), { command: "provision" }, jsonOutput(args), out);
  const { yaml, baseDir, name } = checkedFile(file);
  return runCheck(client, name, { command: "provision", yaml, baseDir }, jsonOutput(args), out);
}

/**
 * The end of a provision run: each host it provisioned, with its address. The run's per-host results say
 * which hosts it acted on (`provisioned` or `failed`); exit 0 only when the run succeeded, i.e. every one
 * was provisioned.
 */
export function reportProvision(
  s: WorkshopStatus,
  runId: string,
  json: boolean,
  out: Output,
  file = "workshop.yaml",
): number {
  const run = s.runs.find((r) => r.id === runId);
  const results = run?.hosts ?? {};
  const byId = new Map(s.hostList.map((h) => [h.id, h]));
  const hosts = Object.entries(results)
    .sort(([a], [b]) => byNumber(a, b))
    .map(([id, r]) => {
      const h = byId.get(id);
      return {
        id,
        result: r.state,
        state: h?.state ?? null,
        address: h?.address ?? null,
        providerId: h?.providerId ?? null,
        error: r.error ?? null,
      };
    });
  const success = run?.state === "succeeded" && hosts.every((h) => h.result === "provisioned");
  if (json) {
    out.write(
      jsonText({ workshop: s.name, state: s.state, expiry: s.expiry ?? null, hosts, run: run ?? null }),
    );
    return success ? 0 : 1;
  }
  if (run) out.write(`${runLine(run)}\n`);
  const ok = hosts.filter((h) => h.result === "provisioned");
  if (ok.length) {
    writeTable(
      [
        ["host", "state", "address"],
        ...ok.map((h) => [h.id, paint(out, h.state ?? "", h.state ?? ""), h.address ?? ""]),
      ],
      out,
    );
  }
  for (const h of hosts.filter((h) => h.result !== "provisioned")) {
    out.write(`${paint(out, "failed", `${h.id} failed`)}: ${block(h.error ?? "no reason recorded")}\n`);
  }
  if (run?.error) out.write(`${block(run.error)}\n`);
  const bare = ok.filter((h) => h.state === "pending").length;
  if (bare > 0) {
    out.write(
      `${bare} host${bare === 1 ? " has" : "s have"} no lab yet: \`labfleet up -f ${clean(file)}\` deploys ${bare === 1 ? "it" : "them"}\n`,
    );
  }
  if (ok.length && s.expiry) out.write(`torn down at ${when(s.expiry)} (\`labfleet extend\` moves it)\n`);
  return success ? 0 : 1;
}

function printPlan(plan: WorkshopPlan, json: boolean, out: Output): number {
  if (json) {
    out.write(jsonText(plan));
    return 0;
  }
  const count = (a: string) => plan.items.filter((i) => i.action === a).length;
  out.write(
    `plan ${clean(plan.name)} (${clean(plan.provider)}): ${count("create")} to create, ${count("reuse")} to reuse, ` +
      `${count("noop")} unchanged · nothing was changed\n`,
  );
  writeTable(
    [["host", "action", "detail"], ...plan.items.map((i) => [i.hostId, i.action, i.detail ?? ""])],
    out,
  );
  return 0;
}

/** The end of a followed run: the hosts it acted on, and exit 0 only when each is where the run leaves it. */
export function report(
  s: WorkshopStatus,
  runId: string,
  json: boolean,
  out: Output,
  want: "ready" | "torn_down",
  file?: string,
): number {
  const run = s.runs.find((r) => r.id === runId);
  // A run that left out the wait stage ends with its labs still building: it did its part when none failed.
  const waited = !run?.stages || run.stages.includes("wait");
  const ok = (h: WorkshopStatus["hostList"][number]) =>
    h.state === want || (!waited && want === "ready" && h.state !== "failed");
  if (run?.selection?.length) {
    const wanted = new Set(run.selection);
    s = { ...s, hostList: s.hostList.filter((h) => wanted.has(h.id)) };
  } else if (want === "ready") {
    s = { ...s, hostList: s.hostList.filter((h) => h.state !== "torn_down") }; // hosts given back earlier
  }
  const success = run?.state === "succeeded" && s.hostList.every(ok);
  if (json) out.write(jsonText({ ...statusDocument(s), run: run ?? null }));
  else {
    if (run) out.write(`${runLine(run)}\n`);
    for (const h of s.hostList.filter((h) => h.state === "failed")) {
      out.write(`${paint(out, "failed", `${h.id} failed`)}: ${block(h.error ?? "no reason recorded")}\n`);
    }
    // A succeeded run may still carry a note (student access that could not be opened): it is shown too.
    if (run?.error) out.write(`${block(run.error)}\n`);
    const building = s.hostList.filter((h) => h.state === "deploying").length;
    if (!waited && building > 0) {
      out.write(
        `${building} lab${building === 1 ? " is" : "s are"} still building (the run left out the wait stage): \`labfleet up -f ${clean(file ?? "workshop.yaml")} --only wait,publish\` waits for them and hands them out\n`,
      );
    }
  }
  return success ? 0 : 1;
}

async function cmdStatus(args: Args, out: Output): Promise<number> {
  const name = workshopName(args);
  const client = new ApiClient(resolveTarget());
  // Status reads the hosts themselves first (bounded by -j), so what it shows is current.
  const refreshed = await client.call<{ hosts: { id: string }[] }>(
    "POST",
    `/workshops/${encodeURIComponent(name)}/refresh`,
    selectionBody(args),
  );
  const shown = new Set(refreshed.hosts.map((h) => h.id));
  const all = await client.status(name);
  const s = { ...all, hostList: all.hostList.filter((h) => shown.has(h.id)) };
  const json = jsonOutput(args);
  // The ready estimate is the whole fleet's, as the console's fleet view shows it; JSON keeps each shown
  // lab's seconds too.
  const estimate = await readyEstimate(client, name, json ? shown : undefined);
  if (json) {
    out.write(jsonText({ ...statusDocument(s), estimate: estimate ?? null }));
    return 0;
  }
  // Who holds which lab: the portal's claims (names only are shown; emails stay in `portal status`).
  const portal = await client
    .call<{ labs: { lab: string; status: string }[]; claims: { lab: string; name: string }[] }>(
      "GET",
      `/workshops/${encodeURIComponent(name)}/portal/status`,
    )
    .catch(() => undefined);
  const claimant = new Map((portal?.claims ?? []).map((c) => [c.lab, c.name]));
  const claims = portal
    ? ` · ${portal.labs.filter((l) => l.status === "claimed").length} claimed · ${portal.labs.filter((l) => l.status === "free").length} free`
    : "";
  const silent = s.hostList.filter((h) => h.reachable === "unreachable");
  out.write(
    `${clean(s.name)}: ${clean(s.state)} · ${s.hosts.ready}/${s.hosts.total} ready${claims}${silent.length ? ` · ${silent.length} unreachable` : ""}${s.expiry ? ` · ${timeLeftText(s.expiry)}` : ""}\n`,
  );
  const line = estimate ? estimateLine(estimate) : "";
  if (line) out.write(`${line}\n`);
  // Enrolled hosts get a column of their own: whether their agent calls in, and their controls.
  const agents = s.hostList.some((h) => h.reachable !== undefined);
  writeTable(
    s.hostList.map((h) => [
      h.id,
      paint(out, h.state),
      ...(agents ? [agentCell(out, h)] : []),
      phaseText(h),
      duration(h.elapsedSeconds),
      claimant.get(h.id) ?? "",
      h.state === "failed" && h.error ? (h.error.split("\n")[0] ?? "") : "",
    ]),
    out,
  );
  const failed = s.hostList.filter((h) => h.state === "failed");
  for (const h of failed) out.write(`\n${clean(h.id)}: ${block(h.error ?? "")}\n`);
  for (const h of silent)
    out.write(
      `\n${paint(out, "failed", `${h.id} is unreachable`)}: its agent has not called in since ${h.lastSeenAt ? when(h.lastSeenAt) : "it joined"}; ` +
        "its lab takes no new claims and commands for it fail at once. It is back by itself when the agent calls in again " +
        `(on the machine: bash ~/.labfleet-agent/agent.sh run ${clean(s.name)}).\n`,
    );
  for (const h of s.hostList.filter((h) => h.state === "ready" && h.health?.state === "failing"))
    out.write(
      `\n${paint(out, "failed", `${h.id} is failing its health check`)} (lab.health, while in use): ${block(h.health?.error ?? "")}\n` +
        `  move its student, keeping their link: labfleet portal swap ${clean(s.name)} ${clean(h.id)}\n`,
    );
  if (s.state === "torn_down") {
    const receipts = await import("./receipt.ts");
    const found = await receipts.fetchReceipt(client, name).catch(() => undefined);
    if (found) {
      out.write("\n");
      receipts.writeReceipt(found.receipt, out);
    }
  }
  if (s.runs.length) out.write("\nruns:\n");
  for (const r of s.runs.slice(0, 10)) out.write(`  ${clean(r.id)}  ${runLine(r)}\n`);
  return 0;
}

/**
 * The fleet view's ready estimate (GET .../fleet): undefined when the API does not answer it. With `hosts`, its
 * per-lab seconds are those labs' (the pages are followed until they are all seen); without, one lab's page is
 * read, for the fleet's figure alone.
 */
async function readyEstimate(
  client: ApiClient,
  name: string,
  hosts?: Set<string>,
): Promise<FleetEstimate | undefined> {
  const path = `/workshops/${encodeURIComponent(name)}/fleet`;
  const page = (cursor?: string) =>
    client.call<{ estimate: FleetEstimate; page: { next: string | null } }>(
      "GET",
      `${path}?limit=${hosts ? 500 : 1}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
    );
  try {
    const first = await page();
    const e = first.estimate;
    if (!hosts || e.kind !== "estimated") return e;
    const seconds = { ...e.hosts };
    for (let next = first.page.next; next; ) {
      const more = await page(next);
      if (more.estimate.kind === "estimated") Object.assign(seconds, more.estimate.hosts);
      next = more.page.next;
    }
    return { ...e, hosts: Object.fromEntries(Object.entries(seconds).filter(([id]) => hosts.has(id))) };
  } catch {
    return undefined; // status stands without it, as without the portal's claims
  }
}

async function cmdDown(args: Args, out: Output): Promise<number> {
  const name = workshopName(args);
  const json = jsonOutput(args);
  const client = new ApiClient(resolveTarget());
  if (args.values.unclaimed !== undefined) {
    // Scale down no-shows instead of tearing everything down.
    const n = args.values.unclaimed;
    const unclaimed = n === "all" ? "all" : Number(n);
    if (unclaimed !== "all" && (!Number.isInteger(unclaimed) || unclaimed < 1)) {
      throw new CliError(`--unclaimed takes a number of labs or "all", got ${n}`, 2);
    }
    const r = await client.call<{ removed: string[]; releasedClaims: string[]; waiting: number }>(
      "POST",
      `/workshops/${encodeURIComponent(name)}/portal/scale-down`,
      { unclaimed, force: args.values.force ?? false },
    );
    if (json) out.write(jsonText(r));
    else {
      out.write(
        `removed ${r.removed.length} lab${r.removed.length === 1 ? "" : "s"}${r.removed.length ? `: ${r.removed.map(clean).join(", ")}` : ""}\n`,
      );
      if (r.releasedClaims.length)
        out.write(`claims released (--force): ${r.releasedClaims.map(clean).join(", ")}\n`);
      writeWaiting(r.waiting, out);
    }
    return 0;
  }
  const receipts = await import("./receipt.ts");
  if (!args.values.yes) {
    const before = await client.status(name);
    const live = before.hostList.filter((h) => h.state !== "torn_down").length;
    await receipts.confirmDown(
      name,
      `its ${live} host${live === 1 ? "" : "s"} and everything labfleet made for them go, and the portal closes (students lose their labs).`,
    );
  }
  const { run } = await client.teardown(name);
  if (!json) out.write(`down ${clean(name)}: run ${clean(run.id)}\n`);
  const s = await follow(client, name, run.id, undefined);
  const done = s.runs.find((r) => r.id === run.id);
  // The receipt of this teardown (FinishTeardown takes it): what was removed, what is left, the host-hours.
  const receipt = await receipts
    .fetchReceipt(client, name)
    .then((r) => (r.receipt.runId === run.id ? r.receipt : undefined))
    .catch(() => undefined);
  if (json) {
    const doc: string[] = [];
    const code = report(s, run.id, true, { ...out, write: (t) => doc.push(t) }, "torn_down");
    out.write(jsonText({ ...JSON.parse(doc.join("")), receipt: receipt ?? null }));
    return code;
  }
  const code = report(s, run.id, false, out, "torn_down");
  if (receipt) receipts.writeReceipt(receipt, out);
  else if (done?.state === "succeeded") out.write(`no receipt yet: labfleet receipt ${clean(name)}\n`);
  return code === 0 && receipt && receipt.left.length > 0 ? 1 : code;
}

/** Students in the portal's waiting room, where the instructor decides to add or remove labs. */
function writeWaiting(waiting: number | undefined, out: Output): void {
  if (waiting) out.write(`${waiting} student${waiting === 1 ? " is" : "s are"} waiting for a lab\n`);
}

interface ScaleAnswer {
  run: RunView;
  scale: { from: number; to: number; add: string[]; waiting: number };
}

/**
 * `labfleet scale NAME --count N`: grows the workshop to N hosts (a `scale` run provisions and deploys the new
 * ones), says what it does, and follows the run. Exit 0 when every new lab is ready.
 */
async function cmdScale(args: Args, out: Output): Promise<number> {
  const name = workshopName(args);
  const raw = args.values.count;
  if (raw === undefined) throw new CliError("scale needs --count N: the number of hosts to have", 2);
  const count = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || !Number.isInteger(count) || count < 1)
    throw new CliError(`--count takes a whole number of hosts, got ${raw}`, 2);
  const json = jsonOutput(args);
  const client = new ApiClient(resolveTarget());
  const { run, scale } = await client.call<ScaleAnswer>(
    "POST",
    `/workshops/${encodeURIComponent(name)}/scale`,
    { count },
  );
  if (!json) {
    const n = scale.add.length;
    out.write(
      `scale ${clean(name)}: adds ${n} lab${n === 1 ? "" : "s"} (${scale.from} → ${scale.to}): ${scale.add.map(clean).join(", ")} · run ${clean(run.id)}\n`,
    );
    writeWaiting(scale.waiting, out);
  }
  const s = await follow(client, name, run.id, json ? undefined : out);
  if (!json) return report(s, run.id, false, out, "ready");
  // One JSON document: what the scale added (`scale`) beside the run's status, as deploy prints it.
  const doc: string[] = [];
  const code = report(s, run.id, true, { ...out, write: (t) => doc.push(t) }, "ready");
  out.write(jsonText({ ...JSON.parse(doc.join("")), scale }));
  return code;
}

function parsePort(text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0 || n > 65535)
    throw new CliError(`--port must be a whole number from 0 to 65535, got ${text}`, 2);
  return n;
}

/** --host, --label and -j as the API's selection body. */
export function selectionBody(args: Args): {
  hosts?: string[];
  labels?: Record<string, string>;
  concurrency?: number;
} {
  const labels: Record<string, string> = {};
  for (const pair of args.values.label ?? []) {
    const i = pair.indexOf("=");
    if (i <= 0) throw new CliError(`--label expects key=value, got ${pair}`, 2);
    labels[pair.slice(0, i)] = pair.slice(i + 1);
  }
  const jobs = args.values.jobs;
  let concurrency: number | undefined;
  if (jobs !== undefined) {
    concurrency = Number(jobs);
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) {
      throw new CliError(`-j expects a whole number from 1 to 64, got ${jobs}`, 2);
    }
  }
  return {
    ...(args.values.host?.length ? { hosts: args.values.host } : {}),
    ...(Object.keys(labels).length ? { labels } : {}),
    ...(concurrency ? { concurrency } : {}),
  };
}

export async function main(argv: string[], out: Output = stdoutOutput()): Promise<number> {
  // In check mode 2 means "something would change" (terraform plan -detailed-exitcode): every error there,
  // usage errors included, exits 1.
  const checking = (argv.includes("--") ? argv.slice(0, argv.indexOf("--")) : argv).includes("--check");
  const usage = checking ? 1 : 2;
  try {
    const args = parse(argv);
    const command = args.positionals[0];
    if (args.values.version) {
      out.write(jsonOutput(args) ? `${JSON.stringify({ version: "0.1.0" })}\n` : "labfleet 0.1.0\n");
      return 0;
    }
    // Help and completion come from the command table in help.ts.
    if (args.values.help) return showHelp(args.positionals, jsonOutput(args), out, false);
    if (command === "help") return showHelp(args.positionals.slice(1), jsonOutput(args), out, true);
    if (!command) {
      out.write(HELP);
      return usage;
    }
    if (command === "completion") {
      const { runCompletion } = await import("./completion.ts");
      return runCompletion(args.positionals.slice(1), jsonOutput(args), out);
    }
    knownCommand(command); // an unknown one is a usage error (exit 2) naming the closest command
    // Enrolled hosts' controls: labfleet hosts drain|disable|enable|remove|rotate-secret NAME HOST...
    if (command === "hosts") {
      const agentCommands = await import("./agent-commands.ts");
      if (agentCommands.AGENT_HOST_COMMANDS.has(args.positionals[1] ?? ""))
        return await agentCommands.cmdAgentHosts(args, out);
    }
    switch (command) {
      case "validate":
        return await cmdValidate(args, out);
      case "up":
        return await cmdUp(args, out);
      case "provision":
        return await cmdProvision(args, out);
      case "status":
        return await cmdStatus(args, out);
      case "workshops":
        return await (await import("./list-commands.ts")).cmdWorkshops(args, out);
      case "events":
        return await (await import("./list-commands.ts")).cmdEvents(args, out);
      case "runs":
        return await (await import("./list-commands.ts")).cmdRuns(args, out);
      case "submit":
        return await (await import("./list-commands.ts")).cmdSubmit(args, out);
      case "down":
        return await cmdDown(args, out);
      case "receipt":
        return await (await import("./receipt.ts")).cmdReceipt(workshopName(args), jsonOutput(args), out);
      case "scale":
        return await cmdScale(args, out);
      case "hosts": {
        // Enrollment: join tokens and the hosts that wait for approval (cli/enroll-commands.ts).
        const enroll = await import("./enroll-commands.ts");
        const sub = args.positionals[1] ?? "";
        if (enroll.ENROLL_SUBCOMMANDS.has(sub)) return await enroll.run(sub, args, out);
        const fleetCommands = await import("./fleet-commands.ts");
        return await fleetCommands.run(command, args, out);
      }
      case "doctor":
      case "deploy":
      case "retry":
      case "diagnose":
      case "access":
      case "extend":
      case "open-access": {
        const fleetCommands = await import("./fleet-commands.ts");
        return await fleetCommands.run(command, args, out);
      }
      case "exec":
        return await (await import("./exec-command.ts")).cmdExec(args, out);
      case "rollout":
        return await (await import("./rollout-command.ts")).cmdRollout(args, out);
      case "login":
      case "logout":
      case "tokens": {
        const login = await import("./login.ts");
        return await login.run(command, args, out);
      }
      case "portal": {
        const portalCommands = await import("./portal-commands.ts");
        return await portalCommands.run(args, out);
      }
      case "dev": {
        const { cmdDev } = await import("./dev.ts");
        return await cmdDev(
          {
            ...(args.values.file ? { file: args.values.file } : {}),
            ...(args.values.port !== undefined ? { port: parsePort(args.values.port) } : {}),
            dataDir: args.values["data-dir"] ?? process.env.LABFLEET_DATA_DIR ?? ".labfleet",
          },
          out,
        );
      }
      default:
        throw new CliError(`unknown command ${command}\n\n${HELP}`, 2);
    }
  } catch (err) {
    if (err instanceof CliError) {
      process.stderr.write(`labfleet: ${block(err.message)}\n`);
      if (err.details.length) process.stderr.write(`${detailLines(err.details)}\n`);
      return checking && err.exitCode === 2 ? 1 : err.exitCode;
    }
    process.stderr.write(`labfleet: unexpected error: ${block((err as Error).stack ?? String(err))}\n`);
    return 1;
  }
}
