import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import type { GetCommandInvocationCommandOutput } from "@aws-sdk/client-ssm";
import { runSimulation } from "@cloud-copilot/iam-simulate";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  HOST_ROLE,
  names,
  policyDocument,
  STAGE_TAG_KEY,
  type Statement,
  statementsOf,
} from "../../infra/permissions.ts";
import {
  type AuthRequest,
  AwsError,
  arn,
  type Call,
  credentialsFor,
  FAKE_ACCOUNT_ID,
  FAKE_REGION,
  type PolicyDocument,
  signatureScope,
} from "../harness/aws/core.ts";
import { FAKE_AZ, FAKE_SUBNET, FAKE_VPC, FakeEc2, type FakeInstance } from "../harness/aws/ec2.ts";
import { Iam } from "../harness/aws/iam.ts";
import { FakeSsm } from "../harness/aws/ssm.ts";
import { movableClock, removeDir, tempDir, waitFor } from "../harness/runtime.ts";

/**
 * The EC2 and SSM doubles on their own: their operations driven directly with a stub Call that records what each
 * asks IAM (the HTTP server and IAM are not theirs), and the authorization requests checked against labfleet's
 * real policies (infra/permissions.ts) with the IAM simulator. Instances are folders whose processes run here.
 * The instances' `aws` command is the only thing that goes over HTTP: to a small SSM JSON endpoint below.
 */

const HOST_PROFILE = names("labfleet", "test").hostRole;
const PROFILE_ARN = arn.instanceProfile(HOST_PROFILE);
const AMI = "ami-0ccccccccccccccc3";
const MANAGED = [
  { Key: "ManagedBy", Value: "labfleet" },
  { Key: "labfleet-workshop", Value: "w1" },
  { Key: "labfleet-host-id", Value: "student-01" },
  { Key: STAGE_TAG_KEY, Value: "test" },
];
const REFS = {
  partition: "aws",
  region: FAKE_REGION,
  account: FAKE_ACCOUNT_ID,
  stage: "test",
  app: "labfleet",
  table: arn.table("labfleet-test"),
};

let dir: string;
let ec2: FakeEc2;
let ssm: FakeSsm;
const clock = movableClock();
let endpoint: SsmEndpoint;

/** aws:ResourceTag/<k> and ec2:ResourceTag/<k> of tags, as EC2 puts a resource's tags in a request. */
function resourceTags(tags: { Key?: string; Value?: string }[]): Record<string, string> {
  return Object.fromEntries(
    tags.flatMap((t) => [
      [`aws:ResourceTag/${t.Key}`, t.Value ?? ""],
      [`ec2:ResourceTag/${t.Key}`, t.Value ?? ""],
    ]),
  );
}

/** A Call whose authorize records what it is asked (and denies what `deny` says). */
function stub(operation: string, deny?: (r: AuthRequest) => boolean) {
  const requests: AuthRequest[] = [];
  const call: Call = {
    principal: {
      name: "tester",
      kind: "function",
      arn: "arn:aws:sts::123456789012:assumed-role/t/t",
      accessKeyId: "ASIATEST",
    },
    service: "test",
    operation,
    requestId: randomUUID(),
    authorize: async (reqs) => {
      for (const r of reqs) {
        requests.push(r);
        if (deny?.(r))
          throw new AwsError("UnauthorizedOperation", `denied ${r.action} on ${r.resource}`, 403);
      }
    },
  };
  return { call, requests };
}

async function op(
  service: FakeEc2 | FakeSsm,
  name: string,
  input: unknown,
  deny?: (r: AuthRequest) => boolean,
  // biome-ignore lint/suspicious/noExplicitAny: outputs are the SDK's shapes, checked field by field
): Promise<any> {
  const s = stub(name, deny);
  const out = await (service.operations[name] as (i: unknown, c: Call) => unknown)(input, s.call);
  return out;
}

/** The authorization requests an operation made (it may fail after them: a missing parameter, ...). */
async function authOf(service: FakeEc2 | FakeSsm, name: string, input: unknown): Promise<AuthRequest[]> {
  const s = stub(name);
  try {
    await (service.operations[name] as (i: unknown, c: Call) => unknown)(input, s.call);
  } catch (err) {
    if (!(err instanceof AwsError)) throw err;
  }
  return s.requests;
}

async function rejection(p: Promise<unknown>): Promise<AwsError> {
  try {
    await p;
  } catch (err) {
    if (err instanceof AwsError) return err;
    throw err;
  }
  throw new Error("expected the call to fail");
}

/** What IAM decides for one request under a policy (strict mode: a key the action does not have is an error). */
async function decide(statements: Statement[], req: AuthRequest): Promise<string> {
  const policy = JSON.parse(policyDocument(statements, REFS)) as PolicyDocument;
  const principal = "arn:aws:sts::123456789012:assumed-role/labfleet-test-fn/fn";
  const r = await runSimulation(
    {
      identityPolicies: [{ name: "policy", policy }],
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      request: {
        principal,
        action: req.action,
        resource: { resource: req.resource, accountId: FAKE_ACCOUNT_ID },
        contextVariables: {
          "aws:PrincipalArn": principal,
          "aws:PrincipalAccount": FAKE_ACCOUNT_ID,
          ...req.context,
        },
      },
    },
    { simulationMode: "Strict" },
  );
  if (r.resultType === "error")
    throw new Error(`IAM cannot evaluate ${req.action} ${req.resource}: ${JSON.stringify(r.errors)}`);
  return r.overallResult;
}

function launchInput(extra: Partial<RunInstancesCommandInput> = {}): RunInstancesCommandInput {
  return {
    ImageId: AMI,
    InstanceType: "m7i.large",
    SubnetId: FAKE_SUBNET,
    MinCount: 1,
    MaxCount: 1,
    IamInstanceProfile: { Arn: PROFILE_ARN },
    MetadataOptions: { HttpTokens: "required", HttpEndpoint: "enabled" },
    InstanceInitiatedShutdownBehavior: "terminate",
    TagSpecifications: [
      { ResourceType: "instance", Tags: MANAGED },
      { ResourceType: "volume", Tags: MANAGED },
    ],
    ...extra,
  };
}

async function launch(extra: Partial<RunInstancesCommandInput> = {}): Promise<FakeInstance[]> {
  const out = await op(ec2, "RunInstances", launchInput(extra));
  return (out.Instances as { InstanceId: string }[]).map((i) => ec2.get(i.InstanceId));
}

async function online(inst: FakeInstance): Promise<void> {
  await waitFor(`${inst.id}'s agent`, () => inst.agent === "online", 10_000);
}

async function send(
  ids: string[],
  commands: string[],
  extra: { TimeoutSeconds?: number; Comment?: string; Parameters?: Record<string, string[]> } = {},
): Promise<string> {
  const { Parameters, ...rest } = extra;
  const out = await op(ssm, "SendCommand", {
    DocumentName: "AWS-RunShellScript",
    InstanceIds: ids,
    Parameters: { commands, ...Parameters },
    ...rest,
  });
  return out.Command.CommandId as string;
}

async function invocation(commandId: string, instanceId: string): Promise<GetCommandInvocationCommandOutput> {
  return op(ssm, "GetCommandInvocation", { CommandId: commandId, InstanceId: instanceId });
}

async function finished(commandId: string, instanceId: string, timeoutMs = 20_000) {
  return waitFor(
    `command ${commandId} on ${instanceId}`,
    async () => {
      const inv = await invocation(commandId, instanceId);
      return ["Success", "Failed", "TimedOut", "Cancelled"].includes(inv.Status ?? "") ? inv : undefined;
    },
    timeoutMs,
  );
}

async function run(inst: FakeInstance, command: string) {
  return finished(await send([inst.id], [command]), inst.id);
}

// ------------------------------------------------------------------------- the SSM JSON endpoint

interface SsmEndpoint {
  url: string;
  server: Server;
  /** Every request: the operation, the access key that signed it, the outcome. */
  calls: { operation: string; accessKeyId: string | undefined; outcome: string }[];
  deny: (r: AuthRequest) => boolean;
}

function epochs(v: unknown): unknown {
  if (v instanceof Date) return v.getTime() / 1000;
  if (Array.isArray(v)) return v.map(epochs);
  if (v && typeof v === "object")
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, epochs(x)]));
  return v;
}

/** awsJson1_1 as the SDK speaks it: X-Amz-Target AmazonSSM.<Op>, JSON in and out, `__type` for errors. */
async function ssmEndpoint(target: FakeSsm): Promise<SsmEndpoint> {
  const e: SsmEndpoint = { url: "", server: createServer(), calls: [], deny: () => false };
  e.server.on("request", (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const operation = String(req.headers["x-amz-target"] ?? "").split(".")[1] ?? "";
      const accessKeyId = signatureScope(req.headers.authorization)?.accessKeyId;
      const call: Call = {
        principal: {
          name: "host",
          kind: "host",
          arn: "arn:aws:sts::123456789012:assumed-role/h/i",
          accessKeyId: accessKeyId ?? "",
        },
        service: "ssm",
        operation,
        requestId: randomUUID(),
        authorize: async (reqs) => {
          for (const r of reqs) {
            if (e.deny(r)) {
              throw new AwsError(
                "AccessDeniedException",
                `User: arn:aws:sts::123456789012:assumed-role/h/i is not authorized to perform: ${r.action} on resource: ${r.resource}`,
              );
            }
          }
        },
      };
      const reply = (status: number, body: unknown) =>
        res.writeHead(status, { "content-type": "application/x-amz-json-1.1" }).end(JSON.stringify(body));
      const fn = target.operations[operation];
      Promise.resolve()
        .then(() =>
          (fn as (i: unknown, c: Call) => unknown)(
            JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}"),
            call,
          ),
        )
        .then((out) => {
          e.calls.push({ operation, accessKeyId, outcome: "ok" });
          reply(200, epochs(out));
        })
        .catch((err: unknown) => {
          const code = err instanceof AwsError ? err.code : "InternalServerError";
          e.calls.push({ operation, accessKeyId, outcome: code });
          reply(err instanceof AwsError ? err.status : 500, {
            __type: code,
            message: err instanceof Error ? err.message : "",
          });
        });
    });
  });
  await new Promise<void>((resolve) => e.server.listen(0, "127.0.0.1", resolve));
  e.url = `http://127.0.0.1:${(e.server.address() as AddressInfo).port}`;
  return e;
}

beforeAll(async () => {
  dir = tempDir("labfleet-fake-ec2-ssm-");
  ec2 = new FakeEc2({
    dir,
    bootMs: 50,
    agentMs: 50,
    shutdownMs: 50,
    awsCliInstallMs: 1500,
    instanceProfiles: { [HOST_PROFILE]: HOST_PROFILE },
  });
  ssm = new FakeSsm({ ec2, now: () => clock.now().getTime() });
  endpoint = await ssmEndpoint(ssm);
  ec2.setEndpoint(endpoint.url);
  await op(ec2, "CreateSecurityGroup", {
    GroupName: "labfleet-w1",
    Description: "labfleet w1",
    VpcId: FAKE_VPC,
    TagSpecifications: [{ ResourceType: "security-group", Tags: MANAGED }],
  });
});

afterAll(async () => {
  await ssm?.close();
  await ec2?.close();
  await new Promise<void>((resolve) => (endpoint ? endpoint.server.close(() => resolve()) : resolve()));
  if (dir) removeDir(dir);
});

// ------------------------------------------------------------------------------------------------ EC2

describe("EC2 authorization: the resources and condition keys AWS evaluates", () => {
  it("RunInstances asks for each resource it touches, the implicit CreateTags and iam:PassRole", async () => {
    const group = ec2.groups[0]?.GroupId as string;
    const input = launchInput({ SecurityGroupIds: [group] });
    const requests = await authOf(ec2, "RunInstances", input);
    const tagKeys = { "aws:TagKeys": ["ManagedBy", "labfleet-workshop", "labfleet-host-id", STAGE_TAG_KEY] };
    const reqTags = {
      "aws:RequestTag/ManagedBy": "labfleet",
      "aws:RequestTag/labfleet-workshop": "w1",
      "aws:RequestTag/labfleet-host-id": "student-01",
      [`aws:RequestTag/${STAGE_TAG_KEY}`]: "test",
      ...tagKeys,
    };
    const region = { "ec2:Region": FAKE_REGION };
    const vpc = `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:vpc/${FAKE_VPC}`;
    const subnet = `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:subnet/${FAKE_SUBNET}`;
    expect(requests).toEqual([
      {
        action: "ec2:RunInstances",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:instance/*`,
        context: {
          ...region,
          ...reqTags,
          "ec2:InstanceType": "m7i.large",
          "ec2:AvailabilityZone": FAKE_AZ,
          "ec2:Tenancy": "default",
          "ec2:RootDeviceType": "ebs",
          "ec2:InstanceProfile": PROFILE_ARN,
          "ec2:MetadataHttpTokens": "required",
          "ec2:MetadataHttpEndpoint": "enabled",
        },
      },
      {
        action: "ec2:RunInstances",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:volume/*`,
        context: {
          ...region,
          ...reqTags,
          "ec2:AvailabilityZone": FAKE_AZ,
          "ec2:VolumeSize": "8",
          "ec2:VolumeType": "gp3",
          "ec2:Encrypted": "false",
        },
      },
      {
        action: "ec2:RunInstances",
        resource: `arn:aws:ec2:${FAKE_REGION}::image/${AMI}`,
        context: {
          ...region,
          "ec2:ImageID": AMI,
          "ec2:Owner": "099720109477",
          "ec2:Public": "true",
          "ec2:ImageType": "machine",
          "ec2:RootDeviceType": "ebs",
        },
      },
      {
        action: "ec2:RunInstances",
        resource: subnet,
        context: { ...region, "ec2:SubnetID": FAKE_SUBNET, "ec2:Vpc": vpc, "ec2:AvailabilityZone": FAKE_AZ },
      },
      {
        action: "ec2:RunInstances",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:security-group/${group}`,
        context: {
          ...region,
          "aws:ResourceTag/ManagedBy": "labfleet",
          "ec2:ResourceTag/ManagedBy": "labfleet",
          "aws:ResourceTag/labfleet-workshop": "w1",
          "ec2:ResourceTag/labfleet-workshop": "w1",
          "aws:ResourceTag/labfleet-host-id": "student-01",
          "ec2:ResourceTag/labfleet-host-id": "student-01",
          [`aws:ResourceTag/${STAGE_TAG_KEY}`]: "test",
          [`ec2:ResourceTag/${STAGE_TAG_KEY}`]: "test",
          "ec2:SecurityGroupID": group,
          "ec2:Vpc": vpc,
        },
      },
      {
        action: "ec2:RunInstances",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:network-interface/*`,
        context: { ...region, "ec2:Subnet": subnet, "ec2:Vpc": vpc, "ec2:AvailabilityZone": FAKE_AZ },
      },
      {
        action: "ec2:CreateTags",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:instance/*`,
        context: { ...region, "ec2:CreateAction": "RunInstances", ...reqTags },
      },
      {
        action: "ec2:CreateTags",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:volume/*`,
        context: { ...region, "ec2:CreateAction": "RunInstances", ...reqTags },
      },
      {
        action: "iam:PassRole",
        resource: `arn:aws:iam::${FAKE_ACCOUNT_ID}:role/${HOST_PROFILE}`,
        context: { "iam:PassedToService": "ec2.amazonaws.com" },
      },
    ]);
    // Provision's real policy allows all of it; untagged, the instance and volume are refused.
    const provision = statementsOf("Provision");
    for (const r of requests)
      expect([r.action, r.resource, await decide(provision, r)]).toEqual([r.action, r.resource, "Allowed"]);
    const untagged = await authOf(
      ec2,
      "RunInstances",
      launchInput({ TagSpecifications: [], SecurityGroupIds: [group] }),
    );
    expect(untagged.map((r) => r.action)).not.toContain("ec2:CreateTags");
    expect(await decide(provision, untagged[0] as AuthRequest)).toBe("ImplicitlyDenied");
    // Only the host role may be passed to EC2.
    const elsewhere = new FakeEc2({ dir: join(dir, "other"), instanceProfiles: { p: "someone-elses-role" } });
    const other = await authOf(elsewhere, "RunInstances", launchInput({ IamInstanceProfile: { Name: "p" } }));
    await elsewhere.close();
    const pass = other.find((r) => r.action === "iam:PassRole") as AuthRequest;
    expect(pass.resource).toBe(`arn:aws:iam::${FAKE_ACCOUNT_ID}:role/someone-elses-role`);
    expect(await decide(provision, pass)).toBe("ImplicitlyDenied");
  });

  it("a denied RunInstances launches nothing and binds no token", async () => {
    const before = ec2.instances.size;
    const input = launchInput({ ClientToken: `denied-${randomUUID()}` });
    const err = await rejection(op(ec2, "RunInstances", input, (r) => r.action === "iam:PassRole"));
    expect(err.code).toBe("UnauthorizedOperation");
    expect(ec2.instances.size).toBe(before);
    const out = await op(ec2, "RunInstances", input);
    expect(out.Instances).toHaveLength(1);
    expect(ec2.instances.size).toBe(before + 1);
  });

  it("CreateTags, TerminateInstances and the security group calls carry each resource's current tags", async () => {
    const [inst] = await launch();
    const id = (inst as FakeInstance).id;
    const tags = [{ Key: "labfleet-expiry", Value: "2030-01-01T00:00:00.000Z" }];
    const retag = await authOf(ec2, "CreateTags", { Resources: [id], Tags: tags });
    const instanceKeys = (i: FakeInstance, tags = i.instance.Tags ?? []) => ({
      "ec2:Region": FAKE_REGION,
      ...resourceTags(tags),
      "ec2:InstanceID": i.id,
      "ec2:InstanceType": "m7i.large",
      "ec2:AvailabilityZone": FAKE_AZ,
      ...(i.instance.IamInstanceProfile ? { "ec2:InstanceProfile": PROFILE_ARN } : {}),
      "ec2:Tenancy": "default",
      "ec2:RootDeviceType": "ebs",
    });
    expect(retag).toEqual([
      {
        action: "ec2:CreateTags",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:instance/${id}`,
        context: {
          ...instanceKeys(ec2.get(id), MANAGED),
          "aws:RequestTag/labfleet-expiry": "2030-01-01T00:00:00.000Z",
          "aws:TagKeys": ["labfleet-expiry"],
        },
      },
    ]);
    expect(ec2.get(id).instance.Tags).toContainEqual(tags[0]);
    // The Api may move labfleet-* tags on labfleet's instances; another tag key, or someone else's instance, no.
    const api = statementsOf("Api");
    expect(await decide(api, retag[0] as AuthRequest)).toBe("Allowed");
    const name = await authOf(ec2, "CreateTags", { Resources: [id], Tags: [{ Key: "Name", Value: "x" }] });
    expect(await decide(api, name[0] as AuthRequest)).toBe("ImplicitlyDenied");
    const stranger = ec2.addInstance({ Tags: [{ Key: "Name", Value: "someone-elses" }] });
    const theirs = await authOf(ec2, "CreateTags", { Resources: [stranger.id], Tags: tags });
    expect(await decide(api, theirs[0] as AuthRequest)).toBe("ImplicitlyDenied");

    const terminate = await authOf(ec2, "TerminateInstances", { InstanceIds: [stranger.id] });
    expect(terminate).toEqual([
      {
        action: "ec2:TerminateInstances",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:instance/${stranger.id}`,
        context: instanceKeys(stranger),
      },
    ]);
    expect(terminate[0]?.context).toMatchObject({
      "aws:ResourceTag/Name": "someone-elses",
      "ec2:ResourceTag/Name": "someone-elses",
    });
    expect(await decide(statementsOf("Deprovision"), terminate[0] as AuthRequest)).toBe("ImplicitlyDenied");
    const mine = await authOf(ec2, "TerminateInstances", { InstanceIds: [id] });
    expect(await decide(statementsOf("Deprovision"), mine[0] as AuthRequest)).toBe("Allowed");

    const create = await authOf(ec2, "CreateSecurityGroup", {
      GroupName: "labfleet-w2",
      Description: "labfleet w2",
      VpcId: FAKE_VPC,
      TagSpecifications: [{ ResourceType: "security-group", Tags: MANAGED }],
    });
    expect(create.map((r) => [r.action, r.resource, r.context?.["ec2:CreateAction"]])).toEqual([
      [
        "ec2:CreateSecurityGroup",
        `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:security-group/*`,
        undefined,
      ],
      ["ec2:CreateSecurityGroup", `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:vpc/${FAKE_VPC}`, undefined],
      [
        "ec2:CreateTags",
        `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:security-group/*`,
        "CreateSecurityGroup",
      ],
    ]);
    for (const r of create) expect(await decide(statementsOf("Provision"), r)).toBe("Allowed");
    const g = ec2.groups.find((x) => x.GroupName === "labfleet-w2");
    const perm = { IpProtocol: "tcp", FromPort: 22, ToPort: 22, IpRanges: [{ CidrIp: "198.51.100.0/24" }] };
    for (const [operation, input] of [
      ["AuthorizeSecurityGroupIngress", { GroupId: g?.GroupId, IpPermissions: [perm] }],
      ["RevokeSecurityGroupIngress", { GroupId: g?.GroupId, IpPermissions: [perm] }],
      ["DeleteSecurityGroup", { GroupId: g?.GroupId }],
    ] as const) {
      const [r] = await authOf(ec2, operation, input);
      expect(r).toMatchObject({
        action: `ec2:${operation}`,
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:security-group/${g?.GroupId}`,
        context: { "aws:ResourceTag/ManagedBy": "labfleet", "ec2:ResourceTag/ManagedBy": "labfleet" },
      });
      expect(await decide(statementsOf("Deprovision"), r as AuthRequest)).toBe("Allowed");
    }
    expect(ec2.groups.some((x) => x.GroupName === "labfleet-w2")).toBe(false);
    const describe = await authOf(ec2, "DescribeInstances", {});
    expect(describe).toEqual([
      { action: "ec2:DescribeInstances", resource: "*", context: { "ec2:Region": FAKE_REGION } },
    ]);
  });

  it("keeps the security group rules model: duplicates, unknown rules and groups still in use are refused", async () => {
    // A double of its own, whose instances take a while to shut down.
    const ec2 = new FakeEc2({ dir: join(dir, "rules"), bootMs: 10, agentMs: 10, shutdownMs: 1500 });
    const out = await op(ec2, "CreateSecurityGroup", {
      GroupName: "rules",
      Description: "rules",
      VpcId: FAKE_VPC,
    });
    const GroupId = out.GroupId as string;
    const ssh = {
      IpProtocol: "tcp",
      FromPort: 22,
      ToPort: 22,
      IpRanges: [{ CidrIp: "203.0.113.0/24", Description: "operator" }],
    };
    await op(ec2, "AuthorizeSecurityGroupIngress", { GroupId, IpPermissions: [ssh] });
    const dup = await rejection(
      op(ec2, "AuthorizeSecurityGroupIngress", {
        GroupId,
        IpPermissions: [{ ...ssh, IpProtocol: "6", IpRanges: [{ CidrIp: "203.0.113.0/24" }] }],
      }),
    );
    expect([dup.code, dup.message]).toEqual([
      "InvalidPermission.Duplicate",
      'the specified rule "peer: 203.0.113.0/24, TCP, from port: 22, to port: 22, ALLOW" already exists',
    ]);
    const missing = await rejection(
      op(ec2, "RevokeSecurityGroupIngress", {
        GroupId,
        IpPermissions: [
          ssh,
          { IpProtocol: "tcp", FromPort: 80, ToPort: 80, IpRanges: [{ CidrIp: "0.0.0.0/0" }] },
        ],
      }),
    );
    expect(missing.code).toBe("InvalidPermission.NotFound");
    const described = await op(ec2, "DescribeSecurityGroups", { GroupIds: [GroupId] });
    expect(described.SecurityGroups[0].IpPermissions).toEqual([
      {
        IpProtocol: "tcp",
        FromPort: 22,
        ToPort: 22,
        IpRanges: [{ CidrIp: "203.0.113.0/24", Description: "operator" }],
        Ipv6Ranges: [],
        PrefixListIds: [],
        UserIdGroupPairs: [],
      },
    ]);
    const launched = await op(
      ec2,
      "RunInstances",
      launchInput({ SecurityGroupIds: [GroupId], IamInstanceProfile: undefined }),
    );
    const inst = ec2.get(launched.Instances[0].InstanceId);
    expect((await rejection(op(ec2, "DeleteSecurityGroup", { GroupId }))).code).toBe("DependencyViolation");
    await op(ec2, "TerminateInstances", { InstanceIds: [inst.id] });
    // Still shutting down: still in use.
    expect((await rejection(op(ec2, "DeleteSecurityGroup", { GroupId }))).code).toBe("DependencyViolation");
    await waitFor("the instance to be terminated", () => ec2.stateOf(inst) === "terminated");
    await op(ec2, "DeleteSecurityGroup", { GroupId });
    expect((await rejection(op(ec2, "DescribeSecurityGroups", { GroupIds: [GroupId] }))).code).toBe(
      "InvalidGroup.NotFound",
    );
    expect(
      (await rejection(op(ec2, "DescribeInstances", { InstanceIds: ["i-0000000000000dead"] }))).message,
    ).toBe("The instance ID 'i-0000000000000dead' does not exist");
    expect(
      (await rejection(op(ec2, "TerminateInstances", { InstanceIds: ["i-0000000000000dead"] }))).code,
    ).toBe("InvalidInstanceID.NotFound");
    expect(
      (await rejection(op(ec2, "DescribeInstances", { Filters: [{ Name: "nope", Values: ["x"] }] }))).code,
    ).toBe("InvalidParameterValue");
    const tagged = await op(ec2, "DescribeInstances", {
      Filters: [
        { Name: "tag:labfleet-workshop", Values: ["w*"] },
        { Name: "instance-state-name", Values: ["terminated"] },
      ],
    });
    expect(
      tagged.Reservations.flatMap((r: { Instances: { InstanceId: string }[] }) =>
        r.Instances.map((i) => i.InstanceId),
      ),
    ).toContain(inst.id);
  });
});

describe("EC2 RunInstances ClientToken", () => {
  it("the same token and parameters return the same reservation, before and after termination", async () => {
    const ClientToken = `token-${randomUUID()}`;
    const first = await op(ec2, "RunInstances", launchInput({ ClientToken }));
    const id = first.Instances[0].InstanceId as string;
    const count = ec2.instances.size;
    // The same parameters in another key order are the same request.
    const { MinCount, MaxCount, ...rest } = launchInput({ ClientToken });
    const again = await op(ec2, "RunInstances", { MaxCount, ...rest, MinCount });
    expect(again.ReservationId).toBe(first.ReservationId);
    expect(again.Instances.map((i: { InstanceId: string }) => i.InstanceId)).toEqual([id]);
    expect(ec2.instances.size).toBe(count);
    const changed = await rejection(
      op(ec2, "RunInstances", launchInput({ ClientToken, InstanceType: "m7i.xlarge" })),
    );
    expect([changed.code, changed.message]).toEqual([
      "IdempotentParameterMismatch",
      "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).",
    ]);
    await op(ec2, "TerminateInstances", { InstanceIds: [id] });
    await waitFor("termination", () => ec2.stateOf(ec2.get(id)) === "terminated");
    const after = await op(ec2, "RunInstances", launchInput({ ClientToken }));
    expect(after.ReservationId).toBe(first.ReservationId);
    expect(after.Instances[0]).toMatchObject({ InstanceId: id, State: { Name: "terminated", Code: 48 } });
    expect(ec2.instances.size).toBe(count);
    expect(
      (await rejection(op(ec2, "RunInstances", launchInput({ ClientToken, UserData: "ZWNobw==" })))).code,
    ).toBe("IdempotentParameterMismatch");
    // Terminated instances stay listed.
    const listed = await op(ec2, "DescribeInstances", { InstanceIds: [id] });
    expect(listed.Reservations[0].Instances[0].State).toEqual({ Code: 48, Name: "terminated" });
    expect(listed.Reservations[0].Instances[0].StateReason.Code).toBe("Client.UserInitiatedShutdown");
  });
});

describe("EC2 boot: running, then the SSM agent, then cloud-init's user data in the background", () => {
  it("the agent is online before the user data is done; cloud-init status --wait waits for it", async () => {
    const script = `#!/bin/bash\nset -e\nsleep 1.5\necho "user data ran" > "$LABFLEET_ROOT/etc-booted"\n`;
    const out = await op(
      ec2,
      "RunInstances",
      launchInput({ UserData: Buffer.from(script).toString("base64") }),
    );
    expect(out.Instances[0].State).toEqual({ Code: 0, Name: "pending" });
    const inst = ec2.get(out.Instances[0].InstanceId);
    const state = async () =>
      (await op(ec2, "DescribeInstances", { InstanceIds: [inst.id] })).Reservations[0].Instances[0].State
        .Name;
    expect(await state()).toBe("pending");
    await waitFor("running", async () => (await state()) === "running");
    await online(inst);
    const info = await op(ssm, "DescribeInstanceInformation", {
      Filters: [{ Key: "InstanceIds", Values: [inst.id] }],
    });
    expect(info.InstanceInformationList.map((i: { PingStatus: string }) => i.PingStatus)).toEqual(["Online"]);
    let booted = false;
    void ec2.bootDone(inst.id).then(() => {
      booted = true;
    });
    const early = await run(
      inst,
      'cloud-init status; test -e "$LABFLEET_ROOT/etc-booted" && echo booted || echo not-booted',
    );
    expect(early.StandardOutputContent).toBe("status: running\nnot-booted\n");
    expect(booted).toBe(false);
    const waited = await run(inst, 'cloud-init status --wait; cat "$LABFLEET_ROOT/etc-booted"');
    expect(waited.Status).toBe("Success");
    expect(waited.StandardOutputContent).toMatch(/^\.+\nstatus: done\nuser data ran\n$/);
    expect(await ec2.bootDone(inst.id)).toEqual({ code: 0, output: "" });
    expect((await run(inst, "cloud-init status")).StandardOutputContent).toBe("status: done\n");
  });

  it("failed user data: cloud-init status says error and exits 1", async () => {
    const [inst] = await launch({
      UserData: Buffer.from("#!/bin/sh\necho broken >&2\nexit 3\n").toString("base64"),
    });
    const i = inst as FakeInstance;
    await online(i);
    const r = await run(i, "cloud-init status --wait");
    expect([r.Status, r.ResponseCode]).toEqual(["Failed", 1]);
    expect(r.StandardOutputContent).toMatch(/status: error\n$/);
    expect(await ec2.bootDone(i.id)).toEqual({ code: 3, output: "broken\n" });
    expect(readFileSync(join(i.root, "var/log/cloud-init-output.log"), "utf8")).toBe("broken\n");
  });

  it("the instance's aws arrives with snap after the install delay, then fetches a parameter as the host role", async () => {
    ssm.putParameter("/labfleet/test/workshops/w1/secrets", JSON.stringify({ DB_TOKEN: "s3cret é" }));
    const userData =
      "#!/bin/bash\ncommand -v aws >/dev/null 2>&1 || snap install aws-cli --classic >/dev/null 2>&1 || echo no-cli >&2\n";
    const [inst] = await launch({ UserData: Buffer.from(userData).toString("base64") });
    const i = inst as FakeInstance;
    await online(i);
    const fetch =
      "aws ssm get-parameter --name /labfleet/test/workshops/w1/secrets --with-decryption --region eu-west-1 --query Parameter.Value --output json";
    const before = await run(i, `command -v aws || echo "no aws"; ${fetch}`);
    expect(before.StandardOutputContent).toBe("no aws\n");
    expect(before.StandardErrorContent).toMatch(/aws: not found\nfailed to run commands: exit status 127$/);
    const calls = endpoint.calls.length;
    const after = await run(i, `cloud-init status --wait >/dev/null && command -v aws && ${fetch}`);
    expect(after.Status).toBe("Success");
    expect(after.StandardOutputContent).toBe(
      `${join(i.root, "snap/bin/aws")}\n${JSON.stringify(JSON.stringify({ DB_TOKEN: "s3cret é" }))}\n`,
    );
    expect(ec2.snapLog(i.id)).toEqual(["snap install aws-cli --classic"]);
    // One call, signed with the host role's credentials.
    expect(endpoint.calls.slice(calls)).toEqual([
      { operation: "GetParameter", accessKeyId: credentialsFor("host").accessKeyId, outcome: "ok" },
    ]);
    const text = await run(i, fetch.replace("--output json", "--output text"));
    expect(text.StandardOutputContent).toBe(`${JSON.stringify({ DB_TOKEN: "s3cret é" })}\n`);
  });
});

describe("the instance's AWS CLI behaves as the AWS CLI v2", () => {
  let inst: FakeInstance;
  const aws = (args: string, env: Record<string, string> = {}) =>
    ec2.runOn(inst.id, `aws ssm get-parameter ${args}`, { env });

  beforeAll(async () => {
    [inst] = (await launch()) as [FakeInstance];
    await online(inst);
    const installed = await ec2.runOn(inst.id, "snap install aws-cli --classic");
    expect(installed).toMatchObject({
      code: 0,
      stdout: expect.stringMatching(/^aws-cli \(v2\/stable\) .* installed\n$/),
    });
    ssm.putParameter("/labfleet/test/workshops/cli/secrets", "v", "String");
  });

  it("a missing parameter: the service's error, exit 254", async () => {
    expect(await aws("--name /labfleet/test/workshops/none --query Parameter.Value")).toEqual({
      code: 254,
      stdout: "",
      stderr: "\nAn error occurred (ParameterNotFound) when calling the GetParameter operation: \n",
    });
  });

  it("a denied call: AccessDeniedException, exit 254", async () => {
    endpoint.deny = (r) => r.resource.includes("/secrets/");
    try {
      const r = await aws("--name /labfleet/test/secrets/DB_TOKEN --with-decryption");
      expect(r.code).toBe(254);
      expect(r.stderr).toBe(
        `\nAn error occurred (AccessDeniedException) when calling the GetParameter operation: User: arn:aws:sts::123456789012:assumed-role/h/i is not authorized to perform: ssm:GetParameter on resource: arn:aws:ssm:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:parameter/labfleet/test/secrets/DB_TOKEN\n`,
      );
    } finally {
      endpoint.deny = () => false;
    }
  });

  it("throttled: three attempts in standard mode, AWS_MAX_ATTEMPTS honoured, then exit 254", async () => {
    const saved = ssm.parameterTps;
    ssm.parameterTps = 0;
    try {
      const count = () => endpoint.calls.filter((c) => c.outcome === "ThrottlingException").length;
      let before = count();
      const r = await aws(
        "--name /labfleet/test/workshops/cli/secrets --query Parameter.Value --output text",
      );
      expect(r).toEqual({
        code: 254,
        stdout: "",
        stderr:
          "\nAn error occurred (ThrottlingException) when calling the GetParameter operation (reached max retries: 2): Rate exceeded\n",
      });
      expect(count() - before).toBe(3);
      before = count();
      const five = await aws("--name /labfleet/test/workshops/cli/secrets", {
        AWS_MAX_ATTEMPTS: "5",
        AWS_RETRY_MODE: "standard",
      });
      expect(five.stderr).toContain("(reached max retries: 4): Rate exceeded");
      expect(count() - before).toBe(5);
    } finally {
      ssm.parameterTps = saved;
    }
    expect(
      await aws("--name /labfleet/test/workshops/cli/secrets --query Parameter.Value --output text"),
    ).toEqual({
      code: 0,
      stdout: "v\n",
      stderr: "",
    });
  });

  it("an instance without an instance profile: Unable to locate credentials, exit 253", async () => {
    const [bare] = (await launch({ IamInstanceProfile: undefined })) as [FakeInstance];
    await waitFor("running", () => ec2.stateOf(bare) === "running");
    expect(bare.agent).toBe("none");
    await ec2.runOn(bare.id, "snap install aws-cli --classic");
    expect(
      await ec2.runOn(bare.id, "aws ssm get-parameter --name /labfleet/test/workshops/cli/secrets"),
    ).toEqual({
      code: 253,
      stdout: "",
      stderr: '\nUnable to locate credentials. You can configure credentials by running "aws configure".\n',
    });
    // Without the profile no agent registers: SSM cannot reach it.
    expect((await rejection(send([bare.id], ["true"]))).code).toBe("InvalidInstanceId");
  });
});

describe("EC2 power-offs from inside", () => {
  it("power-off now terminates an instance with shutdown behaviour terminate and stops it otherwise", async () => {
    const cases = [
      ["shutdown -P now", "terminate", "terminated"],
      ["shutdown -h now", "terminate", "terminated"],
      ["systemctl poweroff", "terminate", "terminated"],
      ["poweroff", "stop", "stopped"],
      ["halt -p", "stop", "stopped"],
    ] as const;
    const launched: FakeInstance[] = [];
    for (const [, behavior] of cases) {
      const [i] = await launch({ InstanceInitiatedShutdownBehavior: behavior });
      launched.push(i as FakeInstance);
    }
    for (const i of launched) await online(i);
    for (const [n, [command]] of cases.entries()) {
      const i = launched[n] as FakeInstance;
      // A scheduled power-off and its cancel are only recorded; something runs in the background.
      await ec2.runOn(
        i.id,
        `shutdown -P +5 "later"; shutdown -c; setsid sleep 60 >/dev/null 2>&1 < /dev/null &`,
      );
      expect(ec2.stateOf(i)).toBe("running");
      await waitFor(`${i.id}'s background job`, () => ec2.processesOf(i.id).length > 0);
      void ec2.runOn(i.id, command);
    }
    for (const [n, [command, , end]] of cases.entries()) {
      const i = launched[n] as FakeInstance;
      await waitFor(`${command} to end ${i.id}`, () => ec2.stateOf(i) === end);
      expect(ec2.powerLog(i.id)).toEqual(["shutdown -P +5 later", "shutdown -c", command]);
      await waitFor(`${i.id}'s processes to be killed`, () => ec2.processesOf(i.id).length === 0);
      const described = (await op(ec2, "DescribeInstances", { InstanceIds: [i.id] })).Reservations[0]
        .Instances[0];
      expect(described.State.Name).toBe(end);
      expect(described.StateReason.Code).toBe("Client.InstanceInitiatedShutdown");
      expect(described.PublicIpAddress).toBeUndefined();
      expect((await rejection(send([i.id], ["true"]))).code).toBe("InvalidInstanceId");
    }
    const info = await op(ssm, "DescribeInstanceInformation", {
      Filters: [{ Key: "InstanceIds", Values: launched.map((i) => i.id) }],
    });
    // Stopped instances' agents are ConnectionLost; terminated ones are gone.
    expect(
      info.InstanceInformationList.map((x: { InstanceId: string; PingStatus: string }) => [
        x.InstanceId,
        x.PingStatus,
      ]),
    ).toEqual([
      [launched[3]?.id, "ConnectionLost"],
      [launched[4]?.id, "ConnectionLost"],
    ]);
  });

  it("a command that powers its instance off is never answered: it ends DeliveryTimedOut when it expires", async () => {
    const [inst] = (await launch()) as [FakeInstance];
    await online(inst);
    const id = await send([inst.id], ["shutdown -h now"], {
      TimeoutSeconds: 30,
      Parameters: { executionTimeout: ["10"] },
    });
    await waitFor("terminated", () => ec2.stateOf(inst) === "terminated");
    expect((await invocation(id, inst.id)).Status).toBe("InProgress");
    clock.advance(40_000);
    expect(await invocation(id, inst.id)).toMatchObject({
      Status: "TimedOut",
      StatusDetails: "DeliveryTimedOut",
      ResponseCode: -1,
    });
  });
});

// ------------------------------------------------------------------------------------------ Run Command

describe("SSM Run Command statuses", () => {
  let inst: FakeInstance;
  beforeAll(async () => {
    [inst] = (await launch()) as [FakeInstance];
    await online(inst);
  });

  it("SendCommand authorizes each instance with its tags and the document", async () => {
    const other = ec2.addInstance({ Tags: [{ Key: "Name", Value: "someone-elses" }] });
    const s = stub("SendCommand", (r) => r.resource.includes(other.id));
    await expect(
      ssm.operations.SendCommand?.(
        {
          DocumentName: "AWS-RunShellScript",
          InstanceIds: [inst.id, other.id],
          Parameters: { commands: ["true"] },
        },
        s.call,
      ),
    ).rejects.toThrow(AwsError);
    expect(s.requests).toEqual([
      {
        action: "ssm:SendCommand",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:instance/${inst.id}`,
        context: {
          "ssm:resourceTag/ManagedBy": "labfleet",
          "aws:ResourceTag/ManagedBy": "labfleet",
          "ssm:resourceTag/labfleet-workshop": "w1",
          "aws:ResourceTag/labfleet-workshop": "w1",
          "ssm:resourceTag/labfleet-host-id": "student-01",
          "aws:ResourceTag/labfleet-host-id": "student-01",
          [`ssm:resourceTag/${STAGE_TAG_KEY}`]: "test",
          [`aws:ResourceTag/${STAGE_TAG_KEY}`]: "test",
        },
      },
      {
        action: "ssm:SendCommand",
        resource: `arn:aws:ec2:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:instance/${other.id}`,
        context: { "ssm:resourceTag/Name": "someone-elses", "aws:ResourceTag/Name": "someone-elses" },
      },
    ]);
    const deploy = statementsOf("DeployHost");
    expect(await decide(deploy, s.requests[0] as AuthRequest)).toBe("Allowed");
    expect(await decide(deploy, s.requests[1] as AuthRequest)).toBe("ImplicitlyDenied");
    const ok = await authOf(ssm, "SendCommand", {
      DocumentName: "AWS-RunShellScript",
      InstanceIds: [inst.id],
      Parameters: { commands: ["true"] },
    });
    expect(ok[1]).toEqual({
      action: "ssm:SendCommand",
      resource: `arn:aws:ssm:${FAKE_REGION}::document/AWS-RunShellScript`,
    });
    // An AWS-owned document's ARN has no account, which the simulator's validation refuses: the harness's IAM
    // evaluates those without it.
    const policy = JSON.parse(policyDocument(deploy, REFS)) as PolicyDocument;
    const principal = {
      name: "DeployHost",
      kind: "function" as const,
      arn: "arn:aws:sts::123456789012:assumed-role/d/d",
      accessKeyId: "ASIAD",
      policy,
    };
    expect(await new Iam().allowed(principal, ok[1] as AuthRequest)).toBe(true);
    for (const [name, input] of [
      ["GetCommandInvocation", { CommandId: randomUUID(), InstanceId: inst.id }],
      ["CancelCommand", { CommandId: randomUUID() }],
      ["DescribeInstanceInformation", {}],
    ] as const) {
      const s2 = stub(name);
      await Promise.resolve(ssm.operations[name]?.(input, s2.call)).catch(() => {});
      expect(s2.requests).toEqual([{ action: `ssm:${name}`, resource: "*" }]);
    }
  });

  it("Success and Failed, with the agent's line on stderr; output is empty until the command has finished", async () => {
    const ok = await run(inst, "echo out; echo err >&2");
    expect(ok).toMatchObject({
      Status: "Success",
      StatusDetails: "Success",
      ResponseCode: 0,
      StandardOutputContent: "out\n",
      StandardErrorContent: "err\n",
      DocumentName: "AWS-RunShellScript",
      PluginName: "aws:runShellScript",
    });
    const bad = await run(inst, "echo out; echo err >&2; exit 3");
    expect(bad).toMatchObject({
      Status: "Failed",
      StatusDetails: "Failed",
      ResponseCode: 3,
      StandardOutputContent: "out\n",
      StandardErrorContent: "err\nfailed to run commands: exit status 3",
    });
    const id = await send(
      [inst.id],
      [`echo early; while [ ! -e "$LABFLEET_ROOT/go" ]; do sleep 0.05; done; echo late`],
    );
    await waitFor("the script to start", async () => (await invocation(id, inst.id)).Status === "InProgress");
    expect(await invocation(id, inst.id)).toMatchObject({
      Status: "InProgress",
      StatusDetails: "InProgress",
      ResponseCode: -1,
      StandardOutputContent: "",
      StandardErrorContent: "",
    });
    await ec2.runOn(inst.id, 'touch "$LABFLEET_ROOT/go"');
    expect((await finished(id, inst.id)).StandardOutputContent).toBe("early\nlate\n");
    // A background job that keeps the output open keeps the command running, as the agent waits for it.
    const bg = await send([inst.id], ["sleep 1 & echo started"]);
    await waitFor("the job", async () => (await invocation(bg, inst.id)).Status === "InProgress");
    expect((await finished(bg, inst.id)).StandardOutputContent).toBe("started\n");
  });

  it("executionTimeout kills the script: TimedOut, ExecutionTimedOut, 137", async () => {
    const id = await send([inst.id], ["echo before; sleep 30"], { Parameters: { executionTimeout: ["1"] } });
    const started = Date.now();
    const r = await finished(id, inst.id, 10_000);
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(r).toMatchObject({ Status: "TimedOut", StatusDetails: "ExecutionTimedOut", ResponseCode: 137 });
    expect(r.StandardOutputContent).toBe("");
    await waitFor("the sleep to be killed", () =>
      ec2
        .processesOf(inst.id)
        .every((pid) => !readFileSync(`/proc/${pid}/cmdline`, "utf8").startsWith("sleep\u000030")),
    );
  });

  it("CancelCommand: a running script is Cancelling, then Cancelled; a pending one Cancelled at once", async () => {
    const id = await send([inst.id], ["sleep 30"]);
    await waitFor("the script to start", async () => (await invocation(id, inst.id)).Status === "InProgress");
    await op(ssm, "CancelCommand", { CommandId: id });
    expect(["Cancelling", "Cancelled"]).toContain((await invocation(id, inst.id)).Status);
    expect(await finished(id, inst.id)).toMatchObject({
      Status: "Cancelled",
      StatusDetails: "Cancelled",
      ResponseCode: 137,
    });
    ssm.setAgentOnline(inst.id, false);
    try {
      const pending = await send([inst.id], ["true"]);
      expect((await invocation(pending, inst.id)).Status).toBe("Pending");
      await op(ssm, "CancelCommand", { CommandId: pending, InstanceIds: [inst.id] });
      expect(await invocation(pending, inst.id)).toMatchObject({ Status: "Cancelled", ResponseCode: -1 });
    } finally {
      ssm.setAgentOnline(inst.id, true);
    }
    expect((await rejection(op(ssm, "CancelCommand", { CommandId: randomUUID() }))).code).toBe(
      "InvalidCommandId",
    );
  });

  it("agent offline: ConnectionLost; new commands stay Pending and time out undelivered", async () => {
    ssm.setAgentOnline(inst.id, false);
    try {
      const info = await op(ssm, "DescribeInstanceInformation", {
        Filters: [{ Key: "InstanceIds", Values: [inst.id] }],
      });
      expect(info.InstanceInformationList[0].PingStatus).toBe("ConnectionLost");
      const id = await send([inst.id], ['touch "$LABFLEET_ROOT/never"'], {
        TimeoutSeconds: 30,
        Parameters: { executionTimeout: ["1"] },
      });
      expect(await invocation(id, inst.id)).toMatchObject({
        Status: "Pending",
        StatusDetails: "Pending",
        ResponseCode: -1,
      });
      clock.advance(30_500);
      expect((await invocation(id, inst.id)).Status).toBe("Pending");
      clock.advance(1_000);
      expect(await invocation(id, inst.id)).toMatchObject({
        Status: "TimedOut",
        StatusDetails: "DeliveryTimedOut",
        ResponseCode: -1,
      });
      // Past TimeoutSeconds a command no longer starts, even with the agent back before it expires.
      const late = await send([inst.id], ['touch "$LABFLEET_ROOT/late"'], { TimeoutSeconds: 30 });
      clock.advance(31_000);
      ssm.setAgentOnline(inst.id, true);
      expect((await invocation(late, inst.id)).Status).toBe("Pending");
      expect(existsSync(join(inst.root, "never")) || existsSync(join(inst.root, "late"))).toBe(false);
    } finally {
      ssm.setAgentOnline(inst.id, true);
    }
  });

  it("agent offline: a command is delivered when it is back in time; a running one reports when it is back", async () => {
    ssm.setAgentOnline(inst.id, false);
    const queued = await send([inst.id], ["echo delivered"]);
    ssm.setAgentOnline(inst.id, true);
    expect((await finished(queued, inst.id)).StandardOutputContent).toBe("delivered\n");
    const id = await send([inst.id], [`sleep 0.3; echo done; touch "$LABFLEET_ROOT/ran"`]);
    await waitFor("the script to start", async () => (await invocation(id, inst.id)).Status === "InProgress");
    ssm.setAgentOnline(inst.id, false);
    await waitFor("the script to end on the instance", () => existsSync(join(inst.root, "ran")));
    await waitFor(
      "the agent to hold the result",
      () => ssm.commands.get(id)?.invocations.get(inst.id)?.result !== undefined,
    );
    expect((await invocation(id, inst.id)).Status).toBe("InProgress");
    ssm.setAgentOnline(inst.id, true);
    expect(await invocation(id, inst.id)).toMatchObject({
      Status: "Success",
      StandardOutputContent: "done\n",
    });
  });

  it("Delayed when the instance stops with a command pending; Undeliverable when it terminates", async () => {
    const [a, b] = (await launch({
      MinCount: 2,
      MaxCount: 2,
      InstanceInitiatedShutdownBehavior: "stop",
    })) as FakeInstance[];
    for (const i of [a, b] as FakeInstance[]) {
      await online(i);
      ssm.setAgentOnline(i.id, false);
    }
    const id = await send([(a as FakeInstance).id, (b as FakeInstance).id], ["true"]);
    void ec2.runOn((a as FakeInstance).id, "poweroff");
    await waitFor("stopped", () => ec2.stateOf(a as FakeInstance) === "stopped");
    expect(await invocation(id, (a as FakeInstance).id)).toMatchObject({
      Status: "Delayed",
      StatusDetails: "Delayed",
    });
    await op(ec2, "TerminateInstances", { InstanceIds: [(b as FakeInstance).id] });
    expect(await invocation(id, (b as FakeInstance).id)).toMatchObject({
      Status: "Failed",
      StatusDetails: "Undeliverable",
      ResponseCode: -1,
    });
  });

  it("output is cut to the first 24,000 characters of stdout and 8,000 of stderr, not bytes", async () => {
    const r = await run(
      inst,
      `python3 -c 'import sys; sys.stdout.write("é" * 30000); sys.stderr.write("😀" * 9000 + "x")'`,
    );
    expect(r.Status).toBe("Success");
    expect(r.StandardOutputContent).toBe("é".repeat(24_000));
    expect(Buffer.byteLength(r.StandardOutputContent ?? "")).toBe(48_000);
    expect(Array.from(r.StandardErrorContent ?? "")).toHaveLength(8_000);
    expect(r.StandardErrorContent).toBe("😀".repeat(8_000));
    // The whole output stays in the agent's orchestration folder on the instance.
    const inv = ssm.invocation(r.CommandId as string, inst.id);
    expect(readFileSync(join(inv.work as string, "stdout"), "utf8")).toBe("é".repeat(30_000));
  });

  it("refuses what AWS refuses", async () => {
    const codeOf = async (input: object) => (await rejection(op(ssm, "SendCommand", input))).code;
    const base = {
      DocumentName: "AWS-RunShellScript",
      InstanceIds: [inst.id],
      Parameters: { commands: ["true"] },
    };
    expect(await codeOf({ ...base, TimeoutSeconds: 5 })).toBe("ValidationException");
    expect(await codeOf({ ...base, Parameters: { commands: ["true"], executionTimeout: ["0"] } })).toBe(
      "InvalidParameters",
    );
    expect(await codeOf({ ...base, Parameters: { commands: ["true"], executionTimeout: ["172801"] } })).toBe(
      "InvalidParameters",
    );
    expect(await codeOf({ ...base, DocumentName: "AWS-RunPowerShellScript" })).toBe("InvalidDocument");
    expect(await codeOf({ ...base, InstanceIds: [inst.id, inst.id] })).toBe("DuplicateInstanceId");
    expect(await codeOf({ ...base, Comment: "x".repeat(101) })).toBe("ValidationException");
    const stranger = ec2.addInstance({});
    const err = await rejection(op(ssm, "SendCommand", { ...base, InstanceIds: [stranger.id] }));
    expect([err.code, err.message]).toEqual([
      "InvalidInstanceId",
      `Instances [[${stranger.id}]] not in a valid state for account ${FAKE_ACCOUNT_ID}`,
    ]);
    expect(
      (await rejection(op(ssm, "GetCommandInvocation", { CommandId: randomUUID(), InstanceId: inst.id })))
        .code,
    ).toBe("InvocationDoesNotExist");
  });
});

describe("SSM SendCommand to 50 instances", () => {
  it("takes 50 ids, each its own invocation on its own instance, and refuses 51", async () => {
    const fleet = (await launch({ MinCount: 50, MaxCount: 50 })) as FakeInstance[];
    expect(fleet).toHaveLength(50);
    for (const i of fleet) await online(i);
    const ids = fleet.map((i) => i.id);
    // DescribeInstanceInformation pages by 10 unless told otherwise.
    const pages: number[] = [];
    let NextToken: string | undefined;
    do {
      const page = await op(ssm, "DescribeInstanceInformation", {
        Filters: [{ Key: "InstanceIds", Values: ids }],
        ...(NextToken ? { NextToken } : {}),
      });
      pages.push(page.InstanceInformationList.length);
      NextToken = page.NextToken;
    } while (NextToken);
    expect(pages).toEqual([10, 10, 10, 10, 10]);
    const one = await op(ssm, "DescribeInstanceInformation", {
      Filters: [{ Key: "InstanceIds", Values: ids }],
      MaxResults: 50,
    });
    expect(one.InstanceInformationList).toHaveLength(50);
    expect(one.NextToken).toBeUndefined();

    const commandId = await send(ids, ['echo "$LABFLEET_FAKE_INSTANCE"']);
    for (const id of ids) {
      const r = await finished(commandId, id);
      expect([r.Status, r.StandardOutputContent]).toEqual(["Success", `${id}\n`]);
    }
    const extra = (await launch())[0] as FakeInstance;
    await online(extra);
    const err = await rejection(send([...ids, extra.id], ["true"]));
    expect(err.code).toBe("ValidationException");
    expect(err.message).toMatch(
      /at 'instanceIds' failed to satisfy constraint: Member must have length less than or equal to 50$/,
    );
    await op(ec2, "TerminateInstances", { InstanceIds: [...ids, extra.id] });
  });
});

// ---------------------------------------------------------------------------------------- Parameter Store

describe("Parameter Store", () => {
  it("Put, Get, GetParameters and Delete, with AWS's errors, tiers and ARNs", async () => {
    const put = await authOf(ssm, "PutParameter", {
      Name: "/labfleet/test/workshops/w9/secrets",
      Value: "{}",
      Type: "SecureString",
      Overwrite: true,
    });
    expect(put).toEqual([
      {
        action: "ssm:PutParameter",
        resource: `arn:aws:ssm:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:parameter/labfleet/test/workshops/w9/secrets`,
        context: { "ssm:Overwrite": "true" },
      },
    ]);
    expect(await decide(statementsOf("BeginUp"), put[0] as AuthRequest)).toBe("Allowed");
    const name = "/labfleet/test/workshops/w9/secrets";
    expect(
      await op(ssm, "PutParameter", { Name: name, Value: "two", Type: "SecureString", Overwrite: true }),
    ).toEqual({
      Version: 2,
      Tier: "Standard",
    });
    expect((await rejection(op(ssm, "PutParameter", { Name: name, Value: "x", Type: "String" }))).code).toBe(
      "ParameterAlreadyExists",
    );
    const hidden = await op(ssm, "GetParameter", { Name: name });
    expect(hidden.Parameter).toMatchObject({ Name: name, Type: "SecureString", Version: 2 });
    expect(hidden.Parameter.Value).not.toBe("two");
    const shown = await op(ssm, "GetParameter", { Name: name, WithDecryption: true });
    expect(shown.Parameter).toMatchObject({
      Value: "two",
      ARN: `arn:aws:ssm:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:parameter/labfleet/test/workshops/w9/secrets`,
    });
    expect((await op(ssm, "GetParameter", { Name: `${name}:1`, WithDecryption: true })).Parameter.Value).toBe(
      "{}",
    );
    expect(
      await decide(HOST_ROLE, (await authOf(ssm, "GetParameter", { Name: name }))[0] as AuthRequest),
    ).toBe("Allowed");
    const secret = await authOf(ssm, "GetParameter", { Name: "/labfleet/test/secrets/DB_TOKEN" });
    expect(secret[0]?.resource).toBe(
      `arn:aws:ssm:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:parameter/labfleet/test/secrets/DB_TOKEN`,
    );
    expect(await decide(HOST_ROLE, secret[0] as AuthRequest)).toBe("ImplicitlyDenied");
    // A name without a leading slash has none to drop.
    expect(
      (await authOf(ssm, "PutParameter", { Name: "plain", Value: "p", Type: "String" }))[0]?.resource,
    ).toBe(`arn:aws:ssm:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:parameter/plain`);

    // Tiers: a standard parameter holds 4 KB, an advanced one 8 KB; Intelligent-Tiering picks.
    const kb = (n: number) => "k".repeat(n);
    expect((await op(ssm, "PutParameter", { Name: "/t/std", Value: kb(4096), Type: "String" })).Tier).toBe(
      "Standard",
    );
    expect(
      (await rejection(op(ssm, "PutParameter", { Name: "/t/big", Value: kb(4097), Type: "String" }))).code,
    ).toBe("ValidationException");
    expect(
      (
        await op(ssm, "PutParameter", {
          Name: "/t/big",
          Value: kb(4097),
          Type: "String",
          Tier: "Intelligent-Tiering",
        })
      ).Tier,
    ).toBe("Advanced");
    expect(
      (
        await op(ssm, "PutParameter", {
          Name: "/t/small",
          Value: "s",
          Type: "String",
          Tier: "Intelligent-Tiering",
        })
      ).Tier,
    ).toBe("Standard");
    expect(
      (
        await rejection(
          op(ssm, "PutParameter", { Name: "/t/huge", Value: kb(8193), Type: "String", Tier: "Advanced" }),
        )
      ).code,
    ).toBe("ValidationException");
    expect(
      (
        await rejection(
          op(ssm, "PutParameter", {
            Name: "/t/big",
            Value: "s",
            Type: "String",
            Tier: "Standard",
            Overwrite: true,
          }),
        )
      ).code,
    ).toBe("ValidationException");
    expect(
      (await rejection(op(ssm, "PutParameter", { Name: "/aws/x", Value: "s", Type: "String" }))).code,
    ).toBe("ValidationException");
    expect((await rejection(op(ssm, "PutParameter", { Name: "/t/untyped", Value: "s" }))).code).toBe(
      "ValidationException",
    );

    // GetParameters: at most 10 names, the missing ones listed, the rest in alphabetical order; every ARN asked.
    const names = ["/t/std", "/t/small", "/t/none"];
    const got = await op(ssm, "GetParameters", { Names: names });
    expect(got.Parameters.map((p: { Name: string }) => p.Name)).toEqual(["/t/small", "/t/std"]);
    expect(got.InvalidParameters).toEqual(["/t/none"]);
    expect(await authOf(ssm, "GetParameters", { Names: names })).toEqual(
      names.map((n) => ({
        action: "ssm:GetParameters",
        resource: `arn:aws:ssm:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:parameter${n}`,
        context: {},
      })),
    );
    const operator = await authOf(ssm, "GetParameters", {
      Names: ["/labfleet/test/secrets/A", "/labfleet/test/secrets/B"],
      WithDecryption: true,
    });
    for (const r of operator) expect(await decide(statementsOf("BeginUp"), r)).toBe("Allowed");
    expect(
      await decide(
        statementsOf("BeginUp"),
        (await authOf(ssm, "GetParameters", { Names: ["/other/x"] }))[0] as AuthRequest,
      ),
    ).toBe("ImplicitlyDenied");
    const eleven = Array.from({ length: 11 }, (_, i) => `/t/p${i}`);
    expect((await rejection(op(ssm, "GetParameters", { Names: eleven }))).code).toBe("ValidationException");

    await op(ssm, "DeleteParameter", { Name: "/t/std" });
    expect((await rejection(op(ssm, "DeleteParameter", { Name: "/t/std" }))).code).toBe("ParameterNotFound");
    expect((await rejection(op(ssm, "GetParameter", { Name: "/t/std" }))).code).toBe("ParameterNotFound");
  });

  it("GetParameter and GetParameters share a 40 TPS quota over a sliding second: ThrottlingException above it", async () => {
    let t = 1_000_000;
    const store = new FakeSsm({ ec2, now: () => t });
    store.putParameter("/q/a", "a", "String");
    for (let i = 0; i < 20; i++) await op(store, "GetParameter", { Name: "/q/a" });
    t += 500;
    for (let i = 0; i < 20; i++) await op(store, "GetParameters", { Names: ["/q/a"] });
    const throttled = await rejection(op(store, "GetParameter", { Name: "/q/a" }));
    expect([throttled.code, throttled.message, throttled.status]).toEqual([
      "ThrottlingException",
      "Rate exceeded",
      400,
    ]);
    expect((await rejection(op(store, "GetParameters", { Names: ["/q/a"] }))).code).toBe(
      "ThrottlingException",
    );
    t += 499; // the first 20 are 999 ms old: still inside the second
    expect((await rejection(op(store, "GetParameter", { Name: "/q/a" }))).code).toBe("ThrottlingException");
    t += 1; // now they are a second old: 20 slots free
    for (let i = 0; i < 20; i++) await op(store, "GetParameter", { Name: "/q/a" });
    expect((await rejection(op(store, "GetParameter", { Name: "/q/a" }))).code).toBe("ThrottlingException");
    // Writes are not counted against the read quota; the quota is an option.
    await op(store, "PutParameter", { Name: "/q/a", Value: "b", Type: "String", Overwrite: true });
    const roomy = new FakeSsm({ ec2, now: () => t, parameterTps: 100, putParameterTps: 1 });
    roomy.putParameter("/q/b", "b", "String");
    for (let i = 0; i < 100; i++) await op(roomy, "GetParameter", { Name: "/q/b" });
    expect((await rejection(op(roomy, "GetParameter", { Name: "/q/b" }))).code).toBe("ThrottlingException");
    await op(roomy, "PutParameter", { Name: "/q/b", Value: "c", Type: "String", Overwrite: true });
    expect(
      (
        await rejection(
          op(roomy, "PutParameter", { Name: "/q/b", Value: "d", Type: "String", Overwrite: true }),
        )
      ).code,
    ).toBe("ThrottlingException");
  });
});

describe("close", () => {
  it("kills every process of every instance and waits", async () => {
    const local = new FakeEc2({ dir: join(dir, "closing"), bootMs: 10, agentMs: 10 });
    const out = await op(local, "RunInstances", {
      ImageId: AMI,
      InstanceType: "m7i.large",
      SubnetId: FAKE_SUBNET,
      MinCount: 2,
      MaxCount: 2,
      UserData: Buffer.from("#!/bin/sh\nsleep 60\n").toString("base64"),
    });
    const ids = out.Instances.map((i: { InstanceId: string }) => i.InstanceId) as string[];
    await waitFor("the user data to run", () => ids.every((id) => local.processesOf(id).length > 0));
    await local.close();
    expect(local.processesOf()).toEqual([]);
  });
});
