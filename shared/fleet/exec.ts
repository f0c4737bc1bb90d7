import { z } from "zod";
import type { Provider } from "../providers/types.ts";
import { type Actor, actorName, assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { timeLeft } from "../runtime/deadline.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, isVisibleError, VisibleError } from "../runtime/errors.ts";
import type { HostItem } from "../store/entities.ts";
import { shq, type TransportName } from "../transports/types.ts";
import { HostEntry, type Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { MIN_STEP_MS, withTransport } from "./hosts.ts";
import { selected } from "./ops.ts";
import { secretRedactor } from "./secrets.ts";

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
 * Where it runs: in the request that asks for it. Locally there is no time limit; on AWS the request's work
 * budget (web/limits.ts requestWorkMs: 25 s behind API Gateway) bounds it: each host's timeout is cut to the
 * time left, and hosts that cannot start in time are `skipped`.
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
const TRANSPORT_SLACK_MS = 5_000;
const MARKER = "@@labfleet-exec";
const MARKER_LINE = /\n@@labfleet-exec rc=(\d+) out=(\d+) err=(\d+) timedout=([01])\n?$/;

export const EXEC_STATUSES = ["ok", "failed", "timeout", "error", "skipped"] as const;
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
  /** `12 ok, 1 failed (exit 2): student-07; 1 timeout: student-03` */
  text: string;
}

export interface ExecReport {
  workshop: string;
  ok: boolean;
  startedAt: string;
  durationMs: number;
  /** The timeout each host was given, in seconds (less than asked when the request's time budget cut it). */
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
  if (count("skipped") > 0) parts.push({ text: `${count("skipped")} skipped`, listed: false });
  const text = parts.map((p, i) => (i === 0 ? "" : parts[i - 1]?.listed ? "; " : ", ") + p.text).join("");
  return {
    total: hosts.length,
    ok: count("ok"),
    failed: count("failed"),
    timeout: count("timeout"),
    error: count("error"),
    skipped: count("skipped"),
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
const noOutput = (
  host: string,
  status: "skipped" | "timeout" | "error",
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
const skippedResult = (host: string, reason: string) => noOutput(host, "skipped", reason);

/** The selected hosts: every known host that is not torn down (a static fleet before its first up: hosts[]). */
export async function execTargets(name: string, sel: { hosts?: string[]; labels?: Record<string, string> }) {
  return (await selected(name, sel)).hosts;
}

/** Runs the command on every selected host and answers one result per host, in the hosts' order. */
export async function execCommand(name: string, input: ExecInput): Promise<ExecReport> {
  return (await prepareExec(name, input))();
}

/**
 * Checks the input, the workshop and the selection (what can be refused: thrown here), and returns the run
 * itself, which never throws: a host that cannot be reached is a result of its own.
 */
export async function prepareExec(name: string, input: ExecInput): Promise<() => Promise<ExecReport>> {
  const actor = assertActor("instructor", "system");
  const o = ExecInput.parse(input);
  const sel = { ...(o.hosts ? { hosts: o.hosts } : {}), ...(o.labels ? { labels: o.labels } : {}) };
  const { spec, provider, hosts } = await selected(name, sel);
  if (hosts.length === 0) throw new VisibleError("input", "selection.empty", "no host matches the selection");
  const redact = await secretRedactor(spec);
  return () => run({ name, o, spec, provider, hosts, redact, actor });
}

async function run(ctx: {
  name: string;
  o: z.output<typeof ExecInput>;
  spec: Workshop;
  provider: Provider;
  hosts: HostItem[];
  redact: (text: string) => string;
  actor: Actor;
}): Promise<ExecReport> {
  const { name, o, spec, provider, hosts, redact, actor } = ctx;
  const { clock } = useDeps();
  const startedAt = isoNow(clock);
  const started = performance.now();
  const concurrency = Math.min(o.concurrency ?? EXEC_DEFAULT_CONCURRENCY, Math.max(1, hosts.length));
  const caps = outputCaps(provider.transport);
  const notes: string[] = [];
  let hostTimeout = o.timeoutSeconds;
  const budget = timeLeft();
  if (Number.isFinite(budget)) {
    const fits = Math.floor((budget - TRANSPORT_SLACK_MS) / 1000);
    if (fits < hostTimeout) {
      hostTimeout = Math.max(1, fits);
      notes.push(
        `this request has ${Math.round(budget / 1000)} s for its work: each host's timeout is ${hostTimeout} s, and hosts that cannot start in time are skipped`,
      );
    }
  }

  const results = new Array<ExecHostResult>(hosts.length);
  let failures = 0;
  let next = 0;
  let outputLeft = EXEC_TOTAL_OUTPUT_BYTES;
  let stopped: string | undefined;

  const one = async (h: HostItem): Promise<ExecHostResult> => {
    const left = timeLeft();
    const seconds = Math.min(hostTimeout, Math.floor((left - TRANSPORT_SLACK_MS) / 1000));
    if (left < MIN_STEP_MS + 1000 || seconds < 1) {
      return skippedResult(h.hostId, "not started: the request's time ran out");
    }
    const t0 = performance.now();
    try {
      const r = await withTransport(spec, provider, h, (t) =>
        t.exec(execScript(o.command, seconds, caps), {
          step: "exec",
          timeoutMs: seconds * 1000 + TRANSPORT_SLACK_MS,
        }),
      );
      const durationMs = Math.round(performance.now() - t0);
      const parsed = parseExecOutput(r.stdout, r.stderr);
      if (!parsed) {
        // The wrapper did not get to its end: the transport's own timeout, or the host could not run it.
        return noOutput(
          h.hostId,
          r.timedOut ? "timeout" : "error",
          r.timedOut
            ? `no answer within ${seconds} s`
            : r.exitCode === 97
              ? "the host could not make a temporary folder"
              : `the host did not run the command (exit ${r.exitCode})`,
          durationMs,
        );
      }
      const out = bound(redact(parsed.stdout), caps.stdout);
      const err = bound(redact(parsed.stderr), caps.stderr);
      const timedOut = parsed.timedOut || r.timedOut === true;
      return {
        host: h.hostId,
        status: timedOut ? "timeout" : parsed.exitCode === 0 ? "ok" : "failed",
        exitCode: timedOut ? null : parsed.exitCode,
        stdout: out.text,
        stderr: err.text,
        stdoutTruncated: parsed.outRest > 0 || out.cut,
        stderrTruncated: parsed.errRest > 0 || err.cut,
        stdoutBytes: Buffer.byteLength(parsed.stdout) + parsed.outRest,
        stderrBytes: Buffer.byteLength(parsed.stderr) + parsed.errRest,
        durationMs,
        ...(timedOut ? { reason: `killed on the host after ${seconds} s` } : {}),
      };
    } catch (e) {
      if (isVisibleError(e) && e.code === "host.out_of_time") {
        return skippedResult(h.hostId, "not started: the request's time ran out");
      }
      return {
        ...skippedResult(h.hostId, redact(errorMessage(e))),
        status: "error",
        durationMs: Math.round(performance.now() - t0),
      };
    }
  };

  /** Cuts a host's output to what is left of the answer's total. */
  const share = (r: ExecHostResult): ExecHostResult => {
    const cut = (text: string) => {
      const b = Buffer.from(text, "utf8");
      const keep = Math.min(b.length, outputLeft);
      outputLeft -= keep;
      return { text: b.subarray(0, keep).toString("utf8"), cut: keep < b.length };
    };
    const out = cut(r.stdout);
    const err = cut(r.stderr);
    return {
      ...r,
      stdout: out.text,
      stderr: err.text,
      stdoutTruncated: r.stdoutTruncated || out.cut,
      stderrTruncated: r.stderrTruncated || err.cut,
    };
  };

  const worker = async () => {
    while (next < hosts.length) {
      const i = next++;
      const h = hosts[i] as HostItem;
      if (stopped) {
        results[i] = skippedResult(h.hostId, stopped);
        continue;
      }
      const r = share(await one(h));
      results[i] = r;
      if (r.status === "failed" || r.status === "timeout" || r.status === "error") {
        failures++;
        if (o.maxErrors !== undefined && failures >= o.maxErrors && !stopped) {
          stopped = `not started: ${failures} host${failures === 1 ? "" : "s"} failed (max errors ${o.maxErrors})`;
        }
      }
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  if (outputLeft === 0)
    notes.push(`the answer holds at most ${EXEC_TOTAL_OUTPUT_BYTES} bytes of output in all`);

  const summary = summarize(results);
  const report: ExecReport = {
    workshop: name,
    ok: results.length > 0 && summary.ok === results.length,
    startedAt,
    durationMs: Math.round(performance.now() - started),
    timeoutSeconds: hostTimeout,
    concurrency,
    maxErrors: o.maxErrors ?? null,
    hosts: results,
    summary,
    notes,
  };
  await recordEvent({
    workshop: name,
    type: "exec",
    detail: {
      by: actorName(actor),
      hosts: results.length,
      summary: summary.text,
      ok: summary.ok,
      failed: summary.failed + summary.timeout + summary.error,
      skipped: summary.skipped,
      command: commandForEvent(o.command, redact),
    },
  });
  return report;
}

/** At most `max` bytes of text (the redaction may lengthen it), and whether it was cut. */
function bound(text: string, max: number): { text: string; cut: boolean } {
  const b = Buffer.from(text, "utf8");
  return b.length <= max ? { text, cut: false } : { text: b.subarray(0, max).toString("utf8"), cut: true };
}
