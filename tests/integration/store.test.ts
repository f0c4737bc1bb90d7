import { beforeAll, describe, expect, inject, it } from "vitest";
import { localClient } from "../../cli/local/dynamodb.ts";
import { dueSchedules, ensureTeardownSchedule, fireSchedule } from "../../shared/fleet/schedules.ts";
import type { Workflows } from "../../shared/fleet/workflows.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { configure } from "../../shared/runtime/deps.ts";
import { createStore, type Store } from "../../shared/store/entities.ts";
import { ensureTable } from "../../shared/store/table.ts";
import { movableClock, uniqueTable } from "../harness/runtime.ts";

let store: Store;
const clock = movableClock();
const started: { kind: string; workshop: string }[] = [];
const workflows: Workflows = {
  start: async (kind, input) => {
    started.push({ kind, workshop: input.workshop });
  },
  stop: async () => {},
};

beforeAll(async () => {
  const client = localClient(inject("dynamoEndpoint"));
  const table = uniqueTable();
  await ensureTable(client, table);
  await ensureTable(client, table); // idempotent
  store = createStore(client, table);
  configure({
    store,
    clock,
    providers: {},
    transport: () => {
      throw new Error("no hosts here");
    },
    workflows,
    secrets: { get: async (keys: string[]) => ({ values: {}, missing: keys }) },
    accessKey: Buffer.alloc(32),
  });
});

const now = () => new Date().toISOString();

describe("store entities on DynamoDB Local", () => {
  it("keeps workshops and lists them through the gsi1 index", async () => {
    for (const name of ["alpha", "beta"]) {
      await store.workshop
        .put({
          name,
          spec: { name },
          yaml: `name: ${name}`,
          state: "draft",
          createdAt: now(),
          updatedAt: now(),
        })
        .go();
    }
    const all = (await store.workshop.query.all({}).go()).data.map((w) => w.name);
    expect(all).toEqual(expect.arrayContaining(["alpha", "beta"]));
    expect((await store.workshop.get({ name: "alpha" }).go()).data?.state).toBe("draft");
  });

  it("keeps hosts per workshop with state, phases, last error, provider id and expiry", async () => {
    await store.host
      .put({
        workshop: "alpha",
        hostId: "student-01",
        provider: "local",
        providerId: "local:alpha/student-01",
        state: "deploying",
        phases: [{ name: "fetch", state: "done" }],
        phase: "fetch",
        expiry: "2030-01-01T00:00:00.000Z",
        createdAt: now(),
        updatedAt: now(),
      })
      .go();
    await store.host
      .patch({ workshop: "alpha", hostId: "student-01" })
      .set({ state: "failed", error: "boom" })
      .add({ attempt: 1 })
      .go();
    const hosts = (await store.host.query.byWorkshop({ workshop: "alpha" }).go()).data;
    expect(hosts).toHaveLength(1);
    expect(hosts[0]).toMatchObject({
      state: "failed",
      error: "boom",
      attempt: 1,
      providerId: "local:alpha/student-01",
      phases: [{ name: "fetch", state: "done" }],
    });
    expect((await store.host.query.byWorkshop({ workshop: "beta" }).go()).data).toEqual([]);
  });

  it("rejects values outside an attribute's enum", async () => {
    await expect(
      store.host
        .put({
          workshop: "alpha",
          hostId: "x",
          provider: "local",
          state: "exploded" as never,
          createdAt: now(),
          updatedAt: now(),
        })
        .go(),
    ).rejects.toThrow(/state/);
  });

  it("keeps runs with kind, state, times, per-host results and a transition counter", async () => {
    await store.run
      .create({ workshop: "alpha", runId: "run_A", kind: "up", state: "running", startedAt: now() })
      .go();
    await expect(
      store.run
        .create({ workshop: "alpha", runId: "run_A", kind: "up", state: "running", startedAt: now() })
        .go(),
    ).rejects.toThrow();
    await store.run.patch({ workshop: "alpha", runId: "run_A" }).add({ transitions: 5 }).go();
    await store.run.patch({ workshop: "alpha", runId: "run_A" }).add({ transitions: 7 }).go();
    await store.run
      .patch({ workshop: "alpha", runId: "run_A" })
      .set({ state: "succeeded", endedAt: now(), hosts: { "student-01": { state: "ready" } } })
      .go();
    const run = (await store.run.get({ workshop: "alpha", runId: "run_A" }).go()).data;
    expect(run).toMatchObject({
      transitions: 12,
      state: "succeeded",
      hosts: { "student-01": { state: "ready" } },
    });
  });

  it("finds due schedules through the index and fires each exactly once", async () => {
    const t0 = clock.now().getTime();
    await ensureTeardownSchedule("alpha", new Date(t0 + 3_600_000).toISOString());
    await ensureTeardownSchedule("beta", new Date(t0 + 7_200_000).toISOString());
    // ensure keeps the first time of a pending schedule
    const kept = await ensureTeardownSchedule("alpha", new Date(t0 + 9_999_999).toISOString());
    expect(kept.at).toBe(new Date(t0 + 3_600_000).toISOString());

    expect(await dueSchedules()).toEqual([]);
    clock.advance(3_600_000 + 1000);
    const due = await dueSchedules();
    expect(due.map((s) => s.workshop)).toEqual(["alpha"]);

    const first = due[0];
    if (!first) throw new Error("expected a due schedule");
    const results = await withActor({ type: "system", id: "test" }, () =>
      Promise.all([fireSchedule(first), fireSchedule(first)]),
    );
    expect(results.sort()).toEqual([false, true]);
    expect(started.filter((s) => s.workshop === "alpha" && s.kind === "teardown")).toHaveLength(1);
    expect((await store.schedule.get({ workshop: "alpha", kind: "teardown" }).go()).data?.state).toBe(
      "fired",
    );
    expect(await dueSchedules()).toEqual([]);
  });
});
