import { rmSync } from "node:fs";
import { join } from "node:path";
import type { SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SweepSummary } from "../../shared/fleet/sweeper.ts";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";
import { portalStudent } from "../harness/aws/student.ts";
import { waitFor } from "../harness/runtime.ts";

/**
 * Health while in use in the cloud: the sweeper (rate 5 minutes) runs the health pass, reaching EC2 labs through
 * SSM as the Sweep function's role, which IAM checks on every call. A claimed lab that breaks is flagged, and with
 * portal.auto_swap its student is moved by the sweeper under the same personal link while a retry run rebuilds it.
 */

const W = "cloud-health";
let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud();
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

const student = () => portalStudent(cloud.account);

async function sweep(): Promise<SweepSummary> {
  const aws = cloud.account;
  const out = await aws.lambda.invoke(
    aws.deployed.functionName("Sweep"),
    JSON.stringify({ source: "aws.events" }),
  );
  expect(out.functionError, out.payload.toString()).toBeUndefined();
  return JSON.parse(out.payload.toString()) as SweepSummary;
}

describe("the health pass through the sweeper on the AWS double", { timeout: 240_000 }, () => {
  it("checks ready labs over SSM, flags a broken claimed lab and swaps its student to the free one", async () => {
    const yaml = awsWorkshopYaml({
      name: W,
      source: cloud.lab("quick"),
      count: 2,
      extraLab: "health_interval_seconds: 1",
      extraProvider: "",
    }).concat("portal:\n  enabled: true\n  auto_swap: true\n");
    expect((await cloud.api("", { yaml })).status).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    expect((await cloud.runToEnd(W, started.body.run.id, 120_000)).state).toBe("succeeded");
    const info = (await cloud.api(`/${W}/portal/info`)).body;

    const s = student();
    await s.get("/");
    expect((await s.post("/code", { code: info.code })).status).toBe(303);
    await s.get("/board");
    const claimed = await s.post("/claim", {
      name: "Ada Cloudwright",
      email: "ada@example.test",
      pin: "480271",
    });
    expect(claimed.location).toMatch(/^\/l\/[\w-]+$/);
    const link = claimed.location;
    const before = await s.get(link);
    const mine = /s3cret-(student-0[12])/.exec(before.text)?.[1] as string;
    const other = mine === "student-01" ? "student-02" : "student-01";

    // Healthy labs: checked through SSM as the sweeper, nothing flagged.
    const healthy = await waitFor("a sweep that checks both labs", async () => {
      const r = await sweep();
      return (r.health?.checked ?? 0) >= 2 ? r : undefined;
    });
    expect(healthy.health?.flagged).toEqual([]);
    expect(healthy.errors).toEqual([]);
    const checks = cloud.account.server
      .inputs<SendCommandCommandInput>("ssm", "SendCommand", "Sweep")
      .map((c) => c.Comment);
    expect(checks).toContain(`labfleet ${W} ${mine}: health check`);

    // The claimed lab breaks: two failing sweeps flag it, and the sweeper moves its student.
    rmSync(join(cloud.account.ec2.instanceOf(W, mine).home, "lab", "built"));
    const swapped = await waitFor(
      "the sweeper to swap the broken lab",
      async () => {
        const r = await sweep();
        return r.health?.swapped.length ? r : undefined;
      },
      60_000,
    );
    expect(swapped.health?.swapped).toEqual([`${W}/${mine}->${other}`]);
    const after = await s.get(link);
    expect(after.status).toBe(200);
    expect(after.text).toContain(`s3cret-${other}`);

    // The old lab is rebuilt by a retry run and is ready again, unclaimed.
    const runs = (await cloud.api(`/${W}`)).body.runs as { id: string; kind: string }[];
    const retry = runs.find((r) => r.kind === "retry");
    expect(retry).toBeDefined();
    expect((await cloud.runToEnd(W, retry?.id as string, 120_000)).state).toBe("succeeded");
    const hosts = (await cloud.api(`/${W}`)).body.hostList as {
      id: string;
      state: string;
      health?: unknown;
    }[];
    expect(hosts.find((h) => h.id === mine)).toMatchObject({ state: "ready" });
    const status = (await cloud.api(`/${W}/portal/status`)).body;
    expect(status.claims.map((c: { lab: string }) => c.lab)).toEqual([other]);
    const events = (await cloud.api(`/${W}/events`)).body.events as { type: string; detail: unknown }[];
    expect(events.map((e) => e.type)).toEqual(expect.arrayContaining(["lab.unhealthy", "lab.swapped"]));
    expect(JSON.stringify(events)).not.toContain("ada@example.test");
  });

  it("the Sweep function's role allowed every call the health pass made", () => {
    const pairs = cloud.account.actionPairs().filter((p) => p.principal === "Sweep");
    expect(pairs.map((p) => p.action)).toEqual(
      expect.arrayContaining(["ssm:SendCommand", "ssm:GetCommandInvocation", "states:StartExecution"]),
    );
    expect(pairs.filter((p) => p.denied > 0)).toEqual([]);
    expect(cloud.account.server.failures).toEqual([]);
  });
});
