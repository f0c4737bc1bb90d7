import { Buffer } from "node:buffer";
import { Readable } from "node:stream";
import {
  ConditionalCheckFailedException,
  DynamoDBClient,
  GetItemCommand,
  PutItemCommand,
} from "@aws-sdk/client-dynamodb";
import {
  AuthorizeSecurityGroupIngressCommand,
  type AuthorizeSecurityGroupIngressCommandInput,
  type AuthorizeSecurityGroupIngressCommandOutput,
  CreateSecurityGroupCommand,
  type CreateSecurityGroupCommandInput,
  type CreateSecurityGroupCommandOutput,
  CreateTagsCommand,
  type CreateTagsCommandInput,
  DeleteSecurityGroupCommand,
  type DeleteSecurityGroupCommandOutput,
  DescribeImagesCommand,
  type DescribeImagesCommandInput,
  type DescribeImagesCommandOutput,
  DescribeInstancesCommand,
  type DescribeInstancesCommandInput,
  type DescribeInstancesCommandOutput,
  DescribeInstanceTypesCommand,
  type DescribeInstanceTypesCommandOutput,
  DescribeSecurityGroupsCommand,
  type DescribeSecurityGroupsCommandInput,
  type DescribeSecurityGroupsCommandOutput,
  DescribeSpotPriceHistoryCommand,
  type DescribeSpotPriceHistoryCommandInput,
  DescribeSubnetsCommand,
  type DescribeSubnetsCommandInput,
  type DescribeSubnetsCommandOutput,
  EC2Client,
  EC2ServiceException,
  type Instance,
  RevokeSecurityGroupIngressCommand,
  type RevokeSecurityGroupIngressCommandInput,
  type RevokeSecurityGroupIngressCommandOutput,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  type RunInstancesCommandOutput,
  TerminateInstancesCommand,
  type TerminateInstancesCommandOutput,
} from "@aws-sdk/client-ec2";
import {
  EventBridgeClient,
  ResourceNotFoundException as EventsResourceNotFoundException,
  PutEventsCommand,
  type PutEventsCommandInput,
} from "@aws-sdk/client-eventbridge";
import {
  GetAccountSettingsCommand,
  type GetAccountSettingsCommandOutput,
  InvokeCommand,
  LambdaClient,
  TooManyRequestsException,
} from "@aws-sdk/client-lambda";
import {
  ConflictException,
  CreateScheduleCommand,
  type CreateScheduleCommandInput,
  DeleteScheduleCommand,
  GetScheduleCommand,
  type GetScheduleCommandOutput,
  ResourceNotFoundException,
  SchedulerClient,
  UpdateScheduleCommand,
  type UpdateScheduleCommandInput,
} from "@aws-sdk/client-scheduler";
import {
  GetServiceQuotaCommand,
  type GetServiceQuotaCommandOutput,
  NoSuchResourceException,
  ServiceQuotasClient,
} from "@aws-sdk/client-service-quotas";
import {
  DescribeExecutionCommand,
  type DescribeExecutionCommandOutput,
  ExecutionDoesNotExist,
  SFNClient,
  StartExecutionCommand,
} from "@aws-sdk/client-sfn";
import {
  AccessDeniedException,
  DescribeInstanceInformationCommand,
  type DescribeInstanceInformationCommandInput,
  type DescribeInstanceInformationCommandOutput,
  GetCommandInvocationCommand,
  type GetCommandInvocationCommandOutput,
  GetParametersCommand,
  type GetParametersCommandOutput,
  InvocationDoesNotExist,
  PutParameterCommand,
  type PutParameterCommandInput,
  SendCommandCommand,
  type SendCommandCommandInput,
  type SendCommandCommandOutput,
  SSMClient,
  ThrottlingException,
} from "@aws-sdk/client-ssm";
import { type HttpRequest, HttpResponse } from "@smithy/core/protocols";
import { isThrottlingError } from "@smithy/core/retry";
import { describe, expect, it } from "vitest";
import { credentialsFor } from "../harness/aws/core.ts";
import {
  type DecodedRequest,
  decodeRequest,
  encodeError,
  encodeResult,
  type RawRequest,
  type RawResponse,
} from "../harness/aws/protocol.ts";

// Every SDK client here talks to the protocol layer through a request handler that decodes the signed request
// with decodeRequest and answers with encodeResult/encodeError: the SDK's own serializers and deserializers are
// the other side of every assertion. No network.

const REQUEST_ID = "5d2a6f0e-0c1b-4d7e-9a61-3f1f5f0c2b11";
const creds = credentialsFor("BeginUp");
const LAUNCH = new Date("2026-03-02T09:00:01.250Z");
const LATER = new Date("2026-03-02T09:04:30.500Z");

interface Exchange {
  raw: RawRequest;
  decoded: DecodedRequest;
  response: RawResponse;
}

type Reply = (decoded: DecodedRequest) => RawResponse;

function toRaw(request: HttpRequest): RawRequest {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(request.query ?? {})) {
    for (const value of Array.isArray(v) ? v : [v ?? ""]) query.append(k, value);
  }
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(request.headers)) headers[k.toLowerCase()] = v;
  const body: unknown = request.body;
  const bytes =
    body == null
      ? Buffer.alloc(0)
      : typeof body === "string"
        ? Buffer.from(body)
        : Buffer.from(
            (body as Uint8Array).buffer,
            (body as Uint8Array).byteOffset,
            (body as Uint8Array).byteLength,
          );
  return { method: request.method, path: request.path, query, headers, body: bytes };
}

/** A client config whose request handler runs the protocol layer; `seen` holds the last exchange. */
function wire(reply: Reply) {
  const seen: Partial<Exchange> = {};
  const requestHandler = {
    async handle(request: HttpRequest) {
      const raw = toRaw(request);
      const decoded = decodeRequest(raw);
      const response = reply(decoded);
      Object.assign(seen, { raw, decoded, response });
      const body = Readable.from([Buffer.from(response.body)]);
      return { response: new HttpResponse({ statusCode: response.status, headers: response.headers, body }) };
    },
  };
  const config = {
    region: "eu-west-1",
    endpoint: "http://127.0.0.1:4566",
    credentials: creds,
    maxAttempts: 1,
    requestHandler,
  };
  return { config, seen: seen as Exchange };
}

const ok =
  (output: unknown): Reply =>
  (d) =>
    encodeResult(d.service, d.operation as string, output, REQUEST_ID);

const fail =
  (code: string, message: string, status: number, fields?: Record<string, unknown>): Reply =>
  (d) =>
    encodeError(d.service, d.operation, code, message, status, REQUEST_ID, fields);

type Config = ReturnType<typeof wire>["config"];

/** Sends one command through the protocol layer; returns what the double saw and what the SDK returned. */
async function roundTrip<T>(send: (config: Config) => Promise<T>, output: unknown) {
  const { config, seen } = wire(ok(output));
  const result = await send(config);
  const { $metadata, ...rest } = result as T & { $metadata: { httpStatusCode?: number; requestId?: string } };
  return { ...seen, result: rest as Omit<T, "$metadata">, metadata: $metadata };
}

/** The error the SDK throws for a response encoded by encodeError. */
async function sdkError(send: (config: Config) => Promise<unknown>, reply: Reply) {
  const { config, seen } = wire(reply);
  const error = await send(config).then(
    () => undefined,
    (e: unknown) => e as Error & { $metadata: { httpStatusCode?: number; requestId?: string } },
  );
  if (!error) throw new Error("expected the call to fail");
  return { error, seen };
}

const ec2 = (config: Config) => new EC2Client(config);

/** What the SDK's retry strategy asks of an error to back off as from throttling. */
const throttling = (error: unknown) => isThrottlingError(error as Parameters<typeof isThrottlingError>[0]);

const tags = [
  { Key: "ManagedBy", Value: "labfleet" },
  { Key: "labfleet-workshop", Value: "k8s-101" },
  { Key: "labfleet-host-id", Value: "host-03" },
];

const instance: Instance = {
  InstanceId: "i-0a1b2c3d4e5f60718",
  ImageId: "ami-0c1d2e3f4a5b6c7d8",
  InstanceType: "t3.medium",
  State: { Code: 16, Name: "running" },
  LaunchTime: LAUNCH,
  Tags: tags,
  SecurityGroups: [{ GroupId: "sg-0123456789abcdef0", GroupName: "labfleet-k8s-101" }],
  SubnetId: "subnet-0aa11bb22cc33dd44",
  VpcId: "vpc-0123abcd",
  PrivateIpAddress: "172.31.5.17",
  PublicIpAddress: "203.0.113.25",
  IamInstanceProfile: {
    Arn: "arn:aws:iam::123456789012:instance-profile/labfleet-host",
    Id: "AIPAEXAMPLE1234567890",
  },
  MetadataOptions: {
    HttpTokens: "required",
    HttpEndpoint: "enabled",
    HttpPutResponseHopLimit: 2,
    State: "applied",
  },
  ClientToken: "labfleet-k8s-101-host-03",
  CpuOptions: { CoreCount: 1, ThreadsPerCore: 2 },
  BlockDeviceMappings: [
    {
      DeviceName: "/dev/xvda",
      Ebs: {
        VolumeId: "vol-0f1e2d3c4b5a69788",
        Status: "attached",
        AttachTime: LAUNCH,
        DeleteOnTermination: true,
      },
    },
  ],
  Placement: { AvailabilityZone: "eu-west-1a", Tenancy: "default" },
  Monitoring: { State: "disabled" },
  AmiLaunchIndex: 0,
  Architecture: "x86_64",
  EbsOptimized: false,
  EnaSupport: true,
  NetworkInterfaces: [],
};

describe("EC2 query protocol", () => {
  it("RunInstances: the input decodes to exactly what the command was given, the reservation comes back", async () => {
    const input: RunInstancesCommandInput = {
      ImageId: "ami-0c1d2e3f4a5b6c7d8",
      InstanceType: "t3.medium",
      MinCount: 1,
      MaxCount: 1,
      SubnetId: "subnet-0aa11bb22cc33dd44",
      SecurityGroupIds: ["sg-0123456789abcdef0", "sg-0fedcba9876543210"],
      IamInstanceProfile: { Name: "labfleet-host" },
      MetadataOptions: { HttpTokens: "required", HttpEndpoint: "enabled", HttpPutResponseHopLimit: 2 },
      BlockDeviceMappings: [
        {
          DeviceName: "/dev/xvda",
          Ebs: { VolumeSize: 40, VolumeType: "gp3", DeleteOnTermination: true, Encrypted: true },
        },
      ],
      UserData: Buffer.from("#!/bin/bash\necho 'labfleet & co' > /etc/motd\n").toString("base64"),
      ClientToken: "labfleet-k8s-101-host-03",
      CpuOptions: { CoreCount: 1, ThreadsPerCore: 2 },
      TagSpecifications: [
        { ResourceType: "instance", Tags: tags },
        { ResourceType: "volume", Tags: [{ Key: "ManagedBy", Value: "labfleet" }] },
      ],
      InstanceInitiatedShutdownBehavior: "terminate",
    };
    const output: Omit<RunInstancesCommandOutput, "$metadata"> = {
      ReservationId: "r-0123456789abcdef0",
      OwnerId: "123456789012",
      Groups: [],
      Instances: [{ ...instance, State: { Code: 0, Name: "pending" } }],
    };
    const got = await roundTrip((c) => ec2(c).send(new RunInstancesCommand(input)), output);
    expect(got.decoded).toMatchObject({
      service: "ec2",
      operation: "RunInstances",
      accessKeyId: creds.accessKeyId,
      region: "eu-west-1",
    });
    expect(got.decoded.input).toEqual(input);
    expect(got.result).toEqual(output);
    expect(got.metadata).toMatchObject({ httpStatusCode: 200, requestId: REQUEST_ID });
    // The wire format EC2 reads: a form body with Action and Version, flattened 1-indexed lists.
    const form = new URLSearchParams(got.raw.body.toString("utf8"));
    expect(form.get("Action")).toBe("RunInstances");
    expect(form.get("Version")).toBe("2016-11-15");
    expect(form.get("SecurityGroupId.2")).toBe("sg-0fedcba9876543210");
    expect(form.get("TagSpecification.1.Tag.2.Key")).toBe("labfleet-workshop");
  });

  it("DescribeInstances: filters and NextToken decode; reservations, tags, state and dates round-trip", async () => {
    const input: DescribeInstancesCommandInput = {
      Filters: [
        { Name: "tag:labfleet-workshop", Values: ["k8s-101"] },
        { Name: "instance-state-name", Values: ["pending", "running", "stopping", "stopped"] },
      ],
      NextToken: "eyJ2IjoiMiIsImMiOiJhYmMifQ==",
      MaxResults: 100,
    };
    const second: Instance = {
      ...instance,
      InstanceId: "i-0ffffeeeedddd0001",
      Tags: [{ Key: "Name", Value: "" }],
    };
    const output: Omit<DescribeInstancesCommandOutput, "$metadata"> = {
      Reservations: [
        {
          ReservationId: "r-0123456789abcdef0",
          OwnerId: "123456789012",
          Groups: [],
          Instances: [instance, second],
        },
        { ReservationId: "r-0fedcba9876543210", OwnerId: "123456789012", Instances: [instance] },
      ],
      NextToken: "eyJ2IjoiMiIsImMiOiJkZWYifQ==",
    };
    const got = await roundTrip((c) => ec2(c).send(new DescribeInstancesCommand(input)), output);
    expect(got.decoded.operation).toBe("DescribeInstances");
    expect(got.decoded.input).toEqual(input);
    expect(got.result).toEqual(output);
    expect(got.result.Reservations?.[0]?.Instances?.[0]?.LaunchTime).toBeInstanceOf(Date);
    // EC2's XML: lower-camel element names, lists as <xSet><item>.
    const xml = String(got.response.body);
    expect(xml).toContain('<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">');
    expect(xml).toContain(`<requestId>${REQUEST_ID}</requestId>`);
    expect(xml).toContain("<reservationSet><item><reservationId>r-0123456789abcdef0</reservationId>");
    expect(xml).toContain("<tagSet><item><key>ManagedBy</key><value>labfleet</value></item>");
    expect(xml).toContain("<instanceState><code>16</code><name>running</name></instanceState>");
    expect(xml).toContain(`<launchTime>${LAUNCH.toISOString()}</launchTime>`);
  });

  it("DescribeSecurityGroups: IpPermissions with IpRanges, Ipv6Ranges and UserIdGroupPairs", async () => {
    const input: DescribeSecurityGroupsCommandInput = {
      GroupIds: ["sg-0123456789abcdef0"],
      Filters: [{ Name: "vpc-id", Values: ["vpc-0123abcd"] }],
    };
    const output: Omit<DescribeSecurityGroupsCommandOutput, "$metadata"> = {
      SecurityGroups: [
        {
          GroupId: "sg-0123456789abcdef0",
          GroupName: "labfleet-k8s-101",
          Description: "labfleet hosts of k8s-101 <students>",
          OwnerId: "123456789012",
          VpcId: "vpc-0123abcd",
          SecurityGroupArn: "arn:aws:ec2:eu-west-1:123456789012:security-group/sg-0123456789abcdef0",
          IpPermissions: [
            {
              IpProtocol: "tcp",
              FromPort: 22,
              ToPort: 22,
              IpRanges: [{ CidrIp: "198.51.100.0/24", Description: "venue wifi" }],
              Ipv6Ranges: [{ CidrIpv6: "2001:db8::/32", Description: "venue v6" }],
              UserIdGroupPairs: [],
              PrefixListIds: [],
            },
            {
              IpProtocol: "-1",
              UserIdGroupPairs: [
                { GroupId: "sg-0123456789abcdef0", UserId: "123456789012", Description: "self" },
              ],
              IpRanges: [],
              Ipv6Ranges: [],
              PrefixListIds: [],
            },
          ],
          IpPermissionsEgress: [
            {
              IpProtocol: "-1",
              IpRanges: [{ CidrIp: "0.0.0.0/0" }],
              Ipv6Ranges: [],
              UserIdGroupPairs: [],
              PrefixListIds: [],
            },
          ],
          Tags: tags,
        },
      ],
    };
    const got = await roundTrip((c) => ec2(c).send(new DescribeSecurityGroupsCommand(input)), output);
    expect(got.decoded.input).toEqual(input);
    expect(got.result).toEqual(output);
  });

  it("security group changes: create, authorize, revoke, delete", async () => {
    const create: CreateSecurityGroupCommandInput = {
      GroupName: "labfleet-k8s-101",
      Description: "labfleet hosts of k8s-101",
      VpcId: "vpc-0123abcd",
      TagSpecifications: [{ ResourceType: "security-group", Tags: tags }],
    };
    const created: Omit<CreateSecurityGroupCommandOutput, "$metadata"> = {
      GroupId: "sg-0123456789abcdef0",
      Tags: tags,
      SecurityGroupArn: "arn:aws:ec2:eu-west-1:123456789012:security-group/sg-0123456789abcdef0",
    };
    const c1 = await roundTrip((c) => ec2(c).send(new CreateSecurityGroupCommand(create)), created);
    expect(c1.decoded.input).toEqual(create);
    expect(c1.result).toEqual(created);

    const permissions = [
      {
        IpProtocol: "tcp",
        FromPort: 22,
        ToPort: 22,
        IpRanges: [{ CidrIp: "198.51.100.0/24", Description: "venue wifi" }],
        Ipv6Ranges: [{ CidrIpv6: "2001:db8::/32" }],
      },
      {
        IpProtocol: "tcp",
        FromPort: 443,
        ToPort: 443,
        UserIdGroupPairs: [{ GroupId: "sg-0fedcba9876543210" }],
      },
    ];
    const authorize: AuthorizeSecurityGroupIngressCommandInput = {
      GroupId: "sg-0123456789abcdef0",
      IpPermissions: permissions,
    };
    const authorized: Omit<AuthorizeSecurityGroupIngressCommandOutput, "$metadata"> = {
      Return: true,
      SecurityGroupRules: [
        {
          SecurityGroupRuleId: "sgr-0a1b2c3d4e5f60718",
          GroupId: "sg-0123456789abcdef0",
          GroupOwnerId: "123456789012",
          IsEgress: false,
          IpProtocol: "tcp",
          FromPort: 22,
          ToPort: 22,
          CidrIpv4: "198.51.100.0/24",
          Description: "venue wifi",
          Tags: [],
        },
      ],
    };
    const c2 = await roundTrip(
      (c) => ec2(c).send(new AuthorizeSecurityGroupIngressCommand(authorize)),
      authorized,
    );
    expect(c2.decoded.input).toEqual(authorize);
    expect(c2.result).toEqual(authorized);

    const revoke: RevokeSecurityGroupIngressCommandInput = {
      GroupId: "sg-0123456789abcdef0",
      IpPermissions: permissions.slice(0, 1),
    };
    const revoked: Omit<RevokeSecurityGroupIngressCommandOutput, "$metadata"> = {
      Return: true,
      UnknownIpPermissions: [],
      RevokedSecurityGroupRules: [
        {
          SecurityGroupRuleId: "sgr-0a1b2c3d4e5f60718",
          GroupId: "sg-0123456789abcdef0",
          IsEgress: false,
          IpProtocol: "tcp",
          FromPort: 22,
          ToPort: 22,
          CidrIpv4: "198.51.100.0/24",
        },
      ],
    };
    const c3 = await roundTrip((c) => ec2(c).send(new RevokeSecurityGroupIngressCommand(revoke)), revoked);
    expect(c3.decoded.input).toEqual(revoke);
    expect(c3.result).toEqual(revoked);

    const deleted: Omit<DeleteSecurityGroupCommandOutput, "$metadata"> = {
      Return: true,
      GroupId: "sg-0123456789abcdef0",
    };
    const c4 = await roundTrip(
      (c) => ec2(c).send(new DeleteSecurityGroupCommand({ GroupId: "sg-0123456789abcdef0" })),
      deleted,
    );
    expect(c4.decoded).toMatchObject({
      operation: "DeleteSecurityGroup",
      input: { GroupId: "sg-0123456789abcdef0" },
    });
    expect(c4.result).toEqual(deleted);
  });

  it("DescribeImages, DescribeSubnets and DescribeInstanceTypes", async () => {
    const images: DescribeImagesCommandInput = {
      Owners: ["amazon"],
      Filters: [
        { Name: "name", Values: ["al2023-ami-2023.*-x86_64"] },
        { Name: "state", Values: ["available"] },
      ],
      IncludeDeprecated: false,
    };
    const imagesOut: Omit<DescribeImagesCommandOutput, "$metadata"> = {
      Images: [
        {
          ImageId: "ami-0c1d2e3f4a5b6c7d8",
          Name: "al2023-ami-2023.6.20250115.0-kernel-6.1-x86_64",
          CreationDate: "2025-01-15T22:13:12.000Z",
          State: "available",
          Architecture: "x86_64",
          OwnerId: "137112412989",
          Public: true,
          RootDeviceName: "/dev/xvda",
          RootDeviceType: "ebs",
          BlockDeviceMappings: [
            {
              DeviceName: "/dev/xvda",
              Ebs: { SnapshotId: "snap-0123", VolumeSize: 8, VolumeType: "gp3", DeleteOnTermination: true },
            },
          ],
        },
      ],
    };
    let got = await roundTrip((c) => ec2(c).send(new DescribeImagesCommand(images)), imagesOut);
    expect(got.decoded.input).toEqual(images);
    expect(got.result).toEqual(imagesOut);

    const subnets: DescribeSubnetsCommandInput = {
      Filters: [
        { Name: "vpc-id", Values: ["vpc-0123abcd"] },
        { Name: "default-for-az", Values: ["true"] },
      ],
    };
    const subnetsOut: Omit<DescribeSubnetsCommandOutput, "$metadata"> = {
      Subnets: [
        {
          SubnetId: "subnet-0aa11bb22cc33dd44",
          VpcId: "vpc-0123abcd",
          AvailabilityZone: "eu-west-1a",
          AvailabilityZoneId: "euw1-az1",
          CidrBlock: "172.31.0.0/20",
          AvailableIpAddressCount: 4091,
          DefaultForAz: true,
          MapPublicIpOnLaunch: true,
          State: "available",
          Tags: [],
        },
      ],
    };
    got = await roundTrip((c) => ec2(c).send(new DescribeSubnetsCommand(subnets)), subnetsOut);
    expect(got.decoded.input).toEqual(subnets);
    expect(got.result).toEqual(subnetsOut);

    const typesOut: Omit<DescribeInstanceTypesCommandOutput, "$metadata"> = {
      InstanceTypes: [
        {
          InstanceType: "t3.medium",
          CurrentGeneration: true,
          VCpuInfo: {
            DefaultVCpus: 2,
            DefaultCores: 1,
            DefaultThreadsPerCore: 2,
            ValidCores: [1],
            ValidThreadsPerCore: [1, 2],
          },
          MemoryInfo: { SizeInMiB: 4096 },
          ProcessorInfo: { SupportedArchitectures: ["x86_64"], SustainedClockSpeedInGhz: 3.1 },
          SupportedUsageClasses: ["on-demand", "spot"],
        },
      ],
    };
    got = await roundTrip(
      (c) => ec2(c).send(new DescribeInstanceTypesCommand({ InstanceTypes: ["t3.medium", "m7i.large"] })),
      typesOut,
    );
    expect(got.decoded.input).toEqual({ InstanceTypes: ["t3.medium", "m7i.large"] });
    expect(got.result).toEqual(typesOut);
  });

  it("CreateTags (no output) and TerminateInstances", async () => {
    const create: CreateTagsCommandInput = {
      Resources: ["i-0a1b2c3d4e5f60718", "vol-0f1e2d3c4b5a69788"],
      Tags: tags,
    };
    let got = await roundTrip((c) => ec2(c).send(new CreateTagsCommand(create)), {});
    expect(got.decoded.input).toEqual(create);
    expect(got.result).toEqual({});

    const terminated: Omit<TerminateInstancesCommandOutput, "$metadata"> = {
      TerminatingInstances: [
        {
          InstanceId: "i-0a1b2c3d4e5f60718",
          CurrentState: { Code: 32, Name: "shutting-down" },
          PreviousState: { Code: 16, Name: "running" },
        },
      ],
    };
    got = await roundTrip(
      (c) => ec2(c).send(new TerminateInstancesCommand({ InstanceIds: ["i-0a1b2c3d4e5f60718"] })),
      terminated,
    );
    expect(got.decoded.input).toEqual({ InstanceIds: ["i-0a1b2c3d4e5f60718"] });
    expect(got.result).toEqual(terminated);
  });

  it("is generic: an operation labfleet does not call, with timestamps in its input", async () => {
    const input: DescribeSpotPriceHistoryCommandInput = {
      StartTime: LAUNCH,
      EndTime: LATER,
      InstanceTypes: ["t3.medium"],
      ProductDescriptions: ["Linux/UNIX"],
    };
    const output = {
      SpotPriceHistory: [
        {
          InstanceType: "t3.medium",
          SpotPrice: "0.012300",
          Timestamp: LATER,
          AvailabilityZone: "eu-west-1a",
        },
      ],
      NextToken: "",
    };
    const got = await roundTrip((c) => ec2(c).send(new DescribeSpotPriceHistoryCommand(input)), output);
    expect(got.decoded.input).toEqual(input);
    expect(got.result).toEqual(output);
  });

  it("errors: name, message and status; RequestLimitExceeded is throttling", async () => {
    const send = (c: Config) => ec2(c).send(new DescribeInstancesCommand({}));
    const denied = await sdkError(
      send,
      fail("UnauthorizedOperation", "You are not authorized to perform this operation.", 403),
    );
    expect(denied.error).toBeInstanceOf(EC2ServiceException);
    expect(denied.error.name).toBe("UnauthorizedOperation");
    expect(denied.error.message).toBe("You are not authorized to perform this operation.");
    expect(denied.error.$metadata.httpStatusCode).toBe(403);
    expect(throttling(denied.error)).toBe(false);
    expect(String(denied.seen.response.body)).toContain(
      "<Response><Errors><Error><Code>UnauthorizedOperation</Code><Message>You are not authorized",
    );
    expect(String(denied.seen.response.body)).toContain(`<RequestID>${REQUEST_ID}</RequestID>`);

    const mismatch = await sdkError(
      (c) =>
        ec2(c).send(
          new RunInstancesCommand({ ImageId: "ami-1", MinCount: 1, MaxCount: 1, ClientToken: "t" }),
        ),
      fail("IdempotentParameterMismatch", "Arguments on this idempotent request are inconsistent.", 400),
    );
    expect(mismatch.error.name).toBe("IdempotentParameterMismatch");
    expect(mismatch.error.message).toBe("Arguments on this idempotent request are inconsistent.");
    expect(mismatch.error.$metadata.httpStatusCode).toBe(400);

    const limited = await sdkError(send, fail("RequestLimitExceeded", "Request limit exceeded.", 503));
    expect(limited.error.name).toBe("RequestLimitExceeded");
    expect(limited.error.message).toBe("Request limit exceeded.");
    expect(limited.error.$metadata.httpStatusCode).toBe(503);
    expect(throttling(limited.error)).toBe(true);
  });
});

describe("awsJson protocols", () => {
  const ssm = (config: Config) => new SSMClient(config);

  it("SSM SendCommand and GetCommandInvocation", async () => {
    const input: SendCommandCommandInput = {
      InstanceIds: ["i-0a1b2c3d4e5f60718", "i-0ffffeeeedddd0001"],
      DocumentName: "AWS-RunShellScript",
      Parameters: { commands: ["set -e", "cat ~/.labfleet/k8s-101/job.rc"], executionTimeout: ["600"] },
      TimeoutSeconds: 60,
      Comment: "labfleet probe k8s-101",
      CloudWatchOutputConfig: { CloudWatchOutputEnabled: false },
    };
    const output: Omit<SendCommandCommandOutput, "$metadata"> = {
      Command: {
        CommandId: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
        DocumentName: "AWS-RunShellScript",
        InstanceIds: input.InstanceIds,
        Parameters: input.Parameters,
        Status: "Pending",
        RequestedDateTime: LAUNCH,
        ExpiresAfter: LATER,
        TargetCount: 2,
        CompletedCount: 0,
        ErrorCount: 0,
        TimeoutSeconds: 60,
      },
    };
    const got = await roundTrip((c) => ssm(c).send(new SendCommandCommand(input)), output);
    expect(got.decoded).toMatchObject({
      service: "ssm",
      operation: "SendCommand",
      accessKeyId: creds.accessKeyId,
    });
    expect(got.decoded.input).toEqual(input);
    expect(got.result).toEqual(output);
    expect(got.raw.headers["x-amz-target"]).toBe("AmazonSSM.SendCommand");
    // Timestamps travel as epoch seconds (JSON numbers).
    expect(JSON.parse(String(got.response.body)).Command.RequestedDateTime).toBe(LAUNCH.getTime() / 1000);

    const invocation: Omit<GetCommandInvocationCommandOutput, "$metadata"> = {
      CommandId: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
      InstanceId: "i-0a1b2c3d4e5f60718",
      DocumentName: "AWS-RunShellScript",
      Status: "Success",
      StatusDetails: "Success",
      ResponseCode: 0,
      ExecutionStartDateTime: "2026-03-02T09:00:02.000Z",
      ExecutionEndDateTime: "2026-03-02T09:00:03.000Z",
      StandardOutputContent: '{"phase":"install","state":"done"}\n',
      StandardErrorContent: "",
      CloudWatchOutputConfig: { CloudWatchOutputEnabled: false, CloudWatchLogGroupName: "" },
    };
    const inv = await roundTrip(
      (c) =>
        ssm(c).send(
          new GetCommandInvocationCommand({
            CommandId: invocation.CommandId,
            InstanceId: invocation.InstanceId,
          }),
        ),
      invocation,
    );
    expect(inv.decoded.input).toEqual({ CommandId: invocation.CommandId, InstanceId: invocation.InstanceId });
    expect(inv.result).toEqual(invocation);
  });

  it("SSM DescribeInstanceInformation, GetParameters and PutParameter", async () => {
    const describeIn: DescribeInstanceInformationCommandInput = {
      Filters: [{ Key: "InstanceIds", Values: ["i-0a1b2c3d4e5f60718"] }],
      MaxResults: 50,
    };
    const describeOut: Omit<DescribeInstanceInformationCommandOutput, "$metadata"> = {
      InstanceInformationList: [
        {
          InstanceId: "i-0a1b2c3d4e5f60718",
          PingStatus: "Online",
          LastPingDateTime: LATER,
          AgentVersion: "3.3.1142.0",
          IsLatestVersion: false,
          PlatformType: "Linux",
          PlatformName: "Amazon Linux",
          ResourceType: "EC2Instance",
          IPAddress: "172.31.5.17",
        },
      ],
    };
    const described = await roundTrip(
      (c) => ssm(c).send(new DescribeInstanceInformationCommand(describeIn)),
      describeOut,
    );
    expect(described.decoded.input).toEqual(describeIn);
    expect(described.result).toEqual(describeOut);

    const parameters: Omit<GetParametersCommandOutput, "$metadata"> = {
      Parameters: [
        {
          Name: "/labfleet/prod/lab-key",
          Type: "SecureString",
          Value: "c2VjcmV0IGtleQ==",
          Version: 3,
          LastModifiedDate: LAUNCH,
          ARN: "arn:aws:ssm:eu-west-1:123456789012:parameter/labfleet/prod/lab-key",
          DataType: "text",
        },
      ],
      InvalidParameters: ["/labfleet/prod/missing"],
    };
    const getIn = { Names: ["/labfleet/prod/lab-key", "/labfleet/prod/missing"], WithDecryption: true };
    const got = await roundTrip((c) => ssm(c).send(new GetParametersCommand(getIn)), parameters);
    expect(got.decoded.input).toEqual(getIn);
    expect(got.result).toEqual(parameters);

    const putIn: PutParameterCommandInput = {
      Name: "/labfleet/prod/lab-key",
      Value: "c2VjcmV0IGtleQ==",
      Type: "SecureString",
      Overwrite: true,
      Description: "lab credential key",
      Tier: "Standard",
    };
    const put = await roundTrip((c) => ssm(c).send(new PutParameterCommand(putIn)), {
      Version: 4,
      Tier: "Standard",
    });
    expect(put.decoded.input).toEqual(putIn);
    expect(put.result).toEqual({ Version: 4, Tier: "Standard" });
  });

  it("Service Quotas GetServiceQuota", async () => {
    const output: Omit<GetServiceQuotaCommandOutput, "$metadata"> = {
      Quota: {
        ServiceCode: "ec2",
        ServiceName: "Amazon Elastic Compute Cloud (Amazon EC2)",
        QuotaArn: "arn:aws:servicequotas:eu-west-1:123456789012:ec2/L-1216C47A",
        QuotaCode: "L-1216C47A",
        QuotaName: "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
        Value: 32,
        Unit: "None",
        Adjustable: true,
        GlobalQuota: false,
      },
    };
    const input = { ServiceCode: "ec2", QuotaCode: "L-1216C47A" };
    const got = await roundTrip(
      (c) => new ServiceQuotasClient(c).send(new GetServiceQuotaCommand(input)),
      output,
    );
    expect(got.decoded).toMatchObject({ service: "servicequotas", operation: "GetServiceQuota", input });
    expect(got.raw.headers["x-amz-target"]).toBe("ServiceQuotasV20190624.GetServiceQuota");
    expect(got.result).toEqual(output);
  });

  it("Step Functions StartExecution and DescribeExecution (dates)", async () => {
    const machine = "arn:aws:states:eu-west-1:123456789012:stateMachine:labfleet-prod-up";
    const execution = "arn:aws:states:eu-west-1:123456789012:execution:labfleet-prod-up:run_01JNQ";
    const startIn = {
      stateMachineArn: machine,
      name: "run_01JNQ",
      input: JSON.stringify({ runId: "run_01JNQ" }),
    };
    let got = await roundTrip((c) => new SFNClient(c).send(new StartExecutionCommand(startIn)), {
      executionArn: execution,
      startDate: LAUNCH,
    });
    expect(got.decoded).toMatchObject({ service: "states", operation: "StartExecution", input: startIn });
    expect(got.raw.headers["x-amz-target"]).toBe("AWSStepFunctions.StartExecution");
    expect(got.result).toEqual({ executionArn: execution, startDate: LAUNCH });

    const described: Omit<DescribeExecutionCommandOutput, "$metadata"> = {
      executionArn: execution,
      stateMachineArn: machine,
      name: "run_01JNQ",
      status: "SUCCEEDED",
      startDate: LAUNCH,
      stopDate: LATER,
      input: startIn.input,
      inputDetails: { included: true },
      output: JSON.stringify({ ok: true }),
      outputDetails: { included: true },
    };
    got = await roundTrip(
      (c) => new SFNClient(c).send(new DescribeExecutionCommand({ executionArn: execution })),
      described,
    );
    expect(got.decoded.input).toEqual({ executionArn: execution });
    expect(got.result).toEqual(described);
    expect(got.response.headers["content-type"]).toBe("application/x-amz-json-1.0");
  });

  it("EventBridge PutEvents", async () => {
    const input: PutEventsCommandInput = {
      Entries: [
        {
          Source: "labfleet",
          DetailType: "Run Finished",
          Detail: JSON.stringify({ runId: "run_01JNQ", status: "ok" }),
          EventBusName: "labfleet-prod",
          Resources: ["arn:aws:states:eu-west-1:123456789012:execution:labfleet-prod-up:run_01JNQ"],
          Time: LATER,
        },
      ],
    };
    const output = { FailedEntryCount: 0, Entries: [{ EventId: "11710aed-b79e-4468-a20b-bb3c0c3b4860" }] };
    const got = await roundTrip((c) => new EventBridgeClient(c).send(new PutEventsCommand(input)), output);
    expect(got.decoded).toMatchObject({ service: "events", operation: "PutEvents" });
    expect(got.decoded.input).toEqual(input);
    expect(got.result).toEqual(output);
  });

  it("DynamoDB PutItem and GetItem", async () => {
    const item = {
      pk: { S: "workshop#k8s-101" },
      sk: { S: "claim#student-02" },
      n: { N: "3" },
      ok: { BOOL: true },
    };
    const put = {
      TableName: "labfleet",
      Item: item,
      ConditionExpression: "attribute_not_exists(pk)",
    };
    let got = await roundTrip((c) => new DynamoDBClient(c).send(new PutItemCommand(put)), {});
    expect(got.decoded).toMatchObject({ service: "dynamodb", operation: "PutItem" });
    expect(got.decoded.input).toEqual(put);
    got = await roundTrip(
      (c) =>
        new DynamoDBClient(c).send(
          new GetItemCommand({ TableName: "labfleet", Key: { pk: item.pk, sk: item.sk } }),
        ),
      { Item: item },
    );
    expect(got.result).toEqual({ Item: item });
  });

  it("errors: name, message, status; throttling is recognised", async () => {
    const send = (c: Config) =>
      ssm(c).send(new GetCommandInvocationCommand({ CommandId: "c", InstanceId: "i" }));
    const denied = await sdkError(
      send,
      fail("AccessDeniedException", "User is not authorized to perform: ssm:GetCommandInvocation", 400),
    );
    expect(denied.error).toBeInstanceOf(AccessDeniedException);
    expect(denied.error.name).toBe("AccessDeniedException");
    expect(denied.error.message).toBe("User is not authorized to perform: ssm:GetCommandInvocation");
    expect(denied.error.$metadata.httpStatusCode).toBe(400);
    const body = JSON.parse(String(denied.seen.response.body));
    expect(body).toEqual({
      __type: "AccessDeniedException",
      Message: "User is not authorized to perform: ssm:GetCommandInvocation",
    });
    expect(denied.seen.response.headers["x-amzn-errortype"]).toBe("AccessDeniedException");

    const throttled = await sdkError(send, fail("ThrottlingException", "Rate exceeded", 400));
    expect(throttled.error).toBeInstanceOf(ThrottlingException);
    expect(throttled.error.message).toBe("Rate exceeded");
    expect(throttling(throttled.error)).toBe(true);

    const missing = await sdkError(send, fail("InvocationDoesNotExist", "Invocation does not exist.", 400));
    expect(missing.error).toBeInstanceOf(InvocationDoesNotExist);
    expect(missing.error.name).toBe("InvocationDoesNotExist");
    expect(missing.error.message).toBe("Invocation does not exist.");
    expect(missing.error.$metadata.httpStatusCode).toBe(400);
    expect(throttling(missing.error)).toBe(false);

    // awsJson1_0 sends the error's full shape id in __type.
    const gone = await sdkError(
      (c) => new SFNClient(c).send(new DescribeExecutionCommand({ executionArn: "arn:x" })),
      fail("ExecutionDoesNotExist", "Execution Does Not Exist: 'arn:x'", 400),
    );
    expect(gone.error).toBeInstanceOf(ExecutionDoesNotExist);
    expect(gone.error.message).toBe("Execution Does Not Exist: 'arn:x'");
    expect(JSON.parse(String(gone.seen.response.body)).__type).toBe(
      "com.amazonaws.sfn#ExecutionDoesNotExist",
    );
  });
});

describe("modeled errors of every JSON service", () => {
  it("are written with the error shape's own member names, and read back by the SDK", async () => {
    const quota = await sdkError(
      (c) =>
        new ServiceQuotasClient(c).send(new GetServiceQuotaCommand({ ServiceCode: "ec2", QuotaCode: "L-X" })),
      fail(
        "NoSuchResourceException",
        "The request failed because the specified service does not exist.",
        404,
      ),
    );
    expect(quota.error).toBeInstanceOf(NoSuchResourceException);
    expect(JSON.parse(String(quota.seen.response.body))).toHaveProperty("Message");

    const bus = await sdkError(
      (c) => new EventBridgeClient(c).send(new PutEventsCommand({ Entries: [] })),
      fail("ResourceNotFoundException", "Event bus labfleet-prod does not exist.", 400),
    );
    expect(bus.error).toBeInstanceOf(EventsResourceNotFoundException);
    expect(bus.error.message).toBe("Event bus labfleet-prod does not exist.");
    expect(JSON.parse(String(bus.seen.response.body))).toHaveProperty("message");

    const item = { pk: { S: "claim#k8s-101#student-02" }, owner: { S: "ada@example.com" } };
    const taken = await sdkError(
      (c) => new DynamoDBClient(c).send(new PutItemCommand({ TableName: "labfleet", Item: item })),
      fail("ConditionalCheckFailedException", "The conditional request failed", 400, { Item: item }),
    );
    expect(taken.error).toBeInstanceOf(ConditionalCheckFailedException);
    expect(taken.error.message).toBe("The conditional request failed");
    expect((taken.error as ConditionalCheckFailedException).Item).toEqual(item);
    expect(JSON.parse(String(taken.seen.response.body)).__type).toBe(
      "com.amazonaws.dynamodb#ConditionalCheckFailedException",
    );
  });

  it("a body that is not a JSON object is a SerializationException", () => {
    const request = (body: string): RawRequest => ({
      method: "POST",
      path: "/",
      query: new URLSearchParams(),
      headers: { "x-amz-target": "AmazonSSM.GetParameters" },
      body: Buffer.from(body),
    });
    for (const body of ["{not json", "[]", '"x"']) {
      expect(() => decodeRequest(request(body))).toThrow(
        expect.objectContaining({ code: "SerializationException", status: 400 }),
      );
    }
  });
});

describe("restJson1 protocol", () => {
  const sch = (config: Config) => new SchedulerClient(config);
  const target = {
    Arn: "arn:aws:lambda:eu-west-1:123456789012:function:labfleet-prod-Teardown",
    RoleArn: "arn:aws:iam::123456789012:role/labfleet-prod-scheduler",
    Input: JSON.stringify({ workshop: "k8s-101" }),
    RetryPolicy: { MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 },
  };

  it("Scheduler CreateSchedule and UpdateSchedule: label, body and method", async () => {
    const create: CreateScheduleCommandInput = {
      Name: "ttl-k8s 101",
      GroupName: "labfleet-prod",
      ScheduleExpression: "at(2026-03-02T17:00:00)",
      ScheduleExpressionTimezone: "UTC",
      FlexibleTimeWindow: { Mode: "OFF" },
      Target: target,
      ActionAfterCompletion: "DELETE",
      State: "ENABLED",
      Description: "teardown of k8s-101",
      StartDate: LAUNCH,
      ClientToken: "ttl-k8s-101-1",
    };
    const arn = "arn:aws:scheduler:eu-west-1:123456789012:schedule/labfleet-prod/ttl-k8s 101";
    let got = await roundTrip((c) => sch(c).send(new CreateScheduleCommand(create)), { ScheduleArn: arn });
    expect(got.raw.method).toBe("POST");
    expect(got.raw.path).toBe("/schedules/ttl-k8s%20101");
    expect(got.decoded).toMatchObject({ service: "scheduler", operation: "CreateSchedule" });
    expect(got.decoded.input).toEqual(create);
    expect(got.result).toEqual({ ScheduleArn: arn });

    const update: UpdateScheduleCommandInput = { ...create, ScheduleExpression: "at(2026-03-02T18:00:00)" };
    got = await roundTrip((c) => sch(c).send(new UpdateScheduleCommand(update)), { ScheduleArn: arn });
    expect(got.raw.method).toBe("PUT");
    expect(got.decoded.operation).toBe("UpdateSchedule");
    expect(got.decoded.input).toEqual(update);
  });

  it("Scheduler DeleteSchedule (query members) and GetSchedule (dates)", async () => {
    const del = { Name: "ttl-k8s-101", GroupName: "labfleet-prod", ClientToken: "del-1" };
    let got = await roundTrip((c) => sch(c).send(new DeleteScheduleCommand(del)), {});
    expect(got.raw.method).toBe("DELETE");
    expect(got.raw.query.get("groupName")).toBe("labfleet-prod");
    expect(got.raw.query.get("clientToken")).toBe("del-1");
    expect(got.decoded).toMatchObject({ operation: "DeleteSchedule", input: del });
    expect(got.result).toEqual({});

    const schedule: Omit<GetScheduleCommandOutput, "$metadata"> = {
      Arn: "arn:aws:scheduler:eu-west-1:123456789012:schedule/labfleet-prod/ttl-k8s-101",
      Name: "ttl-k8s-101",
      GroupName: "labfleet-prod",
      State: "ENABLED",
      ScheduleExpression: "at(2026-03-02T17:00:00)",
      ScheduleExpressionTimezone: "UTC",
      FlexibleTimeWindow: { Mode: "OFF" },
      Target: target,
      ActionAfterCompletion: "DELETE",
      CreationDate: LAUNCH,
      LastModificationDate: LATER,
    };
    got = await roundTrip(
      (c) => sch(c).send(new GetScheduleCommand({ Name: "ttl-k8s-101", GroupName: "labfleet-prod" })),
      schedule,
    );
    expect(got.raw.method).toBe("GET");
    expect(got.decoded.input).toEqual({ Name: "ttl-k8s-101", GroupName: "labfleet-prod" });
    expect(got.result).toEqual(schedule);
  });

  it("Scheduler errors: ConflictException and ResourceNotFoundException", async () => {
    const send = (c: Config) => sch(c).send(new GetScheduleCommand({ Name: "ttl-x" }));
    const conflict = await sdkError(send, fail("ConflictException", "Schedule ttl-x already exists.", 409));
    expect(conflict.error).toBeInstanceOf(ConflictException);
    expect(conflict.error.message).toBe("Schedule ttl-x already exists.");
    expect(conflict.error.$metadata.httpStatusCode).toBe(409);
    expect(conflict.seen.response.headers["x-amzn-errortype"]).toBe("ConflictException");

    const missing = await sdkError(
      send,
      fail("ResourceNotFoundException", "Schedule ttl-x does not exist.", 404),
    );
    expect(missing.error).toBeInstanceOf(ResourceNotFoundException);
    expect(missing.error.name).toBe("ResourceNotFoundException");
    expect(missing.error.message).toBe("Schedule ttl-x does not exist.");
    expect(missing.error.$metadata.httpStatusCode).toBe(404);
  });

  it("Lambda Invoke: raw payload in, raw result and function error out", async () => {
    const payload = JSON.stringify({ runId: "run_01JNQ", hosts: ["host-01", "host-02"] });
    const result = JSON.stringify({ errorType: "Error", errorMessage: "boom", trace: [] });
    const got = await roundTrip(
      (c) =>
        new LambdaClient(c).send(
          new InvokeCommand({
            FunctionName: "labfleet-prod-BeginUp",
            InvocationType: "RequestResponse",
            LogType: "None",
            Qualifier: "$LATEST",
            Payload: new TextEncoder().encode(payload),
          }),
        ),
      {
        StatusCode: 200,
        FunctionError: "Unhandled",
        ExecutedVersion: "$LATEST",
        Payload: Buffer.from(result),
      },
    );
    expect(got.raw.path).toBe("/2015-03-31/functions/labfleet-prod-BeginUp/invocations");
    expect(got.decoded).toMatchObject({ service: "lambda", operation: "Invoke" });
    const { Payload, ...rest } = got.decoded.input;
    expect(rest).toEqual({
      FunctionName: "labfleet-prod-BeginUp",
      InvocationType: "RequestResponse",
      LogType: "None",
      Qualifier: "$LATEST",
    });
    expect(Buffer.isBuffer(Payload)).toBe(true);
    expect((Payload as Buffer).toString("utf8")).toBe(payload);
    expect(got.response.headers).toMatchObject({
      "x-amz-function-error": "Unhandled",
      "x-amz-executed-version": "$LATEST",
    });
    expect(got.response.body).toEqual(Buffer.from(result));
    expect(got.result.StatusCode).toBe(200);
    expect(got.result.FunctionError).toBe("Unhandled");
    expect(got.result.ExecutedVersion).toBe("$LATEST");
    expect(Buffer.from(got.result.Payload ?? new Uint8Array()).toString("utf8")).toBe(result);
  });

  it("Lambda Invoke as an event: 202 and no payload", async () => {
    const got = await roundTrip(
      (c) =>
        new LambdaClient(c).send(
          new InvokeCommand({ FunctionName: "labfleet-prod-Sweep", InvocationType: "Event", Payload: "{}" }),
        ),
      { StatusCode: 202 },
    );
    expect(got.decoded.input).toMatchObject({ FunctionName: "labfleet-prod-Sweep", InvocationType: "Event" });
    expect(String(got.decoded.input.Payload)).toBe("{}");
    expect(got.response.status).toBe(202);
    expect(got.result.StatusCode).toBe(202);
    expect(got.result.FunctionError).toBeUndefined();
  });

  it("Lambda GetAccountSettings", async () => {
    const output: Omit<GetAccountSettingsCommandOutput, "$metadata"> = {
      AccountLimit: {
        TotalCodeSize: 80530636800,
        CodeSizeUnzipped: 262144000,
        CodeSizeZipped: 52428800,
        ConcurrentExecutions: 10,
        UnreservedConcurrentExecutions: 10,
      },
      AccountUsage: { TotalCodeSize: 12345678, FunctionCount: 14 },
    };
    const got = await roundTrip((c) => new LambdaClient(c).send(new GetAccountSettingsCommand({})), output);
    expect(got.raw).toMatchObject({ method: "GET", path: "/2016-08-19/account-settings" });
    expect(got.decoded).toMatchObject({ service: "lambda", operation: "GetAccountSettings", input: {} });
    expect(got.result).toEqual(output);
  });

  it("Lambda TooManyRequestsException: 429, header-bound members, throttling", async () => {
    const { error, seen } = await sdkError(
      (c) => new LambdaClient(c).send(new InvokeCommand({ FunctionName: "labfleet-prod-BeginUp" })),
      fail("TooManyRequestsException", "Rate Exceeded.", 429, {
        Type: "User",
        Reason: "ReservedFunctionConcurrentInvocationLimitExceeded",
        retryAfterSeconds: "1",
      }),
    );
    expect(error).toBeInstanceOf(TooManyRequestsException);
    expect(error.name).toBe("TooManyRequestsException");
    expect(error.message).toBe("Rate Exceeded.");
    expect(error.$metadata.httpStatusCode).toBe(429);
    expect(throttling(error)).toBe(true);
    const e = error as TooManyRequestsException;
    expect(e.Reason).toBe("ReservedFunctionConcurrentInvocationLimitExceeded");
    expect(e.retryAfterSeconds).toBe("1");
    expect(seen.response.headers["retry-after"]).toBe("1");
  });
});

describe("requests the double does not know", () => {
  const signed = (service: string) =>
    `AWS4-HMAC-SHA256 Credential=${creds.accessKeyId}/20260302/eu-west-1/${service}/aws4_request, ` +
    "SignedHeaders=host;x-amz-date, Signature=00";
  const raw = (over: Partial<RawRequest>): RawRequest => ({
    method: "POST",
    path: "/",
    query: new URLSearchParams(),
    headers: {},
    body: Buffer.alloc(0),
    ...over,
  });

  it("an unknown EC2 action decodes to operation undefined, with what was asked", () => {
    const d = decodeRequest(
      raw({
        headers: { authorization: signed("ec2") },
        body: Buffer.from("Action=FrobnicateInstances&Version=2016-11-15&InstanceId.1=i-1"),
      }),
    );
    expect(d).toMatchObject({
      service: "ec2",
      operation: undefined,
      requested: "FrobnicateInstances",
      region: "eu-west-1",
    });
    expect(d.accessKeyId).toBe(creds.accessKeyId);
  });

  it("an unknown JSON target, or one of another service, decodes to operation undefined", () => {
    const unknown = decodeRequest(
      raw({
        headers: { authorization: signed("ssm"), "x-amz-target": "AmazonSSM.Frobnicate" },
        body: Buffer.from("{}"),
      }),
    );
    expect(unknown).toMatchObject({ service: "ssm", operation: undefined, requested: "Frobnicate" });
    const foreign = decodeRequest(
      raw({
        headers: { authorization: signed("ssm"), "x-amz-target": "AWSEvents.PutEvents" },
        body: Buffer.from("{}"),
      }),
    );
    expect(foreign.operation).toBeUndefined();
  });

  it("an unknown REST route, and an unknown service, decode to operation undefined", () => {
    const route = decodeRequest(
      raw({ method: "GET", path: "/frobnicate", headers: { authorization: signed("scheduler") } }),
    );
    expect(route).toMatchObject({ service: "scheduler", operation: undefined, requested: "GET /frobnicate" });
    const wrongMethod = decodeRequest(
      raw({ method: "PATCH", path: "/schedules/x", headers: { authorization: signed("scheduler") } }),
    );
    expect(wrongMethod.operation).toBeUndefined();
    const s3 = decodeRequest(
      raw({ method: "GET", path: "/bucket/key", headers: { authorization: signed("s3") } }),
    );
    expect(s3).toMatchObject({ service: "s3", operation: undefined, input: {} });
  });

  it("an unsigned request is still told apart, with no caller", () => {
    const d = decodeRequest(
      raw({ headers: { "x-amz-target": "AmazonSSM.GetParameters" }, body: Buffer.from("{}") }),
    );
    expect(d).toMatchObject({ service: "ssm", operation: "GetParameters", accessKeyId: undefined });
  });

  it("the unknown-operation errors reach the SDK with their codes", async () => {
    const ec2Err = await sdkError(
      (c) => ec2(c).send(new DescribeInstancesCommand({})),
      (d) =>
        encodeError(
          d.service,
          undefined,
          "InvalidAction",
          "The action DescribeInstances is not valid.",
          400,
          "r",
        ),
    );
    expect(ec2Err.error.name).toBe("InvalidAction");
    expect(ec2Err.error.$metadata.httpStatusCode).toBe(400);
    const jsonErr = await sdkError(
      (c) => new SSMClient(c).send(new GetParametersCommand({ Names: ["a"] })),
      (d) => encodeError(d.service, undefined, "UnknownOperationException", "", 400, "r"),
    );
    expect(jsonErr.error.name).toBe("UnknownOperationException");
    expect(jsonErr.error.$metadata.httpStatusCode).toBe(400);
  });
});
