import { loadWorkshop, removeHosts } from "../fleet/up.ts";
import { listHosts } from "../fleet/workshops.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { getPortal, releaseLab } from "./portal.ts";
import { forgetStudentReads } from "./reads.ts";

const byNumberDesc = (a: string, b: string) => b.localeCompare(a, undefined, { numeric: true });

/**
 * Scale down no-shows (`labfleet down --unclaimed N|all`): unready labs go first, then free labs from the
 * highest number down; a claimed lab only with `force`. Claiming pauses before the labs are chosen, so
 * nobody claims a lab between its choice and its removal; the labs leave the board and a later up does not
 * bring them back.
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
  const { store, clock } = useDeps();
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
    throw new VisibleError(
      "conflict",
      "portal.would_take_claimed",
      `only ${unclaimed.length} labs are unclaimed; taking ${want} would take claimed labs: add --force to do that`,
    );
  }
  const picked = [...unclaimed, ...taken].slice(0, want);
  if (picked.length === 0) return { removed: [], releasedClaims: [] };

  const releasedClaims: string[] = [];
  for (const lab of picked.filter((id) => claimed.has(id))) {
    await releaseLab(workshop, lab);
    releasedClaims.push(lab);
  }
  const w = (await store.workshop.get({ name: workshop }).go()).data;
  await store.workshop
    .patch({ name: workshop })
    .set({ removedHosts: [...new Set([...(w?.removedHosts ?? []), ...picked])], updatedAt: isoNow(clock) })
    .go();
  const set = new Set(picked);
  await removeHosts(
    spec,
    provider,
    hosts.filter((h) => set.has(h.hostId)),
  );
  log.info("scaled down unclaimed labs", { workshop, removed: picked.length });
  return { removed: picked, releasedClaims };
}
