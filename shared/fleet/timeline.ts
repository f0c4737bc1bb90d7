/**
 * When a host's lab phases ran. A lab reports phases as JSON lines without times (docs/lab-contract.md), so
 * labfleet stamps each phase with the time it first saw it (running or already finished) and the time it
 * first saw it done or failed: a poll's time, or a push's. Pure functions, no I/O.
 */

export interface TimedPhase {
  name: string;
  state: string;
  startedAt?: string | undefined;
  endedAt?: string | undefined;
}

const FINISHED = new Set(["done", "failed"]);

/** Whether a phase state is an end (done or failed): anything else reads as still running. */
export const phaseFinished = (state: string) => FINISHED.has(state);

/**
 * The phases just read from the host, with the times kept from the previous read (`prev`) and `now` for what
 * is new: a phase seen for the first time starts now, a phase first seen finished ends now. A phase reported
 * running again after it finished keeps its start and loses its end.
 */
export function timePhases(
  prev: readonly TimedPhase[],
  read: readonly { name: string; state: string }[],
  now: string,
): TimedPhase[] {
  const before = new Map(prev.map((p) => [p.name, p]));
  const out: TimedPhase[] = [];
  for (const p of read) {
    const old = before.get(p.name);
    const startedAt = old?.startedAt ?? now;
    const finished = phaseFinished(p.state);
    const endedAt = finished ? (old?.endedAt ?? now) : undefined;
    out.push({ name: p.name, state: p.state, startedAt, ...(endedAt ? { endedAt } : {}) });
  }
  return out;
}

/** Whether two lists of timed phases say the same (whatever order a store kept each one's fields in). */
export function samePhases(a: readonly TimedPhase[], b: readonly TimedPhase[]): boolean {
  return (
    a.length === b.length &&
    a.every((p, i) => {
      const q = b[i];
      return (
        q !== undefined &&
        p.name === q.name &&
        p.state === q.state &&
        p.startedAt === q.startedAt &&
        p.endedAt === q.endedAt
      );
    })
  );
}

export interface PhaseBar {
  name: string;
  state: "done" | "failed" | "running";
  /** Seconds from the deploy's start. */
  from: number;
  to: number;
}

/**
 * One bar per phase for a host's timeline, in seconds from its deploy's start: a finished phase from its start
 * to its end, a running one up to `end` (now, or when the host became ready or failed). A phase without a start
 * (recorded before labfleet kept times) starts where the one before it ended. On a host that failed
 * (`hostFailed`), a phase still running when it failed is the failed one.
 */
export function phaseBars(
  phases: readonly TimedPhase[],
  deployStartedAt: string | undefined,
  end: Date,
  hostFailed = false,
): PhaseBar[] {
  if (!deployStartedAt) return [];
  const t0 = Date.parse(deployStartedAt);
  const last = Math.max(0, (end.getTime() - t0) / 1000);
  const at = (iso: string | undefined) =>
    iso === undefined ? undefined : Math.min(last, Math.max(0, (Date.parse(iso) - t0) / 1000));
  const bars: PhaseBar[] = [];
  let cursor = 0;
  for (const p of phases) {
    const from = at(p.startedAt) ?? cursor;
    const reported = p.state === "done" ? "done" : p.state === "failed" ? "failed" : "running";
    const to = reported === "running" ? last : (at(p.endedAt) ?? from);
    const state = reported === "running" && hostFailed ? "failed" : reported;
    bars.push({ name: p.name, state, from, to: Math.max(from, to) });
    cursor = Math.max(cursor, to);
  }
  return bars;
}
