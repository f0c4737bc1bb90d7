import { createHash } from "node:crypto";
import {
  DescribeImagesCommand,
  DescribeInstancesCommand,
  type EC2Client,
  type Image,
  type Instance,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  type Tag,
} from "@aws-sdk/client-ec2";
import {
  DescribeInstanceInformationCommand,
  type InstanceInformation,
  type SSMClient,
} from "@aws-sdk/client-ssm";
import { errorMessage } from "../runtime/errors.ts";
import type { Workshop } from "../workshop/schema.ts";
import {
  type AwsSpec,
  chunks,
  EXPIRY_TAG,
  errorName,
  FILTER_CHUNK,
  HOST_ID_TAG,
  OWNER_TAG,
  STAGE_TAG,
  WORKSHOP_TAG,
} from "./aws-common.ts";

/**
 * What an EC2 host is launched as, and the launch itself: the instance type, the image, the user data, the
 * idempotency token, and the steps from RunInstances to a host SSM can reach (findImage, launchInstance,
 * waitRunning, waitSsmOnline). The provider (aws.ts) decides which hosts to launch; this file says how.
 *
 * Instance types (validated in aws-validate.ts): give `instance_type` or `instance_tier`, not both. Burstable
 * families (t1, t2, t3, t3a, t4g: CPU credits run out in the middle of a lab install) and tiny sizes (nano, micro,
 * small, medium: at most 2 GiB or a single vCPU) are refused. The tiers are fixed-performance general-purpose
 * types, see INSTANCE_TIERS.
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
 * After running: provision waits until the SSM agent of every host is online (DescribeInstanceInformation), since
 * SSM is how hosts are reached. Before deploying to a host, up waits for its first boot (the provider's bootWait
 * runs CLOUD_INIT_WAIT on it).
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

/** The root volume's size when `volume_size_gib` is omitted. */
export const DEFAULT_VOLUME_SIZE_GIB = 50;
const NESTED_FAMILIES = new Set(["c8i", "m8i", "r8i", "c8i-flex", "m8i-flex", "r8i-flex"]);
const BURSTABLE_FAMILY = /^t\d/;
const TINY_SIZES = new Set(["nano", "micro", "small", "medium"]);
/** DescribeInstanceInformation's InstanceIds filter takes at most 50 ids. */
const SSM_FILTER_CHUNK = 50;
const SSM_MAX_POLL_MS = 30_000;

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

// ---- The launch ---------------------------------------------------------------------------------------

/** The image to launch: `ami` (checked to exist), or the newest of the default family for the architecture. */
export async function findImage(ec2: EC2Client, p: AwsSpec): Promise<Image> {
  if (p.ami !== undefined) {
    const out = await ec2.send(new DescribeImagesCommand({ ImageIds: [p.ami] }));
    const image = out.Images?.[0];
    if (!image) throw new Error(`the AMI ${p.ami} was not found in ${p.region}`);
    if (image.State && image.State !== "available") throw new Error(`the AMI ${p.ami} is ${image.State}`);
    return image;
  }
  const arch = architectureOf(resolveInstanceType(p) as string);
  const name = DEFAULT_IMAGE.name[arch];
  const out = await ec2.send(
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

/** One host to launch: which workshop and host, from which image, until when, in which groups. */
export interface Launch {
  /** The deployment stage (tagged, and part of the ClientToken). */
  stage: string;
  spec: Workshop;
  p: AwsSpec;
  hostId: string;
  image: Image;
  expiry: Date;
  securityGroupIds: string[];
  /** The run this launch is part of (see clientTokenFor). */
  attempt: string;
  /** The instance profile the host gets, if any. */
  instanceProfileArn: string | undefined;
}

/** RunInstances for one host, tagged and with the dead-man switch in its user data; returns the instance id. */
export async function launchInstance(ec2: EC2Client, launch: Launch): Promise<string> {
  const { stage, spec, p, hostId, image, expiry, securityGroupIds, attempt, instanceProfileArn } = launch;
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
    { Key: STAGE_TAG, Value: stage },
    { Key: WORKSHOP_TAG, Value: spec.name },
    { Key: HOST_ID_TAG, Value: hostId },
    { Key: EXPIRY_TAG, Value: expiry.toISOString() },
    { Key: "Name", Value: `labfleet-${stage}-${spec.name}-${hostId}` },
  ];
  const nested = p.nested_virtualization === true && NESTED_FAMILIES.has(familyOf(type).family);
  const input: RunInstancesCommandInput = {
    ImageId: image.ImageId,
    InstanceType: type as RunInstancesCommandInput["InstanceType"],
    SubnetId: p.subnet_id,
    MinCount: 1,
    MaxCount: 1,
    ClientToken: clientTokenFor({ stage, workshop: spec.name, hostId }, expiry, attempt),
    SecurityGroupIds: securityGroupIds,
    ...(instanceProfileArn ? { IamInstanceProfile: { Arn: instanceProfileArn } } : {}),
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
  const out = await ec2.send(new RunInstancesCommand(input));
  const id = out.Instances?.[0]?.InstanceId;
  if (!id) throw new Error("EC2 answered without an instance id");
  return id;
}

/** How long a wait lasts in total, how often it looks, and how it sleeps (a test's sleep needs no clock). */
export interface Wait {
  timeoutMs: number;
  /** Between two polls (waitSsmOnline: the first wait, which doubles up to 30 s). */
  pollIntervalMs: number;
  sleep: (ms: number) => Promise<void>;
}

/**
 * Polls DescribeInstances until every instance runs; the time waited is counted in sleeps, so a test's sleep
 * needs no clock. Returns the running instance, or why it is not running.
 */
export async function waitRunning(
  ec2: EC2Client,
  ids: string[],
  wait: Wait,
): Promise<Map<string, Instance | string>> {
  const outcome = new Map<string, Instance | string>();
  const pending = new Set(ids);
  let waited = 0;
  while (pending.size > 0) {
    for (const chunk of chunks([...pending], FILTER_CHUNK)) {
      let instances: Instance[] = [];
      try {
        const out = await ec2.send(new DescribeInstancesCommand({ InstanceIds: chunk }));
        instances = (out.Reservations ?? []).flatMap((r) => r.Instances ?? []);
      } catch (err) {
        // A new instance may not be visible yet (eventual consistency): keep waiting for it.
        if (errorName(err) !== "InvalidInstanceID.NotFound") {
          for (const id of chunk) {
            outcome.set(id, `DescribeInstances ${id}: ${errorMessage(err)}; provision again to keep waiting`);
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
    if (waited >= wait.timeoutMs) {
      for (const id of pending) {
        outcome.set(
          id,
          `${id} was still pending after ${Math.round(waited / 1000)} s; provision again to keep waiting`,
        );
      }
      break;
    }
    await wait.sleep(wait.pollIntervalMs);
    waited += wait.pollIntervalMs;
  }
  return outcome;
}

/**
 * Polls DescribeInstanceInformation until the SSM agent of every instance is Online, with backoff (from
 * `wait.pollIntervalMs`, doubling up to 30 s) and a deadline of `wait.timeoutMs` counted in sleeps, as
 * waitRunning does. Returns why each instance that never came online is unusable; the others are absent.
 */
export async function waitSsmOnline(ssm: SSMClient, ids: string[], wait: Wait): Promise<Map<string, string>> {
  const failed = new Map<string, string>();
  const pending = new Set(ids);
  const lastStatus = new Map<string, string>();
  let waited = 0;
  let delay = wait.pollIntervalMs;
  while (pending.size > 0) {
    for (const chunk of chunks([...pending], SSM_FILTER_CHUNK)) {
      const { infos, failure } = await pingStatuses(ssm, chunk);
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
    if (waited >= wait.timeoutMs) {
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
    const step = Math.min(delay, wait.timeoutMs - waited);
    await wait.sleep(step);
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
async function pingStatuses(
  ssm: SSMClient,
  ids: string[],
): Promise<{ infos: InstanceInformation[]; failure?: string }> {
  try {
    return { infos: await instanceInformation(ssm, ids) };
  } catch (err) {
    const name = errorName(err);
    if (name === "ThrottlingException") return { infos: [] };
    if (name === "InvalidInstanceId") {
      if (ids.length === 1) return { infos: [] };
      const infos: InstanceInformation[] = [];
      for (const id of ids) {
        const one = await pingStatuses(ssm, [id]);
        if (one.failure !== undefined) return one;
        infos.push(...one.infos);
      }
      return { infos };
    }
    return { infos: [], failure: errorMessage(err) };
  }
}

async function instanceInformation(ssm: SSMClient, ids: string[]): Promise<InstanceInformation[]> {
  const out: InstanceInformation[] = [];
  const Filters = [{ Key: "InstanceIds", Values: ids }];
  let NextToken: string | undefined;
  do {
    const page = await ssm.send(
      new DescribeInstanceInformationCommand(NextToken ? { Filters, NextToken } : { Filters }),
    );
    out.push(...(page.InstanceInformationList ?? []));
    NextToken = page.NextToken;
  } while (NextToken);
  return out;
}
