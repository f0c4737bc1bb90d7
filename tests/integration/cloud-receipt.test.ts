import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SweepSummary } from "../../shared/fleet/sweeper.ts";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";

/**
 * The teardown receipt on the AWS double, with the Lambda bundles: FinishTeardown looks for what is left by the
 * ownership tags (DescribeInstances, DescribeVolumes, DescribeSecurityGroups), the TTL schedule
 * (ListSchedules) and the secrets parameter (DescribeParameters), each allowed by its grant; the sweeper looks
 * again later.
 */

let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud();
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field by the tests
type Json = Record<string, any>;

async function upAndDown(name: string, before?: () => void): Promise<Json> {
  expect(
    (await cloud.api("", { yaml: awsWorkshopYaml({ name, source: cloud.lab("quick"), count: 1 }) })).status,
  ).toBe(201);
  const up = await cloud.api(`/${name}/up`, {});
  expect(up.status, JSON.stringify(up.body)).toBe(202);
  expect((await cloud.runToEnd(name, up.body.run.id, 180_000)).state).toBe("succeeded");
  before?.();
  const down = await cloud.api(`/${name}/teardown`, {});
  expect(down.status).toBe(202);
  await cloud.runToEnd(name, down.body.run.id, 180_000);
  const receipt = await cloud.api(`/${name}/receipt`);
  expect(receipt.status, JSON.stringify(receipt.body)).toBe(200);
  return receipt.body.receipt;
}

async function sweep(): Promise<SweepSummary> {
  const aws = cloud.account;
  const out = await aws.lambda.invoke(
    aws.deployed.functionName("Sweep"),
    JSON.stringify({ source: "aws.events" }),
  );
  expect(out.functionError, out.payload.toString()).toBeUndefined();
  return JSON.parse(out.payload.toString()) as SweepSummary;
}

/** FinishTeardown's calls of the leftover check: each made, none denied. */
function leftoverChecks(principal: string) {
  const wanted = [
    "ec2:DescribeVolumes",
    "ec2:DescribeSecurityGroups",
    "scheduler:ListSchedules",
    "ssm:DescribeParameters",
  ];
  return cloud.account
    .actionPairs()
    .filter((p) => p.principal === principal && wanted.includes(p.action))
    .map((p) => `${p.action} calls=${p.calls > 0} denied=${p.denied}`)
    .sort();
}

/** A function's policy without one action (in every statement that names it). */
function without(action: string) {
  return <P extends { Statement: unknown[] }>(policy: P): P => ({
    ...policy,
    Statement: policy.Statement.map((st) => {
      const s = st as { Action?: string | string[] };
      const actions = (Array.isArray(s.Action) ? s.Action : [s.Action]).filter((a) => a && a !== action);
      return { ...s, Action: actions };
    }).filter((st) => st.Action.length > 0),
  });
}

/** Tears the workshop down while Deprovision may not describe instances: it throws, the run fails. */
async function failingDown(name: string, during?: <T>(fn: () => Promise<T>) => Promise<T>): Promise<Json> {
  const go = async () => {
    const down = await cloud.api(`/${name}/teardown`, {});
    expect(down.status).toBe(202);
    return cloud.runToEnd(name, down.body.run.id, 180_000);
  };
  const run = await cloud.account.withPolicy("Deprovision", without("ec2:DescribeInstances"), () =>
    during ? during(go) : go(),
  );
  expect(run.state).toBe("failed");
  const receipt = await cloud.api(`/${name}/receipt`);
  expect(receipt.status, JSON.stringify(receipt.body)).toBe(200);
  expect(receipt.body.receipt.runId).toBe(run.id);
  return receipt.body.receipt;
}

async function upOnly(name: string): Promise<string> {
  expect(
    (await cloud.api("", { yaml: awsWorkshopYaml({ name, source: cloud.lab("quick"), count: 1 }) })).status,
  ).toBe(201);
  const up = await cloud.api(`/${name}/up`, {});
  expect(up.status, JSON.stringify(up.body)).toBe(202);
  expect((await cloud.runToEnd(name, up.body.run.id, 180_000)).state).toBe("succeeded");
  return cloud.account.ec2.instanceOf(name, "student-01").id;
}

describe("a teardown that fails outright on the AWS double", { timeout: 480_000 }, () => {
  it("FailTeardown takes a receipt: failed, why, the instance left with labfleet down and the aws command", async () => {
    const W = "rcpt-fail";
    const instanceId = await upOnly(W);
    const receipt = await failingDown(W);
    expect(receipt.failed).toMatch(/^the teardown failed: .*DescribeInstances/);
    expect(receipt.checkError).toBeUndefined();
    expect(receipt.removed).toEqual([]);
    expect(receipt.left.find((l: Json) => l.kind === "instance")).toMatchObject({
      id: instanceId,
      hostId: "student-01",
      command: `labfleet down ${W} --yes`,
      byHand: `aws ec2 terminate-instances --region eu-west-1 --instance-ids ${instanceId}`,
      foundBy: "teardown",
    });
    expect(receipt.usage).toMatchObject({ hosts: 1, instanceType: "m7i.large" });
    // FailTeardown's own grant (infra/permissions.ts: leftovers) allowed every call of the check.
    expect(leftoverChecks("FailTeardown")).toEqual([
      "ec2:DescribeSecurityGroups calls=true denied=0",
      "ec2:DescribeVolumes calls=true denied=0",
      "scheduler:ListSchedules calls=true denied=0",
      "ssm:DescribeParameters calls=true denied=0",
    ]);
    const events = (await cloud.api(`/${W}/events`)).body.events.filter(
      (e: Json) => e.type === "teardown.receipt",
    );
    expect(events.at(-1)?.detail).toMatchObject({ by: "task:fail-teardown", failed: true });

    // The receipt's command works: down again ends the instance, and the new receipt has nothing left.
    const down = await cloud.api(`/${W}/teardown`, {});
    expect(down.status, JSON.stringify(down.body)).toBe(202);
    expect((await cloud.runToEnd(W, down.body.run.id, 180_000)).state).toBe("succeeded");
    const after = (await cloud.api(`/${W}/receipt`)).body.receipt;
    expect(after.failed).toBeUndefined();
    expect(after.left).toEqual([]);
    expect(after.removed[0]).toMatchObject({ kind: "instance", id: instanceId });
  });

  it("without the leftovers grant the double refuses FailTeardown's check, and the receipt says so", async () => {
    const W = "rcpt-fail-iam";
    await upOnly(W);
    const receipt = await failingDown(W, (go) =>
      cloud.account.withPolicy(
        "FailTeardown",
        (policy) => ({
          ...policy,
          Statement: policy.Statement.filter((st) => (st as { Sid?: string }).Sid !== "FindLeftovers"),
        }),
        go,
      ),
    );
    expect(receipt.failed).toMatch(/^the teardown failed: /);
    expect(receipt.checkError).toMatch(/not authorized|AccessDenied|UnauthorizedOperation/i);
    const denied = cloud.account
      .actionPairs()
      .filter((p) => p.principal === "FailTeardown" && p.action === "ec2:DescribeInstances");
    expect(denied[0]?.denied).toBeGreaterThan(0);
  });
});

describe("the teardown receipt on the AWS double", { timeout: 480_000 }, () => {
  it("a clean teardown: the instance removed, nothing left, the host-hours and the cost's basis", async () => {
    const W = "rcpt-clean";
    let instanceId = "";
    const receipt = await upAndDown(W, () => {
      instanceId = cloud.account.ec2.instanceOf(W, "student-01").id;
    });
    expect(receipt.checkError).toBeUndefined();
    expect(receipt.left).toEqual([]);
    expect(receipt.removed[0]).toMatchObject({ kind: "instance", id: instanceId, hostId: "student-01" });
    expect(receipt.region).toBe("eu-west-1");
    expect(receipt.usage).toMatchObject({
      hosts: 1,
      instanceType: "m7i.large",
      basis: "cost unknown: no built-in on-demand price for m7i.large in eu-west-1",
    });
    expect(receipt.usage.costUsd).toBeUndefined();
    expect(receipt.usage.hostHours).toBeGreaterThanOrEqual(0);
    // Every call of the check was allowed by FinishTeardown's own grant (infra/permissions.ts: leftovers).
    expect(leftoverChecks("FinishTeardown")).toEqual([
      "ec2:DescribeSecurityGroups calls=true denied=0",
      "ec2:DescribeVolumes calls=true denied=0",
      "scheduler:ListSchedules calls=true denied=0",
      "ssm:DescribeParameters calls=true denied=0",
    ]);
  });

  it("an instance left on purpose is reported with the command that removes it; the sweeper reports a parameter left later", async () => {
    const W = "rcpt-left";
    let strayId = "";
    const receipt = await upAndDown(W, () => {
      // An instance tagged for the workshop under a host id its records do not know: the teardown leaves it.
      const ours = cloud.account.ec2.instanceOf(W, "student-01");
      const stray = cloud.account.ec2.addInstance({
        Tags: ours.instance.Tags?.map((t) =>
          t.Key === "labfleet-host-id" ? { ...t, Value: "student-99" } : t,
        ),
      });
      strayId = stray.id;
    });
    expect(receipt.checkError).toBeUndefined();
    const instance = receipt.left.find((l: Json) => l.kind === "instance");
    expect(instance).toMatchObject({
      id: strayId,
      hostId: "student-99",
      why: "the instance is running, not terminated",
      command: `aws ec2 terminate-instances --region eu-west-1 --instance-ids ${strayId}`,
      foundBy: "teardown",
    });
    // The managed group stays while the stray instance may hold it.
    expect(receipt.left.map((l: Json) => l.kind).sort()).toEqual(["instance", "security-group"]);

    // After the teardown, a secrets parameter of the workshop shows up (an operator's script put it back).
    const name = `/labfleet/${cloud.account.stage}/workshops/${W}/secrets`;
    cloud.account.ssm.putParameter(name, '{"TOKEN":"x"}');
    const summary = await sweep();
    expect(summary.errors).toEqual([]);
    const found = summary.leftovers.find((l) => l.workshop === W);
    expect(found?.left.map((l) => `${l.kind} ${l.id}`)).toEqual([`parameter ${name}`]);
    const after = (await cloud.api(`/${W}/receipt`)).body.receipt;
    expect(after.left.find((l: Json) => l.kind === "parameter")).toMatchObject({
      id: name,
      command: `aws ssm delete-parameter --region eu-west-1 --name ${name}`,
      foundBy: "sweeper",
    });
    // No value of the parameter is ever in the receipt.
    expect(JSON.stringify(after)).not.toContain("TOKEN");
    expect(leftoverChecks("Sweep")).toEqual([
      "ec2:DescribeSecurityGroups calls=true denied=0",
      "ec2:DescribeVolumes calls=true denied=0",
      "scheduler:ListSchedules calls=true denied=0",
      "ssm:DescribeParameters calls=true denied=0",
    ]);
    const events = (await cloud.api(`/${W}/events`)).body.events.filter(
      (e: Json) => e.type === "teardown.receipt",
    );
    expect(events.map((e: Json) => e.detail.by)).toEqual(["task:finish-teardown", "sweeper"]);
  });
});
