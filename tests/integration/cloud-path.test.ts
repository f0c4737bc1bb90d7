import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import type {
  CreateTagsCommandInput,
  RunInstancesCommandInput,
  TerminateInstancesCommandInput,
} from "@aws-sdk/client-ec2";
import type { CreateScheduleCommandInput, UpdateScheduleCommandInput } from "@aws-sdk/client-scheduler";
import type { PutParameterCommandInput, SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FUNCTIONS } from "../../infra/permissions.ts";
import { secretsFile } from "../../shared/fleet/secrets.ts";
import { awsWorkshopYaml, type Cloud, OPERATOR_CIDR, startCloud } from "../harness/aws/cloud.ts";
import { FAKE_ACCOUNT_ID, FAKE_REGION } from "../harness/aws/core.ts";
import type { FakeInstance } from "../harness/aws/ec2.ts";
import { stdinOf } from "../harness/aws/ssm.ts";
import { tempDir, waitFor } from "../harness/runtime.ts";

/**
 * The cloud path end to end, as it runs in AWS: the Lambda bundles built as SST builds them, each function in
 * Lambda sandboxes with the environment, secrets, timeout and memory sst.config.ts gives it, the state machines
 * run by Step Functions (with its limits) invoking them, EventBridge Scheduler firing the TTL, the table's stream
 * feeding the event forwarder, and every AWS call each function makes evaluated against that function's IAM
 * policy (tests/harness/aws/). EC2 instances are folders on this machine, whose user data and SSM commands run for
 * real. The instructor talks to the Api function's URL, as the CLI does. One workshop goes through plan, up,
 * status, doctor, access, diagnose, open-access, extend and its TTL teardown, in that order.
 */

const W = "cloud-path";
const STAGE = "test";
const SECRETS_PARAMETER = `/labfleet/${STAGE}/workshops/${W}/secrets`;
/** The operator's secret: quotes, a dollar and a space, so every layer's quoting is exercised. */
const SECRET = `o'Brien $ecret ${randomBytes(6).toString("hex")}`;
const HOUR = 3_600_000;

let cloud: Cloud;
let yaml: string;
const epochOf = (iso: string) => Math.floor(Date.parse(iso) / 1000);
const host = (hostId: string): FakeInstance => cloud.account.ec2.instanceOf(W, hostId);

beforeAll(async () => {
  cloud = await startCloud({ stage: STAGE });
  const aws = cloud.account;
  // The operator stored the lab's secret in Parameter Store, where the cloud's secret store reads it.
  aws.ssm.putParameter(`/labfleet/${STAGE}/secrets/DB_TOKEN`, SECRET);
  // Instances that are not this stage's workshop's: another stage's host of the same id, and someone else's.
  aws.ec2.addInstance({
    InstanceId: "i-0f0e0d0c0b0a09080",
    State: { Code: 16, Name: "running" },
    Tags: [
      { Key: "ManagedBy", Value: "labfleet" },
      { Key: "labfleet-stage", Value: "other" },
      { Key: "labfleet-workshop", Value: W },
      { Key: "labfleet-host-id", Value: "student-01" },
      { Key: "labfleet-expiry", Value: "2020-01-01T00:00:00.000Z" },
    ],
  });
  aws.ec2.addInstance({
    InstanceId: "i-0123401234012340a",
    State: { Code: 16, Name: "running" },
    Tags: [{ Key: "Name", Value: "someone-elses-server" }],
  });
  yaml = awsWorkshopYaml({
    name: W,
    source: cloud.lab("quick"),
    setup: `. "$LABFLEET_SECRETS"
printf '%s' "$DB_TOKEN" > seen-secret
echo "using token $DB_TOKEN"
echo '{"phase":"gate","state":"running"}' >> "$LABFLEET_STATUS"
while [ ! -e "$HOME/release-gate" ]; do sleep 0.1; done
echo '{"phase":"gate","state":"done"}' >> "$LABFLEET_STATUS"
bash setup.sh`,
    extraLab: `ref: v1
concurrency: 2
operator_secrets: [DB_TOKEN]
ui_ports:
  - { name: ui, port: 8443 }`,
  });
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

describe("the cloud path on the AWS double: bundled functions, IAM on every call, AWS's limits", {
  timeout: 240_000,
}, () => {
  it("refuses a local lab folder as the cloud does, naming lab.source", async () => {
    const res = await cloud.api("/plan", {
      yaml: yaml.replace(cloud.lab("quick"), "./lab").replace("  ref: v1\n", ""),
    });
    expect(res.status).toBe(400);
    expect(res.body.error.details.map((d: { path: string }) => d.path)).toEqual(["lab.source"]);
  });

  it("plans two new m7i.large hosts within the vCPU quota, then stores the workshop", async () => {
    const res = await cloud.api("/plan", { yaml });
    expect(res.status).toBe(200);
    expect(res.body.items.map((i: { hostId: string; action: string }) => [i.hostId, i.action])).toEqual([
      ["student-01", "create"],
      ["student-02", "create"],
    ]);
    expect(res.body.items[0].detail).toMatch(
      /^m7i\.large, expires \S+, cost unknown; vCPU quota L-1216C47A: 4 needed/,
    );
    expect(cloud.account.server.inputs("ec2", "RunInstances")).toEqual([]);
    expect((await cloud.api("", { yaml })).status).toBe(201);
  });

  let upRun: string;
  let groupId: string;

  it("up launches this stage's tagged instances, waits for cloud-init, and starts the lab over SSM", async () => {
    const aws = cloud.account;
    const res = await cloud.api(`/${W}/up`, {});
    expect(res.status).toBe(202);
    upRun = res.body.run.id;
    const hosts = await waitFor(
      "both labs at their gate",
      async () => {
        const s = (await cloud.api(`/${W}`)).body;
        const ok =
          s.hostList?.length === 2 &&
          s.hostList.every(
            (h: { state: string; phase: string }) => h.state === "deploying" && h.phase === "gate",
          );
        return ok ? s.hostList : undefined;
      },
      60_000,
    );

    // The stage's managed security group, in the subnet's VPC: SSH and the lab UI from the operator only.
    const groups = aws.ec2.groups.filter((g) =>
      g.Tags.some((t) => t.Key === "labfleet-stage" && t.Value === STAGE),
    );
    expect(groups).toHaveLength(1);
    groupId = groups[0]?.GroupId as string;
    expect(groups[0]?.GroupName).toBe(`labfleet.${STAGE}.${W}`);
    expect(groups[0]?.rules.map((r) => `${r.protocol}/${r.from}-${r.to} ${r.source}`).sort()).toEqual([
      `tcp/22-22 ${OPERATOR_CIDR}`,
      `tcp/8443-8443 ${OPERATOR_CIDR}`,
    ]);

    // One RunInstances per host, by Provision: the newest image, the group, the profile, the four ownership tags.
    const launches = aws.server.inputs<RunInstancesCommandInput>("ec2", "RunInstances", "Provision");
    expect(launches).toHaveLength(2);
    for (const [i, hostId] of ["student-01", "student-02"].entries()) {
      const inst = host(hostId);
      // Not the other stage's instance of the same workshop and host id.
      expect(inst.id).not.toBe("i-0f0e0d0c0b0a09080");
      expect(inst.launch).toMatchObject({
        InstanceType: "m7i.large",
        SecurityGroupIds: [groupId],
        IamInstanceProfile: {
          Arn: `arn:aws:iam::${FAKE_ACCOUNT_ID}:instance-profile/labfleet-${STAGE}-host`,
        },
        MetadataOptions: { HttpTokens: "required", HttpEndpoint: "enabled" },
        InstanceInitiatedShutdownBehavior: "terminate",
      });
      const expiry = inst.instance.Tags?.find((t) => t.Key === "labfleet-expiry")?.Value as string;
      expect(Math.abs(Date.parse(expiry) - Date.parse(hosts[i].expiry))).toBeLessThan(5_000);
      for (const spec of inst.launch?.TagSpecifications ?? []) {
        expect(spec.Tags).toEqual([
          { Key: "ManagedBy", Value: "labfleet" },
          { Key: "labfleet-stage", Value: STAGE },
          { Key: "labfleet-workshop", Value: W },
          { Key: "labfleet-host-id", Value: hostId },
          { Key: "labfleet-expiry", Value: expiry },
          { Key: "Name", Value: `labfleet-${STAGE}-${W}-${hostId}` },
        ]);
      }
      expect(hosts[i]).toMatchObject({ id: hostId, address: inst.id, providerId: inst.id });
      // cloud-init ran the dead-man switch: the deadline at the expiry, the power-off armed in whole minutes.
      expect(readFileSync(join(inst.root, "etc/labfleet/deadline"), "utf8")).toBe(`${epochOf(expiry)}\n`);
      const [shutdownLine] = aws.ec2.powerLog(inst.id);
      expect(shutdownLine).toMatch(/^shutdown -P \+(239|240) labfleet: the workshop's time is up$/);
      // The lab source was cloned from git at the ref, on the instance; setup started detached.
      expect(readFileSync(join(inst.home, "lab/setup.sh"), "utf8")).toContain("quick lab built on");
      // The operator secret: fetched on the instance with its role, written 0600, read by the lab.
      const secrets = join(inst.home, ".labfleet", W, "secrets.env");
      expect(statSync(secrets).mode & 0o777).toBe(0o600);
      expect(readFileSync(secrets, "utf8")).toBe(secretsFile({ DB_TOKEN: SECRET }));
      expect(readFileSync(join(inst.home, "lab/seen-secret"), "utf8")).toBe(SECRET);
    }

    // The secret went through one SecureString parameter, written once by BeginUp for the run.
    const written = aws.server.inputs<PutParameterCommandInput>("ssm", "PutParameter");
    expect(written).toEqual([
      expect.objectContaining({
        Name: SECRETS_PARAMETER,
        Type: "SecureString",
        Value: JSON.stringify({ DB_TOKEN: SECRET }),
      }),
    ]);
    expect(aws.server.calls.filter((c) => c.operation === "PutParameter").map((c) => c.principal)).toEqual([
      "BeginUp",
    ]);
    // Each host fetched it with the instance profile's role; no deploy read the secret store per host.
    expect(
      aws.server.calls
        .filter((c) => c.operation === "GetParameter" && c.outcome === "ok")
        .map((c) => c.principal),
    ).toEqual(["host", "host"]);
    expect(
      aws.server.calls.filter((c) => c.operation === "GetParameters").map((c) => c.principal),
    ).not.toContain("DeployHost");

    // The TTL teardown is an EventBridge Scheduler schedule at the workshop's expiry, invoking Sweep.
    const status = (await cloud.api(`/${W}`)).body;
    const created = aws.server.inputs<CreateScheduleCommandInput>("scheduler", "CreateSchedule");
    expect(created).toHaveLength(1);
    expect(created[0]).toMatchObject({
      Name: `labfleet-teardown-${W}`,
      GroupName: `labfleet-${STAGE}`,
      ScheduleExpression: `at(${new Date(Math.ceil(Date.parse(status.expiry) / 1000) * 1000).toISOString().slice(0, 19)})`,
      ActionAfterCompletion: "DELETE",
      Target: {
        Arn: `arn:aws:lambda:${FAKE_REGION}:${FAKE_ACCOUNT_ID}:function:labfleet-${STAGE}-sweep`,
        RoleArn: `arn:aws:iam::${FAKE_ACCOUNT_ID}:role/labfleet-${STAGE}-scheduler`,
      },
    });

    // Every command: the SSM wrapper, on this workshop's instances, named for its host (or, sent to both, for the
    // workshop: the polls' probes share one); the first deploy waited for cloud-init.
    const sent = aws.server.inputs<SendCommandCommandInput>("ssm", "SendCommand");
    const ours = new Set([host("student-01").id, host("student-02").id]);
    for (const input of sent) {
      expect(input.DocumentName).toBe("AWS-RunShellScript");
      for (const id of input.InstanceIds ?? []) expect(ours.has(id)).toBe(true);
      if ((input.InstanceIds?.length ?? 0) > 1) expect(input.Comment).toBe(`labfleet ${W}: probe lab`);
      else expect(input.Comment).toMatch(new RegExp(`^labfleet ${W} student-0[12]: `));
    }
    const steps = sent
      .filter((s) => s.InstanceIds?.length === 1 && s.InstanceIds[0] === host("student-01").id)
      .map((s) => s.Comment);
    expect(steps.indexOf(`labfleet ${W} student-01: wait for the first boot`)).toBeLessThan(
      steps.indexOf(`labfleet ${W} student-01: fetch operator secrets`),
    );
    // The host's SSH keys are read through SSM after the boot and before any secret goes to the host.
    const readKeys = steps.indexOf(`labfleet ${W} student-01: read the host's SSH keys`);
    expect(readKeys).toBeGreaterThan(steps.indexOf(`labfleet ${W} student-01: wait for the first boot`));
    expect(readKeys).toBeLessThan(steps.indexOf(`labfleet ${W} student-01: fetch operator secrets`));
  });

  it("open-access is refused while the labs are not ready", async () => {
    const res = await cloud.api(`/${W}/open-access`, {});
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe("open_access.not_ready");
  });

  it("the labs finish: every host ready, the run succeeds, the secrets parameter is gone", async () => {
    for (const hostId of ["student-01", "student-02"])
      writeFileSync(join(host(hostId).home, "release-gate"), "");
    const run = await cloud.runToEnd(W, upRun);
    expect(run.state).toBe("succeeded");
    expect(run.hosts).toEqual({ "student-01": { state: "ready" }, "student-02": { state: "ready" } });
    // FinishUp counted the execution's transitions from its history: all of them, its own included.
    const execution = [...cloud.account.sfn.executions.values()].find((e) => e.name === upRun);
    const billed = cloud.account.sfn.figures(execution?.executionArn as string).transitions;
    expect(run.transitions).toBeGreaterThan(10);
    expect(run.transitions).toBe(billed);
    const s = (await cloud.api(`/${W}`)).body;
    expect(s.state).toBe("ready");
    for (const h of s.hostList) expect(h).toMatchObject({ state: "ready", error: null, hasAccess: true });
    expect(cloud.account.server.inputs("ssm", "DeleteParameter")).toEqual([{ Name: SECRETS_PARAMETER }]);
    expect(cloud.account.ssm.parameters.has(SECRETS_PARAMETER)).toBe(false);
    expect(JSON.stringify(s)).not.toContain(SECRET);
  });

  it("status refresh, doctor and the access sheet read the instances through SSM", async () => {
    const refreshed = await cloud.api(`/${W}/refresh`, {});
    expect(refreshed.status).toBe(200);
    expect(refreshed.body.hosts.map((h: { id: string; state: string }) => [h.id, h.state])).toEqual([
      ["student-01", "ready"],
      ["student-02", "ready"],
    ]);
    const doctor = await cloud.api(`/${W}/doctor`, {});
    expect(doctor.body.ok).toBe(true);
    expect(doctor.body.reports[0].facts).toMatchObject({
      user: "root",
      "cmd:bash": "yes",
      "cmd:setsid": "yes",
    });
    const sheet = (await cloud.api(`/${W}/access`)).body;
    expect(sheet.rows.map((r: { host: string; urls: { ui: string } }) => [r.host, r.urls.ui])).toEqual(
      ["student-01", "student-02"].map((id) => [id, `https://${host(id).instance.PublicIpAddress}:8443/`]),
    );
    const { access } = (await cloud.api(`/${W}/hosts/student-02/access`)).body;
    expect(access).toEqual({
      urls: { ui: "https://student-02.example.test/" },
      credentials: { password: "s3cret-student-02" },
    });
  });

  it("diagnose collects each lab's log through SSM, the secret and the credentials redacted", async () => {
    const res = await cloud.api(`/${W}/diagnose`, { allSelected: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-labfleet-diagnose-next")).toBeNull();
    const folder = res.headers.get("x-labfleet-diagnose-name") ?? "";
    const tar = gunzipSync(res.body as Buffer);
    const out = tempDir("labfleet-diagnose-");
    writeFileSync(join(out, "d.tar"), tar);
    execFileSync("tar", ["-xf", join(out, "d.tar"), "-C", out]);
    for (const hostId of ["student-01", "student-02"]) {
      const summary = JSON.parse(readFileSync(join(out, folder, hostId, "summary.json"), "utf8"));
      expect(summary).toMatchObject({ host: hostId, state: "ready", verdict: "complete", exitCode: 0 });
      const log = readFileSync(join(out, folder, hostId, "lab.log.tail"), "utf8");
      expect(log).toContain(`quick lab built on ${hostId}`);
      expect(log).toContain("using token [redacted]");
    }
    expect(tar.toString("utf8")).not.toContain(SECRET);
    expect(tar.toString("utf8")).not.toContain("s3cret-student-0");
  });

  it("open-access opens the lab UI port to the world, never 22, once every lab is ready", async () => {
    const res = await cloud.api(`/${W}/open-access`, {});
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({
      open: true,
      mode: "managed",
      changed: true,
      groupIds: [groupId],
      ports: [8443],
    });
    const group = () => cloud.account.ec2.groups.find((g) => g.GroupId === groupId);
    const rules = () =>
      group()
        ?.rules.map((r) => `${r.protocol}/${r.from}-${r.to} ${r.source}`)
        .sort();
    expect(rules()).toEqual([
      `tcp/22-22 ${OPERATOR_CIDR}`,
      "tcp/8443-8443 0.0.0.0/0",
      `tcp/8443-8443 ${OPERATOR_CIDR}`,
      "tcp/8443-8443 ::/0",
    ]);
    expect((await cloud.api(`/${W}/open-access`, { close: true })).body).toMatchObject({
      open: false,
      changed: true,
    });
    expect(rules()).toEqual([`tcp/22-22 ${OPERATOR_CIDR}`, `tcp/8443-8443 ${OPERATOR_CIDR}`]);
  });

  it("extend moves the schedule, this stage's expiry tags and each instance's dead-man switch", async () => {
    const aws = cloud.account;
    const previous = (await cloud.api(`/${W}`)).body.expiry as string;
    const res = await cloud.api(`/${W}/extend`, { hours: 2 });
    expect(res.status).toBe(200);
    const to = new Date(Math.floor((Date.parse(previous) + 2 * HOUR) / 1000) * 1000);
    expect(res.body).toMatchObject({ expiry: to.toISOString(), schedule: { result: "moved" }, ok: true });
    const updates = aws.server.inputs<UpdateScheduleCommandInput>("scheduler", "UpdateSchedule");
    expect(updates.at(-1)?.ScheduleExpression).toBe(`at(${to.toISOString().slice(0, 19)})`);
    const tagged = aws.server.inputs<CreateTagsCommandInput>("ec2", "CreateTags", "Api");
    expect([...(tagged.at(-1)?.Resources ?? [])].sort()).toEqual(
      [host("student-01").id, host("student-02").id].sort(),
    );
    expect(aws.ec2.instances.get("i-0f0e0d0c0b0a09080")?.instance.Tags).toContainEqual({
      Key: "labfleet-expiry",
      Value: "2020-01-01T00:00:00.000Z",
    });
    for (const hostId of ["student-01", "student-02"]) {
      expect(readFileSync(join(host(hostId).root, "etc/labfleet/deadline"), "utf8")).toBe(
        `${to.getTime() / 1000}\n`,
      );
    }
  });

  it("the sweeper terminates nothing of another stage, even past its expiry", async () => {
    const aws = cloud.account;
    const out = await aws.lambda.invoke(
      aws.deployed.functionName("Sweep"),
      JSON.stringify({ source: "aws.scheduler" }),
    );
    expect(out.functionError).toBeUndefined();
    expect(aws.ec2.instances.get("i-0f0e0d0c0b0a09080")?.instance.State?.Name).toBe("running");
  });

  it("teardown terminates only this stage's workshop's instances, with its group, schedule and records", async () => {
    const aws = cloud.account;
    const res = await cloud.api(`/${W}/teardown`, {});
    expect(res.status).toBe(202);
    const run = await cloud.runToEnd(W, res.body.run.id);
    expect(run.state).toBe("succeeded");
    const terminated = aws.server
      .inputs<TerminateInstancesCommandInput>("ec2", "TerminateInstances", "Deprovision")
      .flatMap((t) => t.InstanceIds ?? []);
    expect(terminated.sort()).toEqual([host("student-01").id, host("student-02").id].sort());
    expect(aws.ec2.instances.get("i-0f0e0d0c0b0a09080")?.instance.State?.Name).toBe("running");
    expect(aws.ec2.instances.get("i-0123401234012340a")?.instance.State?.Name).toBe("running");
    // On EC2 the teardown terminates: it sends no command to stop each lab first.
    const stops = aws.server
      .inputs<SendCommandCommandInput>("ssm", "SendCommand", "Deprovision")
      .map((c) => c.Comment);
    expect(stops).toEqual([]);
    expect(aws.scheduler.schedules.size).toBe(0);
    const s = (await cloud.api(`/${W}`)).body;
    expect(s.state).toBe("torn_down");
    expect(s.hostList).toEqual([]);
    await waitFor(
      "the instances' processes to end",
      () => aws.ec2.processesOf(host("student-01").id).length === 0,
      10_000,
    );
    // EC2 refuses to delete a group its shutting-down instances hold: the teardown waited until they were gone.
    expect(aws.ec2.groups.filter((g) => g.GroupId === groupId)).toEqual([]);
  });

  it("workshop events reached the stage's bus through the table's stream and ForwardEvents", async () => {
    const aws = cloud.account;
    const events = await waitFor(
      "the teardown event on the bus",
      () => {
        const bus = aws.events.buses.get(`labfleet-${STAGE}-events`) ?? [];
        if (aws.streamErrors.length > 0) throw new Error(aws.streamErrors.join("\n"));
        return bus.some((e) => e["detail-type"] === "workshop.torn_down") ? bus : undefined;
      },
      60_000,
    );
    const types = events.map((e) => e["detail-type"]);
    expect(types).toEqual(
      expect.arrayContaining(["run.started", "host.ready", "run.finished", "workshop.torn_down"]),
    );
    expect(events.every((e) => e.source === "labfleet")).toBe(true);
    expect(JSON.stringify(events)).not.toContain(SECRET);
    expect(aws.streamErrors).toEqual([]);
  });

  it("the operator secret reached the labs but no SSM command, log line, event or record", async () => {
    const aws = cloud.account;
    const sent = aws.server.inputs<SendCommandCommandInput>("ssm", "SendCommand");
    expect(sent.length).toBeGreaterThan(20);
    for (const input of sent) {
      expect(JSON.stringify(input)).not.toContain(SECRET);
      for (const block of stdinOf(input.Parameters?.commands?.[0] ?? "")) expect(block).not.toContain(SECRET);
    }
    expect(aws.lambda.logs.length).toBeGreaterThan(0);
    expect(aws.lambda.logs.map((l) => l.line).join("\n")).not.toContain(SECRET);
  });

  it("every call was made by a deployed function, a host or a service, and IAM allowed every one", () => {
    const aws = cloud.account;
    const pairs = aws.actionPairs();
    // What each function did, for whoever reads the test log (and reviews a change to infra/permissions.ts).
    console.log(
      `AWS calls of the cloud path, by principal and action:\n${pairs
        .map(
          (p) =>
            `  ${p.principal.padEnd(18)} ${p.action.padEnd(40)} ${p.calls}${p.denied ? `  DENIED ${p.denied}` : ""}`,
        )
        .join("\n")}`,
    );
    expect(pairs.filter((p) => p.denied > 0)).toEqual([]);
    const principals = new Set(pairs.map((p) => p.principal));
    for (const fn of [
      "BeginUp",
      "Provision",
      "DeployHost",
      "Poll",
      "FinishUp",
      "Deprovision",
      "FinishTeardown",
      "Sweep",
      "Api",
    ]) {
      expect(principals, fn).toContain(fn);
      expect(Object.keys(FUNCTIONS)).toContain(fn);
    }
    expect(aws.server.unhandled).toEqual([]);
    expect(aws.server.failures).toEqual([]);
    expect(aws.events.targetFailures).toEqual([]);
    // Step Functions invoked only the task functions, each as the state machines' role.
    expect(pairs.filter((p) => p.principal === "states").map((p) => p.action)).toEqual([
      "lambda:InvokeFunction",
    ]);
  });

  it("no function came near its timeout, and Step Functions stayed far from its limits", () => {
    const aws = cloud.account;
    for (const inv of aws.lambda.invocations) {
      expect(inv.outcome, `${inv.functionName} ${inv.outcome}`).toBe("ok");
    }
    for (const e of aws.sfn.executions.values()) {
      const f = aws.sfn.figures(e.executionArn);
      expect(f.historyEvents).toBeLessThan(25_000);
    }
  });
});
