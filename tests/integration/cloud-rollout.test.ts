import type {
  CreateTagsCommandInput,
  RunInstancesCommandInput,
  TerminateInstancesCommandInput,
} from "@aws-sdk/client-ec2";
import { describe, expect, it } from "vitest";
import { awsWorkshopYaml, cloudForTests } from "../harness/aws/cloud.ts";

/**
 * A rollout in the cloud, on the AWS double with the Lambda bundles (see cloud-path.test.ts): the Api function
 * starts the `rollout` state machine on Step Functions, whose StartRolloutHost launches each lab's new instance
 * beside the old one (its other host id, `student-0N.b`) and starts the lab at the new ref over SSM, whose
 * PollRollout promotes it once lab.health passes and only then terminates the old instance. Every AWS call is
 * evaluated against its function's IAM policy: without its launch grant, StartRolloutHost is refused and the
 * rollout halts at the canary with nothing changed. Once a lab is on its new instance, check mode, `up --plan`,
 * extend and a provision run find it there (by its machine id, `student-0N.b`), and teardown terminates it.
 */

const W = "cloud-rollout";
let yaml: string;

const cloud = cloudForTests(
  {},
  async () => {
    yaml = awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 2, extraLab: "ref: main" });
    const submitted = await cloud.api("", { yaml });
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(201);
    const up = await cloud.api(`/${W}/up`, {});
    expect(up.status).toBe(202);
    expect((await cloud.runToEnd(W, up.body.run.id, 240_000)).state).toBe("succeeded");
  },
  300_000,
);

const launched = (by: string) =>
  cloud.account.server
    .inputs<RunInstancesCommandInput>("ec2", "RunInstances", by)
    .map((i) => i.TagSpecifications?.[0]?.Tags?.find((t) => t.Key === "labfleet-host-id")?.Value);
const hostList = async (ws = W) =>
  (await cloud.api(`/${ws}`)).body.hostList as { id: string; state: string; providerId: string }[];
const rolloutToEnd = (timeoutMs: number, ws = W) =>
  new Promise<{
    state: string;
    runId: string;
    hosts: { hostId: string; state: string; gate: string | null; error: string | null }[];
  }>((resolve, reject) => {
    const deadline = Date.now() + timeoutMs;
    const look = async () => {
      const r = (await cloud.api(`/${ws}/rollout`)).body.rollout;
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
        return rolloutToEnd(240_000);
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

  it("check, up --plan, extend and a provision run find each lab on its new instance", async () => {
    const hosts = await hostList();
    const instanceOf = new Map(hosts.map((h) => [h.id, h.providerId]));
    // Check mode's provision stage reuses the lab's new instance (its old one is terminated).
    const check = await cloud.api(`/${W}/check`, { command: "up" });
    expect(check.status, JSON.stringify(check.body)).toBe(200);
    const provision = check.body.items.filter((i: { stage: string }) => i.stage === "provision");
    expect(provision.map((i: { hostId: string; action: string }) => [i.hostId, i.action])).toEqual([
      ["student-01", "reuse"],
      ["student-02", "reuse"],
    ]);
    for (const i of provision) expect(i.detail).toContain(instanceOf.get(i.hostId));
    // So does `up --plan` of the workshop's file.
    const plan = await cloud.api("/plan", { yaml });
    expect(plan.status, JSON.stringify(plan.body)).toBe(200);
    expect(plan.body.items.map((i: { hostId: string; action: string }) => [i.hostId, i.action])).toEqual([
      ["student-01", "reuse"],
      ["student-02", "reuse"],
    ]);
    for (const i of plan.body.items) expect(i.detail).toContain(instanceOf.get(i.hostId));
    // Extend moves the expiry tag of the instances the labs are on now.
    const extended = await cloud.api(`/${W}/extend`, { hours: 1 });
    expect(extended.status, JSON.stringify(extended.body)).toBe(200);
    const tagged = cloud.account.server.inputs<CreateTagsCommandInput>("ec2", "CreateTags", "Api");
    expect([...(tagged.at(-1)?.Resources ?? [])].sort()).toEqual([...instanceOf.values()].sort());
    for (const id of instanceOf.values())
      expect(cloud.account.ec2.instances.get(id)?.instance.Tags).toContainEqual({
        Key: "labfleet-expiry",
        Value: extended.body.expiry,
      });
    // A provision run reuses them: nothing is launched, every lab stays on its instance and ready.
    const launches = cloud.account.server.inputs("ec2", "RunInstances").length;
    const prov = await cloud.api(`/${W}/up`, { only: ["provision"] });
    expect(prov.status, JSON.stringify(prov.body)).toBe(202);
    expect((await cloud.runToEnd(W, prov.body.run.id, 120_000)).state).toBe("succeeded");
    expect(cloud.account.server.inputs("ec2", "RunInstances")).toHaveLength(launches);
    expect((await hostList()).map((h) => [h.id, h.providerId, h.state])).toEqual(
      hosts.map((h) => [h.id, h.providerId, "ready"]),
    );
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

describe("a canary whose new lab fails lab.health on the AWS double", { timeout: 300_000 }, () => {
  it("halts the rollout once a few checks in a row fail, with the health output; nothing else changes", async () => {
    const SICK = "cloud-rollout-sick";
    const sick = awsWorkshopYaml({
      name: SICK,
      source: cloud.lab("quick"),
      count: 2,
      extraLab: "ref: main",
      // The quick lab builds at every ref; at `feature` (which adds FEATURE) its health check fails.
      health:
        'test -f built && { test ! -f FEATURE || { echo "the feature build does not answer"; exit 1; }; }',
    });
    expect((await cloud.api("", { yaml: sick })).status).toBe(201);
    const up = await cloud.api(`/${SICK}/up`, {});
    expect(up.status).toBe(202);
    expect((await cloud.runToEnd(SICK, up.body.run.id, 180_000)).state).toBe("succeeded");
    const before = await hostList(SICK);
    const started = await cloud.api(`/${SICK}/rollout`, { ref: "feature" });
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    // Well before the 300 s a lab gets after its setup (HEALTH_GRACE_SECONDS): the gate decides after its checks.
    const r = await rolloutToEnd(240_000, SICK);
    expect(r.state).toBe("halted");
    const canary = r.hosts.find((h) => h.hostId === "student-01");
    expect(canary).toMatchObject({ state: "failed", gate: "failed" });
    expect(canary?.error).toContain("lab.health failed on the new lab 3 times in a row");
    expect(canary?.error).toContain("the feature build does not answer");
    expect(r.hosts.find((h) => h.hostId === "student-02")?.state).toBe("pending");
    // The canary's new instance was launched and is terminated again; the labs are where they were.
    const made = cloud.account.server
      .inputs<RunInstancesCommandInput>("ec2", "RunInstances", "StartRolloutHost")
      .filter((i) => i.TagSpecifications?.[0]?.Tags?.some((t) => t.Value === SICK));
    expect(made).toHaveLength(1);
    const ours = [...cloud.account.ec2.instances.values()].filter((i) =>
      i.instance.Tags?.some((t) => t.Key === "labfleet-workshop" && t.Value === SICK),
    );
    const candidate = ours.find((i) =>
      i.instance.Tags?.some((t) => t.Key === "labfleet-host-id" && t.Value === "student-01.b"),
    );
    expect(candidate?.instance.State?.Name).toMatch(/shutting-down|terminated/);
    expect(await hostList(SICK)).toEqual(before);
    const s = (await cloud.api(`/${SICK}`)).body;
    expect(s.spec.lab.ref).toBe("main");
    expect(s.runs.find((x: { id: string }) => x.id === r.runId)).toMatchObject({
      kind: "rollout",
      state: "failed",
    });
  });
});
