import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listEvents, newestEvents, recordEvent } from "../../shared/fleet/events.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { openPortal, releaseLab } from "../../shared/portal/portal.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/** Event records: what the console's activity list and the cloud's EventBridge bus are fed from. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "test-token-for-the-events-suite";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

beforeAll(async () => {
  rt = await testRuntime({ token: TOKEN });
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("events", () => {
  it("record a run from start to teardown, and a claim and its release without the student's email", async () => {
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "ev", count: 2, lab: "fail" })));
    await asInstructor(() => startRun("ev", "up"));
    await rt.executor.idle();
    const up = (await listEvents("ev")).events;
    expect(up[0]).toMatchObject({ type: "run.started", detail: { kind: "up" } });
    expect(up.at(-1)).toMatchObject({ type: "run.finished", detail: { kind: "up", state: "failed" } });
    expect(up.filter((e) => e.type === "host.ready").map((e) => e.hostId)).toEqual(["student-01"]);
    const failed = up.find((e) => e.type === "host.failed");
    expect(failed?.hostId).toBe("student-02");
    expect(String(failed?.detail.reason)).not.toBe("");

    await asInstructor(() => openPortal("ev"));
    const email = "ada.lovelace@example.test";
    const { lab } = await claimLab("ev", { name: "Ada Lovelace", email, pin: "503917" }, "10.20.0.1");
    await asInstructor(() => releaseLab("ev", lab));
    await asInstructor(() => startRun("ev", "teardown"));
    await rt.executor.idle();
    const all = (await listEvents("ev", { limit: 500 })).events;
    const types = all.map((e) => e.type);
    expect(types.slice(-6)).toEqual([
      "lab.claimed",
      "lab.released",
      "run.started",
      "teardown.receipt",
      "run.finished",
      "workshop.torn_down",
    ]);
    expect(JSON.stringify(all)).not.toContain(email);
    // Who did it, and the student's display name (never the email).
    expect(all.find((e) => e.type === "lab.claimed")?.detail).toEqual({
      how: "open",
      student: "Ada Lovelace",
      by: "student",
    });
    expect(all.find((e) => e.type === "lab.released")?.detail).toEqual({
      how: "released",
      student: "Ada Lovelace",
      by: "instructor",
    });
    expect(all.find((e) => e.type === "workshop.torn_down")?.detail).toEqual({ by: "labfleet" });
  });

  it("page forward with after, newest first in one read, ids in write order even within a millisecond", async () => {
    for (let i = 0; i < 30; i++)
      await recordEvent({ workshop: "ev-order", type: "host.ready", hostId: `h${i}` });
    const first = await listEvents("ev-order", { limit: 10 });
    expect(first.events.map((e) => e.hostId)).toEqual(Array.from({ length: 10 }, (_, i) => `h${i}`));
    const next = await listEvents("ev-order", { after: first.last ?? "", limit: 100 });
    expect(next.events.map((e) => e.hostId)).toEqual(Array.from({ length: 20 }, (_, i) => `h${i + 10}`));
    expect(next.last).toBe(next.events.at(-1)?.id);
    const none = await listEvents("ev-order", { after: next.last ?? "" });
    expect(none).toEqual({ events: [], last: next.last });
    expect((await newestEvents("ev-order", 3)).map((e) => e.hostId)).toEqual(["h29", "h28", "h27"]);
  });

  it("answer GET /api/workshops/:name/events, with a 400 and its field for a bad cursor", async () => {
    const headers = { authorization: `Bearer ${TOKEN}` };
    const res = await app.request("/api/workshops/ev-order/events?limit=2", { headers });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { events: { hostId: string }[]; last: string };
    expect(body.events.map((e) => e.hostId)).toEqual(["h0", "h1"]);
    const bad = await app.request("/api/workshops/ev-order/events?after=nope", { headers });
    expect(bad.status).toBe(400);
    const err = (await bad.json()) as { error: { details: { path: string }[] } };
    expect(err.error.details.map((d) => d.path)).toContain("after");
    expect((await app.request("/api/workshops/ev-order/events")).status).toBe(401);
  });
});
