import type { TerminateInstancesCommandInput } from "@aws-sdk/client-ec2";
import { expect } from "vitest";
import { waitFor } from "../runtime.ts";
import { awsWorkshopYaml, type Cloud } from "./cloud.ts";

/**
 * The two ends of a large fleet's life on the AWS double, as the scale tests check them: `up` of an instant lab
 * to every host ready, and the teardown to every instance terminated with a receipt that leaves nothing.
 */

/** Submits an aws workshop of `count` hosts of the instant lab and runs `up` until every host is ready. */
export async function upFleet(
  cloud: Cloud,
  o: { name: string; count: number; concurrency: number; timeoutMinutes: number; runTimeoutMs: number },
): Promise<{ runId: string; since: number }> {
  const yaml = awsWorkshopYaml({
    name: o.name,
    source: cloud.lab("instant"),
    count: o.count,
    pollSeconds: 5,
    timeoutMinutes: o.timeoutMinutes,
    extraLab: `concurrency: ${o.concurrency}`,
  });
  expect((await cloud.api("", { yaml })).status).toBe(201);
  const since = Date.now();
  const up = await cloud.api(`/${o.name}/up`, {});
  expect(up.status, JSON.stringify(up.body)).toBe(202);
  const run = await cloud.runToEnd(o.name, up.body.run.id, o.runTimeoutMs);
  expect(run.state, JSON.stringify(run)).toBe("succeeded");
  const s = (await cloud.api(`/${o.name}`)).body;
  expect(s.hosts).toEqual({ total: o.count, ready: o.count, failed: 0 });
  return { runId: up.body.run.id, since };
}

/**
 * Tears the workshop down and waits until every instance is terminated and the receipt is written: nothing
 * left, every instance removed. Answers the TerminateInstances requests Deprovision made, and the receipt.
 */
export async function tearDownFleet(
  cloud: Cloud,
  o: { name: string; count: number; runTimeoutMs: number; waitMs: number },
): Promise<{
  terminated: TerminateInstancesCommandInput[];
  // biome-ignore lint/suspicious/noExplicitAny: the receipt's fields are checked one by one by the tests
  receipt: any;
}> {
  const down = await cloud.api(`/${o.name}/teardown`, {});
  expect(down.status, JSON.stringify(down.body)).toBe(202);
  expect((await cloud.runToEnd(o.name, down.body.run.id, o.runTimeoutMs)).state).toBe("succeeded");
  const terminated = cloud.account.server.inputs<TerminateInstancesCommandInput>(
    "ec2",
    "TerminateInstances",
    "Deprovision",
  );
  await waitFor(
    "every instance terminated",
    () =>
      [...cloud.account.ec2.instances.values()].every((i) => cloud.account.ec2.stateOf(i) === "terminated") ||
      undefined,
    o.waitMs,
  );
  const receipt = await waitFor(
    "the teardown's receipt",
    async () => {
      const r = await cloud.api(`/${o.name}/receipt`);
      return r.status === 200 ? r.body.receipt : undefined;
    },
    o.waitMs,
  );
  expect(receipt.left).toEqual([]);
  expect(receipt.removed.filter((e: { kind: string }) => e.kind === "instance")).toHaveLength(o.count);
  return { terminated, receipt };
}
