import { recordEvent } from "../fleet/events.ts";
import { isConditionalFailure } from "../fleet/runs.ts";
import { loadWorkshop, removeHosts } from "../fleet/up.ts";
import { listHosts } from "../fleet/workshops.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { byNumber } from "../runtime/text.ts";
import type { RunItem, WorkshopItem } from "../store/entities.ts";
import { getPortal, releaseLab } from "./portal.ts";
import { waitingCount } from "./queue.ts";
import { forgetStudentReads } from "./reads.ts";

const byNumberDesc = (a: string, b: string) => byNumber(b, a);

/**
 * Scale down no-shows (`labfleet down --unclaimed N|all`): unready labs go first, then free labs from the
 * highest number down; a claimed lab only with `force`. Claiming pauses before the labs are chosen, so
 * nobody claims a lab between its choice and its removal; the labs leave the board and a later up does not
 * bring them back. While a run that acts on a picked lab is unfinished, nothing is removed: a 409 says which
 * run to wait for (removing a host from under a run would let it end without that host).
 */
export async function scaleDownUnclaimed(
  workshop: string,
  count: number | "all",
  force = false,
): Promise<{ removed: string[]; releasedClaims: string[] }> {
  assertActor("instructor", "system");
  const { store, clock } = useDeps();
  const portal = await getPortal(workshop);
  const pause = (paused: boolean) =>
    portal
      ? store.portal
          .patch({ workshop })
          .set({ paused, updatedAt: isoNow(clock) })
          .go()
      : undefined;
  await pause(true);
  forgetStudentReads(workshop);
  try {
    return await pickAndRemove(workshop, count, force);
  } finally {
    await pause(false);
    forgetStudentReads(workshop);
  }
}

async function pickAndRemove(
  workshop: string,
  count: number | "all",
  force: boolean,
): Promise<{ removed: string[]; releasedClaims: string[] }> {
  const { store } = useDeps();
  const { spec, provider } = await loadWorkshop(workshop);
  const hosts = (await listHosts(workshop)).filter((h) => h.state !== "torn_down");
  const claims = (await store.claim.query.byWorkshop({ workshop }).go({ pages: "all" })).data;
  const claimed = new Set(claims.map((c) => c.hostId));
  const ids = (keep: (h: (typeof hosts)[number]) => boolean) =>
    hosts
      .filter(keep)
      .map((h) => h.hostId)
      .sort(byNumberDesc);
  const unready = ids((h) => h.state !== "ready" && !claimed.has(h.hostId));
  const free = ids((h) => h.state === "ready" && !claimed.has(h.hostId));
  const taken = ids((h) => claimed.has(h.hostId));
  const unclaimed = [...unready, ...free];
  const want = count === "all" ? unclaimed.length : count;
  if (want > unclaimed.length && !force) {
    const waiting = await waitingCount(workshop);
    const line = waiting
      ? `; ${waiting} ${waiting === 1 ? "student is" : "students are"} waiting for a lab`
      : "";
    throw new VisibleError(
      "conflict",
      "portal.would_take_claimed",
      `only ${unclaimed.length} labs are unclaimed; taking ${want} would take claimed labs: add --force to do that${line}`,
    );
  }
  const picked = [...unclaimed, ...taken].slice(0, want);
  if (picked.length === 0) return { removed: [], releasedClaims: [] };

  await markRemoved(workshop, picked);
  const releasedClaims: string[] = [];
  for (const lab of picked.filter((id) => claimed.has(id))) {
    await releaseLab(workshop, lab);
    releasedClaims.push(lab);
  }
  const set = new Set(picked);
  await removeHosts(
    spec,
    provider,
    hosts.filter((h) => set.has(h.hostId)),
  );
  const students = new Map(claims.map((c) => [c.hostId, c.name]));
  for (const lab of picked) {
    const student = students.get(lab);
    await recordEvent({ workshop, type: "lab.removed", hostId: lab, detail: student ? { student } : {} });
  }
  log.info("scaled down unclaimed labs", { workshop, removed: picked.length });
  return { removed: picked, releasedClaims };
}

/**
 * Records the labs as removed, before anything else changes, on the condition that the run owning the
 * workshop (if any) is the one just checked: a run that starts afterwards finds them removed and leaves them
 * out, and one that started since the check (or ended: it is read again) is checked again.
 */
async function markRemoved(workshop: string, picked: string[]): Promise<void> {
  const { store, clock } = useDeps();
  for (let attempt = 1; ; attempt++) {
    const w = (await store.workshop.get({ name: workshop }).go()).data;
    await refuseDuringRun(workshop, w, picked);
    try {
      await store.workshop
        .patch({ name: workshop })
        .set({
          removedHosts: [...new Set([...(w?.removedHosts ?? []), ...picked])],
          updatedAt: isoNow(clock),
        })
        .where((attr, op) =>
          w?.activeRunId ? op.eq(attr.activeRunId, w.activeRunId) : op.notExists(attr.activeRunId),
        )
        .go();
      return;
    } catch (err) {
      if (!isConditionalFailure(err)) throw err;
      if (attempt >= 3) throw busy(workshop, undefined);
    }
  }
}

/** The workshop's unfinished run, when it acts on any of these labs (up, provision and teardown act on all). */
async function refuseDuringRun(workshop: string, w: WorkshopItem | null, picked: string[]): Promise<void> {
  if (!w?.activeRunId) return;
  const run = (await useDeps().store.run.get({ workshop, runId: w.activeRunId }).go()).data;
  if (run?.state !== "running") return;
  const touches = !run.selection?.length || run.selection.some((h) => picked.includes(h));
  if (touches) throw busy(workshop, run);
}

function busy(workshop: string, run: RunItem | undefined): VisibleError {
  return new VisibleError(
    "conflict",
    "workshop.busy",
    `a run is in progress on ${workshop}${run ? ` (${run.kind}, ${run.runId})` : ""}: wait for it to end (labfleet status ${workshop}), then scale down; nothing was removed`,
  );
}
