import { takesNewClaims } from "../agent/reachability.ts";
import { useDeps } from "../runtime/deps.ts";
import { byNumber } from "../runtime/text.ts";

/**
 * Which free labs students may have: every ready lab without a claim, lowest number first, except the
 * `portal.spares` highest-numbered of them, kept off the board for swaps. A lab failing its in-use health check
 * (shared/fleet/health.ts) is free for nobody until a check passes again, and so is an enrolled host that is
 * drained, disabled or not calling in: its reachability is judged at `now` from its last check-in
 * (shared/agent/reachability.ts), so a host that went silent is left out at once, before any sweep marks it.
 * Free labs fill the spares first; only the rest go to claims and to the waiting line. Used by the claim, the
 * line and the board alike.
 */

/** The host attributes freeLabs reads: what the portal's shared read of a workshop's labs projects. */
export const FREE_LAB_ATTRIBUTES = [
  "hostId",
  "state",
  "health",
  "drained",
  "disabled",
  "reachable",
  "lastSeenAt",
] as const;

export function freeLabs(
  hosts: readonly {
    hostId: string;
    state: string;
    health?: string;
    drained?: boolean;
    disabled?: boolean;
    reachable?: "online" | "unreachable";
    lastSeenAt?: string;
  }[],
  claims: readonly { hostId: string }[],
  spares: number,
  now: Date = useDeps().clock.now(),
): { forStudents: string[]; spares: string[] } {
  const taken = new Set(claims.map((c) => c.hostId));
  const free = hosts
    .filter((h) => h.state === "ready" && h.health !== "failing" && !taken.has(h.hostId))
    .filter((h) => takesNewClaims(h, now))
    .map((h) => h.hostId)
    .sort(byNumber);
  const kept = Math.min(Math.max(0, spares), free.length);
  return { forStudents: free.slice(0, free.length - kept), spares: free.slice(free.length - kept) };
}

/** `portal.spares` of a workshop's spec (0 for a spec written before spares existed). */
export function sparesOf(spec: unknown): number {
  const n = (spec as { portal?: { spares?: unknown } } | undefined)?.portal?.spares;
  return typeof n === "number" && Number.isInteger(n) && n > 0 ? n : 0;
}

/**
 * Whether anyone is in the waiting line: a strongly consistent read of its first entry, so a student who
 * joined a moment ago is seen by every claim that starts after that join returned.
 */
export async function anyoneWaiting(workshop: string): Promise<boolean> {
  const r = await useDeps()
    .store.queueEntry.query.byWorkshop({ workshop })
    .go({ consistent: true, count: 1, attributes: ["place"] });
  return r.data.length > 0;
}
