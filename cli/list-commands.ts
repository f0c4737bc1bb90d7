import { eventSentence } from "../shared/fleet/event-sentences.ts";
import type { EventView } from "../shared/fleet/events.ts";
import type { WorkshopSummary } from "../shared/fleet/workshops.ts";
import { ApiClient, CliError, type RunView, resolveTarget } from "./client.ts";
import { type Args, checkedFile, jsonOutput, workshopName, writeCountKept } from "./main.ts";
import {
  block,
  clean,
  clock,
  duration,
  jsonText,
  type Output,
  paint,
  timeLeftText,
  when,
  writeTable,
} from "./render.ts";

/** `labfleet workshops`: every workshop the control plane knows, one line each. */
export async function cmdWorkshops(args: Args, out: Output): Promise<number> {
  const client = new ApiClient(resolveTarget());
  const { workshops } = await client.call<{ workshops: WorkshopSummary[] }>("GET", "/workshops");
  if (jsonOutput(args)) {
    out.write(jsonText({ workshops }));
    return 0;
  }
  if (workshops.length === 0) {
    out.write("no workshops yet: labfleet up -f workshop.yaml\n");
    return 0;
  }
  writeTable(
    [
      ["workshop", "state", "provider", "ready", "failed", "time left"],
      ...workshops
        .slice()
        .sort((a, b) => a.name.localeCompare(b.name))
        .map((w) => [
          w.name,
          w.state,
          w.provider,
          `${w.hosts.ready}/${w.hosts.total}`,
          String(w.hosts.failed),
          w.expiry ? timeLeftText(w.expiry) : "",
        ]),
    ],
    out,
  );
  return 0;
}

/** The events one request asks for: the API's most. */
const EVENTS_PAGE = 500;

/**
 * `labfleet events NAME [--after ID]`: what happened, oldest first, in the console's activity sentences (who
 * did it, to whose lab); `--output json` has the records with their detail.
 */
export async function cmdEvents(args: Args, out: Output): Promise<number> {
  const name = workshopName(args);
  const client = new ApiClient(resolveTarget());
  const after = args.values.after;
  // The API answers a page at a time (at most EVENTS_PAGE events): follow `last` until a page is not full.
  const r: { events: EventView[]; last: string | null } = { events: [], last: after ?? null };
  for (;;) {
    const query = new URLSearchParams({ limit: String(EVENTS_PAGE) });
    if (r.last) query.set("after", r.last);
    const page = await client.call<{ events: EventView[]; last: string | null }>(
      "GET",
      `/workshops/${encodeURIComponent(name)}/events?${query}`,
    );
    r.events.push(...page.events);
    r.last = page.last;
    if (page.events.length < EVENTS_PAGE) break;
  }
  if (jsonOutput(args)) {
    out.write(jsonText(r));
    return 0;
  }
  if (r.events.length === 0) {
    out.write(`${clean(name)}: no events${after ? ` after ${clean(after)}` : ""}\n`);
    return 0;
  }
  writeTable(
    [
      ["at", "event", "id", "what happened"],
      ...r.events.map((e) => [clock(e.at, true), e.type, e.id, eventSentence(e, (iso) => when(iso))]),
    ],
    out,
  );
  return 0;
}

const RUNS_USAGE = "usage: labfleet runs (-f workshop.yaml | NAME) [RUN_ID]";

/**
 * `labfleet runs NAME [RUN_ID]`: the workshop's runs, newest first (from GET /workshops/:name), or one run with
 * its result on each host (GET /workshops/:name/runs/:runId). Reading a failed run is not a failure: exit 0.
 */
export async function cmdRuns(args: Args, out: Output): Promise<number> {
  // Without -f: runs NAME [RUN_ID]; with -f the name comes from the file: runs -f FILE [RUN_ID].
  const rest = args.positionals.slice(args.values.file ? 1 : 2);
  if (rest.length > 1) {
    throw new CliError(
      `too many arguments: ${rest.slice(1).join(" ")} (one RUN_ID at most)\n${RUNS_USAGE}`,
      2,
    );
  }
  if (!args.values.file && !args.positionals[1]) throw new CliError(`name the workshop\n${RUNS_USAGE}`, 2);
  const name = workshopName(args);
  const runId = rest[0];
  if (runId === "") throw new CliError(`RUN_ID is empty\n${RUNS_USAGE}`, 2);
  const json = jsonOutput(args);
  const client = new ApiClient(resolveTarget());
  if (runId === undefined) {
    const { runs } = await client.status(name);
    if (json) out.write(jsonText({ workshop: name, runs }));
    else if (runs.length === 0) out.write(`${clean(name)}: no runs yet (labfleet up starts one)\n`);
    else
      writeTable(
        [
          ["id", "kind", "state", "started", "duration", "transitions"],
          ...runs.map((r) => [
            r.id,
            r.kind,
            paint(out, r.state),
            clock(r.startedAt),
            r.durationSeconds === undefined ? "-" : duration(r.durationSeconds),
            String(r.transitions),
          ]),
        ],
        out,
      );
    return 0;
  }
  const { run } = await client.call<{ run: RunView }>(
    "GET",
    `/workshops/${encodeURIComponent(name)}/runs/${encodeURIComponent(runId)}`,
  );
  if (json) {
    out.write(jsonText({ workshop: name, run }));
    return 0;
  }
  writeRun(name, run, out);
  return 0;
}

function writeRun(name: string, run: RunView, out: Output): void {
  const [errorLine = "", ...errorMore] = (run.error ?? "").split("\n");
  writeTable(
    [
      ["run", run.id],
      ["workshop", name],
      ["kind", run.kind],
      ["state", paint(out, run.state)],
      ["started", when(run.startedAt)],
      ...(run.endedAt ? [["ended", when(run.endedAt)]] : []),
      ...(run.durationSeconds !== undefined ? [["duration", duration(run.durationSeconds)]] : []),
      ["transitions", String(run.transitions)],
      ...(run.selection?.length ? [["selected", run.selection.join(", ")]] : []),
      ...(run.error ? [["error", errorLine]] : []),
    ].map(([k, v]) => [`${k}:`, v ?? ""]),
    out,
  );
  if (errorMore.length) out.write(`${indent(block(errorMore.join("\n")))}\n`);
  const hosts = Object.entries(run.hosts ?? {}).sort(([a], [b]) => a.localeCompare(b));
  if (hosts.length === 0) {
    out.write(
      run.state === "running"
        ? "\nno per-host results yet: the run is still running (labfleet status shows each host's phase)\n"
        : "\nno per-host results were recorded for this run\n",
    );
    return;
  }
  out.write("\n");
  writeTable(
    [
      ["host", "result", "error or detail"],
      ...hosts.map(([id, h]) => [id, paint(out, h.state), (h.error ?? h.detail ?? "").split("\n")[0] ?? ""]),
    ],
    out,
  );
  // An error of several lines (a log tail) is shown in full below the table.
  for (const [id, h] of hosts) {
    if (h.error?.includes("\n")) out.write(`\n${clean(id)}:\n${indent(block(h.error.trimEnd()))}\n`);
  }
}

function indent(text: string): string {
  return text
    .split("\n")
    .map((l) => (l ? `  ${l}` : l))
    .join("\n");
}

/** `labfleet submit -f FILE`: validate, then store it (created or updated). Nothing is provisioned or run. */
export async function cmdSubmit(args: Args, out: Output): Promise<number> {
  const file = args.values.file;
  if (!file) throw new CliError("submit needs -f workshop.yaml", 2);
  if (args.positionals.length > 1) {
    throw new CliError(
      `submit takes no arguments besides -f workshop.yaml, got ${args.positionals.slice(1).join(" ")}`,
      2,
    );
  }
  const json = jsonOutput(args);
  const { yaml, baseDir } = checkedFile(file); // exit 1 with every error: an invalid file is never sent
  const r = await new ApiClient(resolveTarget()).submit(yaml, baseDir);
  if (json)
    out.write(
      jsonText({ name: r.name, created: r.created, ...(r.countKept ? { countKept: r.countKept } : {}) }),
    );
  else {
    out.write(
      `${clean(r.name)}: ${r.created ? "created" : "updated"} from ${clean(file)}; nothing was started (labfleet up -f ${clean(file)} runs it)\n`,
    );
    writeCountKept(r.name, file, r.countKept, out);
  }
  return 0;
}
