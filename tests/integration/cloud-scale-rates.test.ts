import type { RunInstancesCommandInput } from "@aws-sdk/client-ec2";
import type { SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Cloud, invocationsSince, startCloud } from "../harness/aws/cloud.ts";
import { tearDownFleet, upFleet } from "../harness/aws/fleet-runs.ts";
import { EC2_REQUEST_BUCKETS } from "../harness/aws/rate-limits.ts";

/**
 * A fleet larger than EC2's RunInstances burst on the AWS double, whose EC2 and Parameter Store rates are
 * always on (tests/harness/aws/rate-limits.ts, from AWS's published token buckets), with the Lambda bundles as
 * SST builds them and an instant lab: Provision launches one instance per host at EC2's refill rate, so no host
 * fails on RequestLimitExceeded; every lab gets ready; each function's longest invocation stays under half its
 * timeout; the polls probe many instances per SendCommand; the teardown terminates the instances in one request
 * and leaves nothing behind.
 */

const W = "cloud-rates";
const HOSTS = 30;
let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud({ labs: ["instant"] });
}, 180_000);

afterAll(async () => {
  await cloud?.close();
});

describe("a fleet past EC2's RunInstances burst on the AWS double", { timeout: 600_000 }, () => {
  it("launches at EC2's rate, gets every lab ready within the functions' timeouts, and tears down cleanly", async () => {
    const { since } = await upFleet(cloud, {
      name: W,
      count: HOSTS,
      concurrency: 10,
      timeoutMinutes: 20,
      runTimeoutMs: 480_000,
    });

    // One RunInstances per host went through; none took more than EC2's burst at once.
    const server = cloud.account.server;
    const launches = server.calls.filter(
      (c) => c.operation === "RunInstances" && c.principal === "Provision",
    );
    const launched = server.inputs<RunInstancesCommandInput>("ec2", "RunInstances", "Provision");
    expect(launched).toHaveLength(HOSTS);
    expect(new Set(launched.map((i) => i.ClientToken)).size).toBe(HOSTS);
    // Whatever EC2 refused was RequestLimitExceeded, retried by the SDK: it failed no host.
    for (const c of launches.filter((x) => x.outcome !== "ok"))
      expect(c.outcome).toBe("RequestLimitExceeded");
    const okAt = launches.filter((c) => c.outcome === "ok").map((c) => c.at);
    const spanSeconds = (Math.max(...okAt) - Math.min(...okAt)) / 1000;
    const { capacity, refill } = EC2_REQUEST_BUCKETS.RunInstances;
    expect(spanSeconds).toBeGreaterThanOrEqual((HOSTS - capacity) / refill - 1);
    // No call of the run was denied by IAM, and the double never failed.
    expect(
      server.calls.filter((c) => c.outcome.includes("AccessDenied") || c.outcome === "UnauthorizedOperation"),
    ).toEqual([]);
    expect(server.failures).toEqual([]);

    // The polls' probes went to many instances per SendCommand (at most 50, SSM's limit), each instance with
    // its own invocation: fewer commands than probes.
    const probes = server
      .inputs<SendCommandCommandInput>("ssm", "SendCommand", "Poll")
      .filter((p) => p.Comment?.endsWith(": probe lab"));
    const probed = probes.reduce((n, p) => n + (p.InstanceIds?.length ?? 0), 0);
    expect(probed).toBeGreaterThanOrEqual(HOSTS);
    for (const p of probes) expect(p.InstanceIds?.length).toBeLessThanOrEqual(50);
    expect(probes.length).toBeLessThan(probed / 2);
    expect(
      probes.filter((p) => (p.InstanceIds?.length ?? 0) > 1).every((p) => !p.Comment?.includes("student-")),
    ).toBe(true);

    // Each function's longest invocation stayed under half its timeout.
    const { longest, notOk } = invocationsSince(cloud.account, since);
    expect(notOk).toEqual([]);
    expect([...longest.keys()]).toEqual(expect.arrayContaining(["Provision", "DeployHost", "Poll"]));
    for (const [name, { ms, timeoutMs }] of longest) expect(ms, name).toBeLessThan(timeoutMs / 2);

    // The teardown: one TerminateInstances for the fleet, every instance gone, nothing left.
    const { terminated, receipt } = await tearDownFleet(cloud, {
      name: W,
      count: HOSTS,
      runTimeoutMs: 240_000,
      waitMs: 60_000,
    });
    expect(terminated).toHaveLength(1);
    expect(terminated[0]?.InstanceIds).toHaveLength(HOSTS);
    expect(receipt.checkError).toBeUndefined();
  });
});
