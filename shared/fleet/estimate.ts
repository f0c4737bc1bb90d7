/**
 * When every lab of a fleet will be ready, estimated from how long finished builds of the same lab took:
 * builds of this run so far and of earlier runs (shared/fleet/lab-timings.ts keeps them per lab identity).
 * Pure functions, no I/O: the fleet view (shared/fleet/fleet-view.ts) reads the records and calls these.
 *
 * What it models, as the up workflow runs a build (shared/fleet/up.ts, stepfunctions/up.asl.json):
 * - Waves. The deploy step starts the lab on at most `concurrency` hosts at once, in host order; a host waits
 *   for a slot, so host N starts in wave floor(N / concurrency). Each build records its wave and when it started
 *   after the run's first one; hosts of a later wave also build differently (the polls that time them are busy
 *   with the hosts ahead), so each wave has its own profile, from the builds of that wave (the nearest wave
 *   measured when there are none).
 * - A profile: per phase, the median of its measured seconds, in the order the newest build ran them; the head
 *   (from the deploy's start to the first phase seen: syncing the source, starting the setup, the first poll);
 *   the tail (from the last phase's end to ready: the health gate and the poll that saw it); the total. The
 *   first phase counts from the deploy's start (its head included): when the first poll sees it depends on
 *   when that poll comes, after the whole deploy step.
 * - A building host still needs, per phase of the profile: nothing when it reported that phase done; for the
 *   phase it is in, the median of what the builds that ran longer than it has so far still took (nothing when
 *   it is already slower than all of them); the whole median of a phase it has not started; then the tail
 *   (less the time since its last phase ended). A building host that has reported no phase yet needs the
 *   median total less its time so far, and at least its phases and tail.
 * - A host not yet deploying needs its wave's total, after waiting for its wave to start: the wave's measured
 *   start offset less the time since the run's first deploy started.
 * - The fleet is ready when its slowest unfinished host is: the max over hosts, each by the profile of its own
 *   wave, so the hosts that are systematically slow (a later wave) are not averaged away by a median over all.
 *   Failed hosts are left out (they are not coming), and said so.
 * - This run's pace. A machine under load (or a faster one) builds every phase slower (or faster) than the
 *   earlier runs did. The phases this run has finished so far (on the hosts it is building and has built; each
 *   host's first phase left out, as it holds the deploy step's head) are set against the earlier runs' medians of the same phases (by the same wave's profile): their ratio is the
 *   pace (1.3: this run takes 30 % longer), bounded to PACE_BOUNDS. This run's finished builds are brought to
 *   the earlier runs' pace before they join the profiles, and the profiles are then scaled by the pace, so
 *   what is left is at this run's pace. Without earlier builds, or before a phase finished, the pace is 1.
 */
import type { TimedPhase } from "./timeline.ts";

/** One finished build: seconds from its deploy's start to ready, and each phase's seconds. */
export interface BuildSample {
  runId: string;
  totalSeconds: number;
  phases: { name: string; seconds: number }[];
  /** Seconds from the deploy's start to its first phase seen; absent on builds recorded before it was kept. */
  headSeconds?: number | undefined;
  /** Seconds from its last phase's end to ready; absent on builds recorded before it was kept. */
  tailSeconds?: number | undefined;
  /** The deploy wave it started in (0 for the first `concurrency` hosts); absent: 0. */
  wave?: number | undefined;
  /** Seconds from the run's first deploy start to this build's. */
  startOffsetSeconds?: number | undefined;
}

export interface EstimateHost {
  id: string;
  state: string;
  deployStartedAt?: string | undefined;
  phases: readonly TimedPhase[];
}

export interface Profile {
  phases: { name: string; seconds: number }[];
  headSeconds: number;
  tailSeconds: number;
  totalSeconds: number;
  /** Seconds from the run's first deploy start to the start of this profile's wave. */
  startOffsetSeconds: number;
  /** Each phase's measured seconds, for what is left of a phase a host is in. */
  measured: Record<string, number[]>;
}

export interface EstimateBasis {
  /** Distinct earlier runs whose builds were used. */
  earlierRuns: number;
  /** Builds of those runs. */
  earlierBuilds: number;
  /** Builds of the current run that finished. */
  thisRunBuilds: number;
  /**
   * This run's pace against the earlier runs' (2 decimals; 1.3: its phases take 30 % longer), and how many
   * of its finished phases it was measured on; absent until a phase finished, or without earlier builds.
   */
  pace?: { ratio: number; phases: number };
}

/** The pace is kept within these: a few odd phases must not multiply an estimate by ten. */
export const PACE_BOUNDS = [0.25, 4] as const;

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

/** How the run being estimated deploys. */
export interface RunShape {
  /** Hosts the deploy step starts at once (the run's bounded lab.concurrency). */
  concurrency: number;
  /** When the run started: hosts that finished before it are not part of it. */
  startedAt?: string | undefined;
}

const UNFINISHED = new Set(["pending", "provisioning", "deploying"]);

export function median(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? (s[mid] as number) : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

const sum = (values: readonly number[]) => values.reduce((a, b) => a + b, 0);

/** The profile of a set of builds (see the module comment); undefined without a build. */
export function profileOf(samples: readonly BuildSample[]): Profile | undefined {
  const newest = samples.at(-1);
  if (!newest) return undefined;
  const names = [...newest.phases.map((p) => p.name)];
  for (const s of samples) for (const p of s.phases) if (!names.includes(p.name)) names.push(p.name);
  // A build's first phase counts from its deploy's start: when a poll first sees it depends on when the
  // first poll comes (after the whole deploy step), and a later first poll must not make the phase look short.
  const seconds = (s: BuildSample, p: { name: string; seconds: number }) =>
    p === s.phases[0] ? p.seconds + (s.headSeconds ?? 0) : p.seconds;
  const measured = Object.fromEntries(
    names.map((name) => [
      name,
      samples.flatMap((s) => s.phases.filter((p) => p.name === name).map((p) => seconds(s, p))),
    ]),
  );
  const phases = names.map((name) => ({ name, seconds: median(measured[name] ?? []) }));
  // Builds recorded before head and tail were kept count all their time outside phases as tail.
  const outside = (s: BuildSample) => Math.max(0, s.totalSeconds - sum(s.phases.map((p) => p.seconds)));
  return {
    phases,
    headSeconds: median(samples.map((s) => s.headSeconds ?? 0)),
    tailSeconds: median(samples.map((s) => s.tailSeconds ?? outside(s))),
    totalSeconds: median(samples.map((s) => s.totalSeconds)),
    startOffsetSeconds: median(samples.map((s) => s.startOffsetSeconds ?? 0)),
    measured,
  };
}

/** One profile per measured wave; a wave with no build of its own takes the nearest measured wave's. */
export function waveProfiles(samples: readonly BuildSample[]): (wave: number) => Profile | undefined {
  const byWave = new Map<number, BuildSample[]>();
  for (const s of samples) byWave.set(s.wave ?? 0, [...(byWave.get(s.wave ?? 0) ?? []), s]);
  const profiles = new Map([...byWave].map(([w, list]) => [w, profileOf(list) as Profile]));
  const waves = [...profiles.keys()].sort((a, b) => a - b);
  return (wave) => {
    const exact = profiles.get(wave);
    if (exact) return exact;
    const below = waves.filter((w) => w < wave).at(-1);
    const nearest = below ?? waves[0];
    if (nearest === undefined) return undefined;
    const p = profiles.get(nearest) as Profile;
    // A wave later than any measured starts as much later again as the measured waves did, one slot each (a
    // slot: the measured offset per wave, or the head when only the first wave was ever measured).
    const slot = nearest > 0 ? p.startOffsetSeconds / nearest : p.headSeconds;
    return { ...p, startOffsetSeconds: p.startOffsetSeconds + (wave - nearest) * slot };
  };
}

/** What is left of a phase that has run `elapsed` seconds: the median of what longer builds took beyond it. */
function phaseLeft(measured: readonly number[], typical: number, elapsed: number): number {
  if (measured.length === 0) return Math.max(0, typical - elapsed);
  const longer = measured.filter((d) => d > elapsed).map((d) => d - elapsed);
  return longer.length ? median(longer) : 0;
}

/**
 * Seconds a host still needs, by the profile of its wave; 0 for a host that is not building. `waveStartsIn`:
 * seconds until the host's wave may start deploying (for a host not yet deploying).
 */
export function remainingFor(host: EstimateHost, profile: Profile, now: Date, waveStartsIn = 0): number {
  if (!UNFINISHED.has(host.state)) return 0;
  if (host.state !== "deploying" || !host.deployStartedAt)
    return Math.max(0, waveStartsIn) + profile.totalSeconds;
  const since = (iso: string | undefined) =>
    iso === undefined ? 0 : Math.max(0, (now.getTime() - Date.parse(iso)) / 1000);
  const elapsed = since(host.deployStartedAt);
  if (profile.phases.length === 0) return Math.max(0, profile.totalSeconds - elapsed);
  const phaseSum = sum(profile.phases.map((p) => p.seconds));
  // No phase reported yet: the head (syncing the source, starting the setup) is going; the phases proper
  // (the first without its head) and the tail are still to come.
  if (host.phases.length === 0)
    return Math.max(phaseSum - profile.headSeconds + profile.tailSeconds, profile.totalSeconds - elapsed);
  const seen = new Map(host.phases.map((p) => [p.name, p]));
  let left = 0;
  let allDone = true;
  let lastEnd: string | undefined;
  for (const p of profile.phases) {
    const h = seen.get(p.name);
    if (h?.state === "done") {
      lastEnd = h.endedAt ?? lastEnd;
      continue;
    }
    allDone = false;
    // The first phase runs from the deploy's start (see profileOf), the others from when they were seen.
    const ranFor = h === host.phases[0] ? elapsed : since(h?.startedAt);
    left += h ? phaseLeft(profile.measured[p.name] ?? [], p.seconds, ranFor) : p.seconds;
  }
  // Every phase done: what is left is the tail, less the time since the last phase ended. A phase still
  // running (even one slower than every build measured) leaves the whole tail to come.
  const tail = allDone && lastEnd ? Math.max(0, profile.tailSeconds - since(lastEnd)) : profile.tailSeconds;
  return left + tail;
}

/** A build's times multiplied by `k`. */
function scaleSample(s: BuildSample, k: number): BuildSample {
  const x = (n: number | undefined) => (n === undefined ? undefined : n * k);
  return {
    ...s,
    totalSeconds: s.totalSeconds * k,
    phases: s.phases.map((p) => ({ name: p.name, seconds: p.seconds * k })),
    headSeconds: x(s.headSeconds),
    tailSeconds: x(s.tailSeconds),
    startOffsetSeconds: x(s.startOffsetSeconds),
  };
}

/** A profile's times multiplied by `k`. */
export function scaleProfile(p: Profile, k: number): Profile {
  return {
    phases: p.phases.map((ph) => ({ name: ph.name, seconds: ph.seconds * k })),
    headSeconds: p.headSeconds * k,
    tailSeconds: p.tailSeconds * k,
    totalSeconds: p.totalSeconds * k,
    startOffsetSeconds: p.startOffsetSeconds * k,
    measured: Object.fromEntries(Object.entries(p.measured).map(([n, list]) => [n, list.map((d) => d * k)])),
  };
}

/**
 * This run's pace (see the module comment): the seconds its finished phases took, over what the earlier runs'
 * profile of each host's wave says the same phases take. `hosts` are the run's, in deploy order. Each host's
 * first phase is left out (see below). Undefined when nothing can be compared.
 */
export function observedPace(
  hosts: readonly EstimateHost[],
  earlierProfile: (wave: number) => Profile | undefined,
  concurrency: number,
): { ratio: number; phases: number } | undefined {
  let took = 0;
  let expected = 0;
  let phases = 0;
  hosts.forEach((h, position) => {
    const profile = earlierProfile(Math.floor(position / Math.max(1, concurrency)));
    if (!profile) return;
    // The first phase is left out: it counts from the deploy's start, whose head (the source copied, the
    // setup started, the first poll after the whole deploy step) swings with the deploy step, not the pace.
    for (const p of h.phases.slice(1)) {
      if (p.state !== "done" || !p.endedAt || !p.startedAt) continue;
      const typical = profile.phases.find((x) => x.name === p.name)?.seconds;
      if (!typical) continue;
      const seconds = (Date.parse(p.endedAt) - Date.parse(p.startedAt)) / 1000;
      if (!Number.isFinite(seconds) || seconds < 0) continue;
      took += seconds;
      expected += typical;
      phases++;
    }
  });
  if (phases === 0 || expected <= 0) return undefined;
  const [lo, hi] = PACE_BOUNDS;
  const ratio = Math.min(hi, Math.max(lo, took / expected));
  return { ratio: Math.round(ratio * 100) / 100, phases };
}

/**
 * The fleet's ready estimate. `hosts` in the deploy step's order (host number); `samples` are the lab's
 * finished builds, oldest first; those of `runId` are this run's, the others earlier runs'.
 */
export function estimateFleet(
  hosts: readonly EstimateHost[],
  samples: readonly BuildSample[],
  runId: string | undefined,
  now: Date,
  run: RunShape = { concurrency: Number.POSITIVE_INFINITY },
): FleetEstimate {
  const failed = hosts.filter((h) => h.state === "failed").length;
  const unfinished = hosts.filter((h) => UNFINISHED.has(h.state));
  if (unfinished.length === 0) return { kind: "ready", failed };
  if (!waveProfiles(samples)(0)) return { kind: "unknown", building: unfinished.length, failed };
  const earlier = samples.filter((s) => s.runId !== runId);
  const thisRun = samples.filter((s) => s.runId === runId);
  // The run's hosts, in the order the deploy step takes them: those still building and those it built.
  const started = (h: EstimateHost) =>
    h.deployStartedAt !== undefined && (!run.startedAt || h.deployStartedAt >= run.startedAt);
  const inRun = hosts.filter((h) => UNFINISHED.has(h.state) || started(h));
  const concurrency = Math.max(1, run.concurrency);
  // This run's pace against the earlier runs': their builds, with this run's brought to their pace, make the
  // profiles, which are then set to this run's pace.
  const pace = earlier.length ? observedPace(inRun, waveProfiles(earlier), concurrency) : undefined;
  const k = pace?.ratio ?? 1;
  const normalized = waveProfiles([...earlier, ...thisRun.map((s) => scaleSample(s, 1 / k))]);
  const profileFor = (wave: number) => {
    const p = normalized(wave);
    return p && k !== 1 ? scaleProfile(p, k) : p;
  };
  const basis: EstimateBasis = {
    earlierRuns: new Set(earlier.map((s) => s.runId)).size,
    earlierBuilds: earlier.length,
    thisRunBuilds: thisRun.length,
    ...(pace ? { pace } : {}),
  };
  const starts = inRun.filter(started).map((h) => Date.parse(h.deployStartedAt as string));
  const sinceFirstStart = starts.length ? (now.getTime() - Math.min(...starts)) / 1000 : 0;
  const left: Record<string, number> = {};
  inRun.forEach((h, position) => {
    if (!UNFINISHED.has(h.state)) return;
    const profile = profileFor(Math.floor(position / concurrency)) as Profile;
    left[h.id] = remainingFor(h, profile, now, profile.startOffsetSeconds - sinceFirstStart);
  });
  const slowest = Math.max(...Object.values(left));
  return {
    kind: "estimated",
    readyAt: new Date(now.getTime() + Math.round(slowest * 1000)).toISOString(),
    remainingSeconds: Math.round(slowest),
    building: unfinished.length,
    failed,
    basis,
    hosts: Object.fromEntries(Object.entries(left).map(([id, seconds]) => [id, Math.round(seconds)])),
  };
}

/** "about 40 s", "about 14 min", "about 2 h 05 min": an estimate reads as one (the console and the CLI). */
export function approxText(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `about ${Math.max(5, Math.round(s / 5) * 5)} s`;
  const m = Math.round(s / 60);
  if (m < 60) return `about ${m} min`;
  return `about ${Math.floor(m / 60)} h ${String(m % 60).padStart(2, "0")} min`;
}

/**
 * "from 3 earlier runs", "from this run so far (5 labs built)", "from 2 earlier runs and 4 labs of this run";
 * then the pace when it was measured: "…, at this run's pace (30 % slower than the earlier runs, over 12 phases)".
 */
export function basisText(b: EstimateBasis): string {
  const runs = `${b.earlierRuns} earlier run${b.earlierRuns === 1 ? "" : "s"}`;
  const built = `${b.thisRunBuilds} lab${b.thisRunBuilds === 1 ? "" : "s"}`;
  const from =
    b.earlierRuns > 0 && b.thisRunBuilds > 0
      ? `from ${runs} and ${built} of this run`
      : b.earlierRuns > 0
        ? `from ${runs}`
        : `from this run so far (${built} built)`;
  return b.pace ? `${from}, at this run's pace (${paceText(b.pace)})` : from;
}

/** "30 % slower than the earlier runs, over 12 phases"; "as fast as the earlier runs" within 5 %. */
export function paceText(pace: { ratio: number; phases: number }): string {
  const over = `over ${pace.phases} phase${pace.phases === 1 ? "" : "s"}`;
  const pct = Math.round(Math.abs(pace.ratio - 1) * 100);
  if (pct < 5) return `as fast as the earlier runs, ${over}`;
  return `${pct} % ${pace.ratio > 1 ? "slower" : "faster"} than the earlier runs, ${over}`;
}
