import type { SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Cloud, invocationsSince, startCloud } from "../harness/aws/cloud.ts";
import { tearDownFleet, upFleet } from "../harness/aws/fleet-runs.ts";

/**
 * A 500-host workshop (the most a workshop may have) in the cloud, on the AWS double with the Lambda bundles as
 * SST builds them, its EC2 and Parameter Store rates always on, and an instant lab: `up` launches 500 instances
 * at RunInstances' rate, deploys them in 100 Deploy Map items of 5 hosts, polls them 50 per SendCommand, and
 * gets every lab ready in one execution well inside Step Functions' history quota, with each function's longest
 * invocation under half its timeout (a poll stops starting hosts at half); the instructor's fleet view answers in pages; the teardown terminates the
 * instances 100 per request and leaves nothing behind. Each instance's commands are real processes on this
 * machine, so the run takes minutes: it runs alone, after the rest of the suite.
 */

const W = "conference-cloud";
const HOSTS = 500;
let cloud: Cloud;

beforeAll(async () => {
  // The account's On-Demand vCPU quota raised to fit the workshop (m7i.large: 2 vCPUs), as an operator would
  // ask Service Quotas before a large workshop.
  cloud = await startCloud({
    labs: ["instant"],
    vcpuQuota: 2 * HOSTS,
    ec2: { vcpuLimit: 2 * HOSTS },
  });
}, 180_000);

afterAll(async () => {
  await cloud?.close();
});

describe("a 500-host workshop on the AWS double", { timeout: 2_400_000 }, () => {
  it("comes up in one run within AWS's limits, pages its fleet view, and tears down cleanly", async () => {
    const { runId, since } = await upFleet(cloud, {
      name: W,
      count: HOSTS,
      concurrency: 40,
      timeoutMinutes: 60,
      runTimeoutMs: 2_000_000,
    });

    const server = cloud.account.server;
    // No call was denied by IAM, and the double never failed.
    expect(
      server.calls.filter((c) => c.outcome.includes("AccessDenied") || c.outcome === "UnauthorizedOperation"),
    ).toEqual([]);
    expect(server.failures).toEqual([]);

    // One execution: 100 Deploy Map items (5 hosts each), far inside the 25,000 history events it may hold.
    const execution = [...cloud.account.sfn.executions.values()].find((e) => e.name === runId);
    if (!execution) throw new Error("no execution for the run");
    const figures = cloud.account.sfn.figures(execution.executionArn);
    expect(figures.status).toBe("SUCCEEDED");
    expect(figures.historyEvents).toBeLessThan(25_000 / 10);
    const deployHost = cloud.account.deployed.functionName("DeployHost");
    const deploys = cloud.account.lambda.invocations.filter(
      (i) => i.functionName === deployHost && i.start >= since,
    );
    expect(deploys).toHaveLength(HOSTS / 5);

    // Each function's longest invocation stayed under half its timeout, and none failed.
    const { longest, notOk } = invocationsSince(cloud.account, since);
    expect(notOk).toEqual([]);
    expect([...longest.keys()]).toEqual(expect.arrayContaining(["Provision", "DeployHost", "Poll"]));
    // A poll stops starting hosts once half its time is spent (shared/runtime/deadline.ts); the hosts it is
    // reading then still finish, so a poll may end a little past half. Every other function ends inside half.
    for (const [name, { ms, timeoutMs }] of longest)
      expect(ms, name).toBeLessThan(timeoutMs * (name === "Poll" ? 0.6 : 0.5));
    console.info(
      `500 hosts on the AWS double: ${[...longest].map(([n, { ms, timeoutMs }]) => `${n} ${Math.round((100 * ms) / timeoutMs)}%`).join(", ")} of timeout; ${figures.transitions} transitions, ${figures.historyEvents} history events`,
    );

    // The polls' probes went many instances per SendCommand (50 at most): a poll probes every host first, side
    // by side, then reads health and access where a lab has finished.
    const probes = server
      .inputs<SendCommandCommandInput>("ssm", "SendCommand", "Poll")
      .filter((p) => p.Comment?.endsWith(": probe lab"));
    const sizes = probes.map((p) => p.InstanceIds?.length ?? 0);
    const probed = sizes.reduce((a, b) => a + b, 0);
    console.info(`probe commands: ${probes.length} for ${probed} probes (sizes ${sizes.join(" ")})`);
    expect(probed).toBeGreaterThanOrEqual(HOSTS);
    expect(Math.max(...sizes)).toBe(50);
    expect(probes.length).toBeLessThan(probed / 2);

    // The fleet view: 100 labs a page, followed to the end, every lab once, with the whole fleet's counts.
    const seen = new Set<string>();
    let cursor: string | undefined;
    let pages = 0;
    do {
      const res = await cloud.api(`/${W}/fleet${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ""}`);
      expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200);
      expect(res.body.labs.length).toBeLessThanOrEqual(100);
      expect(res.body.counts.ready).toBe(HOSTS);
      for (const l of res.body.labs) seen.add(l.id);
      cursor = res.body.page?.next;
      pages++;
    } while (cursor && pages < 10);
    expect(seen.size).toBe(HOSTS);
    expect(pages).toBe(5);

    // The teardown: 100 instances per TerminateInstances, every instance gone, nothing left.
    const { terminated } = await tearDownFleet(cloud, {
      name: W,
      count: HOSTS,
      runTimeoutMs: 600_000,
      waitMs: 120_000,
    });
    expect(terminated.map((t) => t.InstanceIds?.length)).toEqual([100, 100, 100, 100, 100]);
  });
});
