import { randomBytes } from "node:crypto";
import {
  DescribeInstancesCommand,
  DescribeInstanceTypesCommand,
  DescribeSecurityGroupsCommand,
  EC2Client,
  TerminateInstancesCommand,
} from "@aws-sdk/client-ec2";
import {
  CreateScheduleCommand,
  type CreateScheduleCommandInput,
  SchedulerClient,
} from "@aws-sdk/client-scheduler";
import { GetServiceQuotaCommand, ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import { SFNClient, StartExecutionCommand } from "@aws-sdk/client-sfn";
import {
  GetCommandInvocationCommand,
  GetParametersCommand,
  PutParameterCommand,
  SendCommandCommand,
  SSMClient,
} from "@aws-sdk/client-ssm";
import { DynamoDBDocumentClient, GetCommand, QueryCommand } from "@aws-sdk/lib-dynamodb";
import { mockClient } from "aws-sdk-client-mock";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { CLOUD_PROVISION_WAITS, cloudConfig, cloudDeps } from "../../shared/cloud/deps.ts";
import { CLOUD_ENV, operatorSecretsPrefix, SECRET_NOT_SET } from "../../shared/cloud/env.ts";
import { GET_PARAMETERS_BATCH, parameterStoreSecrets } from "../../shared/cloud/parameter-store.ts";
import { portalDeps } from "../../shared/cloud/portal-deps.ts";
import {
  accessKeyFrom,
  envLinkedSecrets,
  instructorTokenFrom,
  linkedFrom,
} from "../../shared/cloud/secrets.ts";
import { MANAGED_KEY_LABEL } from "../../shared/cloud/transports.ts";
import { AwsProvider } from "../../shared/providers/aws.ts";
import { StaticProvider } from "../../shared/providers/static.ts";
import { configure, type HostAddress } from "../../shared/runtime/deps.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { generateEd25519KeyPair } from "../../shared/transports/ssh-identity.ts";
import { Workshop } from "../../shared/workshop/schema.ts";
import { bootstrapAuth, createInstructorApp, createPortalApp } from "../../web/app.ts";

const ssm = mockClient(SSMClient);
const sfn = mockClient(SFNClient);
const scheduler = mockClient(SchedulerClient);
const ddb = mockClient(DynamoDBDocumentClient);
const ec2 = mockClient(EC2Client);
const quotas = mockClient(ServiceQuotasClient);
const meta = { $metadata: {} };

const PREFIX = "arn:aws:states:eu-west-1:123456789012";
const UP = `${PREFIX}:stateMachine:labfleet-test-up`;
const TEARDOWN = `${PREFIX}:stateMachine:labfleet-test-teardown`;
const ROLLOUT = `${PREFIX}:stateMachine:labfleet-test-rollout`;
const EXEC = `${PREFIX}:stateMachine:labfleet-test-exec`;
const RUN = "run_01J9Z3Q8V6K1M2N3P4R5S6T7V8";
const ACCESS_KEY = randomBytes(32);
const TOKEN = "tok-7f3a9c0e5b1d4a2f8e6c0b9d";
const SCHEDULE = {
  group: "labfleet-test",
  role: "arn:aws:iam::123456789012:role/labfleet-test-scheduler",
  target: "arn:aws:lambda:eu-west-1:123456789012:function:labfleet-test-sweep",
};

const linkedEnv = (values: Record<string, string>) =>
  Object.fromEntries(
    Object.entries(values).map(([k, v]) => [`SST_RESOURCE_${k}`, JSON.stringify({ value: v })]),
  );

/** What sst.config.ts gives a control-plane function, as infra/permissions.ts names it. */
function env(extra: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return {
    AWS_REGION: "eu-west-1",
    [CLOUD_ENV.table]: "labfleet-test-TableTable",
    [CLOUD_ENV.stage]: "test",
    [CLOUD_ENV.upStateMachineArn]: UP,
    [CLOUD_ENV.teardownStateMachineArn]: TEARDOWN,
    [CLOUD_ENV.rolloutStateMachineArn]: ROLLOUT,
    [CLOUD_ENV.execStateMachineArn]: EXEC,
    [CLOUD_ENV.hostInstanceProfileArn]: "arn:aws:iam::123456789012:instance-profile/labfleet-test-host",
    ...linkedEnv({ AccessKey: ACCESS_KEY.toString("base64"), SshPrivateKey: SECRET_NOT_SET }),
    ...extra,
  };
}

const credentials = { accessKeyId: "x", secretAccessKey: "y" };

let logged: string[];
beforeEach(() => {
  ssm.reset();
  sfn.reset();
  scheduler.reset();
  ddb.reset();
  ec2.reset();
  quotas.reset();
  logged = [];
  setLogSink((line) => logged.push(line), "debug");
});
afterEach(() => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  vi.useRealTimers();
});

describe("parameterStoreSecrets", () => {
  const store = () =>
    parameterStoreSecrets({ client: new SSMClient({ region: "eu-west-1", credentials }), stage: "test" });

  it("reads every key under /labfleet/<stage>/secrets/ in batches of 10, decrypted, and lists the missing", async () => {
    const keys = Array.from({ length: 23 }, (_, i) => `KEY_${String(i).padStart(2, "0")}`);
    const absent = new Set(["KEY_03", "KEY_17"]);
    ssm.on(GetParametersCommand).callsFake((input: { Names: string[] }) => ({
      ...meta,
      Parameters: input.Names.filter((n) => !absent.has(n.slice(n.lastIndexOf("/") + 1))).map((n) => ({
        Name: n,
        Value: `value of ${n.slice(n.lastIndexOf("/") + 1)}`,
        Type: "SecureString",
      })),
      InvalidParameters: input.Names.filter((n) => absent.has(n.slice(n.lastIndexOf("/") + 1))),
    }));

    const got = await store().get([...keys, "KEY_00"]);

    const calls = ssm.commandCalls(GetParametersCommand).map((c) => c.args[0].input);
    expect(GET_PARAMETERS_BATCH).toBe(10);
    expect(calls).toEqual([
      { Names: keys.slice(0, 10).map((k) => `/labfleet/test/secrets/${k}`), WithDecryption: true },
      { Names: keys.slice(10, 20).map((k) => `/labfleet/test/secrets/${k}`), WithDecryption: true },
      { Names: keys.slice(20).map((k) => `/labfleet/test/secrets/${k}`), WithDecryption: true },
    ]);
    expect(got.missing).toEqual(["KEY_03", "KEY_17"]);
    expect(Object.keys(got.values)).toEqual(keys.filter((k) => !absent.has(k)));
    expect(got.values.KEY_22).toBe("value of KEY_22");
    expect(logged.join("\n")).not.toContain("value of");
  });

  it("asks nothing for no keys", async () => {
    expect(await store().get([])).toEqual({ values: {}, missing: [] });
    expect(ssm.commandCalls(GetParametersCommand)).toHaveLength(0);
  });

  it("refuses keys that are not variable names before asking AWS (no path games)", async () => {
    await expect(store().get(["GOOD", "../../other/secret", "A/B"])).rejects.toMatchObject({
      kind: "input",
      code: "secrets.bad_key",
    });
    expect(ssm.commandCalls(GetParametersCommand)).toHaveLength(0);
  });

  it("reports a refusal by the error's name and the path, never AWS's message", async () => {
    ssm.on(GetParametersCommand).rejects(
      Object.assign(new Error("User: arn:aws:sts::1:assumed-role/x is not authorized"), {
        name: "AccessDeniedException",
      }),
    );
    const err = await store()
      .get(["DB_PASSWORD"])
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(VisibleError);
    expect((err as VisibleError).code).toBe("secrets.unavailable");
    expect((err as VisibleError).message).toBe(
      "Parameter Store refused to read /labfleet/test/secrets/{DB_PASSWORD} (AccessDeniedException)",
    );
  });

  it("takes only a stage name", () => {
    expect(operatorSecretsPrefix("prod-eu")).toBe("/labfleet/prod-eu/secrets/");
    expect(() => parameterStoreSecrets({ client: new SSMClient({}), stage: "a/b" })).toThrow(/stage/);
  });
});

describe("linked secrets", () => {
  it("reads SST_RESOURCE_<Name> as SST's Resource does, and SST's Resource object itself", () => {
    const fromEnv = envLinkedSecrets({ SST_RESOURCE_InstructorToken: JSON.stringify({ value: TOKEN }) });
    expect(fromEnv("InstructorToken")).toBe(TOKEN);
    expect(fromEnv("AccessKey")).toBeUndefined();
    const resource = { App: { name: "labfleet", stage: "test" }, InstructorToken: { value: TOKEN } };
    expect(linkedFrom(resource)("InstructorToken")).toBe(TOKEN);
    expect(linkedFrom(resource)("SshPrivateKey")).toBeUndefined();
  });

  it("never quotes a malformed or wrong secret back", () => {
    const secret = "not-json-but-secret-text";
    expect(() => envLinkedSecrets({ SST_RESOURCE_AccessKey: secret })("AccessKey")).toThrow(
      'SST_RESOURCE_AccessKey is not JSON of the form {"value": "..."}',
    );
    const shortKey = Buffer.alloc(16, 7).toString("base64");
    const err = (() => {
      try {
        accessKeyFrom(() => shortKey);
      } catch (e) {
        return e as Error;
      }
    })();
    expect(err?.message).toBe(
      "the AccessKey secret is not 32 bytes in base64: make one with openssl rand -base64 32",
    );
    expect(() => accessKeyFrom(() => undefined)).toThrow(/AccessKey secret is not set: npx sst secret set/);
    expect(() => instructorTokenFrom(() => "short")).toThrow(
      "the InstructorToken secret is too short: use at least 24 characters",
    );
    expect(() => instructorTokenFrom(() => SECRET_NOT_SET)).toThrow(/InstructorToken secret is not set/);
    expect(accessKeyFrom(() => ACCESS_KEY.toString("base64")).equals(ACCESS_KEY)).toBe(true);
  });
});

describe("cloudConfig", () => {
  it("names every missing variable at once", () => {
    expect(() => cloudConfig({ [CLOUD_ENV.stage]: "test" })).toThrow(
      "labfleet's cloud runtime is not configured: LABFLEET_TABLE, LABFLEET_UP_STATE_MACHINE_ARN, LABFLEET_TEARDOWN_STATE_MACHINE_ARN, LABFLEET_ROLLOUT_STATE_MACHINE_ARN, LABFLEET_EXEC_STATE_MACHINE_ARN not set (sst.config.ts sets them on every function)",
    );
  });

  it("takes the schedule variables all together or not at all", () => {
    expect(cloudConfig(env()).schedules).toBeUndefined();
    expect(() => cloudConfig(env({ [CLOUD_ENV.scheduleGroup]: SCHEDULE.group }))).toThrow(
      /LABFLEET_SCHEDULER_ROLE_ARN, LABFLEET_SCHEDULE_TARGET_ARN not set/,
    );
  });
});

describe("cloudDeps", () => {
  it("composes the cloud runtime: table, providers aws and static, the access key", async () => {
    const deps = cloudDeps(env());
    expect(deps.store.table).toBe("labfleet-test-TableTable");
    expect(deps.accessKey.equals(ACCESS_KEY)).toBe(true);
    expect(Object.keys(deps.providers).sort()).toEqual(["aws", "enrolled", "static"]);
    expect(deps.providers.aws).toBeInstanceOf(AwsProvider);
    expect(deps.providers.static).toBeInstanceOf(StaticProvider);
    expect(deps.scheduleMirror).toBeUndefined();
    expect(CLOUD_PROVISION_WAITS.waitTimeoutMs + CLOUD_PROVISION_WAITS.ssmWaitTimeoutMs).toBeLessThan(
      14 * 60_000,
    );

    ddb.on(GetCommand).resolves({ ...meta });
    expect((await deps.store.workshop.get({ name: "k8s-intro" }).go()).data).toBeNull();
    expect(ddb.commandCalls(GetCommand).map((c) => c.args[0].input)).toEqual([
      {
        TableName: "labfleet-test-TableTable",
        Key: { pk: "$labfleet#name_k8s-intro", sk: "$workshop_1" },
      },
    ]);
  });

  it("gives pushing hosts the API's URL where the environment sets it (DeployHost), and no URL elsewhere", () => {
    expect(cloudDeps(env()).hostApiUrl).toBeUndefined();
    const url = "https://abcdefghij.execute-api.eu-west-1.amazonaws.com";
    expect(cloudDeps(env({ [CLOUD_ENV.hostApiUrl]: url })).hostApiUrl?.()).toBe(url);
  });

  it("starts workflows on the state machines the environment names", async () => {
    sfn.on(StartExecutionCommand).resolves({ ...meta, executionArn: "x", startDate: new Date() });
    const deps = cloudDeps(env());
    await deps.workflows.start("deploy", { workshop: "k8s-intro", runId: RUN, force: true });
    await deps.workflows.start("teardown", { workshop: "k8s-intro", runId: RUN });
    await deps.workflows.start("rollout", { workshop: "k8s-intro", runId: RUN });
    const job = "exj_01J9Z3Q8V6K1M2N3P4R5S6T7V8";
    await deps.workflows.start("exec", { workshop: "k8s-intro", runId: job });
    expect(sfn.commandCalls(StartExecutionCommand).map((c) => c.args[0].input)).toEqual([
      {
        stateMachineArn: UP,
        name: RUN,
        input: JSON.stringify({ workshop: "k8s-intro", runId: RUN, force: true }),
      },
      { stateMachineArn: TEARDOWN, name: RUN, input: JSON.stringify({ workshop: "k8s-intro", runId: RUN }) },
      { stateMachineArn: ROLLOUT, name: RUN, input: JSON.stringify({ workshop: "k8s-intro", runId: RUN }) },
      { stateMachineArn: EXEC, name: job, input: JSON.stringify({ workshop: "k8s-intro", runId: job }) },
    ]);
  });

  it("reads operator secrets from this stage's Parameter Store prefix", async () => {
    ssm.on(GetParametersCommand).resolves({
      ...meta,
      Parameters: [{ Name: "/labfleet/test/secrets/DB_PASSWORD", Value: "hunter22" }],
      InvalidParameters: ["/labfleet/test/secrets/API_KEY"],
    });
    const got = await cloudDeps(env()).secrets.get(["DB_PASSWORD", "API_KEY"]);
    expect(got).toEqual({ values: { DB_PASSWORD: "hunter22" }, missing: ["API_KEY"] });
    expect(ssm.commandCalls(GetParametersCommand).map((c) => c.args[0].input)).toEqual([
      {
        Names: ["/labfleet/test/secrets/DB_PASSWORD", "/labfleet/test/secrets/API_KEY"],
        WithDecryption: true,
      },
    ]);
  });

  it("hands operator secrets to SSM hosts through this stage's workshop parameter", async () => {
    ssm.on(PutParameterCommand).resolves({ ...meta, Version: 1 });
    const name = await cloudDeps(env()).secretParameters?.put("k8s-intro", { DB_PASSWORD: "hunter22" });
    expect(name).toBe("/labfleet/test/workshops/k8s-intro/secrets");
    expect(ssm.commandCalls(PutParameterCommand).map((c) => c.args[0].input.Name)).toEqual([
      "/labfleet/test/workshops/k8s-intro/secrets",
    ]);
    expect(logged.join("\n")).not.toContain("hunter22");
  });

  it("reaches EC2 hosts over SSM Run Command, on the instance the host record names", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
    ssm.on(SendCommandCommand).resolves({ ...meta, Command: { CommandId: "cmd-1" } });
    ssm.on(GetCommandInvocationCommand).resolves({
      ...meta,
      Status: "Success",
      ResponseCode: 0,
      StandardOutputContent: "hello\n",
      StandardErrorContent: "",
    });
    const host: HostAddress = {
      workshop: "k8s-intro",
      hostId: "lab-01",
      address: "i-0abc",
      transport: "ssm",
    };
    const running = cloudDeps(env()).transport(host).exec("echo hello", { step: "probe" });
    await vi.advanceTimersByTimeAsync(1_000);
    const result = await running;

    expect(result.exitCode).toBe(0);
    const sent = ssm.commandCalls(SendCommandCommand).map((c) => c.args[0].input);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({
      DocumentName: "AWS-RunShellScript",
      InstanceIds: ["i-0abc"],
      Comment: "labfleet k8s-intro lab-01: probe",
    });
    expect(ssm.commandCalls(GetCommandInvocationCommand).map((c) => c.args[0].input)).toEqual([
      { CommandId: "cmd-1", InstanceId: "i-0abc" },
    ]);
  });

  it("reaches SSH hosts only with the managed key from the secret, never a key file", async () => {
    const ssh: HostAddress = { workshop: "byo", hostId: "h1", address: "lab@203.0.113.7", transport: "ssh" };
    const deps = cloudDeps(env());
    await expect(deps.transport(ssh).exec("true")).rejects.toMatchObject({ code: "ssh.identity_missing" });
    await expect(deps.sshPublicKey?.()).rejects.toThrow(/npx sst secret set SshPrivateKey/);
    expect(() => deps.transport({ ...ssh, ssh: { identityFile: "~/.ssh/id_ed25519" } })).toThrow(
      expect.objectContaining({ code: "ssh.identity_file_cloud" }),
    );
    expect(() => deps.transport({ ...ssh, transport: "local", address: "/tmp/x" })).toThrow(
      expect.objectContaining({ code: "transport.unavailable" }),
    );
  });

  it("prints the managed key's public line, and names only the secret for a bad key", async () => {
    const pair = generateEd25519KeyPair("labfleet");
    const deps = cloudDeps(env(linkedEnv({ SshPrivateKey: pair.private })));
    expect(await deps.sshPublicKey?.()).toBe(`${pair.public.split(" ").slice(0, 2).join(" ")} labfleet`);

    const garbage =
      "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-key-at-all\n-----END OPENSSH PRIVATE KEY-----";
    const bad = cloudDeps(env(linkedEnv({ SshPrivateKey: garbage })));
    const err = await bad.sshPublicKey?.().catch((e: unknown) => e as VisibleError);
    expect(err).toMatchObject({ code: "ssh.identity_invalid" });
    expect((err as Error).message).toContain(MANAGED_KEY_LABEL);
    expect((err as Error).message).not.toContain("not-a-key-at-all");
  });

  it("mirrors TTL schedules to EventBridge Scheduler when the schedule variables are set", async () => {
    scheduler.on(CreateScheduleCommand).resolves({ ...meta, ScheduleArn: "arn:schedule" });
    const deps = cloudDeps(
      env({
        [CLOUD_ENV.scheduleGroup]: SCHEDULE.group,
        [CLOUD_ENV.schedulerRoleArn]: SCHEDULE.role,
        [CLOUD_ENV.scheduleTargetArn]: SCHEDULE.target,
      }),
    );
    await deps.scheduleMirror?.put("k8s-intro", new Date(Date.now() + 3_600_000));
    const calls = scheduler.commandCalls(CreateScheduleCommand).map((c) => c.args[0].input);
    expect(calls).toHaveLength(1);
    expect(calls[0]).toMatchObject<Partial<CreateScheduleCommandInput>>({
      Name: "labfleet-teardown-k8s-intro",
      GroupName: SCHEDULE.group,
      Target: {
        Arn: SCHEDULE.target,
        RoleArn: SCHEDULE.role,
        Input: JSON.stringify({ source: "labfleet.schedule", kind: "teardown", workshop: "k8s-intro" }),
      },
    });
  });

  it("runs its EC2 provider as LABFLEET_STAGE: it sweeps only that stage's instances and groups", async () => {
    const tags = (stage: string) => [
      { Key: "ManagedBy", Value: "labfleet" },
      { Key: "labfleet-stage", Value: stage },
      { Key: "labfleet-workshop", Value: "k8s-intro" },
      { Key: "labfleet-host-id", Value: "lab-01" },
      { Key: "labfleet-expiry", Value: "2030-01-01T00:00:00.000Z" },
    ];
    ec2.on(DescribeInstancesCommand).resolves({
      ...meta,
      Reservations: [
        {
          Instances: [
            { InstanceId: "i-0test", State: { Name: "running" }, Tags: tags("test") },
            { InstanceId: "i-0prod", State: { Name: "running" }, Tags: tags("prod") },
          ],
        },
      ],
    });
    ec2.on(TerminateInstancesCommand).resolves({ ...meta });
    ec2.on(DescribeSecurityGroupsCommand).resolves({ ...meta, SecurityGroups: [] });
    const client = new EC2Client({ region: "eu-west-1", credentials });
    const aws = cloudDeps(env(), { clients: { ec2: client } }).providers.aws as AwsProvider;
    const swept = await aws.sweepExpired(new Date("2030-01-02T00:00:00.000Z"));
    expect(swept.map((s) => s.providerId)).toEqual(["i-0test"]);
    expect(ec2.commandCalls(TerminateInstancesCommand).map((c) => c.args[0].input)).toEqual([
      { InstanceIds: ["i-0test"] },
    ]);
    expect(ec2.commandCalls(DescribeInstancesCommand)[0]?.args[0].input.Filters?.[1]).toEqual({
      Name: "tag:labfleet-stage",
      Values: ["test"],
    });
    expect(ec2.commandCalls(DescribeSecurityGroupsCommand)[0]?.args[0].input.Filters).toEqual([
      { Name: "tag:ManagedBy", Values: ["labfleet"] },
      { Name: "tag:labfleet-stage", Values: ["test"] },
    ]);
    expect(ec2.commandCalls(DescribeInstancesCommand).every((c) => c.thisValue === client)).toBe(true);
  });

  it("checks the vCPU quota with the Service Quotas client it is given", async () => {
    ec2.on(DescribeInstancesCommand).resolves({ ...meta, Reservations: [] });
    ec2.on(DescribeInstanceTypesCommand).resolves({
      ...meta,
      InstanceTypes: [{ InstanceType: "m7i.large", VCpuInfo: { DefaultVCpus: 2 } }],
    });
    quotas.on(GetServiceQuotaCommand).resolves({ ...meta, Quota: { Value: 64 } });
    const serviceQuotas = new ServiceQuotasClient({ region: "eu-west-1", credentials });
    const deps = cloudDeps(env(), {
      clients: { ec2: new EC2Client({ region: "eu-west-1", credentials }), serviceQuotas },
    });
    const spec = Workshop.parse({
      name: "k8s-intro",
      lab: { source: "./lab", setup: "true" },
      provider: {
        type: "aws",
        count: 1,
        region: "eu-west-1",
        subnet_id: "subnet-0123456789abcdef0",
        instance_type: "m7i.large",
        security_group_ids: ["sg-0123456789abcdef0"],
      },
    });
    const plan = await deps.providers.aws?.plan(spec);
    expect(plan?.[0]?.detail).toMatch(/vCPU quota L-1216C47A: 2 needed \+ 0 in use of 64, fits$/);
    const asked = quotas.commandCalls(GetServiceQuotaCommand);
    expect(asked.map((c) => c.args[0].input)).toEqual([{ ServiceCode: "ec2", QuotaCode: "L-1216C47A" }]);
    expect(asked[0]?.thisValue).toBe(serviceQuotas);
  });

  it("fails at start-up without the access key, naming the secret only", () => {
    const e = env();
    delete e.SST_RESOURCE_AccessKey;
    expect(() => cloudDeps(e)).toThrow(/the AccessKey secret is not set/);
  });
});

describe("portalDeps", () => {
  it("gives the portal the table and the access key, and no way to a host, a workflow or a secret", async () => {
    const deps = portalDeps({
      AWS_REGION: "eu-west-1",
      [CLOUD_ENV.table]: "labfleet-test-TableTable",
      [CLOUD_ENV.stage]: "test",
      ...linkedEnv({ AccessKey: ACCESS_KEY.toString("base64") }),
    });
    expect(deps.store.table).toBe("labfleet-test-TableTable");
    expect(deps.accessKey.equals(ACCESS_KEY)).toBe(true);
    expect(deps.providers).toEqual({});
    expect(deps.scheduleMirror).toBeUndefined();
    expect(() => deps.transport({ workshop: "w", hostId: "h1", address: "i-1", transport: "ssm" })).toThrow(
      expect.objectContaining({ code: "portal.not_here" }),
    );
    await expect(deps.workflows.start("teardown", { workshop: "w", runId: RUN })).rejects.toMatchObject({
      code: "portal.not_here",
    });
    await expect(deps.secrets.get(["X"])).rejects.toMatchObject({ code: "portal.not_here" });
    expect(() => portalDeps({ [CLOUD_ENV.stage]: "test" })).toThrow(/LABFLEET_TABLE not set/);
  });
});

describe("the web split in two functions", () => {
  const PORTAL = "https://portal.example.test/";
  const auth = { authorization: `Bearer ${TOKEN}` };
  // /api/health reads the store (one GetItem, answered by the DynamoDB mock).
  beforeEach(() =>
    configure(
      portalDeps({
        AWS_REGION: "eu-west-1",
        [CLOUD_ENV.table]: "labfleet-test-TableTable",
        [CLOUD_ENV.stage]: "test",
        ...linkedEnv({ AccessKey: ACCESS_KEY.toString("base64") }),
      }),
    ),
  );

  it("the instructor app serves the API and console, and sends every other GET to the portal", async () => {
    const app = createInstructorApp({ auth: bootstrapAuth(TOKEN), portalUrl: PORTAL });
    expect((await app.request("/api/health")).status).toBe(200);
    const page = await app.request("/console"); // the console's own answer (its page, or its sign-in)
    expect(page.status).not.toBe(404);
    expect(page.headers.get("location") ?? "").not.toContain(PORTAL);
    const link = await app.request("/l/AbCdEfGhIjKlMnOpQrStUvWx?x=1");
    expect(link.status).toBe(302);
    expect(link.headers.get("location")).toBe("https://portal.example.test/l/AbCdEfGhIjKlMnOpQrStUvWx?x=1");
    expect((await app.request("/api/nope", { headers: auth })).status).toBe(404);
    expect((await app.request("/admin/w/t", { method: "POST" })).status).toBe(404);
    expect((await app.request("/claim", { method: "POST" })).status).toBe(404);
    expect((await app.request("/", { method: "HEAD" })).status).toBe(302);
    expect(logged.join("\n")).not.toContain("AbCdEfGhIjKlMnOpQrStUvWx");
  });

  it("without a portal URL the instructor app has no student pages", async () => {
    const app = createInstructorApp({ auth: bootstrapAuth(TOKEN) });
    expect((await app.request("/")).status).toBe(404);
    expect((await app.request("/privacy")).status).toBe(404);
  });

  it("the portal app has the student pages and none of the instructor's", async () => {
    const app = createPortalApp();
    expect((await app.request("/privacy")).status).toBe(200);
    expect((await app.request("/portal.css")).status).toBe(200);
    expect((await app.request("/api/health")).status).toBe(200);
    expect((await app.request("/api/workshops", { headers: auth })).status).toBe(404);
    expect((await app.request("/console")).status).toBe(404);
    expect((await app.request("/admin/w/t")).status).toBe(404);
  });
});

/** A Function URL request (payload 2.0), as Lambda hands it to web/lambda.ts. */
function urlEvent(method: string, path: string, headers: Record<string, string> = {}) {
  return {
    version: "2.0",
    routeKey: "$default",
    rawPath: path,
    rawQueryString: path === "/" ? "ref=slide" : "",
    headers: { host: "api.lambda-url.eu-west-1.on.aws", ...headers },
    body: null,
    isBase64Encoded: false,
    requestContext: {
      accountId: "anonymous",
      apiId: "api",
      domainName: "api.lambda-url.eu-west-1.on.aws",
      domainPrefix: "api",
      requestId: "r1",
      routeKey: "$default",
      stage: "$default",
      time: "30/Nov/2026:10:00:00 +0000",
      timeEpoch: 0,
      http: { method, path, protocol: "HTTP/1.1", sourceIp: "203.0.113.9", userAgent: "vitest" },
    },
  };
}

describe("the Lambda entries", () => {
  const saved = { ...process.env };
  afterEach(() => {
    process.env = { ...saved };
  });

  it("functions/lambda.ts configures the cloud runtime on the first invocation, then runs the handler", async () => {
    // SST's Resource reads the environment once per process, as in a Lambda instance: both entries' secrets.
    Object.assign(process.env, env(linkedEnv({ InstructorToken: TOKEN })));
    const { useDeps } = await import("../../shared/runtime/deps.ts");
    const lambda = await import("../../functions/lambda.ts");
    // An invalid payload: the handler's own check, after the runtime was composed, before any AWS call.
    await expect(lambda.FailRun({ workshop: "k8s-intro" })).rejects.toThrow();
    expect(useDeps().store.table).toBe("labfleet-test-TableTable");
    expect(useDeps().providers.aws).toBeInstanceOf(AwsProvider);
  });

  it("web/lambda.ts serves the instructor API with the token secret and sends students to the portal, which web/portal-lambda.ts serves", async () => {
    Object.assign(process.env, env(linkedEnv({ InstructorToken: TOKEN })), {
      [CLOUD_ENV.portalUrl]: "https://portal.lambda-url.eu-west-1.on.aws/",
    });
    ddb.on(QueryCommand).resolves({ ...meta, Items: [] });
    const web = await import("../../web/lambda.ts");

    const student = await web.api(urlEvent("GET", "/") as never);
    expect(student.statusCode).toBe(302);
    expect(student.headers?.location).toBe("https://portal.lambda-url.eu-west-1.on.aws/?ref=slide");

    const anonymous = await web.api(urlEvent("GET", "/api/workshops") as never);
    expect(anonymous.statusCode).toBe(401);
    expect(ddb.commandCalls(QueryCommand)).toHaveLength(0);

    const instructor = await web.api(
      urlEvent("GET", "/api/workshops", { authorization: `Bearer ${TOKEN}` }) as never,
    );
    expect(instructor.statusCode).toBe(200);
    expect(ddb.commandCalls(QueryCommand).map((c) => c.args[0].input.TableName)).toEqual([
      "labfleet-test-TableTable",
    ]);
    expect(logged.join("\n")).not.toContain(TOKEN);

    const portalEntry = await import("../../web/portal-lambda.ts");
    const portalPage = await portalEntry.portal(urlEvent("GET", "/privacy") as never);
    expect(portalPage.statusCode).toBe(200);
    expect(portalPage.headers?.["content-security-policy"]).toContain("frame-ancestors 'none'");
    const noApi = await portalEntry.portal(urlEvent("GET", "/api/workshops") as never);
    expect(noApi.statusCode).toBe(404);
  });
});
