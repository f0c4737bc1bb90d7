import type { Provider } from "../providers/types.ts";
import { actorName, assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { mapLimit, pause } from "../runtime/concurrency.ts";
import { open, seal } from "../runtime/crypto.ts";
import { timeLeft } from "../runtime/deadline.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, isVisibleError, VisibleError } from "../runtime/errors.ts";
import { createID } from "../runtime/ids.ts";
import { EXEC_JOB_STATES, type ExecJobItem, type ExecResultItem, type HostItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import {
  commandForEvent,
  EXEC_DEFAULT_CONCURRENCY,
  EXEC_TOTAL_OUTPUT_BYTES,
  type ExecHostResult,
  ExecInput,
  type ExecReport,
  type ExecSummary,
  execScript,
  noOutput,
  outputCaps,
  parseExecOutput,
  resultOf,
  shareOutput,
  summarize,
} from "./exec.ts";
import {
  killScript,
  POLL_GONE,
  POLL_RUNNING,
  POLL_UNKNOWN,
  parsePoll,
  pollScript,
  startScript,
} from "./exec-host.ts";
import { MIN_STEP_MS, withTransport } from "./hosts.ts";
import { selected } from "./ops.ts";
import { countedTransitions } from "./runs.ts";
import { secretRedactor } from "./secrets.ts";

/**
 * `labfleet exec` as a job, as SSM Run Command runs one: starting it records the job and starts the `exec`
 * workflow (Step Functions in the cloud, the local executor here), and answers at once. Each step of the
 * workflow (ExecStep) checks the hosts whose command runs, collects what has ended, starts further hosts as
 * slots free up (`concurrency` at a time, none after `maxErrors` failures) and answers how long to wait before
 * the next check; between steps the workflow waits in a Wait state, so no function runs while a command does, and
 * a host's timeout (up to EXEC_MAX_TIMEOUT_SECONDS) is bounded by nothing but itself. On the host the command runs
 * detached (shared/fleet/exec-host.ts).
 *
 * The job and one item per host result live in the table (execJob, execResult) for EXEC_JOB_TTL_SECONDS. The
 * command itself is kept sealed while the job runs and removed when it ends. The `exec` event is recorded when
 * the job ends, never with output.
 */

export const EXEC_JOB_TTL_SECONDS = 24 * 3600;
/** Hosts checked at once within a step. */
const CHECK_CONCURRENCY = 16;
/** A host whose command has not ended this long past its timeout is given up on (and its command killed). */
const NO_ANSWER_GRACE_MS = 60_000;
/** Checks in a row that could not reach a host before its result is an error. */
const MAX_MISSES = 5;
const HOST_COMMAND_TIMEOUT_MS = 60_000;
/**
 * The longest a job runs in all: past it, what still runs is given up on. With the waits below, a job of this
 * length stays well inside Step Functions' 25,000 history events per execution (about 9 per step).
 */
export const EXEC_JOB_MAX_MS = 18 * 3600_000;

/** The wait before the next step: short at first, longer as the job goes on (fewer transitions for long ones). */
export function waitAfter(elapsedMs: number): number {
  const s = elapsedMs / 1000;
  return s < 10 ? 1 : s < 60 ? 2 : s < 300 ? 5 : s < 3600 ? 10 : 30;
}

/** Past what every wave of hosts could take, this long again before the job gives up on what still runs. */
const JOB_MARGIN_MS = 10 * 60_000;

export type ExecJobState = (typeof EXEC_JOB_STATES)[number];
export { EXEC_JOB_STATES };

export interface ExecJob extends ExecReport {
  jobId: string;
  /** running, cancelling (asked to stop: the next step ends what runs), succeeded, failed, cancelled. */
  state: ExecJobState;
  /** The command as the `exec` event keeps it (key-like values redacted, cut). */
  command: string;
  endedAt: string | null;
  /** The selected hosts, in the order results are answered. */
  selected: string[];
  /** The hosts whose command runs now. */
  running: string[];
  /** Hosts not started yet. */
  waiting: number;
  /**
   * The workflow's state transitions (what Step Functions bills): counted as it goes by the local executor,
   * from the execution's history once the job ended in the cloud.
   */
  transitions: number;
  /** Why the job failed outside its hosts (the workflow's own error). */
  error?: string;
}

const ended = (s: ExecJobState) => s === "succeeded" || s === "failed" || s === "cancelled";
const failedStatus = (s: string) => s === "failed" || s === "timeout" || s === "error";

/** Checks the input, the workshop and the selection, records the job and starts its workflow. */
export async function startExecJob(name: string, input: ExecInput): Promise<ExecJob> {
  const actor = assertActor("instructor", "system");
  const o = ExecInput.parse(input);
  const sel = { ...(o.hosts ? { hosts: o.hosts } : {}), ...(o.labels ? { labels: o.labels } : {}) };
  const { spec, hosts } = await selected(name, sel);
  if (hosts.length === 0) throw new VisibleError("input", "selection.empty", "no host matches the selection");
  const redact = await secretRedactor(spec);
  const { store, clock, accessKey, workflows } = useDeps();
  const now = clock.now();
  const jobId = createID("exec");
  await store.execJob
    .create({
      workshop: name,
      jobId,
      state: "running",
      command: seal(accessKey, o.command),
      commandText: commandForEvent(o.command, redact),
      hostIds: hosts.map((h) => h.hostId),
      concurrency: Math.min(o.concurrency ?? EXEC_DEFAULT_CONCURRENCY, hosts.length),
      ...(o.maxErrors !== undefined ? { maxErrors: o.maxErrors } : {}),
      timeoutSeconds: o.timeoutSeconds,
      by: actorName(actor),
      startedAt: now.toISOString(),
      expiresAt: Math.floor(now.getTime() / 1000) + EXEC_JOB_TTL_SECONDS,
    })
    .go();
  try {
    await workflows.start("exec", { workshop: name, runId: jobId });
  } catch (err) {
    await failExecJob(name, jobId, `the job could not start: ${errorMessage(err)}`, { started: false });
    throw err;
  }
  return execJob(name, jobId);
}

/** The job as it is now: its state, every host result so far (output bounded in all), the summary. */
export async function execJob(name: string, jobId: string): Promise<ExecJob> {
  const { store, clock } = useDeps();
  const job = (await store.execJob.get({ workshop: name, jobId }).go()).data;
  if (!job) throw new VisibleError("not_found", "exec.not_found", `no exec job ${jobId} in ${name}`);
  const items = await resultItems(name, jobId);
  const finals = job.hostIds.flatMap((id) => {
    const r = items.get(id);
    return r && r.status !== "running" ? [toResult(r)] : [];
  });
  const running = job.hostIds.filter((id) => items.get(id)?.status === "running");
  const shared = shareOutput(finals);
  const summary: ExecSummary = { ...summarize(shared.hosts), total: job.hostIds.length };
  const notes = [
    ...(job.stopped && !ended(job.state)
      ? [job.stopped.replace(/^not started: /, "no further host starts: ")]
      : []),
    ...(shared.cut ? [`the answer holds at most ${EXEC_TOTAL_OUTPUT_BYTES} bytes of output in all`] : []),
  ];
  const endMs = job.endedAt ? Date.parse(job.endedAt) : clock.now().getTime();
  return {
    jobId,
    workshop: name,
    state: job.state,
    command: job.commandText,
    ok: job.state === "succeeded",
    startedAt: job.startedAt,
    endedAt: job.endedAt ?? null,
    durationMs: Math.max(0, endMs - Date.parse(job.startedAt)),
    timeoutSeconds: job.timeoutSeconds,
    concurrency: job.concurrency,
    maxErrors: job.maxErrors ?? null,
    hosts: shared.hosts,
    selected: job.hostIds,
    running,
    waiting: job.hostIds.length - finals.length - running.length,
    summary,
    notes,
    transitions: job.transitions ?? 0,
    ...(job.error ? { error: job.error } : {}),
  };
}

/** Asks a running job to stop: the next step ends the commands still running and starts no further host. */
export async function cancelExecJob(name: string, jobId: string): Promise<ExecJob> {
  assertActor("instructor", "system");
  const { store } = useDeps();
  const job = (await store.execJob.get({ workshop: name, jobId }).go()).data;
  if (!job) throw new VisibleError("not_found", "exec.not_found", `no exec job ${jobId} in ${name}`);
  if (job.state === "running") {
    await store.execJob
      .patch({ workshop: name, jobId })
      .set({ state: "cancelling" })
      .where(({ state }, { eq }) => eq(state, "running"))
      .go()
      .catch(() => undefined); // it ended meanwhile: the answer below says how
  }
  return execJob(name, jobId);
}

/** Starts a job and waits until it has ended (for callers that want the whole report in one call). */
export async function execCommand(name: string, input: ExecInput, pollMs = 250): Promise<ExecJob> {
  let job = await startExecJob(name, input);
  while (!ended(job.state)) {
    await pause(pollMs);
    job = await execJob(name, job.jobId);
  }
  return job;
}

async function resultItems(workshop: string, jobId: string): Promise<Map<string, ExecResultItem>> {
  const { store } = useDeps();
  const { data } = await store.execResult.query.byJob({ workshop, jobId }).go({ pages: "all" });
  return new Map(data.map((r) => [r.hostId, r]));
}

function toResult(r: ExecResultItem): ExecHostResult {
  return {
    host: r.hostId,
    status: r.status === "running" ? "error" : r.status,
    exitCode: r.exitCode ?? null,
    stdout: r.stdout ?? "",
    stderr: r.stderr ?? "",
    stdoutTruncated: r.stdoutTruncated ?? false,
    stderrTruncated: r.stderrTruncated ?? false,
    stdoutBytes: r.stdoutBytes ?? 0,
    stderrBytes: r.stderrBytes ?? 0,
    durationMs: r.durationMs ?? 0,
    ...(r.reason ? { reason: r.reason } : {}),
  };
}

async function saveResult(job: ExecJobItem, r: ExecHostResult): Promise<void> {
  const { store, clock } = useDeps();
  await store.execResult
    .put({
      workshop: job.workshop,
      jobId: job.jobId,
      hostId: r.host,
      status: r.status,
      ...(r.exitCode !== null ? { exitCode: r.exitCode } : {}),
      stdout: r.stdout,
      stderr: r.stderr,
      stdoutTruncated: r.stdoutTruncated,
      stderrTruncated: r.stderrTruncated,
      stdoutBytes: r.stdoutBytes,
      stderrBytes: r.stderrBytes,
      durationMs: r.durationMs,
      ...(r.reason ? { reason: r.reason } : {}),
      updatedAt: isoNow(clock),
      expiresAt: job.expiresAt,
    })
    .go();
}

interface StepContext {
  job: ExecJobItem;
  spec: Workshop;
  provider: Provider;
  byId: Map<string, HostItem>;
  redact: (text: string) => string;
  caps: { stdout: number; stderr: number };
}

/**
 * One step of the `exec` workflow: checks the running hosts, starts more, and ends the job once every host has a
 * result. Idempotent (a retried step starts no host twice: the host keeps the job's record). Answers whether the
 * job is done and how long the workflow waits before the next step (waitAfter).
 */
export async function stepExecJob(
  workshop: string,
  jobId: string,
): Promise<{ done: boolean; waitSeconds: number }> {
  const { store, clock } = useDeps();
  const job = (await store.execJob.get({ workshop, jobId }).go()).data;
  if (!job || ended(job.state)) return { done: true, waitSeconds: 1 };
  const { spec, provider, hosts } = await selected(workshop, {});
  const ctx: StepContext = {
    job,
    spec,
    provider,
    byId: new Map(hosts.map((h) => [h.hostId, h])),
    redact: await secretRedactor(spec),
    caps: outputCaps(provider.transport),
  };
  const items = await resultItems(workshop, jobId);
  const cancelling = job.state === "cancelling";

  const running = job.hostIds.filter((id) => items.get(id)?.status === "running");
  await mapLimit(running, CHECK_CONCURRENCY, async (id) => {
    const item = items.get(id) as ExecResultItem;
    const r = cancelling ? await cancelHost(ctx, item) : await checkHost(ctx, item);
    if (r) {
      await saveResult(job, r);
      items.set(id, { ...item, status: r.status });
    }
  });

  // A job never outlives what its hosts could take one wave after another (and a margin): past that, what
  // still runs is given up on, so no execution loops forever on a host that never answers.
  const waves = Math.ceil(job.hostIds.length / Math.max(1, job.concurrency)) + 1;
  const overAt = Math.min(
    Date.parse(job.startedAt) + waves * (job.timeoutSeconds * 1000 + NO_ANSWER_GRACE_MS) + JOB_MARGIN_MS,
    Date.parse(job.startedAt) + EXEC_JOB_MAX_MS,
  );
  const over = clock.now().getTime() > overAt;
  if (over) {
    for (const id of job.hostIds.filter((h) => items.get(h)?.status === "running")) {
      const item = items.get(id) as ExecResultItem;
      const host = ctx.byId.get(id);
      if (host) await killOn(ctx, host);
      await saveResult(
        job,
        noOutput(
          id,
          "error",
          "the job ran out of time before this host answered",
          clock.now().getTime() - (item.startedMs ?? 0),
        ),
      );
      items.set(id, { ...item, status: "error" });
    }
  }

  const failures = [...items.values()].filter((r) => failedStatus(r.status)).length;
  let stopped = job.stopped;
  if (!stopped && over) stopped = "not started: the job ran out of time";
  if (!stopped && cancelling) stopped = "not started: the job was cancelled";
  if (!stopped && job.maxErrors !== undefined && failures >= job.maxErrors)
    stopped = `not started: ${failures} host${failures === 1 ? "" : "s"} failed (max errors ${job.maxErrors})`;

  const waiting = job.hostIds.filter((id) => !items.has(id));
  if (stopped) {
    for (const id of waiting) {
      const r = noOutput(id, "skipped", stopped);
      await saveResult(job, r);
      items.set(id, { ...(items.get(id) as ExecResultItem), status: "skipped" });
    }
  } else {
    const busy = job.hostIds.filter((id) => items.get(id)?.status === "running").length;
    const next = waiting.slice(0, Math.max(0, job.concurrency - busy));
    await mapLimit(next, CHECK_CONCURRENCY, async (id) => {
      if (timeLeft() < MIN_STEP_MS) return; // the next step starts it
      const status = await startHost(ctx, id);
      items.set(id, { ...(items.get(id) as ExecResultItem), status });
    });
  }

  if (
    job.hostIds.every((id) => {
      const s = items.get(id)?.status;
      return s !== undefined && s !== "running";
    })
  ) {
    await finishJob(job, cancelling);
    return { done: true, waitSeconds: 1 };
  }
  const steps = (job.steps ?? 0) + 1;
  await store.execJob
    .patch({ workshop, jobId })
    .set({ steps, ...(stopped ? { stopped } : {}) })
    .go();
  return { done: false, waitSeconds: waitAfter(clock.now().getTime() - Date.parse(job.startedAt)) };
}

/** Starts the command on one host (its result item first, so a retried step finds it); answers its status. */
async function startHost(ctx: StepContext, id: string): Promise<ExecResultItem["status"]> {
  const { store, clock, accessKey } = useDeps();
  const { job, spec, provider, caps, redact } = ctx;
  const host = ctx.byId.get(id);
  if (!host) {
    await saveResult(job, noOutput(id, "error", "the host is no longer in the fleet"));
    return "error";
  }
  const startedMs = clock.now().getTime();
  await store.execResult
    .put({
      workshop: job.workshop,
      jobId: job.jobId,
      hostId: id,
      status: "running",
      startedMs,
      updatedAt: isoNow(clock),
      expiresAt: job.expiresAt,
    })
    .go();
  const command = open(accessKey, job.command ?? "");
  try {
    const r = await withTransport(spec, provider, host, (t) =>
      t.exec(startScript(job.jobId), {
        step: "exec",
        stdin: execScript(command, job.timeoutSeconds, caps),
        timeoutMs: HOST_COMMAND_TIMEOUT_MS,
      }),
    );
    if (r.exitCode === 0 && r.stdout.includes("started")) return "running";
    await saveResult(
      job,
      noOutput(
        id,
        "error",
        `the host did not start the command (exit ${r.exitCode})`,
        clock.now().getTime() - startedMs,
      ),
    );
  } catch (e) {
    if (isVisibleError(e) && e.code === "host.out_of_time") {
      // Not started after all: the next step starts it.
      await store.execResult.delete({ workshop: job.workshop, jobId: job.jobId, hostId: id }).go();
      return "running";
    }
    await saveResult(job, noOutput(id, "error", redact(errorMessage(e)), clock.now().getTime() - startedMs));
  }
  return "error";
}

/** Checks one running host: its result once the command has ended, undefined while it runs. */
async function checkHost(ctx: StepContext, item: ExecResultItem): Promise<ExecHostResult | undefined> {
  const { store, clock } = useDeps();
  const { job, spec, provider, caps, redact } = ctx;
  const id = item.hostId;
  const host = ctx.byId.get(id);
  const elapsed = clock.now().getTime() - (item.startedMs ?? 0);
  if (!host) return noOutput(id, "error", "the host is no longer in the fleet", elapsed);
  const overdue = elapsed > job.timeoutSeconds * 1000 + NO_ANSWER_GRACE_MS;
  try {
    const r = await withTransport(spec, provider, host, (t) =>
      t.exec(pollScript(job.jobId), { step: "exec", timeoutMs: HOST_COMMAND_TIMEOUT_MS, brief: true }),
    );
    if (r.exitCode === POLL_RUNNING) {
      if (!overdue) return undefined;
      await killOn(ctx, host);
      return noOutput(id, "timeout", `no answer within ${job.timeoutSeconds} s`, elapsed);
    }
    if (r.exitCode === POLL_UNKNOWN)
      return noOutput(id, "error", "the host has no record of the command (was it reset?)", elapsed);
    if (r.exitCode === POLL_GONE)
      return noOutput(id, "error", "the command ended on the host without leaving a result", elapsed);
    if (r.exitCode !== 0) throw new Error(`checking the command failed (exit ${r.exitCode})`);
    const p = parsePoll(r.stdout, r.stderr);
    const parsed = parseExecOutput(p.stdout, p.stderr);
    const durationMs = p.ms > 0 ? p.ms : elapsed;
    if (!parsed)
      return noOutput(id, "error", "the host could not run the command (no temporary folder?)", durationMs);
    return resultOf(id, parsed, { seconds: job.timeoutSeconds, caps, redact, durationMs });
  } catch (e) {
    if (isVisibleError(e) && e.code === "host.out_of_time") return undefined;
    const misses = (item.misses ?? 0) + 1;
    if (misses >= MAX_MISSES || overdue) return noOutput(id, "error", redact(errorMessage(e)), elapsed);
    await store.execResult
      .patch({ workshop: job.workshop, jobId: job.jobId, hostId: id })
      .set({ misses, updatedAt: isoNow(clock) })
      .go();
    return undefined;
  }
}

/** Ends a running host's command for a cancelled job. */
async function cancelHost(ctx: StepContext, item: ExecResultItem): Promise<ExecHostResult> {
  const { clock } = useDeps();
  const elapsed = clock.now().getTime() - (item.startedMs ?? 0);
  const host = ctx.byId.get(item.hostId);
  if (host) {
    // A command that ended meanwhile keeps its result.
    const done = await checkHost(ctx, item).catch(() => undefined);
    if (done) return done;
    const killed = await killOn(ctx, host);
    if (!killed)
      return noOutput(
        item.hostId,
        "cancelled",
        "cancelled; the host could not be reached to end the command",
        elapsed,
      );
  }
  return noOutput(
    item.hostId,
    "cancelled",
    "cancelled while it ran: the command was ended on the host",
    elapsed,
  );
}

async function killOn(ctx: StepContext, host: HostItem): Promise<boolean> {
  try {
    await withTransport(ctx.spec, ctx.provider, host, (t) =>
      t.exec(killScript(ctx.job.jobId), { step: "exec", timeoutMs: HOST_COMMAND_TIMEOUT_MS }),
    );
    return true;
  } catch {
    return false;
  }
}

async function finishJob(job: ExecJobItem, cancelled: boolean): Promise<void> {
  const { store, clock } = useDeps();
  const items = await resultItems(job.workshop, job.jobId);
  const results = job.hostIds.map((id) => {
    const r = items.get(id);
    return r ? toResult(r) : noOutput(id, "error", "no result");
  });
  const summary = summarize(results);
  const state: ExecJobState = cancelled
    ? "cancelled"
    : summary.ok === results.length
      ? "succeeded"
      : "failed";
  await store.execJob
    .patch({ workshop: job.workshop, jobId: job.jobId })
    .set({ state, endedAt: isoNow(clock), ...(await countedTransitions(job.workshop, "exec", job.jobId)) })
    .remove(["command"])
    .go();
  await recordEvent({
    workshop: job.workshop,
    type: "exec",
    detail: {
      by: job.by,
      job: job.jobId,
      hosts: results.length,
      summary: summary.text,
      ok: summary.ok,
      failed: summary.failed + summary.timeout + summary.error,
      skipped: summary.skipped,
      ...(summary.cancelled ? { cancelled: summary.cancelled } : {}),
      command: job.commandText,
    },
  });
}

/** Exec jobs not ended (running or cancelling): what a restarted local runtime resumes (each step is idempotent). */
export async function unfinishedExecJobs(): Promise<{ workshop: string; jobId: string }[]> {
  const { store } = useDeps();
  const workshops = (await store.workshop.query.all({}).go({ pages: "all" })).data;
  const jobs = await Promise.all(
    workshops.map(
      async (w) => (await store.execJob.query.byWorkshop({ workshop: w.name }).go({ pages: "all" })).data,
    ),
  );
  return jobs
    .flat()
    .filter((j) => !ended(j.state))
    .map((j) => ({ workshop: j.workshop, jobId: j.jobId }));
}

/** The workflow's state transitions (the local executor counts them as Step Functions bills them). */
export async function addExecTransitions(workshop: string, jobId: string, n: number): Promise<void> {
  if (n <= 0) return;
  await useDeps().store.execJob.patch({ workshop, jobId }).add({ transitions: n }).go();
}

/**
 * The workflow failed outside its hosts' own results (a step's error, caught): the job fails with the reason,
 * its command is removed, and the `exec` event says so.
 */
/**
 * The job's workflow ended without its own steps ending the job (timed out, aborted, or failed outside its
 * Catch; cloud: ReconcileRun): the job fails with why, and true; false when the job had already ended. The
 * commands still running on hosts end there at their own timeout (the host-side `timeout`).
 */
export async function settleEndedExecJob(
  workshop: string,
  jobId: string,
  status: "FAILED" | "TIMED_OUT" | "ABORTED",
  error: string,
): Promise<boolean> {
  const job = (await useDeps().store.execJob.get({ workshop, jobId }).go()).data;
  if (!job || ended(job.state)) return false;
  const how = { FAILED: "failed", TIMED_OUT: "timed out", ABORTED: "was aborted" }[status];
  await failExecJob(
    workshop,
    jobId,
    `its workflow ${how} (${error}); commands still running end at their timeout`,
  );
  return true;
}

/** Fails the job with `error`; `started: false` when its workflow never started (no transitions to count). */
export async function failExecJob(
  workshop: string,
  jobId: string,
  error: string,
  o: { started?: boolean } = {},
): Promise<void> {
  const { store, clock } = useDeps();
  const job = (await store.execJob.get({ workshop, jobId }).go()).data;
  if (!job || ended(job.state)) return;
  let redact = (t: string) => t;
  try {
    redact = await secretRedactor((await selected(workshop, {})).spec);
  } catch {
    // the workshop cannot be read: the error is kept as it is (it names no operator secret then)
  }
  const message = redact(error).slice(0, 1000);
  await store.execJob
    .patch({ workshop, jobId })
    .set({
      state: "failed",
      endedAt: isoNow(clock),
      error: message,
      ...(o.started === false ? {} : await countedTransitions(workshop, "exec", jobId)),
    })
    .remove(["command"])
    .go();
  await recordEvent({
    workshop,
    type: "exec",
    detail: {
      by: job.by,
      job: jobId,
      hosts: job.hostIds.length,
      summary: `failed: ${message}`,
      command: job.commandText,
    },
  });
}
