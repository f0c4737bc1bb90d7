import { hostIdsOf } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { mapLimit } from "../runtime/concurrency.ts";
import { open } from "../runtime/crypto.ts";
import { timeLeft } from "../runtime/deadline.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { byNumber } from "../runtime/text.ts";
import type { HostItem, RunItem } from "../store/entities.ts";
import type { ExecResult, Transport } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";
import { claimedAmong, rebuildRefused } from "./claimed.ts";
import { type Selection, selectHosts, withTransport } from "./hosts.ts";
import {
  decodePage,
  HOST_PAGE_BYTES,
  judge,
  lastLines,
  pageBytesFor,
  pageScript,
  parsePhases,
  parseVerdict,
  stateDir,
} from "./lab.ts";
import { startRun } from "./runs.ts";
import { redactor, secretRedactor, secretValues } from "./secrets.ts";
import { assertProvisioned, type Stage } from "./stages.ts";
import { checkHost, loadWorkshop } from "./up.ts";
import { type HostView, hostView, listHosts } from "./workshops.ts";

/**
 * The instructor's day-to-day operations on a fleet: doctor, status refresh, deploy, retry, diagnose and
 * the access sheet. Each works on a selection of hosts (--host, --label) with bounded concurrency (-j).
 */

export const DEFAULT_READ_CONCURRENCY = 8;

/**
 * Hosts a read-only operation can reach before the first up: a static fleet's hosts[] from the file.
 * Provider-made hosts (local, aws) exist only once provisioned.
 */
function specHosts(spec: Workshop): HostItem[] {
  const now = new Date(0).toISOString();
  return spec.hosts.map((h) => ({
    workshop: spec.name,
    hostId: h.id,
    provider: spec.provider.type,
    address: h.ssh,
    labels: h.labels,
    state: "pending" as const,
    attempt: 0,
    ...(h.public_ip ? { publicIp: h.public_ip } : {}),
    createdAt: now,
    updatedAt: now,
  }));
}

export async function selected(
  name: string,
  sel: Selection,
): Promise<{
  spec: Workshop;
  hosts: HostItem[];
  provider: Awaited<ReturnType<typeof loadWorkshop>>["provider"];
}> {
  const { spec, provider } = await loadWorkshop(name);
  const known = (await listHosts(name)).filter((h) => h.state !== "torn_down");
  const hosts = known.length > 0 ? known : specHosts(spec);
  return { spec, provider, hosts: selectHosts(hosts, sel) };
}

// ---------------------------------------------------------------------------------------------- doctor

export interface DoctorCheck {
  name: string;
  ok: boolean;
  detail: string;
  expected?: string;
}

export interface DoctorReport {
  host: string;
  ok: boolean;
  checks: DoctorCheck[];
  facts: Record<string, string>;
}

/** Commands every lab needs on its hosts, whatever it says in lab.requires. */
function neededCommands(spec: Workshop): string[] {
  const base = ["bash", "tar", "setsid"];
  if (spec.lab.source.startsWith("git:")) base.push("git");
  return [...new Set([...base, ...(spec.lab.requires.commands ?? [])])];
}

/**
 * What doctor runs on a host (with bash, as every transport runs commands). Files are read with bash's own `read`,
 * the user's name from the prompt escape `\\u`, ids from `$EUID` and the usable CPUs from Cpus_allowed_list. It
 * starts `sudo -n true` only when `probe.sudo` (the lab requires root) and the login is not root: a sudo refused
 * is an incident in the host's auth log, often mailed to its admins. It starts `df` only when `probe.disk` (the lab
 * requires free disk). Otherwise it starts no process at all.
 */
export function doctorScript(commands: string[], probe: { sudo: boolean; disk: boolean }): string {
  const list = commands.map((c) => c.replace(/[^\w.+-]/g, "")).join(" ");
  const sudo = probe.sudo
    ? "elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then echo sudo=yes; else echo sudo=no"
    : "else echo sudo=unchecked";
  const disk = probe.disk
    ? `lf_df=$(df -Pk "$HOME" 2>/dev/null); lf_free=
[[ $lf_df == *$'\\n'* ]] && read -r _ _ _ lf_free _ <<< "\${lf_df#*$'\\n'}"
echo "disk_free_kib=$lf_free"
`
    : "";
  return `lf_user='\\u'; lf_user=\${lf_user@P}; [ -n "$lf_user" ] && [ "$lf_user" != '\\u' ] || lf_user=$(id -un)
echo "user=$lf_user"
echo "uid=$EUID"
if [ "$EUID" = 0 ]; then echo sudo=root; ${sudo}; fi
if [ -r /etc/os-release ]; then . /etc/os-release; fi
echo "os=\${PRETTY_NAME:-$(uname -s)}"
lf_kernel=; { read -r lf_kernel < /proc/sys/kernel/osrelease; } 2>/dev/null || lf_kernel=$(uname -r)
echo "kernel=$lf_kernel"
lf_list=; { while read -r lf_f lf_v; do [ "$lf_f" = Cpus_allowed_list: ] && lf_list=$lf_v && break; done < /proc/self/status; } 2>/dev/null
lf_cpus=0
for lf_r in \${lf_list//,/ }; do
  if [[ $lf_r =~ ^([0-9]+)-([0-9]+)$ ]]; then lf_cpus=$(( lf_cpus + BASH_REMATCH[2] - BASH_REMATCH[1] + 1 ));
  elif [[ $lf_r =~ ^[0-9]+$ ]]; then lf_cpus=$(( lf_cpus + 1 )); fi
done
[ "$lf_cpus" -gt 0 ] || lf_cpus=$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN)
echo "cpus=$lf_cpus"
lf_mem=; { while read -r lf_f lf_v _; do [ "$lf_f" = MemTotal: ] && lf_mem=$lf_v && break; done < /proc/meminfo; } 2>/dev/null
echo "mem_kib=$lf_mem"
${disk}if [ -c /dev/kvm ] && [ -r /dev/kvm ] && [ -w /dev/kvm ]; then echo kvm=yes; elif [ -e /dev/kvm ]; then echo kvm=no-access; else echo kvm=absent; fi
lf_nested=; for lf_f in /sys/module/kvm_intel/parameters/nested /sys/module/kvm_amd/parameters/nested; do { [ -r "$lf_f" ] && read -r lf_nested < "$lf_f"; } 2>/dev/null && break; done
echo "nested=$lf_nested"
for c in ${list}; do if command -v "$c" >/dev/null 2>&1; then echo "cmd:$c=yes"; else echo "cmd:$c=no"; fi; done
exit 0
`;
}

function keyValues(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split("\n")) {
    const i = line.indexOf("=");
    if (i > 0) out[line.slice(0, i)] = line.slice(i + 1).trim();
  }
  return out;
}

/** Judges one host's facts against lab.requires; pure, so every rule is unit-tested. */
export function judgeDoctor(spec: Workshop, facts: Record<string, string>): DoctorCheck[] {
  const req = spec.lab.requires;
  const checks: DoctorCheck[] = [{ name: "reachable", ok: true, detail: `as ${facts.user ?? "?"}` }];
  // Root is checked always and required only when the lab says so (lab.requires.root).
  const sudo = facts.sudo ?? "no";
  const root = sudo === "root" || sudo === "yes";
  checks.push({
    name: "sudo",
    ok: root || !req.root,
    detail:
      sudo === "root"
        ? "logged in as root"
        : sudo === "yes"
          ? "sudo -n works"
          : sudo === "unchecked" && !req.root
            ? "not checked: the lab does not require root"
            : `no root: sudo would ask for a password, or is missing${req.root ? "" : " (the lab does not require root)"}`,
    ...(req.root ? { expected: "root, or sudo without a password" } : {}),
  });
  checks.push({ name: "os", ok: true, detail: `${facts.os ?? "unknown"} (kernel ${facts.kernel ?? "?"})` });
  const cpus = Number(facts.cpus);
  if (req.cpus !== undefined) {
    checks.push({
      name: "cpus",
      ok: cpus >= req.cpus,
      detail: `${Number.isFinite(cpus) ? cpus : "?"} CPUs`,
      expected: `at least ${req.cpus}`,
    });
  }
  const memGib = Number(facts.mem_kib) / 1024 / 1024;
  if (req.memory_gib !== undefined) {
    // Kernels reserve a little: a "16 GiB" machine reports a bit less, so allow 5%.
    checks.push({
      name: "memory",
      ok: memGib >= req.memory_gib * 0.95,
      detail: `${memGib.toFixed(1)} GiB`,
      expected: `at least ${req.memory_gib} GiB`,
    });
  }
  const diskGib = Number(facts.disk_free_kib) / 1024 / 1024;
  if (req.disk_gib !== undefined) {
    checks.push({
      name: "disk",
      ok: diskGib >= req.disk_gib,
      detail: `${diskGib.toFixed(1)} GiB free in the home folder`,
      expected: `at least ${req.disk_gib} GiB free`,
    });
  }
  if (req.kvm) {
    const kvm = facts.kvm ?? "absent";
    checks.push({
      name: "kvm",
      ok: kvm === "yes",
      detail:
        kvm === "yes"
          ? "/dev/kvm usable"
          : kvm === "no-access"
            ? "/dev/kvm exists but is not readable and writable"
            : "/dev/kvm is missing",
      expected: "/dev/kvm",
    });
  }
  if (req.nested_virtualization) {
    const nested = facts.nested ?? "";
    checks.push({
      name: "nested_virtualization",
      ok: nested === "Y" || nested === "1",
      detail: nested ? `kvm nested=${nested}` : "kvm module not loaded",
      expected: "nested=Y",
    });
  }
  for (const c of neededCommands(spec)) {
    const ok = facts[`cmd:${c}`] === "yes";
    checks.push({
      name: `command:${c}`,
      ok,
      detail: ok ? "found" : "not found on PATH",
      expected: "installed",
    });
  }
  return checks;
}

export async function doctor(
  name: string,
  sel: Selection = {},
  concurrency = DEFAULT_READ_CONCURRENCY,
): Promise<DoctorReport[]> {
  assertActor("instructor", "system");
  const { spec, provider, hosts } = await selected(name, sel);
  const req = spec.lab.requires;
  const script = doctorScript(neededCommands(spec), {
    sudo: req.root === true,
    disk: req.disk_gib !== undefined,
  });
  return mapLimit(hosts, concurrency, async (h) => {
    try {
      const r = await withTransport(spec, provider, h, (t) =>
        t.exec(script, { step: "doctor", timeoutMs: 60_000, brief: true }),
      );
      if (r.exitCode !== 0) {
        return {
          host: h.hostId,
          ok: false,
          facts: {},
          checks: [{ name: "reachable", ok: false, detail: `doctor script exited with ${r.exitCode}` }],
        };
      }
      const facts = keyValues(r.stdout);
      const checks = judgeDoctor(spec, facts);
      return { host: h.hostId, ok: checks.every((c) => c.ok), checks, facts };
    } catch (err) {
      return {
        host: h.hostId,
        ok: false,
        facts: {},
        checks: [{ name: "reachable", ok: false, detail: errorMessage(err) }],
      };
    }
  });
}

// ------------------------------------------------------------------------------------ status refresh

/** Re-reads each selected host's lab records: every host whose lab was started (deploying, ready, failed). */
export async function refreshHosts(
  name: string,
  sel: Selection = {},
  concurrency = DEFAULT_READ_CONCURRENCY,
): Promise<HostView[]> {
  assertActor("instructor", "system");
  const { spec, provider, hosts } = await selected(name, sel);
  const redact = await secretRedactor(spec);
  await mapLimit(hosts, concurrency, async (h) => {
    // Every lab that was started is read again: a ready lab that broke since shows up failed.
    if (h.state === "deploying" || ((h.state === "failed" || h.state === "ready") && h.deployStartedAt))
      await checkHost(spec, provider, h, redact);
  });
  const now = useDeps().clock.now();
  const ids = new Set(hosts.map((h) => h.hostId));
  return (await listHosts(name))
    .filter((h) => ids.has(h.hostId))
    .sort((a, b) => byNumber(a.hostId, b.hostId))
    .map((h) => hostView(h, now));
}

// ------------------------------------------------------------------------------------ deploy and retry

/** Hosts a deploy may name before the first up: those the spec describes, with their labels. */
async function candidates(
  name: string,
  spec: Workshop,
): Promise<{ hostId: string; labels?: Record<string, unknown> }[]> {
  const known = (await listHosts(name)).filter((h) => h.state !== "torn_down");
  if (known.length > 0) return known;
  return hostIdsOf(spec).map((hostId) => ({
    hostId,
    labels: spec.hosts.find((h) => h.id === hostId)?.labels ?? {},
  }));
}

/**
 * Refuses (409 `rebuild.claimed`, naming each lab and its student) to rebuild labs students have claimed,
 * unless `confirmed`. The console catches the refusal and asks on a page of its own, which then confirms.
 */
async function guardClaimed(
  name: string,
  verb: "deploy" | "retry",
  rebuilt: readonly { hostId: string }[],
  confirmed: boolean,
): Promise<void> {
  if (confirmed) return;
  const claimed = await claimedAmong(
    name,
    rebuilt.map((h) => h.hostId),
  );
  if (claimed.length > 0) throw rebuildRefused(verb, claimed);
}

export async function startDeploy(
  name: string,
  sel: Selection,
  opts: {
    force?: boolean;
    ref?: string;
    concurrency?: number;
    rebuildClaimed?: boolean;
    stages?: Stage[];
  } = {},
): Promise<RunItem> {
  assertActor("instructor", "system");
  const { spec } = await loadWorkshop(name);
  const hosts = selectHosts(await candidates(name, spec), sel);
  if (hosts.length === 0) throw new VisibleError("input", "selection.empty", "no host matches the selection");
  if (opts.stages) {
    assertProvisioned(
      opts.stages,
      hosts.map((h) => h.hostId),
      await listHosts(name),
    );
  }
  const rebuilt =
    opts.stages?.includes("deploy") === false
      ? []
      : hosts.filter((h) => opts.force || !("state" in h) || h.state !== "ready");
  await guardClaimed(name, "deploy", rebuilt, opts.rebuildClaimed ?? opts.force ?? false);
  return startRun(name, "deploy", {
    ...(opts.stages ? { stages: opts.stages } : {}),
    ...(opts.force ? { force: true } : {}),
    ...(opts.ref ? { ref: opts.ref } : {}),
    ...(opts.concurrency ? { concurrency: opts.concurrency } : {}),
    hosts: hosts.map((h) => h.hostId),
  });
}

/** Refreshes the selection from the hosts, then deploys again with force: failed hosts, or all selected. */
export async function startRetry(
  name: string,
  sel: Selection,
  opts: {
    allSelected?: boolean;
    concurrency?: number;
    force?: boolean;
    rebuildClaimed?: boolean;
    stages?: Stage[];
  } = {},
): Promise<{ run?: RunItem; hosts: string[] }> {
  assertActor("instructor", "system");
  const views = await refreshHosts(name, sel, opts.concurrency ?? DEFAULT_READ_CONCURRENCY);
  const targets = views.filter((h) => opts.allSelected || h.state === "failed").map((h) => h.id);
  if (targets.length === 0) return { hosts: [] };
  await guardClaimed(
    name,
    "retry",
    targets.map((hostId) => ({ hostId })),
    opts.rebuildClaimed ?? opts.force ?? false,
  );
  const run = await startRun(name, "retry", {
    ...(opts.stages ? { stages: opts.stages } : {}),
    force: true,
    hosts: targets,
    ...(opts.concurrency ? { concurrency: opts.concurrency } : {}),
  });
  return { run, hosts: targets };
}

// -------------------------------------------------------------------------------------------- diagnose

export interface DiagnoseFile {
  path: string;
  content: string;
}

export interface Diagnosis {
  name: string;
  files: DiagnoseFile[];
  index: {
    workshop: string;
    collectedAt: string;
    hosts: { id: string; state: string; files: string[]; error?: string }[];
    /** The first host left for the next part, and what to run to collect every part. */
    next?: string;
    more?: string;
  };
}

/** Bytes of a host file one command of diagnose reads on a transport that does not give its output bound (see pageBytesFor). */
export const DIAGNOSE_PAGE_BYTES = HOST_PAGE_BYTES;
/** diagnose keeps at most the last this many bytes of the lab log. */
export const DIAGNOSE_LOG_CAP_BYTES = 2 * 1024 * 1024;
/** ... of status.jsonl. */
export const DIAGNOSE_STATUS_CAP_BYTES = 512 * 1024;
/** ... of wrapper.sh and of setup.sh. */
export const DIAGNOSE_SCRIPT_CAP_BYTES = 256 * 1024;
/** No new read of a host starts after this long (each page is a round trip: seconds over SSM). */
export const DIAGNOSE_HOST_BUDGET_MS = 120_000;
const DIAGNOSE_EXEC_TIMEOUT_MS = 60_000;

/** The host files diagnose reads, by the name of the file it writes them to, with their caps. */
const DIAGNOSE_SOURCES = [
  { out: "wrapper.txt", file: "wrapper.sh", cap: DIAGNOSE_SCRIPT_CAP_BYTES },
  { out: "setup.sh", file: "setup.sh", cap: DIAGNOSE_SCRIPT_CAP_BYTES },
  { out: "status.jsonl", file: "status.jsonl", cap: DIAGNOSE_STATUS_CAP_BYTES },
  { out: "lab.log.tail", file: "log", cap: DIAGNOSE_LOG_CAP_BYTES },
] as const;

/** What the summary says about one file read from the host. */
export interface DiagnoseRead {
  /** The host file (in the lab's state folder). */
  file: string;
  /** Its size when diagnose looked; null when there is no such file. */
  hostBytes: number | null;
  /** The host-file offset of the first byte collected. */
  fromByte: number;
  bytesRead: number;
  capBytes: number;
  /** The file was longer than the cap: its first `fromByte` bytes were left out on purpose. */
  cutByCap: boolean;
  /** Every byte from `max(0, hostBytes - capBytes)` to `hostBytes` was read. */
  complete: boolean;
  pages: number;
  /** Why it is not complete: a page that failed or came back cut, or the host's time ran out. */
  error?: string;
}

/** Head facts (as wrapper.txt shows them), then the sizes of the files diagnose reads. */
function diagnoseProbeScript(workshop: string): string {
  const d = stateDir(workshop);
  const files = DIAGNOSE_SOURCES.map((s) => s.file).join(" ");
  return `d=${d}
pid=$(cat "$d/pid" 2>/dev/null)
alive=0
if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\\0' ' ' < "/proc/$pid/cmdline" | grep -q wrapper.sh; then alive=1; fi
rc=; { read -r rc < "$d/rc"; } 2>/dev/null
echo "pid=$pid"; echo "alive=$alive"; echo "rc=$rc"; echo "rc_age="
echo "started=$( [ -f "$d/started" ] && echo 1 )"
echo "heartbeat=$(cat "$d/heartbeat" 2>/dev/null)"; echo "now=$(date +%s)"
echo "@@sizes"
for f in ${files}; do
  if [ -f "$d/$f" ]; then echo "$f=$(stat -c %s "$d/$f" 2>/dev/null || wc -c < "$d/$f")"; else echo "$f="; fi
done
exit 0
`;
}

interface DiagnoseBudget {
  deadline: number;
  now: () => number;
  ms: number;
}

function checkedOutput(r: ExecResult): string | undefined {
  if (r.truncated) return "the transport cut its output (truncated)";
  if (r.timedOut) return "timed out";
  if (r.exitCode !== 0) return lastLines(r);
  return undefined;
}

/**
 * Reads the last `cap` bytes of a host file in pages (as large as the transport returns whole), newest first (so a host whose
 * time runs out still gives the end of its log), and returns them in order. A page that fails, comes back
 * cut or is not as long as asked ends the reading, said in `error`; what was read before is kept.
 */
async function readHostFile(
  t: Transport,
  workshop: string,
  file: string,
  size: number | null,
  cap: number,
  budget: DiagnoseBudget,
): Promise<{ bytes: Buffer; read: DiagnoseRead }> {
  const end = size ?? 0;
  const start = Math.max(0, end - cap);
  const pages: Buffer[] = [];
  const pageBytes = pageBytesFor(t);
  let from = end;
  let error: string | undefined;
  while (from > start) {
    if (budget.now() >= budget.deadline) {
      error = `diagnose spends at most ${budget.ms / 1000} s on a host: bytes ${start} to ${from} were not read`;
      break;
    }
    const offset = Math.max(start, from - pageBytes);
    const length = from - offset;
    const where = `bytes ${offset} to ${from}`;
    let r: ExecResult;
    try {
      r = await t.exec(pageScript(workshop, file, offset, length), {
        step: `diagnose: read ${file}`,
        timeoutMs: DIAGNOSE_EXEC_TIMEOUT_MS,
        brief: true,
      });
    } catch (err) {
      error = `reading ${where} failed: ${errorMessage(err)}`;
      break;
    }
    const page = decodePage(r, length);
    if (typeof page === "string") {
      error = `reading ${where} failed: ${page}`;
      break;
    }
    pages.unshift(page);
    from = offset;
  }
  const bytesRead = end - from;
  return {
    bytes: Buffer.concat(pages),
    read: {
      file,
      hostBytes: size,
      fromByte: from,
      bytesRead,
      capBytes: cap,
      cutByCap: start > 0,
      complete: error === undefined,
      pages: pages.length,
      ...(error ? { error } : {}),
    },
  };
}

function stringsIn(value: unknown): string[] {
  if (typeof value === "string") return [value];
  if (Array.isArray(value)) return value.flatMap(stringsIn);
  if (value && typeof value === "object") return Object.values(value).flatMap(stringsIn);
  return [];
}

export interface DiagnoseHostOptions {
  workshop: string;
  redact: (text: string) => string;
  /** The time status.json's elapsed seconds are measured at. */
  now: Date;
  /** How long the host may take; default DIAGNOSE_HOST_BUDGET_MS. */
  budgetMs?: number;
  /** Injectable for tests: the clock the budget is measured with (ms). */
  clock?: () => number;
}

/**
 * What diagnose writes for one host. `reach` runs its argument with a transport to the host. Each section is
 * its own command, and files are read in pages, so no command's output is larger than a page: over SSM,
 * which returns only the end of a long output, nothing is lost. Secrets are redacted from each whole file
 * (a secret across two pages is still found).
 */
export async function diagnoseHost(
  h: HostItem,
  reach: <T>(fn: (t: Transport) => Promise<T>) => Promise<T>,
  opts: DiagnoseHostOptions,
): Promise<{ files: DiagnoseFile[]; error?: string }> {
  const { redact } = opts;
  const view = hostView(h, opts.now);
  const record = { ...view, attempt: h.attempt ?? 0, deployStartedAt: h.deployStartedAt ?? null };
  const files: DiagnoseFile[] = [
    { path: `${h.hostId}/status.json`, content: redact(`${JSON.stringify(record, null, 2)}\n`) },
  ];
  let error: string | undefined;
  let summary: Record<string, unknown> = {
    host: h.hostId,
    state: h.state,
    error: h.error ? redact(h.error) : null,
    phases: h.phases ?? [],
  };
  const clock = opts.clock ?? Date.now;
  const ms = opts.budgetMs ?? DIAGNOSE_HOST_BUDGET_MS;
  const budget: DiagnoseBudget = { deadline: clock() + ms, now: clock, ms };
  try {
    const collected = await reach(async (t) => {
      const r = await t.exec(diagnoseProbeScript(opts.workshop), {
        step: "diagnose",
        timeoutMs: DIAGNOSE_EXEC_TIMEOUT_MS,
        brief: true,
      });
      const problem = checkedOutput(r);
      if (problem) throw new Error(`reading the lab's records failed: ${problem}`);
      const [head = "", sizeText = ""] = r.stdout.split("\n@@sizes\n");
      const sizes = keyValues(sizeText);
      const texts: Record<string, string> = {};
      const reads: Record<string, DiagnoseRead> = {};
      for (const s of DIAGNOSE_SOURCES) {
        const raw = sizes[s.file];
        const size = raw === undefined || raw === "" || Number.isNaN(Number(raw)) ? null : Number(raw);
        const { bytes, read } = await readHostFile(t, opts.workshop, s.file, size, s.cap, budget);
        texts[s.out] = bytes.toString("utf8");
        reads[s.out] = read;
      }
      return { head, texts, reads };
    });
    const { head, texts, reads } = collected;
    const logText = redact(texts["lab.log.tail"] ?? "");
    const statusText = texts["status.jsonl"] ?? "";
    const probe = {
      ...parseVerdict(head),
      statusLines: statusText.split("\n").filter((l) => l.trim() !== ""),
      logTail: logText.split("\n").filter((l) => l.trim() !== ""),
    };
    const verdict = judge(probe);
    files.push(
      { path: `${h.hostId}/lab.log.tail`, content: logText },
      { path: `${h.hostId}/status.jsonl`, content: redact(statusText) },
      {
        path: `${h.hostId}/wrapper.txt`,
        content: redact(`${head}\n\n# wrapper.sh\n${texts["wrapper.txt"] ?? ""}`),
      },
      { path: `${h.hostId}/setup.sh`, content: redact(texts["setup.sh"] ?? "") },
    );
    summary = {
      ...summary,
      verdict: verdict.state,
      reason: verdict.state === "failed" ? redact(verdict.reason) : null,
      exitCode: probe.rc ?? null,
      wrapperAlive: probe.alive,
      phases: parsePhases(probe.statusLines).phases,
      lastLogLines: probe.logTail.slice(-10),
      collected: Object.fromEntries(
        Object.entries(reads).map(([k, v]) => [k, v.error ? { ...v, error: redact(v.error) } : v]),
      ),
    };
  } catch (err) {
    error = redact(errorMessage(err));
    summary = { ...summary, unreachable: error };
  }
  files.push({ path: `${h.hostId}/summary.json`, content: `${JSON.stringify(summary, null, 2)}\n` });
  return { files, ...(error ? { error } : {}) };
}

/**
 * Collects from each failed host (or every selected one) what explains it: status, lab log (its last
 * DIAGNOSE_LOG_CAP_BYTES), wrapper, setup, phase records and a summary. Never collects the access or
 * secrets files, and redacts every known secret value from what it does collect.
 */
/**
 * At most this many bytes of collected files go in one diagnose archive: a part stays well under the 6 MB a
 * Lambda function may return (gzip only makes it smaller), and the rest of the hosts come in further parts.
 */
export const DIAGNOSE_PART_BYTES = 4 * 1024 * 1024;
/**
 * A part starts collecting a host only with at least this much of its time left. In AWS a request has about 15 s
 * of work (half of API Gateway's 30 s integration timeout), so this is a fraction of it: the hosts read at once
 * (DEFAULT_READ_CONCURRENCY) all start in the first part.
 */
export const DIAGNOSE_MIN_HOST_MS = 6_000;

export interface DiagnoseOptions {
  allSelected?: boolean;
  concurrency?: number;
  /** Continue a diagnose: the first host of this part (`next` of the previous part), and the folder name it gave. */
  from?: string;
  name?: string;
  /** Bytes of collected files per part (default DIAGNOSE_PART_BYTES). */
  partBytes?: number;
}

const DIAGNOSE_NAME = /^[a-z0-9-]+\.diagnose-\d{8}T\d{6}Z$/;

/**
 * Collects the selected hosts (failed ones unless `allSelected`) in host order, in parts: a part ends when its
 * files reach `partBytes` or its time runs out (the caller's deadline, see shared/runtime/deadline.ts), and
 * `next` names the first host it left for the next part (absent when it is the last). Every part has its own
 * index.json, listing its hosts; `name` is the same for every part of one diagnose.
 */
export async function diagnose(
  name: string,
  sel: Selection = {},
  opts: DiagnoseOptions = {},
): Promise<Diagnosis & { next?: string }> {
  assertActor("instructor", "system");
  const { spec, provider, hosts } = await selected(name, sel);
  const { accessKey, clock } = useDeps();
  if (
    opts.name !== undefined &&
    !(DIAGNOSE_NAME.test(opts.name) && opts.name.startsWith(`${name}.diagnose-`))
  ) {
    throw new VisibleError("input", "diagnose.bad_name", "not the name of a diagnose of this workshop", [
      { path: "name", message: `expected ${name}.diagnose-YYYYMMDDTHHMMSSZ, from the first part` },
    ]);
  }
  const targets = hosts
    .filter((h) => opts.allSelected || h.state === "failed")
    .sort((a, b) => a.hostId.localeCompare(b.hostId))
    .filter((h) => opts.from === undefined || h.hostId >= opts.from);
  const secretList = Object.values((await secretValues(spec).catch(() => ({ values: {} }))).values);
  for (const h of hosts) {
    if (!h.access) continue;
    try {
      secretList.push(
        ...stringsIn((JSON.parse(open(accessKey, h.access)) as { credentials?: unknown }).credentials),
      );
    } catch {
      // unreadable access details add nothing to redact
    }
  }
  const redact = redactor(secretList);
  const collectedAt = isoNow(clock);
  const now = clock.now();
  const files: DiagnoseFile[] = [];
  const index: Diagnosis["index"] = { workshop: name, collectedAt, hosts: [] };
  const partBytes = opts.partBytes ?? DIAGNOSE_PART_BYTES;
  let bytes = 0;
  let started = 0;
  const left: string[] = [];
  await mapLimit(targets, opts.concurrency ?? DEFAULT_READ_CONCURRENCY, async (h) => {
    // Every part collects at least one host, so a diagnose always gets to its end.
    if (started > 0 && (bytes >= partBytes || timeLeft() < DIAGNOSE_MIN_HOST_MS)) {
      left.push(h.hostId);
      return;
    }
    started++;
    const one = await diagnoseHost(h, (fn) => withTransport(spec, provider, h, fn), {
      workshop: name,
      redact,
      now,
      // A host's reads stop in time for the part to be sent before the deadline.
      budgetMs: Math.max(
        DIAGNOSE_MIN_HOST_MS / 3,
        Math.min(DIAGNOSE_HOST_BUDGET_MS, timeLeft() - DIAGNOSE_MIN_HOST_MS / 3),
      ),
    });
    bytes += one.files.reduce((n, f) => n + Buffer.byteLength(f.content), 0);
    files.push(...one.files);
    index.hosts.push({
      id: h.hostId,
      state: h.state,
      files: one.files.map((f) => f.path),
      ...(one.error ? { error: one.error } : {}),
    });
  });
  index.hosts.sort((a, b) => a.id.localeCompare(b.id));
  files.sort((a, b) => a.path.localeCompare(b.path));
  const stamp = collectedAt.replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
  const next = left.sort()[0];
  if (next) {
    index.next = next;
    index.more = `${left.length} more hosts, from ${next}, are in the next part: \`labfleet diagnose ${name}\` collects every part`;
  }
  files.push({ path: "index.json", content: `${JSON.stringify(index, null, 2)}\n` });
  return { name: opts.name ?? `${name}.diagnose-${stamp}`, files, index, ...(next ? { next } : {}) };
}

/**
 * The part with only its first `count` hosts (in host order): the others go to the next part, which starts at
 * the first host left out. For an archive that came out larger than its transport takes.
 */
export function firstHostsOf(d: Diagnosis & { next?: string }, count: number): Diagnosis & { next?: string } {
  const kept = d.index.hosts.slice(0, Math.max(1, count));
  const dropped = d.index.hosts.slice(kept.length);
  if (dropped.length === 0) return d;
  const keptIds = new Set(kept.map((h) => h.id));
  const next = dropped[0]?.id as string;
  const index = {
    ...d.index,
    hosts: kept,
    next,
    more: `more hosts, from ${next}, are in the next part: \`labfleet diagnose ${d.index.workshop}\` collects every part`,
  };
  const files = d.files
    .filter((f) => f.path === "index.json" || keptIds.has(f.path.split("/")[0] as string))
    .map((f) => (f.path === "index.json" ? { ...f, content: `${JSON.stringify(index, null, 2)}\n` } : f));
  return { ...d, files, index, next };
}

// ------------------------------------------------------------------------------------- access sheet

export interface AccessRow {
  host: string;
  state: string;
  address: string;
  urls: Record<string, string>;
  credentials: boolean;
}

function hostnameOf(address: string | undefined, provider: string): string {
  if (!address || provider === "local") return "127.0.0.1";
  const at = address.includes("@") ? address.slice(address.indexOf("@") + 1) : address;
  if (at.startsWith("[")) return at.slice(0, at.indexOf("]") + 1);
  return at.split(":")[0] ?? at;
}

/** The URLs a lab wrote to $LABFLEET_ACCESS (`urls`), by name; none when it wrote none or they do not read. */
function labUrls(sealed: string | undefined, accessKey: Buffer): Record<string, string> {
  if (!sealed) return {};
  try {
    const urls = (JSON.parse(open(accessKey, sealed)) as { urls?: unknown }).urls;
    if (!urls || typeof urls !== "object" || Array.isArray(urls)) return {};
    return Object.fromEntries(
      Object.entries(urls).filter((e): e is [string, string] => typeof e[1] === "string"),
    );
  } catch {
    return {};
  }
}

/**
 * One row per host, one column per UI (lab.ui_ports and components with a port) and per URL the labs wrote
 * to $LABFLEET_ACCESS (where a name is both, the workshop's UI port wins); never a password.
 */
export async function accessSheet(
  name: string,
  sel: Selection = {},
): Promise<{ columns: string[]; rows: AccessRow[] }> {
  assertActor("instructor", "system");
  const { accessKey } = useDeps();
  const { spec, hosts } = await selected(name, sel);
  const uis = [
    ...spec.lab.ui_ports.map((u) => ({ name: u.name, port: u.port, scheme: u.scheme, path: u.path })),
    ...spec.lab.components
      .filter((c) => c.port !== undefined)
      .map((c) => ({ name: c.name, port: c.port as number, scheme: "https", path: c.path ?? "/" })),
  ];
  const columns = uis.map((u) => u.name);
  const rows = hosts.map((h) => {
    const raw = h.publicIp ?? hostnameOf(h.address, h.provider);
    const ip = raw.includes(":") && !raw.startsWith("[") ? `[${raw}]` : raw;
    const own = labUrls(h.access, accessKey);
    for (const key of Object.keys(own)) if (!columns.includes(key)) columns.push(key);
    return {
      host: h.hostId,
      state: h.state,
      address: ip,
      urls: {
        ...own,
        ...Object.fromEntries(
          uis.map((u) => [
            u.name,
            `${u.scheme}://${ip}:${u.port}${u.path.startsWith("/") ? u.path : `/${u.path}`}`,
          ]),
        ),
      },
      credentials: Boolean(h.access),
    };
  });
  return { columns, rows };
}
