import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  type FSWatcher,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  watch,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type {
  AuthorizeSecurityGroupIngressCommandInput,
  CreateSecurityGroupCommandInput,
  CreateTagsCommandInput,
  DeleteSecurityGroupCommandInput,
  DescribeImagesCommandInput,
  DescribeInstancesCommandInput,
  DescribeInstanceTypesCommandInput,
  DescribeSecurityGroupsCommandInput,
  DescribeSubnetsCommandInput,
  DescribeVolumesCommandInput,
  Filter,
  Image,
  Instance,
  InstanceState,
  InstanceStateName,
  IpPermission,
  Reservation,
  RevokeSecurityGroupIngressCommandInput,
  RunInstancesCommandInput,
  SecurityGroup,
  Subnet,
  Tag,
  TagSpecification,
  TerminateInstancesCommandInput,
  Volume,
} from "@aws-sdk/client-ec2";
import {
  type AuthRequest,
  AwsError,
  arn,
  type Call,
  credentialsFor,
  FAKE_ACCOUNT_ID,
  FAKE_REGION,
  type FakeCredentials,
  type Operations,
} from "./core.ts";

/**
 * EC2 in the AWS double. Instances are folders: RunInstances makes one per instance under `dir/instances/<id>/`
 * (the instance's filesystem root: its `/root` is `<id>/root`, `/etc` is `<id>/etc`), and what runs on an
 * instance (its user data, the SSM agent's commands, test helpers' shells) runs for real, as root (this user), with
 * `LABFLEET_ROOT` pointing at the folder (the variable labfleet's host scripts honour for exactly this),
 * `LABFLEET_FAKE_INSTANCE=<id>` in its environment (so ending the instance, or `close()`, kills exactly its
 * processes), and a PATH whose `shutdown`, `poweroff`, `halt`, `systemctl`, `snap` and `cloud-init` are the
 * fakes in instance-bin/.
 *
 * What AWS documents, and the double keeps:
 * - An instance starts `pending`, is `running` `bootMs` later; its SSM agent registers `agentMs` after that (only
 *   with an instance profile: the agent needs the role's credentials); then cloud-init's final stage runs the user
 *   data (a `#!` script, run once as root) in the background, so it is not finished when RunInstances returns nor
 *   when the agent is online. `cloud-init status --wait` waits for it (`status: done`, exit 0, or `status: error`,
 *   exit 1). Its `snap install aws-cli --classic` installs the instance's `aws` only `awsCliInstallMs` later.
 * - Each instance makes its own SSH host keys at its first boot, as cloud-init does: `/etc/ssh/ssh_host_ed25519_key`
 *   and `ssh_host_ecdsa_key` (with ssh-keygen), readable by what runs on it (SSM commands) and by `hostKeyLines()`.
 * - RunInstances' ClientToken ("Ensuring idempotency in Amazon EC2 API requests"): a retry with the same token and
 *   the same parameters returns the same reservation (with its current state, terminated too: the token stays
 *   bound); the same token with any other parameter different fails with `IdempotentParameterMismatch`. The
 *   token is bound per Availability Zone when the request names one (a subnet or a placement), per Region when
 *   not (zonal and regional idempotency).
 * - A power-off from inside (`shutdown -P now`, `shutdown -h now`, `poweroff`, `systemctl poweroff`, `halt -p`)
 *   stops the instance (`stopping`, `stopped`), or terminates it (`shutting-down`, `terminated`) when it was
 *   launched with InstanceInitiatedShutdownBehavior=terminate ("Change the instance initiated shutdown
 *   behavior"); either way its processes are killed. Scheduled power-offs and cancels are only recorded
 *   (`powerLog`). Terminated instances stay visible to DescribeInstances (AWS keeps them about an hour).
 * - Every operation authorizes what it touches with the resource ARNs and condition keys AWS puts in the request
 *   ("Actions, resources, and condition keys for Amazon EC2"): see each operation. Resource creation with tags is
 *   also authorized as `ec2:CreateTags` with `ec2:CreateAction` ("Grant permission to tag resources during
 *   creation"), and an instance profile's role as `iam:PassRole` with `iam:PassedToService=ec2.amazonaws.com`.
 *
 * Not modelled: default security groups and default VPCs (a launch without SecurityGroupIds has no group),
 * launch templates, key pairs, Spot, StartInstances, reboots, the timing of scheduled shutdowns.
 */

export const FAKE_VPC = "vpc-0123456789abcdef0";
export const FAKE_SUBNET = "subnet-0123456789abcdef0";
export const FAKE_AZ = `${FAKE_REGION}a`;
export const CANONICAL = "099720109477";

function image(id: string, arch: string, architecture: "x86_64" | "arm64", created: string): Image {
  const date = created.slice(0, 10).replace(/-/g, "");
  return {
    ImageId: id,
    OwnerId: CANONICAL,
    Name: `ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-${arch}-server-${date}`,
    Architecture: architecture,
    State: "available",
    Public: true,
    ImageType: "machine",
    CreationDate: created,
    RootDeviceName: "/dev/sda1",
    RootDeviceType: "ebs",
    VirtualizationType: "hvm",
    Hypervisor: "xen",
    EnaSupport: true,
    BlockDeviceMappings: [
      { DeviceName: "/dev/sda1", Ebs: { VolumeSize: 8, VolumeType: "gp3", DeleteOnTermination: true } },
    ],
  };
}

/** The images DescribeImages knows: two Ubuntu 24.04 amd64 builds (the newest should be picked) and an arm64 one. */
export const FAKE_IMAGES: Image[] = [
  image("ami-0aaaaaaaaaaaaaaa1", "amd64", "x86_64", "2029-03-01T00:00:00.000Z"),
  image("ami-0ccccccccccccccc3", "amd64", "x86_64", "2029-11-20T00:00:00.000Z"),
  image("ami-0ddddddddddddddd4", "arm64", "arm64", "2029-12-01T00:00:00.000Z"),
];

export const FAKE_SUBNETS: Subnet[] = [
  {
    SubnetId: FAKE_SUBNET,
    VpcId: FAKE_VPC,
    AvailabilityZone: FAKE_AZ,
    AvailabilityZoneId: "euw1-az1",
    CidrBlock: "10.0.0.0/16",
    State: "available",
    DefaultForAz: false,
    MapPublicIpOnLaunch: true,
    AvailableIpAddressCount: 65_000,
    OwnerId: FAKE_ACCOUNT_ID,
  },
];

/** EC2's instance state codes (the low byte of InstanceState.Code). */
const STATE_CODES: Record<InstanceStateName, number> = {
  pending: 0,
  running: 16,
  "shutting-down": 32,
  terminated: 48,
  stopping: 64,
  stopped: 80,
};

/** user data is limited to 16 KB, in raw form, before it is base64-encoded (RunInstances, UserData). */
const USER_DATA_LIMIT = 16_384;
/** The resource types RunInstances takes TagSpecifications for. */
const RUN_INSTANCES_TAGGABLE = new Set([
  "instance",
  "volume",
  "network-interface",
  "spot-instances-request",
  "elastic-gpu",
]);

export type InstanceEvent =
  | "running"
  | "agent-online"
  | "agent-offline"
  | "stopping"
  | "stopped"
  | "shutting-down"
  | "terminated";

export interface FakeInstance {
  id: string;
  /** What DescribeInstances answers (state, tags, addresses...). */
  instance: Instance;
  /** The instance's filesystem root on this machine. */
  root: string;
  /** Its `/root`, the home SSM commands and cloud-init run with. */
  home: string;
  reservationId: string;
  /** The RunInstances input that launched it (absent for instances given to `addInstance`). */
  launch?: RunInstancesCommandInput;
  /** The user data as cloud-init got it, and how its script ended (once it has). */
  userData?: string;
  boot?: { code: number | null; output: string };
  /** What a power-off from inside does (InstanceInitiatedShutdownBehavior; `stop` unless launched otherwise). */
  shutdownBehavior: "stop" | "terminate";
  /** The instance profile and its role (IAM role credentials are what the instance's `aws` signs with). */
  profile?: string;
  role?: string;
  /** The SSM agent: `none` (it never registers: no instance profile), `starting`, `online`, `offline`. */
  agent: "none" | "starting" | "online" | "offline";
  volumeIds: string[];
}

export interface FakeGroup {
  GroupId: string;
  GroupName: string;
  VpcId: string;
  Description: string;
  Tags: Tag[];
  rules: Rule[];
}

export interface Rule {
  id: string;
  protocol: string;
  from?: number;
  to?: number;
  kind: "v4" | "v6" | "prefix" | "group";
  source: string;
  description?: string;
}

export interface FakeVolume {
  VolumeId: string;
  instanceId: string;
  Size: number;
  VolumeType: string;
  Encrypted: boolean;
  DeleteOnTermination: boolean;
  Tags: Tag[];
}

export interface FakeEc2Options {
  /** Where the instances' folders and the instances' fake commands go. */
  dir: string;
  region?: string;
  /** pending -> running (default 100 ms). */
  bootMs?: number;
  /** running -> the SSM agent online, then cloud-init's final stage (default 100 ms). */
  agentMs?: number;
  /** shutting-down -> terminated, stopping -> stopped (default 100 ms). */
  shutdownMs?: number;
  /** How long `snap install aws-cli --classic` takes on an instance (default 300 ms). */
  awsCliInstallMs?: number;
  /** Instance profile name -> the name of its role (iam:PassRole's resource). Without it, a profile's role has its name. */
  instanceProfiles?: Record<string, string>;
  /** The credentials an instance profile's role gives the instance (default: `credentialsFor("host")`). */
  profileCredentials?: (profile: string, role: string) => FakeCredentials;
  /** The double's endpoint, for the instances' `aws` (also settable later: `setEndpoint`). */
  endpoint?: string;
  images?: Image[];
  subnets?: Subnet[];
  /** The account's On-Demand vCPU limit RunInstances enforces (VcpuLimitExceeded); none by default. */
  vcpuLimit?: number;
}

// ------------------------------------------------------------------------------------------------ helpers

function ec2Error(code: string, message: string): AwsError {
  return new AwsError(code, message, 400);
}

function tagOf(tags: Tag[] | undefined, key: string): string | undefined {
  return tags?.find((t) => t.Key === key)?.Value;
}

/** aws:RequestTag/<k> and aws:TagKeys of the tags a request carries (none when it carries none). */
function requestTags(tags: Tag[] | undefined): Record<string, string | string[]> {
  const ctx: Record<string, string | string[]> = {};
  if (!tags?.length) return ctx;
  for (const t of tags) ctx[`aws:RequestTag/${t.Key}`] = t.Value ?? "";
  ctx["aws:TagKeys"] = tags.map((t) => t.Key ?? "");
  return ctx;
}

/** aws:ResourceTag/<k> and ec2:ResourceTag/<k> of a resource's current tags. */
function resourceTags(tags: Tag[] | undefined): Record<string, string> {
  const ctx: Record<string, string> = {};
  for (const t of tags ?? []) {
    ctx[`aws:ResourceTag/${t.Key}`] = t.Value ?? "";
    ctx[`ec2:ResourceTag/${t.Key}`] = t.Value ?? "";
  }
  return ctx;
}

/** EC2's filter wildcards: `*` any run of characters, `?` one. */
function glob(pattern: string): RegExp {
  const escaped = pattern
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replace(/\*/g, ".*")
    .replace(/\?/g, ".");
  return new RegExp(`^${escaped}$`);
}

/** Whether a resource passes a filter: any of the filter's values matches any of the resource's values. */
function matches(actual: string | string[] | undefined, f: Filter): boolean {
  const have = (Array.isArray(actual) ? actual : actual === undefined ? [] : [actual]).map(String);
  return (f.Values ?? []).some((v) => have.some((h) => glob(v).test(h)));
}

function tagFilter(tags: Tag[] | undefined, name: string): string | string[] | undefined {
  if (name.startsWith("tag:")) return tagOf(tags, name.slice(4));
  if (name === "tag-key") return (tags ?? []).map((t) => t.Key ?? "");
  if (name === "tag-value") return (tags ?? []).map((t) => t.Value ?? "");
  return undefined;
}

function unknownFilter(name: string | undefined): AwsError {
  return ec2Error("InvalidParameterValue", `The filter '${name}' is invalid`);
}

/** A deep copy with object keys sorted and undefined members dropped: how two requests' parameters compare. */
function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (value instanceof Date) return value.toISOString();
  if (value && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = canonical(v);
    }
    return out;
  }
  return value;
}

const PROTOCOLS: Record<string, string> = { "6": "tcp", "17": "udp", "1": "icmp", all: "-1", "-1": "-1" };

function normalizeProtocol(p: string | undefined): string {
  const lower = (p ?? "-1").toLowerCase();
  return PROTOCOLS[lower] ?? lower;
}

function ruleKey(r: Omit<Rule, "id">): string {
  return [r.protocol, r.from ?? "", r.to ?? "", r.kind, r.source].join("|");
}

/** How EC2 names a rule in its errors: `peer: 0.0.0.0/0, TCP, from port: 22, to port: 22, ALLOW`. */
function describeRule(r: Omit<Rule, "id">): string {
  const proto = r.protocol === "-1" ? "ALL" : r.protocol.toUpperCase();
  const ports = r.protocol === "-1" ? "" : `, from port: ${r.from}, to port: ${r.to}`;
  return `peer: ${r.source}, ${proto}${ports}, ALLOW`;
}

function flatten(perms: IpPermission[] | undefined): Omit<Rule, "id">[] {
  const out: Omit<Rule, "id">[] = [];
  for (const p of perms ?? []) {
    const protocol = normalizeProtocol(p.IpProtocol);
    const base = {
      protocol,
      ...(protocol !== "-1" && p.FromPort !== undefined ? { from: p.FromPort } : {}),
      ...(protocol !== "-1" && p.ToPort !== undefined ? { to: p.ToPort } : {}),
    };
    const d = (description: string | undefined) => (description ? { description } : {});
    for (const r of p.IpRanges ?? [])
      out.push({ ...base, kind: "v4", source: r.CidrIp ?? "", ...d(r.Description) });
    for (const r of p.Ipv6Ranges ?? [])
      out.push({ ...base, kind: "v6", source: r.CidrIpv6 ?? "", ...d(r.Description) });
    for (const r of p.PrefixListIds ?? [])
      out.push({ ...base, kind: "prefix", source: r.PrefixListId ?? "", ...d(r.Description) });
    for (const r of p.UserIdGroupPairs ?? [])
      out.push({ ...base, kind: "group", source: r.GroupId ?? "", ...d(r.Description) });
  }
  return out;
}

/** Rules as EC2 describes them: one IpPermission per protocol and port range. */
function permissions(rules: Omit<Rule, "id">[]): IpPermission[] {
  const byRange = new Map<string, IpPermission>();
  for (const r of rules) {
    const key = `${r.protocol}|${r.from ?? ""}|${r.to ?? ""}`;
    const p = byRange.get(key) ?? {
      IpProtocol: r.protocol,
      ...(r.from !== undefined ? { FromPort: r.from } : {}),
      ...(r.to !== undefined ? { ToPort: r.to } : {}),
      IpRanges: [],
      Ipv6Ranges: [],
      PrefixListIds: [],
      UserIdGroupPairs: [],
    };
    byRange.set(key, p);
    const d = r.description ? { Description: r.description } : {};
    if (r.kind === "v4") p.IpRanges?.push({ CidrIp: r.source, ...d });
    else if (r.kind === "v6") p.Ipv6Ranges?.push({ CidrIpv6: r.source, ...d });
    else if (r.kind === "prefix") p.PrefixListIds?.push({ PrefixListId: r.source, ...d });
    else p.UserIdGroupPairs?.push({ GroupId: r.source, UserId: FAKE_ACCOUNT_ID, ...d });
  }
  return [...byRange.values()];
}

/** The legacy single-rule members of Authorize/RevokeSecurityGroupIngress, as one IpPermission. */
function legacyPermission(input: AuthorizeSecurityGroupIngressCommandInput): IpPermission[] {
  if (!input.CidrIp && !input.SourceSecurityGroupName && !input.SourceSecurityGroupOwnerId) return [];
  return [
    {
      IpProtocol: input.IpProtocol ?? "-1",
      ...(input.FromPort !== undefined ? { FromPort: input.FromPort } : {}),
      ...(input.ToPort !== undefined ? { ToPort: input.ToPort } : {}),
      ...(input.CidrIp ? { IpRanges: [{ CidrIp: input.CidrIp }] } : {}),
    },
  ];
}

function vcpusOf(type: string): number {
  const size = type.split(".")[1] ?? "";
  const sizes: Record<string, number> = {
    nano: 2,
    micro: 2,
    small: 2,
    medium: 2,
    large: 2,
    xlarge: 4,
    "2xlarge": 8,
    "4xlarge": 16,
    "8xlarge": 32,
    "12xlarge": 48,
    "16xlarge": 64,
    "24xlarge": 96,
    metal: 96,
  };
  return sizes[size] ?? 2;
}

function newId(prefix: string): string {
  return `${prefix}-0${randomBytes(8).toString("hex")}`;
}

/** The folder of the instances' fake commands (copied into the double's folder, made executable there). */
const execFileAsync = promisify(execFile);

const INSTANCE_BIN = join(dirname(fileURLToPath(import.meta.url)), "instance-bin");

// ------------------------------------------------------------------------------------------------ the double

export class FakeEc2 {
  readonly region: string;
  readonly instances = new Map<string, FakeInstance>();
  readonly groups: FakeGroup[] = [];
  readonly volumes = new Map<string, FakeVolume>();
  readonly images: Image[];
  readonly subnets: Subnet[];
  readonly operations: Operations;
  /** The folder whose `shutdown`, `poweroff`, `systemctl`, `snap`, `cloud-init`... the instances run. */
  readonly bin: string;
  readonly bootMs: number;
  readonly agentMs: number;
  readonly shutdownMs: number;
  awsCliInstallMs: number;
  private readonly dir: string;
  private readonly awsCli: string;
  private readonly awsCliConfig: string;
  private readonly endpointFile: string;
  /** ClientToken (per AZ or Region) -> the reservation it launched and the parameters it was given. */
  private readonly tokens = new Map<string, { reservationId: string; ids: string[]; params: string }>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly watchers = new Map<string, FSWatcher>();
  private readonly booted = new Map<string, { promise: Promise<void>; resolve: () => void }>();
  private readonly children = new Set<Promise<void>>();
  private readonly listeners: ((inst: FakeInstance, event: InstanceEvent) => void)[] = [];
  private nextIp = 10;
  private closed = false;

  constructor(private readonly opts: FakeEc2Options) {
    this.dir = opts.dir;
    this.region = opts.region ?? FAKE_REGION;
    this.bootMs = opts.bootMs ?? 100;
    this.agentMs = opts.agentMs ?? 100;
    this.shutdownMs = opts.shutdownMs ?? 100;
    this.awsCliInstallMs = opts.awsCliInstallMs ?? 300;
    this.images = opts.images ?? FAKE_IMAGES;
    this.subnets = opts.subnets ?? FAKE_SUBNETS;
    this.bin = join(this.dir, "bin");
    mkdirSync(this.bin, { recursive: true });
    for (const f of readdirSync(INSTANCE_BIN)) {
      if (f.endsWith(".cjs")) continue;
      copyFileSync(join(INSTANCE_BIN, f), join(this.bin, f));
      chmodSync(join(this.bin, f), 0o755);
    }
    // The AWS CLI snap installs: a wrapper naming its config, and the real SSM client, resolved now.
    const cliDir = join(this.dir, "aws-cli");
    mkdirSync(cliDir, { recursive: true });
    this.awsCli = join(cliDir, "aws");
    this.awsCliConfig = join(cliDir, "config.json");
    this.endpointFile = join(cliDir, "endpoint.json");
    const clientSsm = createRequire(import.meta.url).resolve("@aws-sdk/client-ssm");
    writeFileSync(this.awsCliConfig, JSON.stringify({ clientSsm, endpointFile: this.endpointFile }));
    writeFileSync(
      this.awsCli,
      `#!${process.execPath}\n"use strict";\nprocess.env.LABFLEET_FAKE_AWS_CLI_CONFIG = ${JSON.stringify(this.awsCliConfig)};\nrequire(${JSON.stringify(join(INSTANCE_BIN, "aws-cli.cjs"))});\n`,
      { mode: 0o755 },
    );
    this.setEndpoint(opts.endpoint);

    this.operations = {
      DescribeImages: (input: DescribeImagesCommandInput, call: Call) => this.describeImages(input, call),
      DescribeSubnets: (input: DescribeSubnetsCommandInput, call: Call) => this.describeSubnets(input, call),
      DescribeSecurityGroups: (input: DescribeSecurityGroupsCommandInput, call: Call) =>
        this.describeSecurityGroups(input, call),
      DescribeInstanceTypes: (input: DescribeInstanceTypesCommandInput, call: Call) =>
        this.describeInstanceTypes(input, call),
      DescribeInstances: (input: DescribeInstancesCommandInput, call: Call) =>
        this.describeInstances(input, call),
      DescribeVolumes: (input: DescribeVolumesCommandInput, call: Call) => this.describeVolumes(input, call),
      CreateSecurityGroup: (input: CreateSecurityGroupCommandInput, call: Call) =>
        this.createSecurityGroup(input, call),
      AuthorizeSecurityGroupIngress: (input: AuthorizeSecurityGroupIngressCommandInput, call: Call) =>
        this.authorizeIngress(input, call),
      RevokeSecurityGroupIngress: (input: RevokeSecurityGroupIngressCommandInput, call: Call) =>
        this.revokeIngress(input, call),
      DeleteSecurityGroup: (input: DeleteSecurityGroupCommandInput, call: Call) =>
        this.deleteSecurityGroup(input, call),
      RunInstances: (input: RunInstancesCommandInput, call: Call) => this.runInstances(input, call),
      CreateTags: (input: CreateTagsCommandInput, call: Call) => this.createTags(input, call),
      TerminateInstances: (input: TerminateInstancesCommandInput, call: Call) =>
        this.terminateInstances(input, call),
    };
  }

  // ------------------------------------------------------------------------------------- test helpers

  /** Where the instances' `aws` command sends its requests (the double's endpoint, once it listens). */
  setEndpoint(url: string | undefined): void {
    writeFileSync(this.endpointFile, JSON.stringify(url ? { endpoint: url } : {}));
  }

  /** Called on every instance state change (the SSM double follows its agents with it). */
  onInstanceEvent(fn: (inst: FakeInstance, event: InstanceEvent) => void): void {
    this.listeners.push(fn);
  }

  /** The instance labfleet launched for a host of a workshop (by its ownership tags). */
  instanceOf(workshop: string, hostId: string): FakeInstance {
    const found = [...this.instances.values()].filter(
      (i) =>
        i.launch &&
        tagOf(i.instance.Tags, "labfleet-workshop") === workshop &&
        tagOf(i.instance.Tags, "labfleet-host-id") === hostId,
    );
    if (found.length !== 1) throw new Error(`${found.length} instances for ${workshop}/${hostId}`);
    return found[0] as FakeInstance;
  }

  /** An instance that labfleet did not launch (another workshop's, or someone else's): no agent, nothing runs. */
  addInstance(instance: Instance): FakeInstance {
    const id = instance.InstanceId ?? newId("i");
    const n = this.nextIp++;
    const fake = this.createInstance(id, newId("r"), {
      InstanceType: "m7i.large",
      ImageId: this.images[0]?.ImageId,
      SubnetId: FAKE_SUBNET,
      VpcId: FAKE_VPC,
      Placement: { AvailabilityZone: FAKE_AZ, Tenancy: "default" },
      PrivateIpAddress: this.privateIp(n),
      LaunchTime: new Date(),
      State: { Code: 16, Name: "running" },
      Tags: [],
      ...instance,
      InstanceId: id,
    });
    this.generateHostKeys(fake);
    this.markBooted(fake);
    return fake;
  }

  /** Resolves once cloud-init has finished with the instance's user data (at once for an instance without). */
  bootDone(instanceId: string): Promise<{ code: number | null; output: string } | undefined> {
    const inst = this.get(instanceId);
    const b = this.booted.get(inst.id);
    return (b?.promise ?? Promise.resolve()).then(() => inst.boot);
  }

  /** What the instance's `shutdown`, `poweroff`, `halt`, `reboot` and `systemctl` were asked, in order. */
  powerLog(instanceId: string): string[] {
    return this.logOf(instanceId, "var/log/fake-power.log");
  }

  /** What the instance's `snap` was asked, in order. */
  snapLog(instanceId: string): string[] {
    return this.logOf(instanceId, "var/log/fake-snap.log");
  }

  /**
   * Live processes started for an instance (or for any instance of this double), by the marker in their
   * environment. A process caught in the middle of an exec may be missed: poll, do not read it once.
   */
  processesOf(instanceId?: string): number[] {
    const marker = instanceId ? `LABFLEET_FAKE_INSTANCE=${instanceId}` : undefined;
    const ours = new Set([...this.instances.keys()].map((id) => `LABFLEET_FAKE_INSTANCE=${id}`));
    const found: number[] = [];
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const vars = readFileSync(`/proc/${entry}/environ`, "utf8").split("\0");
        if (marker ? vars.includes(marker) : vars.some((v) => ours.has(v))) {
          // a zombie has exited already: it is only waiting for its parent
          const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
          if (!/\) Z /.test(stat)) found.push(Number(entry));
        }
      } catch {
        // gone meanwhile, or not ours to read
      }
    }
    return found;
  }

  /**
   * Runs a shell command on an instance as root, as a console session would (not through SSM): bash, in the
   * instance's home, with the instance's environment. For tests: look at an instance as it is.
   */
  runOn(
    instanceId: string,
    command: string,
    opts: { timeoutMs?: number; env?: Record<string, string> } = {},
  ): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const inst = this.get(instanceId);
    const child = this.spawnOn(inst, "bash", ["-c", command], { cwd: inst.home, env: opts.env });
    return new Promise((resolve) => {
      let stdout = "";
      let stderr = "";
      const timer = setTimeout(() => this.killGroup(child), opts.timeoutMs ?? 30_000);
      child.stdout?.on("data", (c: Buffer) => {
        stdout += c.toString("utf8");
      });
      child.stderr?.on("data", (c: Buffer) => {
        stderr += c.toString("utf8");
      });
      child.on("error", (err) => {
        clearTimeout(timer);
        resolve({ code: null, stdout, stderr: stderr + String(err) });
      });
      child.on("close", (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }

  /** Kills every process of the instances, stops every timer and watcher, and waits until nothing runs. */
  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
    // A process in the middle of an exec can read as having no environment: nothing found twice running is done.
    const deadline = Date.now() + 10_000;
    let quiet = 0;
    while (quiet < 2 && Date.now() < deadline) {
      const left = this.processesOf();
      for (const pid of left) this.kill(pid);
      quiet = left.length === 0 ? quiet + 1 : 0;
      await new Promise((r) => setTimeout(r, 20));
    }
    await Promise.all([...this.children]);
  }

  // ------------------------------------------------------------------------- for the SSM double

  get(instanceId: string): FakeInstance {
    const inst = this.instances.get(instanceId);
    if (!inst) throw new Error(`no instance ${instanceId}`);
    return inst;
  }

  stateOf(inst: FakeInstance): InstanceStateName {
    return (inst.instance.State?.Name ?? "pending") as InstanceStateName;
  }

  /** Sets the SSM agent's connection (registered agents only); tells the listeners. */
  setAgent(inst: FakeInstance, online: boolean): void {
    if (inst.agent === "none") throw new Error(`${inst.id} has no SSM agent (it has no instance profile)`);
    const next = online ? "online" : "offline";
    if (inst.agent === next) return;
    inst.agent = next;
    this.emit(inst, online ? "agent-online" : "agent-offline");
  }

  /** The environment cloud-init, the SSM agent and a console give what they run on an instance. */
  instanceEnv(inst: FakeInstance, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
    return {
      PATH: `${this.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:${join(inst.root, "snap/bin")}`,
      HOME: inst.home,
      LANG: "C.UTF-8",
      LABFLEET_ROOT: inst.root,
      LABFLEET_FAKE_INSTANCE: inst.id,
      LABFLEET_FAKE_AWS_CLI: this.awsCli,
      LABFLEET_FAKE_AWS_CLI_INSTALL_MS: String(this.awsCliInstallMs),
      ...extra,
    };
  }

  /** Starts a process on an instance, in its own process group, tracked until it ends. */
  spawnOn(
    inst: FakeInstance,
    file: string,
    args: string[],
    opts: {
      cwd: string;
      env?: Record<string, string> | undefined;
      stdio?: ("ignore" | "pipe" | number)[];
    },
  ): ChildProcess {
    const child = spawn(file, args, {
      cwd: opts.cwd,
      env: this.instanceEnv(inst, opts.env),
      stdio: opts.stdio ?? ["ignore", "pipe", "pipe"],
      detached: true,
    });
    const ended = new Promise<void>((resolve) => {
      child.on("close", () => resolve());
      child.on("error", () => resolve());
    });
    this.children.add(ended);
    void ended.then(() => this.children.delete(ended));
    return child;
  }

  /** SIGKILL to a child's process group (everything it started that did not leave the group). */
  killGroup(child: ChildProcess): void {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, "SIGKILL");
    } catch {
      // ended meanwhile
    }
  }

  /** Runs `fn` after `ms`, unless the double is closed first. */
  later(ms: number, fn: () => void): void {
    if (this.closed) return;
    const t = setTimeout(() => {
      this.timers.delete(t);
      if (!this.closed) fn();
    }, ms);
    t.unref();
    this.timers.add(t);
  }

  // ------------------------------------------------------------------------------------ plumbing

  private logOf(instanceId: string, file: string): string[] {
    const inst = this.get(instanceId);
    try {
      return readFileSync(join(inst.root, file), "utf8").trim().split("\n").filter(Boolean);
    } catch {
      return [];
    }
  }

  private kill(pid: number): void {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      // already gone
    }
  }

  private killProcesses(instanceId: string): void {
    for (const pid of this.processesOf(instanceId)) this.kill(pid);
  }

  private emit(inst: FakeInstance, event: InstanceEvent): void {
    for (const fn of this.listeners) fn(inst, event);
  }

  private setState(inst: FakeInstance, name: InstanceStateName): void {
    inst.instance.State = { Code: STATE_CODES[name], Name: name };
  }

  private privateIp(n: number): string {
    return `10.0.${Math.floor(n / 250)}.${(n % 250) + 4}`;
  }

  private markBooted(inst: FakeInstance): void {
    let resolve = () => {};
    const promise = new Promise<void>((r) => {
      resolve = r;
    });
    this.booted.set(inst.id, { promise, resolve });
    resolve();
    this.writeBootResult(inst, true);
  }

  private createInstance(id: string, reservationId: string, instance: Instance): FakeInstance {
    const root = join(this.dir, "instances", id);
    const fake: FakeInstance = {
      id,
      instance,
      root,
      home: join(root, "root"),
      reservationId,
      shutdownBehavior: "stop",
      agent: "none",
      volumeIds: [],
    };
    mkdirSync(fake.home, { recursive: true });
    mkdirSync(join(root, "run/labfleet-fake"), { recursive: true });
    mkdirSync(join(root, "var/log"), { recursive: true });
    this.instances.set(id, fake);
    this.watchPower(fake);
    return fake;
  }

  /** The instance's power-off requests: its fake `poweroff` writes run/labfleet-fake/power. */
  private watchPower(inst: FakeInstance): void {
    const runDir = join(inst.root, "run/labfleet-fake");
    const watcher = watch(runDir, (_event, name) => {
      if (name !== "power") return;
      let what: string;
      try {
        what = readFileSync(join(runDir, "power"), "utf8").trim();
        rmSync(join(runDir, "power"), { force: true });
      } catch {
        return;
      }
      if (what === "poweroff") this.powerOff(inst, "instance");
    });
    watcher.on("error", () => {});
    watcher.unref();
    this.watchers.set(inst.id, watcher);
  }

  /** A power-off: from inside (InstanceInitiatedShutdownBehavior decides) or TerminateInstances (`user`). */
  private powerOff(inst: FakeInstance, by: "instance" | "user"): void {
    const state = this.stateOf(inst);
    const terminate = by === "user" || inst.shutdownBehavior === "terminate";
    if (state === "terminated" || state === "shutting-down") return;
    if (!terminate && (state === "stopping" || state === "stopped")) return;
    const reason =
      by === "user"
        ? {
            Code: "Client.UserInitiatedShutdown",
            Message: "Client.UserInitiatedShutdown: User initiated shutdown",
          }
        : {
            Code: "Client.InstanceInitiatedShutdown",
            Message: "Client.InstanceInitiatedShutdown: Instance initiated shutdown",
          };
    const when = new Date().toISOString().slice(0, 19).replace("T", " ");
    inst.instance.StateReason = reason;
    inst.instance.StateTransitionReason = by === "user" ? `User initiated (${when} GMT)` : reason.Message;
    this.setState(inst, terminate ? "shutting-down" : "stopping");
    delete inst.instance.PublicIpAddress;
    delete inst.instance.PublicDnsName;
    if (inst.agent === "online" || inst.agent === "starting") inst.agent = "offline";
    this.killProcesses(inst.id);
    this.emit(inst, terminate ? "shutting-down" : "stopping");
    this.later(this.shutdownMs, () => {
      this.killProcesses(inst.id);
      this.setState(inst, terminate ? "terminated" : "stopped");
      if (terminate) {
        this.watchers.get(inst.id)?.close();
        this.watchers.delete(inst.id);
        for (const v of inst.volumeIds) if (this.volumes.get(v)?.DeleteOnTermination) this.volumes.delete(v);
        delete inst.instance.PrivateIpAddress;
        inst.instance.SecurityGroups = [];
      }
      this.emit(inst, terminate ? "terminated" : "stopped");
      // Once more: a process caught in an exec by the scans above.
      this.later(20, () => this.killProcesses(inst.id));
    });
  }

  /** pending -> running -> the agent registers -> cloud-init's final stage runs the user data. */
  private boot(inst: FakeInstance): void {
    let resolve = () => {};
    const promise = new Promise<void>((r) => {
      resolve = r;
    });
    this.booted.set(inst.id, { promise, resolve });
    this.later(this.bootMs, () => {
      if (this.stateOf(inst) !== "pending") return resolve();
      // The host keys are made off the event loop (the double keeps answering while many instances boot),
      // before the instance is seen running, as cloud-init's ssh module makes them before anything connects.
      void this.generateHostKeysAsync(inst).then(
        () => {
          if (this.closed || this.stateOf(inst) !== "pending") return resolve();
          this.running(inst, resolve);
        },
        (err: unknown) => {
          resolve();
          // Closing the double removes the instances' folders under a running ssh-keygen; anything else is a bug.
          if (!this.closed) throw err;
        },
      );
    });
  }

  /** pending -> running: its public address, then the agent registers and cloud-init runs the user data. */
  private running(inst: FakeInstance, resolve: () => void): void {
    this.setState(inst, "running");
    const n = inst.instance.PrivateIpAddress?.split(".").map(Number) ?? [0, 0, 0, 0];
    inst.instance.PublicIpAddress = `203.0.${(n[2] ?? 0) + 113}.${n[3] ?? 0}`;
    inst.instance.PublicDnsName = `ec2-${inst.instance.PublicIpAddress.replace(/\./g, "-")}.${this.region}.compute.amazonaws.com`;
    this.emit(inst, "running");
    this.later(this.agentMs, () => {
      if (this.stateOf(inst) !== "running") return resolve();
      if (inst.agent === "starting") {
        inst.agent = "online";
        this.emit(inst, "agent-online");
      }
      this.runUserData(inst, resolve);
    });
  }

  /**
   * The instance's SSH host keys, made once at its first boot as cloud-init's ssh module makes them (before the
   * user data runs): an ed25519 and an ECDSA key of its own in its `/etc/ssh/`, with ssh-keygen. Returns the
   * ssh-keygen arguments of each key still to make.
   */
  private hostKeyJobs(inst: FakeInstance): string[][] {
    const dir = join(inst.root, "etc/ssh");
    mkdirSync(dir, { recursive: true });
    const name = `root@ip-${(inst.instance.PrivateIpAddress ?? "0.0.0.0").replace(/\./g, "-")}`;
    return (
      [
        ["ed25519", []],
        ["ecdsa", ["-b", "256"]],
      ] as const
    )
      .map(([type, bits]) => ({ file: join(dir, `ssh_host_${type}_key`), type, bits }))
      .filter((k) => !existsSync(k.file))
      .map((k) => ["-q", "-t", k.type, ...k.bits, "-N", "", "-C", name, "-f", k.file]);
  }

  private generateHostKeys(inst: FakeInstance): void {
    for (const args of this.hostKeyJobs(inst))
      execFileSync("ssh-keygen", args, { stdio: ["ignore", "ignore", "pipe"] });
  }

  /** generateHostKeys without blocking the double's event loop. */
  private async generateHostKeysAsync(inst: FakeInstance): Promise<void> {
    for (const args of this.hostKeyJobs(inst)) await execFileAsync("ssh-keygen", args);
  }

  /** The instance's public SSH host key lines (its `/etc/ssh/ssh_host_*_key.pub`), as a console would show them. */
  hostKeyLines(instanceId: string): string[] {
    const dir = join(this.get(instanceId).root, "etc/ssh");
    if (!existsSync(dir)) return [];
    return readdirSync(dir)
      .filter((f) => /^ssh_host_.*_key\.pub$/.test(f))
      .sort()
      .map((f) => readFileSync(join(dir, f), "utf8").trim());
  }

  /** cloud-init's scripts-user: a `#!` user data script runs once, as root; its output goes to cloud-init-output.log. */
  private runUserData(inst: FakeInstance, done: () => void): void {
    if (!inst.userData?.startsWith("#!")) {
      this.writeBootResult(inst, true);
      done();
      return;
    }
    const scripts = join(inst.root, "var/lib/cloud/instance/scripts");
    mkdirSync(scripts, { recursive: true });
    const file = join(scripts, "part-001");
    writeFileSync(file, inst.userData, { mode: 0o700 });
    let output = "";
    const child = this.spawnOn(inst, file, [], { cwd: inst.root });
    const collect = (c: Buffer) => {
      output += c.toString("utf8");
    };
    child.stdout?.on("data", collect);
    child.stderr?.on("data", collect);
    const finish = (code: number | null, extra = "") => {
      inst.boot = { code, output: output + extra };
      writeFileSync(join(inst.root, "var/log/cloud-init-output.log"), inst.boot.output);
      this.writeBootResult(inst, code === 0);
      done();
    };
    child.on("error", (err) => finish(null, String(err)));
    child.on("close", (code) => finish(code));
  }

  /** /run/cloud-init/result.json, as cloud-init writes it when its final stage is over. */
  private writeBootResult(inst: FakeInstance, ok: boolean): void {
    const dir = join(inst.root, "run/cloud-init");
    mkdirSync(dir, { recursive: true });
    const errors = ok
      ? []
      : ["('scripts_user', RuntimeError('Runparts: 1 failures (part-001) in 1 attempted commands'))"];
    writeFileSync(
      join(dir, "result.json"),
      `{\n "v1": {\n  "datasource": "DataSourceEc2Local",\n  "errors": ${JSON.stringify(errors)}\n }\n}\n`,
    );
  }

  private writeImds(inst: FakeInstance): void {
    const credentials =
      inst.profile && inst.role
        ? (this.opts.profileCredentials ?? (() => credentialsFor("host")))(inst.profile, inst.role)
        : undefined;
    writeFileSync(
      join(inst.root, "run/labfleet-fake/imds.json"),
      JSON.stringify({ region: this.region, ...(credentials ? { credentials } : {}) }),
      { mode: 0o600 },
    );
  }

  private ctx(extra: Record<string, string | string[]> = {}): Record<string, string | string[]> {
    return { "ec2:Region": this.region, ...extra };
  }

  private dryRun(input: { DryRun?: boolean | undefined }): void {
    if (input.DryRun)
      throw new AwsError("DryRunOperation", "Request would have succeeded, but DryRun flag is set.", 412);
  }

  private group(id: string | undefined, name?: string): FakeGroup {
    const g = id ? this.groups.find((x) => x.GroupId === id) : this.groups.find((x) => x.GroupName === name);
    if (!g) throw ec2Error("InvalidGroup.NotFound", `The security group '${id ?? name}' does not exist`);
    return g;
  }

  private groupArn(g: FakeGroup): string {
    return arn.ec2("security-group", g.GroupId, this.region);
  }

  private groupContext(g: FakeGroup): Record<string, string | string[]> {
    return this.ctx({
      ...resourceTags(g.Tags),
      "ec2:SecurityGroupID": g.GroupId,
      "ec2:Vpc": arn.ec2("vpc", g.VpcId, this.region),
    });
  }

  private instanceContext(inst: FakeInstance): Record<string, string | string[]> {
    const i = inst.instance;
    return this.ctx({
      ...resourceTags(i.Tags),
      "ec2:InstanceID": inst.id,
      "ec2:InstanceType": i.InstanceType ?? "",
      "ec2:AvailabilityZone": i.Placement?.AvailabilityZone ?? FAKE_AZ,
      ...(i.IamInstanceProfile?.Arn ? { "ec2:InstanceProfile": i.IamInstanceProfile.Arn } : {}),
      "ec2:Tenancy": "default",
      "ec2:RootDeviceType": "ebs",
    });
  }

  private subnetOf(id: string | undefined): Subnet {
    const s = this.subnets.find((x) => x.SubnetId === id);
    if (!s) throw ec2Error("InvalidSubnetID.NotFound", `The subnet ID '${id}' does not exist`);
    return s;
  }

  // ------------------------------------------------------------------------------------- Describe*

  private async describeImages(input: DescribeImagesCommandInput, call: Call) {
    await call.authorize([{ action: "ec2:DescribeImages", resource: "*", context: this.ctx() }]);
    let found = this.images;
    if (input.ImageIds?.length) {
      const missing = input.ImageIds.filter((id) => !found.some((i) => i.ImageId === id));
      if (missing.length) {
        throw ec2Error("InvalidAMIID.NotFound", `The image id '[${missing.join(", ")}]' does not exist`);
      }
      found = found.filter((i) => input.ImageIds?.includes(i.ImageId as string));
    }
    if (input.Owners?.length) found = found.filter((i) => input.Owners?.includes(i.OwnerId as string));
    const fields: Record<string, (i: Image) => string | string[] | undefined> = {
      name: (i) => i.Name,
      state: (i) => i.State,
      architecture: (i) => i.Architecture,
      "image-id": (i) => i.ImageId,
      "owner-id": (i) => i.OwnerId,
      "root-device-type": (i) => i.RootDeviceType,
      "virtualization-type": (i) => i.VirtualizationType,
      "is-public": (i) => String(i.Public),
    };
    for (const f of input.Filters ?? []) {
      const get = f.Name ? fields[f.Name] : undefined;
      if (!get) throw unknownFilter(f.Name);
      found = found.filter((i) => matches(get(i), f));
    }
    return { Images: structuredClone(found) };
  }

  private async describeSubnets(input: DescribeSubnetsCommandInput, call: Call) {
    await call.authorize([{ action: "ec2:DescribeSubnets", resource: "*", context: this.ctx() }]);
    let found = this.subnets;
    if (input.SubnetIds?.length) {
      for (const id of input.SubnetIds) this.subnetOf(id);
      found = found.filter((s) => input.SubnetIds?.includes(s.SubnetId as string));
    }
    const fields: Record<string, (s: Subnet) => string | string[] | undefined> = {
      "subnet-id": (s) => s.SubnetId,
      "vpc-id": (s) => s.VpcId,
      "availability-zone": (s) => s.AvailabilityZone,
      "default-for-az": (s) => String(s.DefaultForAz),
      state: (s) => s.State,
    };
    for (const f of input.Filters ?? []) {
      const name = f.Name ?? "";
      const get =
        fields[name] ??
        (/^tag(:|-key$|-value$)/.test(name) ? (s: Subnet) => tagFilter(s.Tags, name) : undefined);
      if (!get) throw unknownFilter(f.Name);
      found = found.filter((s) => matches(get(s), f));
    }
    return { Subnets: structuredClone(found) };
  }

  private async describeSecurityGroups(input: DescribeSecurityGroupsCommandInput, call: Call) {
    await call.authorize([{ action: "ec2:DescribeSecurityGroups", resource: "*", context: this.ctx() }]);
    let found = this.groups;
    if (input.GroupIds?.length) {
      for (const id of input.GroupIds) this.group(id);
      found = found.filter((g) => input.GroupIds?.includes(g.GroupId));
    }
    if (input.GroupNames?.length) {
      for (const name of input.GroupNames) this.group(undefined, name);
      found = found.filter((g) => input.GroupNames?.includes(g.GroupName));
    }
    const fields: Record<string, (g: FakeGroup) => string | string[] | undefined> = {
      "vpc-id": (g) => g.VpcId,
      "group-name": (g) => g.GroupName,
      "group-id": (g) => g.GroupId,
      description: (g) => g.Description,
      "owner-id": () => FAKE_ACCOUNT_ID,
    };
    for (const f of input.Filters ?? []) {
      const name = f.Name ?? "";
      const get =
        fields[name] ??
        (/^tag(:|-key$|-value$)/.test(name) ? (g: FakeGroup) => tagFilter(g.Tags, name) : undefined);
      if (!get) throw unknownFilter(f.Name);
      found = found.filter((g) => matches(get(g), f));
    }
    return {
      SecurityGroups: found.map(
        (g): SecurityGroup => ({
          GroupId: g.GroupId,
          GroupName: g.GroupName,
          VpcId: g.VpcId,
          Description: g.Description,
          OwnerId: FAKE_ACCOUNT_ID,
          SecurityGroupArn: this.groupArn(g),
          Tags: structuredClone(g.Tags),
          IpPermissions: permissions(g.rules),
          IpPermissionsEgress: [{ IpProtocol: "-1", IpRanges: [{ CidrIp: "0.0.0.0/0" }] }],
        }),
      ),
    };
  }

  private async describeInstanceTypes(input: DescribeInstanceTypesCommandInput, call: Call) {
    await call.authorize([{ action: "ec2:DescribeInstanceTypes", resource: "*", context: this.ctx() }]);
    return {
      InstanceTypes: (input.InstanceTypes ?? []).map((t) => ({
        InstanceType: t,
        VCpuInfo: { DefaultVCpus: vcpusOf(t) },
        ProcessorInfo: { SupportedArchitectures: [/^[a-z]+\d+g/.test(t) ? "arm64" : "x86_64"] },
      })),
    };
  }

  private async describeInstances(input: DescribeInstancesCommandInput, call: Call) {
    await call.authorize([{ action: "ec2:DescribeInstances", resource: "*", context: this.ctx() }]);
    let found = [...this.instances.values()];
    if (input.InstanceIds?.length) {
      const malformed = input.InstanceIds.find((id) => !/^i-[0-9a-f]{8,17}$/.test(id));
      if (malformed) throw ec2Error("InvalidInstanceID.Malformed", `Invalid id: "${malformed}"`);
      const missing = input.InstanceIds.filter((id) => !this.instances.has(id));
      if (missing.length === 1) {
        throw ec2Error("InvalidInstanceID.NotFound", `The instance ID '${missing[0]}' does not exist`);
      }
      if (missing.length > 1) {
        throw ec2Error("InvalidInstanceID.NotFound", `The instance IDs '${missing.join(", ")}' do not exist`);
      }
      found = found.filter((i) => input.InstanceIds?.includes(i.id));
    }
    const fields: Record<string, (i: FakeInstance) => string | string[] | undefined> = {
      "instance-state-name": (i) => i.instance.State?.Name,
      "instance-state-code": (i) => String(i.instance.State?.Code),
      "instance-id": (i) => i.id,
      "instance-type": (i) => i.instance.InstanceType,
      "image-id": (i) => i.instance.ImageId,
      "subnet-id": (i) => i.instance.SubnetId,
      "vpc-id": (i) => i.instance.VpcId,
      "availability-zone": (i) => i.instance.Placement?.AvailabilityZone,
      "private-ip-address": (i) => i.instance.PrivateIpAddress,
      "ip-address": (i) => i.instance.PublicIpAddress,
      "client-token": (i) => i.instance.ClientToken,
      "reservation-id": (i) => i.reservationId,
      "iam-instance-profile.arn": (i) => i.instance.IamInstanceProfile?.Arn,
      "instance.group-id": (i) => (i.instance.SecurityGroups ?? []).map((g) => g.GroupId ?? ""),
    };
    for (const f of input.Filters ?? []) {
      const name = f.Name ?? "";
      const get =
        fields[name] ??
        (/^tag(:|-key$|-value$)/.test(name)
          ? (i: FakeInstance) => tagFilter(i.instance.Tags, name)
          : undefined);
      if (!get) throw unknownFilter(f.Name);
      found = found.filter((i) => matches(get(i), f));
    }
    const byReservation = new Map<string, FakeInstance[]>();
    for (const i of found)
      byReservation.set(i.reservationId, [...(byReservation.get(i.reservationId) ?? []), i]);
    return {
      Reservations: [...byReservation.entries()].map(([id, list]) => this.reservation(id, list)),
    };
  }

  /**
   * DescribeVolumes as the EC2 API reference has it: `ec2:DescribeVolumes` on `*`; VolumeIds (an unknown one is
   * InvalidVolume.NotFound) or MaxResults (5 to 500, with NextToken pages), not both; filters on the volume's
   * fields and tags. A volume is `in-use` while its instance is not terminated; one kept at termination
   * (DeleteOnTermination false) is `available`, attached to nothing.
   */
  private async describeVolumes(input: DescribeVolumesCommandInput, call: Call) {
    await call.authorize([{ action: "ec2:DescribeVolumes", resource: "*", context: this.ctx() }]);
    if (input.VolumeIds?.length && input.MaxResults !== undefined) {
      throw ec2Error(
        "InvalidParameterCombination",
        "The parameter volumeSet cannot be used with the parameter maxResults",
      );
    }
    if (input.MaxResults !== undefined && (input.MaxResults < 5 || input.MaxResults > 500)) {
      throw ec2Error(
        "InvalidParameterValue",
        `Value ( ${input.MaxResults} ) for parameter maxResults is invalid. Expecting a value between 5 and 500.`,
      );
    }
    const view = (v: FakeVolume): Volume => {
      const inst = this.instances.get(v.instanceId);
      const attached = inst !== undefined && this.stateOf(inst) !== "terminated";
      return {
        VolumeId: v.VolumeId,
        Size: v.Size,
        VolumeType: v.VolumeType as Volume["VolumeType"],
        Encrypted: v.Encrypted,
        AvailabilityZone: inst?.instance.Placement?.AvailabilityZone ?? `${this.region}a`,
        State: attached ? "in-use" : "available",
        Attachments: attached
          ? [
              {
                VolumeId: v.VolumeId,
                InstanceId: v.instanceId,
                Device: "/dev/sda1",
                State: "attached",
                DeleteOnTermination: v.DeleteOnTermination,
              },
            ]
          : [],
        Tags: structuredClone(v.Tags),
      };
    };
    let found = [...this.volumes.values()].map(view);
    if (input.VolumeIds?.length) {
      const missing = input.VolumeIds.filter((id) => !this.volumes.has(id));
      if (missing.length) {
        throw ec2Error("InvalidVolume.NotFound", `The volume '${missing.join(", ")}' does not exist.`);
      }
      found = found.filter((v) => input.VolumeIds?.includes(v.VolumeId as string));
    }
    const fields: Record<string, (v: Volume) => string | string[] | undefined> = {
      "volume-id": (v) => v.VolumeId,
      status: (v) => v.State,
      size: (v) => String(v.Size),
      "volume-type": (v) => v.VolumeType,
      encrypted: (v) => String(v.Encrypted),
      "availability-zone": (v) => v.AvailabilityZone,
      "attachment.instance-id": (v) => (v.Attachments ?? []).map((a) => a.InstanceId ?? ""),
      "attachment.status": (v) => (v.Attachments ?? []).map((a) => a.State ?? ""),
      "attachment.delete-on-termination": (v) =>
        (v.Attachments ?? []).map((a) => String(a.DeleteOnTermination)),
    };
    for (const f of input.Filters ?? []) {
      const name = f.Name ?? "";
      const get =
        fields[name] ??
        (/^tag(:|-key$|-value$)/.test(name) ? (v: Volume) => tagFilter(v.Tags, name) : undefined);
      if (!get) throw unknownFilter(f.Name);
      found = found.filter((v) => matches(get(v), f));
    }
    found.sort((a, b) => (a.VolumeId ?? "").localeCompare(b.VolumeId ?? ""));
    if (input.MaxResults === undefined) return { Volumes: found };
    const start = input.NextToken ? Number(Buffer.from(input.NextToken, "base64").toString()) : 0;
    if (!Number.isInteger(start) || start < 0)
      throw ec2Error("InvalidParameterValue", "Invalid value for nextToken");
    const page = found.slice(start, start + input.MaxResults);
    const next = start + input.MaxResults < found.length ? start + input.MaxResults : undefined;
    return {
      Volumes: page,
      ...(next !== undefined ? { NextToken: Buffer.from(String(next)).toString("base64") } : {}),
    };
  }

  private reservation(id: string, list: FakeInstance[]): Reservation {
    return {
      ReservationId: id,
      OwnerId: FAKE_ACCOUNT_ID,
      Groups: [],
      Instances: list.map((i) => structuredClone(i.instance)),
    };
  }

  // ------------------------------------------------------------------------------- security groups

  /**
   * CreateSecurityGroup authorizes `security-group/*` (with the request's tags), the VPC, and, when tagged, the
   * implicit `ec2:CreateTags` on `security-group/*` with `ec2:CreateAction=CreateSecurityGroup`.
   */
  private async createSecurityGroup(input: CreateSecurityGroupCommandInput, call: Call) {
    const vpcId = input.VpcId ?? FAKE_VPC;
    if (!this.subnets.some((s) => s.VpcId === vpcId)) {
      throw ec2Error("InvalidVpcID.NotFound", `The vpc ID '${vpcId}' does not exist`);
    }
    if (!input.GroupName)
      throw ec2Error("MissingParameter", "The request must contain the parameter groupName");
    if (!input.Description)
      throw ec2Error("MissingParameter", "The request must contain the parameter groupDescription");
    if (input.GroupName.startsWith("sg-")) {
      throw ec2Error("InvalidParameterValue", "Group names may not be in the format sg-*.");
    }
    const tags = this.tagsFor(input.TagSpecifications, new Set(["security-group"]), "security-group");
    const auth: AuthRequest[] = [
      {
        action: "ec2:CreateSecurityGroup",
        resource: arn.ec2("security-group", "*", this.region),
        context: this.ctx(requestTags(tags)),
      },
      {
        action: "ec2:CreateSecurityGroup",
        resource: arn.ec2("vpc", vpcId, this.region),
        context: this.ctx({ "ec2:VpcID": vpcId, "ec2:Tenancy": "default" }),
      },
    ];
    if (tags.length) {
      auth.push({
        action: "ec2:CreateTags",
        resource: arn.ec2("security-group", "*", this.region),
        context: this.ctx({ "ec2:CreateAction": "CreateSecurityGroup", ...requestTags(tags) }),
      });
    }
    await call.authorize(auth);
    this.dryRun(input);
    if (this.groups.some((g) => g.GroupName === input.GroupName && g.VpcId === vpcId)) {
      throw ec2Error(
        "InvalidGroup.Duplicate",
        `The security group '${input.GroupName}' already exists for VPC '${vpcId}'`,
      );
    }
    const g: FakeGroup = {
      GroupId: newId("sg"),
      GroupName: input.GroupName,
      VpcId: vpcId,
      Description: input.Description,
      Tags: structuredClone(tags),
      rules: [],
    };
    this.groups.push(g);
    return {
      GroupId: g.GroupId,
      SecurityGroupArn: this.groupArn(g),
      ...(tags.length ? { Tags: structuredClone(tags) } : {}),
    };
  }

  /** Adds rules; a rule the group has already (description aside) fails the whole request, InvalidPermission.Duplicate. */
  private async authorizeIngress(input: AuthorizeSecurityGroupIngressCommandInput, call: Call) {
    const g = this.group(input.GroupId, input.GroupName);
    await call.authorize([
      {
        action: "ec2:AuthorizeSecurityGroupIngress",
        resource: this.groupArn(g),
        context: this.groupContext(g),
      },
    ]);
    this.dryRun(input);
    const rules = flatten([...(input.IpPermissions ?? []), ...legacyPermission(input)]);
    if (rules.length === 0) {
      throw ec2Error("MissingParameter", "The request must contain the parameter ipPermissions");
    }
    const have = new Set(g.rules.map(ruleKey));
    for (const r of rules) {
      if (have.has(ruleKey(r))) {
        throw ec2Error(
          "InvalidPermission.Duplicate",
          `the specified rule "${describeRule(r)}" already exists`,
        );
      }
      have.add(ruleKey(r));
    }
    const added = rules.map((r) => ({ ...r, id: newId("sgr") }));
    g.rules.push(...added);
    return {
      Return: true,
      SecurityGroupRules: added.map((r) => ({
        SecurityGroupRuleId: r.id,
        GroupId: g.GroupId,
        GroupOwnerId: FAKE_ACCOUNT_ID,
        IsEgress: false,
        IpProtocol: r.protocol,
        FromPort: r.from ?? -1,
        ToPort: r.to ?? -1,
        ...(r.kind === "v4" ? { CidrIpv4: r.source } : {}),
        ...(r.kind === "v6" ? { CidrIpv6: r.source } : {}),
        ...(r.kind === "prefix" ? { PrefixListId: r.source } : {}),
        ...(r.kind === "group"
          ? { ReferencedGroupInfo: { GroupId: r.source, UserId: FAKE_ACCOUNT_ID } }
          : {}),
        ...(r.description ? { Description: r.description } : {}),
      })),
    };
  }

  /**
   * Removes rules. In a non-default VPC (the double's), a rule that does not match an existing one exactly fails
   * the request with InvalidPermission.NotFound and nothing is revoked (RevokeSecurityGroupIngress).
   */
  private async revokeIngress(input: RevokeSecurityGroupIngressCommandInput, call: Call) {
    const g = this.group(input.GroupId, input.GroupName);
    await call.authorize([
      { action: "ec2:RevokeSecurityGroupIngress", resource: this.groupArn(g), context: this.groupContext(g) },
    ]);
    this.dryRun(input);
    const byId = new Set(input.SecurityGroupRuleIds ?? []);
    const gone = new Set(flatten([...(input.IpPermissions ?? []), ...legacyPermission(input)]).map(ruleKey));
    const have = new Set(g.rules.map(ruleKey));
    const unknownId = [...byId].find((id) => !g.rules.some((r) => r.id === id));
    if (unknownId) {
      throw ec2Error(
        "InvalidSecurityGroupRuleId.NotFound",
        `The security group rule ID '${unknownId}' does not exist`,
      );
    }
    if ([...gone].some((k) => !have.has(k)) || (gone.size === 0 && byId.size === 0)) {
      throw ec2Error(
        "InvalidPermission.NotFound",
        "The specified rule does not exist in this security group.",
      );
    }
    const revoked = g.rules.filter((r) => gone.has(ruleKey(r)) || byId.has(r.id));
    g.rules = g.rules.filter((r) => !revoked.includes(r));
    return {
      Return: true,
      RevokedSecurityGroupRules: revoked.map((r) => ({
        SecurityGroupRuleId: r.id,
        GroupId: g.GroupId,
        IsEgress: false,
        IpProtocol: r.protocol,
        FromPort: r.from ?? -1,
        ToPort: r.to ?? -1,
        ...(r.kind === "v4" ? { CidrIpv4: r.source } : {}),
        ...(r.kind === "v6" ? { CidrIpv6: r.source } : {}),
      })),
    };
  }

  /** A group an instance still uses (any state but terminated) cannot go: DependencyViolation. */
  private async deleteSecurityGroup(input: DeleteSecurityGroupCommandInput, call: Call) {
    const g = this.group(input.GroupId, input.GroupName);
    await call.authorize([
      { action: "ec2:DeleteSecurityGroup", resource: this.groupArn(g), context: this.groupContext(g) },
    ]);
    this.dryRun(input);
    const users = [...this.instances.values()].filter(
      (i) =>
        this.stateOf(i) !== "terminated" && i.instance.SecurityGroups?.some((s) => s.GroupId === g.GroupId),
    );
    if (users.length > 0)
      throw ec2Error("DependencyViolation", `resource ${g.GroupId} has a dependent object`);
    this.groups.splice(this.groups.indexOf(g), 1);
    return { Return: true, GroupId: g.GroupId };
  }

  // ------------------------------------------------------------------------------------------ tags

  /** The tags of one resource type in TagSpecifications, checked as EC2 checks them. */
  private tagsFor(specs: TagSpecification[] | undefined, allowed: Set<string>, type: string): Tag[] {
    for (const s of specs ?? []) {
      if (!s.ResourceType || !allowed.has(s.ResourceType)) {
        throw ec2Error(
          "InvalidParameterValue",
          `'${s.ResourceType}' is not a valid taggable resource type for this operation.`,
        );
      }
      this.checkTags(s.Tags);
    }
    return structuredClone(specs?.filter((s) => s.ResourceType === type).flatMap((s) => s.Tags ?? []) ?? []);
  }

  private checkTags(tags: Tag[] | undefined): void {
    if ((tags?.length ?? 0) > 50)
      throw ec2Error("TagLimitExceeded", "The maximum number of tags (50) was exceeded");
    for (const t of tags ?? []) {
      if (!t.Key) throw ec2Error("InvalidParameterValue", "Tag key must not be empty");
      if (t.Key.toLowerCase().startsWith("aws:")) {
        throw ec2Error(
          "InvalidParameterValue",
          `Tag keys starting with 'aws:' are reserved for internal use`,
        );
      }
    }
  }

  /**
   * CreateTags authorizes each resource with its current tags (aws:ResourceTag/ec2:ResourceTag), the request's
   * (aws:RequestTag, aws:TagKeys); the tags are set on all of them or, when one is missing, on none.
   */
  private async createTags(input: CreateTagsCommandInput, call: Call) {
    const ids = input.Resources ?? [];
    if (ids.length === 0)
      throw ec2Error("MissingParameter", "The request must contain the parameter resourceIdSet");
    const tags = input.Tags ?? [];
    this.checkTags(tags);
    const targets = ids.map((id) => {
      const inst = this.instances.get(id);
      if (inst)
        return {
          id,
          type: "instance",
          tags: inst.instance.Tags ?? [],
          set: (t: Tag[]) => {
            inst.instance.Tags = t;
          },
          ctx: this.instanceContext(inst),
        };
      const g = this.groups.find((x) => x.GroupId === id);
      if (g)
        return {
          id,
          type: "security-group",
          tags: g.Tags,
          set: (t: Tag[]) => {
            g.Tags = t;
          },
          ctx: this.groupContext(g),
        };
      const v = this.volumes.get(id);
      if (v)
        return {
          id,
          type: "volume",
          tags: v.Tags,
          set: (t: Tag[]) => {
            v.Tags = t;
          },
          ctx: this.ctx(resourceTags(v.Tags)),
        };
      if (id.startsWith("i-"))
        throw ec2Error("InvalidInstanceID.NotFound", `The instance ID '${id}' does not exist`);
      if (id.startsWith("sg-"))
        throw ec2Error("InvalidGroup.NotFound", `The security group '${id}' does not exist`);
      if (id.startsWith("vol-"))
        throw ec2Error("InvalidVolume.NotFound", `The volume '${id}' does not exist.`);
      throw ec2Error("InvalidID", `The ID '${id}' is not valid`);
    });
    await call.authorize(
      targets.map((t) => ({
        action: "ec2:CreateTags",
        resource: arn.ec2(t.type, t.id, this.region),
        context: { ...t.ctx, ...requestTags(tags) },
      })),
    );
    this.dryRun(input);
    for (const t of targets) {
      const next = structuredClone(t.tags);
      for (const tag of tags) {
        const i = next.findIndex((x) => x.Key === tag.Key);
        if (i >= 0) next[i] = { Key: tag.Key, Value: tag.Value ?? "" };
        else next.push({ Key: tag.Key, Value: tag.Value ?? "" });
      }
      if (next.length > 50)
        throw ec2Error("TagLimitExceeded", "The maximum number of tags (50) was exceeded");
      t.set(next);
    }
    return {};
  }

  // ---------------------------------------------------------------------------------------- instances

  /**
   * RunInstances authorizes, as AWS does for one launch: `instance/*` and `volume/*` (each with the request tags
   * of its TagSpecifications), `image/<ami>`, `subnet/<id>`, each `security-group/<id>` and
   * `network-interface/*`; then, for each tagged resource type, `ec2:CreateTags` on it with
   * `ec2:CreateAction=RunInstances`; and `iam:PassRole` on the instance profile's role with
   * `iam:PassedToService=ec2.amazonaws.com`.
   */
  private async runInstances(input: RunInstancesCommandInput, call: Call) {
    const min = input.MinCount;
    const max = input.MaxCount;
    if (min === undefined)
      throw ec2Error("MissingParameter", "The request must contain the parameter MinCount");
    if (max === undefined)
      throw ec2Error("MissingParameter", "The request must contain the parameter MaxCount");
    if (min < 1 || max < min) {
      throw ec2Error(
        "InvalidParameterValue",
        `Invalid value '${max}' for maxCount. Must be at least minCount (${min})`,
      );
    }
    const img = this.images.find((i) => i.ImageId === input.ImageId);
    if (!img) throw ec2Error("InvalidAMIID.NotFound", `The image id '[${input.ImageId}]' does not exist`);
    const subnet = input.SubnetId ? this.subnetOf(input.SubnetId) : this.subnets.find((s) => s.DefaultForAz);
    if (!subnet) throw ec2Error("VPCIdNotSpecified", "No default VPC for this user");
    const groups = (input.SecurityGroupIds ?? []).map((id) => {
      const g = this.groups.find((x) => x.GroupId === id);
      if (!g)
        throw ec2Error(
          "InvalidGroup.NotFound",
          `The security group '${id}' does not exist in VPC '${subnet.VpcId}'`,
        );
      if (g.VpcId !== subnet.VpcId) {
        throw ec2Error(
          "InvalidParameter",
          `Security group ${g.GroupId} and subnet ${subnet.SubnetId} belong to different networks.`,
        );
      }
      return g;
    });
    const type = input.InstanceType ?? "m1.small";
    if (!/^[a-z][a-z0-9-]*\.[a-z0-9]+$/.test(type)) {
      throw ec2Error("InvalidParameterValue", `Invalid value '${type}' for InstanceType.`);
    }
    const behavior = input.InstanceInitiatedShutdownBehavior ?? "stop";
    if (behavior !== "stop" && behavior !== "terminate") {
      throw ec2Error(
        "InvalidParameterValue",
        `Invalid value '${behavior}' for instanceInitiatedShutdownBehavior.`,
      );
    }
    let profile: { name: string; arn: string; role: string } | undefined;
    const p = input.IamInstanceProfile;
    if (p?.Arn || p?.Name) {
      const name = p.Name ?? (p.Arn ?? "").split("/").pop() ?? "";
      const known = this.opts.instanceProfiles;
      const role = known ? known[name] : name;
      const arnOk = !p.Arn || /^arn:aws:iam::\d{12}:instance-profile\/.+/.test(p.Arn);
      if (!role || !arnOk) {
        throw ec2Error(
          "InvalidParameterValue",
          p.Arn
            ? `Value (${p.Arn}) for parameter iamInstanceProfile.arn is invalid. Invalid IAM Instance Profile ARN`
            : `Value (${p.Name}) for parameter iamInstanceProfile.name is invalid. Invalid IAM Instance Profile name`,
        );
      }
      profile = { name, arn: p.Arn ?? arn.instanceProfile(name), role };
    }
    let userData: string | undefined;
    if (input.UserData !== undefined) {
      const raw = Buffer.from(input.UserData, "base64");
      if (
        raw.toString("base64").replace(/=+$/, "") !== input.UserData.replace(/\s/g, "").replace(/=+$/, "")
      ) {
        throw ec2Error("InvalidParameterValue", "Invalid BASE64 encoding of user data.");
      }
      if (raw.length > USER_DATA_LIMIT) {
        throw ec2Error("InvalidParameterValue", `User data is limited to ${USER_DATA_LIMIT} bytes`);
      }
      userData = raw.toString("utf8");
    }
    const instanceTags = this.tagsFor(input.TagSpecifications, RUN_INSTANCES_TAGGABLE, "instance");
    const volumeTags = this.tagsFor(input.TagSpecifications, RUN_INSTANCES_TAGGABLE, "volume");
    const eniTags = this.tagsFor(input.TagSpecifications, RUN_INSTANCES_TAGGABLE, "network-interface");
    const az = input.Placement?.AvailabilityZone ?? subnet.AvailabilityZone ?? FAKE_AZ;
    const rootDevice = img.RootDeviceName ?? "/dev/sda1";
    const rootMapping = input.BlockDeviceMappings?.find((m) => m.DeviceName === rootDevice)?.Ebs;
    const imageRoot = img.BlockDeviceMappings?.find((m) => m.DeviceName === rootDevice)?.Ebs;
    const volume = {
      size: rootMapping?.VolumeSize ?? imageRoot?.VolumeSize ?? 8,
      type: rootMapping?.VolumeType ?? imageRoot?.VolumeType ?? "gp3",
      encrypted: rootMapping?.Encrypted ?? false,
      deleteOnTermination: rootMapping?.DeleteOnTermination ?? imageRoot?.DeleteOnTermination ?? true,
    };
    if (imageRoot?.VolumeSize !== undefined && volume.size < imageRoot.VolumeSize) {
      throw ec2Error(
        "InvalidBlockDeviceMapping",
        `Volume of size ${volume.size}GB is smaller than snapshot, expect size >= ${imageRoot.VolumeSize}GB`,
      );
    }
    const vpcArn = arn.ec2("vpc", subnet.VpcId as string, this.region);
    const subnetArn = arn.ec2("subnet", subnet.SubnetId as string, this.region);
    const auth: AuthRequest[] = [
      {
        action: "ec2:RunInstances",
        resource: arn.ec2("instance", "*", this.region),
        context: this.ctx({
          ...requestTags(instanceTags),
          "ec2:InstanceType": type,
          "ec2:AvailabilityZone": az,
          "ec2:Tenancy": input.Placement?.Tenancy ?? "default",
          "ec2:RootDeviceType": "ebs",
          ...(profile ? { "ec2:InstanceProfile": profile.arn } : {}),
          ...(input.MetadataOptions?.HttpTokens
            ? { "ec2:MetadataHttpTokens": input.MetadataOptions.HttpTokens }
            : {}),
          ...(input.MetadataOptions?.HttpEndpoint
            ? { "ec2:MetadataHttpEndpoint": input.MetadataOptions.HttpEndpoint }
            : {}),
        }),
      },
      {
        action: "ec2:RunInstances",
        resource: arn.ec2("volume", "*", this.region),
        context: this.ctx({
          ...requestTags(volumeTags),
          "ec2:AvailabilityZone": az,
          "ec2:VolumeSize": String(volume.size),
          "ec2:VolumeType": volume.type,
          "ec2:Encrypted": String(volume.encrypted),
        }),
      },
      {
        action: "ec2:RunInstances",
        resource: arn.ec2("image", img.ImageId as string, this.region),
        context: this.ctx({
          "ec2:ImageID": img.ImageId as string,
          "ec2:Owner": img.OwnerId as string,
          "ec2:Public": String(img.Public ?? false),
          "ec2:ImageType": "machine",
          "ec2:RootDeviceType": "ebs",
        }),
      },
      {
        action: "ec2:RunInstances",
        resource: subnetArn,
        context: this.ctx({
          ...resourceTags(subnet.Tags),
          "ec2:SubnetID": subnet.SubnetId as string,
          "ec2:Vpc": vpcArn,
          "ec2:AvailabilityZone": az,
        }),
      },
      ...groups.map((g) => ({
        action: "ec2:RunInstances",
        resource: this.groupArn(g),
        context: this.groupContext(g),
      })),
      {
        action: "ec2:RunInstances",
        resource: arn.ec2("network-interface", "*", this.region),
        context: this.ctx({
          ...requestTags(eniTags),
          "ec2:Subnet": subnetArn,
          "ec2:Vpc": vpcArn,
          "ec2:AvailabilityZone": az,
        }),
      },
    ];
    for (const [t, tags] of [
      ["instance", instanceTags],
      ["volume", volumeTags],
      ["network-interface", eniTags],
    ] as const) {
      if (tags.length === 0) continue;
      auth.push({
        action: "ec2:CreateTags",
        resource: arn.ec2(t, "*", this.region),
        context: this.ctx({ "ec2:CreateAction": "RunInstances", ...requestTags(tags) }),
      });
    }
    if (profile) {
      auth.push({
        action: "iam:PassRole",
        resource: arn.role(profile.role),
        context: { "iam:PassedToService": "ec2.amazonaws.com" },
      });
    }
    await call.authorize(auth);
    this.dryRun(input);

    // Idempotency: the token is bound (per AZ when the request names one, else per Region) to the reservation and
    // to every parameter but the token itself.
    const token = input.ClientToken;
    const params = JSON.stringify(canonical({ ...input, ClientToken: undefined, DryRun: undefined }));
    const tokenKey = token
      ? `${input.SubnetId || input.Placement?.AvailabilityZone ? az : this.region}/${token}`
      : undefined;
    if (tokenKey) {
      const earlier = this.tokens.get(tokenKey);
      if (earlier) {
        if (earlier.params !== params) {
          throw ec2Error(
            "IdempotentParameterMismatch",
            "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).",
          );
        }
        return this.reservation(
          earlier.reservationId,
          earlier.ids.map((id) => this.get(id)),
        );
      }
    }
    if (this.opts.vcpuLimit !== undefined) {
      const used = [...this.instances.values()]
        .filter((i) => ["pending", "running", "stopping", "shutting-down"].includes(this.stateOf(i)))
        .reduce((n, i) => n + vcpusOf(i.instance.InstanceType ?? ""), 0);
      const fits = Math.floor((this.opts.vcpuLimit - used) / vcpusOf(type));
      if (fits < min) {
        throw ec2Error(
          "VcpuLimitExceeded",
          `You have requested more vCPU capacity than your current vCPU limit of ${this.opts.vcpuLimit} allows for the instance bucket that the specified instance type belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to this limit.`,
        );
      }
    }

    const reservationId = newId("r");
    const launched: FakeInstance[] = [];
    for (let index = 0; index < max; index++) {
      const id = newId("i");
      const n = this.nextIp++;
      const volumeId = newId("vol");
      const inst = this.createInstance(id, reservationId, {
        InstanceId: id,
        ImageId: img.ImageId,
        InstanceType: type as Instance["InstanceType"],
        State: { Code: 0, Name: "pending" } as InstanceState,
        StateTransitionReason: "",
        SubnetId: subnet.SubnetId,
        VpcId: subnet.VpcId,
        Placement: { AvailabilityZone: az, Tenancy: "default" },
        PrivateIpAddress: this.privateIp(n),
        PrivateDnsName: `ip-${this.privateIp(n).replace(/\./g, "-")}.${this.region}.compute.internal`,
        SecurityGroups: groups.map((g) => ({ GroupId: g.GroupId, GroupName: g.GroupName })),
        Tags: structuredClone(instanceTags),
        LaunchTime: new Date(),
        AmiLaunchIndex: index,
        Architecture: img.Architecture,
        Hypervisor: "xen",
        VirtualizationType: "hvm",
        RootDeviceName: rootDevice,
        RootDeviceType: "ebs",
        EbsOptimized: input.EbsOptimized ?? false,
        EnaSupport: true,
        Monitoring: { State: "disabled" },
        PlatformDetails: "Linux/UNIX",
        BlockDeviceMappings: [
          {
            DeviceName: rootDevice,
            Ebs: {
              VolumeId: volumeId,
              Status: "attached",
              AttachTime: new Date(),
              DeleteOnTermination: volume.deleteOnTermination,
            },
          },
        ],
        MetadataOptions: {
          State: "pending",
          HttpTokens: input.MetadataOptions?.HttpTokens ?? "optional",
          HttpEndpoint: input.MetadataOptions?.HttpEndpoint ?? "enabled",
          HttpPutResponseHopLimit: input.MetadataOptions?.HttpPutResponseHopLimit ?? 1,
        },
        ...(input.CpuOptions
          ? { CpuOptions: structuredClone(input.CpuOptions) as Instance["CpuOptions"] }
          : {}),
        ...(profile
          ? {
              IamInstanceProfile: {
                Arn: profile.arn,
                Id: `AIPA${randomBytes(8).toString("hex").toUpperCase()}`,
              },
            }
          : {}),
        ...(token ? { ClientToken: token } : {}),
      });
      inst.launch = structuredClone(input);
      inst.shutdownBehavior = behavior;
      if (profile) {
        inst.profile = profile.name;
        inst.role = profile.role;
        inst.agent = "starting";
      }
      if (userData !== undefined) {
        inst.userData = userData;
        const dir = join(inst.root, "var/lib/cloud/instance");
        mkdirSync(dir, { recursive: true });
        writeFileSync(join(dir, "user-data.txt"), userData, { mode: 0o600 });
      }
      this.volumes.set(volumeId, {
        VolumeId: volumeId,
        instanceId: id,
        Size: volume.size,
        VolumeType: volume.type,
        Encrypted: volume.encrypted,
        DeleteOnTermination: volume.deleteOnTermination,
        Tags: structuredClone(volumeTags),
      });
      inst.volumeIds.push(volumeId);
      this.writeImds(inst);
      this.boot(inst);
      launched.push(inst);
    }
    if (tokenKey) this.tokens.set(tokenKey, { reservationId, ids: launched.map((i) => i.id), params });
    return this.reservation(reservationId, launched);
  }

  /**
   * TerminateInstances authorizes each instance with its tags. It is idempotent: a terminated instance is
   * reported terminated again. An id that does not exist fails the whole request.
   */
  private async terminateInstances(input: TerminateInstancesCommandInput, call: Call) {
    const ids = input.InstanceIds ?? [];
    if (ids.length === 0)
      throw ec2Error("MissingParameter", "The request must contain the parameter InstanceId");
    const missing = ids.filter((id) => !this.instances.has(id));
    if (missing.length === 1)
      throw ec2Error("InvalidInstanceID.NotFound", `The instance ID '${missing[0]}' does not exist`);
    if (missing.length > 1) {
      throw ec2Error("InvalidInstanceID.NotFound", `The instance IDs '${missing.join(", ")}' do not exist`);
    }
    const list = ids.map((id) => this.get(id));
    await call.authorize(
      list.map((i) => ({
        action: "ec2:TerminateInstances",
        resource: arn.ec2("instance", i.id, this.region),
        context: this.instanceContext(i),
      })),
    );
    this.dryRun(input);
    return {
      TerminatingInstances: list.map((inst) => {
        const previous = structuredClone(inst.instance.State ?? { Code: 0, Name: "pending" });
        this.powerOff(inst, "user");
        return {
          InstanceId: inst.id,
          PreviousState: previous,
          CurrentState: structuredClone(inst.instance.State),
        };
      }),
    };
  }
}
