import { spawn } from "node:child_process";
import { lstat, readdir } from "node:fs/promises";
import { join } from "node:path";
import { SHELL_SIGNER } from "../agent/signing.ts";
import { localLabDir } from "../providers/local.ts";
import { LocalTransport } from "../transports/local.ts";
import { type ExecResult, shq, type Transport, type TransportName } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";

/**
 * The lab contract, host side. Every host keeps its lab's records under `~/.labfleet/<workshop>/`:
 *   wrapper.sh  setup.sh  pid  heartbeat  rc  log  status.jsonl ($LABFLEET_STATUS)  access.json ($LABFLEET_ACCESS)
 *   started  run (the id of the run that started this setup)
 * The wrapper runs `lab.setup` detached (setsid), so it outlives the connection that started it and the
 * control plane that polls it.
 */

export const HEALTH_GRACE_SECONDS = 300;
/** The largest `$LABFLEET_ACCESS` file labfleet reads. */
export const ACCESS_MAX_BYTES = 64 * 1024;
const HEALTH_TIMEOUT_MS = 60_000;
const STEP_TIMEOUT_MS = 10 * 60_000;

export class LabStepError extends Error {
  override name = "LabStepError";
}

export function stateDir(workshop: string): string {
  return `"$HOME"/.labfleet/${shq(workshop)}`;
}

/**
 * `lab.dir` as the host's shell names it. On a local host it is resolved here, and refused unless it stays
 * inside the host's own folder, links followed (shared/providers/local.ts).
 */
export function labDir(spec: Workshop, t: Transport): string {
  if (t instanceof LocalTransport) {
    try {
      return shq(localLabDir(t.home, spec.lab.dir));
    } catch (err) {
      throw new LabStepError((err as Error).message);
    }
  }
  return spec.lab.dir.startsWith("/") ? shq(spec.lab.dir) : `"$HOME"/${shq(spec.lab.dir)}`;
}

/**
 * What one probe may print, by construction: a header, the status records (at most STATUS_HEAD_BYTES from the
 * start of status.jsonl and STATUS_TAIL_BYTES from its end, lines longer than STATUS_LINE_MAX left out), at most
 * LOG_TAIL_LINES lines of the log cut to LOG_LINE_MAX bytes each, and an end line that repeats the verdict. That
 * is under 18 KB whatever the lab writes: under what every transport returns whole (SSM returns at most 24,000
 * characters of stdout, and labfleet's SSM wrapper keeps its last 20,000 bytes).
 */
export const PROBE_LIMITS = {
  statusHeadBytes: 2_000,
  statusTailBytes: 8_000,
  statusLineMax: 400,
  logTailLines: 20,
  logLineMax: 300,
} as const;

/** The marker of the probe's last line; a probe without it was cut off on its way back. */
const PROBE_END = "@@end";

/**
 * Pushed progress (shared/agent/progress.ts), when deploy left `push.env` (the API's URL, the workshop, the host's
 * id and its signing secret; 0600) in the state folder: the wrapper posts a signed `POST /agent/v1/progress` with
 * what the poll's probe would read (base64) on each change of status.jsonl (looked at each second), on setup's
 * exit, and after setup exited 0 with `lab.health`'s result (`health.sh`, run here until it passes, every 2 s, for
 * at most HEALTH_GRACE_SECONDS; a lab without one passes) and the access file. Best effort: each post has 2 s to connect and 5 s in all,
 * and its failure is ignored (the control plane's poll reads the same records). The secret is read from the file
 * by each post's own subshell: it is in no environment setup or health sees, and on no command line.
 */
const PUSH_FUNCTIONS = `push=0
if [ -f "$d/push.env" ] && command -v curl > /dev/null && command -v openssl > /dev/null; then push=1; fi
${SHELL_SIGNER}
labfleet_probe() { ( ${probeCommands('"$d"').replace(/\n/g, "\n    ")} ) }
labfleet_push() {
  [ "$push" = 1 ] || return 0
  ( b="$d/push.$BASHPID.json"
    trap 'rm -f "$b"' EXIT
    . "$d/push.env" || exit 0
    { printf '{"event":"%s","probe":"%s"' "$1" "$(labfleet_probe | base64 -w0)"
      if [ "$2" = 0 ]; then printf ',"health":{"exitCode":0}'
      elif [ -n "$2" ]; then printf ',"health":{"exitCode":%d,"output":"%s"}' "$2" "$(tail -c 2000 "$d/health.out" 2>/dev/null | base64 -w0)"; fi
      if [ "$2" = 0 ] && [ -f "$d/access.json" ]; then printf ',"access":"%s"' "$(head -c ${ACCESS_MAX_BYTES + 1} "$d/access.json" | base64 -w0)"; fi
      printf '}'; } > "$b"
    labfleet_signed_curl POST /agent/v1/progress "$b" --connect-timeout 2 --max-time 5 -o /dev/null
  ) > /dev/null 2>&1 < /dev/null || :
}`;

/**
 * The watcher of status.jsonl (ends with the wrapper, as the heartbeat does): once a second it pushes when the file
 * was written after its mark (push.mark, rewritten before each push, so the push's probe reads every line written
 * before it), starting from no file (the start command removed both), so a setup that has written nothing yet
 * sends nothing. `test -nt` compares the two files' times in bash itself: a lab that installs for an hour starts no
 * process for it. (A `$(stat ...)` a second cost about 2.5 ms of CPU each time: on 500 sandbox hosts, more than one
 * of a 2-core machine's cores, for the whole install.)
 */
const PUSH_WATCH = `if [ "$push" = 1 ]; then
  ( exec 9<> <(:)
    while [ ! -f "$d/rc" ]; do
      if [ "$d/status.jsonl" -nt "$d/push.mark" ]; then : > "$d/push.mark"; labfleet_push phase; fi
      read -r -t 1 -u 9 || :
      read -r st < "/proc/$BASHPID/stat" || exit 0
      st=\${st##*) }; st=\${st#* }
      [ "\${st%% *}" = "$$" ] || exit 0
    done ) &
  pw=$!
fi`;

/**
 * After the exit code is recorded. A failed setup pushes its exit. A setup that exited 0 runs health until it passes
 * (while this is still the host's setup) and pushes its result; when the first try does not pass, the exit is pushed
 * too (in the background), so the lab shows as checking its health meanwhile. A lab whose health passes at once
 * sends one push, not two: a fleet of instant labs finishing together is a burst of pushes the hosts sign and the
 * API judges.
 */
const PUSH_AFTER_EXIT = `if [ "$push" = 1 ]; then
  kill "$pw" 2>/dev/null
  if [ "$rc" = 0 ] && [ -f "$d/health.sh" ]; then
    end=$(( $(date +%s) + ${HEALTH_GRACE_SECONDS} )); limit=; told=
    if command -v timeout > /dev/null; then limit="timeout ${HEALTH_TIMEOUT_MS / 1000}"; fi
    while { read -r p < "$d/pid"; } 2>/dev/null && [ "$p" = "$$" ]; do
      ( cd "$labdir" && LABFLEET_STATUS="$d/status.jsonl" LABFLEET_ACCESS="$d/access.json" \
          LABFLEET_SECRETS="$d/secrets.env" $limit bash "$d/health.sh" ) > "$d/health.out" 2>&1 < /dev/null
      h=$?
      [ "$h" = 0 ] && { labfleet_push health 0; break; }
      [ -n "$told" ] || { told=1; labfleet_push exit & }
      [ "$(date +%s)" -lt "$end" ] || { labfleet_push health "$h"; break; }
      sleep 2
    done
    rm -f "$d/health.out"
  elif [ "$rc" = 0 ]; then
    labfleet_push health 0
  else
    labfleet_push exit
  fi
  wait
fi
`;

export const WRAPPER = `#!/usr/bin/env bash
# labfleet lab wrapper: runs setup.sh detached, records pid, heartbeat, exit code and log.
d="$1"; labdir="$2"
export LABFLEET_WORKSHOP="$3" LABFLEET_HOST_ID="$4"
echo $$ > "$d/pid"
${PUSH_FUNCTIONS}
# Heartbeat without a child process (the time from printf, the wait from read -t on a pipe nobody writes): a
# machine running hundreds of sandbox hosts forks nothing for them while their labs run. It ends by itself when
# the wrapper is gone, even killed with SIGKILL (its parent is then another process), and when the folder is gone.
# /proc/PID/stat is "pid (comm) state ppid pgrp ...": the fields after comm's ")" give the parent.
( exec 9<> <(:)
  while printf '%(%s)T\\n' -1 2>/dev/null > "$d/heartbeat"; do
    read -r -t 5 -u 9 || :
    read -r st < "/proc/$BASHPID/stat" || exit 0
    st=\${st##*) }; st=\${st#* }
    [ "\${st%% *}" = "$$" ] || exit 0
  done ) &
hb=$!
${PUSH_WATCH}
if cd "$labdir"; then
  LABFLEET_STATUS="$d/status.jsonl" LABFLEET_ACCESS="$d/access.json" LABFLEET_SECRETS="$d/secrets.env" \
    bash "$d/setup.sh" >> "$d/log" 2>&1 < /dev/null
  rc=$?
else
  echo "labfleet: lab folder $labdir is missing" >> "$d/log"
  rc=127
fi
kill "$hb" 2>/dev/null
printf '%s\\n%(%s)T\\n' "$rc" -1 > "$d/rc.tmp" && mv "$d/rc.tmp" "$d/rc"
${PUSH_AFTER_EXIT}`;

/** Reads everything the poll needs in one command; sections are separated by marker lines. */
function probeScript(workshop: string, recordsOnly = false): string {
  return probeCommands(stateDir(workshop), recordsOnly);
}

/**
 * The probe's commands for the state folder `d` (a shell word): the poll's probe, and the wrapper's pushes. Every
 * host of a fleet runs it on each poll and each push, so it reads the small records with bash builtins (`read`,
 * `printf %()T`) and starts a process only for what bash cannot do: the end of the log and of a status file larger
 * than its two bounds together (`tail`: bash cannot seek), and the rc file's age where its second line (the time
 * the wrapper wrote it) is missing (`stat`: a wrapper of an older labfleet). A status file within the bounds is read
 * and filtered by bash (`read -N`, `mapfile`), and lines are measured and cut in bytes (`LC_ALL=C`). `recordsOnly`
 * (what a deploy decides on) reads the records alone, with bash alone: no rc age, no status records, no log.
 */
function probeCommands(d: string, recordsOnly = false): string {
  const L = PROBE_LIMITS;
  const bound = L.statusHeadBytes + L.statusTailBytes;
  const records = `d=${d}
pid= rc= rc_at= rc_age= started= run= alive=0
{ read -r -n 32 pid < "$d/pid"; } 2>/dev/null; pid=\${pid//[!0-9]/}
if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ]; then
  while IFS= read -r -d '' a; do [[ $a == *wrapper.sh* ]] && { alive=1; break; }; done < "/proc/$pid/cmdline" 2>/dev/null
fi
{ { read -r -n 16 rc; read -r -n 16 rc_at; } < "$d/rc"; } 2>/dev/null; rc=\${rc//[!0-9-]/}; rc_at=\${rc_at//[!0-9]/}`;
  const started = `[ -f "$d/started" ] && started=1
{ read -r -n 64 run < "$d/run"; } 2>/dev/null; run=\${run//[!A-Za-z0-9_]/}
verdict="pid=$pid alive=$alive rc=$rc rc_age=$rc_age started=$started run=$run"`;
  if (recordsOnly)
    return `${records}
${started}
echo
echo "${PROBE_END} $verdict"
exit 0
`;
  return `${records}
if [ -f "$d/rc" ]; then
  [ -n "$rc_at" ] || rc_at=$(stat -c %Y "$d/rc" 2>/dev/null)
  printf -v now '%(%s)T' -1
  [ -n "$rc_at" ] && rc_age=$(( now - rc_at ))
fi
${started}
echo "$verdict"
echo "@@status"
LC_ALL=C
labfleet_keep() { local l; for l in "$@"; do [ "\${#l}" -gt ${L.statusLineMax} ] || printf '%s\n' "$l"; done; }
if [ -s "$d/status.jsonl" ]; then
  st=; { IFS= read -r -d '' -N ${bound + 1} st < "$d/status.jsonl"; } 2>/dev/null
  if [ "\${#st}" -le ${bound} ]; then mapfile -t sl <<< "$st"; labfleet_keep "\${sl[@]}"
  else
    mapfile -t sl <<< "\${st:0:${L.statusHeadBytes}}"; labfleet_keep "\${sl[@]}"; echo
    mapfile -t sl < <(tail -c ${L.statusTailBytes} "$d/status.jsonl" 2>/dev/null); labfleet_keep "\${sl[@]}"
  fi
fi
echo
echo "@@log"
if [ -s "$d/log" ]; then
  mapfile -t sl < <(tail -n ${L.logTailLines} "$d/log" 2>/dev/null)
  for l in "\${sl[@]}"; do printf '%s\n' "\${l:0:${L.logLineMax}}"; done
fi
echo
echo "${PROBE_END} $verdict"
exit 0
`;
}

export interface LabProbe {
  pid?: number;
  alive: boolean;
  rc?: number;
  rcAgeSeconds?: number;
  started: boolean;
  /** The run that started this setup (see startLab). */
  runId?: string;
  statusLines: string[];
  logTail: string[];
}

/** The verdict fields (`pid=.. alive=.. rc=.. rc_age=.. started=.. run=..`), on one line or one per line. */
export function parseVerdict(text: string): Omit<LabProbe, "statusLines" | "logTail"> {
  const kv = new Map<string, string>();
  for (const m of text.matchAll(/(?:^|\s)(pid|alive|rc|rc_age|started|run)=(\S*)/g))
    kv.set(m[1] as string, m[2] as string);
  const num = (k: string) => {
    const v = kv.get(k);
    return v === undefined || v === "" || Number.isNaN(Number(v)) ? undefined : Number(v);
  };
  return {
    pid: num("pid"),
    alive: kv.get("alive") === "1",
    rc: num("rc"),
    rcAgeSeconds: num("rc_age"),
    started: kv.get("started") === "1",
    ...(kv.get("run") ? { runId: kv.get("run") } : {}),
  };
}

/** A probe whose end line is missing: its output was cut on the way back. Retried, never read as a lab state. */
export class ProbeCutError extends LabStepError {
  override name = "ProbeCutError";
}

/**
 * Parses what probeScript printed. The verdict is taken from the end line, so a probe that came back cut (no
 * end line) throws ProbeCutError instead of reading as a lab that never started.
 */
export function parseProbe(stdout: string): LabProbe {
  const end = stdout.lastIndexOf(`\n${PROBE_END} `);
  if (end < 0) {
    throw new ProbeCutError(
      "reading the lab's status came back cut off (its end line is missing); the next poll reads it again",
    );
  }
  const verdict = parseVerdict(stdout.slice(end + PROBE_END.length + 2).split("\n")[0] ?? "");
  const body = stdout.slice(0, end);
  const afterStatus = body.split("\n@@status\n")[1] ?? "";
  const [status = "", log = ""] = afterStatus.split("\n@@log\n");
  return {
    ...verdict,
    statusLines: status.split("\n").filter((l) => l.trim() !== ""),
    logTail: log.split("\n").filter((l) => l.trim() !== ""),
  };
}

export interface Phase {
  name: string;
  state: string;
}

/** Phases in order of first appearance, each with its latest state; malformed lines are ignored. */
export function parsePhases(lines: string[]): { phases: Phase[]; current?: string } {
  const phases: Phase[] = [];
  let current: string | undefined;
  for (const line of lines) {
    let rec: unknown;
    try {
      rec = JSON.parse(line);
    } catch {
      continue;
    }
    if (!rec || typeof rec !== "object") continue;
    const { phase, state } = rec as { phase?: unknown; state?: unknown };
    if (typeof phase !== "string" || phase === "") continue;
    const st = typeof state === "string" ? state : "running";
    const existing = phases.find((p) => p.name === phase);
    if (existing) existing.state = st;
    else phases.push({ name: phase.slice(0, 80), state: st });
    current = phase.slice(0, 80);
  }
  return { phases, ...(current ? { current } : {}) };
}

export type LabVerdict =
  | { state: "running" }
  | { state: "not_started" }
  | { state: "complete" }
  | { state: "failed"; reason: string };

/** What the host's records say, before health: running, complete (exit 0), or failed with its reason. */
export function judge(probe: LabProbe): LabVerdict {
  if (probe.rc !== undefined) {
    if (probe.rc === 0) return { state: "complete" };
    const tail = probe.logTail.slice(-5).join("\n");
    return {
      state: "failed",
      reason: `setup exited with code ${probe.rc}${tail ? `; last lines of the log:\n${tail}` : ""}`,
    };
  }
  if (probe.alive) return { state: "running" };
  if (probe.started) {
    return {
      state: "failed",
      reason: `setup wrapper died without an exit code${probe.pid ? ` (pid ${probe.pid})` : ""}: the host rebooted or the process was killed`,
    };
  }
  return { state: "not_started" };
}

/** How often a probe that came back cut is read again before the error is reported. */
const PROBE_ATTEMPTS = 3;

/**
 * Reads the lab's records on the host (probeScript). `recordsOnly`: the setup's pid, exit code, start and run,
 * what a deploy decides on; no rc age, status lines or log tail (the probe's lists come back empty).
 */
export async function probeLab(
  t: Transport,
  workshop: string,
  opts: { timeoutMs?: number; recordsOnly?: boolean } = {},
): Promise<LabProbe> {
  for (let attempt = 1; ; attempt++) {
    const r = await t.exec(probeScript(workshop, opts.recordsOnly), {
      timeoutMs: opts.timeoutMs ?? 30_000,
      step: "probe lab",
      brief: true,
    });
    if (r.exitCode !== 0) throw new LabStepError(`reading lab status failed: ${lastLines(r)}`);
    try {
      if (r.truncated) throw new ProbeCutError("reading the lab's status came back cut off by the transport");
      return parseProbe(r.stdout);
    } catch (err) {
      if (!(err instanceof ProbeCutError) || attempt >= PROBE_ATTEMPTS) throw err;
    }
  }
}

/** The lab contract's variables, as shell assignments, for a command run like the health check (and checks). */
export function labEnv(spec: Workshop, hostId: string): string {
  const d = stateDir(spec.name);
  return `LABFLEET_STATUS=${d}/status.jsonl LABFLEET_ACCESS=${d}/access.json LABFLEET_SECRETS=${d}/secrets.env LABFLEET_WORKSHOP=${shq(spec.name)} LABFLEET_HOST_ID=${shq(hostId)}`;
}

/**
 * Runs `lab.health` on a host (exit 0: healthy), within `timeoutMs` (the deploy's gate allows a minute). Over SSH
 * it runs in the connection's resident shell (ExecOptions.resident), still under the host-side `timeout`: a fork
 * on the host instead of a session, and every status refresh checks every ready lab's health.
 */
export async function runHealth(
  t: Transport,
  spec: Workshop,
  hostId: string,
  timeoutMs = HEALTH_TIMEOUT_MS,
): Promise<ExecResult> {
  if (!spec.lab.health) return { exitCode: 0, stdout: "", stderr: "" };
  let dir: string;
  try {
    dir = labDir(spec, t);
  } catch (err) {
    if (!(err instanceof LabStepError)) throw err;
    return { exitCode: 1, stdout: "", stderr: err.message }; // a failed check, with its reason
  }
  return t.exec(`cd ${dir} && ${labEnv(spec, hostId)} bash -c ${shq(spec.lab.health)}`, {
    timeoutMs,
    step: "health check",
    resident: true,
  });
}

/**
 * Bytes of a host file one command reads, on a transport that does not say how much output it returns whole.
 * A page comes back base64-encoded (exact bytes, whatever the encoding, and a length that can be checked):
 * 12 KiB is 16.6 KB of base64 lines, under what every transport returns whole (SSM: at most 24,000 characters
 * of stdout; labfleet's SSM wrapper keeps the last 20,000 bytes).
 */
export const HOST_PAGE_BYTES = 12 * 1024;
/** The largest page, whatever the transport returns: a page is held in memory twice (base64 and bytes). */
export const HOST_PAGE_MAX_BYTES = 512 * 1024;

/**
 * Bytes of a host file one command reads on `t`: as many as fit its output bound once base64-encoded (4/3,
 * plus a newline every 76 characters, with margin), in whole 4 KiB, between HOST_PAGE_BYTES and
 * HOST_PAGE_MAX_BYTES. Over SSM 12 KiB; over local, SSH and agent hosts far larger pages, so reading a 2 MiB
 * log takes a few commands instead of 171.
 */
export function pageBytesFor(t: Transport): number {
  if (!t.outputBytes) return HOST_PAGE_BYTES;
  const fits = Math.floor(t.outputBytes / 1.4 / 4096) * 4096;
  return Math.min(HOST_PAGE_MAX_BYTES, Math.max(HOST_PAGE_BYTES, fits));
}

/** Bytes [offset, offset + length) of a file in the lab's state folder, as base64. */
export function pageScript(workshop: string, file: string, offset: number, length: number): string {
  return `tail -c +${offset + 1} ${stateDir(workshop)}/${file} 2>/dev/null | head -c ${length} | base64`;
}

/** The bytes of a page command's output, or why they are not the `length` bytes asked for. */
export function decodePage(r: ExecResult, length: number): Buffer | string {
  if (r.truncated) return "the transport cut its output (truncated)";
  if (r.timedOut) return "timed out";
  if (r.exitCode !== 0) return lastLines(r);
  const text = r.stdout.replace(/\s+/g, "");
  const page = Buffer.from(text, "base64");
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || page.length !== length) {
    return `${page.length} bytes came back instead of ${length} (the file changed, or the output is not base64)`;
  }
  return page;
}

/**
 * Reads the lab's access file in pages (see pageBytesFor), so no read is cut on its way back: the first command
 * answers the file's size and its first page (most access files are one page), each further page is a command of
 * its own. Undefined when the lab wrote none; a file over ACCESS_MAX_BYTES, or that is not JSON, fails the lab with
 * the reason.
 */
export async function readAccess(t: Transport, workshop: string): Promise<string | undefined> {
  const step = "read access details";
  const pageBytes = pageBytesFor(t);
  const first = await t.exec(
    `f=${stateDir(workshop)}/access.json; if [ -f "$f" ]; then s=$(stat -c %s "$f") && echo "$s" && head -c ${pageBytes} "$f" | base64; fi`,
    { timeoutMs: 30_000, step, brief: true },
  );
  if (first.exitCode !== 0) throw new Error(`reading the lab's access details failed: ${lastLines(first)}`);
  const nl = first.stdout.indexOf("\n");
  const sizeText = (nl < 0 ? first.stdout : first.stdout.slice(0, nl)).trim();
  const size = Number(sizeText);
  if (sizeText === "" || size === 0) return undefined;
  if (!Number.isInteger(size))
    throw new Error(`reading the lab's access details failed: no size in its answer`);
  if (size > ACCESS_MAX_BYTES) {
    throw new LabStepError(
      `the lab wrote $LABFLEET_ACCESS with ${size} bytes; labfleet reads at most ${ACCESS_MAX_BYTES / 1024} KiB`,
    );
  }
  const pages: Buffer[] = [];
  for (let offset = 0; offset < size; offset += pageBytes) {
    const length = Math.min(pageBytes, size - offset);
    const page = decodePage(
      offset === 0
        ? { ...first, stdout: first.stdout.slice(nl + 1) }
        : await t.exec(pageScript(workshop, "access.json", offset, length), {
            timeoutMs: 30_000,
            step,
            brief: true,
          }),
      length,
    );
    // A page that fails is an error to retry at the next poll (the file may be being written), not a lab state.
    if (typeof page === "string") throw new Error(`reading the lab's access details failed: ${page}`);
    pages.push(page);
  }
  return accessText(Buffer.concat(pages));
}

/** The access file's bytes as labfleet keeps them: at most ACCESS_MAX_BYTES of JSON, else the lab fails (LabStepError). */
export function accessText(bytes: Buffer): string {
  if (bytes.length > ACCESS_MAX_BYTES) {
    throw new LabStepError(
      `the lab wrote $LABFLEET_ACCESS with ${bytes.length} bytes or more; labfleet reads at most ${ACCESS_MAX_BYTES / 1024} KiB`,
    );
  }
  const text = bytes.toString("utf8");
  try {
    JSON.parse(text);
    return text;
  } catch {
    throw new LabStepError("the lab wrote $LABFLEET_ACCESS, but it is not valid JSON (at most 64 KiB)");
  }
}

/**
 * Ends the lab's setup. While the wrapper runs, its whole process group (setup, heartbeat and what setup started
 * in it). When the wrapper died without an exit code (killed, even with SIGKILL), what is left of that group:
 * the group keeps the wrapper's pid as its id while any member lives, and it is ended only when one of its
 * processes is this lab's (its command line names the wrapper or setup of this folder, or its environment
 * this folder's $LABFLEET_STATUS). A setup that ended (its exit code is recorded) is left alone, with any
 * service it left running.
 */
export function stopScript(workshop: string): string {
  return `${stopFunction(workshop)}
labfleet_stop
exit 0
`;
}

/**
 * stopScript's work as the bash function `labfleet_stop` (it always returns 0), for a command that stops the lab
 * and then goes on in the same session (syncSource's stopFirst). In bash alone (no head, tr or grep): a deploy of
 * a fleet stops every lab it rebuilds, and each process this started would be one more on every host.
 */
function stopFunction(workshop: string): string {
  const d = stateDir(workshop);
  return `labfleet_stop() {
  local d=${d} pid= s st p
  { read -r -n 16 pid < "$d/pid"; } 2>/dev/null; pid=\${pid//[!0-9]/}
  [ -n "$pid" ] || return 0
  if labfleet_holds "/proc/$pid/cmdline" "$d/wrapper.sh"; then
    kill -KILL -- -"$pid" 2>/dev/null; return 0
  fi
  [ -f "$d/rc" ] && return 0
  for s in /proc/[0-9]*/stat; do
    read -r st < "$s" 2>/dev/null || continue
    st=\${st##*) }; st=\${st#* * }
    [ "\${st%% *}" = "$pid" ] || continue
    p=\${s%/stat}
    if labfleet_holds "$p/cmdline" "$d/wrapper.sh" "$d/setup.sh" || labfleet_holds "$p/environ" "LABFLEET_STATUS=$d/status.jsonl"; then
      kill -KILL -- -"$pid" 2>/dev/null; break
    fi
  done
  return 0
}
# Whether a NUL-separated file (/proc/PID/cmdline or environ) holds one of the given strings as a whole entry.
labfleet_holds() {
  local f=$1 a w; shift
  while IFS= read -r -d '' a; do for w in "$@"; do [ "$a" = "$w" ] && return 0; done; done < "$f"
  return 1
} 2> /dev/null`;
}

export async function stopLab(t: Transport, workshop: string): Promise<void> {
  const r = await t.exec(stopScript(workshop), { timeoutMs: 30_000, step: "stop lab setup" });
  if (r.exitCode !== 0) throw new LabStepError(`stopping the lab setup failed: ${lastLines(r)}`);
}

/**
 * Puts `lab.source` into `lab.dir`: a git clone/fetch + hard reset, or a local folder sent as a tar stream. With
 * `stopFirst`, the same command first stops the lab's setup as stopLab does (one session on the host, not two).
 */
export async function syncSource(
  t: Transport,
  spec: Workshop,
  ref?: string,
  opts: { stopFirst?: boolean } = {},
): Promise<void> {
  const sync = await syncScript(spec, t, ref, opts);
  const r = await t.exec(sync.script, {
    ...(sync.archive ? { stdin: sync.archive } : {}),
    timeoutMs: STEP_TIMEOUT_MS,
    step: "sync lab source",
  });
  if (r.exitCode !== 0) throw new LabStepError(`syncing the lab source failed: ${lastLines(r)}`);
}

/**
 * syncSource's command: for a local folder, also its archive, which the command reads from the rest of its stdin
 * (tar reads to the end of it).
 */
async function syncScript(
  spec: Workshop,
  t: Transport,
  ref: string | undefined,
  opts: { stopFirst?: boolean; start?: StartCommand },
): Promise<{ script: string; archive?: Buffer; startPrepared?: boolean }> {
  const dir = labDir(spec, t);
  const src = spec.lab.source;
  const stop = opts.stopFirst ? `${stopFunction(spec.name)}\nlabfleet_stop\n` : "";
  if (src.startsWith("git:")) {
    const url = shq(src.slice(4));
    const want = ref ?? spec.lab.ref;
    const target = want
      ? `t=$(git -C "$dir" rev-parse --verify -q ${shq(`origin/${want}^{commit}`)} || git -C "$dir" rev-parse --verify -q ${shq(`${want}^{commit}`)}) || { echo "ref ${want.replace(/[^\w./-]/g, "")} not found" >&2; exit 3; }`
      : `t=$(git -C "$dir" rev-parse --verify -q origin/HEAD || git -C "$dir" rev-parse HEAD)`;
    return {
      script: `${stop}set -e; dir=${dir}
if [ -d "$dir/.git" ]; then git -C "$dir" fetch --quiet --tags origin; else rm -rf "$dir"; git clone --quiet ${url} "$dir"; fi
${target}
git -C "$dir" reset --quiet --hard "$t"`,
    };
  }
  // Before a start (opts.start), the same mkdir and rm also make the state folder and remove its old records
  // (each tool started is paid for on every host of a fleet). A state folder mkdir cannot make is the start's
  // failure, not the sync's: the start, which makes it 0700 first, then fails on it.
  const start = opts.start;
  return {
    script: `${stop}set -e; dir=${dir}${start ? `; d=${start.stateDir}` : ""}; [ ! -e "$dir.sync" ] || rm -rf "$dir.sync"; mkdir -p "$dir.sync"${start ? ` "$d" || [ -d "$dir.sync" ]` : ""}; tar -x -f - -C "$dir.sync"; rm -rf "$dir"${start ? ` ${start.removes}` : ""}; mv "$dir.sync" "$dir"`,
    archive: await sourceArchive(src),
    startPrepared: start !== undefined,
  };
}

export const SOURCE_TAR_LIMIT_BYTES = 256 * 1024 * 1024;

/** How long an archive of a lab folder is kept after its last use. */
const ARCHIVE_KEEP_MS = 60_000;
const archives = new Map<string, { signature: string; archive: Promise<Buffer>; timer: NodeJS.Timeout }>();

/**
 * The archive of a local lab folder, made once for every host a deploy sends it to: kept (for ARCHIVE_KEEP_MS after
 * its last use) while no file, folder or link in it has changed (path, size, mode, mtime and ctime), and made anew
 * when one has. Without it, each host of a deploy started a `tar` of its own.
 */
export async function sourceArchive(folder: string): Promise<Buffer> {
  let signature: string;
  try {
    signature = await folderSignature(folder);
  } catch {
    return tarFolder(folder); // unreadable: tar says why
  }
  const kept = archives.get(folder);
  if (kept?.signature === signature) {
    kept.timer.refresh();
    return kept.archive;
  }
  if (kept) clearTimeout(kept.timer);
  const archive = tarFolder(folder);
  const entry = {
    signature,
    archive,
    timer: setTimeout(() => archives.get(folder) === entry && archives.delete(folder), ARCHIVE_KEEP_MS),
  };
  entry.timer.unref();
  archives.set(folder, entry);
  archive.catch(() => {
    if (archives.get(folder) === entry) {
      clearTimeout(entry.timer);
      archives.delete(folder);
    }
  });
  return archive;
}

/** What a folder's archive depends on: every entry's path, type, size, mode, mtime and ctime (links not followed). */
async function folderSignature(folder: string): Promise<string> {
  const names = (await readdir(folder, { recursive: true })).sort();
  const stats = await Promise.all(names.map((n) => lstat(join(folder, n))));
  const top = await lstat(folder);
  return [top, ...stats]
    .map((st, i) => `${i === 0 ? "." : names[i - 1]}\0${st.mode}\0${st.size}\0${st.mtimeMs}\0${st.ctimeMs}`)
    .join("\n");
}

/**
 * A local lab folder as one tar archive, read whole before it is sent: the same bytes go to every host,
 * and a folder tar cannot read fails here, once, with tar's own message.
 */
export async function tarFolder(folder: string): Promise<Buffer> {
  const tar = spawn("tar", ["-c", "-f", "-", "-C", folder, "."], { stdio: ["ignore", "pipe", "pipe"] });
  const chunks: Buffer[] = [];
  let size = 0;
  let stderr = "";
  tar.stdout.on("data", (c: Buffer) => {
    size += c.length;
    if (size > SOURCE_TAR_LIMIT_BYTES) tar.kill("SIGKILL");
    else chunks.push(c);
  });
  tar.stderr.on("data", (c: Buffer) => {
    stderr = (stderr + c.toString()).slice(-2000);
  });
  const code = await new Promise<number | null>((res, rej) => {
    tar.on("error", rej);
    tar.on("close", res);
  });
  if (size > SOURCE_TAR_LIMIT_BYTES) {
    throw new LabStepError(
      `the lab source ${folder} is larger than ${SOURCE_TAR_LIMIT_BYTES / 1024 / 1024} MiB: use a git source`,
    );
  }
  if (code !== 0)
    throw new LabStepError(
      `reading the lab source ${folder} failed: ${stderr.trim() || `tar exited with ${code}`}`,
    );
  return Buffer.concat(chunks);
}

/**
 * What the start command writes beside the wrapper and setup, each 0600 (through a temporary file) in the 0700
 * state folder, over stdin (never on a command line): one command per host instead of one per file.
 */
export interface StartFiles {
  /** push.env and health.sh (shared/fleet/push-config.ts); "off": the host does not push, and what an earlier deploy
   * left of them is removed; undefined: left as they are. */
  push?: { env: string; health: string | undefined } | "off";
  /** secrets.env (shared/fleet/secrets.ts, sent over stdin); undefined: left as it is when the lab has operator
   * secrets (an SSM host fetched them itself), else removed. */
  secrets?: string;
}

/**
 * Writes the wrapper, setup and the StartFiles and starts the wrapper detached; returns once it has recorded its
 * pid. The same command records which run started it (`run`), so a resumed run knows the setups it started itself.
 * Its errors carry the exit code and the command's stderr, never its stdout; the command prints none of its parts.
 */
export async function startLab(
  t: Transport,
  spec: Workshop,
  hostId: string,
  runId: string,
  files: StartFiles = {},
): Promise<void> {
  const start = startScript(spec, t, hostId, runId, files);
  const r = await t.exec(
    `set -e\n${PARTS_FUNCTION}\nlabfleet_parts\n${prepareState(start)}\n${start.script}`,
    {
      stdin: start.input,
      timeoutMs: START_TIMEOUT_MS,
      step: "start lab setup",
    },
  );
  if (r.exitCode !== 0)
    throw new LabStepError(`starting the lab setup failed: ${lastLines({ ...r, stdout: "" })}`);
}

const START_TIMEOUT_MS = 60_000;
/** What the sync-and-start command prints between its two halves: a failure before it is the sync's. */
const SYNCED = "labfleet: lab source synced";

/**
 * syncSource and startLab as one command, one session on the host instead of two (a fleet's deploy dispatch
 * pays for each session on every host): the start's parts come first on stdin, then the lab folder's archive
 * for tar. A failure names the half that failed, as the two commands' do. Where stdin travels inside the
 * request (SSM, the agent: a few tens of KiB in all), a lab folder keeps its own command, so its archive has
 * that whole budget.
 */
export async function syncAndStartLab(
  t: Transport,
  spec: Workshop,
  via: TransportName,
  s: { ref: string | undefined; stopFirst: boolean; hostId: string; runId: string; files: StartFiles },
): Promise<void> {
  if (!spec.lab.source.startsWith("git:") && (via === "ssm" || via === "agent")) {
    await syncSource(t, spec, s.ref, { stopFirst: s.stopFirst });
    return startLab(t, spec, s.hostId, s.runId, s.files);
  }
  const start = startScript(spec, t, s.hostId, s.runId, s.files);
  const sync = await syncScript(spec, t, s.ref, { stopFirst: s.stopFirst, start });
  const r = await t.exec(
    `set -e\n${PARTS_FUNCTION}\nlabfleet_parts\n${sync.script}\necho '${SYNCED}'\n${sync.startPrepared ? 'chmod 700 "$d"' : prepareState(start)}\n${start.script}`,
    {
      stdin: sync.archive ? Buffer.concat([Buffer.from(start.input), sync.archive]) : start.input,
      timeoutMs: STEP_TIMEOUT_MS + START_TIMEOUT_MS,
      step: "sync lab source and start setup",
    },
  );
  if (r.exitCode === 0) return;
  if (!r.stdout.includes(SYNCED))
    throw new LabStepError(`syncing the lab source failed: ${lastLines({ ...r, stdout: "" })}`);
  throw new LabStepError(`starting the lab setup failed: ${lastLines({ ...r, stdout: "" })}`);
}

/**
 * startLab's command, to run once `labfleet_parts` (PARTS_FUNCTION) has read `input` from the head of stdin: a
 * line of byte lengths, then the parts back to back, read with bash's `read -N` (exactly that many bytes, in the
 * C locale, leaving the rest of stdin to what follows) and cut apart with bash's own string slicing. A part with
 * a NUL byte is refused here: bash's `read` drops NULs, and would read on into what follows.
 */
function startScript(
  spec: Workshop,
  t: Transport,
  hostId: string,
  runId: string,
  files: StartFiles,
): StartCommand {
  const d = stateDir(spec.name);
  const push = files.push === "off" ? undefined : files.push;
  const parts = [WRAPPER, spec.lab.setup, push?.env ?? "", push?.health ?? "", files.secrets ?? ""];
  const nul = parts.findIndex((x) => x.includes("\0"));
  if (nul >= 0)
    throw new LabStepError(
      `starting the lab setup failed: ${["the wrapper", "lab.setup", "the push settings", "lab.health", "the operator secrets"][nul]} holds a NUL byte, which a shell script cannot`,
    );
  const input = `${parts.map((x) => Buffer.byteLength(x)).join(" ")}\n${parts.join("")}`;
  const keepSecrets = files.secrets === undefined && spec.lab.operator_secrets.length > 0;
  // The private files this start writes, each from its part of the input (see labfleet_parts).
  const privates = [
    ...(push ? [["push.env", "$pushenv"]] : []),
    ...(push?.health !== undefined ? [["health.sh", "$health"]] : []),
    ...(files.secrets !== undefined ? [["secrets.env", "$secrets"]] : []),
  ].map(([file, part]) => `\n  printf '%s' "${part}" > "$d/${file}"`);
  const removes = `"$d/pid" "$d/rc" "$d/rc.tmp" "$d/status.jsonl" "$d/push.mark" "$d/access.json" "$d/heartbeat" "$d/run" "$d/log"${
    files.push !== undefined ? ` "$d/push.env" "$d/health.sh"` : ""
  }${keepSecrets ? "" : ` "$d/secrets.env"`}`;
  const script = `printf '%s\n' "$wrapper" > "$d/wrapper.sh"
printf '%s\n' "$setup" > "$d/setup.sh"
# The private files, removed above, are created anew as 0600 in the 0700 folder: one subshell for all of them
# (the umask stays its own), not one per file.
( umask 077
  : > "$d/log"${privates.join("")} )
unset pushenv health secrets
printf '%(%s)T\\n' -1 > "$d/started"
printf '%s\n' ${shq(runId)} > "$d/run"
# A background job of a shell without job control is not a group leader, so setsid execs in place and
# $! is the wrapper's own pid: recorded before this command returns, with no wait.
setsid bash "$d/wrapper.sh" "$d" ${labDir(spec, t)} ${shq(spec.name)} ${shq(hostId)} > /dev/null 2>&1 < /dev/null &
echo "$!" > "$d/pid"`;
  return { script, input, stateDir: d, removes };
}

/**
 * startScript's command, to run once `labfleet_parts` has read its input and the state folder `$d` is made (0700)
 * and holds none of the `removes`: prepareState does both, or a folder sync makes `$d` and removes them, and
 * the start makes `$d` 0700.
 */
interface StartCommand {
  script: string;
  input: string;
  /** The state folder, a shell word. */
  stateDir: string;
  /** The files of the state folder the start removes first: shell words under "$d". */
  removes: string;
}

/** Makes the state folder `$d` (0700) and removes a start's old records from it. */
function prepareState(start: StartCommand): string {
  return `d=${start.stateDir}; mkdir -p "$d"; chmod 700 "$d"\nrm -f ${start.removes}`;
}

/** Reads startScript's input from the head of stdin into $wrapper, $setup, $pushenv, $health and $secrets. */
const PARTS_FUNCTION = `labfleet_parts() {
  local LC_ALL=C input= n total
  IFS= read -r n || { echo "the start command's input has no lengths line" >&2; return 3; }
  set -- $n
  [ "$#" = 5 ] || { echo "the start command's input has no lengths line" >&2; return 3; }
  total=$(( $1 + $2 + $3 + $4 + $5 ))
  [ "$total" = 0 ] || IFS= read -r -d '' -N "$total" input || true
  [ "\${#input}" = "$total" ] || { echo "the start command's input is not as long as its lengths line says" >&2; return 3; }
  wrapper=\${input:0:$1}; input=\${input:$1}
  setup=\${input:0:$2}; input=\${input:$2}
  pushenv=\${input:0:$3}; input=\${input:$3}
  health=\${input:0:$4}; input=\${input:$4}
  secrets=\${input:0:$5}
}`;

export function lastLines(r: ExecResult, n = 5): string {
  const text = (r.stderr.trim() || r.stdout.trim()).split("\n").slice(-n).join("\n");
  return r.timedOut
    ? `timed out${text ? `: ${text}` : ""}`
    : `exit code ${r.exitCode}${text ? `: ${text}` : ""}`;
}
