import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHECK_IN_SECONDS, MISSED_CHECK_INS, markAllSilentHosts } from "../../shared/agent/check-in.ts";
import { commandOutcome, queueCommand } from "../../shared/agent/commands.ts";
import { recordEnrolledHost } from "../../shared/agent/enrolled-hosts.ts";
import { ROTATION_GRACE_SECONDS } from "../../shared/agent/host-secrets.ts";
import { ROTATE_EVERY_SECONDS } from "../../shared/agent/poll.ts";
import { signedHeaders } from "../../shared/agent/signing.ts";
import { listEvents } from "../../shared/fleet/events.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { movableClock, removeDir, testRuntime } from "../harness/runtime.ts";

/**
 * The agent's signed routes on the local runtime, playing the host with signedHeaders: who gets work, what a
 * replayed or tampered call changes (nothing), check-ins: unreachable after three missed, back at the next, and the
 * scheduled rotation of a host's secret.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const clock = movableClock();
let nonces = 0;

function signed(workshop: string, hostId: string, secret: string, path: string, body: string) {
  const parts = {
    method: "POST",
    path,
    body,
    timestamp: Math.floor(clock.now().getTime() / 1000),
    nonce: `n-${process.pid}-${nonces++}-0123456789`,
  };
  return {
    method: "POST",
    headers: { "content-type": "application/json", ...signedHeaders(workshop, hostId, secret, parts) },
    body,
  };
}

async function call(init: RequestInit, path: string) {
  const res = await fetch(`${rt.url}${path}`, init);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

const poll = (ws: string, host: string, secret: string, wait = 0) =>
  call(signed(ws, host, secret, "/agent/v1/poll", JSON.stringify({ wait })), "/agent/v1/poll");

const result = (ws: string, host: string, secret: string, id: string, stdout = "ok\n") =>
  signed(
    ws,
    host,
    secret,
    "/agent/v1/result",
    JSON.stringify({
      id,
      exitCode: 0,
      timedOut: false,
      outBytes: stdout.length,
      errBytes: 0,
      stdout: Buffer.from(stdout).toString("base64"),
      stderr: "",
    }),
  );

const queue = (workshop: string, hostId: string) =>
  queueCommand({ workshop, hostId, script: "echo hi", timeoutMs: 10_000 });

beforeAll(async () => {
  rt = await testRuntime({ clock });
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("the agent's long poll", () => {
  it("gives a pending host no work until it is approved", async () => {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "pw",
      name: "wait",
      facts: {},
      enrollment: "pending",
    });
    const id = await queue("pw", hostId);
    const held = await poll("pw", hostId, secret, 1);
    expect(held).toMatchObject({ status: 200, body: { forget: false, commands: [] } });
    expect((await commandOutcome("pw", hostId, id))?.state).toBe("queued");
    await rt.store.host.patch({ workshop: "pw", hostId }).set({ enrollment: "approved" }).go();
    const given = await poll("pw", hostId, secret, 1);
    expect(given.status).toBe(200);
    expect(given.body.commands).toEqual([
      { id, timeoutSeconds: "10.000", sudo: 0, script: Buffer.from("echo hi").toString("base64"), stdin: "" },
    ]);
    expect((await commandOutcome("pw", hostId, id))?.state).toBe("taken");
  });

  it("gives a disabled host nothing, and wakes a held poll at once when work is queued", async () => {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "pw",
      name: "off",
      facts: {},
      enrollment: "approved",
    });
    await rt.store.host.patch({ workshop: "pw", hostId }).set({ disabled: true }).go();
    const id = await queue("pw", hostId);
    expect((await poll("pw", hostId, secret, 1)).body.commands).toEqual([]);
    await rt.store.host.patch({ workshop: "pw", hostId }).remove(["disabled"]).go();
    expect((await poll("pw", hostId, secret, 1)).body.commands).toMatchObject([{ id }]);
    const started = Date.now();
    const held = poll("pw", hostId, secret, 20);
    await new Promise((r) => setTimeout(r, 300));
    const next = await queue("pw", hostId);
    expect((await held).body.commands).toMatchObject([{ id: next }]);
    expect(Date.now() - started).toBeLessThan(10_000);
  });

  it("refuses a replayed or tampered poll or result, and they change nothing", async () => {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "pw",
      name: "sig",
      facts: {},
      enrollment: "approved",
    });
    const id = await queue("pw", hostId);
    const once = signed("pw", hostId, secret, "/agent/v1/poll", '{"wait":0}');
    expect((await call(once, "/agent/v1/poll")).body.commands).toMatchObject([{ id }]);
    const again = await call(once, "/agent/v1/poll");
    expect(again).toMatchObject({ status: 401, body: { error: { code: "agent.replayed" } } });
    const tamperedPoll = {
      ...signed("pw", hostId, secret, "/agent/v1/poll", '{"wait":0}'),
      body: '{"wait":1}',
    };
    expect(await call(tamperedPoll, "/agent/v1/poll")).toMatchObject({
      status: 401,
      body: { error: { code: "agent.bad_signature" } },
    });
    // A tampered result (its output changed after signing) is refused and the command stays taken.
    const good = result("pw", hostId, secret, id, "real\n");
    const forged = {
      ...good,
      body: (good.body as string).replace(
        Buffer.from("real\n").toString("base64"),
        Buffer.from("fake\n").toString("base64"),
      ),
    };
    expect(await call(forged, "/agent/v1/result")).toMatchObject({
      status: 401,
      body: { error: { code: "agent.bad_signature" } },
    });
    expect((await commandOutcome("pw", hostId, id))?.state).toBe("taken");
    // Another host's secret cannot answer for it.
    const other = await recordEnrolledHost({
      workshop: "pw",
      name: "other",
      facts: {},
      enrollment: "approved",
    });
    const asOther = result("pw", other.hostId, other.secret, id, "fake\n");
    expect(await call(asOther, "/agent/v1/result")).toMatchObject({ status: 200, body: { recorded: false } });
    expect((await commandOutcome("pw", hostId, id))?.state).toBe("taken");
    // The real result, once; its replay is refused.
    expect(await call(good, "/agent/v1/result")).toMatchObject({ status: 200, body: { recorded: true } });
    expect(await commandOutcome("pw", hostId, id)).toMatchObject({
      state: "done",
      exitCode: 0,
      stdout: "real\n",
    });
    expect(await call(good, "/agent/v1/result")).toMatchObject({
      status: 401,
      body: { error: { code: "agent.replayed" } },
    });
  });

  it("answers a bad body with 400 and the field, and an unsigned call with 401", async () => {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "pw",
      name: "bad",
      facts: {},
      enrollment: "approved",
    });
    const bad = await call(
      signed("pw", hostId, secret, "/agent/v1/poll", '{"wait":"soon"}'),
      "/agent/v1/poll",
    );
    expect(bad.status).toBe(400);
    expect(JSON.stringify(bad.body)).toContain('"path":"wait"');
    const badResult = await call(
      signed("pw", hostId, secret, "/agent/v1/result", '{"id":"nope"}'),
      "/agent/v1/result",
    );
    expect(badResult.status).toBe(400);
    expect(JSON.stringify(badResult.body)).toContain('"path":"id"');
    const unsigned = await call({ method: "POST", body: "{}" }, "/agent/v1/poll");
    expect(unsigned).toMatchObject({ status: 401, body: { error: { code: "agent.unsigned" } } });
  });
});

describe("check-ins", () => {
  it("marks a host that missed three check-ins unreachable, once, and online again at its next call", async () => {
    await withActor({ type: "instructor", id: "test" }, () =>
      submitWorkshop(
        "name: ci\nlab:\n  source: git:https://example.test/lab.git\n  setup: bash setup.sh\n  health: test -f built\nprovider:\n  type: enrolled\n",
      ),
    );
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "ci",
      name: "quiet",
      facts: {},
      enrollment: "approved",
    });
    expect((await poll("ci", hostId, secret)).status).toBe(200);
    clock.advance((MISSED_CHECK_INS - 1) * CHECK_IN_SECONDS * 1000);
    await rt.tick();
    expect((await rt.store.host.get({ workshop: "ci", hostId }).go()).data?.reachable).toBe("online");
    clock.advance(CHECK_IN_SECONDS * 1000 + 1000);
    await rt.tick();
    await rt.tick();
    expect((await rt.store.host.get({ workshop: "ci", hostId }).go()).data?.reachable).toBe("unreachable");
    const events = () =>
      withActor({ type: "instructor", id: "test" }, () => listEvents("ci")).then((l) =>
        l.events.filter((e) => e.hostId === hostId).map((e) => e.type),
      );
    expect(await events()).toEqual(["host.unreachable"]);
    expect((await poll("ci", hostId, secret)).status).toBe(200);
    expect((await rt.store.host.get({ workshop: "ci", hostId }).go()).data?.reachable).toBe("online");
    expect((await events()).sort()).toEqual(["host.reachable", "host.unreachable"]);
  });

  it("reads the hosts of workshops of enrolled hosts only", async () => {
    await withActor({ type: "instructor", id: "test" }, async () => {
      await submitWorkshop(
        "name: byod-room\nlab:\n  source: git:https://example.test/lab.git\n  setup: bash setup.sh\nprovider:\n  type: enrolled\n",
      );
      await submitWorkshop(
        "name: cloud-room\nlab:\n  source: git:https://example.test/lab.git\n  setup: bash setup.sh\nprovider:\n  type: local\n  count: 2\n",
      );
    });
    // The key values of every query of host records from here on.
    const hostQueries: string[] = [];
    rt.store.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const values = Object.values(
          (args.input as { ExpressionAttributeValues?: object }).ExpressionAttributeValues ?? {},
        ).map(String);
        if (context.commandName === "QueryCommand" && values.some((v) => v.startsWith("$host")))
          hostQueries.push(values.join(" "));
        return next(args);
      },
      { step: "initialize", name: "countHostQueries" },
    );
    try {
      await markAllSilentHosts();
    } finally {
      rt.store.doc.middlewareStack.remove("countHostQueries");
    }
    expect(hostQueries.some((q) => q.includes("byod-room"))).toBe(true);
    expect(hostQueries.filter((q) => q.includes("cloud-room"))).toEqual([]);
  });
});

describe("scheduled rotation", () => {
  it("tells the agent to rotate once its secret is ROTATE_EVERY_SECONDS old; the old secret works during its grace only", async () => {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "rot",
      name: "aging",
      facts: {},
      enrollment: "approved",
    });
    expect((await poll("rot", hostId, secret)).body.rotate).toBe(false);
    // Just short of the schedule: not yet.
    clock.advance(ROTATE_EVERY_SECONDS * 1000 - 60_000);
    expect((await poll("rot", hostId, secret)).body).toMatchObject({ rotate: false });
    clock.advance(61_000);
    const due = await poll("rot", hostId, secret, 20);
    expect(due).toMatchObject({ status: 200, body: { rotate: true, forget: false } });

    const rotated = await call(signed("rot", hostId, secret, "/agent/v1/rotate", "{}"), "/agent/v1/rotate");
    expect(rotated.status).toBe(200);
    const fresh = rotated.body.secret as string;
    expect(fresh).toMatch(/^[0-9a-f]{64}$/);
    expect(fresh).not.toBe(secret);
    // The new secret signs, and the schedule starts again from the rotation.
    expect(await poll("rot", hostId, fresh)).toMatchObject({ status: 200, body: { rotate: false } });
    // The old one still passes during its grace (calls already in flight)...
    clock.advance((ROTATION_GRACE_SECONDS - 30) * 1000);
    expect(await poll("rot", hostId, secret)).toMatchObject({ status: 200, body: { rotate: false } });
    // ...and is refused after it.
    clock.advance(31_000);
    expect(await poll("rot", hostId, secret)).toMatchObject({
      status: 401,
      body: { error: { code: "agent.bad_signature" } },
    });
    expect(await poll("rot", hostId, fresh)).toMatchObject({ status: 200, body: { rotate: false } });
  });
});
