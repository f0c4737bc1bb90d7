/**
 * When every lab of a fleet will be ready, estimated from how long finished builds of the same lab took:
 * builds of this run so far and of earlier runs (shared/fleet/lab-timings.ts keeps them per lab identity).
 * Pure functions, no I/O: the fleet view (shared/fleet/fleet-view.ts) reads the records and calls these.
 *
 * The builds give a profile: per phase, the median of its measured seconds, in the order the newest build ran
 * them; the median "tail" after the last phase (the health gate and the poll that saw it); the median total.
 * A building host still needs, per phase of the profile: nothing when it reported that phase done, the phase's
 * median less the time it has run when it is running, the whole median when it has not started it; then the
 * tail. A building host that has reported no phase yet needs the median total less its time so far, and at
 * least the phases' medians. A host that has not started building needs the median total. The fleet is ready when its slowest
 * unfinished host is; failed hosts are left out (they are not coming), and said so.
 */
import type { TimedPhase } from "./timeline.ts";

/** One finished build: seconds from its deploy's start to ready, and each phase's seconds. */
export interface BuildSample {
  runId: string;
  totalSeconds: number;
  phases: { name: string; seconds: number }[];
}

export interface EstimateHost {
  id: string;
  state: string;
  deployStartedAt?: string | undefined;
  phases: readonly TimedPhase[];
}

export interface Profile {
  phases: { name: string; seconds: number }[];
  tailSeconds: number;
  totalSeconds: number;
}

export interface EstimateBasis {
  /** Distinct earlier runs whose builds were used. */
  earlierRuns: number;
  /** Builds of those runs. */
  earlierBuilds: number;
  /** Builds of the current run that finished. */
  thisRunBuilds: number;
}

export type FleetEstimate =
  /** Every lab that is not failed is ready (or there are none). */
  | { kind: "ready"; failed: number }
  /** Labs are building, but no build of this lab has finished yet, here or in an earlier run. */
  | { kind: "unknown"; building: number; failed: number }
  | {
      kind: "estimated";
      /** When the slowest unfinished lab is expected to be ready. */
      readyAt: string;
      remainingSeconds: number;
      building: number;
      failed: number;
      basis: EstimateBasis;
      /** Seconds each unfinished host still needs. */
      hosts: Record<string, number>;
    };

const UNFINISHED = new Set(["pending", "provisioning", "deploying"]);

export function median(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

/** The profile of a lab's builds (see the module comment); undefined without a build. */
export function profileOf(samples: readonly BuildSample[]): Profile | undefined {
  const newest = samples.at(-1);
  if (!newest) return undefined;
  const names = [...newest.phases.map((p) => p.name)];
  for (const s of samples) for (const p of s.phases) if (!names.includes(p.name)) names.push(p.name);
  const phases = names.map((name) => ({
    name,
    seconds: median(samples.flatMap((s) => s.phases.filter((p) => p.name === name).map((p) => p.seconds))),
  }));
  const tails = samples.map((s) =>
    Math.max(0, s.totalSeconds - s.phases.reduce((sum, p) => sum + p.seconds, 0)),
  );
  return {
    phases,
    tailSeconds: median(tails),
    totalSeconds: median(samples.map((s) => s.totalSeconds)),
  };
}

/** Seconds a host still needs, by the profile; 0 for a host that is not building. */
export function remainingFor(host: EstimateHost, profile: Profile, now: Date): number {
  if (!UNFINISHED.has(host.state)) return 0;
  if (host.state !== "deploying" || !host.deployStartedAt) return profile.totalSeconds;
  const since = (iso: string | undefined) =>
    iso === undefined ? 0 : Math.max(0, (now.getTime() - Date.parse(iso)) / 1000);
  const elapsed = since(host.deployStartedAt);
  if (profile.phases.length === 0) return Math.max(0, profile.totalSeconds - elapsed);
  const phaseSum = profile.phases.reduce((sum, p) => sum + p.seconds, 0);
  // No phase reported yet: the time before the first phase (syncing the source, starting the setup) is going.
  if (host.phases.length === 0) return Math.max(phaseSum, profile.totalSeconds - elapsed);
  const seen = new Map(host.phases.map((p) => [p.name, p]));
  let left = 0;
  let lastEnd: string | undefined;
  for (const p of profile.phases) {
    const h = seen.get(p.name);
    if (h?.state === "done") {
      lastEnd = h.endedAt ?? lastEnd;
      continue;
    }
    left += h ? Math.max(0, p.seconds - since(h.startedAt)) : p.seconds;
  }
  // Every phase done: what is left is the tail, less the time since the last phase ended.
  const tail =
    left === 0 && lastEnd ? Math.max(0, profile.tailSeconds - since(lastEnd)) : profile.tailSeconds;
  return left + tail;
}

/**
 * The fleet's ready estimate. `samples` are the lab's finished builds, oldest first; those of `runId` are this
 * run's, the others earlier runs'.
 */
export function estimateFleet(
  hosts: readonly EstimateHost[],
  samples: readonly BuildSample[],
  runId: string | undefined,
  now: Date,
): FleetEstimate {
  const failed = hosts.filter((h) => h.state === "failed").length;
  const unfinished = hosts.filter((h) => UNFINISHED.has(h.state));
  if (unfinished.length === 0) return { kind: "ready", failed };
  const profile = profileOf(samples);
  if (!profile) return { kind: "unknown", building: unfinished.length, failed };
  const earlier = samples.filter((s) => s.runId !== runId);
  const basis: EstimateBasis = {
    earlierRuns: new Set(earlier.map((s) => s.runId)).size,
    earlierBuilds: earlier.length,
    thisRunBuilds: samples.length - earlier.length,
  };
  const left = Object.fromEntries(unfinished.map((h) => [h.id, Math.round(remainingFor(h, profile, now))]));
  const remainingSeconds = Math.max(...Object.values(left));
  return {
    kind: "estimated",
    readyAt: new Date(now.getTime() + remainingSeconds * 1000).toISOString(),
    remainingSeconds,
    building: unfinished.length,
    failed,
    basis,
    hosts: left,
  };
}

/** "from 3 earlier runs", "from this run so far (5 labs built)", "from 2 earlier runs and 4 labs of this run". */
export function basisText(b: EstimateBasis): string {
  const runs = `${b.earlierRuns} earlier run${b.earlierRuns === 1 ? "" : "s"}`;
  const built = `${b.thisRunBuilds} lab${b.thisRunBuilds === 1 ? "" : "s"}`;
  if (b.earlierRuns > 0 && b.thisRunBuilds > 0) return `from ${runs} and ${built} of this run`;
  if (b.earlierRuns > 0) return `from ${runs}`;
  return `from this run so far (${built} built)`;
}
