import { z } from "zod";
import { waitingCount } from "../portal/queue.ts";
import { hostIdsOf } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import { type ErrorDetail, VisibleError } from "../runtime/errors.ts";
import type { RunItem, WorkshopItem } from "../store/entities.ts";
import { LocalProvider, makesHosts, Workshop } from "../workshop/schema.ts";
import { startRun } from "./runs.ts";
import { getWorkshop } from "./workshops.ts";

/**
 * Scaling a running workshop up (`labfleet scale NAME --count N`, the console's Scale up): the workshop's
 * stored spec gets the new provider.count, and a `scale` run (the `up` workflow on the new hosts only)
 * provisions and deploys the hosts it adds. Labs go on the board as they pass their health gate, as in an up;
 * the hosts already there are not touched. Scaling only adds: removing labs is `down --unclaimed`
 * (shared/portal/scale-down.ts), and a later `up -f` whose file names fewer hosts keeps the count
 * (submitWorkshop in workshops.ts).
 */

/** The most hosts a workshop may have: provider.count's limit in the schema. */
export const MAX_HOSTS = LocalProvider.shape.count.maxValue ?? 64;

const COUNT_ERROR = `expected a host count: a whole number from 1 to ${MAX_HOSTS}`;

export const ScaleInput = z.strictObject({
  count: z
    .number({ error: COUNT_ERROR })
    .int({ error: COUNT_ERROR })
    .min(1, { error: COUNT_ERROR })
    .max(MAX_HOSTS, { error: COUNT_ERROR })
    .meta({ description: "the number of hosts the workshop has after scaling (more than it has now)" }),
});

export interface ScalePlan {
  workshop: string;
  /** The hosts the workshop has now (those `up` keeps: the spec's, less the ones `down --unclaimed` took). */
  from: number;
  to: number;
  /** The host ids the scale adds, lowest numbers first. */
  add: string[];
  /** Students in the portal's waiting room (see studentsWaiting). */
  waiting: number;
}

/**
 * How many students wait in the portal's waiting line for a lab (shared/portal/queue.ts). Every place where the
 * instructor decides to add or remove labs shows it: the console's scale form and its confirmation,
 * `labfleet scale`'s output and `labfleet down --unclaimed`'s (through the scale-down API's answer).
 */
export const studentsWaiting = (workshop: string): Promise<number> => waitingCount(workshop);

/** What the console's Scale up form offers: whether the provider creates hosts, how many there are, the limit. */
export interface ScaleOffer {
  provider: Workshop["provider"]["type"];
  /** False for a bring-your-own (static) fleet, whose hosts are its hosts[] list. */
  createsHosts: boolean;
  hosts: number;
  max: number;
  waiting: number;
}

export async function scaleOffer(workshop: string): Promise<ScaleOffer> {
  assertActor("instructor", "system");
  const w = await getWorkshop(workshop);
  const spec = w.spec as Workshop;
  return {
    provider: spec.provider.type,
    createsHosts: makesHosts(spec.provider.type),
    hosts: keptHosts(spec, w.removedHosts).length,
    max: MAX_HOSTS,
    waiting: await studentsWaiting(workshop),
  };
}

/** The host ids a workshop keeps at an up: its spec's, without those `down --unclaimed` removed. */
export function keptHosts(spec: Workshop, removedHosts: readonly string[] = []): string[] {
  const removed = new Set(removedHosts);
  return hostIdsOf(spec).filter((id) => !removed.has(id));
}

interface Decision {
  plan: ScalePlan;
  spec: Workshop;
  removedHosts: string[];
  basedOn: string;
}

/** What scaling to `count` hosts would do, refusing what it must not do. Nothing is written. */
export async function planScale(workshop: string, count: number): Promise<ScalePlan> {
  assertActor("instructor", "system");
  return (await decide(workshop, count)).plan;
}

/**
 * Scales the workshop up to `count` hosts: records the new count on the workshop and starts the run that
 * provisions and deploys the new hosts, in one conditional write (a refused or lost start changes nothing).
 */
export async function scaleUp(workshop: string, count: number): Promise<{ plan: ScalePlan; run: RunItem }> {
  assertActor("instructor", "system");
  const d = await decide(workshop, count);
  const run = await startRun(workshop, "scale", {
    hosts: d.plan.add,
    change: { spec: d.spec, removedHosts: d.removedHosts, basedOn: d.basedOn },
    event: { from: d.plan.from, to: d.plan.to, hosts: d.plan.add },
  });
  return { plan: d.plan, run };
}

async function decide(workshop: string, count: number): Promise<Decision> {
  const parsed = ScaleInput.safeParse({ count });
  if (!parsed.success) {
    throw new VisibleError("input", "scale.invalid_count", `cannot scale ${workshop}: ${COUNT_ERROR}`, [
      {
        path: "count",
        message:
          typeof count === "number" && Number.isFinite(count) ? `${COUNT_ERROR}, got ${count}` : COUNT_ERROR,
      },
    ]);
  }
  const w = await getWorkshop(workshop);
  const spec = w.spec as Workshop;
  if (spec.provider.type === "enrolled") {
    throw new VisibleError(
      "input",
      "scale.provider_enrolled",
      `workshop ${workshop}'s hosts are machines that join it (provider.type enrolled): labfleet creates none, so it cannot scale; make a join token with labfleet hosts join-token ${workshop} and run its line on more machines`,
      [
        {
          path: "provider.type",
          message: "expected a provider that creates hosts (local or aws), got enrolled",
        },
      ],
    );
  }
  if (spec.provider.type === "static") {
    throw new VisibleError(
      "input",
      "scale.provider_static",
      `workshop ${workshop} brings its own hosts (provider.type static): labfleet creates none, so it cannot scale; add hosts to hosts[] in workshop.yaml and run labfleet up -f workshop.yaml`,
      [
        {
          path: "provider.type",
          message: "expected a provider that creates hosts (local or aws), got static",
        },
      ],
    );
  }
  await refuseUnlessRunning(w);
  const kept = keptHosts(spec, w.removedHosts);
  const from = kept.length;
  if (count <= from) {
    const fewer = from - count;
    throw new VisibleError(
      "input",
      "scale.not_more",
      count === from
        ? `workshop ${workshop} has ${from} hosts already: nothing to add`
        : `workshop ${workshop} has ${from} hosts: scale only adds hosts; to remove ${fewer} lab${fewer === 1 ? "" : "s"} nobody claimed, use labfleet down ${workshop} --unclaimed ${fewer}`,
      [{ path: "count", message: `expected more than ${from} (the hosts it has now), got ${count}` }],
    );
  }
  // The new hosts take the lowest free numbers: those `down --unclaimed` removed come back first.
  const keep = new Set(kept);
  const candidates = hostIdsOf({ ...spec, provider: { ...spec.provider, count: MAX_HOSTS } } as Workshop);
  const add = candidates.filter((id) => !keep.has(id)).slice(0, count - from);
  const highest = Math.max(...add.map((id) => candidates.indexOf(id) + 1));
  const newCount = Math.max(spec.provider.count ?? 0, highest);
  const next = checkedSpec(workshop, count, { ...spec, provider: { ...spec.provider, count: newCount } });
  const added = new Set(add);
  return {
    plan: { workshop, from, to: count, add, waiting: await studentsWaiting(workshop) },
    spec: next,
    removedHosts: (w.removedHosts ?? []).filter((id) => !added.has(id)),
    basedOn: w.updatedAt,
  };
}

/** A workshop that was brought up and is not busy: scaling adds to a running fleet, one run at a time. */
async function refuseUnlessRunning(w: WorkshopItem): Promise<void> {
  const { store } = useDeps();
  if (w.state === "tearing_down")
    throw new VisibleError("conflict", "workshop.tearing_down", `workshop ${w.name} is being torn down`);
  if (w.state === "draft" || w.state === "torn_down") {
    throw new VisibleError(
      "conflict",
      "scale.not_up",
      `workshop ${w.name} has no hosts (${w.state.replace("_", " ")}): set provider.count in workshop.yaml and run labfleet up -f workshop.yaml`,
    );
  }
  const active = w.activeRunId
    ? (await store.run.get({ workshop: w.name, runId: w.activeRunId }).go()).data
    : null;
  if (active?.state === "running") {
    throw new VisibleError(
      "conflict",
      "workshop.busy",
      `workshop ${w.name} is busy with a ${active.kind} run (${active.runId}): wait for it to end (labfleet status ${w.name}), then scale; nothing was changed`,
    );
  }
}

/** The spec with its new count, checked as workshop.yaml is (the schema, then the provider's own rules). */
function checkedSpec(workshop: string, count: number, candidate: Workshop): Workshop {
  const parsed = Workshop.safeParse(candidate);
  const problems: ErrorDetail[] = parsed.success
    ? (useDeps().providers[candidate.provider.type]?.validate(parsed.data) ?? [])
    : parsed.error.issues.map((i) => ({ path: i.path.join("."), message: i.message }));
  if (problems.length > 0 || !parsed.success) {
    throw new VisibleError(
      "input",
      "scale.invalid",
      `workshop ${workshop} cannot have ${count} hosts`,
      problems,
    );
  }
  return parsed.data;
}
