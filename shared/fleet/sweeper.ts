import { markAllSilentHosts } from "../agent/check-in.ts";
import { deployAllWaitingHosts } from "../agent/lifecycle.ts";
import { serveAllQueues } from "../portal/queue.ts";
import type { Provider, SweptInstance } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { type HealthSummary, healthPass } from "./health.ts";
import { recheckReceipts } from "./receipt.ts";
import { isConditionalFailure } from "./runs.ts";
import { runDueSchedules } from "./schedules.ts";

/**
 * The sweeper, run on a rate(5 minutes) schedule in the cloud (functions/sweep.ts), for the cases where the TTL
 * teardown did not happen on time:
 * 1. every due schedule record is fired (the EventBridge copy was lost, or failed to fire);
 * 2. every provider that can (`sweepExpired`, EC2) ends the instances it made, in any workshop, whose expiry has
 *    passed. Each one is logged (ids and times only) and, when the store still holds a live host record for that
 *    instance, the host is marked `failed` with why, so status and the portal stop offering it;
 * 3. the in-use health pass (shared/fleet/health.ts): every ready lab whose check is due runs `lab.health`.
 * 4. every workshop's waiting line is served (shared/portal/queue.ts), the fallback for a lab freed where no
 *    serving pass followed.
 * 5. torn-down workshops, and those whose last teardown failed, are looked at again (recheckReceipts,
 *    shared/fleet/receipt.ts): anything found left is added to the workshop's teardown receipt, with why and
 *    the command that removes it, and a `teardown.receipt` event; what is gone moves to its removed list.
 * A failing step or item is logged and reported in the summary; it never stops the rest of the pass.
 */

export interface SweptRecord extends SweptInstance {
  provider: Provider["name"];
}

export interface SweepSummary {
  /** Due schedules fired (teardown runs started). */
  fired: number;
  /** Students in a waiting line handed a lab (shared/portal/queue.ts). */
  served: number;
  /** Every expired instance a provider acted on, terminated or not. */
  swept: SweptRecord[];
  /** What was found left of torn-down workshops (added to their receipts). */
  leftovers: { workshop: string; left: { kind: string; id: string }[] }[];
  /** The in-use health checks of this pass. */
  health?: HealthSummary;
  /** Enrolled hosts (`workshop/host`) marked unreachable in this pass: their agents missed three check-ins. */
  unreachable?: string[];
  /** Steps or items that failed; the pass went on. */
  errors: { step: string; provider?: string; error: string }[];
}

export async function sweep(): Promise<SweepSummary> {
  assertActor("system");
  const { providers, clock } = useDeps();
  const summary: SweepSummary = { fired: 0, served: 0, swept: [], leftovers: [], errors: [] };

  try {
    summary.fired = await runDueSchedules();
  } catch (err) {
    log.error("sweeper: running due schedules failed", { error: errorMessage(err) });
    summary.errors.push({ step: "schedules", error: errorMessage(err) });
  }

  try {
    // The fallback for the waiting line: labs freed where no serving pass ran (a process that stopped).
    summary.served = await serveAllQueues();
  } catch (err) {
    log.error("sweeper: serving the waiting lines failed", { error: errorMessage(err) });
    summary.errors.push({ step: "queues", error: errorMessage(err) });
  }

  for (const provider of Object.values(providers)) {
    if (!provider?.sweepExpired) continue;
    let items: SweptInstance[];
    try {
      items = await provider.sweepExpired(clock.now());
    } catch (err) {
      log.error("sweeper: looking for expired hosts failed", {
        provider: provider.name,
        error: errorMessage(err),
      });
      summary.errors.push({ step: "sweep", provider: provider.name, error: errorMessage(err) });
      continue;
    }
    for (const item of items) {
      const record: SweptRecord = { provider: provider.name, ...item };
      summary.swept.push(record);
      try {
        await recordSwept(record);
      } catch (err) {
        log.error("sweeper: recording an expired host failed", {
          provider: provider.name,
          workshop: item.workshop,
          hostId: item.hostId,
          providerId: item.providerId,
          error: errorMessage(err),
        });
        summary.errors.push({ step: "record", provider: provider.name, error: errorMessage(err) });
      }
    }
  }

  try {
    summary.health = await healthPass();
    for (const e of summary.health.errors) summary.errors.push({ step: "health", error: e.error });
  } catch (err) {
    log.error("sweeper: the health pass failed", { error: errorMessage(err) });
    summary.errors.push({ step: "health", error: errorMessage(err) });
  }

  try {
    summary.unreachable = await markAllSilentHosts();
  } catch (err) {
    log.error("sweeper: looking for silent enrolled hosts failed", { error: errorMessage(err) });
    summary.errors.push({ step: "check-ins", error: errorMessage(err) });
  }

  try {
    // Approved enrolled hosts that joined while their workshop was busy are deployed once it is free.
    await deployAllWaitingHosts();
  } catch (err) {
    log.error("sweeper: deploying approved enrolled hosts failed", { error: errorMessage(err) });
    summary.errors.push({ step: "enrolled-deploy", error: errorMessage(err) });
  }

  try {
    summary.leftovers = await recheckReceipts();
  } catch (err) {
    log.error("sweeper: looking at torn-down workshops failed", { error: errorMessage(err) });
    summary.errors.push({ step: "receipts", error: errorMessage(err) });
  }

  log.info("sweep done", {
    fired: summary.fired,
    terminated: summary.swept.filter((s) => s.result === "terminated").length,
    failed: summary.swept.filter((s) => s.result === "error").length,
    errors: summary.errors.length,
  });
  return summary;
}

/** The log line of one expired instance, and its host record marked when it still looks live. */
async function recordSwept(s: SweptRecord): Promise<void> {
  const fields = {
    provider: s.provider,
    workshop: s.workshop,
    hostId: s.hostId,
    providerId: s.providerId,
    expiry: s.expiry,
    ...(s.detail ? { detail: s.detail } : {}),
  };
  if (s.result !== "terminated") {
    log.error("sweeper: an expired host could not be terminated", fields);
    return;
  }
  log.warn("sweeper: terminated a host past its expiry", fields);
  const { store, clock } = useDeps();
  try {
    await store.host
      .patch({ workshop: s.workshop, hostId: s.hostId })
      .set({
        state: "failed",
        error: `terminated by the sweeper: ${s.providerId} was past its expiry (${s.expiry})`,
        updatedAt: isoNow(clock),
      })
      .remove(["access"])
      .where(
        ({ providerId, state }, { eq, ne }) =>
          `${eq(providerId, s.providerId)} AND ${ne(state, "torn_down")}`,
      )
      .go();
  } catch (err) {
    // No record, another instance, or torn down already: nothing to mark.
    if (!isConditionalFailure(err)) throw err;
  }
}
