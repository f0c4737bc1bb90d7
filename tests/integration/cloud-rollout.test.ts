import type { RunInstancesCommandInput, TerminateInstancesCommandInput } from "@aws-sdk/client-ec2";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";

/**
 * A rollout in the cloud, on the AWS double with the Lambda bundles (see cloud-path.test.ts): the Api function
 * starts the `rollout` state machine on Step Functions, whose StartRolloutHost launches each lab's new instance
 * beside the old one (its other host id, `student-0N.b`) and starts the lab at the new ref over SSM, whose
 * PollRollout promotes it once lab.health passes and only then terminates the old instance. Every AWS call is
 * evaluated against its function's IAM policy: without its launch grant, StartRolloutHost is refused and the
 * rollout halts at the canary with nothing changed.
 */

const W = "cloud-rollout";
let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud();
  const yaml = awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 2, extraLab: "ref: main" });
  const submitted = await cloud.api("", { yaml });
  expect(submitted.status, JSON.stringify(submitted.body)).toBe(201);
  const up = await cloud.api(`/${W}/up`, {});
  expect(up.status).toBe(202);
  expect((await cloud.runToEnd(W, up.body.run.id, 120_000)).state).toBe("succeeded");
}, 240_000);

afterAll(async () => {
  await cloud?.close();
});

const launched = (by: string) =>
  cloud.account.server
    .inputs<RunInstancesCommandInput>("ec2", "RunInstances", by)
    .map((i) => i.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === "labfleet-host-id")?.Value);
const hostList = async () =>
  (await cloud.api(`/${W}`)).body.hostList as { id: string; state: string; providerId: string }[];
const rolloutToEnd = (timeoutMs: number) =>
  new Promise<{
    state: string;
    runId: string;
    hosts: { hostId: string; state: string; error: string | null }[];
  }>((resolve, reject) => {
    const deadline = Date.now() + timeoutMs;
    const look = async () => {
      const r = (await cloud.api(`/${W}/rollout`)).body.rollout;
      if (r && r.state !== "running") {
        const running = [...cloud.account.sfn.executions.values()].some(
          (e) => e.name === r.runId && e.status === "RUNNING",
        );
        if (!running) return resolve(r);
      }
      if (Date.now() > deadline) return reject(new Error("timed out waiting for the rollout to end"));
      setTimeout(() => void look().catch(reject), 200);
    };
    void look().catch(reject);
  });

describe("a rollout on the AWS double", { timeout: 300_000 }, () => {
  it("without StartRolloutHost's launch grant the canary is refused, the rollout halts, nothing changes", async () => {
    const before = await hostList();
    const r = await cloud.account.withPolicy(
      "StartRolloutHost",
      (policy) => ({
        ...policy,
        Statement: policy.Statement.filter((st) => (st as { Sid?: string }).Sid !== "RunTaggedInstances"),
      }),
      async () => {
        const started = await cloud.api(`/${W}/rollout`, { ref: "feature" });
        expect(started.status, JSON.stringify(started.body)).toBe(202);
        return rolloutToEnd(120_000);
      },
    );
    expect(r.state).toBe("halted");
    const canary = r.hosts.find((h) => h.hostId === "student-01");
    expect(canary?.state).toBe("failed");
    expect(canary?.error).toContain("no identity-based policy allows the ec2:RunInstances action");
    expect(r.hosts.find((h) => h.hostId === "student-02")?.state).toBe("pending");
    expect(launched("StartRolloutHost")).toEqual([]);
    expect(await hostList()).toEqual(before);
    const denied = cloud.account
      .actionPairs()
      .find((p) => p.principal === "StartRolloutHost" && p.action === "ec2:RunInstances");
    expect(denied?.denied).toBeGreaterThan(0);
  });

  it("rolls the new ref out: new instances beside the old ones, promoted, then the old ones terminated", async () => {
    const before = await hostList();
    const resumed = await cloud.api(`/${W}/rollout/resume`, {});
    expect(resumed.status, JSON.stringify(resumed.body)).toBe(202);
    const r = await rolloutToEnd(180_000);
    expect(r.state).toBe("completed");
    expect(r.hosts.map((h) => [h.hostId, h.state])).toEqual([
      ["student-01", "promoted"],
      ["student-02", "promoted"],
    ]);
    // It ran on Step Functions, as the rollout state machine.
    const execution = [...cloud.account.sfn.executions.values()].find((e) => e.name === r.runId);
    expect(execution?.stateMachineArn).toMatch(/:stateMachine:labfleet-.*rollout$/);
    expect(launched("StartRolloutHost").sort()).toEqual(["student-01.b", "student-02.b"]);
    const after = await hostList();
    expect(after.map((h) => h.state)).toEqual(["ready", "ready"]);
    const old = new Set(before.map((h) => h.providerId));
    for (const h of after) expect(old.has(h.providerId)).toBe(false);
    const terminated = cloud.account.server
      .inputs<TerminateInstancesCommandInput>("ec2", "TerminateInstances")
      .flatMap((i) => i.InstanceIds ?? []);
    expect(terminated.sort()).toEqual([...old].sort());
    const s = (await cloud.api(`/${W}`)).body;
    expect(s.spec.lab.ref).toBe("feature");
    expect(s.runs.find((x: { id: string }) => x.id === r.runId)).toMatchObject({
      kind: "rollout",
      state: "succeeded",
    });
    expect(s.runs.find((x: { id: string }) => x.id === r.runId).transitions).toBeGreaterThan(5);
    // IAM allowed every call the rollout's functions made.
    const pairs = cloud.account
      .actionPairs()
      .filter((p) =>
        ["NextRolloutBatch", "PollRollout", "FinishRollout", "BeginRollout"].includes(p.principal),
      );
    expect(pairs.filter((p) => p.denied > 0)).toEqual([]);
  });

  it("teardown terminates the promoted instances too", async () => {
    const down = await cloud.api(`/${W}/teardown`, {});
    expect(down.status, JSON.stringify(down.body)).toBe(202);
    expect((await cloud.runToEnd(W, down.body.run.id, 120_000)).state).toBe("succeeded");
    const live = [...cloud.account.ec2.instances.values()].filter(
      (i) =>
        i.instance.Tags?.some((t) => t.Key === "labfleet-workshop" && t.Value === W) &&
        i.instance.State?.Name !== "terminated",
    );
    expect(live.map((i) => i.id)).toEqual([]);
  });
});
