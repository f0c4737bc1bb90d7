import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from "vitest";
import { localClient } from "../../cli/local/dynamodb.ts";
import { handler as sweepHandler } from "../../functions/sweep.ts";
import { ensureTeardownSchedule } from "../../shared/fleet/schedules.ts";
import { sweep } from "../../shared/fleet/sweeper.ts";
import type { Workflows } from "../../shared/fleet/workflows.ts";
import type { Provider, SweptInstance } from "../../shared/providers/types.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { configure } from "../../shared/runtime/deps.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { createStore, type Store } from "../../shared/store/entities.ts";
import { ensureTable } from "../../shared/store/table.ts";
import { movableClock, uniqueTable } from "../harness/runtime.ts";

// The sweeper against the real store (DynamoDB Local from the global setup) with fake providers.

let store: Store;
const clock = movableClock();
const started: { kind: string; workshop: string }[] = [];
const workflows: Workflows = {
  start: async (kind, input) => {
    started.push({ kind, workshop: input.workshop });
  },
  stop: async () => {},
};
const lines: string[] = [];

function fakeProvider(
  name: Provider["name"],
  sweepExpired: (now: Date) => Promise<SweptInstance[]>,
): Provider & { seen: Date[] } {
  const seen: Date[] = [];
  return {
    name,
    transport: "ssm",
    seen,
    validate: () => [],
    plan: async () => [],
    provision: async () => [],
    deprovision: async () => [],
    sweepExpired: async (now) => {
      seen.push(now);
      return sweepExpired(now);
    },
  };
}

let aws: ReturnType<typeof fakeProvider>;
let local: ReturnType<typeof fakeProvider>;
let swept: SweptInstance[] = [];

beforeAll(async () => {
  const client = localClient(inject("dynamoEndpoint"));
  const table = uniqueTable();
  await ensureTable(client, table);
  store = createStore(client, table);
  aws = fakeProvider("aws", async () => swept);
  local = fakeProvider("local", async () => {
    throw new Error("DescribeInstances: throttled");
  });
  configure({
    store,
    clock,
    providers: { local, aws },
    transport: () => {
      throw new Error("the sweeper never reaches a host");
    },
    workflows,
    secrets: { get: async (keys: string[]) => ({ values: {}, missing: keys }) },
    accessKey: Buffer.alloc(32),
  });
  setLogSink((line) => lines.push(line), "info");
});
afterAll(() => setLogSink((line) => process.stderr.write(`${line}\n`), "warn"));
beforeEach(() => {
  lines.length = 0;
  started.length = 0;
  swept = [];
});

const iso = (ms: number) => new Date(ms).toISOString();

async function workshop(name: string) {
  const now = iso(clock.now().getTime());
  await store.workshop
    .put({ name, spec: { name }, yaml: `name: ${name}`, state: "ready", createdAt: now, updatedAt: now })
    .go();
}

async function host(ws: string, hostId: string, providerId: string, state: "ready" | "torn_down" = "ready") {
  const now = iso(clock.now().getTime());
  await store.host
    .put({
      workshop: ws,
      hostId,
      provider: "aws",
      providerId,
      address: providerId,
      state,
      access: "sealed-access-blob",
      createdAt: now,
      updatedAt: now,
    })
    .go();
}

const hostRecord = async (ws: string, hostId: string) =>
  (await store.host.get({ workshop: ws, hostId }).go()).data;

describe("the sweeper", () => {
  it("fires due schedules, records every terminated instance, and goes on past a failing provider", async () => {
    const t0 = clock.now().getTime();
    await workshop("lost");
    await workshop("later");
    await host("lost", "student-01", "i-0aaa000000000001");
    await host("lost", "student-02", "i-0aaa000000000002");
    await host("lost", "student-03", "i-0aaa000000000003", "torn_down");
    await ensureTeardownSchedule("lost", iso(t0 + 60_000));
    await ensureTeardownSchedule("later", iso(t0 + 7_200_000));
    clock.advance(120_000);
    swept = [
      {
        providerId: "i-0aaa000000000001",
        workshop: "lost",
        hostId: "student-01",
        expiry: iso(t0 + 60_000),
        result: "terminated",
      },
      {
        // An instance the store knows under another id (replaced since): its record is left alone.
        providerId: "i-0ccc000000000009",
        workshop: "lost",
        hostId: "student-02",
        expiry: iso(t0 + 60_000),
        result: "terminated",
      },
      {
        providerId: "i-0bbb000000000001",
        workshop: "gone-long-ago",
        hostId: "student-01",
        expiry: iso(t0 - 86_400_000),
        result: "error",
        detail: "TerminateInstances: UnauthorizedOperation",
      },
      {
        providerId: "i-0aaa000000000003",
        workshop: "lost",
        hostId: "student-03",
        expiry: iso(t0 + 60_000),
        result: "terminated",
      },
    ];

    const summary = await withActor({ type: "system", id: "test" }, () => sweep());

    expect(summary.fired).toBe(1);
    expect(started).toEqual([{ kind: "teardown", workshop: "lost" }]);
    expect(summary.swept.map((s) => [s.provider, s.providerId, s.result])).toEqual([
      ["aws", "i-0aaa000000000001", "terminated"],
      ["aws", "i-0ccc000000000009", "terminated"],
      ["aws", "i-0bbb000000000001", "error"],
      ["aws", "i-0aaa000000000003", "terminated"],
    ]);
    expect(summary.errors).toEqual([
      { step: "sweep", provider: "local", error: "DescribeInstances: throttled" },
    ]);
    // It asks with the runtime's clock (moved two minutes on).
    expect(aws.seen.at(-1)?.getTime()).toBeGreaterThanOrEqual(t0 + 120_000);
    expect(aws.seen.at(-1)?.getTime()).toBeLessThanOrEqual(clock.now().getTime());

    // The matching live record is marked failed, with why, and loses its access details.
    const one = await hostRecord("lost", "student-01");
    expect(one?.state).toBe("failed");
    expect(one?.error).toBe(
      `terminated by the sweeper: i-0aaa000000000001 was past its expiry (${iso(t0 + 60_000)})`,
    );
    expect(one?.access).toBeUndefined();
    // Another instance id, or a record already torn down: unchanged.
    expect((await hostRecord("lost", "student-02"))?.state).toBe("ready");
    expect((await hostRecord("lost", "student-02"))?.access).toBe("sealed-access-blob");
    expect((await hostRecord("lost", "student-03"))?.state).toBe("torn_down");
    // The schedule that is not due stays pending.
    expect((await store.schedule.get({ workshop: "later", kind: "teardown" }).go()).data?.state).toBe(
      "pending",
    );

    const logs = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
    const terminated = logs.filter((l) => l.msg === "sweeper: terminated a host past its expiry");
    expect(terminated.map((l) => l.providerId)).toEqual([
      "i-0aaa000000000001",
      "i-0ccc000000000009",
      "i-0aaa000000000003",
    ]);
    expect(terminated[0]).toMatchObject({ provider: "aws", workshop: "lost", hostId: "student-01" });
    expect(logs.find((l) => l.msg === "sweeper: an expired host could not be terminated")).toMatchObject({
      providerId: "i-0bbb000000000001",
      detail: "TerminateInstances: UnauthorizedOperation",
    });
    expect(logs.find((l) => l.msg === "sweep done")).toMatchObject({
      fired: 1,
      terminated: 3,
      failed: 1,
      errors: 1,
    });
    expect(lines.join("\n")).not.toContain("sealed-access-blob");
  });

  it("runs only as the system", async () => {
    await expect(withActor({ type: "instructor", id: "i" }, () => sweep())).rejects.toThrow(/system/);
  });
});

describe("the sweep Lambda", () => {
  it("fires one workshop's schedule when its EventBridge schedule calls, only once it is due", async () => {
    const t0 = clock.now().getTime();
    await workshop("timed");
    await ensureTeardownSchedule("timed", iso(t0 + 30_000));
    const event = { source: "labfleet.schedule", kind: "teardown", workshop: "timed" };

    // Early (the record was moved after the schedule was made): nothing happens.
    expect(await sweepHandler(event)).toEqual({
      schedule: { workshop: "timed", fired: false, reason: `not due until ${iso(t0 + 30_000)}` },
    });
    expect(started).toEqual([]);
    expect(aws.seen.length).toBeGreaterThan(0);
    const sweepsBefore = aws.seen.length;

    clock.advance(30_000);
    expect(await sweepHandler(event)).toEqual({
      schedule: { workshop: "timed", fired: true, reason: `due at ${iso(t0 + 30_000)}` },
    });
    // Fired once: a second delivery finds it fired.
    expect(await sweepHandler(event)).toEqual({
      schedule: { workshop: "timed", fired: false, reason: "the schedule is fired" },
    });
    expect(started).toEqual([{ kind: "teardown", workshop: "timed" }]);
    // A schedule's call does not sweep the providers.
    expect(aws.seen.length).toBe(sweepsBefore);
  });

  it("runs the whole pass for the rate(5 minutes) event", async () => {
    const cron = { "detail-type": "Scheduled Event", source: "aws.events", detail: {} };
    const sweepsBefore = aws.seen.length;
    const summary = (await sweepHandler(cron)) as { fired: number; errors: unknown[] };
    expect(summary.fired).toBe(0);
    expect(summary.errors).toHaveLength(1);
    expect(aws.seen.length).toBe(sweepsBefore + 1);
  });
});
