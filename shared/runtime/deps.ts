import type { CheckOutcome } from "../fleet/lab-checks.ts";
import type { Workflows } from "../fleet/workflows.ts";
import type { Leftover, Provider } from "../providers/types.ts";
import type { Store } from "../store/entities.ts";
import type { Transport, TransportName } from "../transports/types.ts";
import type { Clock } from "./clock.ts";

export interface HostAddress {
  workshop: string;
  hostId: string;
  address: string;
  transport: TransportName;
  /** For SSH hosts: what workshop.yaml's `defaults`, `ssh` and `hosts[]` say. */
  ssh?: {
    defaultUser?: string;
    identityFile?: string;
    via?: string;
    connectTimeoutMs?: number;
    /** `hosts[].host_key`: the keys (blobs, base64) the host may show; the only ones trusted when given. */
    hostKeys?: string[];
    /** `ssh.require_known_host_keys`: connect only with a key obtained out of band (never one trusted on first use). */
    requireKnownHostKeys?: boolean;
  };
}

/** The operator's secret store: `~/.labfleet/secrets.yaml` locally, Parameter Store in the cloud. */
export interface SecretStore {
  /** The values of these keys; missing keys are listed, never guessed. */
  get(keys: string[]): Promise<{ values: Record<string, string>; missing: string[] }>;
}

/**
 * The cloud's copy of the TTL teardown schedules (EventBridge Scheduler, see shared/cloud/scheduler.ts).
 * The store's schedule record stays the source of truth: the mirror only makes the teardown start on time,
 * and a lost or stale mirror is caught by the record's `pending -> fired` guard and the sweeper.
 */
export interface ScheduleMirror {
  /** Creates or moves the workshop's teardown schedule to fire at `at`. */
  put(workshop: string, at: Date): Promise<void>;
  /** Deletes it; one that is already gone is fine. */
  remove(workshop: string): Promise<void>;
  /** The workshop's schedule when it still exists (a teardown's receipt checks), looked up, not remembered. */
  leftover?(workshop: string): Promise<Leftover | undefined>;
}

/**
 * Where operator secrets wait for hosts reached through SSM (see shared/cloud/secret-parameters.ts): SSM keeps
 * a command's parameters in its history, so the values never travel in a command; the host fetches them itself.
 */
export interface SecretParameters {
  /** The name of the workshop's parameter (what a host's fetch command names); no call. */
  nameOf(workshop: string): string;
  /** Writes the workshop's secret values as one SecureString; returns the parameter's name. */
  put(workshop: string, values: Record<string, string>): Promise<string>;
  /** Deletes it; one that is already gone is fine. */
  remove(workshop: string): Promise<void>;
  /** The workshop's parameter when it still exists (a teardown's receipt checks), looked up, not remembered. */
  leftover?(workshop: string): Promise<Leftover | undefined>;
}

/**
 * The adapters, chosen once at start-up by the composition root (cli/dev for the local runtime, the
 * Lambda entries in the cloud). Domain code reads them here and never asks which runtime it is in.
 */
export interface Deps {
  store: Store;
  clock: Clock;
  providers: Partial<Record<Provider["name"], Provider>>;
  transport(host: HostAddress): Transport;
  workflows: Workflows;
  /** 32-byte key for lab credentials at rest (AES-256-GCM). */
  accessKey: Buffer;
  secrets: SecretStore;
  /**
   * Only `git:` lab sources (the cloud): a control plane in Lambda cannot read a folder on the operator's
   * machine, so a local `lab.source` is refused when the workshop is submitted, not at deploy.
   */
  gitSourcesOnly?: boolean;
  /** The public key line hosts must authorize for labfleet's managed SSH key (created if missing). */
  sshPublicKey?: () => Promise<string>;
  /** Cloud only: the EventBridge Scheduler copy of the teardown schedules (the local scheduler reads the records). */
  scheduleMirror?: ScheduleMirror;
  /** Cloud only: the SecureString operator secrets reach SSM hosts through (without it they are refused). */
  secretParameters?: SecretParameters;
  /**
   * Cloud only: how many task invocations the account can run at once (Lambda's unreserved concurrency); a run
   * deploys at most half that many hosts at once, so the API, the portal and other runs keep the rest.
   */
  taskConcurrency?: () => Promise<number | undefined>;
  /**
   * Runs a lab's `lab.checks` on one of its hosts ("Check my work"): in-process where the runtime reaches hosts,
   * through the RunChecks function from the cloud's portal (which reaches none). Without it, checks are refused.
   */
  checks?: { run(workshop: string, hostId: string): Promise<CheckOutcome[]> };
  /**
   * Where the runtime keeps SSH connections open between operations (the local runtime's pool): told when hosts
   * leave a workshop or their trusted keys change, so no connection outlives what it was opened for. Without it
   * (the cloud), each operation's connections end with it.
   */
  connections?: { release(workshop: string, hostIds?: readonly string[]): Promise<void> };
  /**
   * The URL hosts reach labfleet's API on, for the progress their wrappers push (shared/fleet/push-config.ts): the
   * local runtime's own 127.0.0.1 address once it listens, the cloud's API URL. Without one, nothing is pushed and
   * hosts are followed by polling alone.
   */
  hostApiUrl?: () => string | undefined;
}

/** Ends the pooled connections of a workshop's hosts (all of them without `hostIds`), where there is a pool. */
export async function releaseConnections(workshop: string, hostIds?: readonly string[]): Promise<void> {
  await current?.connections?.release(workshop, hostIds);
}

let current: Deps | undefined;

export function configure(deps: Deps): void {
  current = deps;
}

export function useDeps(): Deps {
  if (!current) throw new Error("labfleet runtime is not configured: call configure() at start-up");
  return current;
}
