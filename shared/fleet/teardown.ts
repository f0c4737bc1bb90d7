import { forgetHostSecret } from "../agent/host-secrets.ts";
import { purgePortal } from "../portal/portal.ts";
import type { DeprovisionResult } from "../providers/types.ts";
import { isoNow } from "../runtime/clock.ts";
import { mapLimit } from "../runtime/concurrency.ts";
import { releaseConnections, useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { forgetPinReads } from "./host-key-records.ts";
import { forgetAllHostKeys } from "./host-keys.ts";
import { transportFor } from "./hosts.ts";
import { stopLab } from "./lab.ts";
import { deprovisionLabs } from "./machines.ts";
import { type ReceiptEntry, takeReceipt } from "./receipt.ts";
import { recordTransitions, releaseWorkshop } from "./runs.ts";
import { cancelSchedules } from "./schedules.ts";
import { removeSecretParameter } from "./secrets.ts";
import { endedExecutionReason, failEndedExecution, failRun, HOST_WRITE_CONCURRENCY } from "./up.ts";
import { getWorkshop, listHosts } from "./workshops.ts";

/**
 * The steps of the `teardown` workflow: stop every lab, give the hosts back, mark the workshop torn down, and
 * take the teardown's receipt (shared/fleet/receipt.ts).
 */

export async function deprovisionHosts(workshop: string): Promise<{ results: DeprovisionResult[] }> {
  const deps = useDeps();
  const spec = (await getWorkshop(workshop)).spec as Workshop;
  const provider = deps.providers[spec.provider.type];
  if (!provider)
    throw new VisibleError(
      "input",
      "provider.unavailable",
      `provider ${spec.provider.type} is not available here`,
    );
  const hosts = (await listHosts(workshop)).filter((h) => h.state !== "torn_down" && h.address);
  // Hosts that deprovision ends anyway (terminated instances) are not stopped one by one first.
  const toStop = provider.deprovisionEndsLabs ? [] : hosts;
  await mapLimit(toStop, 16, async (h) => {
    const t = transportFor(spec, provider, h);
    try {
      await stopLab(t, workshop);
    } catch (err) {
      log.warn("stopping a lab failed", { workshop, hostId: h.hostId, error: errorMessage(err) });
    } finally {
      await t.close?.();
    }
  });
  const results = await deprovisionLabs(provider, spec, hosts);
  // The labs are stopped and the hosts given back: no pooled connection to them stays open.
  await releaseConnections(workshop);
  return { results };
}

/**
 * Records the teardown's outcome. A host that could not be removed keeps its record, with the error. Otherwise:
 * - hosts the provider made (local, aws) are gone for good: their records and pinned SSH host keys are deleted
 *   (the run keeps each host's result), so a later `up` starts from nothing and never trusts an old key for a
 *   new machine at a reused address;
 * - bring-your-own hosts (static) are the operator's long-lived machines: their records stay, marked
 *   `torn_down` without address or access details, and their pinned keys stay.
 */
export async function finishTeardown(
  workshop: string,
  runId: string,
  results: DeprovisionResult[],
): Promise<{ state: "succeeded" | "failed" }> {
  const { store, clock } = useDeps();
  const now = isoNow(clock);
  const spec = (await getWorkshop(workshop)).spec as Workshop;
  const providerMade = spec.provider.type !== "static";
  const byHost = new Map(results.map((r) => [r.hostId, r]));
  const errors = results.filter((r) => r.result === "error");
  // The receipt's host-hours come from the records this step deletes.
  const hosts = await listHosts(workshop);
  const schedule = (await store.schedule.get({ workshop, kind: "teardown" }).go()).data;
  await mapLimit(hosts, HOST_WRITE_CONCURRENCY, async (h) => {
    const r = byHost.get(h.hostId);
    if (r?.result === "error") {
      await store.host
        .patch({ workshop, hostId: h.hostId })
        .set({ error: `teardown: ${r.detail ?? "failed"}`, updatedAt: now })
        .go();
      return;
    }
    // The host's signing secret (an enrolled host's, or the one a pushing wrapper signs with) goes: nothing it
    // signs is accepted from now on.
    await forgetHostSecret(workshop, h.hostId);
    if (providerMade) {
      await store.host.delete({ workshop, hostId: h.hostId }).go();
      await store.hostKey.delete({ workshop, hostId: h.hostId }).go();
      forgetPinReads(workshop);
    } else {
      await store.host
        .patch({ workshop, hostId: h.hostId })
        .set({ state: "torn_down", updatedAt: now })
        .remove(["access", "address"])
        .go();
    }
  });
  // With every host gone, the workshop's remaining pins (a bastion's) go too.
  if (providerMade && errors.length === 0) await forgetAllHostKeys(workshop);
  await cancelSchedules(workshop);
  await purgePortal(workshop);
  // The operator secrets parameter SSM hosts fetched from (if any) goes with the workshop.
  await removeSecretParameter(spec, useDeps().providers[spec.provider.type]?.transport);
  // The receipt is there before the run reads as ended, so whoever follows the run finds it.
  const steps: ReceiptEntry[] = [
    ...(schedule?.state === "pending"
      ? [{ kind: "schedule", id: `teardown at ${schedule.at}`, detail: "the TTL schedule, cancelled" }]
      : []),
    { kind: "portal", id: workshop, detail: "codes, claims, personal links and the waiting line" },
  ];
  await takeReceipt(spec, runId, hosts, results, steps);
  const state = errors.length === 0 ? "succeeded" : "failed";
  await recordTransitions(workshop, runId, "teardown");
  await store.run
    .patch({ workshop, runId })
    .set({
      state,
      endedAt: now,
      hosts: Object.fromEntries(
        results.map((r) => [
          r.hostId,
          { state: r.result, ...(r.detail ? { [r.result === "error" ? "error" : "detail"]: r.detail } : {}) },
        ]),
      ),
      ...(errors.length ? { error: `${errors.length} hosts could not be torn down` } : {}),
    })
    .go();
  await store.workshop
    .patch({ name: workshop })
    .set({ state: errors.length === 0 ? "torn_down" : "failed", updatedAt: now })
    .remove(errors.length === 0 ? ["expiry"] : [])
    .go();
  await releaseWorkshop(workshop, runId);
  await recordEvent({ workshop, type: "run.finished", runId, detail: { kind: "teardown", state } });
  if (errors.length === 0) await recordEvent({ workshop, type: "workshop.torn_down", runId });
  return { state };
}

/**
 * The teardown workflow's failure path (a step threw past its retries): the hosts' records stay as they are,
 * labfleet looks for what is left and stores a receipt that says the teardown failed, why, and what removes
 * each thing left (`labfleet down NAME --yes` again, or the provider's own command), then fails the run. The
 * receipt is there before the run reads as ended, as after a teardown that ends.
 */
export async function failTeardown(workshop: string, runId: string, error: string): Promise<void> {
  const spec = (await getWorkshop(workshop)).spec as Workshop;
  const hosts = await listHosts(workshop);
  const reason = `the teardown failed: ${error}`;
  await takeReceipt(spec, runId, hosts, [], [], reason);
  // Like a teardown that could not remove every host: failed, so the console offers Tear down again. Written
  // before the run reads as ended (failRun keeps a teardown's workshop state as it finds it).
  const { store, clock } = useDeps();
  await store.workshop
    .patch({ name: workshop })
    .set({ state: "failed", updatedAt: isoNow(clock) })
    .go();
  await failRun(workshop, runId, error);
}

/**
 * A workflow execution ended outside its own steps (it failed past its Catch, timed out, or was stopped in
 * the Step Functions console): ReconcileRun in the cloud, the local executor here. When the run's record still
 * says running, it fails with the execution's error (shared/fleet/up.ts failEndedExecution); a teardown's run
 * also gets its receipt, as failTeardown takes it: what is left, why, and the commands that remove it.
 * Returns whether it failed the run.
 */
export async function settleEndedExecution(
  workshop: string,
  runId: string,
  status: "FAILED" | "TIMED_OUT" | "ABORTED",
  error: string,
): Promise<boolean> {
  const run = (await useDeps().store.run.get({ workshop, runId }).go()).data;
  if (run?.state !== "running") return false;
  if (run.kind !== "teardown") return failEndedExecution(workshop, runId, status, error);
  const reason = await endedExecutionReason(workshop, status, error);
  log.warn("teardown failed by its execution's end", {
    workshop,
    runId,
    status,
    error: reason.slice(0, 500),
  });
  await failTeardown(workshop, runId, reason);
  return true;
}
