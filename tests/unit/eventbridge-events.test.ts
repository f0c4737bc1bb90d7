import { EventBridgeClient, PutEventsCommand } from "@aws-sdk/client-eventbridge";
import { marshall } from "@aws-sdk/util-dynamodb";
import { mockClient } from "aws-sdk-client-mock";
import { beforeEach, describe, expect, it } from "vitest";
import { EVENT_SOURCE, eventsOf, forwardEvents } from "../../shared/cloud/event-bus.ts";

const bridge = mockClient(EventBridgeClient);
const BUS = "labfleet-prod-events";

/** A stream record as DynamoDB sends it for an item ElectroDB wrote. */
function record(eventName: string, item: Record<string, unknown>) {
  return { eventName, dynamodb: { NewImage: marshall(item, { removeUndefinedValues: true }) } };
}
const event = (i: number, type = "host.ready") => ({
  __edb_e__: "event",
  __edb_v__: "1",
  pk: "$labfleet#workshop_ws1",
  sk: `$event_1#eventid_01JEVENT${String(i).padStart(18, "0")}`,
  workshop: "ws1",
  eventId: `01JEVENT${String(i).padStart(18, "0")}`,
  type,
  at: "2026-03-02T09:00:00.000Z",
  hostId: `student-${String(i).padStart(2, "0")}`,
  detail: { phase: "verify" },
  expiresAt: 1_800_000_000,
});

beforeEach(() => bridge.reset());

describe("the event forwarder", () => {
  it("takes only new event records from the stream", () => {
    const got = eventsOf([
      record("INSERT", event(1)),
      record("MODIFY", event(2)),
      record("INSERT", { __edb_e__: "host", workshop: "ws1", hostId: "student-01" }),
      record("REMOVE", event(3)),
    ]);
    expect(got.map((e) => e.eventId)).toEqual([event(1).eventId]);
  });

  it("puts each event on the bus with source labfleet, its type and a detail without store keys", async () => {
    bridge.on(PutEventsCommand).resolves({ FailedEntryCount: 0, Entries: [{ EventId: "e1" }] });
    const r = await forwardEvents(new EventBridgeClient({ region: "eu-west-1" }), BUS, [
      record("INSERT", event(1, "host.failed")),
    ]);
    expect(r).toEqual({ forwarded: 1 });
    const calls = bridge.commandCalls(PutEventsCommand);
    expect(calls).toHaveLength(1);
    expect(calls[0]?.args[0].input).toEqual({
      Entries: [
        {
          EventBusName: BUS,
          Source: EVENT_SOURCE,
          DetailType: "host.failed",
          Time: new Date("2026-03-02T09:00:00.000Z"),
          Detail: JSON.stringify({
            id: event(1).eventId,
            workshop: "ws1",
            type: "host.failed",
            at: "2026-03-02T09:00:00.000Z",
            hostId: "student-01",
            runId: null,
            detail: { phase: "verify" },
          }),
        },
      ],
    });
  });

  it("sends at most 10 entries per call, resends refused ones once, and throws when they stay refused", async () => {
    bridge.on(PutEventsCommand).resolves({ FailedEntryCount: 0, Entries: [] });
    const records = Array.from({ length: 23 }, (_, i) => record("INSERT", event(i + 1)));
    expect(await forwardEvents(new EventBridgeClient({}), BUS, records)).toEqual({ forwarded: 23 });
    expect(bridge.commandCalls(PutEventsCommand).map((c) => c.args[0].input.Entries?.length)).toEqual([
      10, 10, 3,
    ]);

    bridge.reset();
    bridge
      .on(PutEventsCommand)
      .resolvesOnce({ FailedEntryCount: 1, Entries: [{ EventId: "a" }, { ErrorCode: "InternalFailure" }] })
      .resolves({ FailedEntryCount: 0, Entries: [{ EventId: "b" }] });
    await forwardEvents(new EventBridgeClient({}), BUS, [
      record("INSERT", event(1)),
      record("INSERT", event(2)),
    ]);
    const retried = bridge.commandCalls(PutEventsCommand);
    expect(retried).toHaveLength(2);
    expect(retried[1]?.args[0].input.Entries?.map((e) => JSON.parse(e.Detail ?? "{}").id)).toEqual([
      event(2).eventId,
    ]);

    bridge.reset();
    bridge
      .on(PutEventsCommand)
      .resolves({ FailedEntryCount: 1, Entries: [{ ErrorCode: "ThrottlingException" }] });
    await expect(forwardEvents(new EventBridgeClient({}), BUS, [record("INSERT", event(1))])).rejects.toThrow(
      "EventBridge refused 1 of labfleet's events",
    );
    expect(bridge.commandCalls(PutEventsCommand)).toHaveLength(2);
  });
});
