import { reachableAt } from "../agent/reachability.ts";
import { serveQueueAfter } from "../portal/queue.ts";
import { forgetStudentReads } from "../portal/reads.ts";
import { hostIdsOf, type PlanItem, type Provider } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { open } from "../runtime/crypto.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { byNumber } from "../runtime/text.ts";
import type { HostItem, RunItem, WorkshopItem } from "../store/entities.ts";
import type { KeyOrigin } from "../transports/host-keys.ts";
import { parseWorkshopYaml, resolveLabSource } from "../workshop/load.ts";
import type { Workshop } from "../workshop/schema.ts";
import { STAGES, type Stage } from "./check.ts";
import { hostKeyViews } from "./host-key-records.ts";
import { planLabs } from "./machines.ts";

export interface WorkshopSummary {
  name: string;
  state: WorkshopItem["state"];
  provider: string;
  hosts: { total: number; ready: number; failed: number };
  expiry?: string;
  lastRunId?: string;
  updatedAt: string;
}

export interface HostView {
  id: string;
  state: HostItem["state"];
  phase: string | null;
  phases: { name: string; state: string }[];
  error: string | null;
  address?: string;
  providerId?: string;
  expiry?: string;
  elapsedSeconds?: number;
  readyAt?: string;
  hasAccess: boolean;
  /** The in-use health check (shared/fleet/health.ts): absent until a ready lab was checked. */
  health?: { state: "ok" | "failing"; checkedAt: string | null; error: string | null };
  /** The SSH host keys trusted for it (workshop status only): how they were obtained, and their fingerprints. */
  hostKey?: { origin: KeyOrigin; fingerprints: string[] };
  /**
   * An enrolled host's agent (only for machines that joined with a join token): `unreachable` once it missed three
   * check-ins, judged against the clock at this read (shared/agent/reachability.ts), and when it last called in.
   */
  reachable?: "online" | "unreachable";
  lastSeenAt?: string | null;
  /** An enrolled host's controls: drained (no new work, no new claims), disabled (sent nothing). */
  drained?: boolean;
  disabled?: boolean;
}

export interface RunView {
  id: string;
  kind: RunItem["kind"];
  state: RunItem["state"];
  startedAt: string;
  endedAt?: string;
  durationSeconds?: number;
  transitions: number;
  /** The hosts a deploy or retry acted on. */
  selection?: string[];
  /** The stages the run goes through, when not every one (`--only`/`--skip`). */
  stages?: Stage[];
  /** Per host: its end state, why it failed (`error`), or what was done (`detail`, e.g. a teardown). */
  hosts?: Record<string, { state: string; error?: string; detail?: string }>;
  error?: string;
}

export interface WorkshopStatus extends WorkshopSummary {
  spec: Workshop;
  hostList: HostView[];
  runs: RunView[];
}

export interface WorkshopPlan {
  name: string;
  provider: string;
  items: PlanItem[];
}

/** What `up` would do per host (`labfleet up --plan`): the file is checked, nothing is stored or created. */
export async function planWorkshop(yaml: string, baseDir?: string): Promise<WorkshopPlan> {
  assertActor("instructor", "system");
  let spec = parseWorkshopYaml(yaml);
  if (baseDir) spec = resolveLabSource(spec, baseDir);
  const provider = providerFor(spec);
  // The labs of a workshop already up are planned by their current machines (a rollout moves them).
  const machine = new Map(
    (await listHosts(spec.name)).filter((h) => h.state !== "torn_down").map((h) => [h.hostId, h.machine]),
  );
  const labs = hostIdsOf(spec).map((hostId) => ({ hostId, machine: machine.get(hostId) }));
  return { name: spec.name, provider: provider.name, items: await planLabs(provider, spec, labs) };
}

function providerFor(spec: Workshop): Provider {
  const provider = useDeps().providers[spec.provider.type];
  if (!provider) {
    throw new VisibleError(
      "input",
      "workshop.provider_unavailable",
      "this runtime cannot use that provider",
      [{ path: "provider.type", message: `expected one of: ${Object.keys(useDeps().providers).join(", ")}` }],
    );
  }
  const problems = provider.validate(spec);
  if (useDeps().gitSourcesOnly && !spec.lab.source.startsWith("git:")) {
    problems.push({
      path: "lab.source",
      message: `expected a "git:" URL: this control plane runs in the cloud and cannot read the folder ${spec.lab.source} on your machine`,
    });
  }
  if (problems.length > 0)
    throw new VisibleError("input", "workshop.invalid", "workshop.yaml is not valid", problems);
  return provider;
}

/** A file whose provider.count is lower than the workshop's: the count kept, and what the file said. */
export interface CountKept {
  file: number;
  kept: number;
}

/**
 * Creates or updates a workshop from its YAML. A workshop that is being torn down cannot be changed; one
 * that was torn down starts afresh. Submitting never removes hosts: once a workshop has been brought up, a
 * file whose provider.count is lower than the workshop's (scaled up since, say) keeps the workshop's count,
 * and says so in `countKept`; labs are removed with `down --unclaimed` only.
 */
export async function submitWorkshop(
  yaml: string,
  baseDir?: string,
): Promise<{ name: string; created: boolean; countKept?: CountKept }> {
  assertActor("instructor", "system");
  let spec = parseWorkshopYaml(yaml);
  if (baseDir) spec = resolveLabSource(spec, baseDir);
  const { store, clock } = useDeps();
  providerFor(spec);

  const now = isoNow(clock);
  const existing = (await store.workshop.get({ name: spec.name }).go()).data;
  if (existing?.state === "tearing_down") {
    throw new VisibleError(
      "conflict",
      "workshop.tearing_down",
      `workshop ${spec.name} is being torn down; wait until it is gone`,
    );
  }
  if (existing && existing.state !== "torn_down") {
    const old = existing.spec as Workshop;
    if (old.provider.type !== spec.provider.type) {
      throw new VisibleError(
        "conflict",
        "workshop.provider_changed",
        "a workshop's provider cannot change while it has hosts",
        [{ path: "provider.type", message: `expected ${old.provider.type} until the workshop is torn down` }],
      );
    }
    const countKept = keptCount(existing, old, spec);
    if (countKept) spec = { ...spec, provider: { ...spec.provider, count: countKept.kept } } as Workshop;
    await store.workshop.patch({ name: spec.name }).set({ spec, yaml, updatedAt: now }).go();
    // portal.spares may have changed: labs it no longer keeps go to the waiting line.
    forgetStudentReads(spec.name);
    await serveQueueAfter(spec.name);
    return { name: spec.name, created: false, ...(countKept ? { countKept } : {}) };
  }
  await store.workshop
    .put({
      name: spec.name,
      spec,
      yaml,
      state: "draft",
      createdAt: existing?.createdAt ?? now,
      updatedAt: now,
    })
    .go();
  return { name: spec.name, created: true };
}

/**
 * The count a submitted file would lower on a workshop that has been brought up (local and aws hosts): the
 * workshop keeps its own. A static fleet's hosts are its hosts[] list, as the file says.
 */
function keptCount(existing: WorkshopItem, old: Workshop, spec: Workshop): CountKept | undefined {
  if (existing.state === "draft" || old.provider.type === "static" || spec.provider.type === "static")
    return undefined;
  if (old.provider.type === "enrolled" || spec.provider.type === "enrolled") return undefined;
  if (spec.provider.count >= old.provider.count) return undefined;
  return { file: spec.provider.count, kept: old.provider.count };
}

export async function getWorkshop(name: string): Promise<WorkshopItem> {
  const { store } = useDeps();
  const item = (await store.workshop.get({ name }).go()).data;
  if (!item) throw new VisibleError("not_found", "workshop.not_found", `no workshop named ${name}`);
  return item;
}

export async function listHosts(name: string): Promise<HostItem[]> {
  const { store } = useDeps();
  return (await store.host.query.byWorkshop({ workshop: name }).go({ pages: "all" })).data;
}

export async function listRuns(name: string): Promise<RunItem[]> {
  const { store } = useDeps();
  return (await store.run.query.byWorkshop({ workshop: name }).go({ pages: "all" })).data;
}

function summarize(w: WorkshopItem, hosts: HostItem[]): WorkshopSummary {
  return {
    name: w.name,
    state: w.state,
    provider: (w.spec as Workshop).provider.type,
    hosts: {
      total: hosts.filter((h) => h.state !== "torn_down").length,
      ready: hosts.filter((h) => h.state === "ready").length,
      failed: hosts.filter((h) => h.state === "failed").length,
    },
    ...(w.expiry ? { expiry: w.expiry } : {}),
    ...(w.lastRunId ? { lastRunId: w.lastRunId } : {}),
    updatedAt: w.updatedAt,
  };
}

export async function listWorkshops(): Promise<WorkshopSummary[]> {
  assertActor("instructor", "system");
  const { store } = useDeps();
  const all = (await store.workshop.query.all({}).go({ pages: "all" })).data;
  return Promise.all(all.map(async (w) => summarize(w, await listHosts(w.name))));
}

export function runView(r: RunItem): RunView {
  return {
    id: r.runId,
    kind: r.kind,
    state: r.state,
    startedAt: r.startedAt,
    ...(r.endedAt
      ? {
          endedAt: r.endedAt,
          durationSeconds: Math.round((Date.parse(r.endedAt) - Date.parse(r.startedAt)) / 1000),
        }
      : {}),
    transitions: r.transitions ?? 0,
    ...(r.selection?.length ? { selection: r.selection } : {}),
    ...(r.stages?.length ? { stages: STAGES.filter((st) => r.stages?.includes(st)) } : {}),
    ...(r.hosts ? { hosts: r.hosts as RunView["hosts"] } : {}),
    ...(r.error ? { error: r.error } : {}),
  };
}

export function hostView(h: HostItem, now: Date): HostView {
  const end = h.readyAt ? Date.parse(h.readyAt) : h.state === "deploying" ? now.getTime() : undefined;
  return {
    id: h.hostId,
    state: h.state,
    phase: h.phase ?? null,
    // The phases' times are the fleet view's (shared/fleet/fleet-view.ts); status keeps name and state.
    phases: (h.phases ?? []).map((p) => ({ name: p.name, state: p.state })),
    error: h.error ?? null,
    ...(h.address ? { address: h.address } : {}),
    ...(h.providerId ? { providerId: h.providerId } : {}),
    ...(h.expiry ? { expiry: h.expiry } : {}),
    ...(h.deployStartedAt && end !== undefined
      ? { elapsedSeconds: Math.max(0, Math.round((end - Date.parse(h.deployStartedAt)) / 1000)) }
      : {}),
    ...(h.readyAt ? { readyAt: h.readyAt } : {}),
    hasAccess: Boolean(h.access),
    ...(h.health
      ? { health: { state: h.health, checkedAt: h.healthCheckedAt ?? null, error: h.healthError ?? null } }
      : {}),
    ...(h.provider === "enrolled"
      ? {
          reachable: reachableAt(h, now) ?? "online",
          lastSeenAt: h.lastSeenAt ?? null,
          drained: h.drained ?? false,
          disabled: h.disabled ?? false,
        }
      : {}),
  };
}

export async function workshopStatus(name: string): Promise<WorkshopStatus> {
  assertActor("instructor", "system");
  const { clock } = useDeps();
  const w = await getWorkshop(name);
  const spec = w.spec as Workshop;
  const [hosts, runs, keys] = await Promise.all([
    listHosts(name),
    listRuns(name),
    hostKeyViews(spec, w.updatedAt),
  ]);
  const keyOf = new Map(keys.map((k) => [k.hostId, k]));
  const now = clock.now();
  return {
    ...summarize(w, hosts),
    spec,
    // In the order people count them (student-9 before student-10), as the console lists them.
    hostList: [...hosts]
      .sort((a, b) => byNumber(a.hostId, b.hostId))
      .map((h) => {
        const k = keyOf.get(h.hostId);
        const v = hostView(h, now);
        return k
          ? { ...v, hostKey: { origin: k.origin, fingerprints: k.keys.map((x) => x.fingerprint) } }
          : v;
      }),
    runs: runs.map(runView).reverse(),
  };
}

/** The access details a lab wrote ($LABFLEET_ACCESS), decrypted for the instructor. */
export async function hostAccess(name: string, hostId: string): Promise<unknown> {
  assertActor("instructor");
  const { store, accessKey } = useDeps();
  await getWorkshop(name);
  const host = (await store.host.get({ workshop: name, hostId }).go()).data;
  if (!host) throw new VisibleError("not_found", "host.not_found", `no host ${hostId} in workshop ${name}`);
  if (!host.access)
    throw new VisibleError("not_found", "host.no_access", `host ${hostId} has no access details (yet)`);
  return JSON.parse(open(accessKey, host.access));
}
