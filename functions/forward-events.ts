import { EventBridgeClient } from "@aws-sdk/client-eventbridge";
import { clientOptions } from "../shared/cloud/clients.ts";
import { CLOUD_ENV } from "../shared/cloud/env.ts";
import { forwardEvents, type StreamRecord } from "../shared/cloud/event-bus.ts";

let client: EventBridgeClient | undefined;

/**
 * The table stream's subscriber (cloud only): puts each new event record on the workshop events bus, so users
 * can subscribe to host ready/failed, lab claimed and workshop torn down. Needs no table access at all.
 */
export async function handler(event: { Records?: StreamRecord[] }): Promise<{ forwarded: number }> {
  const bus = process.env[CLOUD_ENV.eventBus];
  if (!bus) throw new Error(`${CLOUD_ENV.eventBus} is not set (sst.config.ts sets it)`);
  client ??= new EventBridgeClient(clientOptions(process.env.AWS_REGION));
  return forwardEvents(client, bus, event.Records ?? []);
}
