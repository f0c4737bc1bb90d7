import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";

/**
 * Scaling up in the cloud, on the AWS double with the Lambda bundles (see cloud-path.test.ts): the instructor
 * API's function records the new count and starts the `up` state machine as a `scale` run on Step Functions,
 * whose Provision launches only the new instance and whose deploy and poll go through SSM; the instance that
 * was there is not launched again or touched. Every AWS call is evaluated against its function's IAM policy.
 */

const W = "cloud-scale";
let cloud: Cloud;
let yaml: string;

beforeAll(async () => {
  cloud = await startCloud();
  yaml = awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 1 });
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

const launchedHosts = () =>
  cloud.account.server
    .inputs<RunInstancesCommandInput>("ec2", "RunInstances", "Provision")
    .map((i) => i.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === "labfleet-host-id")?.Value);

describe("scaling up on the AWS double", { timeout: 240_000 }, () => {
  it("launches and deploys only the new instance with a scale run, the old one untouched", async () => {
    expect((await cloud.api("", { yaml })).status).toBe(201);
    const up = await cloud.api(`/${W}/up`, {});
    expect(up.status).toBe(202);
    expect((await cloud.runToEnd(W, up.body.run.id, 90_000)).state).toBe("succeeded");
    const before = (await cloud.api(`/${W}`)).body.hostList[0];
    expect(launchedHosts()).toEqual(["student-01"]);

    const res = await cloud.api(`/${W}/scale`, { count: 2 });
    expect(res.status, JSON.stringify(res.body)).toBe(202);
    expect(res.body.scale).toEqual({ workshop: W, from: 1, to: 2, add: ["student-02"], waiting: 0 });
    const run = await cloud.runToEnd(W, res.body.run.id, 90_000);
    expect(run).toMatchObject({ kind: "scale", state: "succeeded", selection: ["student-02"] });
    expect(run.hosts).toEqual({ "student-02": { state: "ready" } });
    // It ran on Step Functions, as the up state machine.
    const execution = [...cloud.account.sfn.executions.values()].find((e) => e.name === res.body.run.id);
    expect(execution?.stateMachineArn).toMatch(/:stateMachine:labfleet-.*up$/);

    expect(launchedHosts()).toEqual(["student-01", "student-02"]);
    const s = (await cloud.api(`/${W}`)).body;
    expect(s.spec.provider.count).toBe(2);
    expect(s.state).toBe("ready");
    expect(s.hostList.map((h: { id: string; state: string }) => [h.id, h.state])).toEqual([
      ["student-01", "ready"],
      ["student-02", "ready"],
    ]);
    expect(s.hostList[0]).toMatchObject({ providerId: before.providerId, readyAt: before.readyAt });
    // No SSM command of the scale run went to the old instance.
    const scaleStart = Date.parse(res.body.run.startedAt);
    const sent = cloud.account.server.calls.filter(
      (c) => c.operation === "SendCommand" && c.outcome === "ok" && c.at >= scaleStart,
    );
    expect(sent.length).toBeGreaterThan(0);
    for (const c of sent)
      expect((c.input as { InstanceIds: string[] }).InstanceIds).toEqual([s.hostList[1].providerId]);
    // IAM allowed every call the functions made.
    expect(cloud.account.server.calls.filter((c) => c.outcome.includes("AccessDenied"))).toEqual([]);
  });

  it("up -f with the file's count of 1 keeps both instances", async () => {
    const submitted = await cloud.api("", { yaml });
    expect(submitted.status).toBe(200);
    expect(submitted.body.countKept).toEqual({ file: 1, kept: 2 });
    const up = await cloud.api(`/${W}/up`, {});
    expect((await cloud.runToEnd(W, up.body.run.id, 90_000)).state).toBe("succeeded");
    expect(cloud.account.server.inputs("ec2", "TerminateInstances")).toEqual([]);
    const s = (await cloud.api(`/${W}`)).body;
    expect(s.hosts).toEqual({ total: 2, ready: 2, failed: 0 });
  });
});
