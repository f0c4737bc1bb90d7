import {
  InvalidInstanceId,
  SendCommandCommand,
  type SendCommandCommandInput,
  SSMClient,
} from "@aws-sdk/client-ssm";
import { mockClient } from "aws-sdk-client-mock";
import { beforeEach, describe, expect, it } from "vitest";
import { SSM_SEND_MAX_TARGETS, type SsmSend, SsmSendBatcher } from "../../shared/transports/ssm-batch.ts";

const ssm = mockClient(SSMClient);
const client = new SSMClient({
  region: "eu-west-1",
  credentials: { accessKeyId: "x", secretAccessKey: "y" },
});

let sent: SendCommandCommandInput[];

beforeEach(() => {
  ssm.reset();
  sent = [];
  ssm.on(SendCommandCommand).callsFake((input: SendCommandCommandInput) => {
    sent.push(input);
    return { Command: { CommandId: `cmd-${sent.length}` } };
  });
});

const instance = (n: number) => `i-${n.toString(16).padStart(17, "0")}`;
const send = (n: number, script = "probe"): SsmSend => ({
  instanceId: instance(n),
  script,
  executionTimeoutS: 60,
  deliveryTimeoutS: 120,
  comment: `labfleet ws lab-${n}: probe lab`,
  sharedComment: "labfleet ws: probe lab",
});

describe("SsmSendBatcher", () => {
  it("sends one command per 50 instances for the same script sent at once, each instance its own invocation", async () => {
    const batcher = new SsmSendBatcher(client);
    const ids = await Promise.all(Array.from({ length: 120 }, (_, i) => batcher.send(send(i))));
    expect(sent.map((s) => s.InstanceIds?.length)).toEqual([50, 50, 20]);
    expect(SSM_SEND_MAX_TARGETS).toBe(50);
    // Every instance is in exactly one command, and its send answers that command's id.
    const commandOf = new Map<string, string>();
    sent.forEach((s, i) => {
      for (const id of s.InstanceIds ?? []) commandOf.set(id, `cmd-${i + 1}`);
    });
    expect(commandOf.size).toBe(120);
    ids.forEach((id, n) => {
      expect(id).toBe(commandOf.get(instance(n)));
    });
    // A shared command names the workshop and the step, not one host; its parameters are the script's.
    for (const s of sent) {
      expect(s.Comment).toBe("labfleet ws: probe lab");
      expect(s.Parameters).toEqual({ commands: ["probe"], executionTimeout: ["60"] });
      expect(s.TimeoutSeconds).toBe(120);
      expect(s.DocumentName).toBe("AWS-RunShellScript");
    }
  });

  it("keeps different scripts and timeouts in different commands", async () => {
    const batcher = new SsmSendBatcher(client);
    await Promise.all([
      batcher.send(send(1, "a")),
      batcher.send(send(2, "b")),
      batcher.send(send(3, "a")),
      batcher.send({ ...send(4, "a"), executionTimeoutS: 90 }),
    ]);
    const byScript = sent.map((s) => [
      s.Parameters?.commands?.[0],
      s.Parameters?.executionTimeout?.[0],
      s.InstanceIds,
    ]);
    expect(byScript).toEqual(
      expect.arrayContaining([
        ["a", "60", [instance(1), instance(3)]],
        ["b", "60", [instance(2)]],
        ["a", "90", [instance(4)]],
      ]),
    );
    expect(sent).toHaveLength(3);
    // A command to one instance names its host.
    expect(sent.find((s) => s.Parameters?.commands?.[0] === "b")?.Comment).toBe(
      "labfleet ws lab-2: probe lab",
    );
  });

  it("sends a second send to the same instance in a command of its own", async () => {
    const batcher = new SsmSendBatcher(client);
    const [a, b] = await Promise.all([batcher.send(send(7)), batcher.send(send(7))]);
    expect(sent.map((s) => s.InstanceIds)).toEqual([[instance(7)], [instance(7)]]);
    expect(a).not.toBe(b);
  });

  it("sends each instance alone when SSM refuses the shared command, so one bad instance fails only itself", async () => {
    ssm.reset();
    sent = [];
    const bad = instance(2);
    ssm.on(SendCommandCommand).callsFake((input: SendCommandCommandInput) => {
      sent.push(input);
      if (input.InstanceIds?.includes(bad)) {
        throw new InvalidInstanceId({ $metadata: {}, message: `Instances [[${bad}]] not in a valid state` });
      }
      return { Command: { CommandId: `cmd-${sent.length}` } };
    });
    const batcher = new SsmSendBatcher(client);
    const results = await Promise.allSettled([1, 2, 3].map((n) => batcher.send(send(n))));
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    const refused = results[1] as PromiseRejectedResult;
    expect((refused.reason as Error).name).toBe("InvalidInstanceId");
    // The shared command first, then one per instance, each naming its own host.
    expect(sent[0]?.InstanceIds).toEqual([instance(1), instance(2), instance(3)]);
    expect(sent.slice(1).map((s) => [s.InstanceIds, s.Comment])).toEqual(
      expect.arrayContaining([
        [[instance(1)], "labfleet ws lab-1: probe lab"],
        [[instance(2)], "labfleet ws lab-2: probe lab"],
        [[instance(3)], "labfleet ws lab-3: probe lab"],
      ]),
    );
    expect(sent).toHaveLength(4);
  });

  it("sends what comes after the window in a new command", async () => {
    const batcher = new SsmSendBatcher(client, { windowMs: 5 });
    await batcher.send(send(1));
    await batcher.send(send(2));
    expect(sent.map((s) => s.InstanceIds)).toEqual([[instance(1)], [instance(2)]]);
  });
});
