import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import {
  CreateTagsCommand,
  type CreateTagsCommandInput,
  EC2Client,
  RunInstancesCommand,
  type RunInstancesCommandInput,
  TerminateInstancesCommand,
  type TerminateInstancesCommandInput,
} from "@aws-sdk/client-ec2";
import {
  CreateScheduleCommand,
  type CreateScheduleCommandInput,
  DeleteScheduleCommand,
  type DeleteScheduleCommandInput,
  SchedulerClient,
  UpdateScheduleCommand,
  type UpdateScheduleCommandInput,
} from "@aws-sdk/client-scheduler";
import { SFNClient } from "@aws-sdk/client-sfn";
import {
  DeleteParameterCommand,
  type DeleteParameterCommandInput,
  PutParameterCommand,
  type PutParameterCommandInput,
  SendCommandCommand,
  type SendCommandCommandInput,
  SSMClient,
} from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { localClient } from "../../cli/local/dynamodb.ts";
import { cloudDeps } from "../../shared/cloud/deps.ts";
import { CLOUD_ENV } from "../../shared/cloud/env.ts";
import { EventBridgeScheduleMirror } from "../../shared/cloud/scheduler.ts";
import { SsmSecretParameters } from "../../shared/cloud/secret-parameters.ts";
import { secretsFile } from "../../shared/fleet/secrets.ts";
import { AwsProvider } from "../../shared/providers/aws.ts";
import { configure, useDeps } from "../../shared/runtime/deps.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { ensureTable } from "../../shared/store/table.ts";
import { LocalExecutor } from "../../stepfunctions/local-executor.ts";
import { bootstrapAuth, createInstructorApp } from "../../web/app.ts";
import {
  FAKE_ACCOUNT_ID,
  FAKE_REGION,
  FAKE_SUBNET,
  FakeAws,
  type FakeInstance,
  stdinOf,
} from "../harness/fake-aws.ts";
import { fixturesDir, removeDir, tempDir, uniqueTable, waitFor } from "../harness/runtime.ts";

/**
 * The cloud path end to end: the instructor API and the real domain code on the cloud composition root's
 * adapters (cloudDeps: AwsProvider, the SSM transport, the EventBridge schedule mirror, the Parameter Store
 * secrets and secret parameters) over DynamoDB Local, with the ASL run in-process by the local executor instead
 * of Step Functions. Only AWS is fake (tests/harness/fake-aws.ts): EC2 instances are folders, and every SSM
 * command labfleet sends runs there for real. One workshop goes through up, status, access, diagnose,
 * open-access, extend and teardown, in that order.
 */

const W = "cloud-path";
const STAGE = "test";
const TOKEN = "cloud-path-suite-token-7d41c9";
const HOUR = 3_600_000;
const OPERATOR = "198.51.100.0/24";
const PROFILE = `arn:aws:iam::${FAKE_ACCOUNT_ID}:instance-profile/labfleet-test-host`;
const GROUP = "labfleet-test";
const TARGET = `arn:aws:lambda:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:function:labfleet-test-sweep`;
const SCHEDULER_ROLE = `arn:aws:iam::${FAKE_ACCOUNT_ID}:role/labfleet-test-scheduler`;
const SCHEDULE = `${GROUP}/labfleet-teardown-${W}`;
const SECRETS_PARAMETER = `/labfleet/${STAGE}/workshops/${W}/secrets`;
/** The operator's secret: quotes, a dollar and a space, so every layer's quoting is exercised. */
const SECRET = `o'Brien $ecret ${randomBytes(6).toString("hex")}`;
const credentials = { accessKeyId: "AKIDFAKEFAKEFAKE", secretAccessKey: "fake" };

const YAML = `name: ${W}
lab:
  source: ${join(fixturesDir, "labs", "quick")}
  setup: |
    . "$LABFLEET_SECRETS"
    printf '%s' "$DB_TOKEN" > seen-secret
    echo "using token $DB_TOKEN"
    echo '{"phase":"gate","state":"running"}' >> "$LABFLEET_STATUS"
    while [ ! -e "$HOME/release-gate" ]; do sleep 0.1; done
    echo '{"phase":"gate","state":"done"}' >> "$LABFLEET_STATUS"
    bash setup.sh
  health: test -f built
  concurrency: 2
  timeout_minutes: 5
  poll_seconds: 5
  operator_secrets: [DB_TOKEN]
  ui_ports:
    - { name: ui, port: 8443 }
provider:
  type: aws
  count: 2
  region: ${FAKE_REGION}
  subnet_id: ${FAKE_SUBNET}
  instance_type: m7i.large
  operator_cidrs: [${OPERATOR}]
  ttl_hours: 4
`;

let work: string;
let aws: FakeAws;
let ddb: DynamoDBClient;
let executor: LocalExecutor;
let savedEnv: NodeJS.ProcessEnv;
const lines: string[] = [];
const app = createInstructorApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();
const post = (path: string, body: unknown = {}) =>
  app.request(`/api/workshops${path}`, { method: "POST", headers: auth, body: JSON.stringify(body) });
const get = (path: string) => app.request(`/api/workshops${path}`, { headers: auth });

/** The control plane's environment, as sst.config.ts sets it on every function. */
function cloudEnv(table: string): Record<string, string> {
  const arn = (name: string) =>
    `arn:aws:states:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:stateMachine:labfleet-test-${name}`;
  return {
    AWS_REGION: FAKE_REGION,
    [CLOUD_ENV.table]: table,
    [CLOUD_ENV.stage]: STAGE,
    [CLOUD_ENV.upStateMachineArn]: arn("up"),
    [CLOUD_ENV.teardownStateMachineArn]: arn("teardown"),
    [CLOUD_ENV.hostInstanceProfileArn]: PROFILE,
    [CLOUD_ENV.scheduleGroup]: GROUP,
    [CLOUD_ENV.schedulerRoleArn]: SCHEDULER_ROLE,
    [CLOUD_ENV.scheduleTargetArn]: TARGET,
    SST_RESOURCE_AccessKey: JSON.stringify({ value: randomBytes(32).toString("base64") }),
    SST_RESOURCE_SshPrivateKey: JSON.stringify({ value: "not-set" }),
  };
}

/** Polls the run until its workflow has ended (the run record is final a few steps before the ASL ends). */
async function runToEnd(runId: string, what: string) {
  return waitFor(
    what,
    async () => {
      if (executor.running.includes(runId)) return undefined;
      const { run } = await j(await get(`/${W}/runs/${runId}`));
      return run.state === "running" ? undefined : run;
    },
    40_000,
  );
}

/** The host's instance, its filesystem root and home. */
const host = (hostId: string): FakeInstance => aws.instanceOf(W, hostId);
const epochOf = (iso: string) => Math.floor(Date.parse(iso) / 1000);

beforeAll(async () => {
  work = tempDir("labfleet-cloud-path-");
  // A safety net under the mocks: a client nobody mocked would fail here, on this machine, never reach AWS.
  savedEnv = { ...process.env };
  Object.assign(process.env, { AWS_ENDPOINT_URL: "http://127.0.0.1:9", AWS_EC2_METADATA_DISABLED: "true" });
  aws = await FakeAws.start({ dir: join(work, "aws") });
  // The operator stored the lab's secret in Parameter Store, where the cloud's secret store reads it.
  aws.putParameter(`/labfleet/${STAGE}/secrets/DB_TOKEN`, SECRET);
  // Instances that are not this workshop's: another workshop's host of the same id, and someone else's.
  aws.addInstance({
    InstanceId: "i-0f0e0d0c0b0a09080",
    State: { Code: 16, Name: "running" },
    Tags: [
      { Key: "ManagedBy", Value: "labfleet" },
      { Key: "labfleet-workshop", Value: "other-workshop" },
      { Key: "labfleet-host-id", Value: "student-01" },
      { Key: "labfleet-expiry", Value: "2030-01-01T00:00:00.000Z" },
    ],
  });
  aws.addInstance({
    InstanceId: "i-0123401234012340a",
    State: { Code: 16, Name: "running" },
    Tags: [{ Key: "Name", Value: "someone-elses-server" }],
  });

  const table = uniqueTable();
  ddb = localClient(inject("dynamoEndpoint"));
  await ensureTable(ddb, table);
  const deps = cloudDeps(cloudEnv(table), {
    clients: {
      dynamodb: ddb,
      ec2: new EC2Client({ region: FAKE_REGION, credentials }),
      ssm: new SSMClient({ region: FAKE_REGION, credentials }),
      sfn: new SFNClient({ region: FAKE_REGION, credentials }),
      scheduler: new SchedulerClient({ region: FAKE_REGION, credentials }),
    },
  });
  executor = new LocalExecutor({ waitMs: 100, retryMs: 100 });
  // The cloud's adapters, with the same ASL run in-process instead of by Step Functions. The cloud takes git
  // lab sources only (a Lambda cannot read the operator's folders); here the lab is a local fixture folder,
  // which this test process can read, so that check is the one thing turned off (it has its own test below).
  expect(deps.gitSourcesOnly).toBe(true);
  configure({ ...deps, workflows: executor, gitSourcesOnly: false });
  setLogSink((line) => lines.push(line), "info");
});

afterAll(async () => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  await executor?.close();
  await aws?.close();
  ddb?.destroy();
  process.env = savedEnv;
  if (work) removeDir(work);
});

describe("the cloud path: EC2 hosts reached through SSM, on the cloud adapters", () => {
  it("composes the cloud runtime: EC2, SSM, the EventBridge mirror and the Parameter Store secret writer", () => {
    const deps = useDeps();
    expect(deps.providers.aws).toBeInstanceOf(AwsProvider);
    expect(deps.scheduleMirror).toBeInstanceOf(EventBridgeScheduleMirror);
    expect(deps.secretParameters).toBeInstanceOf(SsmSecretParameters);
    expect(deps.workflows).toBe(executor);
  });

  it("refuses a local lab folder as the cloud would, naming lab.source", async () => {
    const deps = useDeps();
    configure({ ...deps, gitSourcesOnly: true });
    try {
      const res = await post("/plan", { yaml: YAML });
      expect(res.status).toBe(400);
      const body = await j(res);
      expect(body.error.details.map((d: { path: string }) => d.path)).toEqual(["lab.source"]);
      expect(body.error.details[0].message).toMatch(
        /^expected a "git:" URL: this control plane runs in the cloud/,
      );
    } finally {
      configure(deps);
    }
  });

  it("plans two new m7i.large hosts within the vCPU quota, then stores the workshop", async () => {
    const res = await post("/plan", { yaml: YAML });
    expect(res.status).toBe(200);
    const plan = await j(res);
    expect(plan.provider).toBe("aws");
    expect(plan.items.map((i: { hostId: string; action: string }) => [i.hostId, i.action])).toEqual([
      ["student-01", "create"],
      ["student-02", "create"],
    ]);
    // The two instances already in the account count against the quota: 2 vCPUs each. (labfleet's price
    // table has no eu-west-1 prices: it says so rather than guess.)
    expect(plan.items[0].detail).toMatch(
      /^m7i\.large, expires \S+, cost unknown; vCPU quota L-1216C47A: 4 needed \+ 4 in use of 256, fits$/,
    );
    expect(aws.inputs(aws.ec2, RunInstancesCommand)).toEqual([]);

    expect((await post("", { yaml: YAML })).status).toBe(201);
  });

  let upRun: string;
  let groupId: string;

  it("up launches tagged instances into labfleet's group, boots them, and starts the lab over SSM", async () => {
    const res = await post(`/${W}/up`);
    expect(res.status).toBe(202);
    upRun = (await j(res)).run.id;
    // The lab waits at its gate until the test opens it: both hosts are then deploying, phase "gate".
    const hosts = await waitFor(
      "both labs at their gate",
      async () => {
        const s = await j(await get(`/${W}`));
        const ok =
          s.hostList.length === 2 &&
          s.hostList.every(
            (h: { state: string; phase: string }) => h.state === "deploying" && h.phase === "gate",
          );
        return ok ? s.hostList : undefined;
      },
      30_000,
    );

    // Labfleet's security group, in the subnet's VPC: SSH and the lab UI from the operator only.
    expect(aws.groups).toHaveLength(1);
    const group = aws.groups[0];
    groupId = group?.GroupId as string;
    expect(group?.GroupName).toBe(`labfleet-${W}`);
    expect(group?.Tags).toEqual(
      expect.arrayContaining([
        { Key: "ManagedBy", Value: "labfleet" },
        { Key: "labfleet-workshop", Value: W },
      ]),
    );
    expect(group?.rules.map((r) => `${r.protocol}/${r.from}-${r.to} ${r.source}`).sort()).toEqual([
      `tcp/22-22 ${OPERATOR}`,
      `tcp/8443-8443 ${OPERATOR}`,
    ]);

    // One RunInstances per host: the newest Ubuntu image, the group, the instance profile, the ownership tags.
    const launches = aws.inputs<RunInstancesCommandInput>(aws.ec2, RunInstancesCommand);
    expect(launches).toHaveLength(2);
    for (const [i, hostId] of ["student-01", "student-02"].entries()) {
      const inst = host(hostId);
      expect(inst.launch).toMatchObject({
        ImageId: "ami-0ccccccccccccccc3",
        InstanceType: "m7i.large",
        SubnetId: FAKE_SUBNET,
        SecurityGroupIds: [groupId],
        IamInstanceProfile: { Arn: PROFILE },
        MetadataOptions: { HttpTokens: "required", HttpEndpoint: "enabled" },
        InstanceInitiatedShutdownBehavior: "terminate",
      });
      const expiry = inst.instance.Tags?.find((t) => t.Key === "labfleet-expiry")?.Value as string;
      // The provider computes its own expiry (now + ttl_hours, whole seconds), close to the workshop's.
      expect(Math.abs(Date.parse(expiry) - Date.parse(hosts[i].expiry))).toBeLessThan(5_000);
      for (const spec of inst.launch?.TagSpecifications ?? []) {
        expect(spec.Tags).toEqual([
          { Key: "ManagedBy", Value: "labfleet" },
          { Key: "labfleet-workshop", Value: W },
          { Key: "labfleet-host-id", Value: hostId },
          { Key: "labfleet-expiry", Value: expiry },
          { Key: "Name", Value: `labfleet-${W}-${hostId}` },
        ]);
      }
      expect(inst.launch?.TagSpecifications?.map((s) => s.ResourceType)).toEqual(["instance", "volume"]);
      // The host record points at the instance; SSM is how it is reached.
      expect(hosts[i]).toMatchObject({ id: hostId, address: inst.id, providerId: inst.id });

      // cloud-init ran the dead-man switch: the deadline file at the expiry, the power-off armed for 4 h.
      expect(inst.boot).toEqual({ code: 0, output: "" });
      expect(readFileSync(join(inst.root, "etc/labfleet/deadline"), "utf8")).toBe(`${epochOf(expiry)}\n`);
      // Whole minutes from launch to the workshop's recorded expiry, never later: 240, or 239 when the
      // launch came a moment after the expiry was recorded.
      const [shutdownLine, ...armed] = aws.powerLog(inst.id);
      expect(shutdownLine).toMatch(/^shutdown -P \+(239|240) labfleet: the workshop's time is up$/);
      expect(armed).toEqual(["systemctl daemon-reload", "systemctl enable --now labfleet-deadman.timer"]);

      // The lab source arrived over SSM (a local folder, sent as a tar on stdin) and setup started detached.
      expect(readFileSync(join(inst.home, "lab/setup.sh"), "utf8")).toBe(
        readFileSync(join(fixturesDir, "labs/quick/setup.sh"), "utf8"),
      );
      // The operator secret: fetched on the instance with its role, written 0600, read by the lab.
      const secrets = join(inst.home, ".labfleet", W, "secrets.env");
      expect(statSync(secrets).mode & 0o777).toBe(0o600);
      expect(readFileSync(secrets, "utf8")).toBe(secretsFile({ DB_TOKEN: SECRET }));
      expect(readFileSync(join(inst.home, "lab/seen-secret"), "utf8")).toBe(SECRET);
    }

    // The secret went through one SecureString parameter, written once for the run (BeginUp, before any
    // host), fetched by each instance: one PutParameter for the two hosts, none from their deploys.
    const written = expect.objectContaining({
      Name: SECRETS_PARAMETER,
      Type: "SecureString",
      Value: JSON.stringify({ DB_TOKEN: SECRET }),
      Overwrite: true,
    });
    expect(aws.inputs<PutParameterCommandInput>(aws.ssm, PutParameterCommand)).toEqual([written]);
    expect(aws.cliCalls.map((c) => [c.instanceId, c.code, c.args.join(" ")]).sort()).toEqual(
      [host("student-01").id, host("student-02").id]
        .sort()
        .map((id) => [
          id,
          0,
          `ssm get-parameter --name ${SECRETS_PARAMETER} --with-decryption --region ${FAKE_REGION} --query Parameter.Value --output json`,
        ]),
    );

    // The TTL teardown is mirrored to EventBridge Scheduler, at the workshop's expiry.
    const status = await j(await get(`/${W}`));
    const created = aws.inputs<CreateScheduleCommandInput>(aws.scheduler, CreateScheduleCommand);
    expect(created).toHaveLength(1);
    expect(created[0]).toMatchObject({
      Name: `labfleet-teardown-${W}`,
      GroupName: GROUP,
      ScheduleExpression: `at(${new Date(Math.ceil(Date.parse(status.expiry) / 1000) * 1000).toISOString().slice(0, 19)})`,
      ActionAfterCompletion: "DELETE",
      Target: { Arn: TARGET, RoleArn: SCHEDULER_ROLE },
    });

    // Every command ran through the SSM wrapper, in the home it exports, on one instance of this workshop.
    const sent = aws.inputs<SendCommandCommandInput>(aws.ssm, SendCommandCommand);
    const ours = new Set([host("student-01").id, host("student-02").id]);
    for (const input of sent) {
      expect(input.DocumentName).toBe("AWS-RunShellScript");
      expect(ours.has(input.InstanceIds?.[0] as string)).toBe(true);
      expect(input.Parameters?.commands?.[0]).toContain("export HOME='/root'\n");
      expect(input.Comment).toMatch(new RegExp(`^labfleet ${W} student-0[12]: `));
    }
    expect(sent.map((s) => s.Comment)).toEqual(
      expect.arrayContaining([
        `labfleet ${W} student-01: fetch operator secrets`,
        `labfleet ${W} student-01: sync lab source`,
        `labfleet ${W} student-01: start lab setup`,
      ]),
    );
  });

  it("open-access is refused while the labs are not ready", async () => {
    const res = await post(`/${W}/open-access`, {});
    expect(res.status).toBe(409);
    const { error } = await j(res);
    expect(error.code).toBe("open_access.not_ready");
    expect(error.message).toBe(
      `not opening the lab UIs of ${W}: 2 of 2 hosts are not ready (their health check has not passed): student-01 (deploying, phase gate), student-02 (deploying, phase gate)`,
    );
    expect(aws.groups[0]?.rules.some((r) => r.source === "0.0.0.0/0" || r.source === "::/0")).toBe(false);
  });

  it("the labs finish: every host ready, the run succeeds, the secrets parameter is gone", async () => {
    for (const hostId of ["student-01", "student-02"])
      writeFileSync(join(host(hostId).home, "release-gate"), "");
    const run = await runToEnd(upRun, "the up run to end");
    expect(run.state).toBe("succeeded");
    expect(run.hosts).toEqual({ "student-01": { state: "ready" }, "student-02": { state: "ready" } });

    const s = await j(await get(`/${W}`));
    expect(s.state).toBe("ready");
    const done = (name: string) => ({ name, state: "done" });
    for (const h of s.hostList) {
      expect(h).toMatchObject({ state: "ready", error: null, hasAccess: true });
      expect(h.phases).toEqual([done("gate"), done("fetch"), done("build"), done("verify")]);
    }
    // Every host fetched it by the end of the run: the parameter is deleted with it.
    expect(aws.inputs<DeleteParameterCommandInput>(aws.ssm, DeleteParameterCommand)).toEqual([
      { Name: SECRETS_PARAMETER },
    ]);
    expect(aws.parameters.has(SECRETS_PARAMETER)).toBe(false);
    expect(JSON.stringify(s)).not.toContain(SECRET);
  });

  it("status refresh reads every lab again through SSM", async () => {
    const before = aws.inputs(aws.ssm, SendCommandCommand).length;
    const res = await post(`/${W}/refresh`, {});
    expect(res.status).toBe(200);
    const { hosts } = await j(res);
    expect(hosts.map((h: { id: string; state: string; phase: string }) => [h.id, h.state, h.phase])).toEqual([
      ["student-01", "ready", "verify"],
      ["student-02", "ready", "verify"],
    ]);
    // Probe, health check and access file, on each instance.
    const sent = aws.inputs<SendCommandCommandInput>(aws.ssm, SendCommandCommand).slice(before);
    const perInstance = new Map<string, number>();
    for (const s of sent) {
      const id = s.InstanceIds?.[0] as string;
      perInstance.set(id, (perInstance.get(id) ?? 0) + 1);
    }
    expect(Object.fromEntries(perInstance)).toEqual({
      [host("student-01").id]: 3,
      [host("student-02").id]: 3,
    });
  });

  it("doctor checks each instance through SSM, where commands run as root", async () => {
    const res = await post(`/${W}/doctor`, {});
    expect(res.status).toBe(200);
    const body = await j(res);
    expect(body.ok).toBe(true);
    for (const [i, hostId] of ["student-01", "student-02"].entries()) {
      const report = body.reports[i];
      expect(report.host).toBe(hostId);
      expect(report.facts).toMatchObject({
        user: "root",
        uid: "0",
        sudo: "root",
        "cmd:bash": "yes",
        "cmd:setsid": "yes",
      });
      expect(report.checks.map((c: { name: string; ok: boolean }) => [c.name, c.ok])).toEqual([
        ["reachable", true],
        ["sudo", true],
        ["os", true],
        ["command:bash", true],
        ["command:tar", true],
        ["command:setsid", true],
      ]);
    }
  });

  it("the access sheet: each host's public address and lab UI; the lab's credentials for the instructor", async () => {
    const sheet = await j(await get(`/${W}/access`));
    const row = (hostId: string) => {
      const ip = host(hostId).instance.PublicIpAddress as string;
      expect(ip).toMatch(/^203\.0\.113\.\d+$/);
      return {
        host: hostId,
        state: "ready",
        address: ip,
        urls: { ui: `https://${ip}:8443/` },
        credentials: true,
      };
    };
    expect(sheet).toEqual({ columns: ["ui"], rows: [row("student-01"), row("student-02")] });
    const { access } = await j(await get(`/${W}/hosts/student-02/access`));
    expect(access).toEqual({
      urls: { ui: "https://student-02.example.test/" },
      credentials: { password: "s3cret-student-02" },
    });
  });

  it("diagnose collects each lab's log through SSM, with the secret and the credentials redacted", async () => {
    const res = await post(`/${W}/diagnose`, { allSelected: true });
    expect(res.status).toBe(200);
    const folder = res.headers.get("x-labfleet-diagnose-name") ?? "";
    expect(folder).toMatch(new RegExp(`^${W}\\.diagnose-\\d{8}T\\d{6}Z$`));
    const tar = gunzipSync(Buffer.from(await res.arrayBuffer()));
    const out = join(work, "diagnose");
    execFileSync("mkdir", ["-p", out]);
    writeFileSync(join(out, "d.tar"), tar);
    execFileSync("tar", ["-xf", join(out, "d.tar"), "-C", out]);
    const read = (p: string) => readFileSync(join(out, folder, p), "utf8");
    expect(JSON.parse(read("index.json")).hosts.map((h: { id: string }) => h.id)).toEqual([
      "student-01",
      "student-02",
    ]);
    for (const hostId of ["student-01", "student-02"]) {
      const summary = JSON.parse(read(`${hostId}/summary.json`));
      expect(summary).toMatchObject({ host: hostId, state: "ready", verdict: "complete", exitCode: 0 });
      for (const file of ["lab.log.tail", "status.jsonl", "wrapper.txt", "setup.sh"]) {
        expect(summary.collected[file]).toMatchObject({ complete: true });
      }
      const log = read(`${hostId}/lab.log.tail`);
      expect(log).toContain(`quick lab built on ${hostId}`);
      expect(log).toContain("using token [redacted]");
      expect(read(`${hostId}/status.jsonl`)).toContain('{"phase":"verify","state":"done"}');
      expect(read(`${hostId}/wrapper.txt`)).toContain("labfleet lab wrapper");
      expect(read(`${hostId}/setup.sh`)).toContain("release-gate");
    }
    const everything = tar.toString("utf8");
    expect(everything).not.toContain(SECRET);
    expect(everything).not.toContain("s3cret-student-0");
  });

  it("a long output comes back as its end within SSM's limits, the rest kept on the instance", async () => {
    const inst = host("student-01");
    const t = useDeps().transport({ workshop: W, hostId: "student-01", address: inst.id, transport: "ssm" });
    const r = await t.exec("head -c 30000 /dev/zero | tr '\\0' o; head -c 9000 /dev/zero | tr '\\0' e >&2", {
      step: "long output",
    });
    expect(r.exitCode).toBe(0);
    expect(r.truncated).toBe(true);
    expect(r.stdout).toBe("o".repeat(20_000));
    const note =
      /^\[labfleet: the output was cut to its end \(30000 bytes of stdout, 9000 of stderr\); the full output is on the host in (\S+)\/out and \S+\/err\]\n/.exec(
        r.stderr,
      );
    expect(note).not.toBeNull();
    expect(r.stderr.slice(note?.[0].length)).toBe("e".repeat(7_000));
    // The folder the note names is the instance's own (its /root/.labfleet/ssm), with the whole output.
    const kept = readdirSync(join(inst.home, ".labfleet/ssm"));
    expect(kept).toHaveLength(1);
    expect(note?.[1]).toBe(join(inst.home, ".labfleet/ssm", kept[0] as string));
    expect(statSync(join(inst.home, ".labfleet/ssm", kept[0] as string, "out")).size).toBe(30_000);
  });

  it("open-access opens the lab UI port to the world, never 22, once every lab is ready", async () => {
    const res = await post(`/${W}/open-access`, {});
    expect(res.status).toBe(200);
    expect(await j(res)).toEqual({
      workshop: W,
      open: true,
      mode: "managed",
      changed: true,
      groupIds: [groupId],
      ports: [8443],
      message: `opened TCP 8443 to 0.0.0.0/0 and ::/0 in ${groupId}`,
    });
    const rules = () => aws.groups[0]?.rules.map((r) => `${r.protocol}/${r.from}-${r.to} ${r.source}`).sort();
    expect(rules()).toEqual([
      `tcp/22-22 ${OPERATOR}`,
      "tcp/8443-8443 0.0.0.0/0",
      `tcp/8443-8443 ${OPERATOR}`,
      "tcp/8443-8443 ::/0",
    ]);
    // Opening again changes nothing; closing takes the world rules away, and only them.
    expect((await j(await post(`/${W}/open-access`, {}))).changed).toBe(false);
    const closed = await j(await post(`/${W}/open-access`, { close: true }));
    expect(closed).toMatchObject({
      open: false,
      changed: true,
      message: `closed TCP 8443 to 0.0.0.0/0 and ::/0 in ${groupId}`,
    });
    expect(rules()).toEqual([`tcp/22-22 ${OPERATOR}`, `tcp/8443-8443 ${OPERATOR}`]);
  });

  it("extend moves the EventBridge schedule, the EC2 expiry tags and each instance's dead-man switch", async () => {
    const previous = (await j(await get(`/${W}`))).expiry as string;
    const logged = (id: string) => aws.powerLog(id).length;
    const before = new Map([host("student-01").id, host("student-02").id].map((id) => [id, logged(id)]));
    const res = await post(`/${W}/extend`, { hours: 2 });
    expect(res.status).toBe(200);
    const r = await j(res);
    const to = new Date(Math.floor((Date.parse(previous) + 2 * HOUR) / 1000) * 1000);
    const epoch = to.getTime() / 1000;
    expect(r).toMatchObject({
      workshop: W,
      hours: 2,
      previousExpiry: previous,
      expiry: to.toISOString(),
      schedule: { result: "moved" },
      provider: { result: "moved" },
      ok: true,
    });
    expect(r.hosts.map((h: { hostId: string; result: string }) => [h.hostId, h.result])).toEqual([
      ["student-01", "moved"],
      ["student-02", "moved"],
    ]);

    // EventBridge: the schedule exists, so it is moved with UpdateSchedule.
    const updates = aws.inputs<UpdateScheduleCommandInput>(aws.scheduler, UpdateScheduleCommand);
    expect(updates).toHaveLength(1);
    expect(updates[0]).toMatchObject({
      Name: `labfleet-teardown-${W}`,
      GroupName: GROUP,
      ScheduleExpression: `at(${to.toISOString().slice(0, 19)})`,
      Target: { Arn: TARGET, RoleArn: SCHEDULER_ROLE },
    });
    expect(aws.schedules.get(SCHEDULE)?.ScheduleExpression).toBe(`at(${to.toISOString().slice(0, 19)})`);

    // EC2: the expiry tag of this workshop's instances only (the sweeper reads it).
    const tagged = aws.inputs<CreateTagsCommandInput>(aws.ec2, CreateTagsCommand);
    expect(tagged).toHaveLength(1);
    expect([...(tagged[0]?.Resources ?? [])].sort()).toEqual(
      [host("student-01").id, host("student-02").id].sort(),
    );
    expect(tagged[0]?.Tags).toEqual([{ Key: "labfleet-expiry", Value: to.toISOString() }]);
    const expiryTag = (i: FakeInstance) => i.instance.Tags?.find((t) => t.Key === "labfleet-expiry")?.Value;
    expect(expiryTag(host("student-01"))).toBe(to.toISOString());
    expect(expiryTag(aws.instances.get("i-0f0e0d0c0b0a09080") as FakeInstance)).toBe(
      "2030-01-01T00:00:00.000Z",
    );

    // On each instance: the deadline the timer reads, the fallback baked in its script, the pending power-off.
    for (const hostId of ["student-01", "student-02"]) {
      const inst = host(hostId);
      expect(readFileSync(join(inst.root, "etc/labfleet/deadline"), "utf8")).toBe(`${epoch}\n`);
      const deadman = readFileSync(join(inst.root, "usr/local/sbin/labfleet-deadman"), "utf8");
      expect(deadman.match(/d=\d+ ;;/g)).toEqual([`d=${epoch} ;;`]);
      const calls = aws.powerLog(inst.id).slice(before.get(inst.id));
      expect(calls[0]).toBe("shutdown -c labfleet: the workshop was extended");
      const minutes = Number(
        /^shutdown -P \+(\d+) labfleet: the workshop's time is up$/.exec(calls[1] ?? "")?.[1],
      );
      expect(Math.abs(minutes - Math.floor((epoch * 1000 - Date.now()) / 60_000))).toBeLessThanOrEqual(1);
      expect(calls).toHaveLength(2);
    }
    const s = await j(await get(`/${W}`));
    expect(s.expiry).toBe(to.toISOString());
    expect(s.hostList.map((h: { expiry: string }) => h.expiry)).toEqual([to.toISOString(), to.toISOString()]);
  });

  it("teardown terminates only this workshop's instances and deletes its schedule, group and host records", async () => {
    const res = await post(`/${W}/teardown`);
    expect(res.status).toBe(202);
    const run = await runToEnd((await j(res)).run.id, "the teardown run to end");
    const [one, two] = [host("student-01").id, host("student-02").id];
    expect(run.state).toBe("succeeded");
    expect(run.hosts["student-01"]).toMatchObject({ state: "destroyed" });
    expect(run.hosts["student-02"]).toMatchObject({ state: "destroyed" });

    const terminated = aws
      .inputs<TerminateInstancesCommandInput>(aws.ec2, TerminateInstancesCommand)
      .flatMap((t) => t.InstanceIds ?? []);
    expect(terminated.sort()).toEqual([one, two].sort());
    const state = (id: string) => aws.instances.get(id)?.instance.State?.Name;
    expect(state("i-0f0e0d0c0b0a09080")).toBe("running");
    expect(state("i-0123401234012340a")).toBe("running");

    expect(aws.inputs<DeleteScheduleCommandInput>(aws.scheduler, DeleteScheduleCommand)).toEqual([
      { Name: `labfleet-teardown-${W}`, GroupName: GROUP },
    ]);
    expect(aws.schedules.size).toBe(0);
    expect(aws.groups).toEqual([]);

    const s = await j(await get(`/${W}`));
    expect(s.state).toBe("torn_down");
    expect(s.hostList).toEqual([]);
    expect(s.expiry).toBeUndefined();
    // Nothing of the labs runs any more on the (terminated) instances.
    await waitFor("the instances' processes to end", () => aws.processesOf().length === 0, 10_000);
  });

  it("the operator secret reached the labs but no SSM command, log line or record", async () => {
    const sent = aws.inputs<SendCommandCommandInput>(aws.ssm, SendCommandCommand);
    expect(sent.length).toBeGreaterThan(20);
    for (const input of sent) {
      expect(JSON.stringify(input)).not.toContain(SECRET);
      // Nor inside what travelled on stdin (base64 in the script).
      for (const block of stdinOf(input.Parameters?.commands?.[0] ?? "")) expect(block).not.toContain(SECRET);
    }
    expect(sent.some((s) => stdinOf(s.Parameters?.commands?.[0] ?? "").length > 0)).toBe(true);
    expect(lines.length).toBeGreaterThan(0);
    expect(lines.join("\n")).not.toContain(SECRET);
    expect(JSON.stringify(await j(await get(`/${W}`)))).not.toContain(SECRET);
  });

  it("every AWS call went to the fake account; none went to Step Functions", () => {
    expect(aws.unhandled()).toEqual([]);
    expect(aws.sfn.calls()).toHaveLength(0);
    for (const stub of [aws.ec2, aws.ssm, aws.quotas, aws.scheduler])
      expect(stub.calls().length).toBeGreaterThan(0);
  });
});
