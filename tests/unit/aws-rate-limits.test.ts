import { describe, expect, it } from "vitest";
import {
  batchesOf,
  Pacer,
  RUN_INSTANCES_PACE,
  RUN_INSTANCES_RATE,
} from "../../shared/providers/aws-rates.ts";
import { EC2_REQUEST_BUCKETS, RateLimits } from "../harness/aws/rate-limits.ts";

/** The AWS double's published request rates, on a clock the test moves, and the provider's own pacing. */

function limits() {
  let t = 0;
  const rl = new RateLimits(() => t);
  return {
    rl,
    advance: (ms: number) => {
      t += ms;
    },
    /** How many of `n` calls in a row are admitted. */
    burst: (service: string, op: string, n: number, input: unknown = {}) => {
      let ok = 0;
      for (let i = 0; i < n; i++) if (!rl.admit(service, op, input)) ok++;
      return ok;
    },
  };
}

describe("the AWS double's EC2 token buckets", () => {
  it("RunInstances: 5 requests at once, then 2 a second; refused with RequestLimitExceeded (HTTP 503)", () => {
    const { rl, burst, advance } = limits();
    const one = { MinCount: 1, MaxCount: 1 };
    expect(burst("ec2", "RunInstances", 10, one)).toBe(5);
    const e = rl.admit("ec2", "RunInstances", one);
    expect(e).toMatchObject({
      code: "RequestLimitExceeded",
      message: "Request limit exceeded.",
      status: 503,
    });
    advance(1000);
    expect(burst("ec2", "RunInstances", 10, one)).toBe(2);
    advance(60_000);
    expect(burst("ec2", "RunInstances", 10, one)).toBe(5);
    expect(rl.stats.refused["ec2:RunInstances"]).toBe(5 + 1 + 8 + 5);
  });

  it("RunInstances' resource bucket: 1,000 instances at once, then 2 a second", () => {
    const { rl, advance } = limits();
    expect(rl.admit("ec2", "RunInstances", { MinCount: 1, MaxCount: 1000 })).toBeUndefined();
    advance(1000);
    // A request token is there, but not 3 instances' worth.
    expect(rl.admit("ec2", "RunInstances", { MinCount: 3, MaxCount: 3 })?.code).toBe("RequestLimitExceeded");
    expect(rl.admit("ec2", "RunInstances", { MinCount: 2, MaxCount: 2 })).toBeUndefined();
  });

  it("TerminateInstances: 100 requests then 5 a second, and 1,000 instances then 20 a second", () => {
    const { rl, burst, advance } = limits();
    expect(burst("ec2", "TerminateInstances", 120, { InstanceIds: ["i-1"] })).toBe(100);
    advance(60_000);
    const ids = Array.from({ length: 1000 }, (_, i) => `i-${i}`);
    expect(rl.admit("ec2", "TerminateInstances", { InstanceIds: ids })).toBeUndefined();
    advance(1000);
    expect(rl.admit("ec2", "TerminateInstances", { InstanceIds: ids.slice(0, 21) })?.code).toBe(
      "RequestLimitExceeded",
    );
    expect(rl.admit("ec2", "TerminateInstances", { InstanceIds: ids.slice(0, 20) })).toBeUndefined();
  });

  it("DescribeInstances without a filter or pagination draws on the smaller bucket (50, 10 a second)", () => {
    const { burst } = limits();
    expect(burst("ec2", "DescribeInstances", 200, { InstanceIds: ["i-1"] })).toBe(50);
    // Filtered calls have a bucket of their own, of the non-mutating size.
    expect(burst("ec2", "DescribeInstances", 200, { Filters: [{ Name: "tag:x", Values: ["y"] }] })).toBe(100);
    expect(burst("ec2", "DescribeImages", 200, {})).toBe(EC2_REQUEST_BUCKETS.nonMutating.capacity);
  });

  it("each API has its own bucket: mutating (50), resource-intensive (50), CreateTags (100)", () => {
    const { burst } = limits();
    expect(burst("ec2", "CreateSecurityGroup", 80)).toBe(50);
    expect(burst("ec2", "DeleteSecurityGroup", 80)).toBe(50);
    expect(burst("ec2", "AuthorizeSecurityGroupIngress", 80)).toBe(50);
    expect(burst("ec2", "CreateTags", 150)).toBe(100);
  });
});

describe("the AWS double's Parameter Store throughput", () => {
  it("40 reads a second shared by GetParameter and GetParameters, refused with ThrottlingException", () => {
    const { rl, burst, advance } = limits();
    expect(burst("ssm", "GetParameter", 30)).toBe(30);
    expect(burst("ssm", "GetParameters", 30)).toBe(10);
    expect(rl.admit("ssm", "GetParameter", {})).toMatchObject({ code: "ThrottlingException", status: 400 });
    advance(500);
    expect(burst("ssm", "GetParameter", 40)).toBe(20);
    // Run Command has no published rate: not limited.
    expect(burst("ssm", "GetCommandInvocation", 2000)).toBe(2000);
    expect(burst("ssm", "SendCommand", 2000)).toBe(2000);
  });
});

describe("the provider's RunInstances pacing", () => {
  it("lets 5 launches go at once, then one every 500 ms", async () => {
    let t = 0;
    const slept: number[] = [];
    const pacer = new Pacer(
      RUN_INSTANCES_RATE,
      async (ms) => {
        slept.push(ms);
        t += ms;
      },
      () => t,
    );
    await Promise.all(Array.from({ length: 9 }, () => pacer.take()));
    expect(slept).toEqual([500, 500, 500, 500]);
    expect(t).toBe(2000);
  });

  it("keeps the double's RunInstances bucket from refusing 40 paced launches whose first requests arrive late", async () => {
    let t = 0;
    const rl = new RateLimits(() => t);
    const pacer = new Pacer(
      RUN_INSTANCES_PACE,
      async (ms) => {
        t += ms;
      },
      () => t,
    );
    const refused: string[] = [];
    // Each request reaches EC2 up to 400 ms after it was paced, the first ones the latest.
    const arrivals: number[] = [];
    for (let i = 0; i < 40; i++) {
      await pacer.take();
      arrivals.push(t + (i < 4 ? 400 : 0));
    }
    for (const at of arrivals.sort((a, b) => a - b)) {
      const saved = t;
      t = at;
      const e = rl.admit("ec2", "RunInstances", { MinCount: 1, MaxCount: 1 });
      if (e) refused.push(e.code);
      t = saved;
    }
    expect(refused).toEqual([]);
    expect(t).toBe(((40 - 4) / 2) * 1000);
  });
});

describe("batchesOf", () => {
  it("packs items in order up to a total weight, one item at least", () => {
    expect(batchesOf([1, 2, 3, 4, 5], () => 1, 2)).toEqual([[1, 2], [3, 4], [5]]);
    expect(batchesOf(["a", "b", "c"], (x) => (x === "b" ? 5 : 1), 3)).toEqual([["a"], ["b"], ["c"]]);
    expect(batchesOf([], () => 1, 3)).toEqual([]);
  });
});
