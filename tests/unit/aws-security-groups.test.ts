import {
  AuthorizeSecurityGroupIngressCommand,
  type AuthorizeSecurityGroupIngressCommandInput,
  CreateSecurityGroupCommand,
  DeleteSecurityGroupCommand,
  DescribeInstancesCommand,
  DescribeSecurityGroupsCommand,
  DescribeSubnetsCommand,
  EC2Client,
  type Instance,
  type IpPermission,
  RevokeSecurityGroupIngressCommand,
  type RevokeSecurityGroupIngressCommandInput,
  type SecurityGroup,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import { ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import { DescribeInstanceInformationCommand, SSMClient } from "@aws-sdk/client-ssm";
import { mockClient } from "aws-sdk-client-mock";
import { beforeEach, describe, expect, it, vi } from "vitest";
import { AwsProvider } from "../../shared/providers/aws.ts";
import {
  ManagedSecurityGroups,
  managedGroupName,
  operatorCidrProblem,
  parseCidr,
} from "../../shared/providers/aws-security-groups.ts";
import { isVisibleError } from "../../shared/runtime/errors.ts";
import { Workshop, type WorkshopInput } from "../../shared/workshop/schema.ts";

const ec2Mock = mockClient(EC2Client);
const ssmMock = mockClient(SSMClient);
const REGION = "eu-west-1";
const SUBNET = "subnet-0123456789abcdef0";
const VPC = "vpc-0123456789abcdef0";
const GROUP = "sg-0managed00000001";
const STAGE = "test";
const NOW = new Date("2030-01-01T00:00:00.000Z");
const credentials = { accessKeyId: "AKIDTEST", secretAccessKey: "test" };

type AwsInput = Extract<WorkshopInput["provider"], { type: "aws" }>;

function input(provider: Partial<AwsInput> = {}, uiPorts: number[] = [8443, 30080]): WorkshopInput {
  return {
    name: "k8s-intro",
    lab: {
      source: "./lab",
      setup: "bash setup.sh",
      ui_ports: uiPorts.map((port) => ({ name: `ui-${port}`, port })),
    },
    provider: {
      type: "aws",
      count: 1,
      region: REGION,
      subnet_id: SUBNET,
      instance_type: "m7i.large",
      ...("security_group_ids" in provider ? {} : { operator_cidrs: ["198.51.100.0/24"] }),
      ...provider,
    },
  };
}
const spec = (provider: Partial<AwsInput> = {}, uiPorts?: number[]) =>
  Workshop.parse(input(provider, uiPorts));

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

const ownerTags = [
  { Key: "ManagedBy", Value: "labfleet" },
  { Key: "labfleet-stage", Value: STAGE },
  { Key: "labfleet-workshop", Value: "k8s-intro" },
];
/** The same workshop's tags, made by another stage (or, with null, by no stage). */
const tagsOfStage = (stage: string | null) => [
  { Key: "ManagedBy", Value: "labfleet" },
  ...(stage === null ? [] : [{ Key: "labfleet-stage", Value: stage }]),
  { Key: "labfleet-workshop", Value: "k8s-intro" },
];
/** What find() asks EC2 for: labfleet's groups of this stage (and workshop). */
const groupFilters = {
  Filters: [
    { Name: "tag:ManagedBy", Values: ["labfleet"] },
    { Name: "tag:labfleet-stage", Values: [STAGE] },
    { Name: "tag:labfleet-workshop", Values: ["k8s-intro"] },
  ],
};
const tcp = (port: number, ranges: Partial<IpPermission>): IpPermission => ({
  IpProtocol: "tcp",
  FromPort: port,
  ToPort: port,
  ...ranges,
});
const world = (port: number) =>
  tcp(port, {
    IpRanges: [{ CidrIp: "0.0.0.0/0", Description: "labfleet open access" }],
    Ipv6Ranges: [{ CidrIpv6: "::/0", Description: "labfleet open access" }],
  });
const operator = (port: number, cidr = "198.51.100.0/24") =>
  tcp(port, { IpRanges: [{ CidrIp: cidr, Description: "labfleet operator" }] });

/** One managed group whose rules Authorize and Revoke really change, found by its tags. */
function fakeGroup(permissions: IpPermission[] = [], extra: Partial<SecurityGroup> = {}) {
  const group: SecurityGroup = {
    GroupId: GROUP,
    GroupName: "labfleet.test.k8s-intro",
    VpcId: VPC,
    Tags: ownerTags,
    IpPermissions: structuredClone(permissions),
    ...extra,
  };
  ec2Mock.on(DescribeSubnetsCommand).resolves({ Subnets: [{ SubnetId: SUBNET, VpcId: VPC }] });
  ec2Mock.on(DescribeSecurityGroupsCommand).callsFake(() => ({ SecurityGroups: [structuredClone(group)] }));
  ec2Mock
    .on(AuthorizeSecurityGroupIngressCommand)
    .callsFake((i: AuthorizeSecurityGroupIngressCommandInput) => {
      group.IpPermissions = [...(group.IpPermissions ?? []), ...(i.IpPermissions ?? [])];
      return { Return: true };
    });
  ec2Mock.on(RevokeSecurityGroupIngressCommand).callsFake((i: RevokeSecurityGroupIngressCommandInput) => {
    const gone = (p: IpPermission, cidr: string | undefined) =>
      (i.IpPermissions ?? []).some(
        (r) =>
          r.FromPort === p.FromPort &&
          r.IpProtocol === p.IpProtocol &&
          [
            ...(r.IpRanges ?? []).map((x) => x.CidrIp),
            ...(r.Ipv6Ranges ?? []).map((x) => x.CidrIpv6),
          ].includes(cidr),
      );
    group.IpPermissions = (group.IpPermissions ?? []).map((p) => ({
      ...p,
      IpRanges: (p.IpRanges ?? []).filter((r) => !gone(p, r.CidrIp)),
      Ipv6Ranges: (p.Ipv6Ranges ?? []).filter((r) => !gone(p, r.CidrIpv6)),
    }));
    return { Return: true };
  });
  return group;
}

beforeEach(() => {
  ec2Mock.reset();
  ssmMock.reset();
});

describe("operator_cidrs", () => {
  const p = provider();
  const errors = (s: Workshop) => Object.fromEntries(p.validate(s).map((e) => [e.path, e.message]));

  it("is required without security_group_ids, and refused with them", () => {
    expect(errors(spec({ operator_cidrs: undefined }))).toEqual({
      "provider.operator_cidrs": expect.stringMatching(
        /^expected the operator's addresses as CIDRs .* required without security_group_ids$/,
      ),
    });
    expect(p.validate(spec({ security_group_ids: ["sg-0123456789abcdef0"] }))).toEqual([]);
    expect(
      Object.keys(
        errors(spec({ security_group_ids: ["sg-0123456789abcdef0"], operator_cidrs: ["198.51.100.0/24"] })),
      ),
    ).toEqual(["provider.operator_cidrs"]);
  });

  it("refuses the whole internet, a malformed CIDR and host bits, each with its path", () => {
    const s = spec({ operator_cidrs: ["198.51.100.0/24", "2001:db8::/32"] });
    // What the schema would refuse, set behind its back: validate fails closed.
    (s.provider as { operator_cidrs: string[] }).operator_cidrs = [
      "0.0.0.0/0",
      "::/0",
      "0:0::/0",
      "my-laptop",
      "203.0.113.7",
      "10.1.2.3/8",
      "2001:db8::1/32",
      "203.0.113.7/32",
    ];
    expect(errors(s)).toEqual({
      "provider.operator_cidrs[0]": expect.stringMatching(/^refused: 0\.0\.0\.0\/0 is the whole internet/),
      "provider.operator_cidrs[1]": expect.stringMatching(/^refused: ::\/0 is the whole internet/),
      "provider.operator_cidrs[2]": expect.stringMatching(/^refused: 0:0::\/0 is the whole internet/),
      "provider.operator_cidrs[3]":
        'expected an IPv4 or IPv6 CIDR such as 203.0.113.7/32 or 2001:db8::/64, got "my-laptop"',
      "provider.operator_cidrs[4]": expect.stringMatching(/^expected an IPv4 or IPv6 CIDR/),
      "provider.operator_cidrs[5]":
        "expected a network address: 10.1.2.3/8 has host bits set; write 10.0.0.0/8",
      "provider.operator_cidrs[6]":
        "expected a network address: 2001:db8::1/32 has host bits set; write 2001:db8::/32",
    });
  });

  it("is checked by the schema too: CIDRs only, never /0, at least one", () => {
    const issues = (cidrs: string[]) =>
      Workshop.safeParse(input({ operator_cidrs: cidrs })).error?.issues.map((i) => [
        i.path.join("."),
        i.message,
      ]);
    expect(issues(["0.0.0.0/0"])).toEqual([
      ["provider.operator_cidrs.0", "refused: a /0 is the whole internet; give the operator's own addresses"],
    ]);
    expect(issues(["::/0"])?.[0]?.[0]).toBe("provider.operator_cidrs.0");
    expect(issues(["example.org"])).toEqual([
      ["provider.operator_cidrs.0", "expected an IPv4 or IPv6 CIDR such as 203.0.113.7/32 or 2001:db8::/64"],
    ]);
    expect(issues([])).toEqual([["provider.operator_cidrs", "expected at least one CIDR"]]);
    expect(issues(["203.0.113.7/32", "2001:db8::/64"])).toBeUndefined();
    expect(Workshop.safeParse(input({ security_group_ids: [] })).success).toBe(false);
  });

  it("compares addresses in canonical form", () => {
    expect(parseCidr("2001:DB8:0:0:0:0:0:0/32")?.text).toBe("2001:db8::/32");
    expect(parseCidr("2001:db8:0:1:0:0:0:1/128")?.text).toBe("2001:db8:0:1::1/128");
    expect(parseCidr("::ffff:192.0.2.1/128")?.text).toBe("::ffff:c000:201/128");
    expect(parseCidr("10.0.0.0/8")).toEqual({
      family: 4,
      prefix: 8,
      text: "10.0.0.0/8",
      network: "10.0.0.0/8",
    });
    expect(parseCidr("10.0.0.0/33")).toBeUndefined();
    expect(parseCidr("1::2::3/64")).toBeUndefined();
    expect(operatorCidrProblem("2001:db8:1::/48")).toBeUndefined();
  });
});

describe("ManagedSecurityGroups of one stage", () => {
  const ec2 = () => new EC2Client({ region: REGION, credentials });
  const groups: SecurityGroup[] = [
    {
      GroupId: "sg-0prod0000000001",
      GroupName: "labfleet-prod-k8s-intro",
      VpcId: VPC,
      Tags: tagsOfStage("prod"),
    },
    { GroupId: GROUP, GroupName: "labfleet.test.k8s-intro", VpcId: VPC, Tags: ownerTags },
    { GroupId: "sg-0nostage000001", GroupName: "labfleet-k8s-intro", VpcId: VPC, Tags: tagsOfStage(null) },
  ];

  it("names the group after the stage and the workshop", () => {
    expect(managedGroupName("test", "k8s-intro")).toBe("labfleet.test.k8s-intro");
    expect(managedGroupName("prod", "k8s-intro")).toBe("labfleet.prod.k8s-intro");
    // Names with dashes never spell alike across stages.
    expect(managedGroupName("test-a", "b")).not.toBe(managedGroupName("test", "a-b"));
  });

  it("finds only its stage's groups, for one workshop or for all, whatever EC2 returns", async () => {
    ec2Mock.on(DescribeSecurityGroupsCommand).resolves({ SecurityGroups: groups });
    const ids = (found: SecurityGroup[]) => found.map((g) => g.GroupId);
    expect(ids(await new ManagedSecurityGroups(ec2(), "test").find("k8s-intro"))).toEqual([GROUP]);
    expect(ids(await new ManagedSecurityGroups(ec2(), "test").find())).toEqual([GROUP]);
    expect(ids(await new ManagedSecurityGroups(ec2(), "prod").find("k8s-intro", VPC))).toEqual([
      "sg-0prod0000000001",
    ]);
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([
      groupFilters,
      { Filters: groupFilters.Filters.slice(0, 2) },
      {
        Filters: [
          { Name: "vpc-id", Values: [VPC] },
          { Name: "tag:ManagedBy", Values: ["labfleet"] },
          { Name: "tag:labfleet-stage", Values: ["prod"] },
          { Name: "tag:labfleet-workshop", Values: ["k8s-intro"] },
        ],
      },
    ]);
  });
});

describe("provision reconciles the managed group", () => {
  function reusedHost() {
    const instance: Instance = {
      InstanceId: "i-0running0000000001",
      State: { Name: "running" },
      InstanceType: "m7i.large",
      Tags: [...ownerTags, { Key: "labfleet-host-id", Value: "student-01" }],
    };
    ec2Mock.on(DescribeInstancesCommand).resolves({ Reservations: [{ Instances: [instance] }] });
    ssmMock
      .on(DescribeInstanceInformationCommand)
      .resolves({ InstanceInformationList: [{ InstanceId: "i-0running0000000001", PingStatus: "Online" }] });
  }

  it("revokes a stale operator address and SSH from the world, keeps open UI ports, adds what is missing", async () => {
    reusedHost();
    const group = fakeGroup([
      operator(22, "192.0.2.0/24"),
      operator(8443),
      tcp(22, { IpRanges: [{ CidrIp: "0.0.0.0/0" }] }),
      world(8443),
      tcp(5432, { UserIdGroupPairs: [{ GroupId: "sg-0db0000000000001" }] }),
    ]);
    const hosts = await provider().provision(spec({}, [8443]));
    expect(hosts[0]?.error).toBeUndefined();
    expect(calls(RevokeSecurityGroupIngressCommand)).toEqual([
      {
        GroupId: GROUP,
        IpPermissions: [
          {
            IpProtocol: "tcp",
            FromPort: 22,
            ToPort: 22,
            IpRanges: [{ CidrIp: "192.0.2.0/24" }, { CidrIp: "0.0.0.0/0" }],
          },
          {
            IpProtocol: "tcp",
            FromPort: 5432,
            ToPort: 5432,
            UserIdGroupPairs: [{ GroupId: "sg-0db0000000000001" }],
          },
        ],
      },
    ]);
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([
      { GroupId: GROUP, IpPermissions: [operator(22)] },
    ]);
    expect(calls(CreateSecurityGroupCommand)).toEqual([]);
    const v4 = (group.IpPermissions ?? []).flatMap((p) =>
      (p.IpRanges ?? []).map((r) => `${p.FromPort} ${r.CidrIp}`),
    );
    expect(v4.sort()).toEqual(["22 198.51.100.0/24", "8443 0.0.0.0/0", "8443 198.51.100.0/24"]);
  });

  it("adds the rules one by one when a concurrent caller added one first (InvalidPermission.Duplicate)", async () => {
    reusedHost();
    fakeGroup();
    ec2Mock
      .on(AuthorizeSecurityGroupIngressCommand)
      .rejectsOnce(
        Object.assign(new Error("the rule already exists"), { name: "InvalidPermission.Duplicate" }),
      )
      .rejectsOnce(
        Object.assign(new Error("the rule already exists"), { name: "InvalidPermission.Duplicate" }),
      )
      .resolves({ Return: true });
    const hosts = await provider().provision(spec({}, [8443]));
    expect(hosts[0]?.error).toBeUndefined();
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([
      { GroupId: GROUP, IpPermissions: [operator(22), operator(8443)] },
      { GroupId: GROUP, IpPermissions: [operator(22)] },
      { GroupId: GROUP, IpPermissions: [operator(8443)] },
    ]);
  });
});

describe("AwsProvider.setOpenAccess", () => {
  it("opens the UI ports (never 22) to 0.0.0.0/0 and ::/0, idempotently", async () => {
    const group = fakeGroup([operator(22), operator(8443), operator(30080)]);
    const p = provider();
    const s = spec({}, [8443, 22, 30080, 8443]);
    const opened = await p.setOpenAccess(s, true);
    expect(opened).toEqual({
      mode: "managed",
      changed: true,
      groupIds: [GROUP],
      ports: [8443, 30080],
      message: `opened TCP 8443, 30080 to 0.0.0.0/0 and ::/0 in ${GROUP}`,
    });
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([groupFilters]);
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([
      { GroupId: GROUP, IpPermissions: [world(8443), world(30080)] },
    ]);
    const again = await p.setOpenAccess(s, true);
    expect(again).toMatchObject({
      changed: false,
      message: `TCP 8443, 30080 was already open to 0.0.0.0/0 and ::/0 in ${GROUP}`,
    });
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toHaveLength(1);
    // SSH stays the operator's only.
    const ssh = (group.IpPermissions ?? []).filter((x) => x.FromPort === 22);
    expect(ssh).toEqual([operator(22)]);
  });

  it("closes: revokes the world rules and keeps the operator's, idempotently", async () => {
    const group = fakeGroup([operator(22), operator(8443), world(8443), world(30080)]);
    const p = provider();
    const closed = await p.setOpenAccess(spec({}, [8443, 30080]), false);
    expect(closed).toEqual({
      mode: "managed",
      changed: true,
      groupIds: [GROUP],
      ports: [8443, 30080],
      message: `closed TCP 8443, 30080 to 0.0.0.0/0 and ::/0 in ${GROUP}`,
    });
    expect(calls(RevokeSecurityGroupIngressCommand)).toEqual([
      {
        GroupId: GROUP,
        IpPermissions: [8443, 30080].map((port) =>
          tcp(port, { IpRanges: [{ CidrIp: "0.0.0.0/0" }], Ipv6Ranges: [{ CidrIpv6: "::/0" }] }),
        ),
      },
    ]);
    const rules = (group.IpPermissions ?? []).flatMap((x) => [
      ...(x.IpRanges ?? []).map((r) => `${x.FromPort} ${r.CidrIp}`),
      ...(x.Ipv6Ranges ?? []).map((r) => `${x.FromPort} ${r.CidrIpv6}`),
    ]);
    expect(rules).toEqual(["22 198.51.100.0/24", "8443 198.51.100.0/24"]);
    const again = await p.setOpenAccess(spec({}, [8443, 30080]), false);
    expect(again).toMatchObject({ changed: false, message: `nothing was open to the world in ${GROUP}` });
    expect(calls(RevokeSecurityGroupIngressCommand)).toHaveLength(1);
  });

  it("tolerates a rule already gone while closing (InvalidPermission.NotFound)", async () => {
    fakeGroup([world(8443)]);
    ec2Mock
      .on(RevokeSecurityGroupIngressCommand)
      .rejects(Object.assign(new Error("rule not found"), { name: "InvalidPermission.NotFound" }));
    const closed = await provider().setOpenAccess(spec({}, [8443]), false);
    expect(closed.changed).toBe(true);
  });

  it("changes nothing in bring-your-own groups and says what to open or close", async () => {
    const s = spec({ security_group_ids: ["sg-0aaaaaaaaaaaaaaa1", "sg-0bbbbbbbbbbbbbbb2"] }, [8443, 22]);
    const opened = await provider().setOpenAccess(s, true);
    expect(opened).toEqual({
      mode: "byo",
      changed: false,
      groupIds: ["sg-0aaaaaaaaaaaaaaa1", "sg-0bbbbbbbbbbbbbbb2"],
      ports: [8443],
      message:
        "provider.security_group_ids is set, so labfleet changes no security group: to let students reach the lab UIs, " +
        "allow inbound TCP 8443 from 0.0.0.0/0 and ::/0 in sg-0aaaaaaaaaaaaaaa1, sg-0bbbbbbbbbbbbbbb2. " +
        "Keep port 22 closed to the world: labfleet reaches the hosts through SSM",
    });
    const closed = await provider().setOpenAccess(s, false);
    expect(closed.message).toBe(
      "provider.security_group_ids is set, so labfleet changes no security group: to close the lab UIs, " +
        "remove the inbound rules for TCP 8443 from 0.0.0.0/0 and ::/0 from sg-0aaaaaaaaaaaaaaa1, sg-0bbbbbbbbbbbbbbb2",
    );
    expect(ec2Mock.calls()).toHaveLength(0);
  });

  it("refuses to open before the workshop has its group, and has nothing to close then", async () => {
    ec2Mock.on(DescribeSecurityGroupsCommand).resolves({ SecurityGroups: [] });
    const err = await provider()
      .setOpenAccess(spec(), true)
      .catch((e: unknown) => e);
    expect(isVisibleError(err) && [err.kind, err.code]).toEqual([
      "not_found",
      "provider.security_group_missing",
    ]);
    expect(await provider().setOpenAccess(spec(), false)).toMatchObject({
      changed: false,
      message: "no labfleet security group: nothing to close",
    });
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([]);
  });

  it("ignores a group whose tags EC2 returned but that is not this workshop's", async () => {
    ec2Mock.on(DescribeSecurityGroupsCommand).resolves({
      SecurityGroups: [
        {
          GroupId: "sg-0other0000000001",
          Tags: [
            { Key: "ManagedBy", Value: "labfleet" },
            { Key: "labfleet-stage", Value: STAGE },
          ],
        },
      ],
    });
    const err = await provider()
      .setOpenAccess(spec(), true)
      .catch((e: unknown) => e);
    expect(isVisibleError(err) && err.code).toBe("provider.security_group_missing");
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([]);
  });

  it.each([
    ["another stage", "prod"],
    ["no stage", null],
  ])("never opens or closes the workshop's group of %s, even when EC2 returns it", async (_what, stage) => {
    const group = fakeGroup([operator(22), operator(8443), world(30080)], {
      GroupName: `labfleet-${stage ?? "x"}-k8s-intro`,
      Tags: tagsOfStage(stage),
    });
    const err = await provider()
      .setOpenAccess(spec({}, [8443, 30080]), true)
      .catch((e: unknown) => e);
    expect(isVisibleError(err) && err.code).toBe("provider.security_group_missing");
    expect(await provider().setOpenAccess(spec({}, [8443, 30080]), false)).toMatchObject({
      changed: false,
      message: "no labfleet security group: nothing to close",
    });
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([groupFilters, groupFilters]);
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([]);
    expect(calls(RevokeSecurityGroupIngressCommand)).toEqual([]);
    expect(group.IpPermissions).toEqual([operator(22), operator(8443), world(30080)]);
  });

  it("has no port to open when lab.ui_ports is empty", async () => {
    fakeGroup([operator(22)]);
    const result = await provider().setOpenAccess(spec({}, []), true);
    expect(result).toMatchObject({ changed: false, ports: [] });
    expect(result.message).toMatch(/no port to open \(port 22 is never opened to the world\)/);
    expect(calls(AuthorizeSecurityGroupIngressCommand)).toEqual([]);
  });
});

describe("deprovision and the managed group", () => {
  const mine = (id: string, hostId: string, state: "running" | "shutting-down" = "running"): Instance => ({
    InstanceId: id,
    State: { Name: state },
    Tags: [...ownerTags, { Key: "labfleet-host-id", Value: hostId }],
  });
  const leftFilters = {
    Filters: [
      { Name: "tag:ManagedBy", Values: ["labfleet"] },
      { Name: "tag:labfleet-stage", Values: [STAGE] },
      { Name: "tag:labfleet-workshop", Values: ["k8s-intro"] },
      { Name: "instance-state-name", Values: ["pending", "running", "stopping", "stopped"] },
    ],
  };

  function account(left: Instance[]) {
    ec2Mock
      .on(DescribeInstancesCommand)
      .resolves({ Reservations: [{ Instances: [mine("i-0mine000000000001", "student-01")] }] });
    ec2Mock
      .on(DescribeInstancesCommand, leftFilters)
      .resolves({ Reservations: left.length ? [{ Instances: left }] : [] });
    ec2Mock.on(TerminateInstancesCommand).resolves({});
    ec2Mock.on(DescribeSecurityGroupsCommand).resolves({
      SecurityGroups: [{ GroupId: GROUP, GroupName: "labfleet.test.k8s-intro", VpcId: VPC, Tags: ownerTags }],
    });
  }

  it("deletes the group when no instance of the workshop is left", async () => {
    account([]);
    ec2Mock.on(DeleteSecurityGroupCommand).resolves({});
    const results = await provider().deprovision(spec({ count: 1 }), ["student-01"]);
    expect(results).toEqual([
      {
        hostId: "student-01",
        result: "destroyed",
        detail: `terminated i-0mine000000000001; deleted security group ${GROUP}`,
      },
    ]);
    expect(calls(DescribeInstancesCommand)[1]).toEqual(leftFilters);
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([groupFilters]);
    expect(calls(DeleteSecurityGroupCommand)).toEqual([{ GroupId: GROUP }]);
  });

  it("deletes only this stage's group, and another stage's instances of the workshop do not keep it", async () => {
    // EC2 returns, for the workshop, another stage's instance and group and a group without a stage tag.
    const theirs = (id: string, stage: string | null): Instance => ({
      InstanceId: id,
      State: { Name: "running" },
      Tags: [...tagsOfStage(stage), { Key: "labfleet-host-id", Value: "student-02" }],
    });
    account([theirs("i-0prod000000000002", "prod"), theirs("i-0nostage00000002", null)]);
    ec2Mock.on(DescribeSecurityGroupsCommand).resolves({
      SecurityGroups: [
        {
          GroupId: "sg-0prod0000000001",
          GroupName: "labfleet-prod-k8s-intro",
          VpcId: VPC,
          Tags: tagsOfStage("prod"),
        },
        { GroupId: GROUP, GroupName: "labfleet.test.k8s-intro", VpcId: VPC, Tags: ownerTags },
        {
          GroupId: "sg-0nostage000001",
          GroupName: "labfleet-k8s-intro",
          VpcId: VPC,
          Tags: tagsOfStage(null),
        },
      ],
    });
    ec2Mock.on(DeleteSecurityGroupCommand).resolves({});
    const results = await provider().deprovision(spec({ count: 2 }), ["student-01"]);
    expect(results).toEqual([
      {
        hostId: "student-01",
        result: "destroyed",
        detail: `terminated i-0mine000000000001; deleted security group ${GROUP}`,
      },
    ]);
    expect(calls(DescribeInstancesCommand)[1]).toEqual(leftFilters);
    expect(calls(DeleteSecurityGroupCommand)).toEqual([{ GroupId: GROUP }]);
  });

  it("reports a group still in use (DependencyViolation) and leaves it to the sweeper; the host is still destroyed", async () => {
    account([]);
    ec2Mock
      .on(DeleteSecurityGroupCommand)
      .rejects(Object.assign(new Error("resource has a dependent object"), { name: "DependencyViolation" }));
    const results = await provider().deprovision(spec({ count: 1 }), ["student-01"]);
    expect(results).toEqual([
      {
        hostId: "student-01",
        result: "destroyed",
        detail: `terminated i-0mine000000000001; security group ${GROUP} is still in use (its instances are shutting down): the sweeper deletes it once they are gone`,
      },
    ]);
  });

  it("keeps the group while another instance of the workshop is left", async () => {
    account([mine("i-0other00000000002", "student-02")]);
    const results = await provider().deprovision(spec({ count: 2 }), ["student-01"]);
    expect(results).toEqual([
      { hostId: "student-01", result: "destroyed", detail: "terminated i-0mine000000000001" },
    ]);
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([]);
    expect(calls(DeleteSecurityGroupCommand)).toEqual([]);
  });

  it("never touches security groups with bring-your-own groups", async () => {
    account([]);
    const results = await provider().deprovision(
      spec({ count: 1, security_group_ids: ["sg-0aaaaaaaaaaaaaaa1"] }),
      ["student-01"],
    );
    expect(results[0]?.detail).toBe("terminated i-0mine000000000001");
    expect(calls(DescribeInstancesCommand)).toHaveLength(1);
    expect(calls(DescribeSecurityGroupsCommand)).toEqual([]);
    expect(calls(DeleteSecurityGroupCommand)).toEqual([]);
  });
});
