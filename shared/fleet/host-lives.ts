import { resolveInstanceType } from "../providers/aws-launch.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem, HostLifeItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";

/**
 * The lives of hosts that ended before the workshop's teardown: a host removed (scale-down, a lower count) or
 * a machine replaced (a run found it gone and made another, or a rollout promoted a new machine and removed
 * the old one) used hours too. Each is recorded when it ends,
 * with its creation and removal times and its instance type, so the teardown receipt's host-hours and cost
 * cover every host the workshop had; the receipt of a teardown that ends forgets them.
 */

export type HostLife = Pick<
  HostLifeItem,
  "hostId" | "providerId" | "instanceType" | "createdAt" | "removedAt" | "why"
>;

/** The instance type a host of this workshop runs on, when the provider has one (EC2). */
export function instanceTypeOf(spec: Workshop): string | undefined {
  return spec.provider.type === "aws" ? resolveInstanceType(spec.provider) : undefined;
}

/** Records that this host's machine is gone (removed, or replaced by another). Never throws: it is logged. */
export async function recordHostLife(
  spec: Workshop,
  host: Pick<HostItem, "hostId" | "createdAt" | "providerId"> & Partial<Pick<HostItem, "machineCreatedAt">>,
  why: HostLife["why"],
): Promise<void> {
  const { store, clock } = useDeps();
  const instanceType = instanceTypeOf(spec);
  try {
    await store.hostLife
      .put({
        workshop: spec.name,
        hostId: host.hostId,
        ...(host.providerId ? { providerId: host.providerId } : {}),
        ...(instanceType ? { instanceType } : {}),
        createdAt: host.machineCreatedAt ?? host.createdAt,
        removedAt: isoNow(clock),
        why,
      })
      .go();
  } catch (err) {
    log.warn("a removed host's hours were not recorded", {
      workshop: spec.name,
      hostId: host.hostId,
      error: errorMessage(err),
    });
  }
}

/** The lives recorded for the workshop since its last teardown, oldest removal first. */
export async function hostLives(workshop: string): Promise<HostLife[]> {
  return (await useDeps().store.hostLife.query.byWorkshop({ workshop }).go({ pages: "all" })).data;
}

/** Forgets lives a receipt has counted, so the workshop's next teardown does not count them again. */
export async function forgetHostLives(workshop: string, lives: HostLife[]): Promise<void> {
  const { store } = useDeps();
  for (const l of lives)
    await store.hostLife.delete({ workshop, removedAt: l.removedAt, hostId: l.hostId }).go();
}
