import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  AuthorizeSecurityGroupIngressCommand,
  type AuthorizeSecurityGroupIngressCommandInput,
  CreateSecurityGroupCommand,
  type CreateSecurityGroupCommandInput,
  DescribeImagesCommand,
  DescribeInstancesCommand,
  type DescribeInstancesCommandInput,
  DescribeInstanceTypesCommand,
  type DescribeInstanceTypesCommandInput,
  DescribeSecurityGroupsCommand,
  type DescribeSecurityGroupsCommandInput,
  DescribeSubnetsCommand,
  type DescribeSubnetsCommandInput,
  EC2Client,
  type Instance,
  type InstanceStateName,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  type SecurityGroup,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { GetServiceQuotaCommand, ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import {
  DescribeInstanceInformationCommand,
  type DescribeInstanceInformationCommandInput,
  SSMClient,
} from "@aws-sdk/client-ssm";
import { mockClient } from "aws-sdk-client-mock";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { FUNCTIONS } from "../../infra/permissions.ts";
import { AwsProvider, type AwsProviderOptions, STAGE_TAG } from "../../shared/providers/aws.ts";
import {
  CLOUD_INIT_WAIT,
  clientTokenFor,
  powerOffUserData,
  resolveInstanceType,
} from "../../shared/providers/aws-launch.ts";
import { isVisibleError } from "../../shared/runtime/errors.ts";
import { MAX_WORKSHOP_HOSTS } from "../../shared/workshop/limits.ts";
import { Workshop, type WorkshopInput } from "../../shared/workshop/schema.ts";

const ec2Mock = mockClient(EC2Client);
const ssmMock = mockClient(SSMClient);
const quotasMock = mockClient(ServiceQuotasClient);
const REGION = "eu-west-1";
const SUBNET = "subnet-0123456789abcdef0";
const VPC = "vpc-0123456789abcdef0";
const OPERATOR = "198.51.100.0/24";
const NOW = new Date("2030-01-01T00:00:00.000Z");
const EXPIRY = "2030-01-01T06:00:00.000Z";
/** The deployment stage of the provider under test; OTHER_STAGE shares its account. */
const STAGE = "test";
const OTHER_STAGE = "prod";
/** The run a provision is part of (ProvisionOptions.attempt). */
const RUN = "run_01J9Z3Q8V6K1M2N3P4R5S6T7V8";

type AwsInput = Extract<WorkshopInput["provider"], { type: "aws" }>;

/** A valid aws spec; without security_group_ids, labfleet manages a group for OPERATOR. */
function spec(provider: Partial<AwsInput> = {}, name = "k8s-intro", uiPorts: number[] = []): Workshop {
  return Workshop.parse({
    name,
    lab: {
      source: "./lab",
      setup: "bash setup.sh",
      ui_ports: uiPorts.map((port) => ({ name: `ui-${port}`, port })),
    },
    provider: {
      type: "aws",
      count: 3,
      region: REGION,
      subnet_id: SUBNET,
      instance_type: "m7i.large",
      ...("security_group_ids" in provider ? {} : { operator_cidrs: [OPERATOR] }),
      ...provider,
    },
  });
}

const credentials = { accessKeyId: "AKIDTEST", secretAccessKey: "test" };
function client(region = REGION) {
  return new EC2Client({ region, credentials });
}

function provider(opts: Partial<AwsProviderOptions> = {}) {
  const sleep = vi.fn(async (_ms: number) => {});
  const p = new AwsProvider({
    ec2: client(),
    ssm: new SSMClient({ region: REGION, credentials }),
    serviceQuotas: new ServiceQuotasClient({ region: REGION, credentials }),
    stage: STAGE,
    clock: { now: () => NOW },
    sleep,
    ...opts,
  });
  return { p, sleep };
}

/** Ownership tags as EC2 returns them; `null` leaves ManagedBy (or the stage tag) out. */
function tags(
  workshop: string | undefined,
  hostId: string | undefined,
  managedBy: string | null = "labfleet",
  stage: string | null = STAGE,
) {
  return [
    ...(managedBy === null ? [] : [{ Key: "ManagedBy", Value: managedBy }]),
    ...(stage === null ? [] : [{ Key: "labfleet-stage", Value: stage }]),
    ...(workshop === undefined ? [] : [{ Key: "labfleet-workshop", Value: workshop }]),
    ...(hostId === undefined ? [] : [{ Key: "labfleet-host-id", Value: hostId }]),
    { Key: "labfleet-expiry", Value: "2030-01-01T03:00:00.000Z" },
  ];
}

function instance(
  id: string,
  state: InstanceStateName,
  t: Instance["Tags"],
  extra: Partial<Instance> = {},
): Instance {
  return { InstanceId: id, State: { Name: state }, InstanceType: "m7i.large", Tags: t, ...extra };
}

/**
 * An account whose DescribeInstances honours tag, state and id filters the way EC2 does, whose RunInstances
 * launches pending instances, and where each sleep lets every pending instance reach running. The filters named
 * in `ignoredFilters` are not applied, so a test can show that the provider re-checks every tag EC2 returns.
 */
function fakeAccount(
  initial: Instance[] = [],
  account: { vcpuQuota?: number; groups?: SecurityGroup[]; ignoredFilters?: string[] } = {},
) {
  const ignored = new Set(account.ignoredFilters ?? []);
  const instances = [...initial];
  const groups = account.groups ?? [];
  let next = 1;
  let nextGroup = 1;
  ec2Mock.on(DescribeSubnetsCommand).callsFake((input: DescribeSubnetsCommandInput) => ({
    Subnets: (input.SubnetIds ?? []).map((SubnetId) => ({ SubnetId, VpcId: VPC })),
  }));
  ec2Mock.on(DescribeSecurityGroupsCommand).callsFake((input: DescribeSecurityGroupsCommandInput) => {
    let found = groups;
    for (const f of input.Filters ?? []) {
      const values = f.Values ?? [];
      if (ignored.has(f.Name as string)) continue;
      if (f.Name === "vpc-id") found = found.filter((g) => values.includes(g.VpcId as string));
      else if (f.Name === "group-name") found = found.filter((g) => values.includes(g.GroupName as string));
      else if (f.Name?.startsWith("tag:")) {
        const key = f.Name.slice(4);
        found = found.filter((g) => values.includes(g.Tags?.find((t) => t.Key === key)?.Value as string));
      } else throw new Error(`unexpected filter ${f.Name}`);
    }
    return { SecurityGroups: structuredClone(found) };
  });
  ec2Mock.on(CreateSecurityGroupCommand).callsFake((input: CreateSecurityGroupCommandInput) => {
    if (groups.some((g) => g.GroupName === input.GroupName && g.VpcId === input.VpcId)) {
      throw Object.assign(new Error("already exists"), { name: "InvalidGroup.Duplicate" });
    }
    const GroupId = `sg-0managed${String(nextGroup++).padStart(8, "0")}`;
    groups.push({
      GroupId,
      GroupName: input.GroupName,
      VpcId: input.VpcId,
      Tags: input.TagSpecifications?.[0]?.Tags ?? [],
      IpPermissions: [],
    });
    return { GroupId };
  });
  ec2Mock
    .on(AuthorizeSecurityGroupIngressCommand)
    .callsFake((input: AuthorizeSecurityGroupIngressCommandInput) => {
      const g = groups.find((x) => x.GroupId === input.GroupId);
      if (!g) throw Object.assign(new Error("no such group"), { name: "InvalidGroup.NotFound" });
      g.IpPermissions = [...(g.IpPermissions ?? []), ...(input.IpPermissions ?? [])];
      return { Return: true };
    });
  ec2Mock.on(DescribeInstanceTypesCommand).callsFake((input: DescribeInstanceTypesCommandInput) => ({
    InstanceTypes: (input.InstanceTypes ?? []).map((t) => ({
      InstanceType: t,
      VCpuInfo: { DefaultVCpus: vcpus(t) },
    })),
  }));
  quotasMock.on(GetServiceQuotaCommand).resolves({ Quota: { Value: account.vcpuQuota ?? 1000 } });
  // The SSM agent of every running instance is online.
  ssmMock
    .on(DescribeInstanceInformationCommand)
    .callsFake((input: DescribeInstanceInformationCommandInput) => {
      const ids = input.Filters?.find((f) => f.Key === "InstanceIds")?.Values ?? [];
      return {
        InstanceInformationList: instances
          .filter((i) => ids.includes(i.InstanceId as string) && i.State?.Name === "running")
          .map((i) => ({ InstanceId: i.InstanceId, PingStatus: "Online" })),
      };
    });
  ec2Mock.on(DescribeInstancesCommand).callsFake((input: DescribeInstancesCommandInput) => {
    let found = instances;
    if (input.InstanceIds) {
      const ids = input.InstanceIds;
      const missing = ids.find((id) => !instances.some((i) => i.InstanceId === id));
      if (missing)
        throw Object.assign(new Error(`The instance ID '${missing}' does not exist`), {
          name: "InvalidInstanceID.NotFound",
        });
      found = found.filter((i) => ids.includes(i.InstanceId as string));
    }
    for (const f of input.Filters ?? []) {
      const values = f.Values ?? [];
      if (ignored.has(f.Name as string)) continue;
      if (f.Name === "instance-state-name")
        found = found.filter((i) => values.includes(i.State?.Name as string));
      else if (f.Name?.startsWith("tag:")) {
        const key = f.Name.slice(4);
        found = found.filter((i) => values.includes(i.Tags?.find((t) => t.Key === key)?.Value as string));
      } else throw new Error(`unexpected filter ${f.Name}`);
    }
    return { Reservations: found.map((i) => ({ Instances: [structuredClone(i)] })) };
  });
  ec2Mock.on(RunInstancesCommand).callsFake((input: RunInstancesCommandInput) => {
    const id = `i-0new${String(next++).padStart(13, "0")}`;
    const t = input.TagSpecifications?.find((s) => s.ResourceType === "instance")?.Tags ?? [];
    instances.push(instance(id, "pending", t, { InstanceType: input.InstanceType }));
    return { Instances: [{ InstanceId: id, State: { Name: "pending" } }] };
  });
  ec2Mock.on(DescribeImagesCommand).resolves({
    Images: [
      {
        ImageId: "ami-0aaaaaaaaaaaaaaa1",
        CreationDate: "2029-03-01T00:00:00.000Z",
        RootDeviceName: "/dev/sda1",
      },
      {
        ImageId: "ami-0ccccccccccccccc3",
        CreationDate: "2029-11-20T00:00:00.000Z",
        RootDeviceName: "/dev/sda1",
      },
      {
        ImageId: "ami-0bbbbbbbbbbbbbbb2",
        CreationDate: "2029-07-15T00:00:00.000Z",
        RootDeviceName: "/dev/sda1",
      },
    ],
  });
  ec2Mock.on(TerminateInstancesCommand).callsFake((input: { InstanceIds: string[] }) => {
    for (const i of instances)
      if (input.InstanceIds.includes(i.InstanceId as string)) i.State = { Name: "shutting-down" };
    return {
      TerminatingInstances: input.InstanceIds.map((InstanceId) => ({
        InstanceId,
        CurrentState: { Name: "shutting-down" },
      })),
    };
  });
  const boot = () => {
    for (const i of instances) {
      if (i.State?.Name === "pending") {
        i.State = { Name: "running" };
        i.PublicIpAddress = `203.0.113.${i.InstanceId?.slice(-2)}`;
      }
    }
  };
  return { instances, boot, groups };
}

/** vCPUs by size, as DescribeInstanceTypes reports them. */
function vcpus(type: string): number {
  const size = type.split(".")[1] ?? "";
  const sizes: Record<string, number> = {
    large: 2,
    xlarge: 4,
    "2xlarge": 8,
    "4xlarge": 16,
    "metal-24xl": 96,
  };
  return sizes[size] ?? 2;
}

/** The inputs EC2 (or SSM, or Service Quotas) received for one command, in order. */
function calls<T>(
  command: new (...args: never[]) => { input: T },
  mock: { commandCalls: unknown } = ec2Mock,
): T[] {
  // biome-ignore lint/suspicious/noExplicitAny: aws-sdk-client-mock's command-class parameter is loosely typed
  const m = mock as { commandCalls(c: any): { args: [{ input: unknown }] }[] };
  return m.commandCalls(command).map((c) => c.args[0].input as T);
}

/** The quota pre-check's DescribeInstances: every pending or running instance of the account. */
const usageFilters = { Filters: [{ Name: "instance-state-name", Values: ["pending", "running"] }] };

const ownerFilters = (workshop: string, hostIds: string[], states: string[]) => [
  { Name: "tag:ManagedBy", Values: ["labfleet"] },
  { Name: "tag:labfleet-stage", Values: [STAGE] },
  { Name: "tag:labfleet-workshop", Values: [workshop] },
  { Name: "tag:labfleet-host-id", Values: hostIds },
  { Name: "instance-state-name", Values: states },
];

beforeEach(() => {
  ec2Mock.reset();
  ssmMock.reset();
  quotasMock.reset();
});
afterEach(() => vi.restoreAllMocks());

describe("AwsProvider.validate", () => {
  const { p } = provider();
  const errors = (s: Workshop) => Object.fromEntries(p.validate(s).map((e) => [e.path, e.message]));

  it("accepts a complete spec", () => {
    expect(p.validate(spec())).toEqual([]);
    expect(p.name).toBe("aws");
    expect(p.transport).toBe("ssm");
  });

  it("takes a conference-sized workshop: 500 hosts, as every provider does", () => {
    expect(p.validate(spec({ count: MAX_WORKSHOP_HOSTS }))).toEqual([]);
  });

  it("reports every missing field with its YAML path at once", () => {
    const e = errors(spec({ region: undefined, subnet_id: undefined, instance_type: undefined }));
    expect(Object.keys(e).sort()).toEqual([
      "provider.instance_type",
      "provider.region",
      "provider.subnet_id",
    ]);
    expect(e["provider.region"]).toMatch(/required/);
    expect(e["provider.subnet_id"]).toMatch(/required/);
    expect(e["provider.instance_type"]).toMatch(
      /instance_type .* or instance_tier \(small, medium, large, xlarge\)/,
    );
  });

  it("refuses malformed ids", () => {
    const e = errors(
      spec({
        region: "Ireland",
        subnet_id: "sub-1",
        ami: "ubuntu",
        security_group_ids: ["sg-0123456789abcdef0", "web"],
      }),
    );
    expect(Object.keys(e).sort()).toEqual([
      "provider.ami",
      "provider.region",
      "provider.security_group_ids[1]",
      "provider.subnet_id",
    ]);
  });

  it.each([
    ["t3.large", /burstable/],
    ["t2.xlarge", /burstable/],
    ["t3a.2xlarge", /burstable/],
    ["t4g.large", /burstable/],
    ["m7i.micro", /too small/],
    ["c5.nano", /too small/],
    ["m5.small", /too small/],
    ["c7g.medium", /too small/],
  ])("refuses %s for lab hosts with the reason", (type, reason) => {
    const e = errors(spec({ instance_type: type }));
    expect(Object.keys(e)).toEqual(["provider.instance_type"]);
    expect(e["provider.instance_type"]).toMatch(/^refused for lab hosts: /);
    expect(e["provider.instance_type"]).toMatch(reason);
  });

  it("maps tiers to fixed-performance types and refuses unknown tiers or both fields", () => {
    expect(resolveInstanceType({ instance_tier: "small" })).toBe("m7i.large");
    expect(resolveInstanceType({ instance_tier: "medium" })).toBe("m7i.xlarge");
    expect(resolveInstanceType({ instance_tier: "large" })).toBe("m7i.2xlarge");
    expect(resolveInstanceType({ instance_tier: "xlarge" })).toBe("m7i.4xlarge");
    expect(resolveInstanceType({ instance_tier: "large", nested_virtualization: true })).toBe("m8i.2xlarge");
    expect(p.validate(spec({ instance_type: undefined, instance_tier: "medium" }))).toEqual([]);
    expect(errors(spec({ instance_type: undefined, instance_tier: "huge" }))).toEqual({
      "provider.instance_tier": 'expected an instance tier: small, medium, large, xlarge; got "huge"',
    });
    expect(Object.keys(errors(spec({ instance_tier: "small" })))).toEqual(["provider.instance_tier"]);
  });

  it("requires a nested-virtualization family when nested_virtualization is on", () => {
    expect(errors(spec({ instance_type: "m7i.large", nested_virtualization: true }))).toEqual({
      "provider.nested_virtualization": expect.stringMatching(/m7i\.large cannot run nested virtualization/),
    });
    for (const ok of ["m8i.large", "c8i.2xlarge", "r8i-flex.xlarge", "c7i.metal-24xl", "m5.metal"]) {
      expect(p.validate(spec({ instance_type: ok, nested_virtualization: true })), ok).toEqual([]);
    }
    expect(
      p.validate(spec({ instance_type: undefined, instance_tier: "small", nested_virtualization: true })),
    ).toEqual([]);
  });

  it("fails closed on values the schema would have refused and on another provider type", () => {
    const s = spec();
    (s.provider as { student_access: string }).student_access = "everyone";
    (s.provider as { volume_size_gib: number }).volume_size_gib = 4;
    expect(errors(s)).toEqual({
      "provider.student_access": 'expected operator or open, got "everyone"',
      "provider.volume_size_gib": "expected a volume size in GiB: a whole number from 8 to 16384, got 4",
    });
    const local = Workshop.parse({
      name: "x",
      lab: { source: "./lab", setup: "true" },
      provider: { type: "local", count: 1 },
    });
    expect(p.validate(local)).toEqual([
      { path: "provider.type", message: "expected aws for the EC2 provider, got local" },
    ]);
  });
});

describe("AwsProvider.plan", () => {
  it("reuses running or pending tagged instances and creates the rest, with the exact tag filters", async () => {
    fakeAccount([
      instance("i-0running0000000002", "running", tags("k8s-intro", "student-02")),
      instance("i-0pending0000000003", "pending", tags("k8s-intro", "student-03")),
      instance("i-0foreign0000000001", "running", tags("other", "student-01")),
      instance("i-0stopped0000000001", "stopped", tags("k8s-intro", "student-01")),
    ]);
    const { p } = provider();
    const plan = await p.plan(spec());
    // The quota line counts the account's three pending or running m7i.large (2 vCPUs each), any workshop.
    expect(plan).toEqual([
      {
        hostId: "student-01",
        action: "create",
        detail: `m7i.large, expires ${EXPIRY}, cost unknown; vCPU quota L-1216C47A: 2 needed + 6 in use of 1000, fits`,
      },
      {
        hostId: "student-02",
        action: "reuse",
        detail: "i-0running0000000002 (running, m7i.large), expires 2030-01-01T03:00:00.000Z, cost unknown",
      },
      {
        hostId: "student-03",
        action: "reuse",
        detail: "i-0pending0000000003 (pending, m7i.large), expires 2030-01-01T03:00:00.000Z, cost unknown",
      },
    ]);
    expect(calls(DescribeInstancesCommand)).toEqual([
      {
        Filters: ownerFilters(
          "k8s-intro",
          ["student-01", "student-02", "student-03"],
          ["pending", "running"],
        ),
      },
      usageFilters,
    ]);
    // A dry run changes nothing: no launch, no security group.
    expect(calls(RunInstancesCommand)).toEqual([]);
    expect(calls(CreateSecurityGroupCommand)).toEqual([]);
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([]);
  });

  it("honours host_id_prefix and the tier map", async () => {
    fakeAccount();
    const { p } = provider();
    const plan = await p.plan(
      spec({
        host_id_prefix: "lab-",
        count: 2,
        instance_type: undefined,
        instance_tier: "large",
        ttl_hours: 1.5,
      }),
    );
    const detail =
      "m7i.2xlarge, expires 2030-01-01T01:30:00.000Z, cost unknown; vCPU quota L-1216C47A: 16 needed + 0 in use of 1000, fits";
    expect(plan).toEqual([
      { hostId: "lab-01", action: "create", detail },
      { hostId: "lab-02", action: "create", detail },
    ]);
    expect(calls(DescribeInstancesCommand)[0]?.Filters?.[3]).toEqual({
      Name: "tag:labfleet-host-id",
      Values: ["lab-01", "lab-02"],
    });
  });

  it("refuses an invalid spec and a client for another region before calling EC2", async () => {
    fakeAccount();
    const { p } = provider();
    const invalid = await p.plan(spec({ instance_type: "t3.large" })).catch((e: unknown) => e);
    expect(isVisibleError(invalid) && invalid.details.map((d) => d.path)).toEqual(["provider.instance_type"]);
    const elsewhere = new AwsProvider({ ec2: client("us-east-1"), stage: STAGE, clock: { now: () => NOW } });
    const mismatch = await elsewhere.plan(spec()).catch((e: unknown) => e);
    expect(isVisibleError(mismatch) && mismatch.code).toBe("provider.region_mismatch");
    expect(ec2Mock.calls()).toHaveLength(0);
  });
});

describe("AwsProvider.provision", () => {
  it("gives a host made after an extend the workshop's recorded expiry, not launch + ttl_hours", async () => {
    const account = fakeAccount([]);
    const { p } = provider({ sleep: vi.fn(async (_ms: number) => account.boot()) });
    // The workshop was extended: it now ends 2 h later than a fresh launch + ttl_hours would.
    const recorded = new Date(Date.parse(EXPIRY) + 2 * 3_600_000);
    await p.provision(spec({ count: 1, security_group_ids: ["sg-0123456789abcdef0"] }), ["student-01"], {
      expiry: recorded,
    });
    const run = calls(RunInstancesCommand)[0];
    const tag = run?.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === "labfleet-expiry")?.Value;
    expect(tag).toBe(recorded.toISOString());
    // The power-off counts down to the recorded expiry (6 h + 2 h away), from the host's clock.
    const userData = Buffer.from(run?.UserData ?? "", "base64").toString("utf8");
    expect(userData).toBe(powerOffUserData(recorded));
    expect(userData).toContain(`echo ${recorded.getTime() / 1000} > "$root/etc/labfleet/deadline"`);
    expect(userData).toContain(`minutes=$(( (${recorded.getTime() / 1000} - $(date +%s)) / 60 ))`);
  });

  it("creates only the missing hosts with every required field, reuses the running one, waits until running", async () => {
    const account = fakeAccount([
      instance("i-0running0000000002", "running", tags("k8s-intro", "student-02"), {
        PublicIpAddress: "198.51.100.2",
      }),
    ]);
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const { p } = provider({
      sleep,
      instanceProfileArn: "arn:aws:iam::123456789012:instance-profile/labfleet-ssm",
    });
    const hosts = await p.provision(
      spec({ labels: { track: "k8s" }, security_group_ids: ["sg-0123456789abcdef0"] }),
      undefined,
      { attempt: RUN },
    );

    expect(hosts).toEqual([
      {
        hostId: "student-01",
        address: "i-0new0000000000001",
        providerId: "i-0new0000000000001",
        publicIp: "203.0.113.01",
        labels: { track: "k8s" },
      },
      {
        hostId: "student-02",
        address: "i-0running0000000002",
        providerId: "i-0running0000000002",
        publicIp: "198.51.100.2",
        labels: { track: "k8s" },
      },
      {
        hostId: "student-03",
        address: "i-0new0000000000002",
        providerId: "i-0new0000000000002",
        publicIp: "203.0.113.02",
        labels: { track: "k8s" },
      },
    ]);

    const runs = calls(RunInstancesCommand);
    expect(
      runs.map((r) => r.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === "labfleet-host-id")?.Value),
    ).toEqual(["student-01", "student-03"]);
    const expectedTags = [
      { Key: "ManagedBy", Value: "labfleet" },
      { Key: "labfleet-stage", Value: STAGE },
      { Key: "labfleet-workshop", Value: "k8s-intro" },
      { Key: "labfleet-host-id", Value: "student-01" },
      { Key: "labfleet-expiry", Value: EXPIRY },
      { Key: "Name", Value: "labfleet-test-k8s-intro-student-01" },
    ];
    expect(runs[0]).toEqual({
      ImageId: "ami-0ccccccccccccccc3",
      InstanceType: "m7i.large",
      SubnetId: SUBNET,
      MinCount: 1,
      MaxCount: 1,
      ClientToken: clientTokenFor(
        { stage: STAGE, workshop: "k8s-intro", hostId: "student-01" },
        new Date(EXPIRY),
        RUN,
      ),
      SecurityGroupIds: ["sg-0123456789abcdef0"],
      IamInstanceProfile: { Arn: "arn:aws:iam::123456789012:instance-profile/labfleet-ssm" },
      MetadataOptions: { HttpTokens: "required", HttpEndpoint: "enabled" },
      InstanceInitiatedShutdownBehavior: "terminate",
      BlockDeviceMappings: [
        {
          DeviceName: "/dev/sda1",
          Ebs: { VolumeSize: 50, VolumeType: "gp3", Encrypted: true, DeleteOnTermination: true },
        },
      ],
      UserData: expect.any(String),
      TagSpecifications: [
        { ResourceType: "instance", Tags: expectedTags },
        { ResourceType: "volume", Tags: expectedTags },
      ],
    });
    const userData = Buffer.from(runs[0]?.UserData ?? "", "base64").toString("utf8");
    expect(userData).toMatch(/^#!\/bin\/bash\n/);
    expect(userData).toBe(powerOffUserData(new Date(EXPIRY)));
    expect(userData).toContain(`shutdown -P +"$minutes" "labfleet: the workshop's time is up"`);
    expect(userData).toContain(`echo ${Date.parse(EXPIRY) / 1000} > "$root/etc/labfleet/deadline"`);
    // The second host: its own tags and token, the same user data.
    expect(runs[1]?.TagSpecifications?.[0]?.Tags).toEqual([
      { Key: "ManagedBy", Value: "labfleet" },
      { Key: "labfleet-stage", Value: STAGE },
      { Key: "labfleet-workshop", Value: "k8s-intro" },
      { Key: "labfleet-host-id", Value: "student-03" },
      { Key: "labfleet-expiry", Value: EXPIRY },
      { Key: "Name", Value: "labfleet-test-k8s-intro-student-03" },
    ]);
    expect(runs[1]?.ClientToken).toBe(
      clientTokenFor({ stage: STAGE, workshop: "k8s-intro", hostId: "student-03" }, new Date(EXPIRY), RUN),
    );
    expect(runs[1]?.UserData).toBe(runs[0]?.UserData);

    // The newest Ubuntu 24.04 image, by CreationDate, from Canonical's account.
    expect(calls(DescribeImagesCommand)).toEqual([
      {
        Owners: ["099720109477"],
        Filters: [
          { Name: "name", Values: ["ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-*"] },
          { Name: "state", Values: ["available"] },
          { Name: "architecture", Values: ["x86_64"] },
        ],
      },
    ]);
    // Lookup by tags, the quota's usage count, then a poll that still sees pending, one injected sleep, a
    // poll that sees running.
    expect(calls(DescribeInstancesCommand)).toEqual([
      {
        Filters: ownerFilters(
          "k8s-intro",
          ["student-01", "student-02", "student-03"],
          ["pending", "running"],
        ),
      },
      usageFilters,
      { InstanceIds: ["i-0new0000000000001", "i-0new0000000000002"] },
      { InstanceIds: ["i-0new0000000000001", "i-0new0000000000002"] },
    ]);
    expect(sleep.mock.calls).toEqual([[5000]]);
    // The quota pre-check for the two new hosts, before any launch.
    expect(calls(GetServiceQuotaCommand, quotasMock)).toEqual([
      { ServiceCode: "ec2", QuotaCode: "L-1216C47A" },
    ]);
    expect(calls(DescribeInstanceTypesCommand)).toEqual([{ InstanceTypes: ["m7i.large"] }]);
    // Every running host's SSM agent is checked (online at once here: no extra sleep).
    expect(calls(DescribeInstanceInformationCommand, ssmMock)).toEqual([
      {
        Filters: [
          {
            Key: "InstanceIds",
            Values: ["i-0running0000000002", "i-0new0000000000001", "i-0new0000000000002"],
          },
        ],
      },
    ]);
    // Bring-your-own groups: labfleet creates and changes no security group.
    expect(calls(DescribeSubnetsCommand)).toEqual([]);
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([]);
    expect(calls(CreateSecurityGroupCommand)).toEqual([]);
  });

  it("is idempotent: a second provision launches nothing and a token is stable per stage, workshop, host, launch and attempt", async () => {
    const account = fakeAccount();
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const { p } = provider({ sleep });
    const first = await p.provision(spec({ count: 2 }), undefined, { attempt: RUN });
    const second = await p.provision(spec({ count: 2 }), undefined, { attempt: RUN });
    expect(second).toEqual(first);
    expect(calls(RunInstancesCommand)).toHaveLength(2);
    expect(account.instances).toHaveLength(2);

    // A retry of the same attempt (the run) asks EC2 for the very same launches: same token, same parameters.
    const launches = calls(RunInstancesCommand);
    const tokens = launches.map((r) => r.ClientToken);
    expect(tokens).toEqual(
      ["student-01", "student-02"].map((hostId) =>
        clientTokenFor({ stage: STAGE, workshop: "k8s-intro", hostId }, new Date(EXPIRY), RUN),
      ),
    );
    ec2Mock.reset();
    fakeAccount();
    await provider({ sleep: async () => {} }).p.provision(spec({ count: 2 }), undefined, { attempt: RUN });
    expect(calls(RunInstancesCommand)).toEqual(launches);
    expect(new Set(tokens).size).toBe(2);
    // EC2 takes a ClientToken of at most 64 ASCII characters.
    for (const t of tokens) expect(t).toMatch(/^labfleet-[0-9a-f]{48}$/);

    // Another attempt (the next run, which may replace a host whose instance is gone) gets tokens of its own.
    ec2Mock.reset();
    fakeAccount();
    await provider({ sleep: async () => {} }).p.provision(spec({ count: 2 }), undefined, {
      attempt: "run_01J9Z3Q8V6K1M2N3P4R5S6T7V9",
    });
    const next = calls(RunInstancesCommand).map((r) => r.ClientToken);
    expect(next).toEqual(
      ["student-01", "student-02"].map((hostId) =>
        clientTokenFor(
          { stage: STAGE, workshop: "k8s-intro", hostId },
          new Date(EXPIRY),
          "run_01J9Z3Q8V6K1M2N3P4R5S6T7V9",
        ),
      ),
    );
    expect(next.filter((t) => tokens.includes(t))).toEqual([]);
  });

  it("names a random attempt for a provision without one: two calls never share a token", async () => {
    const runs: (string | undefined)[][] = [];
    for (let i = 0; i < 2; i++) {
      ec2Mock.reset();
      fakeAccount();
      await provider({ sleep: async () => {} }).p.provision(spec({ count: 2 }));
      runs.push(calls(RunInstancesCommand).map((r) => r.ClientToken));
    }
    const [one = [], two = []] = runs;
    expect(one).toHaveLength(2);
    expect(two).toHaveLength(2);
    for (const t of [...one, ...two]) expect(t).toMatch(/^labfleet-[0-9a-f]{48}$/);
    expect(new Set([...one, ...two]).size).toBe(4);
    // Each is no token of the fixed attempt either.
    const fixed = clientTokenFor(
      { stage: STAGE, workshop: "k8s-intro", hostId: "student-01" },
      new Date(EXPIRY),
      RUN,
    );
    expect([...one, ...two]).not.toContain(fixed);
  });

  it("sends the same launch whenever it is retried: the user data depends on the expiry, not on the clock", async () => {
    // Two provisions of one attempt, an hour apart on the control plane's clock, with the workshop's recorded
    // expiry: EC2 answers a reused token with other parameters IdempotentParameterMismatch, so they must match.
    const launchAt = async (now: Date) => {
      ec2Mock.reset();
      fakeAccount();
      await provider({ clock: { now: () => now }, sleep: async () => {} }).p.provision(
        spec({ count: 1 }),
        undefined,
        { expiry: new Date(EXPIRY), attempt: RUN },
      );
      return calls(RunInstancesCommand);
    };
    const first = await launchAt(NOW);
    const later = await launchAt(new Date(NOW.getTime() + 3_600_000));
    expect(first).toHaveLength(1);
    expect(later).toEqual(first);
  });

  it("derives each token from the stage, workshop, host, expiry and attempt", () => {
    const owner = { stage: STAGE, workshop: "k8s-intro", hostId: "student-01" };
    const token = clientTokenFor(owner, new Date(EXPIRY), RUN);
    expect(token).toMatch(/^labfleet-[0-9a-f]{48}$/);
    expect(clientTokenFor({ ...owner }, new Date(EXPIRY), RUN)).toBe(token);
    const others = [
      clientTokenFor({ ...owner, stage: OTHER_STAGE }, new Date(EXPIRY), RUN),
      clientTokenFor({ ...owner, workshop: "other" }, new Date(EXPIRY), RUN),
      clientTokenFor({ ...owner, hostId: "student-02" }, new Date(EXPIRY), RUN),
      // A later launch after a teardown never collides with a token EC2 still remembers.
      clientTokenFor(owner, new Date("2030-01-02T06:00:00.000Z"), RUN),
      clientTokenFor(owner, new Date(EXPIRY), "run_01J9Z3Q8V6K1M2N3P4R5S6T7V9"),
    ];
    expect(new Set([token, ...others]).size).toBe(6);
    // The fields are separated: moving a character from one field to the next changes the token.
    expect(clientTokenFor({ stage: "te", workshop: "st-k8s", hostId: "h" }, new Date(EXPIRY), RUN)).not.toBe(
      clientTokenFor({ stage: "test", workshop: "-k8s", hostId: "h" }, new Date(EXPIRY), RUN),
    );
  });

  it("provisions only the requested hosts and refuses ids outside the workshop", async () => {
    const account = fakeAccount();
    const { p } = provider({ sleep: vi.fn(async () => account.boot()) });
    const hosts = await p.provision(spec(), ["student-03", "intruder"]);
    expect(hosts.map((h) => [h.hostId, h.error])).toEqual([
      ["student-03", undefined],
      ["intruder", "intruder is not a host of k8s-intro"],
    ]);
    expect(calls(DescribeInstancesCommand)[0]?.Filters?.[3]).toEqual({
      Name: "tag:labfleet-host-id",
      Values: ["student-03"],
    });
    expect(calls(RunInstancesCommand)).toHaveLength(1);
  });

  it("uses the given AMI (its root device, checked to exist) and enables nested virtualization on m8i", async () => {
    const account = fakeAccount();
    ec2Mock.on(DescribeImagesCommand, { ImageIds: ["ami-0fedcba9876543210"] }).resolves({
      Images: [{ ImageId: "ami-0fedcba9876543210", State: "available", RootDeviceName: "/dev/xvda" }],
    });
    const { p } = provider({ sleep: vi.fn(async () => account.boot()) });
    const hosts = await p.provision(
      spec({
        count: 1,
        ami: "ami-0fedcba9876543210",
        instance_type: undefined,
        instance_tier: "small",
        nested_virtualization: true,
        volume_size_gib: 200,
      }),
    );
    expect(hosts[0]?.error).toBeUndefined();
    expect(calls(DescribeImagesCommand)).toEqual([{ ImageIds: ["ami-0fedcba9876543210"] }]);
    const run = calls(RunInstancesCommand)[0];
    expect(run).toMatchObject({
      ImageId: "ami-0fedcba9876543210",
      InstanceType: "m8i.large",
      CpuOptions: { NestedVirtualization: "enabled" },
      BlockDeviceMappings: [{ DeviceName: "/dev/xvda", Ebs: { VolumeSize: 200 } }],
    });
    expect(run).not.toHaveProperty("IamInstanceProfile");
    // Without security_group_ids the host gets the group labfleet manages for the workshop.
    expect(run?.SecurityGroupIds).toEqual(["sg-0managed00000001"]);
  });

  it("looks up the arm64 image for a Graviton type and sets no CpuOptions on bare metal", async () => {
    fakeAccount();
    await provider().p.provision(spec({ count: 1, instance_type: "m7g.large" }), undefined);
    expect(calls(DescribeImagesCommand)[0]?.Filters).toEqual([
      { Name: "name", Values: ["ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-arm64-server-*"] },
      { Name: "state", Values: ["available"] },
      { Name: "architecture", Values: ["arm64"] },
    ]);
    ec2Mock.reset();
    fakeAccount();
    await provider().p.provision(
      spec({ count: 1, instance_type: "c7i.metal-24xl", nested_virtualization: true }),
    );
    expect(calls(RunInstancesCommand)[0]).not.toHaveProperty("CpuOptions");
  });

  it("reports a host whose launch fails or that never runs, and the others go on", async () => {
    const account = fakeAccount();
    ec2Mock
      .on(RunInstancesCommand)
      .rejectsOnce(
        Object.assign(new Error("Insufficient capacity."), { name: "InsufficientInstanceCapacity" }),
      )
      .callsFake((input: RunInstancesCommandInput) => {
        const id = "i-0slow00000000000002";
        account.instances.push(instance(id, "pending", input.TagSpecifications?.[0]?.Tags));
        return { Instances: [{ InstanceId: id }] };
      });
    const sleep = vi.fn(async (_ms: number) => {});
    const { p } = provider({ sleep, waitTimeoutMs: 15_000 });
    const hosts = await p.provision(spec({ count: 2 }));
    expect(hosts).toEqual([
      { hostId: "student-01", address: "", labels: {}, error: "RunInstances: Insufficient capacity." },
      {
        hostId: "student-02",
        address: "i-0slow00000000000002",
        providerId: "i-0slow00000000000002",
        labels: {},
        error: "i-0slow00000000000002 was still pending after 15 s; provision again to keep waiting",
      },
    ]);
    expect(sleep.mock.calls).toEqual([[5000], [5000], [5000]]);
  });

  it("reports an instance that terminates while starting, with EC2's reason", async () => {
    const account = fakeAccount();
    const sleep = vi.fn(async (_ms: number) => {
      for (const i of account.instances) {
        i.State = { Name: "terminated" };
        i.StateReason = { Message: "Client.VolumeLimitExceeded: Volume limit exceeded" };
      }
    });
    const hosts = await provider({ sleep }).p.provision(spec({ count: 1 }));
    expect(hosts[0]?.error).toBe(
      "i-0new0000000000001 is terminated instead of running: Client.VolumeLimitExceeded: Volume limit exceeded",
    );
  });

  it("keeps waiting while a new instance is not yet visible to DescribeInstances", async () => {
    const account = fakeAccount();
    const visible = account.instances;
    ec2Mock
      .on(DescribeInstancesCommand, { InstanceIds: ["i-0new0000000000001"] })
      .rejectsOnce(Object.assign(new Error("does not exist"), { name: "InvalidInstanceID.NotFound" }))
      .resolves({ Reservations: [{ Instances: visible }] });
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep }).p.provision(spec({ count: 1 }));
    expect(hosts[0]?.error).toBeUndefined();
    expect(sleep).toHaveBeenCalledTimes(1);
  });
});

describe("AwsProvider: another stage's hosts in the same account", () => {
  const theirs = () => [
    instance("i-0prod000000000001", "running", tags("k8s-intro", "student-01", "labfleet", OTHER_STAGE)),
    instance("i-0nostage000000002", "running", tags("k8s-intro", "student-02", "labfleet", null)),
  ];

  it.each([
    ["EC2 applies the stage filter", []],
    ["EC2 returns them anyway", ["tag:labfleet-stage"]],
  ])("never reuses them: new hosts are launched (%s)", async (_how, ignoredFilters) => {
    const account = fakeAccount(theirs(), { ignoredFilters });
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const { p } = provider({ sleep });
    const plan = await p.plan(spec({ count: 2, security_group_ids: ["sg-0123456789abcdef0"] }));
    expect(plan.map((i) => [i.hostId, i.action])).toEqual([
      ["student-01", "create"],
      ["student-02", "create"],
    ]);
    const hosts = await p.provision(
      spec({ count: 2, security_group_ids: ["sg-0123456789abcdef0"] }),
      undefined,
      { attempt: RUN },
    );
    expect(hosts.map((h) => [h.hostId, h.address, h.error])).toEqual([
      ["student-01", "i-0new0000000000001", undefined],
      ["student-02", "i-0new0000000000002", undefined],
    ]);
    expect(calls(DescribeInstancesCommand)[0]).toEqual({
      Filters: ownerFilters("k8s-intro", ["student-01", "student-02"], ["pending", "running"]),
    });
    expect(
      calls(RunInstancesCommand).map(
        (r) => r.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === STAGE_TAG)?.Value,
      ),
    ).toEqual([STAGE, STAGE]);
    // Theirs are left as they were.
    expect(account.instances.slice(0, 2).map((i) => [i.InstanceId, i.State?.Name])).toEqual([
      ["i-0prod000000000001", "running"],
      ["i-0nostage000000002", "running"],
    ]);
    expect(calls(TerminateInstancesCommand)).toEqual([]);
  });
});

describe("AwsProvider.provision: the SSM agent wait", () => {
  it("polls DescribeInstanceInformation with backoff until the agent is online", async () => {
    const account = fakeAccount();
    ssmMock
      .on(DescribeInstanceInformationCommand)
      .resolvesOnce({ InstanceInformationList: [] })
      .resolvesOnce({
        InstanceInformationList: [{ InstanceId: "i-0new0000000000001", PingStatus: "ConnectionLost" }],
      })
      .resolves({ InstanceInformationList: [{ InstanceId: "i-0new0000000000001", PingStatus: "Online" }] });
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep }).p.provision(spec({ count: 1 }));
    expect(hosts[0]).toMatchObject({ hostId: "student-01", address: "i-0new0000000000001" });
    expect(hosts[0]?.error).toBeUndefined();
    // One sleep while the instance is pending, then 5 s and 10 s while its agent is not online yet.
    expect(sleep.mock.calls).toEqual([[5000], [5000], [10000]]);
    const byId = { Filters: [{ Key: "InstanceIds", Values: ["i-0new0000000000001"] }] };
    expect(calls(DescribeInstanceInformationCommand, ssmMock)).toEqual([byId, byId, byId]);
  });

  it("gives a host whose agent never comes online an error at the deadline, and the others go on", async () => {
    const account = fakeAccount();
    // Only the first instance ever registers with Systems Manager.
    ssmMock
      .on(DescribeInstanceInformationCommand)
      .callsFake((input: DescribeInstanceInformationCommandInput) => {
        const ids = input.Filters?.[0]?.Values ?? [];
        return {
          InstanceInformationList: ids
            .filter((id) => id === "i-0new0000000000001")
            .map((InstanceId) => ({ InstanceId, PingStatus: "Online" })),
        };
      });
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep, ssmWaitTimeoutMs: 60_000 }).p.provision(spec({ count: 2 }));
    expect(hosts[0]?.error).toBeUndefined();
    expect(hosts[1]).toEqual({
      hostId: "student-02",
      address: "i-0new0000000000002",
      providerId: "i-0new0000000000002",
      publicIp: "203.0.113.02",
      labels: {},
      error:
        "the SSM agent of i-0new0000000000002 was not online after 60 s (not registered with Systems Manager): " +
        "check that the instance profile allows SSM (AmazonSSMManagedInstanceCore) and that the subnet reaches the SSM endpoints " +
        "(a public IP and an internet gateway, a NAT gateway, or VPC endpoints); provision again to keep waiting",
    });
    // Backoff 5, 10, 20 s, then the 25 s left until the 60 s deadline.
    expect(sleep.mock.calls).toEqual([[5000], [5000], [10000], [20000], [25000]]);
    const asked = calls(DescribeInstanceInformationCommand, ssmMock).map((c) => c.Filters?.[0]?.Values);
    expect(asked).toEqual([
      ["i-0new0000000000001", "i-0new0000000000002"],
      ["i-0new0000000000002"],
      ["i-0new0000000000002"],
      ["i-0new0000000000002"],
      ["i-0new0000000000002"],
    ]);
  });

  it("reports a denied DescribeInstanceInformation on every host at once, without waiting", async () => {
    const account = fakeAccount();
    ssmMock.on(DescribeInstanceInformationCommand).rejects(
      Object.assign(new Error("not authorized to perform ssm:DescribeInstanceInformation"), {
        name: "AccessDeniedException",
      }),
    );
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep }).p.provision(spec({ count: 2 }));
    expect(hosts.map((h) => h.error)).toEqual([
      "DescribeInstanceInformation i-0new0000000000001: not authorized to perform ssm:DescribeInstanceInformation; provision again to keep waiting",
      "DescribeInstanceInformation i-0new0000000000002: not authorized to perform ssm:DescribeInstanceInformation; provision again to keep waiting",
    ]);
    expect(sleep.mock.calls).toEqual([[5000]]);
  });

  it("asks one by one when SSM refuses a request for an instance it does not know yet (InvalidInstanceId)", async () => {
    const account = fakeAccount();
    const invalid = Object.assign(new Error("Instance i-0new0000000000002 is not valid"), {
      name: "InvalidInstanceId",
    });
    ssmMock
      .on(DescribeInstanceInformationCommand)
      .callsFake((input: DescribeInstanceInformationCommandInput) => {
        const ids = input.Filters?.[0]?.Values ?? [];
        if (ids.includes("i-0new0000000000002")) throw invalid;
        return { InstanceInformationList: ids.map((InstanceId) => ({ InstanceId, PingStatus: "Online" })) };
      });
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep, ssmWaitTimeoutMs: 5_000 }).p.provision(spec({ count: 2 }));
    expect(hosts[0]?.error).toBeUndefined();
    expect(hosts[1]?.error).toMatch(
      /^the SSM agent of i-0new0000000000002 was not online after 5 s \(not registered with Systems Manager\)/,
    );
    const asked = calls(DescribeInstanceInformationCommand, ssmMock).map((c) => c.Filters?.[0]?.Values);
    expect(asked).toEqual([
      ["i-0new0000000000001", "i-0new0000000000002"],
      ["i-0new0000000000001"],
      ["i-0new0000000000002"],
      ["i-0new0000000000002"],
    ]);
  });

  it("keeps polling through throttling", async () => {
    const account = fakeAccount();
    ssmMock
      .on(DescribeInstanceInformationCommand)
      .rejectsOnce(Object.assign(new Error("Rate exceeded"), { name: "ThrottlingException" }))
      .resolves({ InstanceInformationList: [{ InstanceId: "i-0new0000000000001", PingStatus: "Online" }] });
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep }).p.provision(spec({ count: 1 }));
    expect(hosts[0]?.error).toBeUndefined();
    expect(sleep.mock.calls).toEqual([[5000], [5000]]);
  });
});

describe("AwsProvider.provision: the managed security group", () => {
  const operatorCidrs = ["198.51.100.0/24", "2001:db8:1::/48"];
  const managedSpec = () => spec({ count: 1, operator_cidrs: operatorCidrs }, "k8s-intro", [8443, 30080]);
  const operatorRange = { CidrIp: "198.51.100.0/24", Description: "labfleet operator" };
  const operatorRange6 = { CidrIpv6: "2001:db8:1::/48", Description: "labfleet operator" };

  it("creates one group in the subnet's VPC that admits only the operator on 22 and the UI ports", async () => {
    const account = fakeAccount();
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep }).p.provision(managedSpec());
    expect(hosts[0]?.error).toBeUndefined();

    expect(calls(DescribeSubnetsCommand)).toEqual([{ SubnetIds: [SUBNET] }]);
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([
      {
        Filters: [
          { Name: "vpc-id", Values: [VPC] },
          { Name: "tag:ManagedBy", Values: ["labfleet"] },
          { Name: "tag:labfleet-stage", Values: [STAGE] },
          { Name: "tag:labfleet-workshop", Values: ["k8s-intro"] },
        ],
      },
    ]);
    expect(calls(CreateSecurityGroupCommand)).toEqual([
      {
        GroupName: "labfleet.test.k8s-intro",
        Description:
          "labfleet workshop k8s-intro: SSH and lab UI ports from operator addresses (managed by labfleet)",
        VpcId: VPC,
        TagSpecifications: [
          {
            ResourceType: "security-group",
            Tags: [
              { Key: "ManagedBy", Value: "labfleet" },
              { Key: "labfleet-stage", Value: STAGE },
              { Key: "labfleet-workshop", Value: "k8s-intro" },
              { Key: "labfleet-created", Value: NOW.toISOString() },
              { Key: "Name", Value: "labfleet.test.k8s-intro" },
            ],
          },
        ],
      },
    ]);
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([
      {
        GroupId: "sg-0managed00000001",
        IpPermissions: [22, 8443, 30080].map((port) => ({
          IpProtocol: "tcp",
          FromPort: port,
          ToPort: port,
          IpRanges: [operatorRange],
          Ipv6Ranges: [operatorRange6],
        })),
      },
    ]);
    expect(calls(RunInstancesCommand)[0]?.SecurityGroupIds).toEqual(["sg-0managed00000001"]);
    // Nothing is open to the world.
    const sources = JSON.stringify(account.groups[0]?.IpPermissions);
    expect(sources).not.toContain("0.0.0.0/0");
    expect(sources).not.toContain("::/0");
  });

  it("is idempotent: a second provision finds the group by its tags and changes nothing", async () => {
    const account = fakeAccount();
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const { p } = provider({ sleep });
    const first = await p.provision(managedSpec());
    const second = await p.provision(managedSpec());
    expect(second).toEqual(first);
    expect(account.groups).toHaveLength(1);
    expect(calls(CreateSecurityGroupCommand)).toHaveLength(1);
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toHaveLength(1);
    expect(calls(DescribeSecurityGroupsCommand)).toHaveLength(2);
    expect(calls(RunInstancesCommand)).toHaveLength(1);
  });

  it("reuses a group created concurrently (InvalidGroup.Duplicate) when it carries the workshop's tags", async () => {
    const account = fakeAccount();
    const theirs: SecurityGroup = {
      GroupId: "sg-0concurrent00001",
      GroupName: "labfleet.test.k8s-intro",
      VpcId: VPC,
      Tags: [
        { Key: "ManagedBy", Value: "labfleet" },
        { Key: "labfleet-stage", Value: STAGE },
        { Key: "labfleet-workshop", Value: "k8s-intro" },
      ],
      IpPermissions: [],
    };
    // The tag lookup misses it (eventual consistency), the creation collides with it.
    ec2Mock
      .on(DescribeSecurityGroupsCommand)
      .resolvesOnce({ SecurityGroups: [] })
      .resolves({ SecurityGroups: [theirs] });
    ec2Mock
      .on(CreateSecurityGroupCommand)
      .rejects(Object.assign(new Error("already exists"), { name: "InvalidGroup.Duplicate" }));
    ec2Mock.on(AuthorizeSecurityGroupIngressCommand).resolves({ Return: true });
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep }).p.provision(managedSpec());
    expect(hosts[0]?.error).toBeUndefined();
    expect(calls(DescribeSecurityGroupsCommand)[1]).toEqual({
      Filters: [
        { Name: "vpc-id", Values: [VPC] },
        { Name: "group-name", Values: ["labfleet.test.k8s-intro"] },
      ],
    });
    expect(calls(AuthorizeSecurityGroupIngressCommand)[0]?.GroupId).toBe("sg-0concurrent00001");
    expect(calls(RunInstancesCommand)[0]?.SecurityGroupIds).toEqual(["sg-0concurrent00001"]);
  });

  it("refuses a group of that name that is not labfleet's: no host is created, and says why", async () => {
    fakeAccount([], {
      groups: [
        { GroupId: "sg-0someoneelse0001", GroupName: "labfleet.test.k8s-intro", VpcId: VPC, Tags: [] },
      ],
    });
    const hosts = await provider().p.provision(managedSpec());
    expect(hosts).toEqual([
      {
        hostId: "student-01",
        address: "",
        labels: {},
        error: `security group: a security group named labfleet.test.k8s-intro already exists in ${VPC} and is not labfleet's for this workshop: rename or delete it, or give provider.security_group_ids`,
      },
    ]);
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([]);
    expect(calls(RunInstancesCommand)).toEqual([]);
  });

  const groupOf = (
    id: string,
    name: string,
    stage: string | null,
    workshop = "k8s-intro",
  ): SecurityGroup => ({
    GroupId: id,
    GroupName: name,
    VpcId: VPC,
    Tags: [
      { Key: "ManagedBy", Value: "labfleet" },
      ...(stage === null ? [] : [{ Key: "labfleet-stage", Value: stage }]),
      { Key: "labfleet-workshop", Value: workshop },
    ],
    IpPermissions: [],
  });

  it("never uses or changes another stage's group of the workshop: it makes its own, under its own name", async () => {
    // Even when EC2 returns them, a group of another stage (or one without a stage tag) is not this stage's.
    const account = fakeAccount([], {
      groups: [
        groupOf("sg-0prod00000000001", "labfleet-prod-k8s-intro", OTHER_STAGE),
        groupOf("sg-0nostage00000001", "labfleet-k8s-intro", null),
      ],
      ignoredFilters: ["tag:labfleet-stage"],
    });
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const hosts = await provider({ sleep }).p.provision(managedSpec());
    expect(hosts[0]?.error).toBeUndefined();
    // Two stages' names cannot collide: the new group's name carries the stage.
    expect(calls(CreateSecurityGroupCommand).map((c) => c.GroupName)).toEqual(["labfleet.test.k8s-intro"]);
    expect(calls(AuthorizeSecurityGroupIngressCommand).map((c) => c.GroupId)).toEqual([
      "sg-0managed00000001",
    ]);
    expect(calls(RunInstancesCommand)[0]?.SecurityGroupIds).toEqual(["sg-0managed00000001"]);
    expect(account.groups.slice(0, 2).map((g) => g.IpPermissions)).toEqual([[], []]);
  });

  it("gives two stages whose names would spell alike with dashes groups of their own", async () => {
    // Stage "test-a" workshop "b" and stage "test" workshop "a-b": the names hold the stage and the workshop
    // apart with dots, so this stage makes its own group and never takes the other's.
    fakeAccount([], {
      groups: [groupOf("sg-0testa000000001", "labfleet.test-a.b", "test-a", "b")],
    });
    await provider().p.provision(spec({ count: 1, operator_cidrs: operatorCidrs }, "a-b", [8443]));
    expect(calls(CreateSecurityGroupCommand).map((c) => c.GroupName)).toEqual(["labfleet.test.a-b"]);
    expect(calls(RunInstancesCommand)[0]?.SecurityGroupIds).not.toContain("sg-0testa000000001");
  });
});

/** The absolute path of a command on this machine's PATH. */
function which(cmd: string): string {
  for (const dir of (process.env.PATH ?? "").split(":")) {
    const path = join(dir, cmd);
    if (dir && existsSync(path)) return path;
  }
  throw new Error(`${cmd} is not on the PATH`);
}

describe("the dead-man switch user data", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "labfleet-deadman-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /**
   * A host in a folder: fake `shutdown` and `systemctl` that log their arguments, and a `date` whose `+%s` is
   * HOST_NOW (the host's own clock) when set.
   */
  function fakeBin(hostNow?: number) {
    const bin = join(dir, "bin");
    mkdirSync(bin, { recursive: true });
    for (const cmd of ["shutdown", "systemctl"]) {
      writeFileSync(join(bin, cmd), `#!/bin/sh\necho "${cmd} $*" >> "${join(dir, "calls.log")}"\n`);
      chmodSync(join(bin, cmd), 0o755);
    }
    writeFileSync(
      join(bin, "date"),
      `#!/bin/sh\nif [ -n "\${HOST_NOW:-}" ] && [ "$*" = "+%s" ]; then echo "$HOST_NOW"; else exec ${which("date")} "$@"; fi\n`,
    );
    chmodSync(join(bin, "date"), 0o755);
    return {
      PATH: `${bin}:${process.env.PATH}`,
      LABFLEET_ROOT: join(dir, "root"),
      ...(hostNow === undefined ? {} : { HOST_NOW: String(hostNow) }),
    };
  }
  const log = () => readFileSync(join(dir, "calls.log"), "utf8").trim().split("\n");
  /** Runs the user data as cloud-init would, stdin closed (Debian's bash reads ~/.bashrc when it is a socket). */
  const runUserData = (script: string, env: Record<string, string>) =>
    execFileSync("bash", ["-c", script], { env, stdio: ["ignore", "pipe", "pipe"] });
  const armed = (minutes: number) => [
    `shutdown -P +${minutes} labfleet: the workshop's time is up`,
    "systemctl daemon-reload",
    "systemctl enable --now labfleet-deadman.timer",
  ];

  it("schedules the power-off at the expiry from the host's own clock and installs the timer fallback", () => {
    const launch = new Date();
    const expiry = new Date(Math.floor((launch.getTime() + 1.5 * 3_600_000) / 1000) * 1000);
    const deadline = expiry.getTime() / 1000;
    const env = fakeBin(deadline - 90 * 60);
    runUserData(powerOffUserData(expiry), env);
    expect(log()).toEqual(armed(90));
    const root = env.LABFLEET_ROOT;
    expect(readFileSync(join(root, "etc/labfleet/deadline"), "utf8")).toBe(`${deadline}\n`);
    expect(readFileSync(join(root, "etc/systemd/system/labfleet-deadman.timer"), "utf8")).toMatch(
      /OnBootSec=1min\nOnUnitActiveSec=1min/,
    );
    expect(readFileSync(join(root, "etc/systemd/system/labfleet-deadman.service"), "utf8")).toContain(
      "ExecStart=/usr/local/sbin/labfleet-deadman",
    );

    // The timer's check (on the real clock): nothing before the deadline, a power-off after it, the baked-in
    // deadline when garbled.
    const real = { PATH: env.PATH, LABFLEET_ROOT: root };
    const check = () => execFileSync("sh", [join(root, "usr/local/sbin/labfleet-deadman")], { env: real });
    check();
    expect(log()).toHaveLength(3);
    writeFileSync(join(root, "etc/labfleet/deadline"), "not-a-time\n");
    check();
    expect(log()).toHaveLength(3);
    writeFileSync(join(root, "etc/labfleet/deadline"), `${Math.floor(launch.getTime() / 1000) - 60}\n`);
    check();
    expect(log()).toEqual([...armed(90), "systemctl poweroff"]);
  });

  it.each([
    ["exactly 90 minutes", 5400, 90],
    ["90 minutes and 59 seconds: rounded down, never later than the expiry", 5459, 90],
    ["a second short of 90 minutes", 5399, 89],
    ["a week", 168 * 3600, 10080],
    ["30 seconds: at least one minute", 30, 1],
    ["a deadline already passed: at least one minute", -600, 1],
  ])("counts whole minutes on the host: %s to go", (_what, left, minutes) => {
    const expiry = new Date("2030-01-01T06:00:00.000Z");
    const deadline = expiry.getTime() / 1000;
    const env = fakeBin(deadline - left);
    runUserData(powerOffUserData(expiry), env);
    expect(log()).toEqual(armed(minutes));
    expect(readFileSync(join(env.LABFLEET_ROOT, "etc/labfleet/deadline"), "utf8")).toBe(`${deadline}\n`);
  });

  it("powers a launched host off at launch + ttl_hours, or at the workshop's recorded (extended) expiry", async () => {
    // What RunInstances sends, run on a host whose clock says the launch time (NOW).
    const launched = async (expiry?: Date) => {
      ec2Mock.reset();
      fakeAccount();
      await provider({ sleep: async () => {} }).p.provision(spec({ count: 1 }), undefined, {
        attempt: RUN,
        ...(expiry ? { expiry } : {}),
      });
      return Buffer.from(calls(RunInstancesCommand)[0]?.UserData ?? "", "base64").toString("utf8");
    };
    const fresh = await launched();
    runUserData(fresh, fakeBin(NOW.getTime() / 1000));
    expect(log()).toEqual(armed(360)); // ttl_hours: 6
    rmSync(join(dir, "calls.log"));
    const extended = await launched(new Date(Date.parse(EXPIRY) + 2 * 3_600_000));
    runUserData(extended, fakeBin(NOW.getTime() / 1000));
    expect(log()).toEqual(armed(480)); // 6 h + 2 h
  });

  it("reads the host's real clock when it runs", () => {
    const expiry = new Date(Math.floor((Date.now() + 2 * 3_600_000) / 1000) * 1000);
    const before = Math.floor(Date.now() / 1000);
    runUserData(powerOffUserData(expiry), fakeBin());
    const after = Math.ceil(Date.now() / 1000);
    const minutes = Number(/^shutdown -P \+(\d+) /.exec(log()[0] ?? "")?.[1]);
    const deadline = expiry.getTime() / 1000;
    expect(minutes).toBeGreaterThanOrEqual(Math.floor((deadline - after) / 60));
    expect(minutes).toBeLessThanOrEqual(Math.floor((deadline - before) / 60));
    expect(log()).toEqual(armed(minutes));
  });

  it("is the same text whenever it is made for one expiry", () => {
    const expiry = new Date(EXPIRY);
    vi.useFakeTimers({ toFake: ["Date"] });
    try {
      vi.setSystemTime(NOW);
      const early = [powerOffUserData(expiry), powerOffUserData(expiry, { awsCli: true })];
      vi.setSystemTime(new Date(NOW.getTime() + 5 * 3_600_000 + 17_000));
      const late = [powerOffUserData(expiry), powerOffUserData(expiry, { awsCli: true })];
      expect(late).toEqual(early);
    } finally {
      vi.useRealTimers();
    }
    expect(powerOffUserData(expiry, { awsCli: false })).toBe(powerOffUserData(expiry));
    expect(powerOffUserData(new Date(Date.parse(EXPIRY) + 60_000))).not.toBe(powerOffUserData(expiry));
  });

  it("installs the AWS CLI only for workshops with operator secrets, after the switch is armed", () => {
    expect(powerOffUserData(NOW)).not.toContain("aws-cli");
    const withCli = powerOffUserData(NOW, { awsCli: true });
    expect(withCli).toContain("command -v aws >/dev/null 2>&1 || snap install aws-cli --classic");
    expect(withCli.indexOf("snap install aws-cli")).toBeGreaterThan(
      withCli.indexOf("systemctl enable --now labfleet-deadman.timer"),
    );
  });
});

describe("the first boot wait (bootWait)", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "labfleet-boot-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  /** Runs the wait on a host whose only commands are a fake `cloud-init` exiting `rc` (none when undefined). */
  function waitOn(rc?: number) {
    const bin = join(dir, "bin");
    mkdirSync(bin, { recursive: true });
    if (rc !== undefined) {
      writeFileSync(
        join(bin, "cloud-init"),
        `#!/bin/sh\necho "cloud-init $*" >> "${join(dir, "calls.log")}"\necho "status: whatever"\nexit ${rc}\n`,
      );
      chmodSync(join(bin, "cloud-init"), 0o755);
    }
    // stdin is /dev/null: Debian's bash reads ~/.bashrc when stdin is a socket (as Node's pipes are).
    const r = spawnSync(which("bash"), ["-c", CLOUD_INIT_WAIT], {
      env: { PATH: bin },
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    });
    const calls = existsSync(join(dir, "calls.log"))
      ? readFileSync(join(dir, "calls.log"), "utf8").trim().split("\n")
      : [];
    return { code: r.status, stderr: r.stderr, calls };
  }

  it("is the provider's wait before a host's first deploy, within DeployHost's 15 minutes", () => {
    expect(provider().p.bootWait).toEqual({ command: CLOUD_INIT_WAIT, timeoutMs: 10 * 60_000 });
    expect(FUNCTIONS.DeployHost.timeout).toBe("15 minutes");
  });

  it("waits for cloud-init and passes when it is done (exit 0)", () => {
    expect(waitOn(0)).toEqual({ code: 0, stderr: "", calls: ["cloud-init status --wait"] });
  });

  it("passes when cloud-init is done with recoverable errors (exit 2): the user data ran", () => {
    expect(waitOn(2)).toEqual({ code: 0, stderr: "", calls: ["cloud-init status --wait"] });
  });

  it("fails with the reason when cloud-init failed (exit 1)", () => {
    expect(waitOn(1)).toEqual({
      code: 1,
      stderr:
        "cloud-init reports that the first boot failed (exit 1): see /var/log/cloud-init-output.log on the host\n",
      calls: ["cloud-init status --wait"],
    });
  });

  it("has nothing to wait for on an image without cloud-init", () => {
    expect(waitOn()).toEqual({ code: 0, stderr: "", calls: [] });
  });
});

describe("AwsProvider.deprovision", () => {
  it("terminates only this workshop's fully tagged instances and skips hosts with none", async () => {
    fakeAccount([
      instance("i-0mine000000000001", "running", tags("k8s-intro", "student-01")),
      instance("i-0mine000000000002", "stopped", tags("k8s-intro", "student-02")),
      instance("i-0dead000000000002", "terminated", tags("k8s-intro", "student-02")),
      instance("i-0other00000000003", "running", tags("other", "student-03")),
      instance("i-0untagged00000003", "running", undefined),
      instance("i-0nomanaged0000003", "running", tags("k8s-intro", "student-03", null)),
    ]);
    const { p } = provider();
    const results = await p.deprovision(spec(), ["student-01", "student-02", "student-03"]);
    expect(results).toEqual([
      { hostId: "student-01", result: "destroyed", detail: "terminated i-0mine000000000001" },
      { hostId: "student-02", result: "destroyed", detail: "terminated i-0mine000000000002" },
      { hostId: "student-03", result: "skipped", detail: "no instance found" },
    ]);
    expect(calls(DescribeInstancesCommand)).toEqual([
      {
        Filters: ownerFilters(
          "k8s-intro",
          ["student-01", "student-02", "student-03"],
          ["pending", "running", "stopping", "stopped", "shutting-down"],
        ),
      },
      // Then: is any instance of the workshop left (any host id)? None: its managed group may go (none here).
      {
        Filters: [
          { Name: "tag:ManagedBy", Values: ["labfleet"] },
          { Name: "tag:labfleet-stage", Values: [STAGE] },
          { Name: "tag:labfleet-workshop", Values: ["k8s-intro"] },
          { Name: "instance-state-name", Values: ["pending", "running", "stopping", "stopped"] },
        ],
      },
    ]);
    // One request for the workshop's instances (TerminateInstances refills 5 requests a second).
    expect(calls(TerminateInstancesCommand)).toEqual([
      { InstanceIds: ["i-0mine000000000001", "i-0mine000000000002"] },
    ]);
  });

  it("terminates 250 hosts in batches of 100 instances, and retries a refused batch host by host", async () => {
    const ids = Array.from({ length: 250 }, (_, i) => `student-${String(i + 1).padStart(3, "0")}`);
    const id = (n: number) => `i-0mine${String(n).padStart(12, "0")}`;
    fakeAccount(ids.map((h, n) => instance(id(n), "running", tags("k8s-intro", h))));
    const refused = id(150);
    ec2Mock.on(TerminateInstancesCommand).callsFake((input: { InstanceIds: string[] }) => {
      if (input.InstanceIds.includes(refused))
        throw Object.assign(new Error("You are not authorized to perform this operation."), {
          name: "UnauthorizedOperation",
        });
      return { TerminatingInstances: [] };
    });
    const results = await provider().p.deprovision(spec({ count: 250 }), ids);
    const sizes = calls(TerminateInstancesCommand).map(
      (c) => (c as { InstanceIds: string[] }).InstanceIds.length,
    );
    // 100, the refused batch of 100, then its hosts one by one (100 calls), then the last 50.
    expect(sizes.slice(0, 2)).toEqual([100, 100]);
    expect(sizes.filter((n) => n === 1)).toHaveLength(100);
    expect(sizes.at(-1)).toBe(50);
    expect(results.filter((r) => r.result === "destroyed")).toHaveLength(249);
    expect(results[150]).toEqual({
      hostId: "student-151",
      result: "error",
      detail: `TerminateInstances ${refused}: You are not authorized to perform this operation.`,
    });
  });

  it("double-checks the tags EC2 returns and never terminates a foreign or partly tagged instance", async () => {
    ec2Mock.on(DescribeInstancesCommand).resolves({
      Reservations: [
        {
          Instances: [
            instance("i-0foreign000000001", "running", tags("other", "student-01")),
            instance("i-0nomanaged0000001", "running", tags("k8s-intro", "student-01", null)),
            instance("i-0wrongowner000001", "running", tags("k8s-intro", "student-01", "someone-else")),
            instance("i-0nohostid00000009", "running", tags("k8s-intro", undefined)),
            instance("i-0mine000000000002", "running", tags("k8s-intro", "student-02")),
          ],
        },
      ],
    });
    ec2Mock.on(TerminateInstancesCommand).resolves({});
    const results = await provider().p.deprovision(spec(), ["student-01", "student-02"]);
    expect(results).toEqual([
      {
        hostId: "student-01",
        result: "error",
        detail:
          'refused to terminate i-0foreign000000001: its labfleet-workshop tag is "other", expected "k8s-intro"; ' +
          "refused to terminate i-0nomanaged0000001: it has no ManagedBy tag; " +
          'refused to terminate i-0wrongowner000001: its ManagedBy tag is "someone-else", expected "labfleet"',
      },
      { hostId: "student-02", result: "destroyed", detail: "terminated i-0mine000000000002" },
    ]);
    expect(calls(TerminateInstancesCommand)).toEqual([{ InstanceIds: ["i-0mine000000000002"] }]);
  });

  it("never terminates another stage's instance, or one without a stage tag, even when EC2 returns it", async () => {
    ec2Mock.on(DescribeInstancesCommand).resolves({
      Reservations: [
        {
          Instances: [
            instance(
              "i-0prod000000000001",
              "running",
              tags("k8s-intro", "student-01", "labfleet", OTHER_STAGE),
            ),
            instance("i-0nostage000000001", "running", tags("k8s-intro", "student-01", "labfleet", null)),
            instance("i-0mine000000000002", "running", tags("k8s-intro", "student-02")),
          ],
        },
      ],
    });
    ec2Mock.on(TerminateInstancesCommand).resolves({});
    const results = await provider().p.deprovision(spec({ security_group_ids: ["sg-0123456789abcdef0"] }), [
      "student-01",
      "student-02",
    ]);
    expect(results).toEqual([
      {
        hostId: "student-01",
        result: "error",
        detail:
          'refused to terminate i-0prod000000000001: its labfleet-stage tag is "prod", expected "test"; ' +
          "refused to terminate i-0nostage000000001: it has no labfleet-stage tag",
      },
      { hostId: "student-02", result: "destroyed", detail: "terminated i-0mine000000000002" },
    ]);
    expect(calls(TerminateInstancesCommand)).toEqual([{ InstanceIds: ["i-0mine000000000002"] }]);
  });

  it("does not see another stage's hosts of the same workshop: nothing of theirs is terminated", async () => {
    const account = fakeAccount([
      instance("i-0prod000000000001", "running", tags("k8s-intro", "student-01", "labfleet", OTHER_STAGE)),
      instance("i-0nostage000000002", "running", tags("k8s-intro", "student-02", "labfleet", null)),
    ]);
    const results = await provider().p.deprovision(spec({ security_group_ids: ["sg-0123456789abcdef0"] }), [
      "student-01",
      "student-02",
    ]);
    expect(results).toEqual([
      { hostId: "student-01", result: "skipped", detail: "no instance found" },
      { hostId: "student-02", result: "skipped", detail: "no instance found" },
    ]);
    expect(calls(TerminateInstancesCommand)).toEqual([]);
    expect(account.instances.map((i) => i.State?.Name)).toEqual(["running", "running"]);
  });

  it("reports a failed termination as an error and a host already shutting down as skipped", async () => {
    fakeAccount([
      instance("i-0mine000000000001", "running", tags("k8s-intro", "student-01")),
      instance("i-0going00000000002", "shutting-down", tags("k8s-intro", "student-02")),
    ]);
    ec2Mock.on(TerminateInstancesCommand).rejects(
      Object.assign(new Error("You are not authorized to perform this operation."), {
        name: "UnauthorizedOperation",
      }),
    );
    const results = await provider().p.deprovision(spec(), ["student-01", "student-02"]);
    expect(results).toEqual([
      {
        hostId: "student-01",
        result: "error",
        detail: "TerminateInstances i-0mine000000000001: You are not authorized to perform this operation.",
      },
      { hostId: "student-02", result: "skipped", detail: "already shutting down: i-0going00000000002" },
    ]);
    expect(calls(TerminateInstancesCommand)).toEqual([{ InstanceIds: ["i-0mine000000000001"] }]);
  });

  it("still tears down a spec whose instance type is no longer accepted, but never in another region", async () => {
    fakeAccount([instance("i-0mine000000000001", "running", tags("k8s-intro", "student-01"))]);
    const results = await provider().p.deprovision(spec({ instance_type: "t3.micro" }), ["student-01"]);
    expect(results[0]?.result).toBe("destroyed");
    ec2Mock.reset();
    const elsewhere = new AwsProvider({ ec2: client("us-east-1"), stage: STAGE });
    const err = await elsewhere.deprovision(spec(), ["student-01"]).catch((e: unknown) => e);
    expect(isVisibleError(err) && err.code).toBe("provider.region_mismatch");
    expect(ec2Mock.calls()).toHaveLength(0);
  });
});
