import type { AttributeValue } from "@aws-sdk/client-dynamodb";
import {
  type EventBridgeClient,
  PutEventsCommand,
  type PutEventsRequestEntry,
} from "@aws-sdk/client-eventbridge";
import { unmarshall } from "@aws-sdk/util-dynamodb";
import { eventView } from "../fleet/events.ts";
import type { EventItem } from "../store/entities.ts";

/** The `source` of every event labfleet puts on its bus: subscribe with `{ "source": ["labfleet"] }`. */
export const EVENT_SOURCE = "labfleet";
/** PutEvents takes at most 10 entries per call. */
const BATCH = 10;

export interface StreamRecord {
  eventName?: "INSERT" | "MODIFY" | "REMOVE" | string;
  dynamodb?: { NewImage?: Record<string, AttributeValue> };
}

/** The event records a batch of table stream records created (ElectroDB marks each item with its entity). */
export function eventsOf(records: StreamRecord[]): EventItem[] {
  return records
    .filter((r) => r.eventName === "INSERT" && r.dynamodb?.NewImage?.__edb_e__?.S === "event")
    .map((r) => unmarshall(r.dynamodb?.NewImage ?? {}) as EventItem);
}

export function entryOf(e: EventItem, busName: string): PutEventsRequestEntry {
  return {
    EventBusName: busName,
    Source: EVENT_SOURCE,
    DetailType: e.type,
    Time: new Date(e.at),
    Detail: JSON.stringify(eventView(e)),
  };
}

/**
 * Puts a batch of stream records' events on the bus, 10 per call. Entries the bus refused are sent once
 * more; if some still fail, this throws, so Lambda retries the batch (consumers see an event at least once:
 * its `id` is stable, dedupe on it).
 */
export async function forwardEvents(
  client: EventBridgeClient,
  busName: string,
  records: StreamRecord[],
): Promise<{ forwarded: number }> {
  const entries = eventsOf(records).map((e) => entryOf(e, busName));
  for (let i = 0; i < entries.length; i += BATCH) {
    let batch = entries.slice(i, i + BATCH);
    for (let attempt = 0; attempt < 2 && batch.length > 0; attempt++) {
      const r = await client.send(new PutEventsCommand({ Entries: batch }));
      if (!r.FailedEntryCount) batch = [];
      else batch = batch.filter((_, j) => r.Entries?.[j]?.ErrorCode);
    }
    if (batch.length > 0) {
      throw new Error(`EventBridge refused ${batch.length} of labfleet's events; the batch will be retried`);
    }
  }
  return { forwarded: entries.length };
}
