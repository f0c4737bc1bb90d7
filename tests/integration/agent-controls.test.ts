import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { queueCommand } from "../../shared/agent/commands.ts";
import { recordEnrolledHost } from "../../shared/agent/enrolled-hosts.ts";
import { signedHeaders } from "../../shared/agent/signing.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { freeLabs } from "../../shared/portal/free-labs.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { runCli } from "../harness/cli.ts";
import { removeDir, testRuntime } from "../harness/runtime.ts";

/** `labfleet hosts drain|disable|enable|remove|rotate-secret` through the real CLI, and what each agent then sees. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let env: Record<string, string>;
let nonces = 0;

async function poll(hostId: string, secret: string) {
  const body = '{"wait":0}';
  const parts = {
    method: "POST",
    path: "/agent/v1/poll",
    body,
    timestamp: Math.floor(Date.now() / 1000),
    nonce: `c-${process.pid}-${nonces++}-0123456789`,
  };
  const res = await fetch(`${rt.url}/agent/v1/poll`, {
    method: "POST",
    headers: signedHeaders("ctl", hostId, secret, parts),
    body,
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function rotate(hostId: string, secret: string) {
  const parts = {
    method: "POST",
    path: "/agent/v1/rotate",
    body: "{}",
    timestamp: Math.floor(Date.now() / 1000),
    nonce: `r-${process.pid}-${nonces++}-0123456789`,
  };
  const res = await fetch(`${rt.url}/agent/v1/rotate`, {
    method: "POST",
    headers: signedHeaders("ctl", hostId, secret, parts),
    body: "{}",
  });
  return (await res.json()) as { secret: string };
}

const host = async (hostId: string) => (await rt.store.host.get({ workshop: "ctl", hostId }).go()).data;

beforeAll(async () => {
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  await withActor({ type: "instructor", id: "test" }, () =>
    submitWorkshop(
      "name: ctl\nlab:\n  source: git:https://example.test/lab.git\n  setup: bash setup.sh\n  health: test -f built\nprovider:\n  type: enrolled\n",
    ),
  );
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("controls of enrolled hosts", () => {
  it("drain keeps a ready lab off new claims; disable sends nothing; enable undoes both", async () => {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "ctl",
      name: "d",
      facts: {},
      enrollment: "approved",
    });
    await rt.store.host.patch({ workshop: "ctl", hostId }).set({ state: "ready" }).go();
    const drained = await runCli(["hosts", "drain", "ctl", hostId], { env });
    expect(drained).toMatchObject({ code: 0, stdout: `${hostId} drained: no new work and no new claims\n` });
    const h = await host(hostId);
    expect(h?.drained).toBe(true);
    expect(freeLabs(h ? [h] : [], [], 0).forStudents).toEqual([]);

    const disabled = await runCli(["hosts", "disable", "ctl", hostId, "--output", "json"], { env });
    expect(disabled.code).toBe(0);
    expect(JSON.parse(disabled.stdout)).toEqual({
      hosts: [{ hostId, action: "disable", drained: true, disabled: true, state: "ready" }],
    });
    await queueCommand({ workshop: "ctl", hostId, script: "true", timeoutMs: 1000 });
    expect((await poll(hostId, secret)).body.commands).toEqual([]);

    const enabled = await fetch(`${rt.url}/api/workshops/ctl/hosts/${hostId}/control`, {
      method: "POST",
      headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      body: JSON.stringify({ action: "enable" }),
    });
    expect(enabled.status).toBe(200);
    const back = await host(hostId);
    expect([back?.drained, back?.disabled]).toEqual([undefined, undefined]);
    expect(freeLabs(back ? [back] : [], [], 0).forStudents).toEqual([hostId]);
  }, 120_000);

  it("remove takes the host out: its agent is told to forget the workshop, then its secret is gone", async () => {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "ctl",
      name: "r",
      facts: {},
      enrollment: "approved",
    });
    expect((await runCli(["hosts", "remove", "ctl", hostId], { env })).code).toBe(0);
    expect((await host(hostId))?.state).toBe("torn_down");
    expect(await poll(hostId, secret)).toMatchObject({ status: 200, body: { forget: true, commands: [] } });
    expect(await poll(hostId, secret)).toMatchObject({
      status: 401,
      body: { error: { code: "agent.bad_signature" } },
    });
  });

  it("rotate-secret: the next poll says rotate, and the agent's new secret signs from then on", async () => {
    const { hostId, secret } = await recordEnrolledHost({
      workshop: "ctl",
      name: "s",
      facts: {},
      enrollment: "approved",
    });
    expect((await poll(hostId, secret)).body.rotate).toBe(false);
    expect((await runCli(["hosts", "rotate-secret", "ctl", hostId], { env })).code).toBe(0);
    expect((await poll(hostId, secret)).body.rotate).toBe(true);
    const fresh = await rotate(hostId, secret);
    expect(fresh.secret).toMatch(/^[0-9a-f]{64}$/);
    expect(fresh.secret).not.toBe(secret);
    expect(await poll(hostId, fresh.secret)).toMatchObject({ status: 200, body: { rotate: false } });
  });

  it("refuses a host that did not enroll, and a bad action, with the field", async () => {
    const now = new Date().toISOString();
    await rt.store.host
      .put({
        workshop: "ctl",
        hostId: "plain",
        provider: "local",
        state: "ready",
        createdAt: now,
        updatedAt: now,
      })
      .go();
    const r = await runCli(["hosts", "drain", "ctl", "plain"], { env });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain("is not an enrolled host");
    const res = await fetch(`${rt.url}/api/workshops/ctl/hosts/plain/control`, {
      method: "POST",
      headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      body: JSON.stringify({ action: "explode" }),
    });
    expect(res.status).toBe(400);
    expect(JSON.stringify(await res.json())).toContain('"path":"action"');
  });
});
