import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getRun, startRun } from "../../shared/fleet/runs.ts";
import { deployHosts } from "../../shared/fleet/up.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * A Deploy Map item of several hosts (a large workshop's batch, deployHosts in shared/fleet/up.ts) reads the
 * batch's host records in one request, not one read per host, and deploys each host as a lone item would.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const WS = "batch";
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

beforeAll(async () => {
  rt = await testRuntime({ waitMs: 200 });
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("a deploy batch", () => {
  it("reads its hosts' records in one request and deploys each host", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: WS, count: 3 })));
    const up = await asInstructor(() => startRun(WS, "up"));
    await rt.executor.idle();
    expect((await getRun(WS, up.runId)).state).toBe("succeeded");

    // The calls that read host records, from here on.
    const reads: string[] = [];
    rt.store.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as {
          Key?: { sk?: string };
          RequestItems?: Record<string, { Keys: unknown[] }>;
        };
        if (context.commandName === "GetItemCommand" && String(input.Key?.sk ?? "").startsWith("$host"))
          reads.push("get");
        if (context.commandName === "BatchGetItemCommand")
          for (const t of Object.values(input.RequestItems ?? {})) reads.push(`batch of ${t.Keys.length}`);
        return next(args);
      },
      { step: "initialize", name: "countHostReads" },
    );
    try {
      const ids = ["student-01", "student-02", "student-03"];
      const asSystem = <T>(fn: () => Promise<T>) => withActor({ type: "system", id: "test" }, fn);
      // Without force, a complete lab is left as it is.
      const kept = await asSystem(() => deployHosts(WS, up.runId, ids, false));
      expect(kept.hosts.map((h) => h.action)).toEqual(["complete", "complete", "complete"]);
      expect(reads).toEqual(["batch of 3"]);

      // With force, in a run that did not build these labs (a forced deploy rebuilt them since), each one's
      // setup is started again.
      const rebuild = await asInstructor(() => startRun(WS, "deploy", { force: true }));
      await rt.executor.idle();
      expect((await getRun(WS, rebuild.runId)).state).toBe("succeeded");
      reads.length = 0;
      const started = await asSystem(() => deployHosts(WS, up.runId, ids, true));
      expect(started.hosts.map((h) => h.action)).toEqual(["started", "started", "started"]);
      expect(reads).toEqual(["batch of 3"]);
      const hosts = await Promise.all(ids.map((hostId) => rt.store.host.get({ workshop: WS, hostId }).go()));
      expect(hosts.map((h) => [h.data?.state, h.data?.phase])).toEqual(
        ids.map(() => ["deploying", "started"]),
      );
    } finally {
      rt.store.doc.middlewareStack.remove("countHostReads");
    }
  });
});
