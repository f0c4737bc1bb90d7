import { z } from "zod";
import { forgetStudentReads } from "../portal/reads.ts";
import type { Provider } from "../providers/types.ts";
import { actorName, assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { createID } from "../runtime/ids.ts";
import { log } from "../runtime/logger.ts";
import { byNumber } from "../runtime/text.ts";
import type { HostItem, RolloutHostItem, RolloutItem } from "../store/entities.ts";
import { makesHosts, type Workshop } from "../workshop/schema.ts";
import { type CheckItem, type CheckReport, checkReport } from "./check.ts";
import { recordEvent } from "./events.ts";
import { checkRef } from "./git.ts";
import { transportFor } from "./hosts.ts";
import { stopLab } from "./lab.ts";
import { deprovisionLabs, machineOf } from "./machines.ts";
import { getRun, releaseWorkshop, startRun } from "./runs.ts";
import { getWorkshop, listHosts } from "./workshops.ts";

/**
 * A rollout moves a running workshop's labs to a new git ref without stranding a student, as a boot-once
 * upgrade does: the new version is tried where a failure costs nothing, and it becomes the default only once
 * every lab has passed its health gate on it.
 *
 * - Providers that create hosts (local, aws) replace: each lab's new machine is built at the new ref beside the
 *   old one (shared/fleet/machines.ts); only when it passes `lab.health` does the lab's record point at it (so
 *   the board, the student's link and lab cookie open it), and the old machine is removed after that. A new
 *   machine that fails is removed and changes nothing for anyone.
 * - Bring-your-own hosts (static) cannot be replaced: they are updated in place, off the board while they build;
 *   one whose update fails stays off the board ("needs attention") until `labfleet retry` rebuilds it or a later
 *   rollout (back to the old ref, or on to a fixed one) updates it in place again.
 * - Claimed labs are left alone unless `includeClaimed`; then their students' lab pages say the lab is about to
 *   be updated, and then that it has been. A lab claimed while the rollout runs is held to the same rule: its
 *   claim is read again as its batch starts and when its new machine is promoted (a conditional write against
 *   the claim, so a claim and a promotion cannot cross), and without `includeClaimed` the lab is left as it is
 *   (its new machine removed), recorded as skipped with the reason.
 * - Canary labs go first (unclaimed ones before claimed ones), then batches; the first failure halts the
 *   rollout: no further batch starts. `resumeRollout` goes on after a fix, `abortRollout` stops and removes new
 *   machines not yet promoted. The workshop's lab.ref becomes the new ref when every lab is done.
 *
 * The workflow (stepfunctions/rollout.asl.json) runs the steps in shared/fleet/rollout-steps.ts.
 */

export const RolloutOptions = z.object({
  ref: z
    .string()
    .regex(/^[\w./-]{1,200}$/, { error: "expected a git branch, tag or commit" })
    .meta({
      description: "the git ref to roll out (a branch, tag or commit of lab.source)",
      example: "v2",
    }),
  canary: z
    .number()
    .int()
    .min(1)
    .max(1000)
    .default(1)
    .meta({ description: "labs updated first, alone; the rollout halts if one fails" }),
  batch: z
    .number()
    .int()
    .min(1)
    .max(1000)
    .optional()
    .meta({ description: "labs per batch after the canary (default: a quarter of the fleet, at least 1)" }),
  includeClaimed: z
    .boolean()
    .default(false)
    .meta({ description: "also update labs students have claimed (they are told before and after)" }),
});
export type RolloutOptions = z.input<typeof RolloutOptions>;

export interface PlannedHost {
  hostId: string;
  batch: number;
  mode: "replace" | "in_place";
  fromRef: string | null;
  student: string | null;
  /** A bring-your-own host an earlier rollout left needing attention: updated in place from where it is. */
  needsAttention: boolean;
}

export interface RolloutPlan {
  spec: Workshop;
  provider: Provider;
  ref: string;
  canary: number;
  batch: number;
  hosts: PlannedHost[];
  /** What each lab would do, as check mode reports it. */
  items: CheckItem[];
}

/** The ref a lab is built at: the one a rollout built it at, else the workshop's lab.ref. */
export function refOf(spec: Workshop, host: Pick<HostItem, "ref">): string | null {
  return host.ref ?? spec.lab.ref ?? null;
}

/** Whether a provider can make a new host beside an old one (local, aws); bring-your-own and enrolled hosts cannot. */
export function replaces(provider: Provider): boolean {
  return makesHosts(provider.name);
}

/** The default batch: a quarter of the fleet, at least one. */
export function defaultBatch(fleet: number): number {
  return Math.max(1, Math.ceil(fleet / 4));
}

/** Which labs a rollout would update, in which batch and how, and which it would leave alone and why. */
export async function planRollout(workshop: string, options: RolloutOptions): Promise<RolloutPlan> {
  const opts = RolloutOptions.parse(options);
  const { store, providers } = useDeps();
  const w = await getWorkshop(workshop);
  const spec = w.spec as Workshop;
  const provider = providers[spec.provider.type];
  if (!provider)
    throw new VisibleError(
      "input",
      "provider.unavailable",
      `provider ${spec.provider.type} is not available here`,
    );
  const live = (await listHosts(workshop)).filter((h) => h.state !== "torn_down");
  if (live.length === 0)
    throw new VisibleError("conflict", "rollout.no_labs", `workshop ${workshop} has no labs to roll out to`);
  const claims = (await store.claim.query.byWorkshop({ workshop }).go({ pages: "all" })).data;
  const studentOf = new Map(claims.map((c) => [c.hostId, c.name]));
  const batch = opts.batch ?? defaultBatch(live.length);
  const mode = replaces(provider) ? ("replace" as const) : ("in_place" as const);
  const attention =
    mode === "in_place"
      ? await leftNeedingAttention(
          workshop,
          live.filter((h) => h.state === "failed"),
        )
      : new Map<string, string>();
  const items: CheckItem[] = [];
  const chosen: Omit<PlannedHost, "batch">[] = [];
  for (const h of [...live].sort((a, b) => byNumber(a.hostId, b.hostId))) {
    const failedRef = attention.get(h.hostId);
    // A host left needing attention holds the ref its failed update was going to, whatever its record says.
    const fromRef = failedRef ?? refOf(spec, h);
    const student = studentOf.get(h.hostId) ?? null;
    if (failedRef !== undefined && (student === null || opts.includeClaimed)) {
      chosen.push({ hostId: h.hostId, mode, fromRef, student, needsAttention: true });
    } else if (fromRef === opts.ref) {
      items.push({ hostId: h.hostId, stage: "rollout", action: "skip", detail: `already at ${opts.ref}` });
    } else if (student !== null && !opts.includeClaimed) {
      items.push({
        hostId: h.hostId,
        stage: "rollout",
        action: "skip",
        detail: `claimed by ${student} (--include-claimed updates it)`,
      });
    } else if (h.state !== "ready") {
      items.push({
        hostId: h.hostId,
        stage: "rollout",
        action: "skip",
        detail: `not ready (${h.state}): labfleet retry rebuilds it`,
      });
    } else chosen.push({ hostId: h.hostId, mode, fromRef, student, needsAttention: false });
  }
  // Unclaimed labs first: the canary is tried where a failure costs nothing.
  chosen.sort(
    (a, b) => Number(a.student !== null) - Number(b.student !== null) || byNumber(a.hostId, b.hostId),
  );
  const hosts = chosen.map((h, i) => ({
    ...h,
    batch: i < opts.canary ? 0 : 1 + Math.floor((i - opts.canary) / batch),
  }));
  for (const h of hosts) {
    const at = h.batch === 0 ? "canary" : `batch ${h.batch}`;
    const from = h.fromRef ?? "the default branch";
    const student = h.student ? `; ${h.student} is told before and after` : "";
    items.push({
      hostId: h.hostId,
      stage: "rollout",
      action: h.mode === "replace" ? "promote" : "rebuild",
      detail:
        h.mode === "replace"
          ? `${at}: a new host at ${opts.ref} beside it (now ${from}), promoted once lab.health passes${student}`
          : h.needsAttention
            ? `${at}: needs attention since its update to ${from} failed; updated in place to ${opts.ref} (bring-your-own host)${student}`
            : `${at}: updated in place from ${from} to ${opts.ref} (bring-your-own host)${student}`,
    });
  }
  items.sort((a, b) => byNumber(a.hostId, b.hostId));
  return { spec, provider, ref: opts.ref, canary: opts.canary, batch, hosts, items };
}

/**
 * Bring-your-own hosts that an earlier rollout left needing attention, with the ref that rollout was updating
 * them to: of the `failed` hosts given, those whose latest rollout record says their in-place update started and
 * then failed or was stopped. A later rollout updates them in place again (back to the old ref, or on).
 */
async function leftNeedingAttention(
  workshop: string,
  failed: readonly HostItem[],
): Promise<Map<string, string>> {
  const left = new Map<string, string>();
  const open = new Set(failed.map((h) => h.hostId));
  if (open.size === 0) return left;
  const { store } = useDeps();
  const rollouts = (await store.rollout.query.byWorkshop({ workshop }).go({ order: "desc", pages: "all" }))
    .data;
  for (const r of rollouts) {
    if (open.size === 0) break;
    for (const rh of await rolloutHosts(workshop, r.rolloutId)) {
      if (!open.has(rh.hostId)) continue;
      open.delete(rh.hostId); // the latest rollout that had the host decides
      if (rh.mode === "in_place" && (rh.state === "failed" || rh.state === "aborted") && rh.startedAt)
        left.set(rh.hostId, r.ref);
    }
  }
  return left;
}

/** `rollout --check`: what a rollout would do to each lab, with nothing changed. */
export async function checkRollout(workshop: string, options: RolloutOptions): Promise<CheckReport> {
  assertActor("instructor", "system");
  const plan = await planRollout(workshop, options);
  // The ref is checked as a start checks it: a check that passes means the rollout would start.
  await checkRef(plan.spec, plan.ref);
  return checkReport(workshop, "rollout", plan.items);
}

/** The workshop's latest rollout, if it has one. */
export async function latestRollout(workshop: string): Promise<RolloutItem | undefined> {
  const { store } = useDeps();
  const r = await store.rollout.query.byWorkshop({ workshop }).go({ order: "desc", limit: 1 });
  return r.data[0];
}

export async function rolloutHosts(workshop: string, rolloutId: string): Promise<RolloutHostItem[]> {
  const { store } = useDeps();
  return (await store.rolloutHost.query.byRollout({ workshop, rolloutId }).go({ pages: "all" })).data.sort(
    (a, b) => a.batch - b.batch || byNumber(a.hostId, b.hostId),
  );
}

export interface RolloutHostView {
  hostId: string;
  batch: number;
  mode: "replace" | "in_place";
  state: RolloutHostItem["state"];
  fromRef: string | null;
  toRef: string;
  gate: "passed" | "failed" | null;
  student: string | null;
  /** Why the rollout left the lab alone (state skipped). */
  reason: string | null;
  /** A host an earlier rollout left needing attention, updated in place again by this one. */
  needsAttention: boolean;
  error: string | null;
  logTail: string | null;
  startedAt: string | null;
  endedAt: string | null;
}

export interface RolloutView {
  id: string;
  workshop: string;
  ref: string;
  fromRef: string | null;
  state: RolloutItem["state"];
  canary: number;
  batch: number;
  includeClaimed: boolean;
  runId: string;
  by: string | null;
  error: string | null;
  createdAt: string;
  endedAt: string | null;
  hosts: RolloutHostView[];
}

function view(r: RolloutItem, hosts: RolloutHostItem[]): RolloutView {
  return {
    id: r.rolloutId,
    workshop: r.workshop,
    ref: r.ref,
    fromRef: r.fromRef ?? null,
    state: r.state,
    canary: r.canary,
    batch: r.batch,
    includeClaimed: r.includeClaimed ?? false,
    runId: r.runId,
    by: r.by ?? null,
    error: r.error ?? null,
    createdAt: r.createdAt,
    endedAt: r.endedAt ?? null,
    hosts: hosts.map((h) => ({
      hostId: h.hostId,
      batch: h.batch,
      mode: h.mode,
      state: h.state,
      fromRef: h.fromRef ?? null,
      toRef: r.ref,
      gate: h.gate ?? null,
      student: h.student ?? null,
      reason: h.reason ?? null,
      needsAttention: h.needsAttention ?? false,
      error: h.error ?? null,
      logTail: h.logTail ?? null,
      startedAt: h.startedAt ?? null,
      endedAt: h.endedAt ?? null,
    })),
  };
}

/**
 * What an instructor's rollout action acts on: the workshop's latest rollout (the workshop must exist). None is
 * not found; with `running`, one that is not running is a conflict.
 */
async function actOnRollout(workshop: string, opts: { running?: boolean } = {}): Promise<RolloutItem> {
  assertActor("instructor", "system");
  await getWorkshop(workshop);
  const r = await latestRollout(workshop);
  if (opts.running && r?.state !== "running")
    throw new VisibleError("conflict", "rollout.not_running", `workshop ${workshop} has no rollout running`);
  if (!r) throw new VisibleError("not_found", "rollout.not_found", `workshop ${workshop} has had no rollout`);
  return r;
}

/** The workshop's latest rollout with each of its labs. */
export async function rolloutStatus(workshop: string): Promise<RolloutView> {
  const r = await actOnRollout(workshop);
  return view(r, await rolloutHosts(workshop, r.rolloutId));
}

/**
 * Starts a rollout: plans it, records it with each lab it updates, and starts its run (which owns the workshop
 * as any run does: a workshop busy with another run is refused). A plan that would change nothing is refused.
 */
export async function startRollout(workshop: string, options: RolloutOptions): Promise<RolloutView> {
  assertActor("instructor", "system");
  const opts = RolloutOptions.parse(options);
  const { store, clock } = useDeps();
  const current = await latestRollout(workshop);
  if (current?.state === "running")
    throw new VisibleError(
      "conflict",
      "rollout.running",
      `workshop ${workshop} has a rollout to ${current.ref} running: see labfleet rollout ${workshop} --status, or stop it with --abort`,
    );
  const plan = await planRollout(workshop, opts);
  if (plan.hosts.length === 0)
    throw new VisibleError(
      "conflict",
      "rollout.nothing_to_do",
      `no lab of ${workshop} would be updated to ${opts.ref}: ${plan.items.map((i) => `${i.hostId} ${i.detail}`).join("; ")}`,
    );
  const rolloutId = createID("rollout");
  const run = await startRun(workshop, "rollout", {
    ref: opts.ref,
    event: { rolloutId, ref: opts.ref, labs: plan.hosts.length },
    // The rollout's records are written before its workflow starts: its first step reads them.
    beforeStart: async (runId) => {
      const now = isoNow(clock);
      for (const h of plan.hosts)
        await store.rolloutHost
          .create({
            workshop,
            rolloutId,
            hostId: h.hostId,
            batch: h.batch,
            mode: h.mode,
            state: "pending",
            ...(h.fromRef ? { fromRef: h.fromRef } : {}),
            ...(h.student ? { student: h.student } : {}),
            ...(h.needsAttention ? { needsAttention: true } : {}),
            updatedAt: now,
          })
          .go();
      await store.rollout
        .create({
          workshop,
          rolloutId,
          ref: opts.ref,
          ...(plan.spec.lab.ref ? { fromRef: plan.spec.lab.ref } : {}),
          state: "running",
          canary: opts.canary,
          batch: plan.batch,
          includeClaimed: opts.includeClaimed,
          runId,
          by: actorName(),
          createdAt: now,
          updatedAt: now,
        })
        .go();
    },
  });
  log.info("rollout started", { workshop, rolloutId, runId: run.runId, labs: plan.hosts.length });
  await recordEvent({
    workshop,
    type: "rollout.started",
    runId: run.runId,
    detail: { ref: opts.ref, labs: plan.hosts.length, canary: opts.canary, batch: plan.batch },
  });
  return rolloutStatus(workshop);
}

/**
 * Goes on with a rollout that halted (after a fix of the ref's lab) or was aborted: its failed and stopped labs
 * are tried again, then the batches it had not reached. A rollout still running is left to run (its workflow
 * is started again, which joins it).
 */
export async function resumeRollout(workshop: string): Promise<RolloutView> {
  const { store, clock, workflows } = useDeps();
  const r = await actOnRollout(workshop);
  if (r.state === "completed")
    throw new VisibleError("conflict", "rollout.completed", `the rollout to ${r.ref} has completed`);
  if (r.state === "running") {
    const run = await getRun(workshop, r.runId);
    if (run.state === "running") {
      await workflows.start("rollout", { workshop, runId: r.runId, force: false });
      return rolloutStatus(workshop);
    }
  }
  await startRun(workshop, "rollout", {
    ref: r.ref,
    event: { rolloutId: r.rolloutId, ref: r.ref, resumed: true },
    beforeStart: async (runId) => {
      const now = isoNow(clock);
      for (const h of await rolloutHosts(workshop, r.rolloutId)) {
        if (h.state !== "failed" && h.state !== "aborted" && h.state !== "building") continue;
        await store.rolloutHost
          .patch({ workshop, rolloutId: r.rolloutId, hostId: h.hostId })
          .set({ state: "pending", updatedAt: now })
          .remove(["gate", "error", "logTail", "endedAt", "healthFailures"])
          .go();
      }
      await store.rollout
        .patch({ workshop, rolloutId: r.rolloutId })
        .set({ state: "running", runId, updatedAt: now })
        .remove(["error", "endedAt", "batchIndex", "batchDeadline"])
        .go();
    },
  });
  return rolloutStatus(workshop);
}

/**
 * Stops a running rollout: its workflow stops, new machines not yet promoted are removed, a bring-your-own host
 * caught mid-update stays off the board (needs attention). Labs already promoted keep their new version.
 */
export async function abortRollout(workshop: string): Promise<RolloutView> {
  const { store, clock, workflows } = useDeps();
  const r = await actOnRollout(workshop, { running: true });
  await workflows.stop(r.runId);
  const now = isoNow(clock);
  await store.run
    .patch({ workshop, runId: r.runId })
    .set({ state: "aborted", endedAt: now, error: `rollout aborted by ${actorName()}` })
    .go();
  await stopUnpromoted(workshop, r, "aborted");
  await store.rollout
    .patch({ workshop, rolloutId: r.rolloutId })
    .set({ state: "aborted", endedAt: now, updatedAt: now })
    .go();
  await releaseWorkshop(workshop, r.runId);
  await recordEvent({
    workshop,
    type: "rollout.finished",
    runId: r.runId,
    detail: { ref: r.ref, state: "aborted" },
  });
  return rolloutStatus(workshop);
}

/**
 * Labs of a rollout still waiting or building when it stops: a new machine is removed (the lab stays on its old
 * one), a host updated in place is stopped and stays off the board, a waiting lab is marked with `state`.
 */
export async function stopUnpromoted(workshop: string, r: RolloutItem, state: "aborted" | "failed") {
  const { store, clock, providers } = useDeps();
  const spec = (await getWorkshop(workshop)).spec as Workshop;
  const provider = providers[spec.provider.type];
  const now = isoNow(clock);
  for (const h of await rolloutHosts(workshop, r.rolloutId)) {
    if (h.state !== "pending" && h.state !== "building") continue;
    if (h.state === "building" && provider)
      await discardNew(spec, provider, h).catch((err) =>
        log.warn("removing a rollout's new host failed", {
          workshop,
          hostId: h.hostId,
          error: errorMessage(err),
        }),
      );
    if (h.state === "building" && h.mode === "in_place")
      await store.host
        .patch({ workshop, hostId: h.hostId })
        .set({
          state: "failed",
          error: `needs attention: its update to ${r.ref} was stopped; labfleet retry or a rollout rebuilds it`,
          updatedAt: now,
        })
        .go();
    await store.rolloutHost
      .patch({ workshop, rolloutId: r.rolloutId, hostId: h.hostId })
      .set({
        state,
        updatedAt: now,
        endedAt: now,
        ...(state === "aborted" ? { error: "stopped by --abort" } : {}),
      })
      .go();
    await clearNotice(workshop, h.hostId, "updating");
  }
  forgetStudentReads(workshop);
}

/**
 * Removes a lab's new machine that was not promoted (replace), or stops the update of a host in place. The lab's
 * record, and so its student, is not touched here.
 */
export async function discardNew(spec: Workshop, provider: Provider, h: RolloutHostItem): Promise<void> {
  const { store } = useDeps();
  const host = (await store.host.get({ workshop: spec.name, hostId: h.hostId }).go()).data;
  if (h.mode === "in_place") {
    if (!host?.address) return;
    const t = transportFor(spec, provider, host);
    try {
      await stopLab(t, spec.name);
    } finally {
      await t.close?.();
    }
    return;
  }
  // Already promoted (the lab's record points at it), or never made: nothing to remove.
  if (!h.machine || !host || machineOf(host) === h.machine) return;
  if (h.address && !provider.deprovisionEndsLabs) {
    const t = transportFor(spec, provider, { ...host, address: h.address });
    try {
      await stopLab(t, spec.name).catch(() => undefined);
    } finally {
      await t.close?.();
    }
  }
  const [result] = await deprovisionLabs(provider, spec, [{ hostId: h.hostId, machine: h.machine }]);
  if (result?.result === "error") throw new Error(`removing the new host failed: ${result.detail ?? ""}`);
}

/** Clears a lab's rollout notice if it still says `which`. */
export async function clearNotice(workshop: string, hostId: string, which: "updating" | "updated") {
  const { store } = useDeps();
  try {
    await store.host
      .patch({ workshop, hostId })
      .remove(["notice", "noticeAt"])
      .where((a, op) => op.eq(a.notice, which))
      .go();
  } catch (err) {
    const e = err as { cause?: { name?: string }; name?: string };
    if (e?.cause?.name !== "ConditionalCheckFailedException" && e?.name !== "ConditionalCheckFailedException")
      throw err;
  }
}
