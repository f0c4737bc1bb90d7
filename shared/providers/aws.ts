import { createHash, randomUUID } from "node:crypto";
import {
  CreateTagsCommand,
  DescribeImagesCommand,
  DescribeInstancesCommand,
  type EC2Client,
  type Filter,
  type Image,
  type Instance,
  type InstanceStateName,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  type Tag,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import { DescribeInstanceInformationCommand, type InstanceInformation, SSMClient } from "@aws-sdk/client-ssm";
import { mapLimit } from "../runtime/concurrency.ts";
import { timeLeft } from "../runtime/deadline.ts";
import { type ErrorDetail, errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { Workshop } from "../workshop/schema.ts";
import {
  CREATED_TAG,
  chunks,
  EXPIRY_TAG,
  errorName,
  HOST_ID_TAG,
  OWNER_TAG,
  parseIsoTime,
  STAGE_TAG,
  tagValue,
  WORKSHOP_TAG,
} from "./aws-common.ts";
import { costText } from "./aws-pricing.ts";
import { checkVcpuQuota, type VcpuQuotaCheck, vcpuQuotaError, vcpuQuotaLine } from "./aws-quota.ts";
import {
  accessPorts,
  byoAccessMessage,
  describePorts,
  type IngressRule,
  ManagedSecurityGroups,
  operatorCidrProblem,
  operatorRules,
  portList,
  WORLD_V4,
  WORLD_V6,
} from "./aws-security-groups.ts";
import {
  type DeprovisionResult,
  hostIdsOf,
  type PlanItem,
  type Provider,
  type ProvisionedHost,
  type ProvisionOptions,
  type SweptInstance,
} from "./types.ts";

export { EXPIRY_TAG, HOST_ID_TAG, OWNER_TAG, STAGE_TAG, WORKSHOP_TAG } from "./aws-common.ts";

/**
 * EC2 hosts, reached through SSM (the host's address is its instance id).
 *
 * Ownership: everything this provider creates carries `ManagedBy=labfleet`, `labfleet-workshop=<name>` and
 * `labfleet-host-id=<id>` (on the instance and its volumes, applied atomically by RunInstances), plus
 * `labfleet-expiry=<ISO time>` and `Name`. Reuse and teardown look instances up by those three tags only, and
 * teardown re-checks all three on every instance before terminating it: nothing untagged or foreign is touched.
 *
 * Instance types (validate): give `instance_type` or `instance_tier`, not both. Burstable families (t1, t2, t3,
 * t3a, t4g: CPU credits run out in the middle of a lab install) and tiny sizes (nano, micro, small, medium: at most
 * 2 GiB or a single vCPU) are refused. The tiers are fixed-performance general-purpose types, see INSTANCE_TIERS.
 *
 * Nested virtualization (KVM inside the host) needs either a bare-metal type (`*.metal*`, hardware virtualization
 * is native) or an 8th-generation Intel family that EC2 can nest on (c8i, m8i, r8i and their -flex variants), for
 * which RunInstances sets `CpuOptions.NestedVirtualization=enabled`. With a tier, nested virtualization picks the
 * m8i type of that size instead of m7i.
 *
 * Image: `ami` when given, else the newest available image of DEFAULT_IMAGE (Canonical's Ubuntu 24.04 LTS, the
 * amd64 or arm64 build to match the type's architecture), found with DescribeImages by owner and name filter.
 *
 * Dead-man switch (see powerOffUserData): `InstanceInitiatedShutdownBehavior=terminate` plus user data that powers
 * the instance off at launch + ttl_hours, so an instance terminates itself at its expiry even when the control
 * plane is down.
 *
 * Security groups (see aws-security-groups.ts): with `security_group_ids`, the hosts get those groups and
 * labfleet changes nothing in them (setOpenAccess says what to open by hand). Without, labfleet manages one
 * group per workshop in the subnet's VPC that admits `operator_cidrs` only, on 22 and `lab.ui_ports`;
 * setOpenAccess opens (and closes) the UI ports, never 22, to the world. Deprovision deletes the group once no
 * instance of the workshop is left; a group still held by instances that are shutting down is left to the
 * sweeper.
 *
 * Before creating: the running On-Demand vCPU quota check (see aws-quota.ts). After running: provision waits
 * until the SSM agent of every host is online (DescribeInstanceInformation), since SSM is how hosts are reached.
 *
 * Expiry: `labfleet-expiry` on every instance is the workshop's end. extendExpiry moves it; sweepExpired
 * (the rate(5 minutes) sweeper) terminates any labfleet instance past it, in any workshop, and deletes the
 * security groups of workshops that have no instance left.
 */

/** `instance_tier` -> instance type: fixed-performance (non-burstable) general purpose, 4 GiB per vCPU. */
export const INSTANCE_TIERS = {
  small: "m7i.large", // 2 vCPU, 8 GiB
  medium: "m7i.xlarge", // 4 vCPU, 16 GiB
  large: "m7i.2xlarge", // 8 vCPU, 32 GiB
  xlarge: "m7i.4xlarge", // 16 vCPU, 64 GiB
} as const satisfies Record<string, string>;
export type InstanceTier = keyof typeof INSTANCE_TIERS;

/** The same tiers when nested virtualization is wanted: m8i supports it (CpuOptions.NestedVirtualization). */
export const NESTED_INSTANCE_TIERS = {
  small: "m8i.large",
  medium: "m8i.xlarge",
  large: "m8i.2xlarge",
  xlarge: "m8i.4xlarge",
} as const satisfies Record<InstanceTier, string>;

/** The default image family when `ami` is omitted: the newest of these, by CreationDate. */
export const DEFAULT_IMAGE = {
  owner: "099720109477", // Canonical
  name: {
    x86_64: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*",
    arm64: "ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-*",
  },
} as const;

export const DEFAULT_VOLUME_SIZE_GIB = 50;
const NESTED_FAMILIES = new Set(["c8i", "m8i", "r8i", "c8i-flex", "m8i-flex", "r8i-flex"]);
const BURSTABLE_FAMILY = /^t\d/;
const TINY_SIZES = new Set(["nano", "micro", "small", "medium"]);
const INSTANCE_TYPE = /^[a-z][a-z0-9-]*\.[a-z0-9-]+$/;
const REGION = /^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$/;
const SUBNET = /^subnet-[0-9a-f]{8,17}$/;
const SECURITY_GROUP = /^sg-[0-9a-f]{8,17}$/;
const AMI = /^ami-[0-9a-f]{8,17}$/;
const LIVE_STATES: InstanceStateName[] = ["pending", "running"];
/** Instances that still hold the workshop (shutting-down ones are on their way out). */
const PRESENT_STATES: InstanceStateName[] = ["pending", "running", "stopping", "stopped"];
const NOT_TERMINATED: InstanceStateName[] = [...PRESENT_STATES, "shutting-down"];
const FILTER_CHUNK = 100;
const CONCURRENCY = 8;
/** DescribeInstanceInformation's InstanceIds filter takes at most 50 ids. */
const SSM_FILTER_CHUNK = 50;
const SSM_MAX_POLL_MS = 30_000;
/** How long a teardown waits for its instances to be terminated before deleting their group, and how often it looks. */
const GROUP_DELETE_WAIT_MS = 90_000;
const GROUP_DELETE_POLL_MS = 5_000;
/** The sweeper leaves a managed security group alone this long after its creation (a provision in flight). */
const GROUP_SWEEP_GRACE_MS = 60 * 60_000;

type AwsSpec = Extract<Workshop["provider"], { type: "aws" }>;

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

/** The instance type a spec asks for, after the tier map; undefined when neither or both are given. */
export function resolveInstanceType(p: {
  instance_type?: string | undefined;
  instance_tier?: string | undefined;
  nested_virtualization?: boolean | undefined;
}): string | undefined {
  if (p.instance_type !== undefined && p.instance_tier !== undefined) return undefined;
  if (p.instance_type !== undefined) return p.instance_type;
  if (p.instance_tier !== undefined && Object.hasOwn(INSTANCE_TIERS, p.instance_tier)) {
    const tier = p.instance_tier as InstanceTier;
    return p.nested_virtualization ? NESTED_INSTANCE_TIERS[tier] : INSTANCE_TIERS[tier];
  }
  return undefined;
}

function familyOf(type: string): { family: string; size: string } {
  const dot = type.indexOf(".");
  return { family: type.slice(0, dot), size: type.slice(dot + 1) };
}

/** Why a type is unfit for a lab host, or undefined when it is fine. */
export function refusedInstanceType(type: string): string | undefined {
  const { family, size } = familyOf(type);
  if (BURSTABLE_FAMILY.test(family)) {
    return `${type} is burstable: its CPU credits run out during a long lab install and the host crawls; use a fixed-performance type such as m7i.large (or instance_tier: small)`;
  }
  if (TINY_SIZES.has(size)) {
    return `${type} is too small for a lab host (${size}: a single vCPU or at most 2 GiB); use .large or bigger (or instance_tier: small)`;
  }
  return undefined;
}

/** True when the type can run KVM guests: bare metal, or an EC2 family with nested virtualization. */
export function supportsNestedVirtualization(type: string): boolean {
  const { family, size } = familyOf(type);
  return size.startsWith("metal") || NESTED_FAMILIES.has(family);
}

/** Graviton families (m7g, c7gn, r8g, x2gd, im4gn, a1...) need an arm64 image. */
export function architectureOf(type: string): "x86_64" | "arm64" {
  const { family } = familyOf(type);
  return /^[a-z]+\d+g[a-z]*$/.test(family) || family === "a1" ? "arm64" : "x86_64";
}

/**
 * The idempotency token of one launch attempt: a retried RunInstances (the SDK's retries, or Step Functions
 * retrying the Provision function within the run) never makes a second instance. EC2 keeps a token bound to its
 * request's parameters after the instance is terminated, and answers IdempotentParameterMismatch to the same
 * token with other parameters, so the token also names the attempt (the run): the next run gets a token of its
 * own and can replace a host whose instance is gone. A new provision call finds an earlier launch by its tags
 * (pending instances included), not by the token.
 */
export function clientTokenFor(
  owner: { stage: string; workshop: string; hostId: string },
  expiry: Date,
  attempt: string,
): string {
  const digest = createHash("sha256")
    .update([owner.stage, owner.workshop, owner.hostId, expiry.toISOString(), attempt].join("\n"))
    .digest("hex");
  return `labfleet-${digest.slice(0, 48)}`;
}

/**
 * The dead-man switch, run once as root by cloud-init at first boot:
 * 1. `shutdown -P +<minutes>`: the power-off at the expiry, in whole minutes from the host's own clock when the
 *    user data runs (never later than the expiry; at least one minute).
 * 2. a systemd timer, every minute from boot, that powers off once the deadline (UTC epoch seconds in
 *    /etc/labfleet/deadline, the exact expiry) has passed: it covers a reboot, which cancels step 1, and the
 *    rest of the minute step 1 rounds away. A missing or garbled deadline file falls back to the deadline baked in here.
 * With InstanceInitiatedShutdownBehavior=terminate, the power-off terminates the instance. `labfleet extend`
 * rewrites the deadline file and re-runs `shutdown -P`. The script depends on the expiry only (not on when it
 * was made), so a retried launch asks EC2 for exactly the same instance. LABFLEET_ROOT (unset on a real host)
 * lets a test run the script in a folder.
 */
export function powerOffUserData(expiry: Date, opts: { awsCli?: boolean } = {}): string {
  const deadline = Math.floor(expiry.getTime() / 1000);
  return `#!/bin/bash
# labfleet dead-man switch: this host powers itself off (and so terminates) at ${expiry.toISOString()}.
set -u
root="\${LABFLEET_ROOT:-}"
mkdir -p "$root/etc/labfleet" "$root/usr/local/sbin" "$root/etc/systemd/system"
echo ${deadline} > "$root/etc/labfleet/deadline"
minutes=$(( (${deadline} - $(date +%s)) / 60 ))
[ "$minutes" -ge 1 ] || minutes=1
shutdown -P +"$minutes" "labfleet: the workshop's time is up" || echo "labfleet: shutdown -P failed" >&2
cat > "$root/usr/local/sbin/labfleet-deadman" <<'EOF'
#!/bin/sh
# labfleet dead-man switch: power off once the deadline (UTC epoch seconds) has passed.
d=$(cat "\${LABFLEET_ROOT:-}/etc/labfleet/deadline" 2>/dev/null)
case "$d" in ''|*[!0-9]*) d=${deadline} ;; esac
if [ "$(date +%s)" -ge "$d" ]; then systemctl poweroff || poweroff -f; fi
EOF
chmod 0755 "$root/usr/local/sbin/labfleet-deadman"
cat > "$root/etc/systemd/system/labfleet-deadman.service" <<'EOF'
[Unit]
Description=labfleet dead-man switch: power off after the workshop's expiry
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/labfleet-deadman
EOF
cat > "$root/etc/systemd/system/labfleet-deadman.timer" <<'EOF'
[Unit]
Description=labfleet dead-man switch: check the workshop's expiry every minute
[Timer]
OnBootSec=1min
OnUnitActiveSec=1min
AccuracySec=10s
[Install]
WantedBy=timers.target
EOF
systemctl daemon-reload
systemctl enable --now labfleet-deadman.timer
${opts.awsCli ? AWS_CLI_INSTALL : ""}`;
}

/**
 * Hosts fetch the workshop's operator secrets from Parameter Store with the AWS CLI (never through the SSM
 * command, whose parameters SSM keeps for 30 days). The default image has none: installed after the dead-man
 * switch is armed, so a slow or failed install never delays it.
 */
const AWS_CLI_INSTALL = `command -v aws >/dev/null 2>&1 || snap install aws-cli --classic >/dev/null 2>&1 || echo "labfleet: could not install the AWS CLI; operator secrets need it" >&2
`;

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

/**
 * Waits for cloud-init (which runs the user data: the dead-man switch, the AWS CLI the secrets fetch needs) to
 * finish. `cloud-init status --wait` exits 0 when done, 2 when done with recoverable errors (deprecated
 * configuration, say: the user data ran) and 1 when it failed. An image without cloud-init has nothing to wait
 * for.
 */
export const CLOUD_INIT_WAIT = `command -v cloud-init >/dev/null 2>&1 || exit 0
cloud-init status --wait >/dev/null 2>&1
rc=$?
if [ "$rc" -eq 0 ] || [ "$rc" -eq 2 ]; then exit 0; fi
echo "cloud-init reports that the first boot failed (exit $rc): see /var/log/cloud-init-output.log on the host" >&2
exit 1
`;

export class AwsProvider implements Provider {
  readonly name = "aws" as const;
  readonly transport = "ssm" as const;
  /** Within DeployHost's 15 minutes, with room for the deploy itself. */
  readonly bootWait = { command: CLOUD_INIT_WAIT, timeoutMs: 10 * 60_000 };
  /** Terminating an instance ends its labs: a teardown does not stop them first. */
  readonly deprovisionEndsLabs = true;

  private readonly ec2: EC2Client;
  private readonly ssm: SSMClient;
  private readonly serviceQuotas: ServiceQuotasClient;
  private readonly groups: ManagedSecurityGroups;
  private readonly clock: { now(): Date };
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly waitTimeoutMs: number;
  private readonly pollIntervalMs: number;
  private readonly ssmWaitTimeoutMs: number;
  private readonly ssmPollIntervalMs: number;
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
    this.waitTimeoutMs = opts.waitTimeoutMs ?? 10 * 60_000;
    this.pollIntervalMs = opts.pollIntervalMs ?? 5_000;
    this.ssmWaitTimeoutMs = opts.ssmWaitTimeoutMs ?? 10 * 60_000;
    this.ssmPollIntervalMs = opts.ssmPollIntervalMs ?? 5_000;
    this.instanceProfileArn = opts.instanceProfileArn;
  }

  validate(spec: Workshop): ErrorDetail[] {
    const p = spec.provider;
    if (p.type !== "aws") {
      return [{ path: "provider.type", message: `expected aws for the EC2 provider, got ${p.type}` }];
    }
    const errors: ErrorDetail[] = [];
    const add = (path: string, message: string) => errors.push({ path: `provider.${path}`, message });

    if (p.region === undefined) add("region", "expected an AWS region (e.g. eu-west-1): it is required");
    else if (!REGION.test(p.region))
      add("region", `expected an AWS region such as eu-west-1, got "${p.region}"`);

    if (p.subnet_id === undefined) {
      add("subnet_id", "expected a subnet id (subnet-...): it is required, the hosts are launched into it");
    } else if (!SUBNET.test(p.subnet_id)) {
      add("subnet_id", `expected a subnet id such as subnet-0123456789abcdef0, got "${p.subnet_id}"`);
    }

    const tiers = Object.keys(INSTANCE_TIERS).join(", ");
    if (p.instance_type !== undefined && p.instance_tier !== undefined) {
      add("instance_tier", "expected instance_type or instance_tier, not both");
    } else if (p.instance_type === undefined && p.instance_tier === undefined) {
      add("instance_type", `expected instance_type (e.g. m7i.large) or instance_tier (${tiers})`);
    } else if (p.instance_tier !== undefined && !Object.hasOwn(INSTANCE_TIERS, p.instance_tier)) {
      add("instance_tier", `expected an instance tier: ${tiers}; got "${p.instance_tier}"`);
    } else if (p.instance_type !== undefined && !INSTANCE_TYPE.test(p.instance_type)) {
      add("instance_type", `expected an EC2 instance type such as m7i.large, got "${p.instance_type}"`);
    }
    const type = resolveInstanceType(p);
    const typePath = p.instance_type !== undefined ? "instance_type" : "instance_tier";
    if (type !== undefined && INSTANCE_TYPE.test(type)) {
      const refused = refusedInstanceType(type);
      if (refused) add(typePath, `refused for lab hosts: ${refused}`);
      if (p.nested_virtualization === true && !supportsNestedVirtualization(type)) {
        add(
          "nested_virtualization",
          `${type} cannot run nested virtualization: use a bare-metal type (*.metal) or a c8i, m8i or r8i type (or an instance_tier)`,
        );
      }
    }

    if (p.ami !== undefined && !AMI.test(p.ami)) {
      add("ami", `expected an AMI id such as ami-0123456789abcdef0, got "${p.ami}"`);
    }
    if (p.security_group_ids !== undefined && p.security_group_ids.length === 0) {
      add(
        "security_group_ids",
        "expected at least one security group id, or leave security_group_ids out to let labfleet manage a group",
      );
    }
    (p.security_group_ids ?? []).forEach((sg, i) => {
      if (!SECURITY_GROUP.test(sg)) {
        add(
          `security_group_ids[${i}]`,
          `expected a security group id such as sg-0123456789abcdef0, got "${sg}"`,
        );
      }
    });
    if (p.security_group_ids?.length) {
      if (p.operator_cidrs !== undefined) {
        add(
          "operator_cidrs",
          "operator_cidrs applies only to the group labfleet manages: with security_group_ids, leave it out and allow the operator's addresses in your own groups",
        );
      }
    } else if (p.operator_cidrs === undefined || p.operator_cidrs.length === 0) {
      add(
        "operator_cidrs",
        "expected the operator's addresses as CIDRs (e.g. [203.0.113.7/32]): labfleet's security group admits only them on SSH and the lab UI ports; it is required without security_group_ids",
      );
    } else {
      p.operator_cidrs.forEach((cidr, i) => {
        const problem = operatorCidrProblem(cidr);
        if (problem) add(`operator_cidrs[${i}]`, problem);
      });
    }
    if (p.student_access !== undefined && p.student_access !== "operator" && p.student_access !== "open") {
      add("student_access", `expected operator or open, got "${String(p.student_access)}"`);
    }
    const volume = p.volume_size_gib ?? DEFAULT_VOLUME_SIZE_GIB;
    if (!Number.isInteger(volume) || volume < 8 || volume > 16384) {
      add("volume_size_gib", `expected a volume size in GiB: a whole number from 8 to 16384, got ${volume}`);
    }
    if (!Number.isFinite(p.ttl_hours) || p.ttl_hours <= 0 || p.ttl_hours > 168) {
      add("ttl_hours", `expected hours (a number greater than 0, at most 168), got ${p.ttl_hours}`);
    }
    if (!Number.isInteger(p.count) || p.count < 1 || p.count > 64) {
      add("count", `expected a host count: a whole number from 1 to 64, got ${p.count}`);
    }
    return errors;
  }

  async plan(spec: Workshop): Promise<PlanItem[]> {
    const p = await this.ready(spec, true);
    const type = resolveInstanceType(p) as string;
    const expiry = this.expiryOf(p);
    const hostIds = hostIdsOf(spec);
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
    const known = new Set(hostIdsOf(spec));
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
          image = await this.image(p);
        } catch (err) {
          launchError = errorMessage(err);
        }
      }
      await mapLimit(toCreate, CONCURRENCY, async (hostId) => {
        if (!image || !groupIds) {
          results.set(hostId, { hostId, address: "", labels, error: launchError ?? "no image" });
          return;
        }
        try {
          instanceOf.set(hostId, await this.launch(spec, p, hostId, image, expiry, groupIds, attempt));
        } catch (err) {
          results.set(hostId, { hostId, address: "", labels, error: `RunInstances: ${errorMessage(err)}` });
        }
      });
    }

    const waited = await this.waitRunning([...instanceOf.values()].filter((id) => !running.has(id)));
    const up = [...instanceOf.values()].filter((id) => {
      const outcome = running.get(id) ?? waited.get(id);
      return outcome !== undefined && typeof outcome !== "string";
    });
    const offline = await this.waitSsmOnline(up);
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
    const results = await mapLimit(wanted, CONCURRENCY, async (hostId): Promise<DeprovisionResult> => {
      const mine = owned.get(hostId) ?? [];
      const refused = (foreign.get(hostId) ?? []).map(
        ({ instance, problem }) => `refused to terminate ${instance.InstanceId}: ${problem}`,
      );
      const live = mine.filter((i) => i.State?.Name !== "shutting-down").map((i) => i.InstanceId as string);
      const going = mine.filter((i) => i.State?.Name === "shutting-down").map((i) => i.InstanceId as string);
      const notes: string[] = [];
      let failed = refused.length > 0;
      if (live.length > 0) {
        // Terminate only ids that passed the three-tag check above, never a filter's raw answer.
        try {
          await this.ec2.send(new TerminateInstancesCommand({ InstanceIds: live }));
          notes.push(`terminated ${live.join(", ")}`);
        } catch (err) {
          failed = true;
          notes.push(`TerminateInstances ${live.join(", ")}: ${errorMessage(err)}`);
        }
      }
      if (going.length > 0) notes.push(`already shutting down: ${going.join(", ")}`);
      notes.push(...refused);
      if (failed) return { hostId, result: "error", detail: notes.join("; ") };
      if (live.length > 0) return { hostId, result: "destroyed", detail: notes.join("; ") };
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

  /**
   * Polls DescribeInstanceInformation until the SSM agent of every instance is Online, with backoff (from
   * ssmPollIntervalMs, doubling up to 30 s) and a deadline of ssmWaitTimeoutMs counted in sleeps, as
   * waitRunning does. Returns why each instance that never came online is unusable; the others are absent.
   */
  private async waitSsmOnline(ids: string[]): Promise<Map<string, string>> {
    const failed = new Map<string, string>();
    const pending = new Set(ids);
    const lastStatus = new Map<string, string>();
    let waited = 0;
    let delay = this.ssmPollIntervalMs;
    while (pending.size > 0) {
      for (const chunk of chunks([...pending], SSM_FILTER_CHUNK)) {
        const { infos, failure } = await this.pingStatuses(chunk);
        if (failure !== undefined) {
          for (const id of chunk) {
            failed.set(id, `DescribeInstanceInformation ${id}: ${failure}; provision again to keep waiting`);
            pending.delete(id);
          }
        }
        for (const info of infos) {
          const id = info.InstanceId;
          if (!id || !pending.has(id)) continue;
          if (info.PingStatus) lastStatus.set(id, info.PingStatus);
          if (info.PingStatus === "Online") pending.delete(id);
        }
      }
      if (pending.size === 0) break;
      if (waited >= this.ssmWaitTimeoutMs) {
        for (const id of pending) {
          const status = lastStatus.get(id);
          failed.set(
            id,
            `the SSM agent of ${id} was not online after ${Math.round(waited / 1000)} s (${status ? `ping status ${status}` : "not registered with Systems Manager"}): ` +
              "check that the instance profile allows SSM (AmazonSSMManagedInstanceCore) and that the subnet reaches the SSM endpoints " +
              "(a public IP and an internet gateway, a NAT gateway, or VPC endpoints); provision again to keep waiting",
          );
        }
        break;
      }
      const step = Math.min(delay, this.ssmWaitTimeoutMs - waited);
      await this.sleep(step);
      waited += step;
      delay = Math.min(delay * 2, SSM_MAX_POLL_MS);
    }
    return failed;
  }

  /**
   * The agents' statuses; an instance SSM does not know yet is simply absent. Throttling is waited out.
   * SSM answers InvalidInstanceId for a whole request when one instance is not registered yet: the ids are then
   * asked one by one, so one late agent never hides the others. `failure` when SSM refuses the call (access
   * denied...), which waiting will not fix.
   */
  private async pingStatuses(ids: string[]): Promise<{ infos: InstanceInformation[]; failure?: string }> {
    try {
      return { infos: await this.instanceInformation(ids) };
    } catch (err) {
      const name = errorName(err);
      if (name === "ThrottlingException") return { infos: [] };
      if (name === "InvalidInstanceId") {
        if (ids.length === 1) return { infos: [] };
        const infos: InstanceInformation[] = [];
        for (const id of ids) {
          const one = await this.pingStatuses([id]);
          if (one.failure !== undefined) return one;
          infos.push(...one.infos);
        }
        return { infos };
      }
      return { infos: [], failure: errorMessage(err) };
    }
  }

  private async instanceInformation(ids: string[]): Promise<InstanceInformation[]> {
    const out: InstanceInformation[] = [];
    const Filters = [{ Key: "InstanceIds", Values: ids }];
    let NextToken: string | undefined;
    do {
      const page = await this.ssm.send(
        new DescribeInstanceInformationCommand(NextToken ? { Filters, NextToken } : { Filters }),
      );
      out.push(...(page.InstanceInformationList ?? []));
      NextToken = page.NextToken;
    } while (NextToken);
    return out;
  }

  /** The image to launch: `ami` (checked to exist), or the newest of the default family for the architecture. */
  private async image(p: AwsSpec): Promise<Image> {
    if (p.ami !== undefined) {
      const out = await this.ec2.send(new DescribeImagesCommand({ ImageIds: [p.ami] }));
      const image = out.Images?.[0];
      if (!image) throw new Error(`the AMI ${p.ami} was not found in ${p.region}`);
      if (image.State && image.State !== "available") throw new Error(`the AMI ${p.ami} is ${image.State}`);
      return image;
    }
    const arch = architectureOf(resolveInstanceType(p) as string);
    const name = DEFAULT_IMAGE.name[arch];
    const out = await this.ec2.send(
      new DescribeImagesCommand({
        Owners: [DEFAULT_IMAGE.owner],
        Filters: [
          { Name: "name", Values: [name] },
          { Name: "state", Values: ["available"] },
          { Name: "architecture", Values: [arch] },
        ],
      }),
    );
    const newest = [...(out.Images ?? [])]
      .filter((i) => i.ImageId)
      .sort((a, b) => (b.CreationDate ?? "").localeCompare(a.CreationDate ?? ""))[0];
    if (!newest) throw new Error(`no image named ${name} owned by ${DEFAULT_IMAGE.owner} in ${p.region}`);
    return newest;
  }

  private async launch(
    spec: Workshop,
    p: AwsSpec,
    hostId: string,
    image: Image,
    expiry: Date,
    securityGroupIds: string[],
    attempt: string,
  ): Promise<string> {
    const type = resolveInstanceType(p) as string;
    const volumeSize = p.volume_size_gib ?? DEFAULT_VOLUME_SIZE_GIB;
    const rootDevice = image.RootDeviceName ?? "/dev/sda1";
    const imageRoot = image.BlockDeviceMappings?.find((m) => m.DeviceName === rootDevice)?.Ebs?.VolumeSize;
    if (imageRoot !== undefined && imageRoot > volumeSize) {
      throw new Error(
        `the image ${image.ImageId} has a ${imageRoot} GiB root volume; provider.volume_size_gib must be at least ${imageRoot}`,
      );
    }
    const tags: Tag[] = [
      { Key: OWNER_TAG.key, Value: OWNER_TAG.value },
      { Key: STAGE_TAG, Value: this.stage },
      { Key: WORKSHOP_TAG, Value: spec.name },
      { Key: HOST_ID_TAG, Value: hostId },
      { Key: EXPIRY_TAG, Value: expiry.toISOString() },
      { Key: "Name", Value: `labfleet-${this.stage}-${spec.name}-${hostId}` },
    ];
    const nested = p.nested_virtualization === true && NESTED_FAMILIES.has(familyOf(type).family);
    const input: RunInstancesCommandInput = {
      ImageId: image.ImageId,
      InstanceType: type as RunInstancesCommandInput["InstanceType"],
      SubnetId: p.subnet_id,
      MinCount: 1,
      MaxCount: 1,
      ClientToken: clientTokenFor({ stage: this.stage, workshop: spec.name, hostId }, expiry, attempt),
      SecurityGroupIds: securityGroupIds,
      ...(this.instanceProfileArn ? { IamInstanceProfile: { Arn: this.instanceProfileArn } } : {}),
      ...(nested ? { CpuOptions: { NestedVirtualization: "enabled" as const } } : {}),
      MetadataOptions: { HttpTokens: "required", HttpEndpoint: "enabled" },
      InstanceInitiatedShutdownBehavior: "terminate",
      BlockDeviceMappings: [
        {
          DeviceName: rootDevice,
          Ebs: { VolumeSize: volumeSize, VolumeType: "gp3", Encrypted: true, DeleteOnTermination: true },
        },
      ],
      UserData: Buffer.from(
        // The power-off counts from now to the expiry: a host made after an extend ends with the others.
        powerOffUserData(expiry, {
          awsCli: spec.lab.operator_secrets.length > 0,
        }),
        "utf8",
      ).toString("base64"),
      TagSpecifications: [
        { ResourceType: "instance", Tags: tags },
        { ResourceType: "volume", Tags: tags },
      ],
    };
    const out = await this.ec2.send(new RunInstancesCommand(input));
    const id = out.Instances?.[0]?.InstanceId;
    if (!id) throw new Error("EC2 answered without an instance id");
    return id;
  }

  /**
   * Polls DescribeInstances until every instance runs; the time waited is counted in sleeps, so a test's sleep
   * needs no clock. Returns the running instance, or why it is not running.
   */
  private async waitRunning(ids: string[]): Promise<Map<string, Instance | string>> {
    const outcome = new Map<string, Instance | string>();
    const pending = new Set(ids);
    let waited = 0;
    while (pending.size > 0) {
      for (const chunk of chunks([...pending], FILTER_CHUNK)) {
        let instances: Instance[] = [];
        try {
          const out = await this.ec2.send(new DescribeInstancesCommand({ InstanceIds: chunk }));
          instances = (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
        } catch (err) {
          // A new instance may not be visible yet (eventual consistency): keep waiting for it.
          if (errorName(err) !== "InvalidInstanceID.NotFound") {
            for (const id of chunk) {
              outcome.set(
                id,
                `DescribeInstances ${id}: ${errorMessage(err)}; provision again to keep waiting`,
              );
              pending.delete(id);
            }
          }
        }
        for (const instance of instances) {
          const id = instance.InstanceId;
          if (!id || !pending.has(id)) continue;
          const state = instance.State?.Name;
          if (state === "running") {
            outcome.set(id, instance);
            pending.delete(id);
          } else if (state !== "pending") {
            const reason = instance.StateReason?.Message ?? "no reason given";
            outcome.set(id, `${id} is ${state} instead of running: ${reason}`);
            pending.delete(id);
          }
        }
      }
      if (pending.size === 0) break;
      if (waited >= this.waitTimeoutMs) {
        for (const id of pending) {
          outcome.set(
            id,
            `${id} was still pending after ${Math.round(waited / 1000)} s; provision again to keep waiting`,
          );
        }
        break;
      }
      await this.sleep(this.pollIntervalMs);
      waited += this.pollIntervalMs;
    }
    return outcome;
  }
}
