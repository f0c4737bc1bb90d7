import { hostIdsOf } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import type { HostItem, WorkshopItem } from "../store/entities.ts";
import { parseWorkshopYaml, resolveLabSource } from "../workshop/load.ts";
import type { Workshop } from "../workshop/schema.ts";
import { type CheckAction, type CheckItem, type CheckReport, checkReport, WORKSHOP_ITEM } from "./check.ts";
import { claimedAmong } from "./claimed.ts";
import { type Selection, selectHosts } from "./hosts.ts";
import { planLabs } from "./machines.ts";
import { assertProvisioned, resolveStages, type Stage, type StageSelection } from "./stages.ts";
import { listHosts, planWorkshop } from "./workshops.ts";

/**
 * Check mode for `up`, `deploy`, `retry` and `provision` (`--check`, `POST /api/workshops/{name}/check`): goes
 * through the stages the command would run and says, per host and stage, what each would do, from what the store
 * records (the workshop, its hosts, its claims) and the provider's own dry run. It writes nothing, starts no run
 * and runs nothing on a host. `provision` is its one stage: which hosts would be created and which reused.
 */

export type CheckedCommand = "up" | "deploy" | "retry" | "provision";

export { WORKSHOP_ITEM };

export interface CheckOptions extends StageSelection {
  command: CheckedCommand;
  /**
   * up, provision: the workshop.yaml to check (default: the workshop as submitted); deploy and retry act on the
   * stored one.
   */
  yaml?: string;
  baseDir?: string;
  force?: boolean;
  /** deploy: the git ref asked for instead of lab.ref. */
  ref?: string;
  /** retry: every selected host, not only the failed ones. */
  allSelected?: boolean;
  selection?: Selection;
}

interface Target {
  hostId: string;
  labels?: Record<string, unknown>;
  host?: HostItem;
}

export async function checkCommand(name: string, opts: CheckOptions): Promise<CheckReport> {
  assertActor("instructor", "system");
  // A provision run has one stage, whatever `only` and `skip` say.
  const stages: Stage[] = opts.command === "provision" ? ["provision"] : resolveStages(opts);
  const { store } = useDeps();
  const w = (await store.workshop.get({ name }).go()).data;
  const live = w && w.state !== "torn_down" ? w : undefined;
  const spec = await specToCheck(name, opts, live);
  const recorded = live ? (await listHosts(name)).filter((h) => h.state !== "torn_down") : [];
  const targets = targetsOf(opts, spec, live, recorded);
  assertProvisioned(
    stages,
    targets.map((t) => t.hostId),
    recorded,
  );
  if (targets.length === 0) return checkReport(name, opts.command, []);

  const items: CheckItem[] = [];
  if (stages.includes("provision")) items.push(...(await provisionItems(spec, targets)));
  const claimed = new Map(
    (
      await claimedAmong(
        name,
        targets.map((t) => t.hostId),
      )
    ).map((c) => [c.lab, c.student]),
  );
  const deployed = new Map<string, CheckAction>();
  if (stages.includes("deploy")) {
    for (const t of targets) {
      const item = deployItem(opts, spec, t, claimed.get(t.hostId));
      deployed.set(t.hostId, item.action);
      items.push(item);
    }
  }
  if (stages.includes("wait")) {
    for (const t of targets) items.push(waitItem(spec, t, stages, deployed.get(t.hostId)));
  }
  if (stages.includes("publish")) items.push(publishItem(spec, live, items));
  return checkReport(name, opts.command, items);
}

/**
 * The spec the command would act on: up's or provision's file (checked as `up --plan` checks it), else the
 * stored one.
 */
async function specToCheck(name: string, opts: CheckOptions, w: WorkshopItem | undefined): Promise<Workshop> {
  if (opts.yaml !== undefined && (opts.command === "up" || opts.command === "provision")) {
    await planWorkshop(opts.yaml, opts.baseDir); // validates the file and its provider, as `up --plan` does
    let spec = parseWorkshopYaml(opts.yaml);
    if (opts.baseDir) spec = resolveLabSource(spec, opts.baseDir);
    if (spec.name !== name) {
      throw new VisibleError("input", "check.other_workshop", "the file describes another workshop", [
        { path: "yaml", message: `expected a workshop named ${name}, got ${spec.name}` },
      ]);
    }
    return spec;
  }
  if (!w) throw new VisibleError("not_found", "workshop.not_found", `no workshop named ${name}`);
  return w.spec as Workshop;
}

/** The hosts the command acts on, in host order, as its start would choose them. */
function targetsOf(
  opts: CheckOptions,
  spec: Workshop,
  w: WorkshopItem | undefined,
  recorded: HostItem[],
): Target[] {
  const byId = new Map(recorded.map((h) => [h.hostId, h]));
  const removed = new Set(w?.removedHosts ?? []);
  const fromSpec = hostIdsOf(spec)
    .filter((id) => !removed.has(id))
    .map((hostId) => {
      const host = byId.get(hostId);
      return {
        hostId,
        labels: host?.labels ?? spec.hosts.find((h) => h.id === hostId)?.labels ?? {},
        ...(host ? { host } : {}),
      };
    });
  if (opts.command === "up" || opts.command === "provision") return fromSpec;
  const known: Target[] = recorded.length
    ? recorded.map((host) => ({ hostId: host.hostId, labels: host.labels ?? {}, host }))
    : fromSpec;
  const chosen = selectHosts(known, opts.selection ?? {});
  if (opts.command === "deploy" && chosen.length === 0)
    throw new VisibleError("input", "selection.empty", "no host matches the selection");
  if (opts.command === "retry") return chosen.filter((t) => opts.allSelected || t.host?.state === "failed");
  return chosen;
}

async function provisionItems(spec: Workshop, targets: Target[]): Promise<CheckItem[]> {
  const provider = useDeps().providers[spec.provider.type];
  if (!provider)
    throw new VisibleError(
      "input",
      "provider.unavailable",
      `provider ${spec.provider.type} is not available here`,
    );
  // A lab a rollout moved is looked up by its current machine (shared/fleet/machines.ts), not by its id.
  const labs = targets.map((t) => ({ hostId: t.hostId, machine: t.host?.machine }));
  const plan = new Map((await planLabs(provider, spec, labs)).map((p) => [p.hostId, p]));
  return targets.map((t) => {
    const p = plan.get(t.hostId);
    if (p?.action === "create")
      return {
        hostId: t.hostId,
        stage: "provision",
        action: "create",
        detail: p.detail ?? "not created yet",
      };
    return {
      hostId: t.hostId,
      stage: "provision",
      action: "reuse",
      detail: p?.detail ?? (t.host?.address ? "exists" : "recorded"),
    };
  });
}

/** The ref a deploy builds at (git sources only): the deploy's --ref, else lab.ref, else HEAD. */
function askedRef(opts: CheckOptions, spec: Workshop): string | undefined {
  if (!spec.lab.source.startsWith("git:")) return undefined;
  return (opts.command === "deploy" ? opts.ref : undefined) ?? spec.lab.ref ?? "HEAD";
}

function deployItem(opts: CheckOptions, spec: Workshop, t: Target, student?: string): CheckItem {
  const item = (action: CheckAction, detail: string): CheckItem => ({
    hostId: t.hostId,
    stage: "deploy",
    action,
    detail,
  });
  const h = t.host;
  // retry always rebuilds what it selects (its run is forced); up and deploy only with --force.
  const force = opts.command === "retry" || (opts.force ?? false);
  const asked = askedRef(opts, spec);
  const otherRef = asked !== undefined && h?.ref !== undefined && h.ref !== asked;
  const refNote = otherRef ? `built at ${h?.ref}, asked for ${asked}` : "";
  let action: CheckAction;
  let detail: string;
  if (!h?.deployStartedAt || h.state === "pending" || h.state === "provisioning") {
    [action, detail] = ["create", "not built yet"];
  } else if (h.state === "failed") {
    [action, detail] = ["rebuild", "failed: will rebuild"];
  } else if (h.state === "deploying") {
    [action, detail] = force
      ? ["rebuild", "setup running: started again (--force)"]
      : ["reuse", "setup running: followed, not started again"];
  } else if (force) {
    [action, detail] = ["rebuild", refNote || "ready: rebuilt (--force)"];
  } else {
    [action, detail] = ["reuse", otherRef ? `ready, ${refNote}: --force rebuilds it` : "ready"];
  }
  if (student !== undefined && action !== "reuse") {
    // deploy and retry refuse to rebuild a claimed lab without --force; up rebuilds what it rebuilds.
    if (opts.command !== "up" && !opts.force) return item("skip", `claimed by ${student} (needs --force)`);
    detail = `${detail}; claimed by ${student}: rebuilt under them`;
  }
  return item(action, detail);
}

function waitItem(
  spec: Workshop,
  t: Target,
  stages: readonly Stage[],
  deployed: CheckAction | undefined,
): CheckItem {
  const item = (action: CheckAction, detail: string): CheckItem => ({
    hostId: t.hostId,
    stage: "wait",
    action,
    detail,
  });
  const polled = `polled until lab.health passes (at most ${spec.lab.timeout_minutes} min)`;
  if (stages.includes("deploy")) {
    if (deployed === "skip") return item("skip", "not deployed: nothing to wait for");
    if (deployed === "reuse" && t.host?.state === "ready") return item("reuse", "ready");
    return item("reuse", polled);
  }
  const state = t.host?.state;
  if (state === "ready") return item("reuse", "ready");
  if (state === "deploying") return item("reuse", polled);
  return item(
    "skip",
    state === "failed" ? "failed: not deployed by this run" : "not built: nothing to wait for",
  );
}

function publishItem(spec: Workshop, w: WorkshopItem | undefined, items: CheckItem[]): CheckItem {
  const building = items.some((i) => i.stage !== "wait" && i.action !== "reuse" && i.action !== "skip");
  const item = (action: CheckAction, detail: string): CheckItem => ({
    hostId: WORKSHOP_ITEM,
    stage: "publish",
    action,
    detail,
  });
  if (w?.state === "ready" && !building) return item("reuse", "published: every lab is ready");
  const portal = spec.portal.enabled
    ? `the portal opens once ${spec.portal.open_at_percent} % of the labs are ready, and waiting students get labs as they become ready; `
    : "";
  return item("promote", `${portal}the workshop becomes ready once every lab is`);
}
