import type {
  DeprovisionResult,
  PlanItem,
  Provider,
  ProvisionedHost,
  ProvisionOptions,
} from "../providers/types.ts";
import type { Workshop } from "../workshop/schema.ts";

/**
 * A lab (`student-01`, what the board, claims and links name) and the machine under it are usually the same
 * id. A rollout builds the lab's new machine beside the old one under the lab's other machine id, and when
 * it passes its health gate the lab's record points at it (`machine` on the host record): from then on the
 * provider knows the lab's machine by that id. The two ids alternate, so a lab never has more than two.
 */

export interface LabMachine {
  hostId: string;
  machine?: string | undefined;
}

/** The id the provider knows this lab's machine by. */
export function machineOf(h: LabMachine): string {
  return h.machine ?? h.hostId;
}

/** The lab's other machine id: where a rollout builds its new machine, beside the current one. */
export function otherMachine(h: LabMachine): string {
  return machineOf(h) === h.hostId ? `${h.hostId}.b` : h.hostId;
}

/** What provisioning these labs' machines (by their machine ids) would do, changing nothing; answers per lab id. */
export async function planLabs(provider: Provider, spec: Workshop, labs: LabMachine[]): Promise<PlanItem[]> {
  const labOf = new Map(labs.map((h) => [machineOf(h), h.hostId]));
  const items = await provider.plan(spec, [...labOf.keys()]);
  return items.map((p) => ({ ...p, hostId: labOf.get(p.hostId) ?? p.hostId }));
}

/** Provisions these labs' machines (by their machine ids) and answers per lab id. */
export async function provisionLabs(
  provider: Provider,
  spec: Workshop,
  labs: LabMachine[],
  opts?: ProvisionOptions,
): Promise<ProvisionedHost[]> {
  const labOf = new Map(labs.map((h) => [machineOf(h), h.hostId]));
  const made = await provider.provision(spec, [...labOf.keys()], opts);
  return made.map((p) => ({ ...p, hostId: labOf.get(p.hostId) ?? p.hostId }));
}

/** Gives these labs' machines back to the provider (by their machine ids) and answers per lab id. */
export async function deprovisionLabs(
  provider: Provider,
  spec: Workshop,
  labs: LabMachine[],
): Promise<DeprovisionResult[]> {
  const labOf = new Map(labs.map((h) => [machineOf(h), h.hostId]));
  const results = await provider.deprovision(spec, [...labOf.keys()]);
  return results.map((r) => ({ ...r, hostId: labOf.get(r.hostId) ?? r.hostId }));
}
