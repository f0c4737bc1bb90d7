import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { labsIfAllReady } from "../../shared/fleet/up.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { removeDir, tempDir, testRuntime } from "../harness/runtime.ts";

/**
 * Whether every lab of a workshop is ready (what opens a portal at 100 % when a lab pushes its readiness, and what
 * makes a provisioned workshop ready), on DynamoDB Local: the labs counted when all are, 0 when one is not, hosts
 * out of service left out, and the reading stopped at the first lab not ready, from the last host.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
const WS = "allready";
const HOSTS = 120;
const id = (n: number) => `student-${String(n).padStart(3, "0")}`;
let queries = 0;

/** Writes the workshop's host records: every one ready unless `states` says otherwise. */
async function hosts(states: Record<number, string> = {}, extra: Record<string, unknown>[] = []) {
  const { store } = useDeps();
  const at = new Date().toISOString();
  const items = Array.from({ length: HOSTS }, (_, i) => ({
    workshop: WS,
    hostId: id(i + 1),
    state: states[i + 1] ?? "ready",
    provider: "local",
    createdAt: at,
    updatedAt: at,
  }));
  const all = [...items, ...extra.map((e) => ({ workshop: WS, createdAt: at, updatedAt: at, ...e }))];
  await store.host.put(all as Parameters<typeof store.host.put>[0] & unknown[]).go({ concurrency: 4 });
}

beforeAll(async () => {
  work = tempDir("labfleet-allready-");
  rt = await testRuntime({ dataDir: join(work, ".labfleet") });
  rt.store.doc.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName === "QueryCommand") queries++;
      return next(args);
    },
    { step: "initialize", name: "countQueries" },
  );
}, 120_000);

beforeEach(async () => {
  const { store } = useDeps();
  const all = (await store.host.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data;
  if (all.length) await store.host.delete(all.map((h) => ({ workshop: WS, hostId: h.hostId }))).go();
  queries = 0;
});

afterAll(async () => {
  await rt?.close();
  if (work) removeDir(work);
});

/** The answer, and how many Query calls it took. */
async function read(): Promise<{ labs: number; queries: number }> {
  queries = 0;
  const labs = await labsIfAllReady(WS);
  return { labs, queries };
}

describe("labsIfAllReady", { timeout: 60_000 }, () => {
  it("counts every lab when all are ready, reading the whole fleet a page at a time", async () => {
    await hosts();
    expect(await read()).toEqual({ labs: HOSTS, queries: 3 });
  });

  it("answers 0 when one lab is not ready, and stops at the first from the last host", async () => {
    // The last host deployed is still building: one page read.
    await hosts({ [HOSTS]: "deploying" });
    expect(await read()).toEqual({ labs: 0, queries: 1 });
    // The first host failed: every page up to it.
    await hosts({ 1: "failed" });
    expect(await read()).toEqual({ labs: 0, queries: 3 });
    await hosts({ 70: "pending" });
    expect(await read()).toEqual({ labs: 0, queries: 2 });
  });

  it("leaves out hosts torn down and enrolled hosts runs leave out; a workshop with none is not ready", async () => {
    await hosts({ 5: "torn_down", 90: "torn_down" }, [
      // Waiting for approval, and drained: neither is a lab of the workshop's readiness.
      { hostId: "byod-a", provider: "enrolled", enrollment: "pending", state: "pending" },
      { hostId: "byod-b", provider: "enrolled", enrollment: "approved", drained: true, state: "failed" },
      { hostId: "byod-c", provider: "enrolled", enrollment: "approved", state: "ready" },
    ]);
    expect((await read()).labs).toBe(HOSTS - 2 + 1);
    // An approved enrolled host in service that is not ready holds it back.
    await hosts({}, [{ hostId: "byod-d", provider: "enrolled", enrollment: "approved", state: "pending" }]);
    expect((await read()).labs).toBe(0);
    const { store } = useDeps();
    const all = (await store.host.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data;
    await store.host.delete(all.map((h) => ({ workshop: WS, hostId: h.hostId }))).go();
    expect(await read()).toEqual({ labs: 0, queries: 1 });
  });
});
