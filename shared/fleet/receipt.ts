import { onDemandPricePerHour } from "../providers/aws-pricing.ts";
import type { DeprovisionResult, Leftover } from "../providers/types.ts";
import { assertActor, useActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem, ReceiptItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { forgetHostLives, type HostLife, hostLives, instanceTypeOf } from "./host-lives.ts";
import { listHosts } from "./workshops.ts";

/**
 * The teardown receipt: when a teardown ends, labfleet looks for anything it made for the workshop that is still
 * there (the provider's `leftovers`: EC2 instances, volumes and security groups by their ownership tags, local
 * host folders and processes; the TTL schedule and the secrets parameter through their adapters) and stores
 * what was removed, what is left (why, and the command that removes it) and the host-hours used with their
 * on-demand cost. It is one record per workshop (the last teardown's), with a `teardown.receipt` event.
 *
 * The sweeper looks again for the receipts of teardowns that ended within RECHECK_HOURS, and of any receipt
 * that still lists something left: what it finds newly left is added (found by the sweeper) with an event, and
 * what is gone since moves to the removed list.
 */

export const RECHECK_HOURS = 24;

export interface ReceiptEntry {
  kind: string;
  id: string;
  hostId?: string;
  detail?: string;
}

export interface ReceiptLeftover extends Leftover {
  /** Who found it: the teardown's own check, or a later sweeper pass. */
  foundBy: "teardown" | "sweeper";
  foundAt: string;
  /**
   * The provider's own command that removes it by hand, when `command` is `labfleet down NAME --yes` (the
   * teardown failed, and running it again removes everything labfleet still knows of).
   */
  byHand?: string;
}

export interface ReceiptUsage {
  /** Every host the workshop had since its last teardown: those still there, and those removed earlier. */
  hosts: number;
  /**
   * Sum over those hosts of their lives in hours (2 decimals): from creation to the teardown, or to their
   * removal for a host removed earlier (scale-down, a lower count, a machine replaced).
   */
  hostHours: number;
  /** The hosts removed before the teardown, included in `hosts` and `hostHours`. */
  earlier?: { hosts: number; hostHours: number };
  instanceType?: string;
  /** USD per host-hour on demand, when labfleet knows it (shared/providers/aws-pricing.ts). */
  pricePerHour?: number;
  /** hostHours × pricePerHour in USD; 0 for local and bring-your-own hosts; absent when the price is unknown. */
  costUsd?: number;
  /** How the cost was reached, in words. */
  basis: string;
}

export interface Receipt {
  workshop: string;
  runId: string;
  provider: string;
  region?: string;
  endedAt: string;
  checkedAt: string;
  removed: ReceiptEntry[];
  left: ReceiptLeftover[];
  checkError?: string;
  /** Set when the teardown run failed (a step threw): why. What is left is what it did not get to. */
  failed?: string;
  usage: ReceiptUsage;
}

const hoursOf = (ms: number) => Math.round((ms / 3_600_000) * 100) / 100;

/**
 * The hosts' usage: the hosts still there (their records, taken before the teardown deletes them) from their
 * machine's creation to the teardown, and the hosts removed earlier (`earlier`, shared/fleet/host-lives.ts) from their
 * creation to their removal. The cost is at the on-demand price of each life's instance type.
 */
export function usageOf(
  spec: Workshop,
  hosts: (Pick<HostItem, "createdAt"> & Partial<Pick<HostItem, "state" | "machineCreatedAt">>)[],
  end: Date,
  earlier: Pick<HostLife, "createdAt" | "removedAt" | "instanceType">[] = [],
): ReceiptUsage {
  const current = hosts.filter((h) => h.state !== "torn_down");
  const type = instanceTypeOf(spec);
  const lives = [
    ...current.map((h) => ({
      ms: end.getTime() - Date.parse(h.machineCreatedAt ?? h.createdAt),
      instanceType: type,
    })),
    ...earlier.map((l) => ({
      ms: Date.parse(l.removedAt) - Date.parse(l.createdAt),
      instanceType: l.instanceType ?? type,
    })),
  ].map((l) => ({ ...l, ms: Math.max(0, l.ms) }));
  const hostHours = hoursOf(lives.reduce((sum, l) => sum + l.ms, 0));
  const earlierMs = lives.slice(current.length).reduce((sum, l) => sum + l.ms, 0);
  const base = {
    hosts: lives.length,
    hostHours,
    ...(earlier.length ? { earlier: { hosts: earlier.length, hostHours: hoursOf(earlierMs) } } : {}),
  };
  const also = earlier.length
    ? `; includes ${earlier.length} host${earlier.length === 1 ? "" : "s"} removed before the teardown`
    : "";
  const p = spec.provider;
  if (p.type === "local") return { ...base, costUsd: 0, basis: `local hosts cost nothing${also}` };
  if (p.type !== "aws")
    return { ...base, costUsd: 0, basis: `bring-your-own hosts: labfleet bills nothing for them${also}` };
  const types = [...new Set(lives.map((l) => l.instanceType ?? "this instance type"))];
  const unknown = types.filter((t) => onDemandPricePerHour(p.region, t) === undefined);
  const instanceType = types.length ? types.join(", ") : type;
  if (unknown.length > 0 || types.length === 0) {
    const which = unknown.length ? unknown.join(", ") : (type ?? "this instance type");
    return {
      ...base,
      ...(instanceType ? { instanceType } : {}),
      basis: `cost unknown: no built-in on-demand price for ${which} in ${p.region ?? "this region"}${also}`,
    };
  }
  const cost = lives.reduce(
    (sum, l) => sum + (l.ms / 3_600_000) * (onDemandPricePerHour(p.region, l.instanceType as string) ?? 0),
    0,
  );
  const price = types.length === 1 ? onDemandPricePerHour(p.region, types[0] as string) : undefined;
  return {
    ...base,
    ...(instanceType ? { instanceType } : {}),
    ...(price !== undefined ? { pricePerHour: price } : {}),
    costUsd: Math.round(cost * 100) / 100,
    basis:
      price !== undefined
        ? `${instanceType} at $${price.toFixed(4)}/h on demand in ${p.region} (list price, Linux; check the bill)${also}`
        : `${instanceType}, each at its on-demand price in ${p.region} (list prices, Linux; check the bill)${also}`,
  };
}

/** What the teardown removed, from the deprovision results and the steps after it. */
export function removedBy(spec: Workshop, hosts: HostItem[], results: DeprovisionResult[]): ReceiptEntry[] {
  const byId = new Map(hosts.map((h) => [h.hostId, h]));
  const kind =
    spec.provider.type === "aws" ? "instance" : spec.provider.type === "local" ? "host-folder" : "host";
  const out: ReceiptEntry[] = [];
  for (const r of results) {
    if (r.result !== "destroyed") continue;
    const h = byId.get(r.hostId);
    out.push({
      kind,
      id: (spec.provider.type === "local" ? h?.address : h?.providerId) ?? r.hostId,
      hostId: r.hostId,
      ...(r.detail ? { detail: r.detail } : {}),
    });
  }
  return out;
}

/** Everything still there: the provider's leftovers, the TTL schedule, the secrets parameter. */
export async function findLeftovers(spec: Workshop): Promise<{ left: Leftover[]; error?: string }> {
  const { providers, scheduleMirror, secretParameters } = useDeps();
  const provider = providers[spec.provider.type];
  const left: Leftover[] = [];
  const errors: string[] = [];
  const look = async (what: string, fn: () => Promise<Leftover[] | Leftover | undefined>) => {
    try {
      const found = await fn();
      if (Array.isArray(found)) left.push(...found);
      else if (found) left.push(found);
    } catch (err) {
      errors.push(`${what}: ${errorMessage(err)}`);
    }
  };
  if (provider?.leftovers)
    await look("hosts", () => (provider.leftovers as (s: Workshop) => Promise<Leftover[]>)(spec));
  if (scheduleMirror?.leftover)
    await look("schedule", () => scheduleMirror.leftover?.(spec.name) ?? Promise.resolve(undefined));
  if (secretParameters?.leftover && provider?.transport === "ssm")
    await look(
      "secrets parameter",
      () => secretParameters.leftover?.(spec.name) ?? Promise.resolve(undefined),
    );
  return errors.length ? { left, error: errors.join("; ") } : { left };
}

/**
 * After a failed teardown, what `labfleet down NAME --yes` removes when run again (anything of a host the
 * workshop still has a record of, and what belongs to no host: the TTL schedule, the secrets parameter, the
 * security group) gets that as its command, with the provider's own command kept as `byHand`. Something of a
 * host labfleet does not know keeps its own command: no teardown would touch it.
 */
function remedies(
  spec: Workshop,
  hosts: Pick<HostItem, "hostId" | "state">[],
  failed: string | undefined,
): (l: Leftover) => Leftover & { byHand?: string } {
  if (failed === undefined) return (l) => l;
  const known = new Set(hosts.filter((h) => h.state !== "torn_down").map((h) => h.hostId));
  const again = `labfleet down ${spec.name} --yes`;
  return (l) =>
    l.hostId === undefined || known.has(l.hostId)
      ? { ...l, why: `${l.why} (the teardown failed before removing it)`, command: again, byHand: l.command }
      : l;
}

function actorName(): string {
  const actor = useActor();
  if (actor.type === "host") return actor.hostId;
  return actor.type === "public" ? "labfleet" : actor.id;
}

function regionOf(spec: Workshop): string | undefined {
  return spec.provider.type === "aws" ? spec.provider.region : undefined;
}

/**
 * Takes and stores the receipt of a teardown that just ended, then records `teardown.receipt`. Never throws: a
 * failed check is written into the receipt (checkError), a failed write is logged. `failed` is the reason of
 * a teardown run that failed outright (FailTeardown): the receipt then says so, and what is left comes with
 * `labfleet down NAME --yes` as its command where that removes it.
 */
export async function takeReceipt(
  spec: Workshop,
  runId: string,
  hosts: HostItem[],
  results: DeprovisionResult[],
  extraRemoved: ReceiptEntry[],
  failed?: string,
): Promise<Receipt | undefined> {
  const { store, clock } = useDeps();
  const end = clock.now();
  const endedAt = isoNow(clock);
  const found = await findLeftovers(spec);
  const region = regionOf(spec);
  const remedy = remedies(spec, hosts, failed);
  const earlier = await hostLives(spec.name);
  const receipt: Receipt = {
    workshop: spec.name,
    runId,
    provider: spec.provider.type,
    ...(region ? { region } : {}),
    endedAt,
    checkedAt: isoNow(clock),
    removed: [...removedBy(spec, hosts, results), ...extraRemoved],
    left: found.left.map((l) => ({ ...remedy(l), foundBy: "teardown" as const, foundAt: endedAt })),
    ...(found.error ? { checkError: found.error } : {}),
    ...(failed !== undefined ? { failed: failed.slice(0, 2000) } : {}),
    usage: usageOf(spec, hosts, end, earlier),
  };
  try {
    await store.receipt.put(receipt).go();
  } catch (err) {
    log.error("the teardown receipt was not stored", { workshop: spec.name, error: errorMessage(err) });
    return undefined;
  }
  // Counted here: the workshop's next teardown starts from its own hosts. A failed teardown's receipt keeps
  // them for the teardown that follows it.
  if (failed === undefined)
    await forgetHostLives(spec.name, earlier).catch((err) =>
      log.warn("counted host lives were not forgotten", { workshop: spec.name, error: errorMessage(err) }),
    );
  if (found.error)
    log.warn("the teardown's leftover check did not finish", { workshop: spec.name, error: found.error });
  await recordEvent({
    workshop: spec.name,
    type: "teardown.receipt",
    runId,
    detail: {
      by: actorName(),
      ...(failed !== undefined ? { failed: true } : {}),
      removed: receipt.removed.length,
      left: receipt.left.map((l) => `${l.kind} ${l.id}`),
      hostHours: receipt.usage.hostHours,
      ...(receipt.usage.costUsd !== undefined ? { costUsd: receipt.usage.costUsd } : {}),
    },
  });
  return receipt;
}

function receiptOf(item: ReceiptItem): Receipt {
  return {
    workshop: item.workshop,
    runId: item.runId,
    provider: item.provider,
    ...(item.region ? { region: item.region } : {}),
    endedAt: item.endedAt,
    checkedAt: item.checkedAt,
    removed: item.removed as ReceiptEntry[],
    left: item.left as ReceiptLeftover[],
    ...(item.checkError ? { checkError: item.checkError } : {}),
    ...(item.failed !== undefined ? { failed: item.failed } : {}),
    usage: item.usage as ReceiptUsage,
  };
}

/** The receipt of the workshop's last teardown; not_found when it was never torn down. */
export async function getReceipt(workshop: string): Promise<Receipt> {
  assertActor("instructor", "system");
  const r = (await useDeps().store.receipt.get({ workshop }).go()).data;
  if (!r)
    throw new VisibleError(
      "not_found",
      "receipt.not_found",
      `workshop ${workshop} has no teardown receipt: it was never torn down (labfleet down ${workshop})`,
    );
  return receiptOf(r);
}

/** The receipt when there is one, for pages that show it beside other things. */
export async function findReceipt(workshop: string): Promise<Receipt | undefined> {
  const r = (await useDeps().store.receipt.get({ workshop }).go()).data;
  return r ? receiptOf(r) : undefined;
}

const key = (l: Pick<Leftover, "kind" | "id">) => `${l.kind}\u0000${l.id}`;

/**
 * The sweeper's look at torn-down workshops (and at workshops whose last run is a teardown that failed): for
 * each receipt of a teardown that ended within RECHECK_HOURS, or that still lists something left, looks for
 * leftovers again. Newly found ones are added (foundBy `sweeper`)
 * with a `teardown.receipt` event; listed ones that are gone move to `removed`. Returns what it added.
 */
export async function recheckReceipts(): Promise<{ workshop: string; left: Leftover[] }[]> {
  assertActor("system");
  const { store, clock } = useDeps();
  const now = clock.now();
  // Torn down, or its last run a teardown that failed (that teardown's receipt lists what it left).
  const workshops = (await store.workshop.query.all({}).go({ pages: "all" })).data.filter(
    (w) => w.state === "torn_down" || w.state === "failed",
  );
  const reports: { workshop: string; left: Leftover[] }[] = [];
  for (const w of workshops) {
    const item = (await store.receipt.get({ workshop: w.name }).go()).data;
    if (!item) continue;
    const receipt = receiptOf(item);
    if (w.state !== "torn_down" && (receipt.failed === undefined || w.lastRunId !== receipt.runId)) continue;
    const recent = now.getTime() - Date.parse(receipt.endedAt) < RECHECK_HOURS * 3_600_000;
    if (!recent && receipt.left.length === 0) continue;
    const found = await findLeftovers(w.spec as Workshop);
    if (found.error) {
      log.warn("sweeper: the leftover check of a torn-down workshop did not finish", {
        workshop: w.name,
        error: found.error,
      });
      continue;
    }
    const at = isoNow(clock);
    const remedy = remedies(w.spec as Workshop, await listHosts(w.name), receipt.failed);
    const listed = new Set(receipt.left.map(key));
    const still = new Set(found.left.map(key));
    const added = found.left.filter((l) => !listed.has(key(l)));
    const gone = receipt.left.filter((l) => !still.has(key(l)));
    const left: ReceiptLeftover[] = [
      ...receipt.left.filter((l) => still.has(key(l))),
      ...added.map((l) => ({ ...remedy(l), foundBy: "sweeper" as const, foundAt: at })),
    ];
    const removed: ReceiptEntry[] = [
      ...receipt.removed,
      ...gone.map((l) => ({
        kind: l.kind,
        id: l.id,
        ...(l.hostId ? { hostId: l.hostId } : {}),
        detail: `gone by ${at} (seen by the sweeper)`,
      })),
    ];
    await store.receipt
      .patch({ workshop: w.name })
      .set({ left, removed, checkedAt: at })
      .remove(["checkError"])
      .go();
    if (added.length > 0) {
      log.warn("sweeper: found something left of a torn-down workshop", {
        workshop: w.name,
        left: added.map((l) => `${l.kind} ${l.id}`),
      });
      reports.push({ workshop: w.name, left: added });
      await recordEvent({
        workshop: w.name,
        type: "teardown.receipt",
        runId: receipt.runId,
        detail: { by: "sweeper", left: added.map((l) => `${l.kind} ${l.id}`), removed: gone.length },
      });
    }
  }
  return reports;
}
