import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { recordEnrolledHost } from "../../shared/agent/enrolled-hosts.ts";
import {
  dropHostSecret,
  issueHostSecret,
  ROTATION_GRACE_SECONDS,
  rotateHostSecret,
  type SignedCall,
  verifySignedCall,
} from "../../shared/agent/host-secrets.ts";
import { SIGNATURE_WINDOW_SECONDS, signedHeaders } from "../../shared/agent/signing.ts";
import { movableClock, removeDir, testRuntime } from "../harness/runtime.ts";

/** Hosts' signing secrets and signed calls on DynamoDB Local: replays, tampering, stale clocks, rotation. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const clock = movableClock();
let nonces = 0;

function call(
  workshop: string,
  hostId: string,
  secret: string,
  over: Partial<SignedCall> = {},
  at = clock.now(),
) {
  const parts = {
    method: "POST",
    path: "/agent/v1/poll",
    body: '{"wait":20}',
    timestamp: Math.floor(at.getTime() / 1000),
    nonce: `nonce-${process.pid}-${nonces++}-abcdef`,
  };
  const headers = signedHeaders(workshop, hostId, secret, parts);
  return {
    method: parts.method,
    path: parts.path,
    body: parts.body,
    header: (n: string) => headers[n],
    ...over,
  } satisfies SignedCall;
}

async function refusal(c: SignedCall): Promise<string> {
  try {
    await verifySignedCall(c);
    return "accepted";
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
}

beforeAll(async () => {
  rt = await testRuntime({ clock });
});
afterAll(async () => {
  await rt.close();
  removeDir(rt.dataDir);
});

describe("signed calls from hosts", () => {
  it("accepts a call signed with the host's secret, once", async () => {
    const secret = await issueHostSecret("ws", "h1");
    expect(secret).toMatch(/^[0-9a-f]{64}$/);
    const c = call("ws", "h1", secret);
    expect(await verifySignedCall(c)).toEqual({ workshop: "ws", hostId: "h1" });
    expect(await refusal(c)).toBe("agent.replayed");
  });

  it("refuses a tampered body, path or method, another host's name, and a missing header", async () => {
    const secret = await issueHostSecret("ws", "h2");
    await issueHostSecret("ws", "h3");
    expect(await refusal(call("ws", "h2", secret, { body: '{"wait":21}' }))).toBe("agent.bad_signature");
    expect(await refusal(call("ws", "h2", secret, { path: "/agent/v1/result" }))).toBe("agent.bad_signature");
    expect(await refusal(call("ws", "h2", secret, { method: "PUT" }))).toBe("agent.bad_signature");
    const asOther = call("ws", "h2", secret);
    const header = (n: string) => (n === "x-labfleet-host" ? "ws/h3" : asOther.header(n));
    expect(await refusal({ ...asOther, header })).toBe("agent.bad_signature");
    expect(await refusal(call("ws", "nobody", secret))).toBe("agent.bad_signature");
    const noNonce = call("ws", "h2", secret);
    expect(
      await refusal({
        ...noNonce,
        header: (n) => (n === "x-labfleet-nonce" ? undefined : noNonce.header(n)),
      }),
    ).toBe("agent.unsigned");
  });

  it("refuses a call whose timestamp is outside the window", async () => {
    const secret = await issueHostSecret("ws", "h4");
    const old = new Date(clock.now().getTime() - (SIGNATURE_WINDOW_SECONDS + 5) * 1000);
    const ahead = new Date(clock.now().getTime() + (SIGNATURE_WINDOW_SECONDS + 5) * 1000);
    expect(await refusal(call("ws", "h4", secret, {}, old))).toBe("agent.stale");
    expect(await refusal(call("ws", "h4", secret, {}, ahead))).toBe("agent.stale");
    const near = new Date(clock.now().getTime() - (SIGNATURE_WINDOW_SECONDS - 5) * 1000);
    expect(await refusal(call("ws", "h4", secret, {}, near))).toBe("accepted");
  });

  it("keeps the previous secret valid for the grace after a rotation, then refuses it", async () => {
    const first = await issueHostSecret("ws", "h5");
    const second = await rotateHostSecret("ws", "h5");
    expect(second).not.toBe(first);
    expect(await refusal(call("ws", "h5", first))).toBe("accepted");
    expect(await refusal(call("ws", "h5", second))).toBe("accepted");
    clock.advance((ROTATION_GRACE_SECONDS + 1) * 1000);
    expect(await refusal(call("ws", "h5", first))).toBe("agent.bad_signature");
    expect(await refusal(call("ws", "h5", second))).toBe("accepted");
    await dropHostSecret("ws", "h5");
    expect(await refusal(call("ws", "h5", second))).toBe("agent.bad_signature");
  });

  it("gives machines that join at once with the same name distinct host ids and secrets", async () => {
    const joined = await Promise.all(
      Array.from({ length: 5 }, () =>
        recordEnrolledHost({ workshop: "byo", name: "Lab PC", facts: { cpus: 2 }, enrollment: "pending" }),
      ),
    );
    expect(joined.map((j) => j.hostId).sort()).toEqual([
      "lab-pc",
      "lab-pc-2",
      "lab-pc-3",
      "lab-pc-4",
      "lab-pc-5",
    ]);
    expect(new Set(joined.map((j) => j.secret)).size).toBe(5);
    const host = (await rt.store.host.get({ workshop: "byo", hostId: "lab-pc" }).go()).data;
    expect(host).toMatchObject({
      provider: "enrolled",
      enrollment: "pending",
      state: "pending",
      facts: { cpus: 2 },
    });
    const j = joined[0];
    if (!j) throw new Error("no host joined");
    expect(await refusal(call("byo", j.hostId, j.secret))).toBe("accepted");
  });
});
