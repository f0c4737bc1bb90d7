import { randomUUID } from "node:crypto";
import {
  CreateTagsCommand,
  DescribeInstancesCommand,
  type EC2Client,
  type Filter,
  type Image,
  type Instance,
  type InstanceStateName,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import { SSMClient } from "@aws-sdk/client-ssm";
import { mapLimit } from "../runtime/concurrency.ts";
import { timeLeft } from "../runtime/deadline.ts";
import { type ErrorDetail, errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { Workshop } from "../workshop/schema.ts";
import {
  type AwsSpec,
  CREATED_TAG,
  chunks,
  EXPIRY_TAG,
  FILTER_CHUNK,
  HOST_ID_TAG,
  OWNER_TAG,
  parseIsoTime,
  STAGE_TAG,
  tagValue,
  WORKSHOP_TAG,
} from "./aws-common.ts";
import {
  CLOUD_INIT_WAIT,
  findImage,
  launchInstance,
  resolveInstanceType,
  type Wait,
  waitRunning,
  waitSsmOnline,
} from "./aws-launch.ts";
import { awsLeftovers } from "./aws-leftovers.ts";
import { costText } from "./aws-pricing.ts";
import { checkVcpuQuota, type VcpuQuotaCheck, vcpuQuotaError, vcpuQuotaLine } from "./aws-quota.ts";
import { batchesOf, Pacer, RUN_INSTANCES_PACE, TERMINATE_BATCH } from "./aws-rates.ts";
import {
  accessPorts,
  byoAccessMessage,
  describePorts,
  type IngressRule,
  ManagedSecurityGroups,
  operatorRules,
  portList,
  WORLD_V4,
  WORLD_V6,
} from "./aws-security-groups.ts";
import { validateAwsProvider } from "./aws-validate.ts";
import {
  type DeprovisionResult,
  hostIdsOf,
  type Leftover,
  type PlanItem,
  type Provider,
  type ProvisionedHost,
  type ProvisionOptions,
  type SweptInstance,
} from "./types.ts";

export { EXPIRY_TAG, HOST_ID_TAG, OWNER_TAG, STAGE_TAG, WORKSHOP_TAG } from "./aws-common.ts";

/**
 * EC2 hosts, reached through SSM (the host's address is its instance id): the provider's operations (validate,
 * plan, provision, deprovision, extendExpiry, sweepExpired, setOpenAccess) and how it finds its instances.
 * Every other seam has a file of its own:
 *
 * | file                   | holds                                                                           |
 * | ---------------------- | ------------------------------------------------------------------------------- |
 * | aws-validate.ts        | the provider section's rules and messages (validate)                            |
 * | aws-launch.ts          | what a host is launched as (tiers, types, image, user data, ClientToken, the    |
 * |                        | first-boot wait) and the launch (findImage, launchInstance, waitRunning,        |
 * |                        | waitSsmOnline)                                                                  |
 * | aws-security-groups.ts | the workshop's managed security group, operator CIDRs, open access              |
 * | aws-quota.ts           | the running On-Demand vCPU quota check                                          |
 * | aws-pricing.ts         | the On-Demand prices a plan quotes                                              |
 * | aws-leftovers.ts       | what is left of a workshop after its teardown (the receipt's check)             |
 * | aws-common.ts          | the ownership tags, the provider section's type, small helpers                  |
 *
 * Ownership: everything this provider creates carries `ManagedBy=labfleet`, `labfleet-workshop=<name>` and
 * `labfleet-host-id=<id>` (on the instance and its volumes, applied atomically by RunInstances), plus
 * `labfleet-expiry=<ISO time>` and `Name`. Reuse and teardown look instances up by those three tags only, and
 * teardown re-checks all three on every instance before terminating it: nothing untagged or foreign is touched.
 *
 * Security groups (see aws-security-groups.ts): with `security_group_ids`, the hosts get those groups and
 * labfleet changes nothing in them (setOpenAccess says what to open by hand). Without, labfleet manages one
 * group per workshop in the subnet's VPC that admits `operator_cidrs` only, on 22 and `lab.ui_ports`;
 * setOpenAccess opens (and closes) the UI ports, never 22, to the world. Deprovision deletes the group once no
 * instance of the workshop is left; a group still held by instances that are shutting down is left to the
 * sweeper.
 *
 * Before creating: the running On-Demand vCPU quota check (see aws-quota.ts). After running: provision waits
 * until the SSM agent of every host is online (waitSsmOnline), since SSM is how hosts are reached.
 *
 * Expiry: `labfleet-expiry` on every instance is the workshop's end. extendExpiry moves it; sweepExpired
 * (the rate(5 minutes) sweeper) terminates any labfleet instance past it, in any workshop, and deletes the
 * security groups of workshops that have no instance left.
 */

const LIVE_STATES: InstanceStateName[] = ["pending", "running"];
/** Instances that still hold the workshop (shutting-down ones are on their way out). */
const PRESENT_STATES: InstanceStateName[] = ["pending", "running", "stopping", "stopped"];
const NOT_TERMINATED: InstanceStateName[] = [...PRESENT_STATES, "shutting-down"];
const CONCURRENCY = 8;
/** How long a teardown waits for its instances to be terminated before deleting their group, and how often it looks. */
const GROUP_DELETE_WAIT_MS = 90_000;
const GROUP_DELETE_POLL_MS = 5_000;
/** The sweeper leaves a managed security group alone this long after its creation (a provision in flight). */
const GROUP_SWEEP_GRACE_MS = 60 * 60_000;

export interface AwsProviderOptions {
  ec2: EC2Client;
  /**
   * The deployment stage (`LABFLEET_STAGE`): tagged on everything this provider creates and required on
   * everything it reuses, changes or deletes, so two stages in one account never touch each other's hosts.
   */
  stage: string;
  /** For the SSM agent wait. Default: an SSMClient for the EC2 client's region and credentials. */
  ssm?: SSMClient;
  /** For the vCPU quota check. Default: a ServiceQuotasClient for the EC2 client's region and credentials. */
  serviceQuotas?: ServiceQuotasClient;
  clock?: { now(): Date };
  sleep?: (ms: number) => Promise<void>;
  /** How long provision waits for new instances to run, in total (default 10 minutes). */
  waitTimeoutMs?: number;
  /** Between two DescribeInstances polls while waiting (default 5 s). */
  pollIntervalMs?: number;
  /** How long provision waits, in total, for the SSM agents of running hosts to come online (default 10 minutes). */
  ssmWaitTimeoutMs?: number;
  /** The first wait between DescribeInstanceInformation polls; it doubles up to 30 s (default 5 s). */
  ssmPollIntervalMs?: number;
  /** The instance profile the hosts get (it must allow the SSM agent, e.g. AmazonSSMManagedInstanceCore). */
  instanceProfileArn?: string;
}

/** What setOpenAccess did. */
export interface OpenAccessResult {
  /** "managed": labfleet's own group of the workshop; "byo": the workshop's `security_group_ids`, left unchanged. */
  mode: "managed" | "byo";
  /** True when labfleet added or removed a rule. */
  changed: boolean;
  groupIds: string[];
  /** The lab UI ports concerned (never 22). */
  ports: number[];
  /** For the instructor: what changed, or with BYO groups, what to open or close by hand. */
  message: string;
}

function tagOf(instance: Instance, key: string): string | undefined {
  return tagValue(instance.Tags, key);
}

/** Why an instance is not this stage's host of this workshop, or undefined when its ownership tags all match. */
function ownershipProblem(
  instance: Instance,
  stage: string,
  workshop: string,
  hostId: string,
): string | undefined {
  const expected: [string, string][] = [
    [OWNER_TAG.key, OWNER_TAG.value],
    [STAGE_TAG, stage],
    [WORKSHOP_TAG, workshop],
    [HOST_ID_TAG, hostId],
  ];
  for (const [key, value] of expected) {
    const actual = tagOf(instance, key);
    if (actual !== value) {
      return actual === undefined
        ? `it has no ${key} tag`
        : `its ${key} tag is "${actual}", expected "${value}"`;
    }
  }
  return undefined;
}

interface Lookup {
  /** Instances carrying all three tags, by host id. */
  owned: Map<string, Instance[]>;
  /** Instances the filter returned whose tags do not all match (never reused, never terminated), by host id. */
  foreign: Map<string, { instance: Instance; problem: string }[]>;
}

export class AwsProvider implements Provider {
  readonly name = "aws" as const;
  readonly transport = "ssm" as const;
  /** Within DeployHost's 15 minutes, with room for the deploy itself. */
  readonly bootWait = { command: CLOUD_INIT_WAIT, timeoutMs: 10 * 60_000 };
  /** Terminating an instance ends its labs: a teardown does not stop them first. */
  readonly deprovisionEndsLabs = true;
  /** SSM reaches the instance through AWS's API, not the network: its SSH host keys are read that way. */
  readonly hostKeyChannel = "ssm" as const;

  private readonly ec2: EC2Client;
  private readonly ssm: SSMClient;
  private readonly serviceQuotas: ServiceQuotasClient;
  private readonly groups: ManagedSecurityGroups;
  private readonly clock: { now(): Date };
  private readonly sleep: (ms: number) => Promise<void>;
  /** Provision's wait for new instances to run. */
  private readonly runningWait: Wait;
  /** Provision's wait for the SSM agents of running hosts to come online. */
  private readonly ssmWait: Wait;
  private readonly instanceProfileArn: string | undefined;
  private readonly stage: string;

  constructor(opts: AwsProviderOptions) {
    this.ec2 = opts.ec2;
    // The same region (and credentials) as the EC2 client, so every call of one provider hits one region.
    const same = { region: opts.ec2.config.region, credentials: opts.ec2.config.credentials };
    this.ssm = opts.ssm ?? new SSMClient(same);
    this.serviceQuotas = opts.serviceQuotas ?? new ServiceQuotasClient(same);
    this.stage = opts.stage;
    this.groups = new ManagedSecurityGroups(opts.ec2, opts.stage);
    this.clock = opts.clock ?? { now: () => new Date() };
    this.sleep = opts.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.runningWait = {
      timeoutMs: opts.waitTimeoutMs ?? 10 * 60_000,
      pollIntervalMs: opts.pollIntervalMs ?? 5_000,
      sleep: this.sleep,
    };
    this.ssmWait = {
      timeoutMs: opts.ssmWaitTimeoutMs ?? 10 * 60_000,
      pollIntervalMs: opts.ssmPollIntervalMs ?? 5_000,
      sleep: this.sleep,
    };
    this.instanceProfileArn = opts.instanceProfileArn;
  }

  /** The provider section's rules (see aws-validate.ts). */
  validate(spec: Workshop): ErrorDetail[] {
    return validateAwsProvider(spec);
  }

  async plan(spec: Workshop, ids?: string[]): Promise<PlanItem[]> {
    const p = await this.ready(spec, true);
    const type = resolveInstanceType(p) as string;
    const expiry = this.expiryOf(p);
    const hostIds = [...new Set(ids ?? hostIdsOf(spec))];
    const { owned } = await this.lookup(spec.name, hostIds, LIVE_STATES);
    const creates = hostIds.filter((h) => (owned.get(h) ?? []).length === 0).length;
    const quota = creates > 0 ? `; ${vcpuQuotaLine(await this.vcpuQuota(p, type, creates))}` : "";
    return hostIds.map((hostId) => {
      const live = owned.get(hostId) ?? [];
      const first = live[0];
      if (first) {
        const extra = live.length > 1 ? `; ${live.length - 1} more tagged for this host` : "";
        return {
          hostId,
          action: "reuse" as const,
          detail: `${first.InstanceId} (${first.State?.Name}, ${first.InstanceType}), expires ${tagOf(first, EXPIRY_TAG) ?? "(no expiry tag)"}, ${costText(p.region, first.InstanceType)}${extra}`,
        };
      }
      return {
        hostId,
        action: "create" as const,
        detail: `${type}, expires ${expiry.toISOString()}, ${costText(p.region, type)}${quota}`,
      };
    });
  }

  async provision(
    spec: Workshop,
    hostIds?: string[],
    opts: ProvisionOptions = {},
  ): Promise<ProvisionedHost[]> {
    const p = await this.ready(spec, true);
    const labels = { ...(p.labels ?? {}) };
    // A lab's machine goes by the lab's id or, once a rollout has replaced it, its other id (shared/fleet/machines.ts).
    const known = new Set(hostIdsOf(spec).flatMap((id) => [id, `${id}.b`]));
    const wanted = [...new Set(hostIds ?? hostIdsOf(spec))];
    const results = new Map<string, ProvisionedHost>();
    for (const hostId of wanted) {
      if (!known.has(hostId)) {
        results.set(hostId, {
          hostId,
          address: "",
          labels,
          error: `${hostId} is not a host of ${spec.name}`,
        });
      }
    }
    const ours = wanted.filter((h) => known.has(h));
    const { owned } = await this.lookup(spec.name, ours, LIVE_STATES);

    const instanceOf = new Map<string, string>();
    const running = new Map<string, Instance>();
    const toCreate: string[] = [];
    for (const hostId of ours) {
      const live = owned.get(hostId) ?? [];
      const pick = live.find((i) => i.State?.Name === "running") ?? live[0];
      if (!pick?.InstanceId) toCreate.push(hostId);
      else {
        instanceOf.set(hostId, pick.InstanceId);
        if (pick.State?.Name === "running") running.set(pick.InstanceId, pick);
      }
    }

    // Nothing is created (not even the security group) when the new hosts would not fit the vCPU quota.
    if (toCreate.length > 0) {
      const check = await this.vcpuQuota(p, resolveInstanceType(p) as string, toCreate.length);
      if (check.status === "exceeds") throw vcpuQuotaError(check);
      if (check.status === "unknown") {
        log.warn("the EC2 vCPU quota was not checked; launching anyway", {
          workshop: spec.name,
          reason: check.reason,
        });
      }
    }

    // The managed group is reconciled on every provision (a changed operator_cidrs or lab.ui_ports applies).
    let groupIds: string[] | undefined = p.security_group_ids?.length ? p.security_group_ids : undefined;
    let groupError: string | undefined;
    if (!groupIds) {
      try {
        groupIds = [await this.ensureManagedGroup(spec, p)];
      } catch (err) {
        groupError = `security group: ${errorMessage(err)}`;
        log.warn("the workshop's security group could not be set up", {
          workshop: spec.name,
          error: errorMessage(err),
        });
      }
    }

    if (toCreate.length > 0) {
      const expiry = this.expiryOf(p, opts.expiry);
      // Without a run to name the attempt (a direct call), each call is an attempt of its own.
      const attempt = opts.attempt ?? randomUUID();
      let image: Image | undefined;
      let launchError = groupError;
      if (!launchError) {
        try {
          image = await findImage(this.ec2, p);
        } catch (err) {
          launchError = errorMessage(err);
        }
      }
      // RunInstances refills 2 requests a second (aws-rates.ts): launches start at that pace, not in a burst.
      const pacer = new Pacer(RUN_INSTANCES_PACE, this.sleep);
      await mapLimit(toCreate, CONCURRENCY, async (hostId) => {
        if (!image || !groupIds) {
          results.set(hostId, { hostId, address: "", labels, error: launchError ?? "no image" });
          return;
        }
        try {
          const launch = {
            stage: this.stage,
            spec,
            p,
            hostId,
            image,
            expiry,
            securityGroupIds: groupIds,
            attempt,
            instanceProfileArn: this.instanceProfileArn,
          };
          await pacer.take();
          instanceOf.set(hostId, await launchInstance(this.ec2, launch));
        } catch (err) {
          results.set(hostId, { hostId, address: "", labels, error: `RunInstances: ${errorMessage(err)}` });
        }
      });
    }

    const waited = await waitRunning(
      this.ec2,
      [...instanceOf.values()].filter((id) => !running.has(id)),
      this.runningWait,
    );
    const up = [...instanceOf.values()].filter((id) => {
      const outcome = running.get(id) ?? waited.get(id);
      return outcome !== undefined && typeof outcome !== "string";
    });
    const offline = await waitSsmOnline(this.ssm, up, this.ssmWait);
    for (const [hostId, instanceId] of instanceOf) {
      const outcome = running.get(instanceId) ?? waited.get(instanceId);
      const base: ProvisionedHost = { hostId, address: instanceId, providerId: instanceId, labels };
      if (outcome === undefined || typeof outcome === "string") {
        results.set(hostId, { ...base, error: outcome ?? `${instanceId} never answered` });
      } else {
        const ssmError = offline.get(instanceId);
        results.set(hostId, {
          ...base,
          ...(outcome.PublicIpAddress ? { publicIp: outcome.PublicIpAddress } : {}),
          ...(ssmError ? { error: ssmError } : {}),
        });
      }
    }
    return wanted.map((hostId) => results.get(hostId) as ProvisionedHost);
  }

  async deprovision(spec: Workshop, hostIds: string[]): Promise<DeprovisionResult[]> {
    const p = await this.ready(spec, false);
    const wanted = [...new Set(hostIds)];
    const { owned, foreign } = await this.lookup(spec.name, wanted, NOT_TERMINATED);
    // The instances are terminated in batches (TerminateInstances refills 5 requests a second, aws-rates.ts);
    // a batch that fails is tried one host at a time, so one refused instance never spares the others.
    const live = new Map<string, string[]>();
    for (const hostId of wanted) {
      const ids = (owned.get(hostId) ?? [])
        .filter((i) => i.State?.Name !== "shutting-down")
        .map((i) => i.InstanceId as string);
      if (ids.length > 0) live.set(hostId, ids);
    }
    const terminateError = new Map<string, string>();
    const terminate = async (hosts: string[]) => {
      const ids = hosts.flatMap((h) => live.get(h) ?? []);
      // Terminate only ids that passed the three-tag check above, never a filter's raw answer.
      await this.ec2.send(new TerminateInstancesCommand({ InstanceIds: ids }));
    };
    for (const batch of batchesOf([...live.keys()], (h) => live.get(h)?.length ?? 0, TERMINATE_BATCH)) {
      try {
        await terminate(batch);
        continue;
      } catch (err) {
        if (batch.length === 1) {
          terminateError.set(batch[0] as string, errorMessage(err));
          continue;
        }
      }
      await mapLimit(batch, CONCURRENCY, async (hostId) => {
        try {
          await terminate([hostId]);
        } catch (err) {
          terminateError.set(hostId, errorMessage(err));
        }
      });
    }
    const results = wanted.map((hostId): DeprovisionResult => {
      const mine = owned.get(hostId) ?? [];
      const refused = (foreign.get(hostId) ?? []).map(
        ({ instance, problem }) => `refused to terminate ${instance.InstanceId}: ${problem}`,
      );
      const ids = live.get(hostId) ?? [];
      const going = mine.filter((i) => i.State?.Name === "shutting-down").map((i) => i.InstanceId as string);
      const notes: string[] = [];
      let failed = refused.length > 0;
      if (ids.length > 0) {
        const error = terminateError.get(hostId);
        if (error === undefined) notes.push(`terminated ${ids.join(", ")}`);
        else {
          failed = true;
          notes.push(`TerminateInstances ${ids.join(", ")}: ${error}`);
        }
      }
      if (going.length > 0) notes.push(`already shutting down: ${going.join(", ")}`);
      notes.push(...refused);
      if (failed) return { hostId, result: "error", detail: notes.join("; ") };
      if (ids.length > 0) return { hostId, result: "destroyed", detail: notes.join("; ") };
      return { hostId, result: "skipped", detail: notes[0] ?? "no instance found" };
    });
    // The managed group goes with the workshop's last instance. What happened to it is appended to the last
    // host's detail (it is no host's own result, and never turns a host into an error).
    const last = results[results.length - 1];
    if (!p.security_group_ids?.length && last) {
      const note = await this.deleteManagedGroups(spec.name);
      if (note) last.detail = last.detail ? `${last.detail}; ${note}` : note;
    }
    return results;
  }

  /** What is left of the workshop in EC2 after its teardown, by the ownership tags (see aws-leftovers.ts). */
  async leftovers(spec: Workshop): Promise<Leftover[]> {
    await this.ready(spec, false);
    return awsLeftovers({ ec2: this.ec2, groups: this.groups, stage: this.stage, workshop: spec.name });
  }

  /**
   * Moves the expiry of these hosts: rewrites the `labfleet-expiry` tag of their instances, only those that
   * carry all three ownership tags for this workshop (anything else is left as it is). The in-instance
   * dead-man switch is moved separately, on the host (through the transport).
   */
  async extendExpiry(spec: Workshop, hostIds: string[], expiry: Date): Promise<void> {
    await this.ready(spec, false);
    if (Number.isNaN(expiry.getTime())) {
      throw new VisibleError("input", "provider.expiry_invalid", "the new expiry is not a valid time");
    }
    const { owned, foreign } = await this.lookup(spec.name, [...new Set(hostIds)], PRESENT_STATES);
    for (const [hostId, found] of foreign) {
      log.warn("not moving the expiry of an instance that is not this workshop's", {
        workshop: spec.name,
        hostId,
        instances: found.map((f) => `${f.instance.InstanceId}: ${f.problem}`),
      });
    }
    const ids = [...owned.values()].flat().map((i) => i.InstanceId as string);
    for (const chunk of chunks(ids, FILTER_CHUNK)) {
      await this.ec2.send(
        new CreateTagsCommand({ Resources: chunk, Tags: [{ Key: EXPIRY_TAG, Value: expiry.toISOString() }] }),
      );
    }
  }

  /**
   * The sweeper's pass: lists every instance tagged `ManagedBy=labfleet` (any workshop, not terminated) and
   * terminates those whose `labfleet-expiry` is at or before `now`. An instance with a missing or garbled expiry
   * (or without its workshop or host-id tag) is never terminated: it is reported as an error. Returns one entry
   * per instance it acted on or refused; instances not yet expired, or already shutting down, are not listed.
   * Then, best effort, deletes the managed security groups of workshops that have no instance left.
   */
  async sweepExpired(now: Date): Promise<SweptInstance[]> {
    const instances = await this.describeAll([
      { Name: `tag:${OWNER_TAG.key}`, Values: [OWNER_TAG.value] },
      { Name: `tag:${STAGE_TAG}`, Values: [this.stage] },
      { Name: "instance-state-name", Values: NOT_TERMINATED },
    ]);
    const present = new Set<string>();
    const swept: SweptInstance[] = [];
    const expired: SweptInstance[] = [];
    for (const instance of instances) {
      if (
        !instance.InstanceId ||
        tagOf(instance, OWNER_TAG.key) !== OWNER_TAG.value ||
        tagOf(instance, STAGE_TAG) !== this.stage
      )
        continue;
      const workshop = tagOf(instance, WORKSHOP_TAG);
      const hostId = tagOf(instance, HOST_ID_TAG);
      const expiryTag = tagOf(instance, EXPIRY_TAG);
      if (workshop !== undefined) present.add(workshop);
      if (instance.State?.Name === "shutting-down") continue;
      const entry = {
        providerId: instance.InstanceId,
        workshop: workshop ?? "",
        hostId: hostId ?? "",
        expiry: expiryTag ?? "",
      };
      const missing = [
        workshop === undefined ? WORKSHOP_TAG : undefined,
        hostId === undefined ? HOST_ID_TAG : undefined,
      ].filter(Boolean);
      if (missing.length > 0) {
        swept.push({
          ...entry,
          result: "error",
          detail: `not terminated: it has no ${missing.join(" or ")} tag`,
        });
        continue;
      }
      const expiry = parseIsoTime(expiryTag);
      if (!expiry) {
        swept.push({
          ...entry,
          result: "error",
          detail:
            expiryTag === undefined
              ? `not terminated: it has no ${EXPIRY_TAG} tag`
              : `not terminated: its ${EXPIRY_TAG} tag "${expiryTag}" is not an ISO time`,
        });
        continue;
      }
      if (expiry.getTime() > now.getTime()) continue;
      const item: SweptInstance = { ...entry, result: "terminated" };
      expired.push(item);
      swept.push(item);
    }
    await this.terminateSwept(expired);
    await this.sweepOrphanGroups(present, now);
    return swept;
  }

  /**
   * Opens (`open: true`) or closes the lab UI ports of the workshop to the whole internet (0.0.0.0/0 and ::/0),
   * in the security group labfleet manages. Port 22 is never opened to the world; the operator's rules are
   * left as they are. Closing revokes every world rule of the group. Idempotent: a rule that is already there
   * (or already gone) is no error, and a second call changes nothing.
   *
   * The caller must check, before opening, that every lab of the workshop is ready and passed its health gate:
   * this method does not look at the labs.
   *
   * With `security_group_ids` (bring-your-own groups), labfleet changes nothing and the message says which
   * ports to open (or close) from which sources. Not part of the Provider interface: only EC2 has groups.
   */
  async setOpenAccess(spec: Workshop, open: boolean): Promise<OpenAccessResult> {
    const p = await this.ready(spec, false);
    const ports = accessPorts(spec).world;
    if (p.security_group_ids?.length) {
      return {
        mode: "byo",
        changed: false,
        groupIds: p.security_group_ids,
        ports,
        message: byoAccessMessage(p.security_group_ids, ports, open),
      };
    }
    const groups = await this.groups.find(spec.name);
    const groupIds = groups.map((g) => g.GroupId as string);
    if (groups.length === 0) {
      if (!open) {
        return {
          mode: "managed",
          changed: false,
          groupIds,
          ports,
          message: "no labfleet security group: nothing to close",
        };
      }
      throw new VisibleError(
        "not_found",
        "provider.security_group_missing",
        `workshop ${spec.name} has no labfleet security group in ${p.region ?? "this region"}: provision it first`,
      );
    }
    if (open && ports.length === 0) {
      return {
        mode: "managed",
        changed: false,
        groupIds,
        ports,
        message: "lab.ui_ports lists no port to open (port 22 is never opened to the world)",
      };
    }
    let added = 0;
    const revoked: IngressRule[] = [];
    for (const group of groups) {
      const change = await this.groups.setWorld(group, ports, open);
      added += change.added.length;
      revoked.push(...change.revoked);
    }
    const sources = `${WORLD_V4} and ${WORLD_V6}`;
    const where = groupIds.join(", ");
    let message: string;
    if (open) {
      message =
        added > 0
          ? `opened TCP ${portList(ports)} to ${sources} in ${where}`
          : `TCP ${portList(ports)} was already open to ${sources} in ${where}`;
    } else {
      message =
        revoked.length > 0
          ? `closed ${describePorts(revoked)} to ${sources} in ${where}`
          : `nothing was open to the world in ${where}`;
    }
    return { mode: "managed", changed: open ? added > 0 : revoked.length > 0, groupIds, ports, message };
  }

  /** Checks the spec (fully for plan/provision) and that the EC2 client talks to the spec's region. */
  private async ready(spec: Workshop, full: boolean): Promise<AwsSpec> {
    const p = spec.provider;
    const problems = full
      ? this.validate(spec)
      : p.type === "aws"
        ? []
        : [{ path: "provider.type", message: `expected aws for the EC2 provider, got ${p.type}` }];
    if (problems.length > 0 || p.type !== "aws") {
      throw new VisibleError("input", "workshop.invalid", "the aws provider section is not valid", problems);
    }
    const clientRegion = await this.ec2.config.region();
    if (p.region !== undefined && clientRegion !== p.region) {
      throw new VisibleError(
        "input",
        "provider.region_mismatch",
        `the EC2 client is for ${clientRegion} but the workshop's provider.region is ${p.region}`,
        [{ path: "provider.region", message: `expected the region the control plane's EC2 client uses` }],
      );
    }
    return p;
  }

  /** The workshop's recorded end when given (it moves with extend), else now + ttl_hours; whole seconds. */
  private expiryOf(p: AwsSpec, recorded?: Date): Date {
    const ms = recorded?.getTime() ?? this.clock.now().getTime() + p.ttl_hours * 3_600_000;
    return new Date(Math.floor(ms / 1000) * 1000);
  }

  /** Instances carrying the three ownership tags for these hosts, in these states, sorted by the host-id tag. */
  private async lookup(workshop: string, hostIds: string[], states: InstanceStateName[]): Promise<Lookup> {
    const owned = new Map<string, Instance[]>();
    const foreign = new Map<string, { instance: Instance; problem: string }[]>();
    for (const chunk of chunks(hostIds, FILTER_CHUNK)) {
      const Filters: Filter[] = [
        { Name: `tag:${OWNER_TAG.key}`, Values: [OWNER_TAG.value] },
        { Name: `tag:${STAGE_TAG}`, Values: [this.stage] },
        { Name: `tag:${WORKSHOP_TAG}`, Values: [workshop] },
        { Name: `tag:${HOST_ID_TAG}`, Values: chunk },
        { Name: "instance-state-name", Values: states },
      ];
      let NextToken: string | undefined;
      do {
        const page = await this.ec2.send(
          new DescribeInstancesCommand(NextToken ? { Filters, NextToken } : { Filters }),
        );
        for (const instance of (page.Reservations ?? []).flatMap((r) => r.Instances ?? [])) {
          const hostId = tagOf(instance, HOST_ID_TAG);
          if (hostId === undefined || !chunk.includes(hostId) || !instance.InstanceId) continue;
          const problem = ownershipProblem(instance, this.stage, workshop, hostId);
          if (problem) foreign.set(hostId, [...(foreign.get(hostId) ?? []), { instance, problem }]);
          else owned.set(hostId, [...(owned.get(hostId) ?? []), instance]);
        }
        NextToken = page.NextToken;
      } while (NextToken);
    }
    return { owned, foreign };
  }

  private vcpuQuota(p: AwsSpec, instanceType: string, count: number): Promise<VcpuQuotaCheck> {
    return checkVcpuQuota({
      ec2: this.ec2,
      quotas: this.serviceQuotas,
      region: p.region as string,
      instanceType,
      count,
    });
  }

  /** Finds or creates the workshop's group in the subnet's VPC and reconciles its rules; returns its id. */
  private async ensureManagedGroup(spec: Workshop, p: AwsSpec): Promise<string> {
    const vpc = await this.groups.vpcOf(p.subnet_id as string);
    const group = await this.groups.ensure(spec.name, vpc, this.clock.now());
    const ports = accessPorts(spec);
    await this.groups.reconcile(group, operatorRules(p.operator_cidrs ?? [], ports.operator), ports.world);
    return group.GroupId as string;
  }

  /**
   * Deletes the workshop's managed groups when no instance of the workshop is left (shutting-down ones aside:
   * they still hold the group, which EC2 then refuses to delete, and the sweeper deletes it later). Returns a
   * note for the instructor, or undefined when there was nothing to say. Never throws.
   */
  private async deleteManagedGroups(workshop: string): Promise<string | undefined> {
    try {
      const left = await this.describeAll([
        { Name: `tag:${OWNER_TAG.key}`, Values: [OWNER_TAG.value] },
        { Name: `tag:${STAGE_TAG}`, Values: [this.stage] },
        { Name: `tag:${WORKSHOP_TAG}`, Values: [workshop] },
        { Name: "instance-state-name", Values: PRESENT_STATES },
      ]);
      if (
        left.some(
          (i) =>
            tagOf(i, WORKSHOP_TAG) === workshop &&
            tagOf(i, STAGE_TAG) === this.stage &&
            tagOf(i, OWNER_TAG.key) === OWNER_TAG.value,
        )
      ) {
        return undefined;
      }
      const groups = await this.groups.find(workshop);
      if (groups.length === 0) return undefined;
      await this.waitTerminated(workshop);
      const notes: string[] = [];
      for (const group of groups) {
        const id = group.GroupId as string;
        const outcome = await this.groups.delete(id);
        if (outcome === "deleted") notes.push(`deleted security group ${id}`);
        else if (outcome === "in_use") {
          notes.push(
            `security group ${id} is still in use (its instances are shutting down): the sweeper deletes it once they are gone`,
          );
        }
      }
      return notes.length > 0 ? notes.join("; ") : undefined;
    } catch (err) {
      log.warn("deleting the workshop's security group failed", { workshop, error: errorMessage(err) });
      return `security group: ${errorMessage(err)}; the sweeper deletes it later`;
    }
  }

  /**
   * Waits a while for the workshop's shutting-down instances to be terminated: EC2 refuses to delete a security
   * group they still hold (DependencyViolation). Bounded by GROUP_DELETE_WAIT_MS and the caller's deadline; a
   * group still held after that is left to the sweeper.
   */
  private async waitTerminated(workshop: string): Promise<void> {
    let waited = 0;
    for (;;) {
      const going = await this.describeAll([
        { Name: `tag:${OWNER_TAG.key}`, Values: [OWNER_TAG.value] },
        { Name: `tag:${STAGE_TAG}`, Values: [this.stage] },
        { Name: `tag:${WORKSHOP_TAG}`, Values: [workshop] },
        { Name: "instance-state-name", Values: ["shutting-down"] },
      ]);
      const step = Math.min(GROUP_DELETE_POLL_MS, GROUP_DELETE_WAIT_MS - waited, timeLeft() - 10_000);
      if (going.length === 0 || step <= 0) return;
      await this.sleep(step);
      waited += step;
    }
  }

  /** Every instance matching these filters, all pages. */
  private async describeAll(Filters: Filter[]): Promise<Instance[]> {
    const out: Instance[] = [];
    let NextToken: string | undefined;
    do {
      const page = await this.ec2.send(
        new DescribeInstancesCommand(NextToken ? { Filters, NextToken } : { Filters }),
      );
      out.push(...(page.Reservations ?? []).flatMap((r) => r.Instances ?? []));
      NextToken = page.NextToken;
    } while (NextToken);
    return out;
  }

  /**
   * Terminates the expired instances in batches; when a batch fails (one instance a policy refuses fails the
   * whole call), each of its instances is tried alone so one refusal never spares the others.
   */
  private async terminateSwept(items: SweptInstance[]): Promise<void> {
    for (const batch of chunks(items, FILTER_CHUNK)) {
      try {
        await this.ec2.send(new TerminateInstancesCommand({ InstanceIds: batch.map((i) => i.providerId) }));
        continue;
      } catch (err) {
        if (batch.length === 1) {
          Object.assign(batch[0] as SweptInstance, {
            result: "error",
            detail: `TerminateInstances: ${errorMessage(err)}`,
          });
          continue;
        }
      }
      for (const item of batch) {
        try {
          await this.ec2.send(new TerminateInstancesCommand({ InstanceIds: [item.providerId] }));
        } catch (err) {
          Object.assign(item, { result: "error", detail: `TerminateInstances: ${errorMessage(err)}` });
        }
      }
    }
  }

  /**
   * Best effort: deletes labfleet's groups of workshops with no instance left (not even one shutting down),
   * except groups created within the last hour (a provision may be about to launch into them). Failures
   * are logged and retried by the next pass.
   */
  private async sweepOrphanGroups(present: Set<string>, now: Date): Promise<void> {
    try {
      for (const group of await this.groups.find()) {
        const workshop = tagValue(group.Tags, WORKSHOP_TAG) as string;
        if (present.has(workshop)) continue;
        const created = parseIsoTime(tagValue(group.Tags, CREATED_TAG));
        if (created && now.getTime() - created.getTime() < GROUP_SWEEP_GRACE_MS) continue;
        const id = group.GroupId as string;
        try {
          const outcome = await this.groups.delete(id);
          if (outcome === "deleted")
            log.info("deleted an orphaned labfleet security group", { workshop, group: id });
          else if (outcome === "in_use")
            log.info("an orphaned labfleet security group is still in use", { workshop, group: id });
        } catch (err) {
          log.warn("deleting an orphaned labfleet security group failed", {
            workshop,
            group: id,
            error: errorMessage(err),
          });
        }
      }
    } catch (err) {
      log.warn("listing labfleet security groups failed", { error: errorMessage(err) });
    }
  }
}
