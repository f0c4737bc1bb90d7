import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { createID } from "../runtime/ids.ts";
import { log } from "../runtime/logger.ts";
import type { RunItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { checkRef } from "./git.ts";
import { secretValues } from "./secrets.ts";
import { allStages, type Stage } from "./stages.ts";
import type { RunKind, WorkflowKind } from "./workflows.ts";
import { getWorkshop, listRuns } from "./workshops.ts";

/** What a run acts on and how: the options of startRun. */
export interface RunOptions {
  force?: boolean;
  /** Resolved host ids a deploy or retry acts on (none: every host). */
  hosts?: string[];
  ref?: string;
  concurrency?: number;
  /**
   * A change to the workshop made with the run's start, in the same conditional write that makes the run the
   * workshop's own (a scale records its new spec so): the run starts with the change or neither happens. It was
   * computed from the workshop as last updated at `basedOn`; a workshop changed since is refused (409). Such a
   * run never joins a running one.
   */
  change?: { spec: Workshop; removedHosts: string[]; basedOn: string };
  /**
   * The stages the run goes through (shared/fleet/stages.ts), recorded on the run when not every stage; a run
   * that deploys nothing (no deploy stage) needs no operator secret and no ref check at its start.
   */
  stages?: Stage[];
  /** More to say in the run's `run.started` event (ids, counts; never a secret). */
  event?: Record<string, unknown>;
  /**
   * Writes what the run's workflow reads (a rollout's records), once the run owns the workshop and before its
   * workflow starts. When it throws, the run fails with its reason and gives the workshop up.
   */
  beforeStart?: (runId: string) => Promise<void>;
}

/** Operator secrets the lab needs must all be in the secret store before any host is touched. */
export async function checkSecrets(spec: Workshop): Promise<void> {
  const { missing } = await secretValues(spec);
  if (missing.length > 0) {
    throw new VisibleError(
      "input",
      "secrets.missing",
      `operator secrets missing from the secret store: ${missing.join(", ")} (nothing was deployed)`,
      missing.map((k) => ({
        path: "lab.operator_secrets",
        message: `expected a value for ${k} in the secret store`,
      })),
    );
  }
}

/**
 * Starts a run of a workshop: `up`, `deploy` and `retry` (the up workflow on selected hosts), `provision`
 * (the up workflow up to the recorded hosts, deploying nothing) or `teardown`. A second start of the same
 * kind while one runs returns the running one (no duplicate work); teardown stops a running
 * up/deploy/retry/provision first. Secrets and the git ref are checked before a run that deploys starts. The
 * run record is written before the workflow starts, so a runtime that dies in between resumes it.
 */
export async function startRun(workshop: string, kind: RunKind, opts: RunOptions = {}): Promise<RunItem> {
  assertActor("instructor", "system");
  const { store, clock, workflows } = useDeps();
  const w = await getWorkshop(workshop);
  const active = w.activeRunId
    ? (await store.run.get({ workshop, runId: w.activeRunId }).go()).data
    : undefined;
  const current = active?.state === "running" ? active : undefined;

  if (opts.change && w.updatedAt !== opts.change.basedOn) {
    throw new VisibleError(
      "conflict",
      "workshop.changed",
      `workshop ${workshop} changed while this was being decided; try again`,
    );
  }
  if (current?.kind === kind && !opts.change) {
    // The same request again joins the running run; a different selection waits its turn.
    const same = (current.selection ?? []).join(",") === (opts.hosts ?? []).join(",");
    if (kind === "up" || kind === "provision" || kind === "teardown" || same) return current;
    throw new VisibleError(
      "conflict",
      "workshop.busy",
      `workshop ${workshop} is busy with a ${current.kind} run on other hosts (${current.runId})`,
    );
  }
  if (kind !== "teardown") {
    if (current?.kind === "teardown" || w.state === "tearing_down") {
      throw new VisibleError("conflict", "workshop.tearing_down", `workshop ${workshop} is being torn down`);
    }
    if (current) {
      throw new VisibleError(
        "conflict",
        "workshop.busy",
        `workshop ${workshop} is busy with a ${current.kind} run (${current.runId})`,
      );
    }
    // A provision run deploys nothing: the secrets and the ref are checked by the run that deploys.
    if (kind !== "provision" && (!opts.stages || opts.stages.includes("deploy"))) {
      const spec = w.spec as Workshop;
      await checkSecrets(spec);
      await checkRef(spec, opts.ref ?? spec.lab.ref);
    }
  } else if (current) {
    await abortRun(current, "stopped by teardown");
  }

  const runId = createID("run");
  const run = (
    await store.run
      .create({
        workshop,
        runId,
        kind,
        state: "running",
        force: opts.force ?? false,
        startedAt: isoNow(clock),
        ...(opts.hosts?.length ? { selection: opts.hosts } : {}),
        ...(opts.ref ? { ref: opts.ref } : {}),
        ...(opts.concurrency ? { concurrency: opts.concurrency } : {}),
        ...(opts.stages && !allStages(opts.stages) ? { stages: opts.stages } : {}),
      })
      .go()
  ).data;
  // One run owns a workshop at a time: the claim is a conditional write, so two concurrent starts
  // cannot both win. The loser gives its run record up and returns the winner's run.
  try {
    await store.workshop
      .patch({ name: workshop })
      .set({
        activeRunId: runId,
        lastRunId: runId,
        updatedAt: isoNow(clock),
        ...(kind === "teardown" ? { state: "tearing_down" as const } : {}),
        ...(opts.change ? { spec: opts.change.spec, removedHosts: opts.change.removedHosts } : {}),
      })
      .where((attr, op) =>
        [
          w.activeRunId ? op.eq(attr.activeRunId, w.activeRunId) : op.notExists(attr.activeRunId),
          ...(opts.change ? [op.eq(attr.updatedAt, opts.change.basedOn)] : []),
        ].join(" AND "),
      )
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    await store.run.delete({ workshop, runId }).go();
    const winner = (await getWorkshop(workshop)).activeRunId;
    const winning = winner ? (await store.run.get({ workshop, runId: winner }).go()).data : undefined;
    if (winning?.kind === kind && winning.state === "running" && !opts.change) return winning;
    throw new VisibleError(
      "conflict",
      winning?.state === "running" || !opts.change ? "workshop.busy" : "workshop.changed",
      winning?.state === "running"
        ? `workshop ${workshop} is busy with a ${winning.kind} run (${winning.runId}); try again once it ends`
        : opts.change
          ? `workshop ${workshop} changed while this was being decided; try again`
          : `workshop ${workshop} is busy with another run; try again`,
    );
  }
  log.info("run started", { workshop, runId, kind });
  // A deploy's or retry's selection goes with it, so the activity says which labs are rebuilt.
  const hosts = kind === "deploy" || kind === "retry" ? opts.hosts : undefined;
  await recordEvent({
    workshop,
    type: "run.started",
    runId,
    detail: {
      ...(hosts?.length ? { hosts } : {}),
      ...(opts.stages && !allStages(opts.stages) ? { stages: opts.stages } : {}),
      ...opts.event,
      kind,
    },
  });
  if (opts.beforeStart) {
    try {
      await opts.beforeStart(runId);
    } catch (err) {
      await failRunIfRunning(workshop, runId, errorMessage(err));
      throw err;
    }
  }
  await workflows.start(kind, { workshop, runId, force: opts.force ?? false });
  return run;
}

export function isConditionalFailure(err: unknown): boolean {
  const e = err as { name?: string; cause?: { name?: string } };
  return (
    e?.cause?.name === "ConditionalCheckFailedException" || e?.name === "ConditionalCheckFailedException"
  );
}

/** Gives the workshop up when its run ends (only if that run still owns it). */
export async function releaseWorkshop(workshop: string, runId: string): Promise<void> {
  const { store } = useDeps();
  try {
    await store.workshop
      .patch({ name: workshop })
      .remove(["activeRunId"])
      .where((attr, op) => op.eq(attr.activeRunId, runId))
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
  }
}

async function abortRun(run: RunItem, reason: string): Promise<void> {
  const { store, clock, workflows } = useDeps();
  await workflows.stop(run.runId);
  await store.run
    .patch({ workshop: run.workshop, runId: run.runId })
    .set({ state: "aborted", endedAt: isoNow(clock), error: reason })
    .go();
}

export async function getRun(workshop: string, runId: string): Promise<RunItem> {
  const { store } = useDeps();
  const run = (await store.run.get({ workshop, runId }).go()).data;
  if (!run) throw new VisibleError("not_found", "run.not_found", `no run ${runId} in workshop ${workshop}`);
  return run;
}

/**
 * A run's or an exec job's state transitions so far, where the workflow adapter counts them from the execution
 * (Step Functions): `{ transitions }`, to set in the record's write. Empty where the local executor adds them as
 * it goes, and when the count cannot be read (logged: it never fails the step that asks).
 */
export async function countedTransitions(
  workshop: string,
  kind: WorkflowKind,
  id: string,
): Promise<{ transitions?: number }> {
  const { workflows } = useDeps();
  if (!workflows.transitionsOf) return {};
  try {
    return { transitions: await workflows.transitionsOf(kind, id) };
  } catch (err) {
    log.warn("counting the state transitions failed", { workshop, kind, id, error: errorMessage(err) });
    return {};
  }
}

/** Records the run's transitions at its last step (see countedTransitions). */
export async function recordTransitions(workshop: string, runId: string, kind: RunKind): Promise<void> {
  const counted = await countedTransitions(workshop, kind, runId);
  if (counted.transitions !== undefined)
    await useDeps().store.run.patch({ workshop, runId }).set(counted).go();
}

/** Adds transitions counted by the executor to the run's record. */
export async function addTransitions(workshop: string, runId: string, n: number): Promise<void> {
  if (n <= 0) return;
  const { store } = useDeps();
  await store.run.patch({ workshop, runId }).add({ transitions: n }).go();
}

/** Marks a run failed if it is still running (the workflow itself failed outside its own handlers). */
export async function failRunIfRunning(workshop: string, runId: string, error: string): Promise<void> {
  const { store, clock } = useDeps();
  try {
    await store.run
      .patch({ workshop, runId })
      .set({ state: "failed", endedAt: isoNow(clock), error })
      .where(({ state }, { eq }) => eq(state, "running"))
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
  }
  await releaseWorkshop(workshop, runId);
}

/** Runs still marked running: what a restarted local runtime resumes. */
export async function unfinishedRuns(): Promise<RunItem[]> {
  const { store } = useDeps();
  const workshops = (await store.workshop.query.all({}).go({ pages: "all" })).data;
  const runs = await Promise.all(workshops.map((w) => listRuns(w.name)));
  return runs.flat().filter((r) => r.state === "running");
}
