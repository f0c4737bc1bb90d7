import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes, randomUUID } from "node:crypto";
import { chmodSync, closeSync, mkdirSync, openSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import {
  AuthorizeSecurityGroupIngressCommand,
  type AuthorizeSecurityGroupIngressCommandInput,
  CreateSecurityGroupCommand,
  type CreateSecurityGroupCommandInput,
  CreateTagsCommand,
  type CreateTagsCommandInput,
  DeleteSecurityGroupCommand,
  type DeleteSecurityGroupCommandInput,
  DescribeImagesCommand,
  type DescribeImagesCommandInput,
  DescribeInstancesCommand,
  type DescribeInstancesCommandInput,
  DescribeInstanceTypesCommand,
  type DescribeInstanceTypesCommandInput,
  DescribeSecurityGroupsCommand,
  type DescribeSecurityGroupsCommandInput,
  DescribeSubnetsCommand,
  type DescribeSubnetsCommandInput,
  EC2Client,
  EC2ServiceException,
  type Filter,
  type Image,
  type Instance,
  type InstanceStateName,
  type IpPermission,
  RevokeSecurityGroupIngressCommand,
  type RevokeSecurityGroupIngressCommandInput,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  type SecurityGroup,
  type Tag,
  TerminateInstancesCommand,
  type TerminateInstancesCommandInput,
} from "@aws-sdk/client-ec2";
import {
  ConflictException,
  CreateScheduleCommand,
  type CreateScheduleCommandInput,
  DeleteScheduleCommand,
  type DeleteScheduleCommandInput,
  ResourceNotFoundException,
  SchedulerClient,
  UpdateScheduleCommand,
  type UpdateScheduleCommandInput,
} from "@aws-sdk/client-scheduler";
import {
  GetServiceQuotaCommand,
  type GetServiceQuotaCommandInput,
  ServiceQuotasClient,
} from "@aws-sdk/client-service-quotas";
import { SFNClient } from "@aws-sdk/client-sfn";
import {
  CancelCommandCommand,
  type CancelCommandCommandInput,
  DeleteParameterCommand,
  type DeleteParameterCommandInput,
  DescribeInstanceInformationCommand,
  type DescribeInstanceInformationCommandInput,
  GetCommandInvocationCommand,
  type GetCommandInvocationCommandInput,
  type GetCommandInvocationCommandOutput,
  GetParameterCommand,
  type GetParameterCommandInput,
  GetParametersCommand,
  type GetParametersCommandInput,
  InvalidDocument,
  InvalidInstanceId,
  InvocationDoesNotExist,
  ParameterAlreadyExists,
  ParameterNotFound,
  PutParameterCommand,
  type PutParameterCommandInput,
  SendCommandCommand,
  type SendCommandCommandInput,
  SSMClient,
} from "@aws-sdk/client-ssm";
import { type AwsClientStub, mockClient } from "aws-sdk-client-mock";

/**
 * A fake AWS account for the cloud path, built on aws-sdk-client-mock: every EC2, SSM, Service Quotas, Scheduler
 * and Step Functions client of the process is mocked (the class, so clients made inside production code are too),
 * any command this account does not implement throws, and `unhandled()` lists them afterwards.
 *
 * EC2 instances are folders. RunInstances creates one per instance under `dir/instances/<id>/` (the instance's
 * filesystem root: its home `/root` is `<id>/root`, `/etc` is `<id>/etc`) and "boots" it by running its user
 * data with bash there, as cloud-init would, with `LABFLEET_ROOT` pointing at the folder (the variable labfleet's
 * scripts honour for exactly this) and a PATH whose `shutdown` and `systemctl` only log what they were asked
 * (`powerLog`). SSM Run Command runs each SendCommand script for real, as the SSM agent does: as this user (root
 * here, as the agent), with `sh` (dash), in an orchestration folder of its own, stdout and stderr in files, and
 * GetCommandInvocation answers with SSM's limits (the first 24,000 characters of stdout, 8,000 of stderr, the
 * agent's "failed to run commands" line on a non-zero exit). The one rewrite: the home the script exports
 * (`export HOME='/root'`) is moved into the instance's folder. Every process started for an instance carries
 * `LABFLEET_FAKE_INSTANCE=<id>` in its environment, so terminating it (or `close()`) kills exactly those.
 *
 * Parameter Store is in memory. On the instances, `aws ssm get-parameter` is a stub that asks this account over
 * HTTP on 127.0.0.1 (as the instance role would ask SSM): the value reaches the instance without travelling in
 * any command.
 */

export const FAKE_REGION = "eu-west-1";
export const FAKE_ACCOUNT_ID = "123456789012";
export const FAKE_SUBNET = "subnet-0123456789abcdef0";
export const FAKE_VPC = "vpc-0123456789abcdef0";
export const CANONICAL = "099720109477";
/** The images DescribeImages knows: two Ubuntu 24.04 amd64 builds (the newest should be picked) and an arm64 one. */
export const FAKE_IMAGES: Image[] = [
  image("ami-0aaaaaaaaaaaaaaa1", "amd64", "x86_64", "2029-03-01T00:00:00.000Z"),
  image("ami-0ccccccccccccccc3", "amd64", "x86_64", "2029-11-20T00:00:00.000Z"),
  image("ami-0ddddddddddddddd4", "arm64", "arm64", "2029-12-01T00:00:00.000Z"),
];
/** SSM returns at most this many characters of a command's stdout and stderr (the first ones). */
export const SSM_STDOUT_LIMIT = 24_000;
export const SSM_STDERR_LIMIT = 8_000;

function image(id: string, arch: string, architecture: "x86_64" | "arm64", created: string): Image {
  const date = created.slice(0, 10).replace(/-/g, "");
  return {
    ImageId: id,
    OwnerId: CANONICAL,
    Name: `ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-${arch}-server-${date}`,
    Architecture: architecture,
    State: "available",
    CreationDate: created,
    RootDeviceName: "/dev/sda1",
    BlockDeviceMappings: [{ DeviceName: "/dev/sda1", Ebs: { VolumeSize: 8, VolumeType: "gp3" } }],
  };
}

export interface FakeInstance {
  id: string;
  /** What DescribeInstances answers (state, tags, addresses...). */
  instance: Instance;
  /** The instance's filesystem root on this machine. */
  root: string;
  /** Its `/root`, the home SSM commands run in. */
  home: string;
  /** The RunInstances input that launched it (absent for instances given to `addInstance`). */
  launch?: RunInstancesCommandInput;
  /** The user data as cloud-init ran it, and how that ended. */
  userData?: string;
  boot?: { code: number | null; output: string };
}

export interface FakeCommand {
  commandId: string;
  instanceId: string;
  /** The script exactly as SendCommand carried it. */
  script: string;
  status: "InProgress" | "Success" | "Failed" | "Cancelled" | "TimedOut";
  responseCode: number;
  stdout: string;
  stderr: string;
  child?: ChildProcess;
  done: Promise<void>;
}

export interface CliCall {
  instanceId: string;
  args: string[];
  code: number;
}

interface Rule {
  protocol: string;
  from?: number;
  to?: number;
  kind: "v4" | "v6" | "prefix" | "group";
  source: string;
  description?: string;
}

interface FakeGroup {
  GroupId: string;
  GroupName: string;
  VpcId: string;
  Description: string;
  Tags: Tag[];
  rules: Rule[];
}

interface Parameter {
  Name: string;
  Value: string;
  Type: string;
  Version: number;
  KeyId?: string;
}

// biome-ignore lint/suspicious/noExplicitAny: aws-sdk-client-mock's stubs are typed per client; the account keeps them all
type AnyStub = AwsClientStub<any>;
type CommandClass<I> = new (...args: never[]) => { input: I };

function ec2Error(name: string, message: string): EC2ServiceException {
  return new EC2ServiceException({ name, message, $fault: "client", $metadata: { httpStatusCode: 400 } });
}

function tagOf(tags: Tag[] | undefined, key: string): string | undefined {
  return tags?.find((t) => t.Key === key)?.Value;
}

/** EC2's filter wildcards: `*` any run of characters, `?` one. */
function glob(pattern: string): RegExp {
  const escaped = pattern
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replace(/\*/g, ".*")
    .replace(/\?/g, ".");
  return new RegExp(`^${escaped}$`);
}

function ruleKey(r: Rule): string {
  return [r.protocol, r.from ?? "", r.to ?? "", r.kind, r.source].join("|");
}

function flatten(perms: IpPermission[] | undefined): Rule[] {
  const out: Rule[] = [];
  for (const p of perms ?? []) {
    const base = {
      protocol: p.IpProtocol ?? "-1",
      ...(p.FromPort !== undefined ? { from: p.FromPort } : {}),
      ...(p.ToPort !== undefined ? { to: p.ToPort } : {}),
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
function permissions(rules: Rule[]): IpPermission[] {
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
    else p.UserIdGroupPairs?.push({ GroupId: r.source, ...d });
  }
  return [...byRange.values()];
}

function vcpusOf(type: string): number {
  const size = type.split(".")[1] ?? "";
  const sizes: Record<string, number> = { large: 2, xlarge: 4, "2xlarge": 8, "4xlarge": 16 };
  return sizes[size] ?? 2;
}

/** The instance-side `aws` command: a stub that forwards its arguments to the account (see `cli`). */
function awsCliStub(): string {
  return `#!${process.execPath}
// labfleet test harness: the AWS CLI of a fake EC2 instance. It asks the fake account, on 127.0.0.1.
fetch(process.env.LABFLEET_FAKE_AWS_URL + "/cli", {
  method: "POST",
  headers: { "content-type": "application/json" },
  body: JSON.stringify({ instanceId: process.env.LABFLEET_FAKE_INSTANCE, args: process.argv.slice(2) }),
})
  .then((res) => res.json())
  .then((r) => {
    process.stdout.write(r.stdout);
    process.stderr.write(r.stderr);
    process.exitCode = r.code;
  })
  .catch((err) => {
    process.stderr.write("fake aws: " + String(err) + "\\n");
    process.exitCode = 255;
  });
`;
}

export class FakeAws {
  readonly region: string;
  readonly ec2: AnyStub;
  readonly ssm: AnyStub;
  readonly quotas: AnyStub;
  readonly scheduler: AnyStub;
  readonly sfn: AnyStub;
  readonly instances = new Map<string, FakeInstance>();
  readonly groups: FakeGroup[] = [];
  readonly parameters = new Map<string, Parameter>();
  readonly schedules = new Map<string, CreateScheduleCommandInput>();
  readonly commands = new Map<string, FakeCommand>();
  /** What the instances asked with their `aws` command. */
  readonly cliCalls: CliCall[] = [];
  /** The folder whose `shutdown`, `systemctl` and `aws` the instances run. */
  readonly bin: string;
  private readonly dir: string;
  private readonly vcpuQuota: number;
  private readonly tokens = new Map<string, string>();
  private readonly handled = new Map<AnyStub, Set<string>>();
  private server: Server | undefined;
  private url = "";
  private nextIp = 10;

  private constructor(opts: { dir: string; region?: string; vcpuQuota?: number }) {
    this.dir = opts.dir;
    this.region = opts.region ?? FAKE_REGION;
    this.vcpuQuota = opts.vcpuQuota ?? 256;
    this.bin = join(opts.dir, "bin");
    this.ec2 = this.stub(EC2Client);
    this.ssm = this.stub(SSMClient);
    this.quotas = this.stub(ServiceQuotasClient);
    this.scheduler = this.stub(SchedulerClient);
    this.sfn = this.stub(SFNClient);
    this.mockEc2();
    this.mockSsm();
    this.mockScheduler();
    this.on(this.quotas, GetServiceQuotaCommand, (input: GetServiceQuotaCommandInput) => ({
      Quota: {
        ServiceCode: input.ServiceCode,
        QuotaCode: input.QuotaCode,
        Value: this.vcpuQuota,
        Unit: "None",
      },
    }));
  }

  /** Mocks the clients, writes the instances' commands and opens the endpoint their `aws` command calls. */
  static async start(opts: { dir: string; region?: string; vcpuQuota?: number }): Promise<FakeAws> {
    const account = new FakeAws(opts);
    mkdirSync(account.bin, { recursive: true });
    for (const cmd of ["shutdown", "systemctl", "snap"]) {
      writeFileSync(
        join(account.bin, cmd),
        `#!/bin/sh\nmkdir -p "$LABFLEET_ROOT/var/log"\necho "${cmd} $*" >> "$LABFLEET_ROOT/var/log/fake-power.log"\n`,
      );
      chmodSync(join(account.bin, cmd), 0o755);
    }
    writeFileSync(join(account.bin, "aws"), awsCliStub());
    chmodSync(join(account.bin, "aws"), 0o755);
    account.server = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => {
        body += c.toString("utf8");
      });
      req.on("end", () => {
        const { instanceId, args } = JSON.parse(body) as { instanceId: string; args: string[] };
        account
          .cli(instanceId, args)
          .catch((err: unknown) => ({ stdout: "", stderr: `fake aws: ${String(err)}\n`, code: 255 }))
          .then((r) => {
            account.cliCalls.push({ instanceId, args, code: r.code });
            res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(r));
          });
      });
    });
    await new Promise<void>((resolve) => account.server?.listen(0, "127.0.0.1", resolve));
    account.url = `http://127.0.0.1:${(account.server.address() as AddressInfo).port}`;
    return account;
  }

  /** A parameter as the operator would store it (`aws ssm put-parameter`), without going through a client. */
  putParameter(name: string, value: string, type = "SecureString"): void {
    const version = (this.parameters.get(name)?.Version ?? 0) + 1;
    this.parameters.set(name, { Name: name, Value: value, Type: type, Version: version });
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

  /** An instance that labfleet did not launch (another workshop's, or someone else's). */
  addInstance(instance: Instance): FakeInstance {
    const id = instance.InstanceId ?? `i-0${randomBytes(8).toString("hex")}`;
    const root = join(this.dir, "instances", id);
    const fake: FakeInstance = {
      id,
      instance: { InstanceType: "m7i.large", ...instance, InstanceId: id },
      root,
      home: join(root, "root"),
    };
    mkdirSync(fake.home, { recursive: true });
    this.instances.set(id, fake);
    return fake;
  }

  /** The inputs one command received, in order. */
  inputs<I>(stub: AnyStub, command: CommandClass<I>): I[] {
    return stub.commandCalls(command as never).map((c) => c.args[0].input as I);
  }

  /** Commands sent to any mocked client that this account does not implement (each one threw). */
  unhandled(): string[] {
    const out: string[] = [];
    for (const [stub, names] of this.handled) {
      for (const call of stub.calls()) {
        const name = (call.args[0] as object).constructor.name;
        if (!names.has(name)) out.push(name);
      }
    }
    return out;
  }

  /** What the instance's `shutdown`, `systemctl` and `snap` were asked, in order (from boot on). */
  powerLog(instanceId: string): string[] {
    const inst = this.instances.get(instanceId);
    if (!inst) throw new Error(`no instance ${instanceId}`);
    try {
      return readFileSync(join(inst.root, "var/log/fake-power.log"), "utf8").trim().split("\n");
    } catch {
      return [];
    }
  }

  /** Live processes started for an instance (or for any instance of this account). */
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
        // gone meanwhile
      }
    }
    return found;
  }

  /** Kills every process of the account's instances, closes the endpoint, and gives the SDK clients back. */
  async close(): Promise<void> {
    this.killProcesses();
    await Promise.all([...this.commands.values()].map((c) => c.done));
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
    for (const stub of this.handled.keys()) stub.restore();
  }

  // ------------------------------------------------------------------------------------------- plumbing

  private stub(client: new (...args: never[]) => unknown): AnyStub {
    const stub = mockClient(client as never) as AnyStub;
    // Anything not implemented below throws (and `unhandled()` names it): no call reaches AWS.
    stub.onAnyCommand().callsFake(() => {
      throw new Error(`the fake AWS account does not implement this ${client.name} command`);
    });
    this.handled.set(stub, new Set());
    return stub;
  }

  private on<I>(stub: AnyStub, command: CommandClass<I>, fn: (input: I) => unknown): void {
    this.handled.get(stub)?.add(command.name);
    stub.on(command as never).callsFake(async (input: I) => ({
      $metadata: { httpStatusCode: 200, requestId: randomUUID() },
      ...((await fn(input)) as object),
    }));
  }

  private killProcesses(instanceId?: string): void {
    for (const pid of this.processesOf(instanceId)) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // already gone
      }
    }
  }

  private running(id: string): FakeInstance | undefined {
    const inst = this.instances.get(id);
    return inst?.instance.State?.Name === "running" ? inst : undefined;
  }

  /** The environment the SSM agent and cloud-init give what they run on an instance. */
  private instanceEnv(inst: FakeInstance): NodeJS.ProcessEnv {
    return {
      PATH: `${this.bin}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin`,
      HOME: inst.home,
      LANG: "C.UTF-8",
      LABFLEET_ROOT: inst.root,
      LABFLEET_FAKE_INSTANCE: inst.id,
      LABFLEET_FAKE_AWS_URL: this.url,
    };
  }

  /** Shutting-down instances are gone by the next call, as far as anyone can tell. */
  private settle(): void {
    for (const inst of this.instances.values()) {
      if (inst.instance.State?.Name === "shutting-down")
        inst.instance.State = { Code: 48, Name: "terminated" };
    }
  }

  // ------------------------------------------------------------------------------------------------ EC2

  private mockEc2(): void {
    const ec2 = this.ec2;
    this.on(ec2, DescribeImagesCommand, (input: DescribeImagesCommandInput) => {
      let found = FAKE_IMAGES;
      if (input.ImageIds) found = found.filter((i) => input.ImageIds?.includes(i.ImageId as string));
      if (input.Owners) found = found.filter((i) => input.Owners?.includes(i.OwnerId as string));
      for (const f of input.Filters ?? []) {
        const values = f.Values ?? [];
        const field: Record<string, (i: Image) => string | undefined> = {
          name: (i) => i.Name,
          state: (i) => i.State,
          architecture: (i) => i.Architecture,
        };
        const get = f.Name ? field[f.Name] : undefined;
        if (!get) throw ec2Error("InvalidParameterValue", `the fake does not filter images by ${f.Name}`);
        found = found.filter((i) => values.some((v) => glob(v).test(get(i) ?? "")));
      }
      return { Images: structuredClone(found) };
    });
    this.on(ec2, DescribeSubnetsCommand, (input: DescribeSubnetsCommandInput) => {
      for (const id of input.SubnetIds ?? []) {
        if (id !== FAKE_SUBNET)
          throw ec2Error("InvalidSubnetID.NotFound", `The subnet ID '${id}' does not exist`);
      }
      return { Subnets: [{ SubnetId: FAKE_SUBNET, VpcId: FAKE_VPC, AvailabilityZone: `${this.region}a` }] };
    });
    this.on(ec2, DescribeSecurityGroupsCommand, (input: DescribeSecurityGroupsCommandInput) => {
      let found = this.groups;
      if (input.GroupIds) found = found.filter((g) => input.GroupIds?.includes(g.GroupId));
      for (const f of input.Filters ?? []) found = found.filter((g) => this.groupMatches(g, f));
      return {
        SecurityGroups: found.map(
          (g): SecurityGroup => ({
            GroupId: g.GroupId,
            GroupName: g.GroupName,
            VpcId: g.VpcId,
            Description: g.Description,
            OwnerId: FAKE_ACCOUNT_ID,
            Tags: structuredClone(g.Tags),
            IpPermissions: permissions(g.rules),
            IpPermissionsEgress: [{ IpProtocol: "-1", IpRanges: [{ CidrIp: "0.0.0.0/0" }] }],
          }),
        ),
      };
    });
    this.on(ec2, CreateSecurityGroupCommand, (input: CreateSecurityGroupCommandInput) => {
      if (input.VpcId !== FAKE_VPC)
        throw ec2Error("InvalidVpcID.NotFound", `The vpc ID '${input.VpcId}' does not exist`);
      if (this.groups.some((g) => g.GroupName === input.GroupName && g.VpcId === input.VpcId)) {
        throw ec2Error("InvalidGroup.Duplicate", `The security group '${input.GroupName}' already exists`);
      }
      const GroupId = `sg-0${randomBytes(8).toString("hex")}`;
      this.groups.push({
        GroupId,
        GroupName: input.GroupName ?? "",
        VpcId: FAKE_VPC,
        Description: input.Description ?? "",
        Tags: input.TagSpecifications?.find((t) => t.ResourceType === "security-group")?.Tags ?? [],
        rules: [],
      });
      return { GroupId };
    });
    this.on(ec2, AuthorizeSecurityGroupIngressCommand, (input: AuthorizeSecurityGroupIngressCommandInput) => {
      const g = this.group(input.GroupId);
      const rules = flatten(input.IpPermissions);
      const have = new Set(g.rules.map(ruleKey));
      const dup = rules.find((r) => have.has(ruleKey(r)));
      if (dup)
        throw ec2Error("InvalidPermission.Duplicate", `the specified rule "${ruleKey(dup)}" already exists`);
      g.rules.push(...rules);
      return { Return: true };
    });
    this.on(ec2, RevokeSecurityGroupIngressCommand, (input: RevokeSecurityGroupIngressCommandInput) => {
      const g = this.group(input.GroupId);
      const gone = new Set(flatten(input.IpPermissions).map(ruleKey));
      const kept = g.rules.filter((r) => !gone.has(ruleKey(r)));
      if (kept.length === g.rules.length) {
        throw ec2Error(
          "InvalidPermission.NotFound",
          "The specified rule does not exist in this security group.",
        );
      }
      g.rules = kept;
      return { Return: true };
    });
    this.on(ec2, DeleteSecurityGroupCommand, (input: DeleteSecurityGroupCommandInput) => {
      this.settle();
      const g = this.group(input.GroupId);
      const users = [...this.instances.values()].filter(
        (i) =>
          i.instance.State?.Name !== "terminated" &&
          i.instance.SecurityGroups?.some((s) => s.GroupId === g.GroupId),
      );
      if (users.length > 0) {
        throw ec2Error("DependencyViolation", `resource ${g.GroupId} has a dependent object`);
      }
      this.groups.splice(this.groups.indexOf(g), 1);
      return { Return: true };
    });
    this.on(ec2, DescribeInstanceTypesCommand, (input: DescribeInstanceTypesCommandInput) => ({
      InstanceTypes: (input.InstanceTypes ?? []).map((t) => ({
        InstanceType: t,
        VCpuInfo: { DefaultVCpus: vcpusOf(t) },
      })),
    }));
    this.on(ec2, RunInstancesCommand, (input: RunInstancesCommandInput) => this.runInstances(input));
    this.on(ec2, DescribeInstancesCommand, (input: DescribeInstancesCommandInput) => {
      this.settle();
      let found = [...this.instances.values()].map((i) => i.instance);
      if (input.InstanceIds) {
        const missing = input.InstanceIds.find((id) => !this.instances.has(id));
        if (missing)
          throw ec2Error("InvalidInstanceID.NotFound", `The instance ID '${missing}' does not exist`);
        found = found.filter((i) => input.InstanceIds?.includes(i.InstanceId as string));
      }
      for (const f of input.Filters ?? []) found = found.filter((i) => this.instanceMatches(i, f));
      return {
        Reservations: found.map((i) => ({
          ReservationId: `r-0${(i.InstanceId ?? "").slice(3)}`,
          OwnerId: FAKE_ACCOUNT_ID,
          Instances: [structuredClone(i)],
        })),
      };
    });
    this.on(ec2, CreateTagsCommand, (input: CreateTagsCommandInput) => {
      for (const id of input.Resources ?? []) {
        const target = this.instances.get(id)?.instance ?? this.groups.find((g) => g.GroupId === id);
        if (!target) throw ec2Error("InvalidID", `The ID '${id}' is not valid`);
        const tags = [...(target.Tags ?? [])];
        for (const t of input.Tags ?? []) {
          const i = tags.findIndex((x) => x.Key === t.Key);
          if (i >= 0) tags[i] = { Key: t.Key, Value: t.Value ?? "" };
          else tags.push({ Key: t.Key, Value: t.Value ?? "" });
        }
        target.Tags = tags;
      }
      return {};
    });
    this.on(ec2, TerminateInstancesCommand, (input: TerminateInstancesCommandInput) => {
      this.settle();
      const ids = input.InstanceIds ?? [];
      const missing = ids.find((id) => !this.instances.has(id));
      if (missing)
        throw ec2Error("InvalidInstanceID.NotFound", `The instance ID '${missing}' does not exist`);
      return {
        TerminatingInstances: ids.map((id) => {
          const inst = this.instances.get(id) as FakeInstance;
          const previous = inst.instance.State ?? { Name: "pending" };
          if (previous.Name !== "terminated") {
            inst.instance.State = { Code: 32, Name: "shutting-down" };
            this.killProcesses(id);
          }
          return { InstanceId: id, PreviousState: previous, CurrentState: inst.instance.State };
        }),
      };
    });
  }

  private group(id: string | undefined): FakeGroup {
    const g = this.groups.find((x) => x.GroupId === id);
    if (!g) throw ec2Error("InvalidGroup.NotFound", `The security group '${id}' does not exist`);
    return g;
  }

  private groupMatches(g: FakeGroup, f: Filter): boolean {
    const values = f.Values ?? [];
    if (f.Name === "vpc-id") return values.includes(g.VpcId);
    if (f.Name === "group-name") return values.includes(g.GroupName);
    if (f.Name === "group-id") return values.includes(g.GroupId);
    if (f.Name?.startsWith("tag:")) return values.includes(tagOf(g.Tags, f.Name.slice(4)) as string);
    throw ec2Error("InvalidParameterValue", `the fake does not filter security groups by ${f.Name}`);
  }

  private instanceMatches(i: Instance, f: Filter): boolean {
    const values = f.Values ?? [];
    if (f.Name === "instance-state-name") return values.includes(i.State?.Name as string);
    if (f.Name === "instance-id") return values.includes(i.InstanceId as string);
    if (f.Name?.startsWith("tag:"))
      return values.some((v) => glob(v).test(tagOf(i.Tags, f.Name?.slice(4) ?? "") ?? "\0"));
    throw ec2Error("InvalidParameterValue", `the fake does not filter instances by ${f.Name}`);
  }

  private async runInstances(input: RunInstancesCommandInput) {
    if (input.MinCount !== 1 || input.MaxCount !== 1) {
      throw ec2Error("InvalidParameterValue", "the fake launches one instance per call");
    }
    const token = input.ClientToken;
    const earlier = token ? this.tokens.get(token) : undefined;
    if (earlier) return this.reservation(this.instances.get(earlier) as FakeInstance);
    const img = FAKE_IMAGES.find((i) => i.ImageId === input.ImageId);
    if (!img) throw ec2Error("InvalidAMIID.NotFound", `The image id '[${input.ImageId}]' does not exist`);
    if (input.SubnetId !== FAKE_SUBNET) {
      throw ec2Error("InvalidSubnetID.NotFound", `The subnet ID '${input.SubnetId}' does not exist`);
    }
    const groups = (input.SecurityGroupIds ?? []).map((id) => this.group(id));
    const id = `i-0${randomBytes(8).toString("hex")}`;
    const n = this.nextIp++;
    const inst = this.addInstance({
      InstanceId: id,
      ImageId: img.ImageId,
      InstanceType: input.InstanceType,
      State: { Code: 0, Name: "pending" as InstanceStateName },
      SubnetId: FAKE_SUBNET,
      VpcId: FAKE_VPC,
      PrivateIpAddress: `10.0.0.${n}`,
      SecurityGroups: groups.map((g) => ({ GroupId: g.GroupId, GroupName: g.GroupName })),
      Tags: input.TagSpecifications?.find((t) => t.ResourceType === "instance")?.Tags ?? [],
      LaunchTime: new Date(),
      ...(input.IamInstanceProfile?.Arn
        ? { IamInstanceProfile: { Arn: input.IamInstanceProfile.Arn, Id: "AIPAFAKEPROFILE" } }
        : {}),
      ...(input.ClientToken ? { ClientToken: input.ClientToken } : {}),
    });
    inst.launch = input;
    if (token) this.tokens.set(token, id);
    // cloud-init: the user data runs once, as root, at first boot; then the instance runs and its agent is online.
    if (input.UserData) {
      inst.userData = Buffer.from(input.UserData, "base64").toString("utf8");
      const file = join(inst.root, "var/lib/cloud/instance/user-data.txt");
      mkdirSync(join(inst.root, "var/lib/cloud/instance"), { recursive: true });
      writeFileSync(file, inst.userData, { mode: 0o700 });
      inst.boot = await this.runFile(inst, "bash", file, inst.root);
    }
    inst.instance.State = { Code: 16, Name: "running" };
    inst.instance.PublicIpAddress = `203.0.113.${n}`;
    return {
      ...this.reservation(inst),
      Instances: [
        { ...structuredClone(inst.instance), State: { Code: 0, Name: "pending" as InstanceStateName } },
      ],
    };
  }

  private reservation(inst: FakeInstance) {
    return {
      ReservationId: `r-0${inst.id.slice(3)}`,
      OwnerId: FAKE_ACCOUNT_ID,
      Instances: [structuredClone(inst.instance)],
    };
  }

  /** Runs a file with a shell on an instance, to its end; the output is the two streams interleaved. */
  private runFile(inst: FakeInstance, shell: string, file: string, cwd: string) {
    return new Promise<{ code: number | null; output: string }>((resolve) => {
      let output = "";
      const child = spawn(shell, [file], {
        cwd,
        env: this.instanceEnv(inst),
        stdio: ["ignore", "pipe", "pipe"],
      });
      child.stdout.on("data", (c: Buffer) => {
        output += c.toString("utf8");
      });
      child.stderr.on("data", (c: Buffer) => {
        output += c.toString("utf8");
      });
      child.on("error", (err) => resolve({ code: null, output: String(err) }));
      child.on("close", (code) => resolve({ code, output }));
    });
  }

  // ------------------------------------------------------------------------------------------------ SSM

  private mockSsm(): void {
    const ssm = this.ssm;
    this.on(ssm, DescribeInstanceInformationCommand, (input: DescribeInstanceInformationCommandInput) => {
      const ids = input.Filters?.find((f) => f.Key === "InstanceIds")?.Values;
      const online = [...this.instances.values()].filter(
        (i) => i.instance.State?.Name === "running" && i.launch && (!ids || ids.includes(i.id)),
      );
      return {
        InstanceInformationList: online.map((i) => ({
          InstanceId: i.id,
          PingStatus: "Online",
          PlatformType: "Linux",
          PlatformName: "Ubuntu",
          ResourceType: "EC2Instance",
          IPAddress: i.instance.PrivateIpAddress,
        })),
      };
    });
    this.on(ssm, SendCommandCommand, (input: SendCommandCommandInput) => this.sendCommand(input));
    this.on(ssm, GetCommandInvocationCommand, (input: GetCommandInvocationCommandInput) => {
      const c = input.CommandId ? this.commands.get(input.CommandId) : undefined;
      if (!c || c.instanceId !== input.InstanceId) {
        throw new InvocationDoesNotExist({ message: "", $metadata: {} });
      }
      const out: Omit<GetCommandInvocationCommandOutput, "$metadata"> = {
        CommandId: c.commandId,
        InstanceId: c.instanceId,
        DocumentName: "AWS-RunShellScript",
        PluginName: "aws:runShellScript",
        Status: c.status,
        StatusDetails: c.status,
        ResponseCode: c.responseCode,
        StandardOutputContent: c.stdout.slice(0, SSM_STDOUT_LIMIT),
        StandardErrorContent: c.stderr.slice(0, SSM_STDERR_LIMIT),
      };
      return out;
    });
    this.on(ssm, CancelCommandCommand, (input: CancelCommandCommandInput) => {
      const c = input.CommandId ? this.commands.get(input.CommandId) : undefined;
      if (c?.status === "InProgress" && c.child?.pid) {
        c.status = "Cancelled";
        try {
          process.kill(-c.child.pid, "SIGKILL");
        } catch {
          // ended meanwhile
        }
      }
      return {};
    });
    this.on(ssm, PutParameterCommand, (input: PutParameterCommandInput) => {
      const name = input.Name ?? "";
      const existing = this.parameters.get(name);
      if (existing && !input.Overwrite) throw new ParameterAlreadyExists({ message: "", $metadata: {} });
      const Version = (existing?.Version ?? 0) + 1;
      this.parameters.set(name, {
        Name: name,
        Value: input.Value ?? "",
        Type: input.Type ?? existing?.Type ?? "String",
        Version,
        ...(input.KeyId ? { KeyId: input.KeyId } : {}),
      });
      return {
        Version,
        Tier: input.Tier === "Intelligent-Tiering" ? "Standard" : (input.Tier ?? "Standard"),
      };
    });
    this.on(ssm, GetParameterCommand, (input: GetParameterCommandInput) => {
      const p = this.parameters.get(input.Name ?? "");
      if (!p) throw new ParameterNotFound({ message: "", $metadata: {} });
      return { Parameter: this.reveal(p, input.WithDecryption === true) };
    });
    this.on(ssm, GetParametersCommand, (input: GetParametersCommandInput) => {
      const names = input.Names ?? [];
      return {
        Parameters: names
          .map((n) => this.parameters.get(n))
          .filter((p): p is Parameter => p !== undefined)
          .map((p) => this.reveal(p, input.WithDecryption === true)),
        InvalidParameters: names.filter((n) => !this.parameters.has(n)),
      };
    });
    this.on(ssm, DeleteParameterCommand, (input: DeleteParameterCommandInput) => {
      if (!this.parameters.delete(input.Name ?? ""))
        throw new ParameterNotFound({ message: "", $metadata: {} });
      return {};
    });
  }

  private reveal(p: Parameter, decrypt: boolean) {
    const Value =
      p.Type === "SecureString" && !decrypt ? `AQICAH${Buffer.from(p.Name).toString("base64")}` : p.Value;
    return {
      Name: p.Name,
      Type: p.Type,
      Value,
      Version: p.Version,
      ARN: `arn:aws:ssm:${this.region}:${FAKE_ACCOUNT_ID}:parameter${p.Name}`,
    };
  }

  private sendCommand(input: SendCommandCommandInput) {
    if (input.DocumentName !== "AWS-RunShellScript") {
      throw new InvalidDocument({
        message: `the fake runs AWS-RunShellScript only, not ${input.DocumentName}`,
        $metadata: {},
      });
    }
    const ids = input.InstanceIds ?? [];
    const inst = ids.length === 1 ? this.running(ids[0] as string) : undefined;
    if (!inst?.launch) {
      throw new InvalidInstanceId({ message: "Instances not in a valid state for account", $metadata: {} });
    }
    const commands = input.Parameters?.commands ?? [];
    const script = commands.join("\n");
    const timeoutS = Number(input.Parameters?.executionTimeout?.[0] ?? 3600);
    const commandId = randomUUID();
    // The agent's orchestration folder (outside the instance's home), as /var/lib/amazon/ssm/.../<command id>.
    const work = join(
      inst.root,
      "var/lib/amazon/ssm",
      inst.id,
      "document/orchestration",
      commandId,
      "awsrunShellScript/0.awsrunShellScript",
    );
    mkdirSync(work, { recursive: true });
    // The one rewrite: the home the script exports is that path inside the instance's folder.
    const localized = script.replace(/^export HOME='(\/[^']*)'$/m, (_all, home: string) => {
      mkdirSync(join(inst.root, home), { recursive: true });
      return `export HOME='${join(inst.root, home)}'`;
    });
    writeFileSync(join(work, "_script.sh"), localized, { mode: 0o700 });
    const out = openSync(join(work, "stdout"), "w");
    const err = openSync(join(work, "stderr"), "w");
    // The agent runs the script with sh (dash on Ubuntu), in its own process group.
    const child = spawn("sh", ["-c", join(work, "_script.sh")], {
      cwd: work,
      env: this.instanceEnv(inst),
      stdio: ["ignore", out, err],
      detached: true,
    });
    closeSync(out);
    closeSync(err);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      try {
        if (child.pid) process.kill(-child.pid, "SIGKILL");
      } catch {
        // ended meanwhile
      }
    }, timeoutS * 1000);
    timer.unref();
    const command: FakeCommand = {
      commandId,
      instanceId: inst.id,
      script,
      status: "InProgress",
      responseCode: -1,
      stdout: "",
      stderr: "",
      child,
      done: Promise.resolve(),
    };
    command.done = new Promise<void>((resolve) => {
      const finish = (code: number | null) => {
        clearTimeout(timer);
        command.stdout = readFileSync(join(work, "stdout"), "utf8");
        command.stderr = readFileSync(join(work, "stderr"), "utf8");
        delete command.child;
        if (command.status === "Cancelled") {
          command.responseCode = -1;
        } else if (timedOut) {
          command.status = "TimedOut";
          command.responseCode = -1;
        } else if (code === 0) {
          command.status = "Success";
          command.responseCode = 0;
        } else {
          command.status = "Failed";
          command.responseCode = code ?? -1;
          command.stderr += `failed to run commands: exit status ${code ?? -1}`;
        }
        resolve();
      };
      child.on("exit", finish);
      child.on("error", () => finish(null));
    });
    this.commands.set(commandId, command);
    return {
      Command: {
        CommandId: commandId,
        DocumentName: input.DocumentName,
        InstanceIds: ids,
        Parameters: input.Parameters,
        Status: "Pending",
        Comment: input.Comment,
        TimeoutSeconds: input.TimeoutSeconds,
      },
    };
  }

  /**
   * The instance side of `aws ssm get-parameter` (the AWS CLI v2's behaviour for what labfleet asks): the
   * instance role's call goes through the mocked SSM client, so it is recorded like every other call.
   */
  private async cli(
    instanceId: string,
    args: string[],
  ): Promise<{ stdout: string; stderr: string; code: number }> {
    const inst = this.running(instanceId);
    if (!inst?.instance.IamInstanceProfile) {
      return {
        stdout: "",
        stderr: '\nUnable to locate credentials. You can configure credentials by running "aws configure".\n',
        code: 253,
      };
    }
    const [service, operation, ...rest] = args;
    const opts = new Map<string, string | true>();
    for (let i = 0; i < rest.length; i++) {
      const a = rest[i] as string;
      const next = rest[i + 1];
      if (next !== undefined && !next.startsWith("--")) {
        opts.set(a, next);
        i++;
      } else opts.set(a, true);
    }
    if (service !== "ssm" || operation !== "get-parameter" || typeof opts.get("--name") !== "string") {
      return { stdout: "", stderr: `fake aws: unsupported: ${args.join(" ")}\n`, code: 252 };
    }
    const region = (opts.get("--region") as string | undefined) ?? this.region;
    try {
      if (region !== this.region) throw new ParameterNotFound({ message: "", $metadata: {} });
      const client = new SSMClient({
        region,
        credentials: { accessKeyId: "ASIAINSTANCEROLE", secretAccessKey: "instance-role" },
      });
      const out = await client.send(
        new GetParameterCommand({
          Name: opts.get("--name") as string,
          WithDecryption: opts.get("--with-decryption") === true,
        }),
      );
      const query = opts.get("--query");
      const value = query === "Parameter.Value" ? out.Parameter?.Value : { Parameter: out.Parameter };
      const stdout =
        opts.get("--output") === "text" && typeof value === "string"
          ? `${value}\n`
          : `${JSON.stringify(value, null, typeof value === "string" ? undefined : 4)}\n`;
      return { stdout, stderr: "", code: 0 };
    } catch (err) {
      const name = err instanceof Error ? err.name : "Error";
      return {
        stdout: "",
        stderr: `\nAn error occurred (${name}) when calling the GetParameter operation: \n`,
        code: 254,
      };
    }
  }

  // ------------------------------------------------------------------------------------------ Scheduler

  private mockScheduler(): void {
    const key = (group: string | undefined, name: string | undefined) => `${group ?? "default"}/${name}`;
    this.on(this.scheduler, CreateScheduleCommand, (input: CreateScheduleCommandInput) => {
      const k = key(input.GroupName, input.Name);
      if (this.schedules.has(k)) {
        const message = `Schedule ${input.Name} already exists.`;
        throw new ConflictException({ message, Message: message, $metadata: {} });
      }
      this.schedules.set(k, structuredClone(input));
      return { ScheduleArn: `arn:aws:scheduler:${this.region}:${FAKE_ACCOUNT_ID}:schedule/${k}` };
    });
    this.on(this.scheduler, UpdateScheduleCommand, (input: UpdateScheduleCommandInput) => {
      const k = key(input.GroupName, input.Name);
      if (!this.schedules.has(k)) {
        const message = `Schedule ${input.Name} does not exist.`;
        throw new ResourceNotFoundException({ message, Message: message, $metadata: {} });
      }
      this.schedules.set(k, structuredClone(input));
      return { ScheduleArn: `arn:aws:scheduler:${this.region}:${FAKE_ACCOUNT_ID}:schedule/${k}` };
    });
    this.on(this.scheduler, DeleteScheduleCommand, (input: DeleteScheduleCommandInput) => {
      if (!this.schedules.delete(key(input.GroupName, input.Name))) {
        const message = `Schedule ${input.Name} does not exist.`;
        throw new ResourceNotFoundException({ message, Message: message, $metadata: {} });
      }
      return {};
    });
  }
}

/** The stdin blocks an SSM wrapper script carries (base64 between LABFLEET_STDIN markers), decoded. */
export function stdinOf(script: string): string[] {
  const out: string[] = [];
  for (const m of script.matchAll(/<<'LABFLEET_STDIN'[^\n]*\n([\s\S]*?)\nLABFLEET_STDIN\n/g)) {
    out.push(Buffer.from((m[1] ?? "").replace(/\s+/g, ""), "base64").toString("utf8"));
  }
  return out;
}
