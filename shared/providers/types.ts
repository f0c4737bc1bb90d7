import { type ErrorDetail, errorMessage } from "../runtime/errors.ts";
import { reachHost, type Transport, type TransportName } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";

export interface ProvisionedHost {
  hostId: string;
  /** How the transport reaches the host: a folder (local), user@host[:port] (ssh), an instance id (ssm). */
  address: string;
  providerId?: string;
  publicIp?: string;
  labels?: Record<string, string>;
  /** Set when this host could not be provisioned; the others go on. */
  error?: string;
}

export interface ProvisionOptions {
  expiry?: Date;
  /**
   * What this provision is part of (the run id): a retry of the same attempt must not create a host twice,
   * another attempt may replace a host that is gone (EC2: it names the launch's ClientToken).
   */
  attempt?: string;
}

export interface PlanItem {
  hostId: string;
  action: "create" | "reuse" | "noop";
  detail?: string;
}

export interface BootWait {
  /** Exits 0 once the host has booted, non-zero with the reason on stderr when its boot failed. */
  command: string;
  timeoutMs: number;
}

export interface DeprovisionResult {
  hostId: string;
  result: "destroyed" | "skipped" | "error";
  detail?: string;
}

/** Where hosts come from. Every method is idempotent; deprovision touches only what the provider created. */
export interface Provider {
  readonly name: Workshop["provider"]["type"];
  readonly transport: TransportName;
  /**
   * A command that waits on the host until the machine has finished booting, run before a host's first
   * deploy (EC2: until cloud-init has run the user data that installs what the deploy needs). Absent: the host
   * is ready when it answers.
   */
  readonly bootWait?: BootWait;
  /**
   * Deprovision ends everything running on a host (EC2 terminates the instance), so a teardown does not stop
   * each lab first: with many silent hosts that would spend the teardown's time on hosts about to vanish.
   */
  readonly deprovisionEndsLabs?: boolean;
  /**
   * The provider's transport does not trust the network (EC2: SSM Run Command, through AWS's API): before a
   * host's first deploy, its SSH host keys are read through it and pinned with this origin (see
   * shared/fleet/host-keys.ts, pinHostKeysThrough).
   */
  readonly hostKeyChannel?: "ssm";
  /**
   * The hosts of a workshop whose hosts come to the provider (enrolled machines that joined and may be given
   * work), read from the store: `up` provisions these in place of hostIdsOf(spec), and never removes a host
   * because the spec does not name it. Absent: the spec names the hosts.
   */
  hostIds?(spec: Workshop): Promise<string[]>;
  /** Checks the provider section beyond the schema; returns every problem with its YAML path. */
  validate(spec: Workshop): ErrorDetail[];
  /**
   * What provision would do for these hosts (by default every one of the spec), changing nothing. Like
   * provision and deprovision, it takes the ids the provider knows the machines by: a lab a rollout moved is
   * planned by its machine id (shared/fleet/machines.ts, planLabs).
   */
  plan(spec: Workshop, hostIds?: string[]): Promise<PlanItem[]>;
  /**
   * Provisions these hosts of the spec (by default every one). `expiry` is the workshop's recorded end (it
   * moves with extend): hosts made now end then, not at now + ttl_hours.
   */
  provision(spec: Workshop, hostIds?: string[], opts?: ProvisionOptions): Promise<ProvisionedHost[]>;
  deprovision(spec: Workshop, hostIds: string[]): Promise<DeprovisionResult[]>;
  /** Moves the provider-side expiry of these hosts (EC2: the expiry tag). Absent: nothing to move. */
  extendExpiry?(spec: Workshop, hostIds: string[], expiry: Date): Promise<void>;
  /**
   * The sweeper's pass (cloud only): ends every instance this provider made, in any workshop, whose expiry
   * tag is past `now`, for the case where a TTL schedule was lost.
   */
  sweepExpired?(now: Date): Promise<SweptInstance[]>;
  /**
   * What this provider made for the workshop that is still there (after its teardown): looked up by ownership,
   * never from the store's records. Absent: the provider makes nothing it could leave (bring-your-own hosts).
   */
  leftovers?(spec: Workshop): Promise<Leftover[]>;
}

/**
 * Something a provider (or an adapter) made for a workshop that is still there after its teardown, found by its
 * ownership (EC2: the tags; local: the host's folder), with why it is left and the command that removes it.
 */
export interface Leftover {
  /** instance, volume, security-group, schedule, parameter, host-folder, process. */
  kind: string;
  /** What names it: an instance, volume or group id, a schedule or parameter name, a folder, a pid. */
  id: string;
  hostId?: string;
  /** Why it is still there, in words (its state, what holds it). */
  why: string;
  /** The shell command that removes it. */
  command: string;
}

export interface SweptInstance {
  providerId: string;
  workshop: string;
  hostId: string;
  /** ISO time from the instance's expiry tag. */
  expiry: string;
  result: "terminated" | "error";
  detail?: string;
}

/**
 * The host ids of a workshop: listed ones for static fleets, `prefix01..prefixNN` otherwise. Enrolled hosts are
 * not known from the spec (they join): none here, the provider's `hostIds` lists them.
 */
export function hostIdsOf(spec: Workshop): string[] {
  if (spec.provider.type === "static") return spec.hosts.map((h) => h.id);
  if (spec.provider.type === "enrolled") return [];
  // Two digits at least, whatever the count: a lab keeps its id when the workshop grows past 99 hosts
  // (student-99, student-100), and `labfleet scale` adds ids the fleet's own way.
  return Array.from(
    { length: spec.provider.count },
    (_, i) => `${spec.provider.host_id_prefix}${String(i + 1).padStart(2, "0")}`,
  );
}

/**
 * A host a provider did not create (bring-your-own, enrolled) as provision reports it: `base`, or `base` with the
 * reason when it does not answer (reachHost: an SSH host lets labfleet log in; another runs `true`). The transport
 * is closed after.
 */
export async function answering(t: Transport, base: ProvisionedHost, step: string): Promise<ProvisionedHost> {
  try {
    await reachHost(t, step);
    return base;
  } catch (err) {
    return { ...base, error: errorMessage(err) };
  } finally {
    await t.close?.();
  }
}
