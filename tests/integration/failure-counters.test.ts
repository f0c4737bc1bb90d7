import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { beforeAll, describe, expect, inject, it } from "vitest";
import { localClient } from "../../cli/local/dynamodb.ts";
import { configure } from "../../shared/runtime/deps.ts";
import { failureCounters } from "../../shared/runtime/failure-counters.ts";
import { createStore } from "../../shared/store/entities.ts";
import { ensureTable } from "../../shared/store/table.ts";
import { movableClock, uniqueTable } from "../harness/runtime.ts";

/**
 * Holds back the store's answers to UpdateItem until `n` have arrived, then hands them over from the highest
 * count to the lowest, one at a time (each one's caller finishes before the next answer is handed over): the
 * worst order concurrent writes can answer in.
 */
function answersOutOfOrder(client: DynamoDBClient) {
  let gate: { n: number; held: { count: number; release: () => void }[] } | undefined;
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const answer = await next(args);
      if (!gate || context.commandName !== "UpdateItemCommand") return answer;
      const g = gate;
      // The item as the document client hands it over (unmarshalled), or as DynamoDB sent it.
      const { Attributes } = answer.output as { Attributes?: { count?: number | { N?: string } } };
      const count = Number(typeof Attributes?.count === "object" ? Attributes.count.N : Attributes?.count);
      if (Number.isNaN(count)) throw new Error("the test cannot read the count UpdateItem answered");
      await new Promise<void>((release) => {
        g.held.push({ count, release });
        if (g.held.length < g.n) return;
        gate = undefined;
        void (async () => {
          for (const h of g.held.sort((a, b) => b.count - a.count)) {
            h.release();
            await new Promise((r) => setImmediate(r));
          }
        })();
      });
      return answer;
    },
    { step: "initialize", name: "answersOutOfOrder" },
  );
  return { holdNext: (n: number) => (gate = { n, held: [] }) };
}

let order: ReturnType<typeof answersOutOfOrder>;
const clock = movableClock();

beforeAll(async () => {
  const client = localClient(inject("dynamoEndpoint"));
  const table = uniqueTable();
  await ensureTable(client, table);
  order = answersOutOfOrder(client);
  configure({
    store: createStore(client, table),
    clock,
    providers: {},
    transport: () => {
      throw new Error("no hosts here");
    },
    workflows: { start: async () => {}, stop: async () => {} },
    secrets: { get: async (keys: string[]) => ({ values: {}, missing: keys }) },
    accessKey: Buffer.alloc(32),
  });
});

describe("failure counters", () => {
  it("never count fewer than this process recorded when concurrent writes answer out of order", async () => {
    const counters = failureCounters({ windowSeconds: 600, readTtlMs: 60_000 });
    expect((await counters.count("k:race")).total).toBe(0); // kept for the test: no read refreshes it
    order.holdNext(20);
    const answers = await Promise.all(Array.from({ length: 20 }, () => counters.record("k:race")));
    expect(Math.max(...answers.map((a) => a.current))).toBe(20);
    expect(await counters.count("k:race")).toEqual({ current: 20, previous: 0, total: 20 });
    // The counts go on from there, and a reset still brings them to zero.
    expect((await counters.record("k:race")).total).toBe(21);
    await counters.reset("k:race");
    expect((await counters.count("k:race")).total).toBe(0);
    expect((await counters.record("k:race")).total).toBe(1);
  });

  it("count the previous window with the current one, and forget both on reset", async () => {
    const counters = failureCounters({ windowSeconds: 600, readTtlMs: 0 });
    await Promise.all(Array.from({ length: 3 }, () => counters.record("k:windows")));
    clock.advance(600_000);
    await counters.record("k:windows", 2);
    expect(await counters.count("k:windows")).toEqual({ current: 2, previous: 3, total: 5 });
    clock.advance(600_000);
    expect(await counters.count("k:windows")).toEqual({ current: 0, previous: 2, total: 2 });
  });
});
