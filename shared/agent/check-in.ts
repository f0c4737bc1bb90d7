import { claimedAmong } from "../fleet/claimed.ts";
import { recordEvent } from "../fleet/events.ts";
import { isConditionalFailure } from "../fleet/runs.ts";
import { useDeps } from "../runtime/deps.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem } from "../store/entities.ts";
import { CHECK_IN_SECONDS, MISSED_CHECK_INS, missedCheckIns } from "./reachability.ts";

/**
 * Enrolled hosts call in: every signed poll or result is a check-in. An agent's long poll is held at most
 * LONG_POLL_SECONDS and the agent polls again at once, so a live agent checks in at least every
 * CHECK_IN_SECONDS. A host whose last check-in is more than MISSED_CHECK_INS of those ago is `unreachable` (its
 * labs are free for nobody, its claims told), and `online` again at its next call. Readers judge it against the
 * clock themselves (shared/agent/reachability.ts), so it shows at once; the mark here adds the events.
 */
export const LONG_POLL_SECONDS = 20;
export { CHECK_IN_SECONDS, MISSED_CHECK_INS, missedCheckIns };

/** Records a check-in: `lastSeenAt` now, and `online` again (with `host.reachable`) when it was unreachable. */
export async function checkIn(host: HostItem): Promise<void> {
  const { store, clock } = useDeps();
  const now = clock.now().toISOString();
  const key = { workshop: host.workshop, hostId: host.hostId };
  if (host.reachable !== "unreachable") {
    await store.host.patch(key).set({ lastSeenAt: now, reachable: "online" }).go();
    return;
  }
  try {
    await store.host
      .patch(key)
      .set({ lastSeenAt: now, reachable: "online", updatedAt: now })
      .where((a, op) => op.eq(a.reachable, "unreachable"))
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    await store.host.patch(key).set({ lastSeenAt: now }).go();
    return;
  }
  log.info("enrolled host calls in again", key);
  await recordEvent({ ...key, type: "host.reachable", detail: await studentOf(host) });
}

async function studentOf(host: HostItem): Promise<Record<string, string>> {
  const [claimed] = await claimedAmong(host.workshop, [host.hostId]);
  return claimed ? { student: claimed.student } : {};
}

/**
 * Marks every enrolled host of the workshop that missed its check-ins `unreachable` (conditionally: once, and
 * never one that called in meanwhile), with a `host.unreachable` event naming its claim's student. Returns the
 * hosts it marked. Run by the local scheduler's pass and the cloud's sweeper.
 */
export async function markSilentHosts(workshop: string): Promise<string[]> {
  const { store, clock } = useDeps();
  const now = clock.now();
  const hosts = (await store.host.query.byWorkshop({ workshop }).go({ pages: "all" })).data;
  const marked: string[] = [];
  for (const h of hosts) {
    if (h.provider !== "enrolled" || h.state === "torn_down" || h.reachable === "unreachable") continue;
    if (!missedCheckIns(h.lastSeenAt, now)) continue;
    const key = { workshop, hostId: h.hostId };
    try {
      await store.host
        .patch(key)
        .set({ reachable: "unreachable", updatedAt: now.toISOString() })
        .where((a, op) => op.eq(a.lastSeenAt, h.lastSeenAt ?? ""))
        .go();
    } catch (err) {
      if (isConditionalFailure(err)) continue;
      throw err;
    }
    marked.push(h.hostId);
    log.warn("enrolled host missed its check-ins", { ...key, lastSeenAt: h.lastSeenAt });
    await recordEvent({
      ...key,
      type: "host.unreachable",
      detail: { lastSeenAt: h.lastSeenAt, ...(await studentOf(h)) },
    });
  }
  return marked;
}

/**
 * markSilentHosts for every workshop of enrolled hosts not torn down. A workshop of another provider has none
 * (its provider cannot be changed to or from `enrolled`), so its hosts are not read.
 */
export async function markAllSilentHosts(): Promise<string[]> {
  const { store } = useDeps();
  const workshops = (await store.workshop.query.all({}).go({ pages: "all" })).data;
  const marked: string[] = [];
  for (const w of workshops) {
    if (w.state === "torn_down") continue;
    if ((w.spec as { provider?: { type?: string } } | undefined)?.provider?.type !== "enrolled") continue;
    for (const id of await markSilentHosts(w.name)) marked.push(`${w.name}/${id}`);
  }
  return marked;
}
