import { readdirSync } from "node:fs";
import { join } from "node:path";
import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";
import { arn } from "../harness/aws/core.ts";
import { waitFor } from "../harness/runtime.ts";

/**
 * What a real workshop would hit in AWS, each on the AWS double with the Lambda bundles (see
 * cloud-path.test.ts): reads of a host past SSM's output limits, lab refs in a Lambda without git, opening the
 * lab UIs from the workflow, a host a student powered off, another stage in the account, runs whose execution
 * ended outside their own steps, and deploys that start before cloud-init has installed what they need.
 */

let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud({
    // A fresh Ubuntu host: the AWS CLI the secrets fetch needs arrives with cloud-init, seconds after SSM is up.
    ec2: { awsCliInstallMs: 15_000 },
    // RecordHostFailure cannot finish in time: a host's failure is then not recorded by its Map item. Nor can
    // FailTeardown: a failed teardown's execution then fails past its own failure step.
    timeoutMs: { RecordHostFailure: 1, FailTeardown: 1 },
  });
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

async function up(name: string, yaml: string) {
  expect((await cloud.api("", { yaml })).status).toBe(201);
  const res = await cloud.api(`/${name}/up`, {});
  expect(res.status, JSON.stringify(res.body)).toBe(202);
  return cloud.runToEnd(name, res.body.run.id, 90_000);
}

describe("reads of a host fit SSM's output limits by construction", { timeout: 240_000 }, () => {
  it("a lab that writes 40 KB lines and 30 KB of access details is read right, never as a lab that never started", async () => {
    const W = "noisy";
    const run = await up(
      W,
      awsWorkshopYaml({
        name: W,
        source: cloud.lab("quick"),
        setup: `line=$(head -c 40000 /dev/zero | tr '\\0' x)
echo "{\\"phase\\":\\"noise\\",\\"state\\":\\"running\\",\\"pad\\":\\"$line\\"}" >> "$LABFLEET_STATUS"
for i in $(seq 1 400); do echo "{\\"phase\\":\\"step-$((i % 4))\\",\\"state\\":\\"running\\"}" >> "$LABFLEET_STATUS"; done
echo "$line"; echo "$line" >&2
notes=$(head -c 30000 /dev/zero | tr '\\0' n)
printf '{"urls":{"ui":"https://%s.example.test/"},"notes":"%s"}' "$LABFLEET_HOST_ID" "$notes" > "$LABFLEET_ACCESS"
touch built`,
        count: 1,
      }),
    );
    expect(run.state, JSON.stringify(run)).toBe("succeeded");
    const { access } = (await cloud.api(`/${W}/hosts/student-01/access`)).body;
    expect(access.notes).toBe("n".repeat(30_000));
    // No command labfleet sent printed more than SSM returns whole: the SSM wrapper keeps the full output of a
    // cut one on the host (~/.labfleet/ssm/), and there is none.
    const inst = cloud.account.ec2.instanceOf(W, "student-01");
    expect(readdirSync(join(inst.home, ".labfleet/ssm"))).toEqual([]);
  });
});

describe("git refs in the cloud: the API's Lambda has no git binary", { timeout: 240_000 }, () => {
  it("checks lab.ref and --ref over the smart-HTTP protocol, and refuses an unknown one with its path", async () => {
    const W = "refs";
    const yaml = awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 1, extraLab: "ref: v1.0" });
    const run = await up(W, yaml);
    expect(run.state).toBe("succeeded");
    const bad = await cloud.api(`/${W}/deploy`, { ref: "no-such-branch", force: true });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe("deploy.unknown_ref");
    expect(bad.body.error.details.map((d: { path: string }) => d.path)).toEqual(["ref"]);
    const good = await cloud.api(`/${W}/deploy`, { ref: "feature", force: true });
    expect(good.status, JSON.stringify(good.body)).toBe(202);
    expect((await cloud.runToEnd(W, good.body.run.id, 90_000)).state).toBe("succeeded");
    expect(cloud.account.server.failures).toEqual([]);
  });
});

describe("student_access: open", { timeout: 240_000 }, () => {
  it("opens the lab UIs from the workflow once every lab is ready, with the grant of the step that does it", async () => {
    const W = "open-labs";
    const run = await up(
      W,
      awsWorkshopYaml({
        name: W,
        source: cloud.lab("quick"),
        count: 1,
        extraLab: "ui_ports:\n  - { name: ui, port: 8443 }",
        extraProvider: "student_access: open",
      }),
    );
    expect(run.state).toBe("succeeded");
    expect(run.error).toBeUndefined();
    const group = cloud.account.ec2.groups.find((g) => g.GroupName === `labfleet.test.${W}`);
    expect(group?.rules.map((r) => r.source).sort()).toEqual(
      ["0.0.0.0/0", "198.51.100.0/24", "198.51.100.0/24", "::/0"].sort(),
    );
    const pairs = cloud.account.actionPairs().filter((p) => p.action === "ec2:AuthorizeSecurityGroupIngress");
    expect(pairs.find((p) => p.principal === "FinishUp")).toMatchObject({ denied: 0 });
    expect(pairs.every((p) => p.denied === 0)).toBe(true);
  });
});

describe("a host whose instance is gone", { timeout: 240_000 }, () => {
  it("up and retry replace an instance a student powered off (each run launches with a token of its own)", async () => {
    const W = "replace";
    const aws = cloud.account;
    const yaml = awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 2 });
    expect((await up(W, yaml)).state).toBe("succeeded");
    const powerOff = async (hostId: string) => {
      const inst = aws.ec2.instanceOf(W, hostId);
      aws.ec2.spawnOn(inst, "sh", ["-c", "poweroff"], { cwd: inst.home });
      await waitFor(`${hostId} to be terminated`, () => inst.instance.State?.Name === "terminated", 20_000);
      return inst.id;
    };

    const first = await powerOff("student-01");
    const again = await cloud.api(`/${W}/up`, {});
    expect(again.status).toBe(202);
    expect((await cloud.runToEnd(W, again.body.run.id, 90_000)).state).toBe("succeeded");
    const s1 = (await cloud.api(`/${W}`)).body.hostList;
    expect(s1.find((h: { id: string }) => h.id === "student-01")).toMatchObject({ state: "ready" });
    expect(s1.find((h: { id: string }) => h.id === "student-01").address).not.toBe(first);

    const second = await powerOff("student-02");
    const retry = await cloud.api(`/${W}/retry`, { hosts: ["student-02"], allSelected: true });
    expect(retry.status, JSON.stringify(retry.body)).toBe(202);
    expect((await cloud.runToEnd(W, retry.body.run.id, 90_000)).state).toBe("succeeded");
    const s2 = (await cloud.api(`/${W}`)).body.hostList;
    expect(s2.find((h: { id: string }) => h.id === "student-02")).toMatchObject({ state: "ready" });
    expect(s2.find((h: { id: string }) => h.id === "student-02").address).not.toBe(second);

    // Four launches of two hosts, each with a token of its own: none was refused as a reused one.
    const tokens = aws.server
      .inputs<RunInstancesCommandInput>("ec2", "RunInstances", "Provision")
      .filter((r) => r.TagSpecifications?.[0]?.Tags?.some((t) => t.Value === W))
      .map((r) => r.ClientToken);
    expect(new Set(tokens).size).toBe(4);
    expect(aws.server.calls.filter((c) => c.outcome === "IdempotentParameterMismatch")).toEqual([]);
  });
});

describe("two stages in one account", { timeout: 240_000 }, () => {
  it("a stage's functions may not touch another stage's instances, even when asked to", async () => {
    const aws = cloud.account;
    const other = aws.ec2.addInstance({
      State: { Code: 16, Name: "running" },
      Tags: [
        { Key: "ManagedBy", Value: "labfleet" },
        { Key: "labfleet-stage", Value: "prod" },
        { Key: "labfleet-workshop", Value: "replace" },
        { Key: "labfleet-host-id", Value: "student-01" },
      ],
    });
    const resource = arn.ec2("instance", other.id);
    const tags = Object.fromEntries(
      (other.instance.Tags ?? []).flatMap((t) => [
        [`aws:ResourceTag/${t.Key}`, t.Value ?? ""],
        [`ec2:ResourceTag/${t.Key}`, t.Value ?? ""],
      ]),
    );
    const deprovision = aws.server.principal("Deprovision");
    expect(
      await aws.iam.allowed(deprovision, { action: "ec2:TerminateInstances", resource, context: tags }),
    ).toBe(false);
    const api = aws.server.principal("Api");
    const ssmTags = Object.fromEntries(
      (other.instance.Tags ?? []).map((t) => [`ssm:resourceTag/${t.Key}`, t.Value ?? ""]),
    );
    expect(
      await aws.iam.allowed(api, { action: "ssm:SendCommand", resource, context: { ...tags, ...ssmTags } }),
    ).toBe(false);
    // The same instance tagged for this stage: allowed.
    const mine = aws.ec2.addInstance({
      State: { Code: 16, Name: "running" },
      Tags: (other.instance.Tags ?? []).map((t) =>
        t.Key === "labfleet-stage" ? { ...t, Value: "test" } : t,
      ),
    });
    const mineTags = Object.fromEntries(
      (mine.instance.Tags ?? []).flatMap((t) => [
        [`aws:ResourceTag/${t.Key}`, t.Value ?? ""],
        [`ec2:ResourceTag/${t.Key}`, t.Value ?? ""],
      ]),
    );
    expect(
      await aws.iam.allowed(deprovision, {
        action: "ec2:TerminateInstances",
        resource: arn.ec2("instance", mine.id),
        context: mineTags,
      }),
    ).toBe(true);
  });
});

describe("runs whose execution ended outside their own steps", { timeout: 240_000 }, () => {
  it("an execution aborted in the console fails its run (the execution status change reaches ReconcileRun)", async () => {
    const W = "aborted";
    const aws = cloud.account;
    expect(
      (
        await cloud.api("", {
          yaml: awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 1, setup: "sleep 600" }),
        })
      ).status,
    ).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    const runId = started.body.run.id as string;
    const execution = await waitFor(
      "the up execution",
      () => [...aws.sfn.executions.values()].find((e) => e.name === runId && e.status === "RUNNING"),
      20_000,
    );
    await aws.server.invoke(aws.server.principal("operator"), "states", "StopExecution", {
      executionArn: execution.executionArn,
      error: "Console",
      cause: "stopped by hand",
    });
    const run = await cloud.runToEnd(W, runId, 30_000);
    expect(run.state).toBe("failed");
    expect(run.error).toMatch(/^the workflow's execution was aborted: Console: stopped by hand/);
    expect((await cloud.api(`/${W}`)).body.activeRunId).toBeUndefined();
  });

  /** A teardown whose Deprovision may not describe instances (it fails) and whose FailTeardown times out. */
  async function lostTeardown(W: string, during: <T>(fn: () => Promise<T>) => Promise<T> = (fn) => fn()) {
    const built = await up(W, awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 1 }));
    expect(built.state).toBe("succeeded");
    const instanceId = cloud.account.ec2.instanceOf(W, "student-01").id;
    const noDescribe = <P extends { Statement: unknown[] }>(policy: P): P => ({
      ...policy,
      Statement: policy.Statement.map((st) => {
        const a = (st as { Action?: string | string[] }).Action;
        const actions = (Array.isArray(a) ? a : [a]).filter((x) => x && x !== "ec2:DescribeInstances");
        return { ...(st as object), Action: actions };
      }).filter((st) => st.Action.length > 0),
    });
    const run = await cloud.account.withPolicy("Deprovision", noDescribe, () =>
      during(async () => {
        const down = await cloud.api(`/${W}/teardown`, {});
        expect(down.status, JSON.stringify(down.body)).toBe(202);
        return cloud.runToEnd(W, down.body.run.id, 120_000);
      }),
    );
    const receipt = await cloud.api(`/${W}/receipt`);
    expect(receipt.status, JSON.stringify(receipt.body)).toBe(200);
    return { run, instanceId, receipt: receipt.body.receipt };
  }

  it("a teardown whose execution fails past its own failure step gets its receipt from ReconcileRun", async () => {
    const W = "down-lost";
    const { run, instanceId, receipt } = await lostTeardown(W);
    expect(run.state).toBe("failed");
    expect(run.error).toMatch(/^the workflow's execution failed: Sandbox\.Timedout/);
    expect(receipt.runId).toBe(run.id);
    expect(receipt.failed).toMatch(
      /^the teardown failed: the workflow's execution failed: Sandbox\.Timedout/,
    );
    expect(receipt.checkError).toBeUndefined();
    expect(receipt.left.find((l: { kind: string }) => l.kind === "instance")).toMatchObject({
      id: instanceId,
      hostId: "student-01",
      command: `labfleet down ${W} --yes`,
      byHand: `aws ec2 terminate-instances --region eu-west-1 --instance-ids ${instanceId}`,
      foundBy: "teardown",
    });
    expect(receipt.usage).toMatchObject({ hosts: 1, instanceType: "m7i.large" });
    // ReconcileRun's own grant (infra/permissions.ts: leftovers) allowed each call of the check.
    const checks = cloud.account
      .actionPairs()
      .filter((p) => p.principal === "ReconcileRun" && /Describe|ListSchedules/.test(p.action))
      .map((p) => `${p.action} denied=${p.denied}`)
      .sort();
    expect(checks).toEqual([
      "ec2:DescribeInstances denied=0",
      "ec2:DescribeSecurityGroups denied=0",
      "ec2:DescribeVolumes denied=0",
      "scheduler:ListSchedules denied=0",
      "ssm:DescribeParameters denied=0",
    ]);
    const events = (await cloud.api(`/${W}/events`)).body.events.filter(
      (e: { type: string }) => e.type === "teardown.receipt",
    );
    expect(events.at(-1)?.detail).toMatchObject({ by: "task:reconcile-run", failed: true });
    // The workshop reads as failed, so the console offers Tear down again.
    expect((await cloud.api(`/${W}`)).body.state).toBe("failed");
  });

  it("without the leftovers grant the double refuses ReconcileRun's check, and the receipt says so", async () => {
    const W = "down-lost-iam";
    const { run, receipt } = await lostTeardown(W, (go) =>
      cloud.account.withPolicy(
        "ReconcileRun",
        (policy) => ({
          ...policy,
          Statement: policy.Statement.filter((st) => (st as { Sid?: string }).Sid !== "FindLeftovers"),
        }),
        go,
      ),
    );
    expect(run.state).toBe("failed");
    expect(receipt.runId).toBe(run.id);
    expect(receipt.failed).toMatch(/^the teardown failed: /);
    expect(receipt.checkError).toMatch(/not authorized|AccessDenied|UnauthorizedOperation/i);
  });

  it("a host failure its Map item cannot record fails the run instead of leaving it running", async () => {
    const W = "map-fails";
    const run = await up(
      W,
      awsWorkshopYaml({
        name: W,
        source: cloud.lab("quick"),
        count: 1,
        // The clone cannot be written there: DeployHost fails, and RecordHostFailure times out recording it.
        extraLab: "dir: /proc/labfleet-cannot-be-here",
      }),
    );
    expect(run.state).toBe("failed");
    expect(run.error).toMatch(/Sandbox\.Timedout|Task timed out/);
    const exec = [...cloud.account.sfn.executions.values()].find((e) => e.name === run.id);
    // The Deploy Map's Catch took the run to FailRun: the execution ended in its Fail state.
    expect(exec?.error).toBe("RunFailed");
  });
});

describe("the first deploy of a fresh host", { timeout: 240_000 }, () => {
  it("waits for cloud-init, which installs the AWS CLI the operator secrets are fetched with", async () => {
    const W = "fresh";
    const aws = cloud.account;
    aws.ssm.putParameter("/labfleet/test/secrets/FRESH_TOKEN", "fresh-token-value");
    const run = await up(
      W,
      awsWorkshopYaml({
        name: W,
        source: cloud.lab("quick"),
        count: 1,
        setup: `. "$LABFLEET_SECRETS"; test "$FRESH_TOKEN" = fresh-token-value && bash setup.sh`,
        extraLab: "operator_secrets: [FRESH_TOKEN]",
      }),
    );
    expect(run.state, JSON.stringify(run)).toBe("succeeded");
  });
});
