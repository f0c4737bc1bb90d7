import { leftOutOfRuns } from "../agent/left-out.ts";
import { openWhenReady, portalMayOpen } from "../portal/portal.ts";
import { serveQueueAfter } from "../portal/queue.ts";
import { forgetStudentReads } from "../portal/reads.ts";
import { hostIdsOf, type Provider, type ProvisionedHost } from "../providers/types.ts";
import { withActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { freshFlight, mapLimit, shortCache } from "../runtime/concurrency.ts";
import { seal } from "../runtime/crypto.ts";
import { timeLeft } from "../runtime/deadline.ts";
import { releaseConnections, useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem, RunItem } from "../store/entities.ts";
import { SSM_SEND_MAX_TARGETS } from "../transports/ssm-batch.ts";
import type { ExecResult, Transport } from "../transports/types.ts";
import { deployBatches, deployBatchSize, INLINE_MAP_MAX_CONCURRENCY } from "../workshop/limits.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { pinHostKeysThrough } from "./host-keys.ts";
import { recordHostLife } from "./host-lives.ts";
import { transportFor } from "./hosts.ts";
import {
  HEALTH_GRACE_SECONDS,
  judge,
  type LabProbe,
  LabStepError,
  lastLines,
  parsePhases,
  probeLab,
  readAccess,
  runHealth,
  stopLab,
} from "./lab.ts";
import { leftRunning, startSetup } from "./lab-deploy.ts";
import { type BuildPlace, buildPlaces, pushedPlace, recordBuild } from "./lab-timings.ts";
import { deprovisionLabs, provisionLabs } from "./machines.ts";
import { openAccessWhenReady } from "./open-access.ts";
import { pushFiles } from "./push-config.ts";
import { checkSecrets, getRun, isConditionalFailure, recordTransitions, releaseWorkshop } from "./runs.ts";
import { ensureTeardownSchedule } from "./schedules.ts";
import { publishSecretParameter, removeSecretParameter, secretRedactor } from "./secrets.ts";
import { type StageFlags, stageFlags, stagesOf } from "./stages.ts";
import { samePhases, timePhases } from "./timeline.ts";
import { getWorkshop, listHosts } from "./workshops.ts";

/**
 * The steps of the `up` workflow. Each is called by one thin handler in functions/ and is idempotent:
 * a resumed or repeated run reuses hosts, leaves running labs running and skips completed ones.
 */

export const POLL_CONCURRENCY = 16;

/**
 * How many of a provider's hosts a fan-out step (a poll, stopping labs) works on at once: POLL_CONCURRENCY, or
 * for hosts reached through SSM, one SendCommand's worth (50): those hosts' identical commands share one
 * SendCommand (shared/transports/ssm-batch.ts), and each waits on AWS, not on this process.
 */
export function fanOutWidth(provider: Pick<Provider, "transport">): number {
  return provider.transport === "ssm" ? SSM_SEND_MAX_TARGETS : POLL_CONCURRENCY;
}
/** Per-host records written at once by the steps that write one per host (provision, teardown). */
export const HOST_WRITE_CONCURRENCY = 16;
/** A poll starts checking a host only with at least this much of its time left (a probe, health, access). */
export const POLL_MIN_HOST_MS = 10_000;

export async function loadWorkshop(workshop: string): Promise<{ spec: Workshop; provider: Provider }> {
  const w = await getWorkshop(workshop);
  const spec = w.spec as Workshop;
  const provider = useDeps().providers[spec.provider.type];
  if (!provider)
    throw new VisibleError(
      "input",
      "provider.unavailable",
      `provider ${spec.provider.type} is not available here`,
    );
  return { spec, provider };
}

/** Updates a host; `error` is cleared unless the update sets one (a later good poll clears a transient error). */
async function patchHost(workshop: string, hostId: string, set: Partial<HostItem>): Promise<void> {
  const { store, clock } = useDeps();
  const update = store.host.patch({ workshop, hostId }).set({ ...set, updatedAt: isoNow(clock) } as never);
  await ("error" in set ? update : update.remove(["error"])).go();
}

export interface UpSettings {
  /** The Deploy Map's items at once (each item is one host, or a batch of hosts in a large workshop). */
  concurrency: number;
  pollSeconds: number;
  deadline: string;
  /**
   * Whether the run deploys: false for a `provision` run and a run that leaves the deploy stage out. Read from
   * the run record, so a resumed run and a Step Functions execution (whose input holds no kind) both know.
   */
  deploy: boolean;
  /** The stages the run goes through (shared/fleet/stages.ts), for the workflow's Choice states. */
  stages: StageFlags;
  /**
   * The hosts a run that leaves out the provision stage acts on: those recorded (its selection, if any), which
   * the workflow uses in place of Provision's answer. Empty when the run provisions.
   */
  hostIds: string[];
  /** The same hosts as the Deploy Map's items (deployBatchesOf). */
  batches: string[][];
}

/**
 * The Deploy Map's items: the hosts in batches of deployBatchSize (shared/workshop/limits.ts) for the
 * workshop's size, so one Step Functions execution holds at most 100 items whatever the fleet.
 */
export function deployBatchesOf(spec: Workshop, hostIds: string[]): string[][] {
  return deployBatches(hostIds, deployBatchSize(hostIdsOf(spec).length));
}

/**
 * The hosts a run deploys at once: what the workshop (or the run) asks, at most what an inline Map runs at once
 * (40), and at most half of the task invocations the account can run at once when the runtime knows that
 * number (Deps.taskConcurrency); at least one.
 */
export function boundConcurrency(wanted: number, accountConcurrency: number | undefined): number {
  const bound = Math.min(wanted, INLINE_MAP_MAX_CONCURRENCY);
  if (accountConcurrency === undefined) return bound;
  return Math.max(1, Math.min(bound, Math.floor(accountConcurrency / 2)));
}

/** Settings for this run; the deadline is fixed at the first start so a resumed run keeps it. */
export async function beginUp(workshop: string, runId: string): Promise<UpSettings> {
  const { store, clock } = useDeps();
  const { spec } = await loadWorkshop(workshop);
  const run = await getRun(workshop, runId);
  let deadline = run.deadline;
  if (!deadline) {
    deadline = new Date(clock.now().getTime() + spec.lab.timeout_minutes * 60_000).toISOString();
    await store.run.patch({ workshop, runId }).set({ deadline }).go();
  }
  // A large workshop deploys in batches: the Map's items at once are the hosts at once over the batch size,
  // bounded as invocations at once are (each item is one DeployHost invocation).
  const batch = deployBatchSize(hostIdsOf(spec).length);
  const concurrency = boundConcurrency(
    Math.ceil((run.concurrency ?? spec.lab.concurrency) / batch),
    await useDeps().taskConcurrency?.(),
  );
  const hostsAtOnce = concurrency * batch;
  // Kept on the run for the ready estimate, which models the deploy step's waves of this many hosts.
  if (run.deployConcurrency !== hostsAtOnce)
    await store.run.patch({ workshop, runId }).set({ deployConcurrency: hostsAtOnce }).go();
  const stages = stagesOf(run);
  const deploy = stages.includes("deploy");
  // Before any host is touched, also when a run was not started through startRun. A provision run deploys
  // nothing, so it needs no secret: the `up` that deploys its hosts checks them. For hosts reached through
  // SSM the secrets parameter is written here, once for the run: every DeployHost only names it.
  if (deploy) {
    await checkSecrets(spec);
    await publishSecretParameter(spec);
  }
  const hostIds = stages.includes("provision") ? [] : (await runHosts(workshop, runId)).map((h) => h.hostId);
  return {
    concurrency,
    pollSeconds: spec.lab.poll_seconds,
    deadline,
    deploy,
    stages: stageFlags(stages),
    hostIds,
    batches: deployBatchesOf(spec, hostIds),
  };
}

/**
 * Acquires the hosts (reusing existing ones), records them, and arms the TTL teardown. A new host is recorded
 * `pending` (it exists, no lab is deployed on it); a reused one keeps its state. A `provision` run also
 * records each host's result on the run (`provisioned`, or `failed` with the provider's reason), which
 * FinishUp turns into the run's outcome, and leaves the workshop `provisioning`: nothing deploys.
 */
export async function provisionHosts(
  workshop: string,
  runId: string,
): Promise<{ hostIds: string[]; batches: string[][] }> {
  const { store, clock } = useDeps();
  const { spec, provider } = await loadWorkshop(workshop);
  const now = clock.now();
  const w = await getWorkshop(workshop);
  const expiry = w.expiry ?? new Date(now.getTime() + spec.provider.ttl_hours * 3_600_000).toISOString();
  const existing = new Map((await listHosts(workshop)).map((h) => [h.hostId, h]));

  const run = await getRun(workshop, runId);
  // A deploy or retry acts on its selection and leaves the workshop's state to FinishUp; the others say what
  // the workshop is doing.
  const selected = run.kind !== "up" && run.selection?.length ? new Set(run.selection) : undefined;

  await store.workshop
    .patch({ name: workshop })
    .set({ ...(selected ? {} : { state: "provisioning" as const }), expiry, updatedAt: now.toISOString() })
    .go();
  await removeDroppedHosts(spec, provider, [...existing.values()]);
  const removed = new Set(w.removedHosts ?? []);
  // Every run provisions what it acts on (a deploy or retry its selection): provision is idempotent, so live
  // hosts are reused as they are, and a host whose machine is gone (an EC2 instance a student powered off) is
  // replaced before it is deployed.
  const provisioned = await provisionLabs(
    provider,
    spec,
    (provider.hostIds ? await provider.hostIds(spec) : hostIdsOf(spec))
      .filter((id) => !removed.has(id) && (!selected || selected.has(id)))
      .map((hostId) => ({ hostId, machine: existing.get(hostId)?.machine })),
    { expiry: new Date(expiry), attempt: runId },
  );
  // Each host's record is its own write: 16 at once, so a 500-host workshop is not 500 round trips in a row.
  await mapLimit(provisioned, HOST_WRITE_CONCURRENCY, async (p) => {
    const prev = existing.get(p.hostId);
    // A host that comes back at another address is another machine: nothing of the old lab is kept.
    const keep = prev && prev.state !== "torn_down" && (!prev.address || prev.address === p.address);
    // A kept host's record changes only where the provider's answer does: what the lab's deploys, health checks
    // and rollouts wrote stays (and a host the provider answers for as before is not written at all).
    if (keep) {
      const change = keptHostChange(prev, p, provider.name, expiry);
      if (change)
        await store.host
          .patch({ workshop, hostId: p.hostId })
          .set({ ...change.set, updatedAt: now.toISOString() })
          .remove(change.remove)
          .go();
      return;
    }
    // The machine it replaces used hours too: the teardown receipt counts them (shared/fleet/host-lives.ts).
    if (prev && prev.state !== "torn_down") await recordHostLife(spec, prev, "replaced");
    await store.host
      .put({
        workshop,
        hostId: p.hostId,
        provider: provider.name,
        address: p.address,
        ...(p.providerId ? { providerId: p.providerId } : {}),
        ...(p.publicIp ? { publicIp: p.publicIp } : {}),
        ...(prev?.machine && prev.state !== "torn_down" ? { machine: prev.machine } : {}),
        labels: p.labels ?? {},
        expiry,
        state: p.error ? "failed" : "pending",
        phases: [],
        ...(p.error ? { error: p.error } : {}),
        attempt: 0,
        ...(prev ? enrolledFields(prev) : {}),
        // When this machine's life began: a replaced or returning host starts a new one.
        createdAt: now.toISOString(),
        updatedAt: now.toISOString(),
      })
      .go();
  });
  await ensureTeardownSchedule(workshop, expiry);
  if (run.kind === "provision") {
    const results = Object.fromEntries(
      provisioned.map((p) => [
        p.hostId,
        p.error ? { state: "failed", error: p.error.slice(0, 2000) } : { state: "provisioned" },
      ]),
    );
    await store.run.patch({ workshop, runId }).set({ hosts: results }).go();
    const hostIds = provisioned.filter((p) => !p.error).map((p) => p.hostId);
    return { hostIds, batches: deployBatchesOf(spec, hostIds) };
  }
  if (!selected) {
    await store.workshop
      .patch({ name: workshop })
      .set({ state: "deploying", updatedAt: isoNow(clock) })
      .go();
  }
  // Hosts that could not be provisioned are not deployed.
  const hostIds = provisioned.filter((p) => !p.error).map((p) => p.hostId);
  return { hostIds, batches: deployBatchesOf(spec, hostIds) };
}

/**
 * What provision changes in the record of a host it keeps (the same machine): the fields the provider answers for,
 * where they differ, and the failure when the provider could not confirm the host. Undefined: nothing differs.
 */
function keptHostChange(
  prev: HostItem,
  p: ProvisionedHost,
  provider: string,
  expiry: string,
): { set: Partial<HostItem>; remove: ("providerId" | "publicIp")[] } | undefined {
  const set: Partial<HostItem> = {};
  const remove: ("providerId" | "publicIp")[] = [];
  if (prev.provider !== provider) set.provider = provider;
  if (prev.address !== p.address) set.address = p.address;
  for (const k of ["providerId", "publicIp"] as const) {
    if (p[k] && prev[k] !== p[k]) set[k] = p[k];
    else if (!p[k] && prev[k] !== undefined) remove.push(k);
  }
  const labels = p.labels ?? {};
  if (JSON.stringify(prev.labels ?? {}) !== JSON.stringify(labels)) set.labels = labels;
  if (prev.expiry !== expiry) set.expiry = expiry;
  if (p.error && (prev.state !== "failed" || prev.error !== p.error))
    Object.assign(set, { state: "failed", error: p.error });
  return Object.keys(set).length || remove.length ? { set, remove } : undefined;
}

/** What an enrolled host's record keeps whatever a run writes: its enrollment, check-ins and controls. */
function enrolledFields(h: HostItem): Partial<HostItem> {
  const keys = ["enrollment", "lastSeenAt", "reachable", "drained", "disabled", "facts"] as const;
  return Object.fromEntries(keys.filter((k) => h[k] !== undefined).map((k) => [k, h[k]]));
}

/**
 * Hosts the spec no longer lists (a lower count, a host taken out of hosts[]) are stopped and given back. Hosts
 * that come to their provider (enrolled machines) are not listed by the spec: they leave by their own commands.
 */
async function removeDroppedHosts(spec: Workshop, provider: Provider, existing: HostItem[]): Promise<void> {
  if (provider.hostIds) return;
  const wanted = new Set(hostIdsOf(spec));
  await removeHosts(
    spec,
    provider,
    existing.filter((h) => !wanted.has(h.hostId) && h.state !== "torn_down"),
  );
}

/** Stops the labs of these hosts, gives the hosts back to their provider and marks them torn down. */
export async function removeHosts(spec: Workshop, provider: Provider, dropped: HostItem[]): Promise<void> {
  if (dropped.length === 0) return;
  const toStop = provider.deprovisionEndsLabs ? [] : dropped.filter((h) => h.address);
  await mapLimit(toStop, fanOutWidth(provider), async (h) => {
    const t = transportFor(spec, provider, h);
    try {
      await stopLab(t, spec.name).catch(() => undefined);
    } finally {
      await t.close?.();
    }
  });
  const results = await deprovisionLabs(provider, spec, dropped);
  const byId = new Map(dropped.map((h) => [h.hostId, h]));
  await releaseConnections(
    spec.name,
    dropped.map((h) => h.hostId),
  );
  for (const r of results) {
    if (r.result === "error")
      await patchHost(spec.name, r.hostId, { error: `removing this host failed: ${r.detail ?? ""}` });
    else {
      const { store, clock } = useDeps();
      const h = byId.get(r.hostId);
      // Its hours count on the teardown receipt (shared/fleet/host-lives.ts).
      if (h) await recordHostLife(spec, h, "removed");
      await store.host
        .patch({ workshop: spec.name, hostId: r.hostId })
        .set({ state: "torn_down", updatedAt: isoNow(clock) })
        .remove(["access", "address", "machine"])
        .go();
    }
  }
  log.info("hosts removed from the workshop", { workshop: spec.name, hosts: dropped.map((h) => h.hostId) });
}

/**
 * What every host of a run's deploy reads alike: the workshop's spec, fixed while the run owns the workshop (a
 * change of spec starts a run of its own: startRun), and the run's git ref. Read once for the hosts a process
 * deploys within a few seconds of each other (a fleet's Deploy Map items), not twice per host.
 */
const deployContext = shortCache({
  key: (workshop: string, runId: string) => `${workshop}\0${runId}`,
  load: async (workshop: string, runId: string) => {
    const [{ spec, provider }, run] = await Promise.all([loadWorkshop(workshop), getRun(workshop, runId)]);
    return { spec, provider, ref: run.ref };
  },
  ttlMs: 10_000,
});

export type DeployAction = "started" | "running" | "complete";

/**
 * Deploys one host: skip a complete lab (unless forced), leave a running one, else sync and start setup.
 * Force rebuilds a host once per run: a resumed run finds the setups it started itself (the host records the
 * run that started its setup) and treats them as a run without force does, so a lab it already rebuilt
 * stays and a setup it started is followed, not started again. A setup this run started that was stopped
 * (the local runtime stops setups still building when it closes) is rebuilt, as after any failure.
 */
export async function deployHost(
  workshop: string,
  runId: string,
  hostId: string,
  force: boolean,
  /** The host's record, when the caller read it with others (deployHosts); else it is read here. */
  known?: HostItem,
): Promise<{ hostId: string; action: DeployAction }> {
  const { store, clock } = useDeps();
  const [{ spec, provider, ref }, host] = await Promise.all([
    deployContext(workshop, runId),
    known ??
      store.host
        .get({ workshop, hostId })
        .go()
        .then((r) => r.data),
  ]);
  const gitSource = spec.lab.source.startsWith("git:");
  if (!host)
    throw new VisibleError("not_found", "host.not_found", `no host ${hostId} in workshop ${workshop}`);
  const t = transportFor(spec, provider, host);
  try {
    // The records alone decide: complete, running, or to be (re)built.
    const probe = await probeLab(t, workshop, { recordsOnly: true });
    const verdict = judge(probe);
    const rebuild = force && probe.runId !== runId;
    if (!rebuild && verdict.state === "complete") {
      await pinHostKeysThrough(t, spec, provider, host);
      if (host.state !== "ready") {
        await store.host
          .patch({ workshop, hostId })
          .set({ state: "deploying", updatedAt: isoNow(clock) })
          .remove(["error"])
          .go();
      }
      return { hostId, action: "complete" };
    }
    if (!rebuild && verdict.state === "running") {
      await pinHostKeysThrough(t, spec, provider, host);
      await patchHost(workshop, hostId, { state: "deploying" });
      return { hostId, action: "running" };
    }
    // The host's SSH keys, read through a transport that does not trust the network (SSM), before any secret.
    const recordDeploy = async () => {
      await pinHostKeysThrough(t, spec, provider, host);
      const now = isoNow(clock);
      await store.host
        .patch({ workshop, hostId })
        .set({
          state: "deploying",
          phase: "sync",
          phases: [],
          deployStartedAt: now,
          updatedAt: now,
          // The git ref it is built at: the run's --ref, else lab.ref, else HEAD (rollouts and check mode read it).
          ...(gitSource ? { ref: ref ?? spec.lab.ref ?? "HEAD" } : {}),
        })
        // A rebuilt lab starts with no in-use health record (shared/fleet/health.ts): no stale `failing` flag.
        .remove([
          "error",
          "readyAt",
          "access",
          "health",
          "healthFailures",
          "healthError",
          "healthCheckedAt",
          ...(gitSource ? [] : (["ref"] as const)),
          "notice",
          "noticeAt",
        ])
        .add({ attempt: 1 })
        .go();
      return pushFiles(spec, provider, host);
    };
    // A running setup is stopped before it is rebuilt, and so is what a killed wrapper left running.
    await startSetup(t, spec, provider, {
      hostId,
      runId,
      ref,
      stop: leftRunning(probe),
      beforeSecrets: recordDeploy,
    });
    await markSetupStarted(workshop, hostId);
    log.info("lab started", { workshop, hostId });
    return { hostId, action: "started" };
  } finally {
    await t.close?.();
  }
}

/**
 * Shows a host's setup as started (phase `started`) while its record still shows the sync the deploy wrote before
 * the start: a lab whose wrapper already pushed meanwhile (a setup that reports a phase at once, or an instant lab
 * already judged ready) keeps what the push wrote.
 */
export async function markSetupStarted(workshop: string, hostId: string): Promise<void> {
  const { store, clock } = useDeps();
  try {
    await store.host
      .patch({ workshop, hostId })
      .set({ phase: "started", updatedAt: isoNow(clock) })
      .remove(["error"])
      .where((a, op) => `${op.eq(a.phase, "sync")} AND ${op.eq(a.state, "deploying")}`)
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
  }
}

/**
 * One Deploy Map item: its hosts (one, or a batch in a large workshop) deployed side by side. A lone host's
 * failure is the item's (its Catch records it, RecordHostFailure); in a batch each host's failure is recorded
 * here, so one bad host never fails the others, and the item fails only when the invocation does (a timeout:
 * then RecordHostFailure records every host of the batch).
 */
export async function deployHosts(
  workshop: string,
  runId: string,
  hostIds: string[],
  force: boolean,
): Promise<{ hosts: { hostId: string; action: DeployAction | "failed" }[] }> {
  const [only] = hostIds;
  if (hostIds.length === 1 && only !== undefined)
    return { hosts: [await deployHost(workshop, runId, only, force)] };
  // The batch's records in one BatchGetItem (ElectroDB splits it at DynamoDB's 100 keys); a host it did not
  // return (left unprocessed) reads its own.
  const { store } = useDeps();
  const keys = hostIds.map((hostId) => ({ workshop, hostId }));
  const records = new Map((await store.host.get(keys).go()).data.map((h) => [h.hostId, h]));
  const hosts = await mapLimit(hostIds, hostIds.length, async (hostId) => {
    try {
      return await deployHost(workshop, runId, hostId, force, records.get(hostId));
    } catch (err) {
      await recordHostFailure(workshop, hostId, errorMessage(err));
      return { hostId, action: "failed" as const };
    }
  });
  return { hosts };
}

/** Records a failed Map item (its Catch): every host of it fails with the item's error, and only those. */
export async function recordHostsFailure(workshop: string, hostIds: string[], error: string): Promise<void> {
  for (const hostId of hostIds) await recordHostFailure(workshop, hostId, error);
}

/** Records a host's deploy failure: only that host fails. */
export async function recordHostFailure(workshop: string, hostId: string, error: string): Promise<void> {
  const { spec } = await loadWorkshop(workshop);
  const reason = (await secretRedactor(spec))(error);
  await patchHost(workshop, hostId, { state: "failed", error: reason.slice(0, 4000) });
  log.warn("host failed", { workshop, hostId, error: reason.slice(0, 500) });
  await recordEvent({ workshop, type: "host.failed", hostId, detail: { reason: reason.slice(0, 300) } });
}

export interface PollResult {
  done: boolean;
  timedOut: boolean;
  ready: number;
  failed: number;
  deploying: number;
}

/**
 * Where one look at a host's lab comes from: read through its transport (a poll, `transportReading`), or pushed by
 * the host itself (shared/agent/progress.ts). Either way judgeHost decides what it means, so a push and a poll
 * cannot disagree about a lab.
 */
export interface LabReading {
  probe(): Promise<LabProbe>;
  /** `lab.health`'s result once setup completed; undefined when this reading has none (a pushed phase change). */
  health(): Promise<ExecResult | undefined>;
  /** The lab's `$LABFLEET_ACCESS` (LabStepError when it is too large or not JSON); undefined when it wrote none. */
  access(): Promise<string | undefined>;
}

export function transportReading(t: Transport, spec: Workshop, hostId: string): LabReading {
  return {
    probe: () => probeLab(t, spec.name),
    health: () => runHealth(t, spec, hostId),
    access: () => readAccess(t, spec.name),
  };
}

/** What judgeHost made of a reading: the host's state, whether this reading changed it, and then the record. */
export interface Judged {
  state: HostItem["state"];
  changed: boolean;
  /** The host's record as this reading's change wrote it (ready, failed): what follows needs not read it again. */
  record?: HostItem;
}

/**
 * Updates the host record from one reading of its lab. A change of state (ready, failed) is written only while
 * the record still holds the state the reading started from, so when a push and a poll look at once, one of them
 * makes the change and `changed` says which (the other finds the state already moved and reports it).
 */
export async function judgeHost(
  spec: Workshop,
  host: HostItem,
  reading: LabReading,
  redact: (text: string) => string = (t) => t,
): Promise<Judged> {
  const { accessKey } = useDeps();
  const moveTo = async (set: Partial<HostItem> & { state: "ready" | "failed" }): Promise<Judged> => {
    const { store, clock } = useDeps();
    const update = store.host
      .patch({ workshop: spec.name, hostId: host.hostId })
      .set({ ...set, updatedAt: isoNow(clock) } as never);
    try {
      const written = await ("error" in set ? update : update.remove(["error"]))
        .where((a, op) => op.eq(a.state, host.state))
        .go({ response: "all_new" });
      const changed = set.state !== host.state;
      return { state: set.state, changed, ...(changed ? { record: written.data as HostItem } : {}) };
    } catch (err) {
      if (!isConditionalFailure(err)) throw err;
      const now = (await store.host.get({ workshop: spec.name, hostId: host.hostId }).go()).data;
      return { state: now?.state ?? host.state, changed: false };
    }
  };
  // Progress of a lab still building, written only while the record's state is the one this reading started from:
  // a push read before a poll (or a poll before a push) that arrives after the lab moved on writes nothing stale.
  const keepBuilding = async (set: Partial<HostItem>) => {
    const { store, clock } = useDeps();
    try {
      await store.host
        .patch({ workshop: spec.name, hostId: host.hostId })
        .set({ ...set, updatedAt: isoNow(clock) } as never)
        .remove(["error"]) // a reading came: a "last poll" error is old news
        .where((a, op) => op.eq(a.state, host.state))
        .go();
      return { state: "deploying" as const, changed: false };
    } catch (err) {
      if (!isConditionalFailure(err)) throw err;
      const now = (await store.host.get({ workshop: spec.name, hostId: host.hostId }).go()).data;
      return { state: now?.state ?? host.state, changed: false };
    }
  };
  const probe = await reading.probe();
  const { phases: read, current } = parsePhases(probe.statusLines);
  const verdict = judge(probe);
  const phases = timePhases(host.phases ?? [], read, isoNow(useDeps().clock));
  const progress = { phases, ...(current ? { phase: current } : {}) };
  const stay = { state: host.state, changed: false };
  // A lab already failed keeps its reason (a deadline, a failed health check) unless it has since
  // completed: a failed lab's wrapper is gone by then, and "died" would hide why it failed.
  if (host.state === "failed" && (verdict.state === "failed" || verdict.state === "not_started")) return stay;
  if (verdict.state === "failed") {
    return moveTo({ ...progress, state: "failed", error: redact(verdict.reason) });
  }
  if (verdict.state === "not_started") {
    return moveTo({ state: "failed", error: "the lab setup was never started on this host" });
  }
  if (verdict.state === "running") return keepBuilding(progress);
  const health = await reading.health();
  if (health?.exitCode !== 0) {
    if (!health || (probe.rcAgeSeconds ?? 0) < HEALTH_GRACE_SECONDS)
      return keepBuilding({ ...progress, phase: "health" });
    return moveTo({
      ...progress,
      state: "failed",
      error: redact(
        `health check failed for ${HEALTH_GRACE_SECONDS}s after setup finished: ${lastLines(health)}`,
      ),
    });
  }
  // The access file is read once, when the lab becomes ready (docs/lab-contract.md): a lab read again while ready
  // (a status refresh) keeps what its record holds, and its host runs one command less.
  let access: string | undefined;
  try {
    access = host.state === "ready" ? undefined : await reading.access();
  } catch (err) {
    if (!(err instanceof LabStepError)) throw err;
    return moveTo({ ...progress, state: "failed", error: err.message });
  }
  // A ready lab read again with nothing new (every status refresh of a lab in use): nothing to write.
  if (
    host.state === "ready" &&
    host.readyAt &&
    !host.error &&
    (current === undefined || host.phase === current) &&
    samePhases(host.phases ?? [], phases)
  )
    return stay;
  const done = await moveTo({
    ...progress,
    state: "ready",
    readyAt: host.state === "ready" && host.readyAt ? host.readyAt : isoNow(useDeps().clock),
    ...(access ? { access: seal(accessKey, access) } : {}),
  });
  if (done.changed) log.info("lab ready", { workshop: spec.name, hostId: host.hostId });
  return done;
}

/** Reads one host's lab through its transport and updates its record (judgeHost); an unreachable host stays as it is. */
export async function checkHost(
  spec: Workshop,
  provider: Provider,
  host: HostItem,
  redact: (text: string) => string = (t) => t,
): Promise<HostItem["state"]> {
  return (await checkHostOnce(spec, provider, host, redact)).state;
}

async function checkHostOnce(
  spec: Workshop,
  provider: Provider,
  host: HostItem,
  redact: (text: string) => string,
  probed?: Promise<LabProbe>,
): Promise<Judged> {
  const t = transportFor(spec, provider, host);
  try {
    const reading = transportReading(t, spec, host.hostId);
    return await judgeHost(spec, host, probed ? { ...reading, probe: () => probed } : reading, redact);
  } catch (err) {
    // An unreachable host is not yet a failed lab: the next poll tries again, the deadline bounds it.
    await patchHost(spec.name, host.hostId, { error: `last poll: ${errorMessage(err)}`.slice(0, 2000) });
    return { state: "deploying", changed: false };
  } finally {
    await t.close?.();
  }
}

/** One poll of wait-until-ready: checks every deploying host itself, with bounded concurrency. */
export async function pollFleet(workshop: string, runId: string, deadline: string): Promise<PollResult> {
  const { clock } = useDeps();
  const { spec, provider } = await loadWorkshop(workshop);
  // The hosts checked longest ago go first: when a poll's time runs out (a function's deadline, see
  // shared/runtime/deadline.ts), the hosts it did not reach are the first the next poll checks.
  const run = await getRun(workshop, runId);
  const runs = runHostsOf(run, await listHosts(workshop));
  const place = buildPlaces(runs, run, spec);
  const hosts = [...runs].sort((a, b) => a.updatedAt.localeCompare(b.updatedAt));
  const redact = await secretRedactor(spec);
  let becameReady = 0;
  // First every deploying host's probe, side by side (over SSM, the probes of 50 hosts share one SendCommand);
  // then each host is judged from its probe, its health and access read only where its setup has ended.
  const width = fanOutWidth(provider);
  const probes = await mapLimit(hosts, width, async (h) => {
    if (h.state !== "deploying" || timeLeft() < POLL_MIN_HOST_MS) return undefined;
    const t = transportFor(spec, provider, h);
    const probe = probeLab(t, workshop).finally(() => t.close?.());
    // A failed probe is judged in the second pass, which records its error even when the time is up.
    const failed = await probe.then(
      () => false,
      () => true,
    );
    return { probe, failed };
  });
  const states = await mapLimit(hosts, width, async (h, i) => {
    const probed = probes[i];
    if (h.state !== "deploying" || !probed) return h.state;
    if (timeLeft() < POLL_MIN_HOST_MS && !probed.failed) return h.state;
    const { state, changed, record } = await checkHostOnce(spec, provider, h, redact, probed.probe);
    // A host whose pushed progress got there first (shared/agent/progress.ts) had its event and build time then.
    if (changed && (state === "ready" || state === "failed"))
      await hostEvent(workshop, h.hostId, state, runId, record);
    if (changed && state === "ready") {
      becameReady++;
      await timeBuild(spec, h.hostId, runId, place(h.hostId), record);
    }
    return state;
  });
  const count = (s: string) => states.filter((x) => x === s).length;
  const unfinished = states.filter(
    (s) => s === "deploying" || s === "pending" || s === "provisioning",
  ).length;
  // Labs go on the board as they pass their health gate; the portal opens once portal.open_at_percent of
  // the workshop's labs (all of them, not only this run's) are ready. A run without the publish stage
  // opens nothing and hands no lab to the waiting line: the run that publishes does.
  const publish = stagesOf(await getRun(workshop, runId)).includes("publish");
  if (publish && spec.portal.enabled && (await portalMayOpen(workshop))) {
    const all = inService(await listHosts(workshop));
    await openWhenReady(spec, all.filter((h) => h.state === "ready").length, all.length);
  }
  // A lab that became ready (a first deploy, a rebuild, a scale-up) goes to the first in line, whether the
  // portal was opened by the workflow or by the instructor.
  if (becameReady > 0 && publish) {
    forgetStudentReads(workshop);
    await serveQueueAfter(workshop);
  }
  return {
    done: unfinished === 0,
    timedOut: unfinished > 0 && clock.now().toISOString() >= deadline,
    ready: count("ready"),
    failed: count("failed"),
    deploying: unfinished,
  };
}

/**
 * A reading a host pushed (shared/agent/progress.ts), applied as a poll applies its own: the same judgement
 * (judgeHost), and for a lab that became ready the same steps a poll takes (its event and build time, the portal
 * opened at portal.open_at_percent, the lab given to the first in line), so it is claimable at once. Only a host
 * the workshop's active run is waiting for is moved; the run itself still ends by its poll. Answers the host's
 * state after the reading, and whether the reading changed it.
 */
export async function applyPushedReading(
  workshop: string,
  hostId: string,
  reading: (spec: Workshop) => LabReading,
): Promise<{ state: HostItem["state"] | "unknown"; applied: boolean }> {
  const { store } = useDeps();
  // One read of the workshop gives both its spec and the run it has now.
  const [w, host] = await Promise.all([
    getWorkshop(workshop),
    store.host
      .get({ workshop, hostId })
      .go()
      .then((r) => r.data),
  ]);
  if (!host) return { state: "unknown", applied: false };
  const spec = w.spec as Workshop;
  const runId = w.activeRunId;
  const run = runId ? (await store.run.get({ workshop, runId }).go()).data : undefined;
  const stages = run ? stagesOf(run) : [];
  if (
    run?.state !== "running" ||
    !stages.includes("wait") ||
    host.state !== "deploying" ||
    !runHostsOf(run, [host]).length
  )
    return { state: host.state, applied: false };
  const { state, changed, record } = await judgeHost(spec, host, reading(spec), await secretRedactor(spec));
  if (!changed) return { state, applied: true };
  // What follows is what the run's poll would do next, and labfleet's own doing (its events are by labfleet, as a
  // poll's are): claimable first, then the event and the build's time. Every lab of a fleet pushes its
  // readiness, so nothing here lists the workshop's hosts for each push unless it must (the fleet's size squared
  // in reads): the portal's count only while the portal may still open by itself (at 100 %, read up to the first
  // lab not ready), the build's place from a listing its run's pushes share (pushedPlace).
  await withActor({ type: "system", id: "push" }, async () => {
    if (state === "ready" && stages.includes("publish")) {
      if (spec.portal.enabled && (await portalMayOpen(workshop))) {
        if (spec.portal.open_at_percent === 100) {
          // Every lab must be ready: the first one that is not settles it, read after this push's write.
          const labs = await allReadyAfterPush(workshop);
          if (labs > 0) await openWhenReady(spec, labs, labs);
        } else {
          const all = inService(await hostsAfterPush(workshop));
          await openWhenReady(spec, all.filter((h) => h.state === "ready").length, all.length);
        }
      }
      forgetStudentReads(workshop);
      await serveQueueAfter(workshop);
    }
    if (state === "ready" || state === "failed") await hostEvent(workshop, hostId, state, run.runId, record);
    if (state === "ready") {
      const own = record ?? (await store.host.get({ workshop, hostId }).go()).data;
      if (own) {
        const runHosts = async () => runHostsOf(run, await hostsAfterPush(workshop));
        await timeBuild(spec, hostId, run.runId, await pushedPlace(spec, run, own, runHosts), own);
      }
    }
  });
  return { state, applied: true };
}

/** The workshop's hosts as a push that just moved one sees them; pushes at once share a listing (freshFlight). */
const hostsAfterPush = freshFlight((workshop: string) => workshop, listHosts);

/** labsIfAllReady as a push that just made its lab ready sees it; pushes at once share a reading (freshFlight). */
const allReadyAfterPush = freshFlight((workshop: string) => workshop, labsIfAllReady);

/**
 * A host became ready: its build's phase durations, for the ready estimate of later runs of the lab. From the record
 * the change wrote when the caller has it, else read.
 */
async function timeBuild(
  spec: Workshop,
  hostId: string,
  runId: string,
  place: BuildPlace | undefined,
  written?: HostItem,
) {
  const h = written ?? (await useDeps().store.host.get({ workshop: spec.name, hostId }).go()).data;
  if (h) await recordBuild(spec, h, runId, place);
}

/**
 * A host reached ready or failed: an event, with the build time of a ready lab (`seconds`, from the deploy's
 * start to ready) and the recorded (already redacted) reason of a failure. From the record the change wrote when the
 * caller has it, else read.
 */
async function hostEvent(
  workshop: string,
  hostId: string,
  state: "ready" | "failed",
  runId: string,
  written?: HostItem,
) {
  const h = written ?? (await useDeps().store.host.get({ workshop, hostId }).go()).data;
  const took =
    h?.deployStartedAt && h.readyAt ? (Date.parse(h.readyAt) - Date.parse(h.deployStartedAt)) / 1000 : NaN;
  await recordEvent({
    workshop,
    type: state === "ready" ? "host.ready" : "host.failed",
    hostId,
    runId,
    ...(state === "failed" && h?.error ? { detail: { reason: h.error.slice(0, 300) } } : {}),
    ...(state === "ready" && Number.isFinite(took) && took >= 0
      ? { detail: { seconds: Math.round(took) } }
      : {}),
  });
}

/** The workshop is ready when every one of its hosts is, whatever the last run selected. */
async function fleetReady(workshop: string): Promise<boolean> {
  return (await labsIfAllReady(workshop)) > 0;
}

/** Hosts read per page by labsIfAllReady. */
const READY_PAGE = 50;

/**
 * How many labs the workshop has (hosts in service) when every one of them is ready, else 0. The hosts are read
 * a page at a time from the last, and the reading stops at the first lab that is not ready: the labs deployed
 * last are the last to be ready, so while a fleet builds this is one small read, not a listing of the fleet.
 * Strongly consistent, so it sees every write made before it.
 */
export async function labsIfAllReady(workshop: string): Promise<number> {
  const { store } = useDeps();
  let labs = 0;
  let cursor: string | null = null;
  do {
    const page: { data: HostItem[]; cursor: string | null } = await store.host.query
      .byWorkshop({ workshop })
      .go({ order: "desc", limit: READY_PAGE, consistent: true, ...(cursor ? { cursor } : {}) });
    for (const h of inService(page.data)) {
      if (h.state !== "ready") return 0;
      labs++;
    }
    cursor = page.cursor;
  } while (cursor);
  return labs;
}

/**
 * The workshop's labs: its hosts not torn down, less the enrolled hosts runs leave out (waiting for approval,
 * drained or disabled: shared/agent/left-out.ts).
 */
function inService(hosts: readonly HostItem[]): HostItem[] {
  return hosts.filter((h) => h.state !== "torn_down" && !leftOutOfRuns(h));
}

/** The hosts a run acts on: its selection (deploy, retry), or every host of the workshop (of those in service). */
async function runHosts(workshop: string, runId: string): Promise<HostItem[]> {
  return runHostsOf(await getRun(workshop, runId), await listHosts(workshop));
}

function runHostsOf(run: RunItem, hosts: readonly HostItem[]): HostItem[] {
  const wanted = run.selection?.length ? new Set(run.selection) : undefined;
  return inService(hosts).filter((h) => !wanted || wanted.has(h.hostId));
}

/** The deadline passed: every lab not yet ready fails with the reason, its setup stopped. */
export async function failUnfinished(
  workshop: string,
  runId: string,
  deadline: string,
): Promise<{ failed: string[] }> {
  const { spec, provider } = await loadWorkshop(workshop);
  const hosts = (await runHosts(workshop, runId)).filter((h) =>
    ["deploying", "pending", "provisioning"].includes(h.state),
  );
  await mapLimit(hosts, fanOutWidth(provider), async (h) => {
    // Stopping the setup is best effort, within the step's time; the host fails either way.
    const t = transportFor(spec, provider, h);
    try {
      if (timeLeft() >= POLL_MIN_HOST_MS) await stopLab(t, workshop).catch(() => undefined);
    } finally {
      await t.close?.();
    }
    await patchHost(workshop, h.hostId, {
      state: "failed",
      // An unreachable host keeps its last poll error: that, not the lab, is then why it never got ready.
      error: `lab did not become ready within ${spec.lab.timeout_minutes} minutes (deadline ${deadline})${h.phase ? `; last phase: ${h.phase}` : ""}${h.error?.startsWith("last poll:") ? `; ${h.error}` : ""}`,
    });
    await hostEvent(workshop, h.hostId, "failed", runId);
  });
  return { failed: hosts.map((h) => h.hostId) };
}

/** Ends the run: per-host results on the run, the workshop ready only when every lab is. */
export async function finishUp(workshop: string, runId: string): Promise<{ state: "succeeded" | "failed" }> {
  const { store, clock } = useDeps();
  const run = await getRun(workshop, runId);
  const { kind } = run;
  if (kind === "provision") return finishProvision(workshop, runId);
  const stages = stagesOf(run);
  const waited = stages.includes("wait");
  const publish = stages.includes("publish");
  const hosts = await runHosts(workshop, runId);
  const results = Object.fromEntries(
    hosts.map((h) => [
      h.hostId,
      { state: h.state, ...(h.error && h.state !== "ready" ? { error: h.error } : {}) },
    ]),
  );
  // A run that waits succeeds when every lab it acted on is ready; one that does not wait, when none failed
  // (its labs may still be building: the next run that waits follows them).
  const good = (h: HostItem) => h.state === "ready" || (!waited && h.state !== "failed");
  const allReady = hosts.length > 0 && hosts.every(good);
  const state = allReady ? "succeeded" : "failed";
  const live = inService(await listHosts(workshop));
  const ready = live.length > 0 && live.every((h) => h.state === "ready");
  if (publish && !waited) await publishReady(workshop, live);
  // With provider.student_access: open, the lab UIs are opened to the internet once every lab of the
  // workshop is ready (never failing the run), before the run is recorded as ended.
  if (ready && publish) {
    const { spec, provider } = await loadWorkshop(workshop);
    await openAccessWhenReady(spec, provider, runId, live);
  }
  await recordTransitions(workshop, runId, kind);
  const now = isoNow(clock);
  // The workshop is `ready` once a run that publishes finds every lab ready. A run that waits and publishes
  // leaves it `failed` otherwise, as does any run that failed; a run that leaves out wait or publish and did
  // not fail leaves it `deploying` (labs building, or built and not handed out yet).
  const workshopState =
    ready && publish ? "ready" : (waited && publish) || state === "failed" ? "failed" : "deploying";
  await store.workshop.patch({ name: workshop }).set({ state: workshopState, updatedAt: now }).go();
  await store.run
    .patch({ workshop, runId })
    .set({
      state,
      endedAt: now,
      hosts: results,
      ...(allReady
        ? {}
        : {
            error: `${hosts.filter((h) => h.state !== "ready").length} of ${hosts.length} labs are not ready`,
          }),
    })
    .go();
  await removeRunSecrets(workshop);
  await releaseWorkshop(workshop, runId);
  await recordEvent({ workshop, type: "run.finished", runId, detail: { kind, state } });
  return { state };
}

/**
 * The publish stage of a run that did not wait (`--only publish`): what the polls of a waiting run do as labs
 * become ready, done once: the portal opens at portal.open_at_percent, and the waiting line gets the free labs.
 */
async function publishReady(workshop: string, live: HostItem[]): Promise<void> {
  const { spec } = await loadWorkshop(workshop);
  if (spec.portal.enabled) {
    await openWhenReady(spec, live.filter((h) => h.state === "ready").length, live.length);
  }
  forgetStudentReads(workshop);
  await serveQueueAfter(workshop);
}

/**
 * Ends a `provision` run (the up workflow's FinishUp, reached from AfterProvision): it succeeded when every
 * host the provider was asked for was provisioned. The workshop is `ready` when every one of its labs already
 * is (a provision of a workshop that was up), `failed` when a host could not be provisioned, and otherwise
 * stays `provisioning`: hosts recorded, labs not deployed until the next `up` or `deploy`.
 */
async function finishProvision(workshop: string, runId: string): Promise<{ state: "succeeded" | "failed" }> {
  const { store, clock } = useDeps();
  const run = await getRun(workshop, runId);
  const results = (run.hosts ?? {}) as Record<string, { state: string; error?: string }>;
  const total = Object.keys(results).length;
  const failed = Object.values(results).filter((r) => r.state !== "provisioned").length;
  const state = total > 0 && failed === 0 ? "succeeded" : "failed";
  await recordTransitions(workshop, runId, run.kind);
  const now = isoNow(clock);
  await store.run
    .patch({ workshop, runId })
    .set({
      state,
      endedAt: now,
      ...(state === "succeeded"
        ? {}
        : {
            error:
              total === 0
                ? "the workshop has no hosts to provision"
                : `${failed} of ${total} hosts could not be provisioned`,
          }),
    })
    .go();
  await store.workshop
    .patch({ name: workshop })
    .set({
      state: (await fleetReady(workshop)) ? "ready" : state === "failed" ? "failed" : "provisioning",
      updatedAt: now,
    })
    .go();
  await releaseWorkshop(workshop, runId);
  await recordEvent({ workshop, type: "run.finished", runId, detail: { kind: run.kind, state } });
  return { state };
}

/** Every host of the run has fetched the secrets parameter by its end (SSM hosts): it goes now. */
async function removeRunSecrets(workshop: string): Promise<void> {
  const { spec } = await loadWorkshop(workshop).catch(() => ({ spec: undefined }));
  if (!spec || spec.lab.operator_secrets.length === 0) return;
  await removeSecretParameter(spec, useDeps().providers[spec.provider.type]?.transport);
}

/** A step failed outside any host (provider error, bad spec): the run fails with that reason. */
export async function failRun(workshop: string, runId: string, error: string): Promise<void> {
  const { store, clock } = useDeps();
  const ran = (await store.run.get({ workshop, runId }).go()).data;
  if (ran) await recordTransitions(workshop, runId, ran.kind);
  const now = isoNow(clock);
  await store.run
    .patch({ workshop, runId })
    .set({ state: "failed", endedAt: now, error: error.slice(0, 4000) })
    .go();
  const w = await getWorkshop(workshop);
  const run = await getRun(workshop, runId);
  await store.workshop
    .patch({ name: workshop })
    // A teardown or a rollout that fails leaves the workshop as it was (a rollout changes no lab it did not finish).
    .set({ state: run.kind === "teardown" || run.kind === "rollout" ? w.state : "failed", updatedAt: now })
    .go();
  await removeRunSecrets(workshop);
  await releaseWorkshop(workshop, runId);
  await recordEvent({ workshop, type: "run.finished", runId, detail: { kind: run.kind, state: "failed" } });
}

/** Why an execution that ended outside its steps failed its run, in words, with no secret of the workshop's. */
export async function endedExecutionReason(
  workshop: string,
  status: "FAILED" | "TIMED_OUT" | "ABORTED",
  error: string,
): Promise<string> {
  const { spec } = await loadWorkshop(workshop);
  const redact = await secretRedactor(spec);
  const what = { FAILED: "failed", TIMED_OUT: "timed out", ABORTED: "was aborted" }[status];
  return redact(`the workflow's execution ${what}: ${error}`);
}

/**
 * A run's execution ended (Step Functions: FAILED, TIMED_OUT or ABORTED) without its own steps recording the end
 * (its FailRun step failed too, the execution hit a limit, someone stopped it in the console). When the run's
 * record still says running, the run fails with the execution's error, operator secrets redacted, as FailRun
 * would. Returns whether it did.
 */
export async function failEndedExecution(
  workshop: string,
  runId: string,
  status: "FAILED" | "TIMED_OUT" | "ABORTED",
  error: string,
): Promise<boolean> {
  const { store } = useDeps();
  const run = (await store.run.get({ workshop, runId }).go()).data;
  if (run?.state !== "running") return false;
  const reason = await endedExecutionReason(workshop, status, error);
  log.warn("run failed by its execution's end", { workshop, runId, status, error: reason.slice(0, 500) });
  await failRun(workshop, runId, reason);
  return true;
}
