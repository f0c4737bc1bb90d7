import type { Tag } from "@aws-sdk/client-ec2";
import type { Workshop } from "../workshop/schema.ts";

/**
 * What every part of the EC2 provider shares: the ownership tags, the provider section's type and a few
 * helpers. The tags are the only proof that labfleet made a resource, and which stage of it: reuse, teardown,
 * the sweeper and security-group cleanup look resources up by them (`ManagedBy`, `labfleet-stage`,
 * `labfleet-workshop`, and for hosts `labfleet-host-id`) and re-check them on every resource EC2 returns
 * before touching it.
 */

export const OWNER_TAG = { key: "ManagedBy", value: "labfleet" } as const;
/** The deployment stage that made it: two stages in one account never share, see, sweep or delete each other's. */
export const STAGE_TAG = "labfleet-stage";
export const WORKSHOP_TAG = "labfleet-workshop";
export const HOST_ID_TAG = "labfleet-host-id";
export const EXPIRY_TAG = "labfleet-expiry";
/** On a managed security group: when labfleet created it (the sweeper leaves young groups alone). */
export const CREATED_TAG = "labfleet-created";

/** A workshop's provider section once it is known to be the EC2 provider's. */
export type AwsSpec = Extract<Workshop["provider"], { type: "aws" }>;

/** The most ids (instances, host ids) labfleet puts in one EC2 call or one filter. */
export const FILTER_CHUNK = 100;

export function tagValue(tags: Tag[] | undefined, key: string): string | undefined {
  return tags?.find((t) => t.Key === key)?.Value;
}

export function chunks<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** The AWS error name (`InvalidGroup.Duplicate`, `DependencyViolation`...) of anything thrown. */
export function errorName(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "name" in err ? String(err.name) : undefined;
}

/** A strict ISO-8601 UTC time, as labfleet writes its expiry tags; anything else is garbled. */
const ISO_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,3})?Z$/;

export function parseIsoTime(value: string | undefined): Date | undefined {
  if (value === undefined || !ISO_UTC.test(value)) return undefined;
  const ms = Date.parse(value);
  return Number.isNaN(ms) ? undefined : new Date(ms);
}
