import { z } from "zod";
import { shq, type TransportName } from "../transports/types.ts";
import { HostEntry } from "../workshop/schema.ts";
import { selected } from "./ops.ts";

/**
 * `labfleet exec`: one shell command on every selected host, as SSM Run Command, Ansible ad-hoc and parallel-ssh
 * do. Hosts run `concurrency` at a time; after `maxErrors` failures no further host is started (those are
 * `skipped`). On the host the command runs with bash, without input, under `timeout` (its whole process group
 * is killed after `timeoutSeconds`, status `timeout`), and at most EXEC_OUTPUT_BYTES each of its stdout and
 * stderr come back (the rest is counted and dropped on the host; the result says it was truncated). The whole
 * answer holds at most EXEC_TOTAL_OUTPUT_BYTES of output. Output is redacted of the operator secrets and is
 * never logged or recorded; the `exec` event keeps who ran it, the hosts, the summary and the command's first
 * EXEC_EVENT_COMMAND_CHARS characters, redacted.
 *
 * Where it runs: as a job (shared/fleet/exec-jobs.ts), never inside a request: the `exec` workflow starts the
 * command detached on each host and polls the hosts until each has ended, so a command may run as long as its
 * timeout in both runtimes.
 */

/** Each of stdout and stderr kept per host (SSM hosts: what Run Command returns inline, below). */
export const EXEC_OUTPUT_BYTES = 64 * 1024;
/** Over SSM: GetCommandInvocation returns at most 24,000 characters of stdout and 8,000 of stderr. */
export const EXEC_SSM_STDOUT_BYTES = 20_000;
export const EXEC_SSM_STDERR_BYTES = 6_800;
/** All hosts' output together in one answer (a Lambda answers at most 6 MB). */
export const EXEC_TOTAL_OUTPUT_BYTES = 2 * 1024 * 1024;
export const EXEC_DEFAULT_CONCURRENCY = 16;
export const EXEC_MAX_CONCURRENCY = 64;
export const EXEC_DEFAULT_TIMEOUT_SECONDS = 60;
export const EXEC_MAX_TIMEOUT_SECONDS = 3600;
export const EXEC_COMMAND_MAX_CHARS = 16 * 1024;
export const EXEC_EVENT_COMMAND_CHARS = 80;
/** The transport waits this much past the host-side timeout (the kill's grace, the answer's way back). */
const _TRANSPORT_SLACK_MS = 5_000;
const MARKER = "@@labfleet-exec";
const MARKER_LINE = /\n@@labfleet-exec rc=(\d+) out=(\d+) err=(\d+) timedout=([01])\n?$/;

export const EXEC_STATUSES = ["ok", "failed", "timeout", "error", "skipped", "cancelled"] as const;
export type ExecStatus = (typeof EXEC_STATUSES)[number];

const HostIdText = HostEntry.shape.id;

export const ExecInput = z.strictObject({
  command: z
    .string()
    .max(EXEC_COMMAND_MAX_CHARS, { error: `expected at most ${EXEC_COMMAND_MAX_CHARS} characters` })
    .refine((s) => s.trim().length > 0, { error: "expected a command to run" })
    .meta({ description: "run with bash on each host, in the login user's home, without input" }),
  hosts: z
    .array(HostIdText)
    .max(256)
    .optional()
    .meta({ description: "only these hosts (ids); none: every host", example: ["student-01"] }),
  labels: z
    .record(z.string(), z.string())
    .optional()
    .meta({ description: "only the hosts with all these labels", example: { room: "a" } }),
  concurrency: z
    .number()
    .int()
    .min(1)
    .max(EXEC_MAX_CONCURRENCY)
    .optional()
    .meta({ description: `hosts run at once (default ${EXEC_DEFAULT_CONCURRENCY})` }),
  maxErrors: z
    .number()
    .int()
    .min(1)
    .max(10_000)
    .optional()
    .meta({ description: "after this many failures (failed, timeout, error) start no further host" }),
  timeoutSeconds: z
    .number()
    .int()
    .min(1)
    .max(EXEC_MAX_TIMEOUT_SECONDS)
    .default(EXEC_DEFAULT_TIMEOUT_SECONDS)
    .meta({ description: "per host: the command is killed on the host after this long (status timeout)" }),
});
export type ExecInput = z.input<typeof ExecInput>;

export interface ExecHostResult {
  host: string;
  status: ExecStatus;
  /** The command's exit code; null when it did not run to an end of its own (timeout, error, skipped). */
  exitCode: number | null;
  stdout: string;
  stderr: string;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** What the command wrote in all, of which `stdout`/`stderr` hold the start. */
  stdoutBytes: number;
  stderrBytes: number;
  durationMs: number;
  /** Why it did not run (error, skipped), or how it ended (timeout). */
  reason?: string;
}

export interface ExecSummary {
  total: number;
  ok: number;
  failed: number;
  timeout: number;
  error: number;
  skipped: number;
  cancelled: number;
  /** `12 ok, 1 failed (exit 2): student-07; 1 timeout: student-03` */
  text: string;
}

export interface ExecReport {
  workshop: string;
  ok: boolean;
  startedAt: string;
  durationMs: number;
  /** The timeout each host was given, in seconds. */
  timeoutSeconds: number;
  concurrency: number;
  maxErrors: number | null;
  hosts: ExecHostResult[];
  summary: ExecSummary;
  notes: string[];
}

/** The output caps of one host: what every transport returns whole. */
export function outputCaps(transport: TransportName): { stdout: number; stderr: number } {
  return transport === "ssm"
    ? { stdout: EXEC_SSM_STDOUT_BYTES, stderr: EXEC_SSM_STDERR_BYTES }
    : { stdout: EXEC_OUTPUT_BYTES, stderr: EXEC_OUTPUT_BYTES };
}

/**
 * The script each host runs (bash): the command under `timeout` (TERM, then KILL 2 s later, to its whole process
 * group), stdin from /dev/null, the first `caps` bytes of stdout and stderr passed on and the rest counted and
 * dropped on the host, then a marker line on stderr with the exit code, the full byte counts and whether the
 * time ran out.
 */
export function execScript(
  command: string,
  timeoutSeconds: number,
  caps: { stdout: number; stderr: number },
) {
  const s = Math.max(1, Math.floor(timeoutSeconds));
  return `t=$(mktemp -d "\${TMPDIR:-/tmp}/labfleet-exec.XXXXXXXX") || exit 97
trap 'rm -rf "$t"' EXIT
cap() { head -c "$1"; wc -c > "$2"; }
start=$(date +%s)
{ timeout -k 2 ${s} bash --noprofile --norc -c ${shq(command)} < /dev/null 2>&1 1>&3 3>&- 4>&- | cap ${caps.stderr} "$t/e" >&4 3>&- 4>&-; echo "\${PIPESTATUS[0]}" > "$t/rc"; } 3>&1 4>&2 | cap ${caps.stdout} "$t/o"
rc=$(cat "$t/rc" 2>/dev/null); rc=\${rc:-125}
timed=0
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then [ $(( $(date +%s) - start )) -ge ${Math.max(0, s - 1)} ] && timed=1; fi
printf '\\n${MARKER} rc=%d out=%d err=%d timedout=%d\\n' "$rc" "$(( $(cat "$t/o" 2>/dev/null || echo 0) ))" "$(( $(cat "$t/e" 2>/dev/null || echo 0) ))" "$timed" >&2
exit "$rc"
`;
}

/** What came back from execScript: the command's output without the marker, and what the marker says. */
export function parseExecOutput(
  stdout: string,
  stderr: string,
):
  | { exitCode: number; stdout: string; stderr: string; outRest: number; errRest: number; timedOut: boolean }
  | undefined {
  const m = MARKER_LINE.exec(stderr);
  if (!m) return undefined;
  return {
    exitCode: Number(m[1]),
    stdout,
    stderr: stderr.slice(0, m.index),
    outRest: Number(m[2]),
    errRest: Number(m[3]),
    timedOut: m[4] === "1",
  };
}

/** `12 ok, 1 failed (exit 2): student-07; 1 timeout: student-03; 2 skipped` */
export function summarize(hosts: ExecHostResult[]): ExecSummary {
  const count = (s: ExecStatus) => hosts.filter((h) => h.status === s).length;
  const names = (list: ExecHostResult[]) => {
    const ids = list.map((h) => h.host);
    return ids.length > 10 ? `${ids.slice(0, 10).join(", ")} and ${ids.length - 10} more` : ids.join(", ");
  };
  // A part that lists hosts ends with them, so the next part follows a semicolon, not a comma.
  const parts: { text: string; listed: boolean }[] = [{ text: `${count("ok")} ok`, listed: false }];
  const failed = hosts.filter((h) => h.status === "failed");
  if (failed.length > 0) {
    const codes = [...new Set(failed.map((h) => h.exitCode ?? 0))].sort((a, b) => a - b);
    const byCode = codes.map((code) => ({ code, list: failed.filter((h) => (h.exitCode ?? 0) === code) }));
    parts.push({
      text:
        byCode.length === 1
          ? `${failed.length} failed (exit ${codes[0]}): ${names(failed)}`
          : `${failed.length} failed (${byCode.map((g) => `exit ${g.code}: ${names(g.list)}`).join("; ")})`,
      listed: byCode.length === 1,
    });
  }
  for (const s of ["timeout", "error"] as const) {
    const list = hosts.filter((h) => h.status === s);
    if (list.length > 0) parts.push({ text: `${list.length} ${s}: ${names(list)}`, listed: true });
  }
  if (count("cancelled") > 0) parts.push({ text: `${count("cancelled")} cancelled`, listed: false });
  if (count("skipped") > 0) parts.push({ text: `${count("skipped")} skipped`, listed: false });
  const text = parts.map((p, i) => (i === 0 ? "" : parts[i - 1]?.listed ? "; " : ", ") + p.text).join("");
  return {
    total: hosts.length,
    ok: count("ok"),
    failed: count("failed"),
    timeout: count("timeout"),
    error: count("error"),
    skipped: count("skipped"),
    cancelled: count("cancelled"),
    text,
  };
}

/** Values after key-like names (`TOKEN=...`, `--password x`, `Authorization: Bearer ...`) hidden. */
export function redactCommandText(text: string): string {
  return text
    .replace(/(bearer\s+)\S+/gi, "$1[redacted]")
    .replace(
      /((?:[\w-]*(?:token|secret|passw(?:or)?d|pass|pwd|key|pin|auth|credential)[\w-]*)(?:\s*[=:]\s*|\s+))("[^"]*"|'[^']*'|\S+)/gi,
      "$1[redacted]",
    );
}

/** The command as the `exec` event keeps it: operator secrets and key-like values redacted, then cut. */
export function commandForEvent(command: string, redact: (text: string) => string): string {
  const oneLine = redactCommandText(redact(command)).replace(/\s+/g, " ").trim();
  return oneLine.length > EXEC_EVENT_COMMAND_CHARS
    ? `${oneLine.slice(0, EXEC_EVENT_COMMAND_CHARS - 1)}…`
    : oneLine;
}

/** A host whose command did not run to an end of its own: no exit code, no output. */
export const noOutput = (
  host: string,
  status: "skipped" | "timeout" | "error" | "cancelled",
  reason: string,
  durationMs = 0,
): ExecHostResult => ({
  host,
  status,
  exitCode: null,
  stdout: "",
  stderr: "",
  stdoutTruncated: false,
  stderrTruncated: false,
  stdoutBytes: 0,
  stderrBytes: 0,
  durationMs,
  reason,
});

/** The selected hosts: every known host that is not torn down (a static fleet before its first up: hosts[]). */
export async function execTargets(name: string, sel: { hosts?: string[]; labels?: Record<string, string> }) {
  return (await selected(name, sel)).hosts;
}

/**
 * One host's result from what execScript printed (its marker parsed): output redacted and bounded to the
 * transport's caps, the status from the exit code and whether the time ran out.
 */
export function resultOf(
  host: string,
  parsed: NonNullable<ReturnType<typeof parseExecOutput>>,
  o: {
    seconds: number;
    caps: { stdout: number; stderr: number };
    redact: (t: string) => string;
    durationMs: number;
  },
): ExecHostResult {
  const out = bound(o.redact(parsed.stdout), o.caps.stdout);
  const err = bound(o.redact(parsed.stderr), o.caps.stderr);
  const timedOut = parsed.timedOut;
  return {
    host,
    status: timedOut ? "timeout" : parsed.exitCode === 0 ? "ok" : "failed",
    exitCode: timedOut ? null : parsed.exitCode,
    stdout: out.text,
    stderr: err.text,
    stdoutTruncated: parsed.outRest > 0 || out.cut,
    stderrTruncated: parsed.errRest > 0 || err.cut,
    stdoutBytes: Buffer.byteLength(parsed.stdout) + parsed.outRest,
    stderrBytes: Buffer.byteLength(parsed.stderr) + parsed.errRest,
    durationMs: o.durationMs,
    ...(timedOut ? { reason: `killed on the host after ${o.seconds} s` } : {}),
  };
}

/** Cuts the hosts' output, in their order, to EXEC_TOTAL_OUTPUT_BYTES in all; true when something was cut. */
export function shareOutput(hosts: ExecHostResult[]): { hosts: ExecHostResult[]; cut: boolean } {
  let left = EXEC_TOTAL_OUTPUT_BYTES;
  let any = false;
  const cut = (text: string) => {
    const b = Buffer.from(text, "utf8");
    const keep = Math.min(b.length, left);
    left -= keep;
    if (keep < b.length) any = true;
    return { text: keep < b.length ? b.subarray(0, keep).toString("utf8") : text, cut: keep < b.length };
  };
  const shared = hosts.map((r) => {
    const out = cut(r.stdout);
    const err = cut(r.stderr);
    return {
      ...r,
      stdout: out.text,
      stderr: err.text,
      stdoutTruncated: r.stdoutTruncated || out.cut,
      stderrTruncated: r.stderrTruncated || err.cut,
    };
  });
  return { hosts: shared, cut: any };
}

/** At most `max` bytes of text (the redaction may lengthen it), and whether it was cut. */
function bound(text: string, max: number): { text: string; cut: boolean } {
  const b = Buffer.from(text, "utf8");
  return b.length <= max ? { text, cut: false } : { text: b.subarray(0, max).toString("utf8"), cut: true };
}
