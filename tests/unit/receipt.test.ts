import {
  DescribeInstancesCommand,
  DescribeSecurityGroupsCommand,
  DescribeVolumesCommand,
  EC2Client,
} from "@aws-sdk/client-ec2";
import { ListSchedulesCommand, SchedulerClient } from "@aws-sdk/client-scheduler";
import { DescribeParametersCommand, SSMClient } from "@aws-sdk/client-ssm";
import { mockClient } from "aws-sdk-client-mock";
import { beforeEach, describe, expect, it } from "vitest";
import { EventBridgeScheduleMirror } from "../../shared/cloud/scheduler.ts";
import { SsmSecretParameters } from "../../shared/cloud/secret-parameters.ts";
import { usageOf } from "../../shared/fleet/receipt.ts";
import { AwsProvider } from "../../shared/providers/aws.ts";
import { Workshop } from "../../shared/workshop/schema.ts";

const credentials = { accessKeyId: "AKIDTEST", secretAccessKey: "test" };
const REGION = "us-east-1";
const END = new Date("2030-01-01T12:00:00.000Z");
const hoursAgo = (h: number) => ({ createdAt: new Date(END.getTime() - h * 3_600_000).toISOString() });

function aws(region: string, type: Record<string, string> = { instance_type: "m7i.large" }) {
  return Workshop.parse({
    name: "k8s-intro",
    lab: { source: "./lab", setup: "bash setup.sh" },
    provider: {
      type: "aws",
      count: 3,
      region,
      subnet_id: "subnet-0123456789abcdef0",
      operator_cidrs: ["198.51.100.0/24"],
      ...type,
    },
  });
}

describe("the receipt's usage", () => {
  it("is host-hours at the built-in on-demand price where labfleet knows it", () => {
    const u = usageOf(aws(REGION), [hoursAgo(6), hoursAgo(6), hoursAgo(5.5)], END);
    expect(u).toEqual({
      hosts: 3,
      hostHours: 17.5,
      instanceType: "m7i.large",
      pricePerHour: 0.1008,
      costUsd: 1.76,
      basis: "m7i.large at $0.1008/h on demand in us-east-1 (list price, Linux; check the bill)",
    });
  });

  it("says the cost is unknown rather than guess, and local hosts cost nothing", () => {
    expect(usageOf(aws("eu-west-1"), [hoursAgo(2)], END)).toEqual({
      hosts: 1,
      hostHours: 2,
      instanceType: "m7i.large",
      basis: "cost unknown: no built-in on-demand price for m7i.large in eu-west-1",
    });
    const local = Workshop.parse({
      name: "demo",
      lab: { source: "./lab", setup: "bash setup.sh" },
      provider: { type: "local", count: 2 },
    });
    expect(usageOf(local, [hoursAgo(1), hoursAgo(1.25)], END)).toEqual({
      hosts: 2,
      hostHours: 2.25,
      costUsd: 0,
      basis: "local hosts cost nothing",
    });
  });
});

describe("the receipt's usage with hosts removed before the teardown", () => {
  const life = (from: number, to: number, instanceType?: string) => ({
    createdAt: new Date(END.getTime() - from * 3_600_000).toISOString(),
    removedAt: new Date(END.getTime() - to * 3_600_000).toISOString(),
    ...(instanceType ? { instanceType } : {}),
  });

  it("counts each removed host from its creation to its removal, and says so", () => {
    // Two hosts still there for 6 h; one scaled down after 2 h; a machine replaced after 1.5 h.
    const u = usageOf(aws(REGION), [hoursAgo(6), hoursAgo(6)], END, [
      life(6, 4, "m7i.large"),
      life(6, 4.5, "m7i.large"),
    ]);
    expect(u).toEqual({
      hosts: 4,
      hostHours: 15.5,
      earlier: { hosts: 2, hostHours: 3.5 },
      instanceType: "m7i.large",
      pricePerHour: 0.1008,
      costUsd: 1.56,
      basis:
        "m7i.large at $0.1008/h on demand in us-east-1 (list price, Linux; check the bill); includes 2 hosts removed before the teardown",
    });
  });

  it("prices each life at its own instance type, and a torn-down record is counted by its life only", () => {
    const u = usageOf(aws(REGION), [hoursAgo(2), { ...hoursAgo(9), state: "torn_down" }], END, [
      life(9, 8, "m7i.xlarge"),
    ]);
    expect(u.hosts).toBe(2);
    expect(u.hostHours).toBe(3);
    expect(u.instanceType).toBe("m7i.large, m7i.xlarge");
    expect(u.pricePerHour).toBeUndefined();
    expect(u.costUsd).toBe(0.4); // 2 h at $0.1008 and 1 h at $0.2016
    expect(u.basis).toContain("each at its on-demand price in us-east-1");
    expect(u.basis).toContain("includes 1 host removed before the teardown");
  });
});

describe("the leftover calls", () => {
  const ec2Mock = mockClient(EC2Client);
  const ssmMock = mockClient(SSMClient);
  const schedulerMock = mockClient(SchedulerClient);
  beforeEach(() => {
    ec2Mock.reset();
    ssmMock.reset();
    schedulerMock.reset();
  });

  it("EC2: by the ownership tags of this stage and workshop, every page, re-checking the tags", async () => {
    const tags = (workshop: string, hostId: string) => [
      { Key: "ManagedBy", Value: "labfleet" },
      { Key: "labfleet-stage", Value: "prod" },
      { Key: "labfleet-workshop", Value: workshop },
      { Key: "labfleet-host-id", Value: hostId },
    ];
    ec2Mock
      .on(DescribeInstancesCommand)
      .resolvesOnce({
        Reservations: [
          {
            Instances: [
              { InstanceId: "i-0aaa", State: { Name: "running" }, Tags: tags("k8s-intro", "student-01") },
            ],
          },
        ],
        NextToken: "p2",
      })
      .resolvesOnce({
        Reservations: [
          {
            Instances: [
              {
                InstanceId: "i-0bbb",
                State: { Name: "shutting-down" },
                Tags: tags("k8s-intro", "student-02"),
              },
            ],
          },
          // A filter's answer is never trusted alone: another workshop's instance is not listed.
          {
            Instances: [
              { InstanceId: "i-0ccc", State: { Name: "running" }, Tags: tags("other", "student-01") },
            ],
          },
        ],
      });
    ec2Mock.on(DescribeVolumesCommand).resolves({
      Volumes: [
        // Goes with its shutting-down instance.
        {
          VolumeId: "vol-0b",
          State: "in-use",
          Attachments: [{ InstanceId: "i-0bbb", DeleteOnTermination: true }],
          Tags: tags("k8s-intro", "student-02"),
        },
        { VolumeId: "vol-0d", State: "available", Attachments: [], Tags: tags("k8s-intro", "student-03") },
      ],
    });
    ec2Mock.on(DescribeSecurityGroupsCommand).resolves({ SecurityGroups: [] });
    const ec2 = new EC2Client({ region: REGION, credentials });
    const provider = new AwsProvider({
      ec2,
      ssm: new SSMClient({ region: REGION, credentials }),
      stage: "prod",
    });
    const left = await provider.leftovers(aws(REGION));
    expect(left.map((l) => `${l.kind} ${l.id} ${l.command}`)).toEqual([
      "instance i-0aaa aws ec2 terminate-instances --region us-east-1 --instance-ids i-0aaa",
      "volume vol-0d aws ec2 delete-volume --region us-east-1 --volume-id vol-0d",
    ]);
    const filters = [
      { Name: "tag:ManagedBy", Values: ["labfleet"] },
      { Name: "tag:labfleet-stage", Values: ["prod"] },
      { Name: "tag:labfleet-workshop", Values: ["k8s-intro"] },
    ];
    const described = ec2Mock.commandCalls(DescribeInstancesCommand).map((c) => c.args[0].input);
    expect(described[1]?.NextToken).toBe("p2");
    expect(described[0]?.Filters?.slice(0, 3)).toEqual(filters);
    expect(ec2Mock.commandCalls(DescribeVolumesCommand)[0]?.args[0].input.Filters).toEqual(filters);
  });

  it("Scheduler and Parameter Store: by name, every page, never a value", async () => {
    schedulerMock
      .on(ListSchedulesCommand)
      .resolvesOnce({ Schedules: [], NextToken: "n" })
      .resolvesOnce({
        Schedules: [{ Name: "labfleet-teardown-k8s-intro", GroupName: "labfleet-prod", State: "ENABLED" }],
      });
    const mirror = new EventBridgeScheduleMirror({
      client: new SchedulerClient({ region: REGION, credentials }),
      group: "labfleet-prod",
      targetArn: "arn:aws:lambda:us-east-1:111122223333:function:sweep",
      roleArn: "arn:aws:iam::111122223333:role/scheduler",
    });
    expect(await mirror.leftover("k8s-intro")).toMatchObject({
      kind: "schedule",
      command:
        "aws scheduler delete-schedule --region us-east-1 --group-name labfleet-prod --name labfleet-teardown-k8s-intro",
    });
    expect(schedulerMock.commandCalls(ListSchedulesCommand).map((c) => c.args[0].input)).toEqual([
      { GroupName: "labfleet-prod", NamePrefix: "labfleet-teardown-k8s-intro" },
      { GroupName: "labfleet-prod", NamePrefix: "labfleet-teardown-k8s-intro", NextToken: "n" },
    ]);

    ssmMock
      .on(DescribeParametersCommand)
      .resolvesOnce({ Parameters: [], NextToken: "t" })
      .resolvesOnce({ Parameters: [] });
    const params = new SsmSecretParameters({
      client: new SSMClient({ region: REGION, credentials }),
      stage: "prod",
    });
    expect(await params.leftover("k8s-intro")).toBeUndefined();
    expect(ssmMock.commandCalls(DescribeParametersCommand).map((c) => c.args[0].input)).toEqual([
      {
        ParameterFilters: [
          { Key: "Name", Option: "Equals", Values: ["/labfleet/prod/workshops/k8s-intro/secrets"] },
        ],
      },
      {
        ParameterFilters: [
          { Key: "Name", Option: "Equals", Values: ["/labfleet/prod/workshops/k8s-intro/secrets"] },
        ],
        NextToken: "t",
      },
    ]);
  });
});
