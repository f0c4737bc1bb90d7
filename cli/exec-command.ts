import type { ExecHostResult } from "../shared/fleet/exec.ts";
import type { ExecJob } from "../shared/fleet/exec-jobs.ts";
import { ApiClient, CliError, resolveTarget } from "./client.ts";
import { type Args, checkedFile, jsonOutput, selectionBody, workshopName } from "./main.ts";
import { clean, jsonText, type Output, Painted } from "./render.ts";

/**
 * `labfleet exec (-f FILE | NAME) [SELECT] -- CMD`: one command on every selected host, as a job through the API
 * (the same in both runtimes): starts it, then follows it, printing each host's lines as its result arrives
 * (`student-01 | ` for stdout, `student-01 ! ` for stderr), marking cut output and naming each host that did
 * not succeed, and ends with the summary; `--output json` prints the job's final answer. Ctrl-C cancels the job
 * (the commands still running are ended on their hosts) and says how to look at it. Exit 0 only when every
 * selected host exited 0.
 */
export async function cmdExec(args: Args, out: Output): Promise<number> {
  const command = (args.rest ?? []).join(" ");
  if (!command.trim()) {
    throw new CliError("give the command after --: labfleet exec NAME [--host ID] -- CMD", 2);
  }
  const client = new ApiClient(resolveTarget());
  let name: string;
  if (args.values.file) {
    const f = checkedFile(args.values.file);
    await client.submit(f.yaml, f.baseDir);
    name = f.name;
  } else name = workshopName(args);
  const base = `/workshops/${encodeURIComponent(name)}/exec`;
  let job = await client.call<ExecJob>("POST", base, {
    ...selectionBody(args),
    command,
    ...number(args.values["max-errors"], "--max-errors", 1, 10_000, "maxErrors"),
    ...number(args.values.timeout, "--timeout", 1, 3600, "timeoutSeconds"),
  });
  const json = jsonOutput(args);
  const width = Math.max(...job.selected.map((h) => clean(h).length), 1);
  const shown = new Set<string>();
  const show = (j: ExecJob) => {
    if (json) return;
    for (const h of j.hosts) {
      if (shown.has(h.host)) continue;
      shown.add(h.host);
      const lines = hostLines(h, width, out);
      if (lines.length) out.write(`${lines.join("\n")}\n`);
    }
  };
  let interrupted = false;
  const onInt = () => {
    interrupted = true;
  };
  process.once("SIGINT", onInt);
  try {
    let wait = 250;
    show(job);
    while (!ended(job.state)) {
      if (interrupted) {
        job = await client.call<ExecJob>("POST", `${base}/${job.jobId}/cancel`, {});
        out.write(
          `cancelling ${job.jobId}: the commands still running are ended on their hosts. The job is kept for a day: GET /api/workshops/${name}/exec/${job.jobId}; its end is in labfleet events ${name}\n`,
        );
        interrupted = false;
      }
      await new Promise((r) => setTimeout(r, wait));
      wait = Math.min(wait * 2, 2000);
      job = await client.call<ExecJob>("GET", `${base}/${job.jobId}`);
      show(job);
    }
  } finally {
    process.removeListener("SIGINT", onInt);
  }
  if (json) out.write(jsonText(job));
  else writeEnd(job, out);
  return job.ok ? 0 : 1;
}

const ended = (s: ExecJob["state"]) => s === "succeeded" || s === "failed" || s === "cancelled";

function number(text: string | undefined, flag: string, min: number, max: number, key: string) {
  if (text === undefined) return {};
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < min || n > max) {
    throw new CliError(`${flag} expects a whole number from ${min} to ${max}, got ${text}`, 2);
  }
  return { [key]: n };
}

const KiB = 1024;
const size = (bytes: number) =>
  bytes >= 1024 * KiB ? `${(bytes / 1024 / KiB).toFixed(1)} MiB` : `${Math.ceil(bytes / KiB)} KiB`;

const COLORS: Record<string, string> = {
  ok: "32",
  failed: "31",
  timeout: "33",
  error: "31",
  skipped: "90",
  cancelled: "33",
};

/** One host's output as prefixed lines, then what became of it when it did not succeed. */
function hostLines(h: ExecHostResult, width: number, out: Output): string[] {
  const id = clean(h.host).padEnd(width);
  const lines: string[] = [];
  const add = (text: string, mark: string) => {
    if (text === "") return;
    const body = text.endsWith("\n") ? text.slice(0, -1) : text;
    for (const line of body.split("\n")) lines.push(`${id} ${mark} ${clean(line)}`.trimEnd());
  };
  add(h.stdout, "|");
  if (h.stdoutTruncated)
    lines.push(
      `${id} | [stdout truncated: ${size(Buffer.byteLength(h.stdout))} of ${size(h.stdoutBytes)} shown]`,
    );
  add(h.stderr, "!");
  if (h.stderrTruncated)
    lines.push(
      `${id} ! [stderr truncated: ${size(Buffer.byteLength(h.stderr))} of ${size(h.stderrBytes)} shown]`,
    );
  if (h.status !== "ok") {
    const what =
      h.status === "failed"
        ? `failed (exit ${h.exitCode})`
        : `${h.status}${h.reason ? `: ${clean(h.reason)}` : ""}`;
    lines.push(`${id} # ${new Painted(what, out.color ? COLORS[h.status] : undefined)}`);
  }
  return lines;
}

/** What follows the hosts' lines: the notes, the job's own error, and the summary. */
function writeEnd(r: ExecJob, out: Output): void {
  for (const note of r.notes) out.write(`note: ${clean(note)}\n`);
  if (r.error) out.write(`error: ${clean(r.error)}\n`);
  const text = r.state === "cancelled" ? `cancelled: ${r.summary.text}` : r.summary.text;
  out.write(`${new Painted(clean(text), out.color ? (r.ok ? "32" : "31") : undefined)}\n`);
}

/** A whole job: every host's lines, then the end. */
export function writeExec(r: ExecJob, out: Output): void {
  const width = Math.max(...r.hosts.map((h) => clean(h.host).length), 1);
  for (const h of r.hosts) {
    const lines = hostLines(h, width, out);
    if (lines.length) out.write(`${lines.join("\n")}\n`);
  }
  writeEnd(r, out);
}
