/**
 * The measured phase durations of finished builds, per lab identity: what the ready estimate of a later run of
 * the same lab stands on (shared/fleet/estimate.ts). A build is recorded when its host becomes ready; only the
 * newest LAB_TIMINGS_KEPT builds of an identity are kept, and none longer than LAB_TIMING_RETENTION_DAYS.
 */
import { createHash } from "node:crypto";
import { useDeps } from "../runtime/deps.ts";
import { log } from "../runtime/logger.ts";
import { byNumber } from "../runtime/text.ts";
import type { HostItem, RunItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import type { BuildSample } from "./estimate.ts";
import { phaseFinished } from "./timeline.ts";

/** Builds kept per lab identity: a few runs of a 50-lab workshop. */
export const LAB_TIMINGS_KEPT = 200;
export const LAB_TIMING_RETENTION_DAYS = 180;

/**
 * The lab's identity: what makes two builds comparable. Its source, ref and setup command, hashed (a git URL
 * may carry a credential, and the key should never show it).
 */
export function labIdentity(spec: Workshop): string {
  const { source, ref, setup } = spec.lab as { source: string; ref?: string; setup: string };
  return createHash("sha256")
    .update(JSON.stringify([source, ref ?? "", setup]))
    .digest("hex")
    .slice(0, 32);
}

/** Where a build stood in its run's deploy step (shared/fleet/estimate.ts models the waves). */
export interface BuildPlace {
  wave: number;
  startOffsetSeconds: number;
}

/**
 * Where each of the run's hosts stood in its deploy step: the deploy step takes them in host order, `concurrency`
 * at once, so host N started in wave floor(N / concurrency); and how long after the run's first deploy start
 * its own came (hosts this run did not deploy count for neither). A host's own record, when given, is where its
 * start is read: a listing taken before that host started still places it.
 */
export function buildPlaces(hosts: readonly HostItem[], run: RunItem, spec: Workshop) {
  const concurrency = Math.max(1, run.deployConcurrency ?? spec.lab.concurrency);
  const ordered = [...hosts].sort((a, b) => byNumber(a.hostId, b.hostId));
  const started = (h: HostItem) =>
    h.deployStartedAt && h.deployStartedAt >= run.startedAt ? h.deployStartedAt : undefined;
  const starts = ordered
    .map(started)
    .filter((t) => t !== undefined)
    .map((t) => Date.parse(t));
  const first = starts.length ? Math.min(...starts) : undefined;
  return (hostId: string, own?: HostItem): BuildPlace | undefined => {
    const position = ordered.findIndex((h) => h.hostId === hostId);
    const listed = ordered[position];
    const at = own ? started(own) : listed && started(listed);
    if (position < 0 || !at || first === undefined) return undefined;
    const from = Math.min(first, Date.parse(at));
    return { wave: Math.floor(position / concurrency), startOffsetSeconds: (Date.parse(at) - from) / 1000 };
  };
}

/** A run's build places as its pushes last listed them, and when that listing started (performance.now()). */
const pushPlaces = new Map<
  string,
  { places: Promise<(hostId: string, own?: HostItem) => BuildPlace | undefined>; at: number }
>();
/** Runs whose places are kept at once (one per workshop being brought up, in practice). */
const PUSH_PLACES_KEPT = 16;

/**
 * The build place of a lab that pushed its readiness, from its own record (`own`, as its move to ready wrote it:
 * its deploy's start) and a listing of the run's hosts (its position among them, and the run's first start). One
 * listing serves every push of the run; the hosts are listed again, once for the pushes asking meanwhile, only
 * when a push asks for a host the listing does not hold or no host had started when it was taken. So the pushes
 * of a fleet list its hosts about once per run, not once each (500 listings of 500 hosts for a 500-lab up).
 */
export async function pushedPlace(
  spec: Workshop,
  run: RunItem,
  own: HostItem,
  runHosts: () => Promise<HostItem[]>,
): Promise<BuildPlace | undefined> {
  const hostId = own.hostId;
  const key = `${spec.name}\u0000${run.runId}`;
  const asked = performance.now();
  const list = () => {
    const entry = {
      places: runHosts().then((hosts) => buildPlaces(hosts, run, spec)),
      at: performance.now(),
    };
    pushPlaces.delete(key);
    if (pushPlaces.size >= PUSH_PLACES_KEPT) pushPlaces.delete(pushPlaces.keys().next().value ?? "");
    pushPlaces.set(key, entry);
    entry.places.catch(() => pushPlaces.get(key) === entry && pushPlaces.delete(key));
    return entry;
  };
  let entry = pushPlaces.get(key) ?? list();
  let place = (await entry.places)(hostId, own);
  // Not there: the host was not in the run, or no host had started, when that listing was taken (one started
  // before this push arrived is shared; an older one is not). A host this run never started has no place.
  if (!place && own.deployStartedAt && own.deployStartedAt >= run.startedAt && entry.at < asked) {
    const current = pushPlaces.get(key);
    entry = current && current !== entry && current.at >= asked ? current : list();
    place = (await entry.places)(hostId, own);
  }
  return place;
}

/**
 * A finished build's sample: total and per-phase seconds, the head before its first phase and the tail after
 * its last, from the host's timed phases; undefined without times.
 */
export function sampleOf(h: HostItem, runId: string, place?: BuildPlace): BuildSample | undefined {
  if (!h.deployStartedAt || !h.readyAt) return undefined;
  const start = Date.parse(h.deployStartedAt);
  const ready = Date.parse(h.readyAt);
  const total = (ready - start) / 1000;
  if (!Number.isFinite(total) || total < 0) return undefined;
  const timed = (h.phases ?? []).filter((p) => p.startedAt && p.endedAt && phaseFinished(p.state));
  const phases = timed.map((p) => ({
    name: p.name,
    seconds: Math.max(0, (Date.parse(p.endedAt as string) - Date.parse(p.startedAt as string)) / 1000),
  }));
  const starts = timed.map((p) => Date.parse(p.startedAt as string));
  const ends = timed.map((p) => Date.parse(p.endedAt as string));
  const clamp = (ms: number) => Math.min(total, Math.max(0, ms / 1000));
  return {
    runId,
    totalSeconds: total,
    phases,
    ...(timed.length
      ? { headSeconds: clamp(Math.min(...starts) - start), tailSeconds: clamp(ready - Math.max(...ends)) }
      : {}),
    ...(place ?? {}),
  };
}

/**
 * Drops a lab's recorded builds beyond the newest LAB_TIMINGS_KEPT. The builds a poll records at once (50 labs
 * ready together) share one trim in flight (per store) instead of each deleting the same old records again.
 */
const trimsInFlight = new WeakMap<object, Map<string, Promise<void>>>();

function trimBuilds(identity: string): Promise<void> {
  const { store } = useDeps();
  const inFlight = trimsInFlight.get(store) ?? new Map<string, Promise<void>>();
  trimsInFlight.set(store, inFlight);
  const pending = inFlight.get(identity);
  if (pending) return pending;
  const trim = (async () => {
    const newest = await store.labTiming.query
      .byIdentity({ identity })
      .go({ order: "desc", limit: LAB_TIMINGS_KEPT + 50 });
    for (const old of newest.data.slice(LAB_TIMINGS_KEPT))
      await store.labTiming.delete({ identity, finishedAt: old.finishedAt, hostId: old.hostId }).go();
  })().finally(() => inFlight.delete(identity));
  inFlight.set(identity, trim);
  return trim;
}

/** Records a host's finished build under its lab's identity, then drops what is beyond LAB_TIMINGS_KEPT. */
export async function recordBuild(
  spec: Workshop,
  h: HostItem,
  runId: string,
  place?: BuildPlace,
): Promise<void> {
  const sample = sampleOf(h, runId, place);
  if (!sample || !h.readyAt) return;
  const { store, clock } = useDeps();
  const identity = labIdentity(spec);
  await store.labTiming
    .put({
      identity,
      finishedAt: h.readyAt,
      hostId: h.hostId,
      workshop: spec.name,
      runId,
      totalSeconds: sample.totalSeconds,
      phases: sample.phases,
      ...(sample.headSeconds !== undefined ? { headSeconds: sample.headSeconds } : {}),
      ...(sample.tailSeconds !== undefined ? { tailSeconds: sample.tailSeconds } : {}),
      ...(place ?? {}),
      expiresAt: Math.floor(clock.now().getTime() / 1000) + LAB_TIMING_RETENTION_DAYS * 86_400,
    })
    .go();
  await trimBuilds(identity);
  log.debug("build timed", {
    workshop: spec.name,
    hostId: h.hostId,
    seconds: Math.round(sample.totalSeconds),
  });
}

/** The lab's recorded builds, oldest first (at most LAB_TIMINGS_KEPT). */
export async function labBuilds(spec: Workshop): Promise<BuildSample[]> {
  const { store } = useDeps();
  const r = await store.labTiming.query
    .byIdentity({ identity: labIdentity(spec) })
    .go({ order: "desc", limit: LAB_TIMINGS_KEPT });
  return r.data
    .map((t) => ({
      runId: t.runId,
      totalSeconds: t.totalSeconds,
      phases: t.phases,
      headSeconds: t.headSeconds,
      tailSeconds: t.tailSeconds,
      wave: t.wave,
      startOffsetSeconds: t.startOffsetSeconds,
    }))
    .reverse();
}
