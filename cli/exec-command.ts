import type { ExecHostResult, ExecReport } from "../shared/fleet/exec.ts";
import { ApiClient, CliError, resolveTarget } from "./client.ts";
import { type Args, checkedFile, jsonOutput, selectionBody, workshopName } from "./main.ts";
import { clean, jsonText, type Output, Painted } from "./render.ts";

/**
 * `labfleet exec (-f FILE | NAME) [SELECT] -- CMD`: one command on every selected host, through the API. Text
 * output prefixes each line with its host (`student-01 | ` for stdout, `student-01 ! ` for stderr), marks cut
 * output, names each host that did not succeed and ends with the summary; `--output json` prints the API's
 * report. Exit 0 only when every selected host exited 0.
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
  const r = await client.call<ExecReport>("POST", `/workshops/${encodeURIComponent(name)}/exec`, {
    ...selectionBody(args),
    command,
    ...number(args.values["max-errors"], "--max-errors", 1, 10_000, "maxErrors"),
    ...number(args.values.timeout, "--timeout", 1, 3600, "timeoutSeconds"),
  });
  if (jsonOutput(args)) out.write(jsonText(r));
  else writeExec(r, out);
  return r.ok ? 0 : 1;
}

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

const COLORS: Record<string, string> = { ok: "32", failed: "31", timeout: "33", error: "31", skipped: "90" };

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

export function writeExec(r: ExecReport, out: Output): void {
  const width = Math.max(...r.hosts.map((h) => clean(h.host).length), 1);
  for (const h of r.hosts) {
    const lines = hostLines(h, width, out);
    if (lines.length) out.write(`${lines.join("\n")}\n`);
  }
  for (const note of r.notes) out.write(`note: ${clean(note)}\n`);
  out.write(`${new Painted(clean(r.summary.text), out.color ? (r.ok ? "32" : "31") : undefined)}\n`);
}
