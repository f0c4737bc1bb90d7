/**
 * Whether an enrolled host is calling in, judged against the clock wherever it is read (the claim filter, the
 * status, the fleet view, the student's lab page), not only from the mark the scheduler's pass writes: the pass
 * runs every minute locally and every 5 minutes in the cloud, and a host must be seen silent the moment it has
 * missed its check-ins. The rule is the mark's own (shared/agent/check-in.ts markSilentHosts): a host whose last
 * check-in is more than MISSED_CHECK_INS x CHECK_IN_SECONDS ago is unreachable. Pure: no store, no clock of its own.
 */

/** A live agent checks in at least this often (its long poll is held at most LONG_POLL_SECONDS, then it polls again). */
export const CHECK_IN_SECONDS = 30;
/** A host that missed this many check-ins in a row is unreachable. */
export const MISSED_CHECK_INS = 3;

/** Whether a host last seen at `lastSeenAt` has missed MISSED_CHECK_INS check-ins at `now`. */
export function missedCheckIns(lastSeenAt: string | undefined, now: Date): boolean {
  if (!lastSeenAt) return false;
  return now.getTime() - Date.parse(lastSeenAt) > MISSED_CHECK_INS * CHECK_IN_SECONDS * 1000;
}

/** What the judgement reads of a host record (the fields enrollment and check-ins write). */
export interface CheckInFields {
  reachable?: "online" | "unreachable" | undefined;
  lastSeenAt?: string | undefined;
}

/**
 * An enrolled host's reachability at `now`: `unreachable` when it was marked so or has missed its check-ins since
 * it was last seen, else `online`. Undefined for a host that never checks in (local, SSH and EC2 hosts).
 */
export function reachableAt(h: CheckInFields, now: Date): "online" | "unreachable" | undefined {
  if (h.reachable === undefined && h.lastSeenAt === undefined) return undefined;
  return h.reachable === "unreachable" || missedCheckIns(h.lastSeenAt, now) ? "unreachable" : "online";
}

/** Whether a host may take a new claim, as far as its controls and check-ins go: not drained, disabled or silent. */
export function takesNewClaims(
  h: CheckInFields & { drained?: boolean | undefined; disabled?: boolean | undefined },
  now: Date,
): boolean {
  return !h.drained && !h.disabled && reachableAt(h, now) !== "unreachable";
}
