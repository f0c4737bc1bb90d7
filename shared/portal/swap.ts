import { takesNewClaims } from "../agent/reachability.ts";
import { recordEvent } from "../fleet/events.ts";
import { startRun } from "../fleet/runs.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { byNumber } from "../runtime/text.ts";
import type { ClaimItem } from "../store/entities.ts";
import { emailHash } from "./codes.ts";
import { forgetStudentReads } from "./reads.ts";

/**
 * A swap moves a student off a broken lab without changing anything they hold: the claim moves to another lab
 * with the same personal link, PIN and name, so the link and the lab cookie they already have now open the new
 * lab. The target is the highest-numbered free ready lab that is not failing its health check (nor an enrolled
 * host that is drained, disabled or not calling in): the spares
 * (`portal.spares`) are the highest-numbered free labs, so a spare when there is one, while claims take the
 * lowest. The old lab is then marked failed and rebuilt in the background (a retry run with force on that
 * host, as `labfleet retry` does); it returns to the pool when it is ready again.
 */

export type SwapTarget = { email: string } | { hostId: string };

export interface SwapResult {
  from: string;
  to: string;
  /** The student's name, for the instructor. */
  name: string;
  /** The run rebuilding the old lab, or null when it could not start (then `rebuild` says why). */
  rebuildRunId: string | null;
  rebuild: string;
}

async function claimOf(workshop: string, target: SwapTarget): Promise<ClaimItem> {
  const { store } = useDeps();
  let hostId: string | undefined;
  if ("email" in target) {
    hostId = (await store.claimEmail.get({ workshop, emailHash: emailHash(workshop, target.email) }).go())
      .data?.hostId;
    if (!hostId) throw new VisibleError("not_found", "portal.no_claim", "no lab is claimed with that email");
  } else hostId = target.hostId;
  const c = (await store.claim.get({ workshop, hostId }).go()).data;
  if (!c) throw new VisibleError("not_found", "portal.not_claimed", `lab ${hostId} is not claimed`);
  return c;
}

export async function swapLab(workshop: string, target: SwapTarget): Promise<SwapResult> {
  assertActor("instructor", "system");
  const { store } = useDeps();
  const w = (await store.workshop.get({ name: workshop }).go()).data;
  if (!w) throw new VisibleError("not_found", "workshop.not_found", `no workshop named ${workshop}`);
  const old = await claimOf(workshop, target);
  const tried = new Set<string>();
  let to: string | undefined;
  for (let round = 0; round < 20 && !to; round++) {
    const [hosts, claims] = await Promise.all([
      store.host.query.byWorkshop({ workshop }).go({ pages: "all" }),
      store.claim.query.byWorkshop({ workshop }).go({ pages: "all" }),
    ]);
    const taken = new Set(claims.data.map((c) => c.hostId));
    const candidate = hosts.data
      .filter(
        (h) =>
          h.state === "ready" &&
          h.health !== "failing" &&
          takesNewClaims(h, useDeps().clock.now()) &&
          h.hostId !== old.hostId &&
          !taken.has(h.hostId) &&
          !tried.has(h.hostId),
      )
      .map((h) => h.hostId)
      .sort(byNumber)
      .at(-1);
    if (!candidate) {
      throw new VisibleError(
        "conflict",
        "portal.no_lab_free",
        `no free ready lab to move lab ${old.hostId}'s student to: release one, wait for a rebuild, or add ` +
          `labs with labfleet scale ${workshop} --count N (nothing was changed)`,
      );
    }
    // One transaction: the old claim goes only if it is still this student's (its link), the new lab's claim
    // is created only if nobody holds that lab, and the email and the link follow the claim.
    const r = await store.service.transaction
      .write(({ claim, claimEmail, claimLink, host }) => [
        claim
          .delete({ workshop, hostId: old.hostId })
          .where((a, op) => op.eq(a.linkHash, old.linkHash))
          .commit(),
        claim
          .create({
            workshop,
            hostId: candidate,
            name: old.name,
            emailHash: old.emailHash,
            emailSealed: old.emailSealed,
            pinHash: old.pinHash,
            linkHash: old.linkHash,
            how: old.how,
            claimedAt: old.claimedAt,
            ...(old.firstOpenedAt ? { firstOpenedAt: old.firstOpenedAt } : {}),
          })
          .commit(),
        claimEmail
          .patch({ workshop, emailHash: old.emailHash })
          .set({ hostId: candidate })
          .where((a, op) => op.eq(a.hostId, old.hostId))
          .commit(),
        claimLink
          .patch({ linkHash: old.linkHash })
          .set({ hostId: candidate })
          .where((a, op) => op.eq(a.hostId, old.hostId))
          .commit(),
        // The new lab is still ready (not taken off the board meanwhile, as an in-place rollout's update does).
        host
          .check({ workshop, hostId: candidate })
          .where((a, op) => op.eq(a.state, "ready"))
          .commit(),
      ])
      .go();
    if (!r.canceled) {
      to = candidate;
      break;
    }
    const [oldLost, targetLost, , , targetNotReady] = r.data.map((d) => d.rejected);
    if (oldLost || !(targetLost || targetNotReady))
      throw new VisibleError(
        "conflict",
        "portal.claim_changed",
        `lab ${old.hostId}'s claim changed meanwhile (released, recovered or swapped): look again`,
      );
    tried.add(candidate); // claimed or taken off the board meanwhile: the next free lab
  }
  if (!to) throw new VisibleError("conflict", "portal.busy", "The portal is busy. Try again.");
  forgetStudentReads(workshop);
  log.info("lab swapped", { workshop, from: old.hostId, to });
  await recordEvent({
    workshop,
    type: "lab.swapped",
    hostId: old.hostId,
    detail: { from: old.hostId, to, student: old.name },
  });
  const rebuild = await rebuildLab(workshop, old.hostId, to);
  return { from: old.hostId, to, name: old.name, ...rebuild };
}

/** The swapped-out lab leaves the pool (failed, so nothing hands it out) and a retry run rebuilds it. */
async function rebuildLab(
  workshop: string,
  hostId: string,
  to: string,
): Promise<{ rebuildRunId: string | null; rebuild: string }> {
  const { store, clock } = useDeps();
  const h = (await store.host.get({ workshop, hostId }).go()).data;
  const why = h?.healthError ? `: ${h.healthError.slice(0, 500)}` : "";
  if (h && h.state !== "torn_down") {
    await store.host
      .patch({ workshop, hostId })
      .set({
        state: "failed",
        error: `its student was moved to lab ${to}; rebuilding${why}`.slice(0, 2000),
        updatedAt: isoNow(clock),
      })
      .remove(["health", "healthFailures", "healthError", "healthCheckedAt"])
      .go();
    forgetStudentReads(workshop);
  }
  try {
    const run = await startRun(workshop, "retry", { force: true, hosts: [hostId] });
    return { rebuildRunId: run.runId, rebuild: `rebuilding lab ${hostId} (run ${run.runId})` };
  } catch (err) {
    // Another run holds the workshop: the lab stays failed, and labfleet retry rebuilds it later.
    log.warn("the swapped-out lab could not be rebuilt now", { workshop, hostId, error: errorMessage(err) });
    return {
      rebuildRunId: null,
      rebuild: `lab ${hostId} was not rebuilt: ${errorMessage(err)}; run labfleet retry ${workshop} --host ${hostId}`,
    };
  }
}
