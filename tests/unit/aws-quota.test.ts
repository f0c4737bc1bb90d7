import {
  CreateSecurityGroupCommand,
  DescribeImagesCommand,
  DescribeInstancesCommand,
  DescribeInstanceTypesCommand,
  type DescribeInstanceTypesCommandInput,
  DescribeSubnetsCommand,
  EC2Client,
  type Instance,
  RunInstancesCommand,
} from "@aws-sdk/client-ec2";
import { GetServiceQuotaCommand, ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import { DescribeInstanceInformationCommand, SSMClient } from "@aws-sdk/client-ssm";
import { mockClient } from "aws-sdk-client-mock";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { AwsProvider } from "../../shared/providers/aws.ts";
import { costText, onDemandPricePerHour } from "../../shared/providers/aws-pricing.ts";
import { checkVcpuQuota, vcpuQuotaClassOf } from "../../shared/providers/aws-quota.ts";
import { isVisibleError } from "../../shared/runtime/errors.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { Workshop, type WorkshopInput } from "../../shared/workshop/schema.ts";

const ec2Mock = mockClient(EC2Client);
const ssmMock = mockClient(SSMClient);
const quotasMock = mockClient(ServiceQuotasClient);
const REGION = "us-east-1";
const NOW = new Date("2030-01-01T00:00:00.000Z");
const credentials = { accessKeyId: "AKIDTEST", secretAccessKey: "test" };

type AwsInput = Extract<WorkshopInput["provider"], { type: "aws" }>;

function spec(provider: Partial<AwsInput> = {}): Workshop {
  return Workshop.parse({
    name: "k8s-intro",
    lab: { source: "./lab", setup: "bash setup.sh" },
    provider: {
      type: "aws",
      count: 3,
      region: REGION,
      subnet_id: "subnet-0123456789abcdef0",
      instance_type: "m7i.xlarge",
      security_group_ids: ["sg-0123456789abcdef0"],
      ...provider,
    },
  });
}

const ec2 = () => new EC2Client({ region: REGION, credentials });
const quotas = () => new ServiceQuotasClient({ region: REGION, credentials });
function provider() {
  return new AwsProvider({
    ec2: ec2(),
    ssm: new SSMClient({ region: REGION, credentials }),
    serviceQuotas: quotas(),
    stage: "test",
    clock: { now: () => NOW },
    sleep: vi.fn(async () => {}),
  });
}

function calls<T>(
  command: new (...args: never[]) => { input: T },
  mock: { commandCalls: unknown } = ec2Mock,
): T[] {
  // biome-ignore lint/suspicious/noExplicitAny: aws-sdk-client-mock's command-class parameter is loosely typed
  const m = mock as { commandCalls(c: any): { args: [{ input: unknown }] }[] };
  return m.commandCalls(command).map((c) => c.args[0].input as T);
}

const usageFilters = { Filters: [{ Name: "instance-state-name", Values: ["pending", "running"] }] };
const VCPUS: Record<string, number> = {
  "m7i.large": 2,
  "m7i.xlarge": 4,
  "m7i.4xlarge": 16,
  "c7i.2xlarge": 8,
  "g5.xlarge": 4,
  "p5.48xlarge": 192,
  "dl1.24xlarge": 96,
};
const running = (id: string, type: string, extra: Partial<Instance> = {}): Instance => ({
  InstanceId: id,
  InstanceType: type as Instance["InstanceType"],
  State: { Name: "running" },
  ...extra,
});

/** The account: these instances in use (no labfleet host of the workshop yet), this quota. */
function account(inUse: Instance[], quota: number) {
  ec2Mock.on(DescribeInstancesCommand).resolves({ Reservations: [] });
  ec2Mock.on(DescribeInstancesCommand, usageFilters).resolves({ Reservations: [{ Instances: inUse }] });
  ec2Mock.on(DescribeInstanceTypesCommand).callsFake((i: DescribeInstanceTypesCommandInput) => ({
    InstanceTypes: (i.InstanceTypes ?? []).map((t) => ({
      InstanceType: t,
      VCpuInfo: { DefaultVCpus: VCPUS[t] },
    })),
  }));
  quotasMock.on(GetServiceQuotaCommand).resolves({ Quota: { Value: quota } });
}

beforeEach(() => {
  ec2Mock.reset();
  ssmMock.reset();
  quotasMock.reset();
});

describe("the running On-Demand vCPU quota classes", () => {
  it.each([
    ["m7i.large", "L-1216C47A"],
    ["m7i-flex.xlarge", "L-1216C47A"],
    ["c7gn.xlarge", "L-1216C47A"],
    ["r7iz.large", "L-1216C47A"],
    ["im4gn.large", "L-1216C47A"],
    ["is4gen.large", "L-1216C47A"],
    ["i4i.large", "L-1216C47A"],
    ["a1.large", "L-1216C47A"],
    ["d3en.xlarge", "L-1216C47A"],
    ["h1.2xlarge", "L-1216C47A"],
    ["t3.large", "L-1216C47A"],
    ["z1d.large", "L-1216C47A"],
    ["f2.12xlarge", "L-74FC7D96"],
    ["g5.xlarge", "L-DB2E81BA"],
    ["gr6.4xlarge", "L-DB2E81BA"],
    ["vt1.3xlarge", "L-DB2E81BA"],
    ["p5.48xlarge", "L-417A185B"],
    ["x2idn.16xlarge", "L-7295265B"],
    ["inf2.xlarge", "L-1945791B"],
  ])("%s counts against %s", (type, code) => {
    expect(vcpuQuotaClassOf(type)?.quota).toBe(code);
  });

  it.each(["dl1.24xlarge", "trn1.2xlarge", "hpc7g.4xlarge", "u-6tb1.metal", "mac2.metal"])(
    "%s has no quota class labfleet knows",
    (type) => {
      expect(vcpuQuotaClassOf(type)).toBeUndefined();
    },
  );
});

describe("checkVcpuQuota", () => {
  it("counts pending and running On-Demand instances of the same class only", async () => {
    account(
      [
        running("i-01", "m7i.large"),
        running("i-02", "c7i.2xlarge", { State: { Name: "pending" } }),
        running("i-03", "m7i.large", { InstanceLifecycle: "spot" }),
        running("i-04", "g5.xlarge"),
        running("i-05", "p5.48xlarge", { InstanceLifecycle: "capacity-block" }),
      ],
      32,
    );
    const check = await checkVcpuQuota({
      ec2: ec2(),
      quotas: quotas(),
      region: REGION,
      instanceType: "m7i.xlarge",
      count: 5,
    });
    expect(check).toMatchObject({ status: "fits", perInstance: 4, needed: 20, inUse: 10, quota: 32 });
    expect(calls(GetServiceQuotaCommand, quotasMock)).toEqual([
      { ServiceCode: "ec2", QuotaCode: "L-1216C47A" },
    ]);
    expect(calls(DescribeInstancesCommand)).toEqual([usageFilters]);
    expect(calls(DescribeInstanceTypesCommand)).toEqual([
      { InstanceTypes: ["c7i.2xlarge", "m7i.large", "m7i.xlarge"] },
    ]);
  });

  it("follows DescribeInstances pages", async () => {
    account([], 64);
    ec2Mock
      .on(DescribeInstancesCommand, usageFilters)
      .resolves({ Reservations: [{ Instances: [running("i-01", "m7i.large")] }], NextToken: "page2" });
    ec2Mock
      .on(DescribeInstancesCommand, { ...usageFilters, NextToken: "page2" })
      .resolves({ Reservations: [{ Instances: [running("i-02", "m7i.xlarge")] }] });
    const check = await checkVcpuQuota({
      ec2: ec2(),
      quotas: quotas(),
      region: REGION,
      instanceType: "m7i.large",
      count: 1,
    });
    expect(check).toMatchObject({ status: "fits", inUse: 6, needed: 2 });
  });

  it("is unknown, with the reason, for a family it does not know or a failing call", async () => {
    account([], 64);
    const dl1 = await checkVcpuQuota({
      ec2: ec2(),
      quotas: quotas(),
      region: REGION,
      instanceType: "dl1.24xlarge",
      count: 1,
    });
    expect(dl1).toEqual({
      status: "unknown",
      reason: "labfleet knows no running On-Demand vCPU quota for the dl1 family",
    });
    expect(calls(GetServiceQuotaCommand, quotasMock)).toEqual([]);

    ec2Mock
      .on(DescribeInstanceTypesCommand)
      .rejects(new Error("The following supplied instance types do not exist: [m7i.xlarge]"));
    const types = await checkVcpuQuota({
      ec2: ec2(),
      quotas: quotas(),
      region: REGION,
      instanceType: "m7i.xlarge",
      count: 1,
    });
    expect(types).toEqual({
      status: "unknown",
      reason: "DescribeInstanceTypes: The following supplied instance types do not exist: [m7i.xlarge]",
    });
  });
});

describe("provision stops before creating anything when the quota would not fit", () => {
  it("throws a VisibleError with the figures and how to ask for more", async () => {
    account([running("i-01", "m7i.large"), running("i-02", "c7i.2xlarge")], 16);
    const err = await provider()
      .provision(spec({ count: 3 }))
      .catch((e: unknown) => e);
    expect(isVisibleError(err)).toBe(true);
    if (!isVisibleError(err)) return;
    expect([err.kind, err.code]).toEqual(["conflict", "provider.vcpu_quota_exceeded"]);
    expect(err.message).toBe(
      'not enough EC2 vCPU quota in us-east-1: 3 new m7i.xlarge hosts need 12 vCPUs (4 each), 10 vCPUs of "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances" are already in use, and the quota is 16 (L-1216C47A). ' +
        'Nothing was created. Request an increase to at least 22 in the Service Quotas console (Amazon EC2, "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances") ' +
        "or with: aws service-quotas request-service-quota-increase --region us-east-1 --service-code ec2 --quota-code L-1216C47A --desired-value 22; " +
        "or lower provider.count, pick a smaller instance size, or stop other instances.",
    );
    expect(err.details).toEqual([{ path: "provider.count", message: "12 vCPUs needed, 6 available" }]);
    expect(calls(DescribeImagesCommand)).toEqual([]);
    expect(calls(RunInstancesCommand)).toEqual([]);
    expect(calls(DescribeSubnetsCommand)).toEqual([]);
    expect(calls(CreateSecurityGroupCommand)).toEqual([]);
  });

  it("counts only the hosts still to create: a fleet that exactly fits goes on", async () => {
    account([running("i-01", "m7i.large")], 14);
    ec2Mock
      .on(DescribeImagesCommand)
      .resolves({ Images: [{ ImageId: "ami-0aaaaaaaaaaaaaaa1", RootDeviceName: "/dev/sda1" }] });
    let n = 0;
    ec2Mock.on(RunInstancesCommand).callsFake(() => ({ Instances: [{ InstanceId: `i-0new${++n}` }] }));
    ec2Mock.on(DescribeInstancesCommand, { InstanceIds: ["i-0new1", "i-0new2", "i-0new3"] }).resolves({
      Reservations: [{ Instances: ["i-0new1", "i-0new2", "i-0new3"].map((id) => running(id, "m7i.xlarge")) }],
    });
    ssmMock.on(DescribeInstanceInformationCommand).resolves({
      InstanceInformationList: ["i-0new1", "i-0new2", "i-0new3"].map((InstanceId) => ({
        InstanceId,
        PingStatus: "Online",
      })),
    });
    const hosts = await provider().provision(spec({ count: 3 }));
    expect(hosts.map((h) => h.error)).toEqual([undefined, undefined, undefined]);
    expect(calls(RunInstancesCommand)).toHaveLength(3);
  });
});

describe("when the quota cannot be read", () => {
  const lines: string[] = [];
  beforeEach(() => {
    lines.length = 0;
    setLogSink((line) => lines.push(line), "debug");
  });
  afterEach(() => setLogSink((line) => process.stderr.write(`${line}\n`), "info"));

  const denied = () =>
    quotasMock.on(GetServiceQuotaCommand).rejects(
      Object.assign(new Error("User is not authorized to perform: servicequotas:GetServiceQuota"), {
        name: "AccessDeniedException",
      }),
    );

  it("the plan says it was not checked, and why", async () => {
    account([], 0);
    denied();
    const plan = await provider().plan(spec({ count: 1 }));
    expect(plan).toEqual([
      {
        hostId: "student-01",
        action: "create",
        detail:
          "m7i.xlarge, expires 2030-01-01T06:00:00.000Z, $0.2016/h on demand; vCPU quota not checked (GetServiceQuota L-1216C47A: User is not authorized to perform: servicequotas:GetServiceQuota)",
      },
    ]);
    expect(calls(DescribeInstanceTypesCommand)).toEqual([]);
  });

  it("provision logs a warning and goes on", async () => {
    account([], 0);
    denied();
    ec2Mock.on(DescribeImagesCommand).resolves({ Images: [{ ImageId: "ami-0aaaaaaaaaaaaaaa1" }] });
    ec2Mock.on(RunInstancesCommand).resolves({ Instances: [{ InstanceId: "i-0new1" }] });
    ec2Mock.on(DescribeInstancesCommand, { InstanceIds: ["i-0new1"] }).resolves({
      Reservations: [{ Instances: [running("i-0new1", "m7i.xlarge")] }],
    });
    ssmMock
      .on(DescribeInstanceInformationCommand)
      .resolves({ InstanceInformationList: [{ InstanceId: "i-0new1", PingStatus: "Online" }] });
    const hosts = await provider().provision(spec({ count: 1 }));
    expect(hosts[0]?.error).toBeUndefined();
    expect(calls(RunInstancesCommand)).toHaveLength(1);
    const warning = lines.map((l) => JSON.parse(l)).find((l) => l.level === "warn");
    expect(warning).toMatchObject({
      msg: "the EC2 vCPU quota was not checked; launching anyway",
      workshop: "k8s-intro",
      reason: "GetServiceQuota L-1216C47A: User is not authorized to perform: servicequotas:GetServiceQuota",
    });
  });
});

describe("plan: quota line and cost", () => {
  it("reports the quota line on every host to create, and an exceeded quota without stopping", async () => {
    account([running("i-01", "m7i.large")], 8);
    const plan = await provider().plan(spec({ count: 2, instance_type: undefined, instance_tier: "xlarge" }));
    const line =
      "m7i.4xlarge, expires 2030-01-01T06:00:00.000Z, $0.8064/h on demand; vCPU quota L-1216C47A: 32 needed + 2 in use of 8, EXCEEDED by 26";
    expect(plan).toEqual([
      { hostId: "student-01", action: "create", detail: line },
      { hostId: "student-02", action: "create", detail: line },
    ]);
  });

  it("asks no quota when every host is reused", async () => {
    const tags = (hostId: string) => [
      { Key: "ManagedBy", Value: "labfleet" },
      { Key: "labfleet-stage", Value: "test" },
      { Key: "labfleet-workshop", Value: "k8s-intro" },
      { Key: "labfleet-host-id", Value: hostId },
      { Key: "labfleet-expiry", Value: "2030-01-01T03:00:00.000Z" },
    ];
    account([], 0);
    ec2Mock.on(DescribeInstancesCommand).resolves({
      Reservations: [{ Instances: [running("i-0a", "m7i.large", { Tags: tags("student-01") })] }],
    });
    const plan = await provider().plan(spec({ count: 1 }));
    expect(plan).toEqual([
      {
        hostId: "student-01",
        action: "reuse",
        detail: "i-0a (running, m7i.large), expires 2030-01-01T03:00:00.000Z, $0.1008/h on demand",
      },
    ]);
    expect(calls(GetServiceQuotaCommand, quotasMock)).toEqual([]);
    expect(calls(DescribeInstancesCommand)).toHaveLength(1);
  });

  it("plans a new host for one that only another stage has, and counts theirs as in use", async () => {
    // The quota is the account's in the region: every stage's instances count against it.
    const prod = running("i-0prod", "m7i.xlarge", {
      Tags: [
        { Key: "ManagedBy", Value: "labfleet" },
        { Key: "labfleet-stage", Value: "prod" },
        { Key: "labfleet-workshop", Value: "k8s-intro" },
        { Key: "labfleet-host-id", Value: "student-01" },
      ],
    });
    account([prod], 8);
    // EC2 returns it to the ownership lookup anyway: the provider re-checks the stage tag.
    ec2Mock.on(DescribeInstancesCommand).resolves({ Reservations: [{ Instances: [prod] }] });
    ec2Mock.on(DescribeInstancesCommand, usageFilters).resolves({ Reservations: [{ Instances: [prod] }] });
    const plan = await provider().plan(spec({ count: 1 }));
    expect(plan).toEqual([
      {
        hostId: "student-01",
        action: "create",
        detail:
          "m7i.xlarge, expires 2030-01-01T06:00:00.000Z, $0.2016/h on demand; vCPU quota L-1216C47A: 4 needed + 4 in use of 8, fits",
      },
    ]);
    expect(calls(DescribeInstancesCommand)[0]?.Filters?.slice(0, 2)).toEqual([
      { Name: "tag:ManagedBy", Values: ["labfleet"] },
      { Name: "tag:labfleet-stage", Values: ["test"] },
    ]);
  });

  it("knows the default tiers' prices in the US regions only, and never guesses", () => {
    expect(onDemandPricePerHour("us-east-1", "m7i.large")).toBe(0.1008);
    expect(onDemandPricePerHour("us-west-2", "m7i.2xlarge")).toBe(0.4032);
    expect(onDemandPricePerHour("eu-west-1", "m7i.large")).toBeUndefined();
    expect(onDemandPricePerHour("us-east-1", "m8i.large")).toBeUndefined();
    expect(costText("us-east-2", "m7i.xlarge")).toBe("$0.2016/h on demand");
    expect(costText("ap-south-1", "m7i.xlarge")).toBe("cost unknown");
    expect(costText(undefined, "m7i.xlarge")).toBe("cost unknown");
  });
});
