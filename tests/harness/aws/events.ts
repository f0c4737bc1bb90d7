import { randomUUID } from "node:crypto";
import type { PutEventsCommandInput, PutEventsRequestEntry } from "@aws-sdk/client-eventbridge";
import { arn, type Call, FAKE_ACCOUNT_ID, FAKE_REGION, type Operations } from "./core.ts";

/**
 * EventBridge in the AWS double: event buses that keep what was put on them, and rules on them whose event
 * patterns are matched as EventBridge matches them (exact values, `prefix`, `anything-but`, `exists`, nested
 * objects; every field of the pattern must match) and whose targets (Lambda functions) are invoked with the
 * whole event. PutEvents authorizes `events:PutEvents` on each entry's bus (the `default` bus when none is
 * named), takes at most 10 entries per call, and reports per-entry failures as EventBridge does.
 *
 * AWS services put their own events on the default bus (Step Functions' execution status changes): `emit`.
 */

export interface BusEvent {
  version: "0";
  id: string;
  "detail-type": string;
  source: string;
  account: string;
  time: string;
  region: string;
  resources: string[];
  detail: unknown;
}

export interface Rule {
  name: string;
  bus: string;
  pattern: Record<string, unknown>;
  /** Invokes the rule's target with the event (the account routes it to the Lambda double). */
  target: (event: BusEvent) => Promise<void>;
}

/** Whether `value` matches one pattern element list (EventBridge's matching for a leaf). */
function leafMatches(pattern: unknown[], value: unknown): boolean {
  const values = Array.isArray(value) ? value : [value];
  return pattern.some((p) => {
    if (p !== null && typeof p === "object") {
      const o = p as Record<string, unknown>;
      if ("prefix" in o) return values.some((v) => typeof v === "string" && v.startsWith(String(o.prefix)));
      if ("anything-but" in o) {
        const but = Array.isArray(o["anything-but"]) ? (o["anything-but"] as unknown[]) : [o["anything-but"]];
        return value !== undefined && values.every((v) => !but.includes(v));
      }
      if ("exists" in o) return (value !== undefined) === Boolean(o.exists);
      throw new Error(`the AWS double does not match the pattern element ${JSON.stringify(p)}`);
    }
    return values.some((v) => v === p);
  });
}

export function matches(pattern: Record<string, unknown>, event: Record<string, unknown>): boolean {
  return Object.entries(pattern).every(([k, p]) => {
    const v = event[k];
    if (Array.isArray(p)) return leafMatches(p, v);
    if (p !== null && typeof p === "object") {
      return (
        v !== null &&
        typeof v === "object" &&
        matches(p as Record<string, unknown>, v as Record<string, unknown>)
      );
    }
    throw new Error(`an event pattern's values are arrays or objects, got ${JSON.stringify(p)} at ${k}`);
  });
}

export class FakeEventBridge {
  /** Every event put on a bus, by bus name. */
  readonly buses = new Map<string, BusEvent[]>();
  readonly rules: Rule[] = [];
  /** Rule targets that failed for good (nothing, in a good run). */
  readonly targetFailures: string[] = [];
  /** Rule targets still running (awaited by `settle`). */
  private readonly pending = new Set<Promise<void>>();
  readonly operations: Operations;

  constructor(busNames: string[]) {
    for (const b of ["default", ...busNames]) this.buses.set(b, []);
    this.operations = {
      PutEvents: async (input: PutEventsCommandInput, call: Call) => {
        const entries = input.Entries ?? [];
        if (entries.length < 1 || entries.length > 10) {
          throw new Error(`PutEvents takes 1 to 10 entries, got ${entries.length}`);
        }
        const busOf = (e: PutEventsRequestEntry) =>
          (e.EventBusName ?? "default").replace(/^arn:.*:event-bus\//, "");
        await call.authorize(
          [...new Set(entries.map(busOf))].map((b) => ({
            action: "events:PutEvents",
            resource: arn.eventBus(b),
          })),
        );
        let failed = 0;
        const results = entries.map((e) => {
          const bus = busOf(e);
          if (!this.buses.has(bus)) {
            failed++;
            return { ErrorCode: "NotFoundException", ErrorMessage: `Event bus ${bus} does not exist.` };
          }
          if (!e.Source || !e.DetailType || e.Detail === undefined) {
            failed++;
            return {
              ErrorCode: "InvalidArgument",
              ErrorMessage: "Parameters Source, DetailType and Detail are required.",
            };
          }
          const event = this.put(bus, {
            source: e.Source,
            "detail-type": e.DetailType,
            detail: JSON.parse(e.Detail),
            resources: e.Resources ?? [],
            ...(e.Time ? { time: new Date(e.Time).toISOString() } : {}),
          });
          return { EventId: event.id };
        });
        return { FailedEntryCount: failed, Entries: results };
      },
    };
  }

  /** An AWS service's own event on the default bus (no IAM: services put their events themselves). */
  emit(e: { source: string; "detail-type": string; detail: unknown; resources?: string[] }): BusEvent {
    return this.put("default", { ...e, resources: e.resources ?? [] });
  }

  /**
   * Invokes a rule's target as EventBridge does: a throttled invocation (Lambda's TooManyRequestsException) is
   * retried with backoff (EventBridge keeps retrying for up to 24 hours; the double tries 8 times); a target that
   * still fails is recorded in `targetFailures`.
   */
  private async deliver(rule: Rule, event: BusEvent): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await rule.target(event);
        return;
      } catch (err) {
        const throttled = (err as { code?: string }).code === "TooManyRequestsException";
        if (!throttled || attempt >= 8) {
          this.targetFailures.push(`${rule.name}: ${err instanceof Error ? err.message : String(err)}`);
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, 100 * 2 ** attempt));
      }
    }
  }

  /** Waits for every rule target started so far. */
  async settle(): Promise<void> {
    while (this.pending.size > 0) await Promise.allSettled([...this.pending]);
  }

  private put(
    bus: string,
    e: { source: string; "detail-type": string; detail: unknown; resources: string[]; time?: string },
  ): BusEvent {
    const event: BusEvent = {
      version: "0",
      id: randomUUID(),
      "detail-type": e["detail-type"],
      source: e.source,
      account: FAKE_ACCOUNT_ID,
      time: e.time ?? new Date().toISOString().replace(/\.\d{3}Z$/, "Z"),
      region: FAKE_REGION,
      resources: e.resources,
      detail: e.detail,
    };
    this.buses.get(bus)?.push(event);
    for (const rule of this.rules) {
      if (rule.bus !== bus || !matches(rule.pattern, event as unknown as Record<string, unknown>)) continue;
      const p = this.deliver(rule, event).finally(() => this.pending.delete(p));
      this.pending.add(p);
    }
    return event;
  }
}
