import { forgetStudentReads } from "../portal/reads.ts";
import type { Provider } from "../providers/types.ts";
import { isoNow } from "../runtime/clock.ts";
import { mapLimit } from "../runtime/concurrency.ts";
import { seal } from "../runtime/crypto.ts";
import { timeLeft } from "../runtime/deadline.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { ClaimItem, HostItem, RolloutHostItem, RolloutItem } from "../store/entities.ts";
import type { Transport } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { pinHostKeysThrough } from "./host-keys.ts";
import { recordHostLife } from "./host-lives.ts";
import { transportFor } from "./hosts.ts";
import {
  HEALTH_GRACE_SECONDS,
  judge,
  LabStepError,
  lastLines,
  parsePhases,
  probeLab,
  stopLab,
} from "./lab.ts";
import { judgeLab, leftRunning, startSetup } from "./lab-deploy.ts";
import { deprovisionLabs, machineOf, otherMachine, provisionLabs } from "./machines.ts";
import { clearNotice, discardNew, latestRollout, rolloutHosts, stopUnpromoted } from "./rollout.ts";
import { checkSecrets, getRun, isConditionalFailure, recordTransitions, releaseWorkshop } from "./runs.ts";
import { publishSecretParameter, removeSecretParameter, secretRedactor } from "./secrets.ts";
import { timePhases } from "./timeline.ts";
import { boundConcurrency, fanOutWidth, loadWorkshop, POLL_MIN_HOST_MS } from "./up.ts";
import { getWorkshop, listHosts } from "./workshops.ts";

/**
 * The steps of the rollout workflow (stepfunctions/rollout.asl.json), each called by one thin handler in
 * functions/. Every step is idempotent and reads where the rollout is from its records, so a restarted runtime
 * (or a resumed rollout) starts the workflow again from its first state and goes on where it stopped.
 */

/** The rollout a run carries; a run that carries none (or another one) is an error. */
async function rolloutOfRun(workshop: string, runId: string): Promise<RolloutItem> {
  const r = await latestRollout(workshop);
  if (!r || r.runId !== runId)
    throw new VisibleError(
      "not_found",
      "rollout.not_found",
      `run ${runId} carries no rollout of ${workshop}`,
    );
  return r;
}

const key = (r: RolloutItem, hostId: string) => ({ workshop: r.workshop, rolloutId: r.rolloutId, hostId });

async function patchRolloutHost(r: RolloutItem, hostId: string, set: Partial<RolloutHostItem>) {
  const { store, clock } = useDeps();
  await store.rolloutHost
    .patch(key(r, hostId))
    .set({ ...set, updatedAt: isoNow(clock) } as never)
    .go();
}

export interface RolloutSettings {
  concurrency: number;
  pollSeconds: number;
}

/** The rollout's settings; before any host is touched, the operator secrets its labs need. */
export async function beginRollout(workshop: string, runId: string): Promise<RolloutSettings> {
  const { spec } = await loadWorkshop(workshop);
  const r = await rolloutOfRun(workshop, runId);
  await checkSecrets(spec);
  await publishSecretParameter(spec);
  return {
    concurrency: boundConcurrency(Math.max(r.canary, r.batch), await useDeps().taskConcurrency?.()),
    pollSeconds: spec.lab.poll_seconds,
  };
}

export interface NextBatch {
  /** The labs of the batch still to build (none when done). */
  hosts: string[];
  /** No batch is left, or a failure halted the rollout. */
  done: boolean;
  /** When the batch's labs must have passed their gate. */
  deadline: string;
}

/**
 * The next batch: the first one with a lab not yet done. A failed lab halts the rollout (done, no batch starts).
 * A batch's deadline (lab.timeout_minutes) is fixed when it starts, so a resumed run keeps it.
 */
export async function nextRolloutBatch(workshop: string, runId: string): Promise<NextBatch> {
  const { store, clock } = useDeps();
  const { spec } = await loadWorkshop(workshop);
  const r = await rolloutOfRun(workshop, runId);
  const hosts = await rolloutHosts(workshop, r.rolloutId);
  const now = isoNow(clock);
  if (hosts.some((h) => h.state === "failed")) return { hosts: [], done: true, deadline: now };
  const open = hosts.filter((h) => h.state === "pending" || h.state === "building");
  const first = open[0];
  if (!first) return { hosts: [], done: true, deadline: now };
  let deadline = r.batchDeadline;
  if (r.batchIndex !== first.batch || !deadline) {
    deadline = new Date(clock.now().getTime() + spec.lab.timeout_minutes * 60_000).toISOString();
    await store.rollout
      .patch({ workshop, rolloutId: r.rolloutId })
      .set({ batchIndex: first.batch, batchDeadline: deadline, updatedAt: now })
      .go();
  }
  return { hosts: open.filter((h) => h.batch === first.batch).map((h) => h.hostId), done: false, deadline };
}

/** How to reach a lab's new machine (replace) or the host itself (in place). */
function newLabTransport(spec: Workshop, provider: Provider, host: HostItem, rh: RolloutHostItem): Transport {
  if (rh.mode === "in_place" || !rh.address) return transportFor(spec, provider, host);
  return transportFor(spec, provider, { ...host, address: rh.address });
}

/** The lab's claim as the store has it now (a strongly consistent read: a claim made a moment ago counts). */
async function claimNow(workshop: string, hostId: string): Promise<ClaimItem | null> {
  return (await useDeps().store.claim.get({ workshop, hostId }).go({ consistent: true })).data;
}

/**
 * Starts one lab's update. Its claim is read again first: a lab a student claimed since the rollout was planned
 * is left alone without includeClaimed (leaveAlone); with it, and for a lab claimed from the start, its student's
 * page says it is about to be updated before anything changes. Replace: provisions the lab's new machine beside
 * the old one and starts the setup at the new ref there. In place: the host leaves the board (deploying, in one
 * transaction with a check that nobody claimed it, unless claimed labs are included) and its setup is started
 * again at the new ref. A setup this run already started is left running.
 */
export async function startRolloutHost(
  workshop: string,
  runId: string,
  hostId: string,
  tries = 0,
): Promise<{ hostId: string }> {
  const { store, clock } = useDeps();
  const { spec, provider } = await loadWorkshop(workshop);
  const r = await rolloutOfRun(workshop, runId);
  const rh = (await store.rolloutHost.get(key(r, hostId)).go()).data;
  if (!rh || (rh.state !== "pending" && rh.state !== "building")) return { hostId };
  const host = (await store.host.get({ workshop, hostId }).go()).data;
  if (!host || host.state === "torn_down")
    throw new LabStepError(`lab ${hostId} is no longer part of the workshop`);
  const inPlaceStarted = rh.mode === "in_place" && rh.state === "building";
  const claim = await claimNow(workshop, hostId);
  // A host already being updated in place is off the board and is finished, whoever holds it: stopping it would
  // leave it needing attention.
  if (claim && !r.includeClaimed && !inPlaceStarted) {
    await leaveAlone(spec, provider, r, rh, claim.name);
    return { hostId };
  }
  if (claim && claim.name !== rh.student) {
    await patchRolloutHost(r, hostId, { student: claim.name });
    rh.student = claim.name;
  }
  if (claim && (rh.mode === "replace" || inPlaceStarted)) await tellStudent(workshop, hostId);
  let target = rh;
  if (rh.mode === "replace") {
    const machine = rh.machine ?? otherMachine(host);
    const w = await getWorkshop(workshop);
    const [made] = await provisionLabs(provider, spec, [{ hostId, machine }], {
      ...(w.expiry ? { expiry: new Date(w.expiry) } : {}),
      attempt: runId,
    });
    if (!made || made.error)
      throw new LabStepError(`the new host could not be made: ${made?.error ?? "no answer"}`);
    const fields = {
      machine,
      address: made.address,
      ...(made.providerId ? { providerId: made.providerId } : {}),
      ...(made.publicIp ? { publicIp: made.publicIp } : {}),
    };
    await patchRolloutHost(r, hostId, {
      state: "building",
      ...fields,
      startedAt: rh.startedAt ?? isoNow(clock),
    });
    target = { ...rh, ...fields, state: "building" };
  } else if (!inPlaceStarted) {
    const taken = await takeOffBoard(r, rh, claim !== null);
    if (taken === "claimed") {
      // A claim landed between the read and the write: read it again and decide as above.
      if (tries >= 2) throw new LabStepError(`lab ${hostId}'s claim kept changing as its update started`);
      return startRolloutHost(workshop, runId, hostId, tries + 1);
    }
    if (taken === "not_ready") {
      const now = (await store.host.get({ workshop, hostId }).go()).data;
      await leaveAlone(
        spec,
        provider,
        r,
        rh,
        null,
        `no longer ready (${now?.state ?? "gone"}) when its batch started`,
      );
      return { hostId };
    }
    await patchRolloutHost(r, hostId, { state: "building", startedAt: rh.startedAt ?? isoNow(clock) });
  }
  const t = newLabTransport(spec, provider, host, target);
  try {
    const probe = await probeLab(t, workshop).catch(() => undefined);
    // A resumed run finds the setup it started: running or finished, it is followed, not started again.
    if (probe?.runId === runId && judge(probe).state !== "not_started") return { hostId };
    await startSetup(t, spec, provider, {
      hostId,
      runId,
      ref: r.ref,
      stop: leftRunning(probe),
      what: "the new host",
    });
    log.info("rollout: lab started at the new ref", { workshop, hostId, ref: r.ref });
    return { hostId };
  } finally {
    await t.close?.();
  }
}

/** A claimed lab's page says it is about to be updated (shared/portal/claims.ts, labForLink). */
async function tellStudent(workshop: string, hostId: string) {
  await useDeps()
    .store.host.patch({ workshop, hostId })
    .set({ notice: "updating", noticeAt: isoNow(useDeps().clock) })
    .go();
  forgetStudentReads(workshop);
}

/**
 * An in-place update takes the host off the board (deploying), in one transaction with what makes that safe: the
 * host is in the state the plan found it in (ready; or failed, for a host an earlier update left needing
 * attention or one this rollout is trying again), and, when the lab was unclaimed as read, it still has no claim.
 * Every portal claim checks the lab is ready in its own transaction (shared/portal/claims.ts), so no student can
 * get the host once it is off the board. A claimed lab's student is told in the same write.
 */
async function takeOffBoard(
  r: RolloutItem,
  rh: RolloutHostItem,
  claimed: boolean,
): Promise<"taken" | "claimed" | "not_ready"> {
  const { store, clock } = useDeps();
  const now = isoNow(clock);
  const from: HostItem["state"][] =
    rh.needsAttention || rh.startedAt ? ["ready", "failed", "deploying"] : ["ready"];
  const res = await store.service.transaction
    .write(({ host, claim }) => [
      host
        .patch({ workshop: r.workshop, hostId: rh.hostId })
        .set({
          state: "deploying",
          phase: "rollout",
          updatedAt: now,
          ...(claimed ? { notice: "updating" as const, noticeAt: now } : {}),
        })
        .where((a, op) => `(${from.map((st) => op.eq(a.state, st)).join(" OR ")})`)
        .commit(),
      ...(claimed
        ? []
        : [
            claim
              .check({ workshop: r.workshop, hostId: rh.hostId })
              .where((a, op) => op.notExists(a.linkHash))
              .commit(),
          ]),
    ])
    .go();
  if (!res.canceled) {
    forgetStudentReads(r.workshop);
    return "taken";
  }
  const [hostLost, claimLost] = res.data.map((d) => d.rejected);
  if (claimLost && !hostLost) return "claimed";
  const state = (await store.host.get({ workshop: r.workshop, hostId: rh.hostId }).go()).data?.state;
  if (state && from.includes(state)) return "claimed"; // a conflict, or the claim check: read both again
  return "not_ready";
}

/**
 * The rollout leaves a lab as it is: a student claimed it after the rollout was planned (and claimed labs are not
 * included), or it is no longer in a state to update. Replace: its new machine, if one was made, is removed; the
 * lab's record, its student and their link are not touched, and no notice is shown. Recorded as skipped with the
 * reason, which `labfleet rollout --status` and the console show; the rollout goes on with the other labs.
 */
async function leaveAlone(
  spec: Workshop,
  provider: Provider,
  r: RolloutItem,
  rh: RolloutHostItem,
  student: string | null,
  why?: string,
) {
  const { store, clock } = useDeps();
  const now = isoNow(clock);
  if (rh.mode === "replace")
    await discardNew(spec, provider, rh).catch((err) =>
      log.warn("removing a rollout's new host failed", {
        workshop: spec.name,
        hostId: rh.hostId,
        error: errorMessage(err),
      }),
    );
  const reason =
    why ??
    `claimed by ${student ?? "a student"} during the rollout: left as it was (--include-claimed updates claimed labs)`;
  try {
    await store.rolloutHost
      .patch(key(r, rh.hostId))
      .set({ state: "skipped", reason, endedAt: now, updatedAt: now, ...(student ? { student } : {}) })
      .where((a, op) => `${op.eq(a.state, "building")} OR ${op.eq(a.state, "pending")}`)
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    return; // stopped or judged meanwhile: kept as it was
  }
  log.info("rollout: a lab was left alone", {
    workshop: spec.name,
    hostId: rh.hostId,
    claimed: Boolean(student),
  });
  if (student)
    await recordEvent({
      workshop: spec.name,
      type: "lab.update_skipped",
      hostId: rh.hostId,
      runId: r.runId,
      detail: { ref: r.ref, student },
    });
}

/** A lab's update failed (the Map item's Catch, or its gate): see failHost. */
export async function recordRolloutHostFailure(
  workshop: string,
  runId: string,
  hostId: string,
  error: string,
): Promise<{ hostId: string }> {
  const { spec, provider } = await loadWorkshop(workshop);
  const r = await rolloutOfRun(workshop, runId);
  const rh = (await useDeps().store.rolloutHost.get(key(r, hostId)).go()).data;
  if (rh) await failHost(spec, provider, r, rh, (await secretRedactor(spec))(error));
  return { hostId };
}

/**
 * A lab failed its update. Replace: its new machine is removed and nothing else changes (the lab, claimed or
 * not, stays on its old machine and its student's notice goes). In place: the host stays off the board with the
 * reason (needs attention) until `labfleet retry` rebuilds it. The rollout halts at the next batch.
 */
async function failHost(
  spec: Workshop,
  provider: Provider,
  r: RolloutItem,
  rh: RolloutHostItem,
  reason: string,
  extra: { gate?: "failed"; logTail?: string } = {},
) {
  const { store, clock } = useDeps();
  const now = isoNow(clock);
  await discardNew(spec, provider, rh).catch((err) =>
    log.warn("removing a rollout's failed new host failed", {
      workshop: spec.name,
      hostId: rh.hostId,
      error: errorMessage(err),
    }),
  );
  // Only a lab still waiting or building fails: one an abort stopped meanwhile (whose new machine it removed, so a
  // step already running saw it die) stays "aborted", and one already judged keeps its verdict.
  try {
    await store.rolloutHost
      .patch(key(r, rh.hostId))
      .set({ state: "failed", error: reason.slice(0, 4000), endedAt: now, updatedAt: now, ...extra } as never)
      .where((a, op) => `${op.eq(a.state, "building")} OR ${op.eq(a.state, "pending")}`)
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    log.info("rollout: a lab's failure came after it was stopped or judged; kept as it was", {
      workshop: spec.name,
      hostId: rh.hostId,
    });
    return;
  }
  if (rh.mode === "in_place") {
    await store.host
      .patch({ workshop: spec.name, hostId: rh.hostId })
      .set({
        state: "failed",
        error:
          `needs attention: its update to ${r.ref} failed (labfleet retry or a rollout rebuilds it): ${reason}`.slice(
            0,
            4000,
          ),
        updatedAt: now,
      })
      .go();
  }
  await clearNotice(spec.name, rh.hostId, "updating");
  forgetStudentReads(spec.name);
  log.warn("rollout: a lab failed its update", {
    workshop: spec.name,
    hostId: rh.hostId,
    error: reason.slice(0, 500),
  });
  await recordEvent({
    workshop: spec.name,
    type: "host.failed",
    hostId: rh.hostId,
    runId: r.runId,
    detail: { reason: `rollout to ${r.ref}: ${reason}`.slice(0, 300) },
  });
}

/**
 * How many polls in a row a new lab whose setup has exited may fail lab.health before it fails its gate (and the
 * rollout halts), as an in-use lab is flagged after failures in a row (shared/fleet/health.ts). The gate never
 * waits longer than HEALTH_GRACE_SECONDS after the setup's end, whatever lab.poll_seconds is.
 */
export const GATE_HEALTH_CHECKS = 3;

/** Counts one more failed gate check of a lab's new machine; answers how many in a row it has failed. */
async function countHealthFailure(r: RolloutItem, hostId: string): Promise<number> {
  const { store, clock } = useDeps();
  const updated = await store.rolloutHost
    .patch(key(r, hostId))
    .add({ healthFailures: 1 })
    .set({ updatedAt: isoNow(clock) })
    .go({ response: "all_new" });
  return updated.data.healthFailures ?? 1;
}

export interface RolloutPoll {
  done: boolean;
  promoted: number;
  failed: number;
  building: number;
  /** Labs left alone at their promotion: claimed during the rollout. */
  skipped: number;
}

/**
 * One poll of the batch being built: every building lab is checked (bounded concurrency inside). A lab whose
 * setup finished and whose lab.health passes is promoted; one that failed, or did not pass by the batch's
 * deadline, fails. Done when no lab of the batch is building.
 */
export async function pollRollout(workshop: string, runId: string, deadline: string): Promise<RolloutPoll> {
  const { store, clock } = useDeps();
  const { spec, provider } = await loadWorkshop(workshop);
  const r = await rolloutOfRun(workshop, runId);
  const building = (await rolloutHosts(workshop, r.rolloutId)).filter(
    (h) => h.state === "building" && h.batch === r.batchIndex,
  );
  const redact = await secretRedactor(spec);
  const late = clock.now().toISOString() >= deadline;
  const outcomes = await mapLimit(building, fanOutWidth(provider), async (rh) => {
    if (timeLeft() < POLL_MIN_HOST_MS) return "building";
    const host = (await store.host.get({ workshop, hostId: rh.hostId }).go()).data;
    if (!host) return "building";
    const outcome = await checkNew(spec, provider, r, rh, host, redact).catch(async (err) => {
      // An unreachable host is not yet a failed update: the next poll tries again, the deadline bounds it.
      log.warn("rollout: checking a new lab failed", {
        workshop,
        hostId: rh.hostId,
        error: errorMessage(err),
      });
      return "building" as const;
    });
    if (outcome === "building" && late) {
      await failHost(
        spec,
        provider,
        r,
        rh,
        `the new lab did not pass lab.health within ${spec.lab.timeout_minutes} minutes`,
      );
      return "failed";
    }
    return outcome;
  });
  const count = (s: string) => outcomes.filter((o) => o === s).length;
  return {
    done: count("building") === 0,
    promoted: count("promoted"),
    failed: count("failed"),
    building: count("building"),
    skipped: count("skipped"),
  };
}

async function checkNew(
  spec: Workshop,
  provider: Provider,
  r: RolloutItem,
  rh: RolloutHostItem,
  host: HostItem,
  redact: (t: string) => string,
): Promise<"building" | "promoted" | "failed" | "skipped"> {
  const t = newLabTransport(spec, provider, host, rh);
  try {
    const lab = await judgeLab(t, spec, rh.hostId);
    const { probe } = lab;
    const logTail = redact(probe.logTail.slice(-20).join("\n")).slice(-4000);
    if (lab.state === "running") return "building";
    if (lab.state === "failed" || lab.state === "not_started") {
      const reason = lab.state === "failed" ? lab.reason : "the setup was never started";
      await failHost(spec, provider, r, rh, redact(reason), { logTail });
      return "failed";
    }
    if (lab.state === "unhealthy") {
      // The setup has exited: the gate tries lab.health at a few polls in a row, not for the whole grace.
      const failures = await countHealthFailure(r, rh.hostId);
      if (failures < GATE_HEALTH_CHECKS && (probe.rcAgeSeconds ?? 0) < HEALTH_GRACE_SECONDS)
        return "building";
      await failHost(
        spec,
        provider,
        r,
        rh,
        redact(
          `lab.health failed on the new lab ${failures} time${failures === 1 ? "" : "s"} in a row after its setup finished: ${lastLines(lab.health)}`,
        ),
        { gate: "failed", logTail },
      );
      return "failed";
    }
    if (lab.state === "bad_access") {
      await failHost(spec, provider, r, rh, lab.reason, { logTail });
      return "failed";
    }
    await pinHostKeysThrough(t, spec, provider, { hostId: rh.hostId, address: rh.address ?? host.address });
    return await promote(spec, provider, r, rh, host, probe.statusLines, lab.access);
  } finally {
    await t.close?.();
  }
}

/**
 * The new lab passed its gate. Its claim is read again first. Replace: a lab a student claimed during the rollout
 * is left alone without includeClaimed (its new machine removed); with it, a student who has not yet been told is
 * told now, and the lab is promoted at a later poll. Then the lab's record points at the new machine (its address
 * and ids), so the board, the student's link and lab cookie open it, and a claimed lab's page says it was updated,
 * in one transaction with the claim as read: no claim (a claim made meanwhile cancels it, and the next poll
 * decides again), or the student told (the notice still says updating). A claim made after it gets the new
 * machine. Only then is the old machine stopped and given back.
 */
async function promote(
  spec: Workshop,
  provider: Provider,
  r: RolloutItem,
  rh: RolloutHostItem,
  host: HostItem,
  statusLines: string[],
  access: string | undefined,
): Promise<"promoted" | "building" | "skipped"> {
  const { store, clock, accessKey } = useDeps();
  const replace = rh.mode === "replace" && rh.machine && rh.address;
  const claim = await claimNow(spec.name, rh.hostId);
  if (replace && claim && !r.includeClaimed) {
    await leaveAlone(spec, provider, r, rh, claim.name);
    return "skipped";
  }
  if (replace && claim && host.notice !== "updating") {
    await patchRolloutHost(r, rh.hostId, { student: claim.name });
    await tellStudent(spec.name, rh.hostId);
    return "building";
  }
  const now = isoNow(clock);
  const { phases: read } = parsePhases(statusLines);
  const student = claim?.name ?? null;
  const res = await store.service.transaction
    .write(({ host: hostEntity, claim: claimEntity }) => {
      const patch = hostEntity
        .patch({ workshop: spec.name, hostId: rh.hostId })
        .set({
          state: "ready",
          ref: r.ref,
          readyAt: now,
          deployStartedAt: rh.startedAt ?? now,
          phases: timePhases([], read, now),
          updatedAt: now,
          ...(replace
            ? {
                machine: rh.machine,
                address: rh.address,
                // The new machine's hours start when it was made; the old one's life goes to hostLife below.
                machineCreatedAt: rh.startedAt ?? now,
                ...(rh.providerId ? { providerId: rh.providerId } : {}),
                ...(rh.publicIp ? { publicIp: rh.publicIp } : {}),
              }
            : {}),
          ...(access ? { access: seal(accessKey, access) } : {}),
          ...(student ? { notice: "updated" as const, noticeAt: now } : {}),
        } as never)
        .remove([
          "error",
          "phase",
          "health",
          "healthFailures",
          "healthError",
          "healthCheckedAt",
          ...(access ? [] : (["access"] as const)),
          ...(student ? [] : (["notice", "noticeAt"] as const)),
        ]);
      // Replace: the claim as read still stands (none, or one whose student was told).
      const told = replace && student ? patch.where((a, op) => op.eq(a.notice, "updating")) : patch;
      const unclaimed =
        replace && !student
          ? [
              claimEntity
                .check({ workshop: spec.name, hostId: rh.hostId })
                .where((a, op) => op.notExists(a.linkHash))
                .commit(),
            ]
          : [];
      return [told.commit(), ...unclaimed];
    })
    .go();
  if (res.canceled) {
    log.info("rollout: a lab's claim changed as it was promoted; the next poll decides again", {
      workshop: spec.name,
      hostId: rh.hostId,
    });
    return "building";
  }
  forgetStudentReads(spec.name);
  await patchRolloutHost(r, rh.hostId, {
    state: replace ? "promoted" : "updated",
    gate: "passed",
    endedAt: now,
    ...(student ? { student } : {}),
  });
  log.info("rollout: lab promoted", { workshop: spec.name, hostId: rh.hostId, ref: r.ref });
  await recordEvent({
    workshop: spec.name,
    type: "lab.updated",
    hostId: rh.hostId,
    runId: r.runId,
    detail: {
      ref: r.ref,
      how: replace ? "replaced" : "in place",
      ...(student ? { student } : {}),
    },
  });
  if (!replace) return "promoted";
  // The old machine goes only now, once the lab's record (and its student) have moved to the new one.
  const old = { ...host, machine: machineOf(host) };
  if (!provider.deprovisionEndsLabs && host.address) {
    const t = transportFor(spec, provider, host);
    try {
      await stopLab(t, spec.name).catch(() => undefined);
    } finally {
      await t.close?.();
    }
  }
  const [gone] = await deprovisionLabs(provider, spec, [old]);
  // The old machine used hours too: the teardown receipt counts them (shared/fleet/host-lives.ts).
  await recordHostLife(spec, host, "replaced");
  if (gone?.result === "error")
    log.warn("rollout: the old host could not be removed", {
      workshop: spec.name,
      hostId: rh.hostId,
      error: gone.detail,
    });
  return "promoted";
}

/**
 * Ends the rollout's run: completed when every lab was updated (then the workshop's lab.ref becomes the new
 * ref), halted when one failed (the labs not reached stay as they were).
 */
export async function finishRollout(
  workshop: string,
  runId: string,
): Promise<{ state: "succeeded" | "failed" }> {
  const { store, clock } = useDeps();
  const r = await rolloutOfRun(workshop, runId);
  const hosts = await rolloutHosts(workshop, r.rolloutId);
  const failed = hosts.filter((h) => h.state === "failed");
  const completed =
    failed.length === 0 && hosts.every((h) => h.state !== "pending" && h.state !== "building");
  const now = isoNow(clock);
  const error = completed
    ? undefined
    : `rollout halted: ${failed.map((h) => h.hostId).join(", ") || "a lab"} failed the update to ${r.ref}; the labs not reached stay as they were (labfleet rollout ${workshop} --resume goes on after a fix)`;
  if (completed) {
    const w = await getWorkshop(workshop);
    const spec = w.spec as Workshop;
    // The labs the rollout left alone (claimed before or during it, already there, not ready) keep saying which
    // ref they are at.
    const rolled = new Set(
      hosts.filter((h) => h.state === "promoted" || h.state === "updated").map((h) => h.hostId),
    );
    for (const h of await listHosts(workshop)) {
      if (rolled.has(h.hostId) || h.ref || h.state === "torn_down") continue;
      await store.host
        .patch({ workshop, hostId: h.hostId })
        .set({ ref: spec.lab.ref ?? "HEAD" })
        .go();
    }
    await store.workshop
      .patch({ name: workshop })
      .set({ spec: { ...spec, lab: { ...spec.lab, ref: r.ref } }, updatedAt: now })
      .go();
  }
  await store.rollout
    .patch({ workshop, rolloutId: r.rolloutId })
    .set({
      state: completed ? "completed" : "halted",
      endedAt: now,
      updatedAt: now,
      ...(error ? { error } : {}),
    })
    .go();
  await recordTransitions(workshop, runId, "rollout");
  const results = Object.fromEntries(
    hosts.map((h) => [h.hostId, { state: h.state, ...(h.error ? { error: h.error } : {}) }]),
  );
  await store.run
    .patch({ workshop, runId })
    .set({
      state: completed ? "succeeded" : "failed",
      endedAt: now,
      hosts: results,
      ...(error ? { error } : {}),
    })
    .go();
  await removeRolloutSecrets(workshop);
  await releaseWorkshop(workshop, runId);
  const state = completed ? "succeeded" : "failed";
  await recordEvent({ workshop, type: "run.finished", runId, detail: { kind: "rollout", state } });
  await recordEvent({
    workshop,
    type: "rollout.finished",
    runId,
    detail: { ref: r.ref, state: completed ? "completed" : "halted" },
  });
  return { state };
}

async function removeRolloutSecrets(workshop: string) {
  const { spec } = await loadWorkshop(workshop);
  if (spec.lab.operator_secrets.length === 0) return;
  await removeSecretParameter(spec, useDeps().providers[spec.provider.type]?.transport);
}

/** A step failed outside any lab: the rollout halts (its new hosts not promoted are removed) and the run fails. */
export async function failRollout(workshop: string, runId: string, error: string): Promise<void> {
  const { store, clock } = useDeps();
  const run = await getRun(workshop, runId);
  const r = await latestRollout(workshop);
  if (r && r.runId === runId && r.state === "running") {
    await stopUnpromoted(workshop, r, "aborted").catch((err) =>
      log.warn("rollout: stopping its labs failed", { workshop, error: errorMessage(err) }),
    );
    const now = isoNow(clock);
    await store.rollout
      .patch({ workshop, rolloutId: r.rolloutId })
      .set({ state: "halted", error: error.slice(0, 4000), endedAt: now, updatedAt: now })
      .go();
  }
  if (run.state === "running") {
    const { failRun } = await import("./up.ts");
    await failRun(workshop, runId, error);
  }
}
