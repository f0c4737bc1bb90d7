import {
  CreateTagsCommand,
  DeleteSecurityGroupCommand,
  DescribeInstancesCommand,
  DescribeSecurityGroupsCommand,
  EC2Client,
  type Instance,
  type InstanceStateName,
  type SecurityGroup,
  TerminateInstancesCommand,
  type TerminateInstancesCommandInput,
} from "@aws-sdk/client-ec2";
import { ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import { SSMClient } from "@aws-sdk/client-ssm";
import { mockClient } from "aws-sdk-client-mock";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { AwsProvider } from "../../shared/providers/aws.ts";
import { isVisibleError } from "../../shared/runtime/errors.ts";
import { Workshop } from "../../shared/workshop/schema.ts";

const ec2Mock = mockClient(EC2Client);
const REGION = "eu-west-1";
const NOW = new Date("2030-01-01T12:00:00.000Z");
const STAGE = "test";
const credentials = { accessKeyId: "AKIDTEST", secretAccessKey: "test" };

const spec = Workshop.parse({
  name: "k8s-intro",
  lab: { source: "./lab", setup: "bash setup.sh" },
  provider: {
    type: "aws",
    count: 3,
    region: REGION,
    subnet_id: "subnet-0123456789abcdef0",
    instance_type: "m7i.large",
    operator_cidrs: ["198.51.100.0/24"],
  },
});

function provider() {
  return new AwsProvider({
    ec2: new EC2Client({ region: REGION, credentials }),
    ssm: new SSMClient({ region: REGION, credentials }),
    serviceQuotas: new ServiceQuotasClient({ region: REGION, credentials }),
    stage: STAGE,
    clock: { now: () => NOW },
    sleep: vi.fn(async () => {}),
  });
}

function calls<T>(command: new (...args: never[]) => { input: T }): T[] {
  // biome-ignore lint/suspicious/noExplicitAny: aws-sdk-client-mock's command-class parameter is loosely typed
  return ec2Mock.commandCalls(command as any).map((c) => c.args[0].input as T);
}

interface Tags {
  managedBy?: string | null;
  stage?: string | null;
  workshop?: string | null;
  hostId?: string | null;
  expiry?: string | null;
}
/** An instance with labfleet's tags; `null` leaves a tag out. */
function instance(id: string, state: InstanceStateName, t: Tags = {}): Instance {
  const tags: [string, string | null | undefined][] = [
    ["ManagedBy", t.managedBy === undefined ? "labfleet" : t.managedBy],
    ["labfleet-stage", t.stage === undefined ? STAGE : t.stage],
    ["labfleet-workshop", t.workshop === undefined ? "k8s-intro" : t.workshop],
    ["labfleet-host-id", t.hostId === undefined ? "student-01" : t.hostId],
    ["labfleet-expiry", t.expiry === undefined ? "2030-01-01T06:00:00.000Z" : t.expiry],
  ];
  return {
    InstanceId: id,
    State: { Name: state },
    Tags: tags.filter(([, v]) => v !== null).map(([Key, Value]) => ({ Key, Value: Value as string })),
  };
}
const reservations = (instances: Instance[]) => ({ Reservations: [{ Instances: instances }] });

beforeEach(() => ec2Mock.reset());

describe("AwsProvider.extendExpiry", () => {
  it("rewrites the expiry tag only on instances carrying all the ownership tags of this stage and workshop", async () => {
    ec2Mock
      .on(DescribeInstancesCommand)
      .resolves(
        reservations([
          instance("i-0mine000000000001", "running", { hostId: "student-01" }),
          instance("i-0mine000000000002", "stopped", { hostId: "student-02" }),
          instance("i-0foreign00000001", "running", { workshop: "other", hostId: "student-01" }),
          instance("i-0nomanaged000001", "running", { managedBy: null, hostId: "student-01" }),
          instance("i-0wrongowner00002", "running", { managedBy: "someone", hostId: "student-02" }),
          instance("i-0otherstage00001", "running", { stage: "prod", hostId: "student-01" }),
          instance("i-0nostage00000002", "stopped", { stage: null, hostId: "student-02" }),
        ]),
      );
    ec2Mock.on(CreateTagsCommand).resolves({});
    await provider().extendExpiry(
      spec,
      ["student-01", "student-02", "student-01"],
      new Date("2030-01-02T06:00:00.000Z"),
    );
    expect(calls(DescribeInstancesCommand)).toEqual([
      {
        Filters: [
          { Name: "tag:ManagedBy", Values: ["labfleet"] },
          { Name: "tag:labfleet-stage", Values: [STAGE] },
          { Name: "tag:labfleet-workshop", Values: ["k8s-intro"] },
          { Name: "tag:labfleet-host-id", Values: ["student-01", "student-02"] },
          { Name: "instance-state-name", Values: ["pending", "running", "stopping", "stopped"] },
        ],
      },
    ]);
    expect(calls(CreateTagsCommand)).toEqual([
      {
        Resources: ["i-0mine000000000001", "i-0mine000000000002"],
        Tags: [{ Key: "labfleet-expiry", Value: "2030-01-02T06:00:00.000Z" }],
      },
    ]);
  });

  it("tags nothing when the hosts have no instance, and refuses an invalid time before calling EC2", async () => {
    ec2Mock.on(DescribeInstancesCommand).resolves({ Reservations: [] });
    await provider().extendExpiry(spec, ["student-03"], new Date("2030-01-02T06:00:00.000Z"));
    expect(calls(CreateTagsCommand)).toEqual([]);
    ec2Mock.resetHistory();
    const err = await provider()
      .extendExpiry(spec, ["student-01"], new Date("not a time"))
      .catch((e: unknown) => e);
    expect(isVisibleError(err) && err.code).toBe("provider.expiry_invalid");
    expect(ec2Mock.calls()).toHaveLength(0);
  });

  it("fails loudly when EC2 refuses the new tag", async () => {
    ec2Mock.on(DescribeInstancesCommand).resolves(reservations([instance("i-0mine000000000001", "running")]));
    ec2Mock.on(CreateTagsCommand).rejects(new Error("You are not authorized to perform this operation."));
    await expect(
      provider().extendExpiry(spec, ["student-01"], new Date("2030-01-02T06:00:00.000Z")),
    ).rejects.toThrow("You are not authorized to perform this operation.");
  });
});

describe("AwsProvider.sweepExpired", () => {
  const listFilters = {
    Filters: [
      { Name: "tag:ManagedBy", Values: ["labfleet"] },
      { Name: "tag:labfleet-stage", Values: [STAGE] },
      { Name: "instance-state-name", Values: ["pending", "running", "stopping", "stopped", "shutting-down"] },
    ],
  };

  beforeEach(() => {
    ec2Mock.on(DescribeSecurityGroupsCommand).resolves({ SecurityGroups: [] });
  });

  it("terminates only expired labfleet instances of this stage, any workshop; a missing or garbled expiry is an error", async () => {
    ec2Mock.on(DescribeInstancesCommand).resolves(
      reservations([
        instance("i-0expired00000001", "running", { workshop: "k8s-intro", hostId: "student-01" }),
        instance("i-0expired00000002", "stopped", {
          workshop: "other",
          hostId: "lab-07",
          expiry: "2030-01-01T11:59:59Z",
        }),
        instance("i-0exactlynow00003", "pending", {
          hostId: "student-03",
          expiry: "2030-01-01T12:00:00.000Z",
        }),
        instance("i-0future000000004", "running", {
          hostId: "student-04",
          expiry: "2030-01-01T12:00:01.000Z",
        }),
        instance("i-0noexpiry0000005", "running", { hostId: "student-05", expiry: null }),
        instance("i-0garbled00000006", "running", { hostId: "student-06", expiry: "tomorrow" }),
        instance("i-0localtime000007", "running", { hostId: "student-07", expiry: "2030-01-01 06:00" }),
        instance("i-0nohostid0000008", "running", { hostId: null }),
        instance("i-0going0000000009", "shutting-down", { hostId: "student-09" }),
        instance("i-0notours00000010", "running", { managedBy: "someone-else" }),
        // Another stage's expired hosts (or ones without a stage tag) are its own sweeper's: not even listed.
        instance("i-0otherstage00011", "running", { stage: "prod", hostId: "student-11" }),
        instance("i-0nostage00000012", "running", { stage: null, hostId: "student-12" }),
      ]),
    );
    ec2Mock.on(TerminateInstancesCommand).resolves({});
    const swept = await provider().sweepExpired(NOW);
    expect(calls(DescribeInstancesCommand)).toEqual([listFilters]);
    expect(calls(TerminateInstancesCommand)).toEqual([
      { InstanceIds: ["i-0expired00000001", "i-0expired00000002", "i-0exactlynow00003"] },
    ]);
    expect(swept).toEqual([
      {
        providerId: "i-0expired00000001",
        workshop: "k8s-intro",
        hostId: "student-01",
        expiry: "2030-01-01T06:00:00.000Z",
        result: "terminated",
      },
      {
        providerId: "i-0expired00000002",
        workshop: "other",
        hostId: "lab-07",
        expiry: "2030-01-01T11:59:59Z",
        result: "terminated",
      },
      {
        providerId: "i-0exactlynow00003",
        workshop: "k8s-intro",
        hostId: "student-03",
        expiry: "2030-01-01T12:00:00.000Z",
        result: "terminated",
      },
      {
        providerId: "i-0noexpiry0000005",
        workshop: "k8s-intro",
        hostId: "student-05",
        expiry: "",
        result: "error",
        detail: "not terminated: it has no labfleet-expiry tag",
      },
      {
        providerId: "i-0garbled00000006",
        workshop: "k8s-intro",
        hostId: "student-06",
        expiry: "tomorrow",
        result: "error",
        detail: 'not terminated: its labfleet-expiry tag "tomorrow" is not an ISO time',
      },
      {
        providerId: "i-0localtime000007",
        workshop: "k8s-intro",
        hostId: "student-07",
        expiry: "2030-01-01 06:00",
        result: "error",
        detail: 'not terminated: its labfleet-expiry tag "2030-01-01 06:00" is not an ISO time',
      },
      {
        providerId: "i-0nohostid0000008",
        workshop: "k8s-intro",
        hostId: "",
        expiry: "2030-01-01T06:00:00.000Z",
        result: "error",
        detail: "not terminated: it has no labfleet-host-id tag",
      },
    ]);
  });

  it("follows DescribeInstances pages", async () => {
    ec2Mock
      .on(DescribeInstancesCommand, listFilters)
      .resolves({ ...reservations([instance("i-0page1000000001", "running")]), NextToken: "next" });
    ec2Mock
      .on(DescribeInstancesCommand, { ...listFilters, NextToken: "next" })
      .resolves(reservations([instance("i-0page2000000002", "running", { hostId: "student-02" })]));
    ec2Mock.on(TerminateInstancesCommand).resolves({});
    const swept = await provider().sweepExpired(NOW);
    expect(swept.map((s) => [s.providerId, s.result])).toEqual([
      ["i-0page1000000001", "terminated"],
      ["i-0page2000000002", "terminated"],
    ]);
  });

  it("tries each instance alone when a batch is refused, so one refusal spares no other", async () => {
    ec2Mock
      .on(DescribeInstancesCommand)
      .resolves(
        reservations([
          instance("i-0ok0000000000001", "running"),
          instance("i-0refused00000002", "running", { hostId: "student-02" }),
        ]),
      );
    ec2Mock.on(TerminateInstancesCommand).callsFake((input: TerminateInstancesCommandInput) => {
      if (input.InstanceIds?.includes("i-0refused00000002")) {
        throw Object.assign(new Error("You are not authorized to perform this operation."), {
          name: "UnauthorizedOperation",
        });
      }
      return {};
    });
    const swept = await provider().sweepExpired(NOW);
    expect(calls(TerminateInstancesCommand)).toEqual([
      { InstanceIds: ["i-0ok0000000000001", "i-0refused00000002"] },
      { InstanceIds: ["i-0ok0000000000001"] },
      { InstanceIds: ["i-0refused00000002"] },
    ]);
    expect(swept.map((s) => [s.providerId, s.result, s.detail])).toEqual([
      ["i-0ok0000000000001", "terminated", undefined],
      [
        "i-0refused00000002",
        "error",
        "TerminateInstances: You are not authorized to perform this operation.",
      ],
    ]);
  });

  it("deletes the security groups of workshops with no instance left, best effort", async () => {
    ec2Mock
      .on(DescribeInstancesCommand)
      .resolves(
        reservations([
          instance("i-0live0000000001", "running", { workshop: "live", expiry: "2030-01-02T00:00:00.000Z" }),
          instance("i-0justexpired002", "running", { workshop: "ending" }),
          instance("i-0going000000003", "shutting-down", { workshop: "leaving" }),
        ]),
      );
    ec2Mock.on(TerminateInstancesCommand).resolves({});
    const group = (
      id: string,
      workshop: string,
      created?: string,
      stage: string | null = STAGE,
    ): SecurityGroup => ({
      GroupId: id,
      Tags: [
        { Key: "ManagedBy", Value: "labfleet" },
        ...(stage === null ? [] : [{ Key: "labfleet-stage", Value: stage }]),
        { Key: "labfleet-workshop", Value: workshop },
        ...(created ? [{ Key: "labfleet-created", Value: created }] : []),
      ],
    });
    ec2Mock.on(DescribeSecurityGroupsCommand).resolves({
      SecurityGroups: [
        group("sg-0gone0000000001", "gone", "2030-01-01T10:00:00.000Z"),
        group("sg-0live0000000002", "live", "2030-01-01T00:00:00.000Z"),
        group("sg-0ending00000003", "ending", "2030-01-01T00:00:00.000Z"),
        group("sg-0leaving0000004", "leaving", "2030-01-01T00:00:00.000Z"),
        group("sg-0young000000005", "young", "2030-01-01T11:30:00.000Z"),
        group("sg-0busy0000000006", "busy", "2030-01-01T00:00:00.000Z"),
        group("sg-0untagged000007", "old"),
        { GroupId: "sg-0notours000008", Tags: [{ Key: "labfleet-workshop", Value: "gone" }] },
        group("sg-0otherstage0009", "gone", "2030-01-01T00:00:00.000Z", "prod"),
        group("sg-0nostage0000010", "gone", "2030-01-01T00:00:00.000Z", null),
      ],
    });
    ec2Mock.on(DeleteSecurityGroupCommand).resolves({});
    ec2Mock
      .on(DeleteSecurityGroupCommand, { GroupId: "sg-0busy0000000006" })
      .rejects(Object.assign(new Error("resource has a dependent object"), { name: "DependencyViolation" }));
    const swept = await provider().sweepExpired(NOW);
    expect(swept.map((s) => s.providerId)).toEqual(["i-0justexpired002"]);
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([
      {
        Filters: [
          { Name: "tag:ManagedBy", Values: ["labfleet"] },
          { Name: "tag:labfleet-stage", Values: [STAGE] },
        ],
      },
    ]);
    // Kept: a workshop with instances (even one terminated by this very pass, or shutting down), a group
    // younger than an hour, a group without labfleet's tag, and another stage's group or one without a stage
    // tag. In group id order; the busy one is no error.
    expect(calls(DeleteSecurityGroupCommand)).toEqual([
      { GroupId: "sg-0busy0000000006" },
      { GroupId: "sg-0gone0000000001" },
      { GroupId: "sg-0untagged000007" },
    ]);
  });

  it("still returns what it swept when listing security groups fails", async () => {
    ec2Mock.on(DescribeInstancesCommand).resolves(reservations([instance("i-0expired00000001", "running")]));
    ec2Mock.on(TerminateInstancesCommand).resolves({});
    ec2Mock.on(DescribeSecurityGroupsCommand).rejects(new Error("Request limit exceeded."));
    const swept = await provider().sweepExpired(NOW);
    expect(swept.map((s) => s.result)).toEqual(["terminated"]);
    expect(calls(DeleteSecurityGroupCommand)).toEqual([]);
  });
});
