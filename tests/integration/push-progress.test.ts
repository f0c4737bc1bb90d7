import { readFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { signedHeaders } from "../../shared/agent/signing.ts";
import { listEvents } from "../../shared/fleet/events.ts";
import { getRun, startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { board, claimLab, labForLink } from "../../shared/portal/claims.ts";
import { openPortal } from "../../shared/portal/portal.ts";
import { claimOrWait } from "../../shared/portal/waiting.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { fixturesDir, processesUnder, removeDir, testRuntime, waitFor } from "../harness/runtime.ts";

/**
 * Progress pushed by the lab's wrapper (shared/fleet/lab.ts -> POST /agent/v1/progress): a lab is claimable
 * within 2 s of its health passing though the next poll is far off; forged, tampered and replayed pushes change
 * nothing; with the API unreachable, polling still brings the lab to ready and no push holds the wrapper up.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
type ErrorBody = { error: { code: string; details: { path: string }[] } };
const runtimes: Runtime[] = [];
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

afterAll(async () => {
  for (const rt of runtimes) {
    await rt.close();
    removeDir(rt.dataDir);
  }
});

/**
 * A runtime of its own for a test. The one before it is closed first: the process has one set of deps at a time,
 * and its executor's last writes (a run's transitions) belong to its own store.
 */
async function runtime(opts: Parameters<typeof testRuntime>[0]): Promise<Runtime> {
  for (const old of runtimes.splice(0)) {
    await old.close();
    removeDir(old.dataDir);
  }
  const rt = await testRuntime(opts);
  runtimes.push(rt);
  return rt;
}

function yaml(name: string, lab: string, extra = "", portal = "portal:\n  enabled: true\n"): string {
  return `name: ${name}
lab:
  source: ${join(fixturesDir, "labs", lab)}
  setup: bash setup.sh
  health: test -f built && { [ -f healthy_at ] || date +%s%3N > healthy_at; }
  timeout_minutes: 5
${extra}provider:
  type: local
  count: 1
${portal}`;
}

const hostDir = (rt: Runtime, workshop: string) => join(rt.dataDir, "hosts", workshop, "student-01");

/**
 * When the lab first was claimable (the portal open and the lab free on the board, looked at every 50 ms), then a
 * claim that proves it (a claim's PIN hashing is not part of the time).
 */
async function claimWhenFree(workshop: string, timeoutMs: number): Promise<number> {
  const at = await waitFor(
    "the lab claimable",
    async () => {
      const b = await board(workshop);
      return b.open && b.labs.some((l) => l.status === "free") ? Date.now() : undefined;
    },
    timeoutMs,
  );
  const claim = await claimLab(
    workshop,
    { name: "Ada Lovelace", email: "ada@example.test", pin: "503917" },
    "10.0.0.1",
  );
  expect(claim.lab).toBe("student-01");
  return at;
}

describe("pushed progress on local hosts", () => {
  it("makes a lab claimable within 2 s of its health passing, long before the next poll; the run ends by its poll", async () => {
    // Each Wait state lasts 20 s: the first poll comes about 20 s after the deploy.
    const rt = await runtime({ waitMs: 20_000 });
    await asInstructor(() => submitWorkshop(yaml("pushfast", "pushed")));
    // Students are at the portal before the lab is ready (the instructor opened it).
    await asInstructor(() => openPortal("pushfast"));
    const run = await asInstructor(() => startRun("pushfast", "up"));
    const claimedAt = await claimWhenFree("pushfast", 15_000);
    const healthyAt = Number(readFileSync(join(hostDir(rt, "pushfast"), "lab", "healthy_at"), "utf8"));
    expect(claimedAt - healthyAt).toBeLessThan(2_000);
    const host = (await rt.store.host.get({ workshop: "pushfast", hostId: "student-01" }).go()).data;
    expect(host?.state).toBe("ready");
    expect(host?.phases?.map((p) => p.name)).toEqual(["fetch", "build"]);
    expect(host?.access).toBeTruthy();
    // Ready came from the push, not a poll: the run still waits for its first poll, which then ends it.
    expect((await getRun("pushfast", run.runId)).state).toBe("running");
    await rt.executor.idle();
    expect((await getRun("pushfast", run.runId)).state).toBe("succeeded");
    const events = await asInstructor(() => listEvents("pushfast", {}));
    const ready = events.events.filter((e) => e.type === "host.ready");
    expect(ready).toHaveLength(1);
    expect(ready[0]?.detail.by).toBe("labfleet");
  });

  it("opens the portal itself when the push of the last lab makes every lab ready (open_at_percent 100)", async () => {
    const rt = await runtime({ waitMs: 20_000 });
    await asInstructor(() => submitWorkshop(yaml("pushopen", "pushed").replace("count: 1", "count: 2")));
    const run = await asInstructor(() => startRun("pushopen", "up"));
    // Looked at every 50 ms: the labs' states the moment the portal is first seen open.
    const seen = await waitFor(
      "the portal open",
      async () => {
        if (!(await board("pushopen")).open) return undefined;
        const hosts = (await rt.store.host.query.byWorkshop({ workshop: "pushopen" }).go()).data;
        return { at: Date.now(), states: hosts.map((h) => h.state) };
      },
      15_000,
    );
    expect(seen.states).toEqual(["ready", "ready"]);
    const healthy = ["student-01", "student-02"].map((h) =>
      Number(readFileSync(join(rt.dataDir, "hosts", "pushopen", h, "lab", "healthy_at"), "utf8")),
    );
    expect(seen.at - Math.max(...healthy)).toBeLessThan(2_000);
    // The pushes opened it: the run's first poll is still to come.
    expect((await getRun("pushopen", run.runId)).state).toBe("running");
    await rt.executor.idle();
    expect((await getRun("pushopen", run.runId)).state).toBe("succeeded");
  });

  it("hands a lab its push made ready to the first in line, in a portal opened by hand (portal.enabled false)", async () => {
    const rt = await runtime({ waitMs: 20_000 });
    await asInstructor(() => submitWorkshop(yaml("pushline", "pushed", "", "portal:\n  enabled: false\n")));
    await asInstructor(() => openPortal("pushline"));
    // The student arrives before any lab is ready: they wait, first in line.
    const waiting = await claimOrWait(
      "pushline",
      { name: "Ada Lovelace", email: "ada@example.test", pin: "503917" },
      "10.0.0.1",
    );
    expect(waiting.lab).toBeUndefined();
    const run = await asInstructor(() => startRun("pushline", "up"));
    await waitFor(
      "the first in line to hold the lab",
      async () => ((await labForLink(waiting.token))?.lab === "student-01" ? true : undefined),
      15_000,
    );
    // The push handed it over: the run's first poll is still to come.
    expect((await getRun("pushline", run.runId)).state).toBe("running");
    await rt.executor.idle();
    expect((await getRun("pushline", run.runId)).state).toBe("succeeded");
  });

  it("refuses forged, tampered, replayed and unsigned pushes, and they change nothing", async () => {
    const rt = await runtime({ waitMs: 60_000 });
    await asInstructor(() => submitWorkshop(yaml("pushforge", "hang")));
    await asInstructor(() => startRun("pushforge", "up"));
    const envFile = join(hostDir(rt, "pushforge"), ".labfleet", "pushforge", "push.env");
    const env = await waitFor("push.env on the host", () => {
      try {
        return readFileSync(envFile, "utf8");
      } catch {
        return undefined;
      }
    });
    const secret = /LABFLEET_HOST_SECRET='([0-9a-f]{64})'/.exec(env)?.[1] as string;
    expect(secret).toBeTruthy();
    expect(env).toContain(`LABFLEET_API='${rt.url}'`);
    // The wrapper's own push of the lab's one phase has landed: nothing else pushes until the lab exits, so what
    // follows is the last word on the host's phases.
    await waitFor("the host's own phase pushed", async () => {
      const h = (await rt.store.host.get({ workshop: "pushforge", hostId: "student-01" }).go()).data;
      return h?.state === "deploying" && h.phase === "forever" ? h : undefined;
    });
    // What a finished, healthy lab would push.
    const probe = (rc: string) => {
      const verdict = `pid=1 alive=${rc ? 0 : 1} rc=${rc} rc_age=1 started=1 run=`;
      const status = `{"phase":"${rc ? "forged" : "building"}","state":"running"}`;
      return Buffer.from(`${verdict}\n@@status\n${status}\n\n@@log\n\n@@end ${verdict}\n`).toString("base64");
    };
    const healthy = JSON.stringify({ event: "health", probe: probe("0"), health: { exitCode: 0 } });
    const path = "/agent/v1/progress";
    let n = 0;
    const send = (
      body: string,
      key: string,
      extra: { body?: string; headers?: Record<string, string> } = {},
    ) => {
      const parts = {
        method: "POST",
        path,
        body,
        timestamp: Math.floor(Date.now() / 1000),
        nonce: `nonce-${Date.now()}-${n++}-abcdef`,
      };
      const headers = extra.headers ?? signedHeaders("pushforge", "student-01", key, parts);
      return fetch(`${rt.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: extra.body ?? body,
      }).then(async (r) => ({ status: r.status, body: (await r.json()) as ErrorBody, headers }));
    };
    const forged = await send(healthy, "0".repeat(64));
    expect([forged.status, forged.body.error.code]).toEqual([401, "agent.bad_signature"]);
    // Signed for a phase change, sent with the healthy lab's body.
    const running = JSON.stringify({ event: "phase", probe: probe("") });
    const tampered = await send(running, secret, { body: healthy });
    expect([tampered.status, tampered.body.error.code]).toEqual([401, "agent.bad_signature"]);
    const unsigned = await send(healthy, secret, { headers: {} });
    expect([unsigned.status, unsigned.body.error.code]).toEqual([401, "agent.unsigned"]);
    // The host's own push of a running lab goes through once; the same call again is a replay.
    const first = await send(running, secret);
    expect(first.status).toBe(200);
    const replay = await fetch(`${rt.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...first.headers },
      body: running,
    });
    expect([replay.status, ((await replay.json()) as { error: { code: string } }).error.code]).toEqual([
      401,
      "agent.replayed",
    ]);
    const bad = await send(JSON.stringify({ event: "done", probe: "%%" }), secret);
    expect(bad.status).toBe(400);
    expect(bad.body.error.details.map((d: { path: string }) => d.path).sort()).toEqual(["event", "probe"]);
    const h = (await rt.store.host.get({ workshop: "pushforge", hostId: "student-01" }).go()).data;
    expect(h?.state).toBe("deploying");
    expect(h?.access).toBeUndefined();
    // Only the host's own push was applied: its phase, never the forged one's.
    expect(h?.phases?.map((p) => p.name)).toContain("building");
    expect(h?.phases?.map((p) => p.name)).not.toContain("forged");
  });
});

describe("with the API unreachable", () => {
  let blackhole: Server | undefined;
  const sockets: Socket[] = [];
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => blackhole?.close(r));
  });

  it("polling still brings the lab to ready, and no push holds the wrapper up", async () => {
    // A server that accepts connections and never answers: every push waits until its own timeout.
    blackhole = createServer((s) => sockets.push(s));
    await new Promise<void>((r) => blackhole?.listen(0, "127.0.0.1", r));
    const port = (blackhole.address() as { port: number }).port;
    const rt = await runtime({ waitMs: 200, hostApiUrl: `http://127.0.0.1:${port}` });
    await asInstructor(() => submitWorkshop(yaml("pushdown", "pushed")));
    const run = await asInstructor(() => startRun("pushdown", "up"));
    await rt.executor.idle();
    expect((await getRun("pushdown", run.runId)).state).toBe("succeeded");
    // The wrapper did try to push (on a busy machine the poll may see the lab ready before its push connects).
    await waitFor("the wrapper's push to connect", () => sockets.length > 0 || undefined, 30_000);
    // Each push gives up by itself: the wrapper ends (health passed, pushed or not) well within a minute.
    await waitFor(
      "the wrapper to end",
      () => processesUnder(hostDir(rt, "pushdown")).length === 0 || undefined,
      30_000,
    );
  });
});
