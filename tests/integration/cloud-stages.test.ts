import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import { describe, expect, it } from "vitest";
import { awsWorkshopYaml, cloudForTests } from "../harness/aws/cloud.ts";

/**
 * Stages of up in the cloud, on the AWS double with the Lambda bundles (see cloud-path.test.ts): the instructor
 * API's function records the stages on the run, BeginUp hands them to the `up` state machine on Step Functions,
 * and its Choice states leave out the stages the run does not go through. Check mode answers from the same
 * function, changing nothing. Every AWS call is evaluated against its function's IAM policy.
 */

const W = "cloud-stages";
let yaml: string;

const cloud = cloudForTests({}, async () => {
  yaml = awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 2 });
});

const launched = () => cloud.account.server.inputs<RunInstancesCommandInput>("ec2", "RunInstances").length;
/** The states an execution entered, in order, from its history as Step Functions keeps it. */
const statesOf = (runId: string): string[] => {
  const e = [...cloud.account.sfn.executions.values()].find((x) => x.name === runId);
  expect(e?.stateMachineArn).toMatch(/:stateMachine:labfleet-.*up$/);
  return (e?.run.history ?? []).flatMap((ev) =>
    ev.stateEnteredEventDetails?.name ? [ev.stateEnteredEventDetails.name] : [],
  );
};
const billed = (runId: string) => {
  const e = [...cloud.account.sfn.executions.values()].find((x) => x.name === runId);
  return cloud.account.sfn.figures(e?.executionArn as string).transitions;
};

describe("stages of up on the AWS double", { timeout: 240_000 }, () => {
  it("--only provision, then deploy without waiting, then wait and publish: each run enters only its stages", async () => {
    expect((await cloud.api("", { yaml })).status).toBe(201);
    const before = await cloud.api(`/${W}/check`, { command: "up" });
    expect(before.status, JSON.stringify(before.body)).toBe(200);
    expect(before.body.changes).toBe(true);
    expect(launched()).toBe(0);

    const prov = await cloud.api(`/${W}/up`, { only: ["provision"] });
    expect(prov.status).toBe(202);
    expect(prov.body.run.kind).toBe("provision");
    expect((await cloud.runToEnd(W, prov.body.run.id, 90_000)).state).toBe("succeeded");
    expect(launched()).toBe(2);

    const deploy = await cloud.api(`/${W}/up`, { skip: ["provision", "wait"] });
    expect(deploy.status, JSON.stringify(deploy.body)).toBe(202);
    const deployed = await cloud.runToEnd(W, deploy.body.run.id, 90_000);
    expect(deployed).toMatchObject({ kind: "up", state: "succeeded", stages: ["deploy", "publish"] });
    const entered = statesOf(deploy.body.run.id);
    expect(entered).toContain("RecordedHosts");
    expect(entered.filter((s) => s === "DeployHost")).toHaveLength(2);
    expect(entered).not.toContain("Provision");
    expect(entered).not.toContain("Poll");
    expect(entered.slice(-2)).toEqual(["AfterDeploy", "FinishUp"]);
    expect(deployed.transitions).toBe(billed(deploy.body.run.id));
    expect(launched()).toBe(2);

    const wait = await cloud.api(`/${W}/up`, { only: ["wait", "publish"] });
    expect(wait.status).toBe(202);
    const waited = await cloud.runToEnd(W, wait.body.run.id, 90_000);
    expect(waited).toMatchObject({ state: "succeeded", stages: ["wait", "publish"] });
    const polled = statesOf(wait.body.run.id);
    expect(polled).toContain("Poll");
    expect(polled).not.toContain("Provision");
    expect(polled).not.toContain("DeployHost");
    expect(polled).not.toContain("Deploy");
    const s = (await cloud.api(`/${W}`)).body;
    expect(s.state).toBe("ready");
    expect(s.hosts).toEqual({ total: 2, ready: 2, failed: 0 });

    // Nothing left to do: the check says so, from the Api function, and starts nothing.
    const runs = s.runs.length;
    const after = await cloud.api(`/${W}/check`, { command: "up" });
    expect(after.status).toBe(200);
    expect(after.body.changes).toBe(false);
    expect((await cloud.api(`/${W}`)).body.runs).toHaveLength(runs);
    expect(cloud.account.server.calls.filter((c) => c.outcome.includes("AccessDenied"))).toEqual([]);
  });
});
