import { startRun } from "../fleet/runs.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem, WorkshopItem } from "../store/entities.ts";
import { reachableAt } from "./reachability.ts";

/**
 * What happens to an enrolled host after it is approved (at join with a token that approves automatically, or by
 * an instructor): the enrollment code calls afterApproval once the host record says `approved`.
 *
 * - The workshop is up (it was brought up and is not being torn down): the host is deployed at once, by a
 *   `deploy` run on it alone (the `up` workflow on selected hosts, as `scale` deploys the hosts it adds), so its
 *   lab joins the others without the instructor running `up` again.
 * - The workshop is not up yet (a draft): the host waits; the `up` that brings the workshop up takes it.
 * - The workshop is busy with another run: the host waits for the scheduler's next pass (deployWaitingHosts),
 *   which deploys every approved host that was never deployed once the workshop is free.
 */
export async function afterApproval(workshop: string, _hostId: string): Promise<void> {
  await deployWaitingHosts(workshop);
}

/** States of a workshop that was brought up and still is: a host that joins now is deployed without a new `up`. */
const UP_STATES: ReadonlySet<WorkshopItem["state"]> = new Set([
  "provisioning",
  "deploying",
  "ready",
  "failed",
]);

/**
 * An approved enrolled host that no run has deployed yet: it joined, and nothing has happened to it since. One
 * that is drained, disabled or not calling in (judged at `now`) waits.
 */
function waitingForDeploy(h: HostItem, now: Date): boolean {
  return (
    h.provider === "enrolled" &&
    h.enrollment === "approved" &&
    h.state === "pending" &&
    !h.drained &&
    !h.disabled &&
    reachableAt(h, now) !== "unreachable"
  );
}

/**
 * Starts a `deploy` run on the workshop's approved enrolled hosts that wait for one, when the workshop is up and no
 * run owns it. Returns the hosts the run deploys (none when there is nothing to do, or the workshop is not up or
 * is busy: a later pass tries again). Never throws for a busy or ended workshop.
 */
export async function deployWaitingHosts(workshop: string): Promise<string[]> {
  const { store, clock } = useDeps();
  const w = (await store.workshop.get({ name: workshop }).go({ consistent: true })).data;
  if (!w || !UP_STATES.has(w.state) || w.activeRunId) return [];
  const hosts = (await store.host.query.byWorkshop({ workshop }).go({ pages: "all", consistent: true })).data;
  const ids = hosts
    .filter((h) => waitingForDeploy(h, clock.now()))
    .map((h) => h.hostId)
    .sort();
  if (ids.length === 0) return [];
  try {
    const run = await startRun(workshop, "deploy", { hosts: ids, event: { hosts: ids, why: "approved" } });
    log.info("approved enrolled hosts deployed", { workshop, runId: run.runId, hosts: ids.length });
    return ids;
  } catch (err) {
    // Another run took the workshop (or it began its teardown) meanwhile: the next pass looks again.
    if (err instanceof VisibleError && err.kind === "conflict") return [];
    throw err;
  }
}

/** deployWaitingHosts for every workshop with enrolled hosts (the local scheduler's pass, the cloud's sweeper). */
export async function deployAllWaitingHosts(): Promise<string[]> {
  const { store } = useDeps();
  const workshops = (await store.workshop.query.all({}).go({ pages: "all" })).data;
  const started: string[] = [];
  for (const w of workshops) {
    if (!UP_STATES.has(w.state) || w.activeRunId) continue;
    if ((w.spec as { provider?: { type?: string } } | undefined)?.provider?.type !== "enrolled") continue;
    try {
      for (const id of await deployWaitingHosts(w.name)) started.push(`${w.name}/${id}`);
    } catch (err) {
      log.warn("deploying approved enrolled hosts failed", { workshop: w.name, error: errorMessage(err) });
    }
  }
  return started;
}
