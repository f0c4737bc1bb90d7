import { execFileSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  DescribeImagesCommand,
  DescribeInstancesCommand,
  type DescribeInstancesCommandInput,
  EC2Client,
  type Instance,
  type InstanceStateName,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { mockClient } from "aws-sdk-client-mock";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import {
  AwsProvider,
  type AwsProviderOptions,
  clientTokenFor,
  powerOffUserData,
  resolveInstanceType,
} from "../../shared/providers/aws.ts";
import { isVisibleError } from "../../shared/runtime/errors.ts";
import { Workshop, type WorkshopInput } from "../../shared/workshop/schema.ts";

const ec2Mock = mockClient(EC2Client);
const REGION = "eu-west-1";
const SUBNET = "subnet-0123456789abcdef0";
const NOW = new Date("2030-01-01T00:00:00.000Z");
const EXPIRY = "2030-01-01T06:00:00.000Z";

type AwsInput = Extract<WorkshopInput["provider"], { type: "aws" }>;

function spec(provider: Partial<AwsInput> = {}, name = "k8s-intro"): Workshop {
  return Workshop.parse({
    name,
    lab: { source: "./lab", setup: "bash setup.sh" },
    provider: {
      type: "aws",
      count: 3,
      region: REGION,
      subnet_id: SUBNET,
      instance_type: "m7i.large",
      ...provider,
    },
  });
}

function client(region = REGION) {
  return new EC2Client({ region, credentials: { accessKeyId: "AKIDTEST", secretAccessKey: "test" } });
}

function provider(opts: Partial<AwsProviderOptions> = {}) {
  const sleep = vi.fn(async (_ms: number) => {});
  const p = new AwsProvider({ ec2: client(), clock: { now: () => NOW }, sleep, ...opts });
  return { p, sleep };
}

/** Ownership tags as EC2 returns them; `null` leaves ManagedBy out. */
function tags(
  workshop: string | undefined,
  hostId: string | undefined,
  managedBy: string | null = "labfleet",
) {
  return [
    ...(managedBy === null ? [] : [{ Key: "ManagedBy", Value: managedBy }]),
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
 * launches pending instances, and where each sleep lets every pending instance reach running.
 */
function fakeAccount(initial: Instance[] = []) {
  const instances = [...initial];
  let next = 1;
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
  ec2Mock.on(TerminateInstancesCommand).callsFake((input: { InstanceIds: string[] }) => ({
    TerminatingInstances: input.InstanceIds.map((InstanceId) => ({
      InstanceId,
      CurrentState: { Name: "shutting-down" },
    })),
  }));
  const boot = () => {
    for (const i of instances) {
      if (i.State?.Name === "pending") {
        i.State = { Name: "running" };
        i.PublicIpAddress = `203.0.113.${i.InstanceId?.slice(-2)}`;
      }
    }
  };
  return { instances, boot };
}

/** The inputs EC2 received for one command, in order. */
function calls<T>(command: new (...args: never[]) => { input: T }): T[] {
  // biome-ignore lint/suspicious/noExplicitAny: aws-sdk-client-mock's command-class parameter is loosely typed
  return ec2Mock.commandCalls(command as any).map((c) => c.args[0].input as T);
}

const ownerFilters = (workshop: string, hostIds: string[], states: string[]) => [
  { Name: "tag:ManagedBy", Values: ["labfleet"] },
  { Name: "tag:labfleet-workshop", Values: [workshop] },
  { Name: "tag:labfleet-host-id", Values: hostIds },
  { Name: "instance-state-name", Values: states },
];

beforeEach(() => ec2Mock.reset());
afterEach(() => vi.restoreAllMocks());

describe("AwsProvider.validate", () => {
  const { p } = provider();
  const errors = (s: Workshop) => Object.fromEntries(p.validate(s).map((e) => [e.path, e.message]));

  it("accepts a complete spec", () => {
    expect(p.validate(spec())).toEqual([]);
    expect(p.name).toBe("aws");
    expect(p.transport).toBe("ssm");
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
    expect(plan).toEqual([
      { hostId: "student-01", action: "create", detail: `m7i.large, expires ${EXPIRY}` },
      {
        hostId: "student-02",
        action: "reuse",
        detail: "i-0running0000000002 (running, m7i.large), expires 2030-01-01T03:00:00.000Z",
      },
      {
        hostId: "student-03",
        action: "reuse",
        detail: "i-0pending0000000003 (pending, m7i.large), expires 2030-01-01T03:00:00.000Z",
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
    ]);
    expect(calls(RunInstancesCommand)).toEqual([]);
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
    expect(plan).toEqual([
      { hostId: "lab-01", action: "create", detail: "m7i.2xlarge, expires 2030-01-01T01:30:00.000Z" },
      { hostId: "lab-02", action: "create", detail: "m7i.2xlarge, expires 2030-01-01T01:30:00.000Z" },
    ]);
    expect(calls(DescribeInstancesCommand)[0]?.Filters?.[2]).toEqual({
      Name: "tag:labfleet-host-id",
      Values: ["lab-01", "lab-02"],
    });
  });

  it("refuses an invalid spec and a client for another region before calling EC2", async () => {
    fakeAccount();
    const { p } = provider();
    const invalid = await p.plan(spec({ instance_type: "t3.large" })).catch((e: unknown) => e);
    expect(isVisibleError(invalid) && invalid.details.map((d) => d.path)).toEqual(["provider.instance_type"]);
    const elsewhere = new AwsProvider({ ec2: client("us-east-1"), clock: { now: () => NOW } });
    const mismatch = await elsewhere.plan(spec()).catch((e: unknown) => e);
    expect(isVisibleError(mismatch) && mismatch.code).toBe("provider.region_mismatch");
    expect(ec2Mock.calls()).toHaveLength(0);
  });
});

describe("AwsProvider.provision", () => {
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
      { Key: "labfleet-workshop", Value: "k8s-intro" },
      { Key: "labfleet-host-id", Value: "student-01" },
      { Key: "labfleet-expiry", Value: EXPIRY },
      { Key: "Name", Value: "labfleet-k8s-intro-student-01" },
    ];
    expect(runs[0]).toEqual({
      ImageId: "ami-0ccccccccccccccc3",
      InstanceType: "m7i.large",
      SubnetId: SUBNET,
      MinCount: 1,
      MaxCount: 1,
      ClientToken: clientTokenFor("k8s-intro", "student-01", new Date(EXPIRY)),
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
    expect(userData).toContain(`shutdown -P +360 "labfleet: the workshop's time is up"`);
    expect(userData).toContain(`echo ${Date.parse(EXPIRY) / 1000} > "$root/etc/labfleet/deadline"`);

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
    // Lookup by tags, then a poll that still sees pending, one injected sleep, a poll that sees running.
    expect(calls(DescribeInstancesCommand)).toEqual([
      {
        Filters: ownerFilters(
          "k8s-intro",
          ["student-01", "student-02", "student-03"],
          ["pending", "running"],
        ),
      },
      { InstanceIds: ["i-0new0000000000001", "i-0new0000000000002"] },
      { InstanceIds: ["i-0new0000000000001", "i-0new0000000000002"] },
    ]);
    expect(sleep.mock.calls).toEqual([[5000]]);
  });

  it("is idempotent: a second provision launches nothing and a token is stable per workshop, host and launch", async () => {
    const account = fakeAccount();
    const sleep = vi.fn(async (_ms: number) => account.boot());
    const { p } = provider({ sleep });
    const first = await p.provision(spec({ count: 2 }));
    const second = await p.provision(spec({ count: 2 }));
    expect(second).toEqual(first);
    expect(calls(RunInstancesCommand)).toHaveLength(2);
    expect(account.instances).toHaveLength(2);

    const tokens = calls(RunInstancesCommand).map((r) => r.ClientToken);
    ec2Mock.reset();
    fakeAccount();
    await provider({ sleep: async () => {} }).p.provision(spec({ count: 2 }));
    expect(calls(RunInstancesCommand).map((r) => r.ClientToken)).toEqual(tokens);
    expect(new Set(tokens).size).toBe(2);
    for (const t of tokens) expect(t).toMatch(/^labfleet-[0-9a-f]{48}$/);
    // Another workshop, or a later launch after a teardown, never collides with a token EC2 still remembers.
    expect(clientTokenFor("other", "student-01", new Date(EXPIRY))).not.toBe(tokens[0]);
    expect(clientTokenFor("k8s-intro", "student-01", new Date("2030-01-02T06:00:00.000Z"))).not.toBe(
      tokens[0],
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
    expect(calls(DescribeInstancesCommand)[0]?.Filters?.[2]?.Values).toEqual(["student-03"]);
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
    expect(run).not.toHaveProperty("SecurityGroupIds");
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

describe("the dead-man switch user data", () => {
  let dir: string;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), "labfleet-deadman-"));
  });
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  function fakeBin() {
    const bin = join(dir, "bin");
    execFileSync("mkdir", ["-p", bin]);
    for (const cmd of ["shutdown", "systemctl"]) {
      writeFileSync(join(bin, cmd), `#!/bin/sh\necho "${cmd} $*" >> "${join(dir, "calls.log")}"\n`);
      chmodSync(join(bin, cmd), 0o755);
    }
    return { PATH: `${bin}:${process.env.PATH}`, LABFLEET_ROOT: join(dir, "root") };
  }
  const log = () => readFileSync(join(dir, "calls.log"), "utf8").trim().split("\n");

  it("schedules the power-off at launch + ttl_hours and installs the timer fallback", () => {
    const launch = new Date();
    const expiry = new Date(Math.floor((launch.getTime() + 1.5 * 3_600_000) / 1000) * 1000);
    const env = fakeBin();
    execFileSync("bash", ["-c", powerOffUserData(1.5, expiry)], { env });
    expect(log()).toEqual([
      "shutdown -P +90 labfleet: the workshop's time is up",
      "systemctl daemon-reload",
      "systemctl enable --now labfleet-deadman.timer",
    ]);
    const root = env.LABFLEET_ROOT;
    expect(readFileSync(join(root, "etc/labfleet/deadline"), "utf8")).toBe(`${expiry.getTime() / 1000}\n`);
    expect(readFileSync(join(root, "etc/systemd/system/labfleet-deadman.timer"), "utf8")).toMatch(
      /OnBootSec=1min\nOnUnitActiveSec=1min/,
    );
    expect(readFileSync(join(root, "etc/systemd/system/labfleet-deadman.service"), "utf8")).toContain(
      "ExecStart=/usr/local/sbin/labfleet-deadman",
    );

    // The timer's check: nothing before the deadline, a power-off after it, the baked-in deadline when garbled.
    const check = () => execFileSync("sh", [join(root, "usr/local/sbin/labfleet-deadman")], { env });
    check();
    expect(log()).toHaveLength(3);
    writeFileSync(join(root, "etc/labfleet/deadline"), "not-a-time\n");
    check();
    expect(log()).toHaveLength(3);
    writeFileSync(join(root, "etc/labfleet/deadline"), `${Math.floor(launch.getTime() / 1000) - 60}\n`);
    check();
    expect(log()).toEqual([...log().slice(0, 3), "systemctl poweroff"]);
  });

  it("counts whole minutes, never later than the expiry", () => {
    const ud = (h: number) => powerOffUserData(h, NOW);
    expect(ud(6)).toContain("shutdown -P +360 ");
    expect(ud(0.25)).toContain("shutdown -P +15 ");
    expect(ud(168)).toContain("shutdown -P +10080 ");
    expect(ud(1 / 7)).toContain("shutdown -P +8 "); // 8.57 minutes: rounded down
    expect(ud(0.001)).toContain("shutdown -P +1 ");
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
    ]);
    expect(calls(TerminateInstancesCommand)).toEqual([
      { InstanceIds: ["i-0mine000000000001"] },
      { InstanceIds: ["i-0mine000000000002"] },
    ]);
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
    const elsewhere = new AwsProvider({ ec2: client("us-east-1") });
    const err = await elsewhere.deprovision(spec(), ["student-01"]).catch((e: unknown) => e);
    expect(isVisibleError(err) && err.code).toBe("provider.region_mismatch");
    expect(ec2Mock.calls()).toHaveLength(0);
  });
});
