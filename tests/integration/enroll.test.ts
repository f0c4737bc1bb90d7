import { createHash } from "node:crypto";
import { ScanCommand } from "@aws-sdk/client-dynamodb";
import { unmarshall } from "@aws-sdk/util-dynamodb";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { approveHosts, listPendingHosts, rejectHosts } from "../../shared/agent/enrollment.ts";
import { type SignedCall, verifySignedCall } from "../../shared/agent/host-secrets.ts";
import { createJoinToken, listJoinTokens, revokeJoinToken } from "../../shared/agent/join-tokens.ts";
import { signedHeaders } from "../../shared/agent/signing.ts";
import { newestEvents } from "../../shared/fleet/events.ts";
import { listHosts, submitWorkshop } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { movableClock, removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * Machines joining workshops with join tokens, over HTTP to the real runtime (a test plays the machine with
 * fetch): uses counted exactly under a race, expiry, revocation, requirements, pending hosts approved or rejected,
 * and the token kept out of logs and errors.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const clock = movableClock();
const lines: string[] = [];
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "t", name: "Ana" }, fn);
// biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field
type Answer = { status: number; body: any; text: string };

const REQUIRES = `  requires:
    cpus: 2
    memory_gib: 4
    commands: [git, make]
`;
const GOOD = { cpus: 4, memoryMb: 8192, diskGb: 50, commands: ["git", "make", "bash"], hostname: "lab-pc" };

async function join(body: unknown): Promise<Answer> {
  const res = await fetch(`${rt.url}/agent/v1/enroll`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, text, body: text ? JSON.parse(text) : undefined };
}

const token = (workshop: string, o: Parameters<typeof createJoinToken>[1] = {}) =>
  asInstructor(() => createJoinToken(workshop, o));

async function secretsOf(workshop: string): Promise<string[]> {
  const r = await rt.store.hostSecret.scan.go({ pages: "all" });
  return r.data.filter((s) => s.workshop === workshop).map((s) => s.hostId);
}

let nonce = 0;
function signedCall(workshop: string, hostId: string, secret: string): SignedCall {
  const parts = {
    method: "POST",
    path: "/agent/v1/poll",
    body: "{}",
    timestamp: Math.floor(clock.now().getTime() / 1000),
    nonce: `enroll-test-nonce-${nonce++}`,
  };
  const headers = signedHeaders(workshop, hostId, secret, parts);
  return { ...parts, header: (n) => headers[n] };
}

beforeAll(async () => {
  setLogSink((line) => lines.push(line), "info");
  rt = await testRuntime({ clock });
  for (const name of ["room", "race", "byo", "req", "appr"])
    await asInstructor(() =>
      submitWorkshop(workshopYaml({ name, count: 1, extraLab: name === "req" ? REQUIRES : "" })),
    );
});
afterAll(async () => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("joining with a join token", () => {
  it("a token of 3 uses enrolls 3 machines and refuses a 4th, which leaves nothing behind", async () => {
    const t = await token("room", { uses: 3 });
    expect(t.token).toMatch(/^lfj_room_[A-Za-z0-9_-]{43}$/);
    const answers = [];
    for (let i = 0; i < 3; i++) answers.push(await join({ token: t.token, name: "Lab PC", facts: GOOD }));
    expect(answers.map((a) => a.status)).toEqual([201, 201, 201]);
    expect(answers.map((a) => a.body.hostId)).toEqual(["lab-pc", "lab-pc-2", "lab-pc-3"]);
    for (const a of answers) {
      expect(a.body).toEqual({
        workshop: "room",
        hostId: a.body.hostId,
        secret: a.body.secret,
        enrollment: "approved",
      });
      expect(a.body.secret).toMatch(/^[0-9a-f]{64}$/);
    }
    const before = { hosts: (await listHosts("room")).length, secrets: (await secretsOf("room")).length };
    const fourth = await join({ token: t.token, name: "Lab PC", facts: GOOD });
    expect(fourth.status).toBe(409);
    expect(fourth.body.error.code).toBe("join.used_up");
    expect((await listHosts("room")).length).toBe(before.hosts);
    expect((await secretsOf("room")).length).toBe(before.secrets);
    const [info] = await asInstructor(() => listJoinTokens("room"));
    expect(info).toMatchObject({
      uses: 3,
      used: 3,
      state: "used_up",
      hosts: ["lab-pc", "lab-pc-2", "lab-pc-3"],
    });
    const hosts = await listHosts("room");
    expect(hosts.find((h) => h.hostId === "lab-pc")).toMatchObject({
      provider: "enrolled",
      enrollment: "approved",
      state: "pending",
      facts: GOOD,
    });
  });

  it("42 machines racing one 40-use token: exactly 40 join, each with its own host id", async () => {
    const t = await token("race", { uses: 40 });
    const answers = await Promise.all(
      Array.from({ length: 42 }, (_, i) => join({ token: t.token, name: `kiosk-${i % 14}`, facts: GOOD })),
    );
    const ok = answers.filter((a) => a.status === 201);
    expect(ok.length).toBe(40);
    expect(answers.filter((a) => a.status === 409 && a.body.error.code === "join.used_up").length).toBe(2);
    expect(new Set(ok.map((a) => a.body.hostId)).size).toBe(40);
    const enrolled = (await listHosts("race")).filter((h) => h.provider === "enrolled");
    expect(enrolled.length).toBe(40);
    expect((await secretsOf("race")).length).toBe(40);
    const [info] = await asInstructor(() => listJoinTokens("race"));
    expect(info).toMatchObject({ used: 40, state: "used_up" });
    expect(info?.hosts.length).toBe(40);
  });

  it("refuses an expired token, a revoked one and one that is not a token, using nothing", async () => {
    const expiring = await token("byo", { uses: 5, expiresInSeconds: 3600 });
    const revoked = await token("byo", { uses: 5 });
    await asInstructor(() => revokeJoinToken("byo", revoked.info.id));
    clock.advance(3600 * 1000 + 1000);
    try {
      const late = await join({ token: expiring.token, facts: GOOD });
      expect(late.status).toBe(401);
      expect(late.body.error.code).toBe("join.expired");
      const gone = await join({ token: revoked.token, facts: GOOD });
      expect(gone.status).toBe(401);
      expect(gone.body.error.code).toBe("join.revoked");
      const forged = `${revoked.token.slice(0, -4)}AAAA`;
      const wrong = await join({ token: forged, facts: GOOD });
      expect(wrong.status).toBe(401);
      expect(wrong.body.error.code).toBe("join.invalid");
      expect((await join({ token: "lfj_nope", facts: GOOD })).body.error.code).toBe("join.invalid");
      for (const a of [late, gone, wrong]) expect(a.text).not.toContain("lfj_");
    } finally {
      clock.advance(-(3600 * 1000 + 1000));
    }
    expect((await listHosts("byo")).filter((h) => h.provider === "enrolled")).toEqual([]);
    const infos = await asInstructor(() => listJoinTokens("byo"));
    expect(infos.map((i) => [i.state, i.used])).toEqual([
      ["revoked", 0],
      ["active", 0],
    ]);
  });

  it("answers a body that is not right with the field and what was expected, and no token", async () => {
    const t = await token("byo");
    const bad = await join({ token: t.token, facts: { cpus: "four", memoryMb: -1 }, extra: 1 });
    expect(bad.status).toBe(400);
    expect(bad.body.error.code).toBe("input.invalid");
    const paths = bad.body.error.details.map((d: { path: string }) => d.path).sort();
    expect(paths).toEqual(["extra", "facts.cpus", "facts.memoryMb"]);
    expect(bad.text).not.toContain(t.token);
    expect((await join("{nope")).body.error.code).toBe("input.bad_json");
    const noToken = await join({ facts: GOOD });
    expect(noToken.status).toBe(400);
    expect(noToken.body.error.details[0].path).toBe("token");
    const [info] = await asInstructor(() => listJoinTokens("byo"));
    expect(info).toMatchObject({ id: t.info.id, used: 0 });
  });

  it("refuses a machine that does not meet lab.requires with what is missing, and the token keeps its use", async () => {
    const t = await token("req");
    const weak = await join({
      token: t.token,
      name: "old laptop",
      facts: { cpus: 1, memoryMb: 2048, commands: ["git"] },
    });
    expect(weak.status).toBe(422);
    expect(weak.body.error.code).toBe("join.requirements");
    expect(weak.body.error.details).toEqual([
      { path: "facts.cpus", message: "expected at least 2 CPUs; the machine has 1" },
      { path: "facts.memoryMb", message: "expected at least 4 GiB of memory; the machine has 2 GiB" },
      {
        path: "facts.commands",
        message: "expected the commands make on the PATH; the machine did not report them",
      },
    ]);
    const silent = await join({ token: t.token, facts: {} });
    expect(silent.status).toBe(422);
    expect(silent.body.error.details.map((d: { message: string }) => d.message)).toContain(
      "expected at least 2 CPUs; none reported",
    );
    expect((await listHosts("req")).filter((h) => h.provider === "enrolled")).toEqual([]);
    const ok = await join({ token: t.token, name: "new laptop", facts: GOOD });
    expect(ok.status).toBe(201);
    expect(ok.body.hostId).toBe("new-laptop");
  });
});

describe("pending hosts", () => {
  it("a manual token's host waits as pending, is listed, and approve lets it in", async () => {
    const t = await token("appr", { uses: 2, approve: "manual" });
    const a = await join({ token: t.token, name: "Desk 1", facts: GOOD });
    expect(a.status).toBe(201);
    expect(a.body.enrollment).toBe("pending");
    const pending = await asInstructor(() => listPendingHosts("appr"));
    expect(pending.map((p) => [p.id, p.enrollment, p.facts.cpus])).toEqual([["desk-1", "pending", 4]]);
    expect(await asInstructor(() => approveHosts("appr", ["desk-1"]))).toEqual([
      { hostId: "desk-1", result: "approved" },
    ]);
    expect(await asInstructor(() => listPendingHosts("appr"))).toEqual([]);
    expect((await rt.store.host.get({ workshop: "appr", hostId: "desk-1" }).go()).data?.enrollment).toBe(
      "approved",
    );
    expect(await asInstructor(() => approveHosts("appr", ["desk-1"]))).toEqual([
      { hostId: "desk-1", result: "unchanged" },
    ]);
    const events = await newestEvents("appr", 10);
    expect(events.find((e) => e.type === "host.approved")).toMatchObject({
      hostId: "desk-1",
      detail: { by: "Ana" },
    });
    expect(events.find((e) => e.type === "host.joined")).toMatchObject({
      hostId: "desk-1",
      detail: { by: "host desk-1", enrollment: "pending" },
    });
  });

  it("reject removes a pending host and drops its secret: its signed calls are refused, and it is told to forget", async () => {
    const t = await token("appr", { approve: "manual" });
    const a = await join({ token: t.token, name: "Stranger", facts: GOOD });
    expect(a.body.enrollment).toBe("pending");
    expect(await verifySignedCall(signedCall("appr", "stranger", a.body.secret))).toEqual({
      workshop: "appr",
      hostId: "stranger",
    });
    // A typo among the ids changes nothing; an approved host is not rejected.
    await expect(asInstructor(() => rejectHosts("appr", ["stranger", "nobody"]))).rejects.toMatchObject({
      code: "host.not_found",
    });
    await expect(asInstructor(() => rejectHosts("appr", ["desk-1"]))).rejects.toMatchObject({
      code: "enrollment.not_pending",
    });
    expect(await asInstructor(() => rejectHosts("appr", ["stranger"]))).toEqual([
      { hostId: "stranger", result: "rejected" },
    ]);
    expect((await rt.store.host.get({ workshop: "appr", hostId: "stranger" }).go()).data).toBeNull();
    // The secret is gone; only the mark that the host was let go is kept, so its agent forgets and stops.
    const kept = (await rt.store.hostSecret.get({ workshop: "appr", hostId: "stranger" }).go()).data;
    expect(kept?.current).toBeUndefined();
    expect(kept?.forgottenAt).toBeTruthy();
    await expect(verifySignedCall(signedCall("appr", "stranger", a.body.secret))).rejects.toMatchObject({
      code: "agent.forgotten",
    });
    expect((await newestEvents("appr", 5)).find((e) => e.type === "host.rejected")).toMatchObject({
      hostId: "stranger",
    });
  });

  it("stores a token hashed: the table holds its SHA-256 and never the token, before and after a machine joins", async () => {
    const t = await token("byo", { uses: 2 });
    const everything = async () => {
      const items = [];
      let start: Record<string, unknown> | undefined;
      do {
        const page = await rt.store.client.send(
          new ScanCommand({ TableName: rt.table, ...(start ? { ExclusiveStartKey: start as never } : {}) }),
        );
        items.push(...(page.Items ?? []).map((i) => unmarshall(i)));
        start = page.LastEvaluatedKey;
      } while (start);
      return items;
    };
    const secretPart = t.token.slice(-43);
    const stored = (await everything()).filter((i) => JSON.stringify(i).includes(t.info.id));
    // The token's own item is found by its hash, and holds nothing of the token itself.
    const item = stored.find((i) => i.hash === createHash("sha256").update(t.token).digest("hex"));
    expect(item).toMatchObject({ workshop: "byo", tokenId: t.info.id, uses: 2, remaining: 2 });
    expect(JSON.stringify(await everything())).not.toContain(secretPart);
    const a = await join({ token: t.token, name: "hashed", facts: GOOD });
    expect(a.status).toBe(201);
    const after = JSON.stringify(await everything());
    expect(after).not.toContain(secretPart);
    expect(after).toContain(createHash("sha256").update(t.token).digest("hex"));
  });

  it("never writes a join token or a host secret into a log line", async () => {
    const t = await token("byo", { uses: 2 });
    const a = await join({ token: t.token, name: "logged", facts: GOOD });
    expect(a.status).toBe(201);
    await join({ token: `${t.token}x`, facts: GOOD });
    const all = lines.join("\n");
    expect(all).toContain('"msg":"host joined"');
    expect(all).not.toContain(t.token);
    expect(all).not.toContain(t.token.slice(-43));
    expect(all).not.toContain(a.body.secret);
  });
});
