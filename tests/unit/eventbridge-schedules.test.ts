import {
  ConflictException,
  CreateScheduleCommand,
  DeleteScheduleCommand,
  ResourceNotFoundException,
  SchedulerClient,
  UpdateScheduleCommand,
  ValidationException,
} from "@aws-sdk/client-scheduler";
import { mockClient } from "aws-sdk-client-mock";
import { beforeEach, describe, expect, it } from "vitest";
import { atExpression, EventBridgeScheduleMirror, scheduleName } from "../../shared/cloud/scheduler.ts";

const scheduler = mockClient(SchedulerClient);
const NOW = new Date("2026-03-02T09:00:00.000Z");
const SWEEP = "arn:aws:lambda:eu-west-1:123456789012:function:labfleet-prod-Sweep";
const ROLE = "arn:aws:iam::123456789012:role/labfleet-prod-scheduler";
const meta = { $metadata: {} };

function mirror(): EventBridgeScheduleMirror {
  return new EventBridgeScheduleMirror({
    client: new SchedulerClient({ region: "eu-west-1" }),
    group: "labfleet-prod",
    targetArn: SWEEP,
    roleArn: ROLE,
    clock: { now: () => NOW },
  });
}

/** The full definition every create and update sends for `k8s-intro` at `expression`. */
function definition(expression: string) {
  return {
    Name: "labfleet-teardown-k8s-intro",
    GroupName: "labfleet-prod",
    ScheduleExpression: expression,
    ScheduleExpressionTimezone: "UTC",
    Description: "labfleet: tear down workshop k8s-intro at its TTL",
    State: "ENABLED",
    FlexibleTimeWindow: { Mode: "OFF" },
    ActionAfterCompletion: "DELETE",
    Target: {
      Arn: SWEEP,
      RoleArn: ROLE,
      Input: JSON.stringify({ source: "labfleet.schedule", kind: "teardown", workshop: "k8s-intro" }),
    },
  };
}

beforeEach(() => {
  scheduler.reset();
});

describe("schedule names", () => {
  it("are labfleet-teardown-<workshop> for ordinary workshop names", () => {
    expect(scheduleName("k8s-intro")).toBe("labfleet-teardown-k8s-intro");
    const longest = "a".repeat(40);
    expect(scheduleName(longest)).toBe(`labfleet-teardown-${longest}`);
  });

  it("stay valid, short and distinct for names Scheduler would refuse, and never change", () => {
    const odd = ["Ünï cöde/ws", "x".repeat(80), `${"x".repeat(80)}y`, "a b", "a_b"];
    const names = odd.map(scheduleName);
    for (const n of names) {
      expect(n).toMatch(/^[0-9A-Za-z_.-]{1,64}$/);
      expect(n.startsWith("labfleet-teardown-")).toBe(true);
    }
    expect(new Set(names).size).toBe(odd.length);
    expect(scheduleName("a b")).not.toBe(scheduleName("a-b"));
    expect(odd.map(scheduleName)).toEqual(names);
  });
});

describe("at() expressions", () => {
  it("are UTC to the second, rounded up so the record is due when the schedule fires", () => {
    expect(atExpression(new Date("2026-03-02T15:30:00.000Z"), NOW)).toBe("at(2026-03-02T15:30:00)");
    expect(atExpression(new Date("2026-03-02T15:30:00.250Z"), NOW)).toBe("at(2026-03-02T15:30:01)");
  });

  it("lie at least a minute ahead: a past time would never fire", () => {
    expect(atExpression(new Date("2026-03-01T00:00:00.000Z"), NOW)).toBe("at(2026-03-02T09:01:00)");
  });
});

describe("the EventBridge schedule mirror", () => {
  it("creates a one-time schedule that invokes the sweeper with the workshop", async () => {
    scheduler.on(CreateScheduleCommand).resolves({ ...meta, ScheduleArn: "arn:schedule" });
    await mirror().put("k8s-intro", new Date("2026-03-02T15:30:00.000Z"));
    const calls = scheduler.calls();
    expect(calls).toHaveLength(1);
    expect(scheduler.commandCalls(CreateScheduleCommand)[0]?.args[0].input).toEqual(
      definition("at(2026-03-02T15:30:00)"),
    );
  });

  it("moves an existing schedule: CreateSchedule's conflict becomes UpdateSchedule with the full definition", async () => {
    scheduler.on(CreateScheduleCommand).rejects(
      new ConflictException({
        message: "Schedule already exists",
        Message: "Schedule already exists",
        $metadata: {},
      }),
    );
    scheduler.on(UpdateScheduleCommand).resolves({ ...meta, ScheduleArn: "arn:schedule" });
    await mirror().put("k8s-intro", new Date("2026-03-02T17:30:00.000Z"));
    expect(scheduler.commandCalls(CreateScheduleCommand)).toHaveLength(1);
    const updates = scheduler.commandCalls(UpdateScheduleCommand);
    expect(updates).toHaveLength(1);
    expect(updates[0]?.args[0].input).toEqual(definition("at(2026-03-02T17:30:00)"));
  });

  it("lets any other error through, without updating", async () => {
    scheduler
      .on(CreateScheduleCommand)
      .rejects(new ValidationException({ message: "bad role", Message: "bad role", $metadata: {} }));
    await expect(mirror().put("k8s-intro", new Date("2026-03-02T15:30:00.000Z"))).rejects.toThrow("bad role");
    expect(scheduler.commandCalls(UpdateScheduleCommand)).toHaveLength(0);
  });

  it("deletes the schedule, and a schedule that is already gone is fine", async () => {
    scheduler
      .on(DeleteScheduleCommand)
      .resolvesOnce(meta)
      .rejectsOnce(
        new ResourceNotFoundException({
          message: "Schedule not found",
          Message: "Schedule not found",
          $metadata: {},
        }),
      );
    await mirror().remove("k8s-intro");
    await mirror().remove("k8s-intro");
    const deletes = scheduler.commandCalls(DeleteScheduleCommand);
    expect(deletes.map((c) => c.args[0].input)).toEqual([
      { Name: "labfleet-teardown-k8s-intro", GroupName: "labfleet-prod" },
      { Name: "labfleet-teardown-k8s-intro", GroupName: "labfleet-prod" },
    ]);
  });

  it("lets a failed delete through", async () => {
    scheduler
      .on(DeleteScheduleCommand)
      .rejects(new ValidationException({ message: "throttled", Message: "throttled", $metadata: {} }));
    await expect(mirror().remove("k8s-intro")).rejects.toThrow("throttled");
  });
});
