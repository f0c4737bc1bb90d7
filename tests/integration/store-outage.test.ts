import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRuntime, startLocalRuntime } from "../../cli/local/runtime.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import {
  javaOn,
  movableClock,
  processesUnder,
  removeDir,
  tempDir,
  waitFor,
  workshopYaml,
} from "../harness/runtime.ts";

/**
 * The store dies mid-run: the real local runtime with its own supervised DynamoDB Local (not the suite's shared
 * one), an `up` of three local labs that take a few seconds each, and DynamoDB Local's java process SIGKILLed
 * while they build. Meanwhile the API, the console and the portal answer 503 `store.unavailable` and health says
 * so; the supervisor starts DynamoDB Local again on the same data, the paused run resumes and succeeds with every
 * lab ready, what was written before the kill is all there, and a claim and the TTL schedule work afterwards.
 */

const WS = "outage";
const RESTART_DELAY_MS = 5000; // long enough to look at the outage; the supervisor's default is 250 ms
const dataDir = tempDir("labfleet-outage-");
const clock = movableClock();
const logs: string[] = [];
let rt: LocalRuntime;

// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
type Json = any;

beforeAll(async () => {
  setLogSink((line) => logs.push(line), "info");
  rt = await startLocalRuntime({
    dataDir,
    waitMs: 100,
    schedulerIntervalMs: 60_000,
    clock,
    dynamoRestartDelayMs: RESTART_DELAY_MS,
  });
});

afterAll(async () => {
  await rt?.close();
  expect(javaOn(dataDir)).toEqual([]);
  removeDir(dataDir);
});

const dynamoPid = () => Number(readFileSync(join(dataDir, "dynamodb.pid"), "utf8"));

async function api(method: string, path: string, body?: unknown) {
  const res = await fetch(`${rt.url}/api${path}`, {
    method,
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(20_000),
  });
  const text = await res.text();
  return { res, status: res.status, json: (text ? JSON.parse(text) : {}) as Json };
}

/** A browser over fetch: a cookie jar, the CSRF field of the last page, the runtime's own Origin. */
class Browser {
  readonly jar = new Map<string, string>();
  csrf = "";
  private async take(res: Response) {
    storeCookies(this.jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { res, status: res.status, text, location: res.headers.get("location") ?? "" };
  }
  async get(path: string) {
    return this.take(
      await fetch(`${rt.url}${path}`, {
        headers: cookieHeader(this.jar),
        redirect: "manual",
        signal: AbortSignal.timeout(20_000),
      }),
    );
  }
  async post(path: string, fields: Record<string, string>) {
    return this.take(
      await fetch(`${rt.url}${path}`, {
        method: "POST",
        headers: {
          ...cookieHeader(this.jar),
          "content-type": "application/x-www-form-urlencoded",
          origin: rt.url,
          "sec-fetch-site": "same-origin",
        },
        body: new URLSearchParams({ _csrf: this.csrf, ...fields }),
        redirect: "manual",
        signal: AbortSignal.timeout(20_000),
      }),
    );
  }
}

describe("DynamoDB Local killed mid-run", () => {
  it("answers 503 while it is down, restarts it, and the run, a claim and the schedule go on", async () => {
    // --- before the kill: a workshop, its portal and code, a console session, a student past the code ---
    const yaml = workshopYaml({ name: WS, lab: "slow", count: 3 });
    expect((await api("POST", "/workshops", { yaml })).status).toBe(201);
    const up = await api("POST", `/workshops/${WS}/up`, {});
    expect(up.status).toBe(202);
    const runId: string = up.json.run.id;
    const opened = await api("POST", `/workshops/${WS}/portal/open`);
    expect(opened.status).toBe(200);
    const code: string = opened.json.code;

    const instructor = new Browser();
    await instructor.get("/console/login");
    expect((await instructor.post("/console/login", { token: rt.token })).status).toBe(303);
    expect((await instructor.get(`/console/w/${WS}`)).status).toBe(200);
    const student = new Browser();
    await student.get("/");
    expect((await student.post("/code", { code })).status).toBe(303);
    expect((await student.get("/board")).status).toBe(200);

    await waitFor(
      "a lab in the middle of its setup",
      async () => {
        const s = await api("GET", `/workshops/${WS}`);
        return s.json.hostList?.some((h: Json) => h.state === "deploying" && h.phase === "two") || undefined;
      },
      60_000,
    );

    // --- the kill ---
    const oldJava = dynamoPid();
    expect(javaOn(join(dataDir, "dynamodb"))).toEqual([oldJava]);
    process.kill(oldJava, "SIGKILL");

    const down = await waitFor(
      "the API to answer 503",
      async () => {
        const r = await api("GET", `/workshops/${WS}`);
        return r.status === 503 ? r : undefined;
      },
      RESTART_DELAY_MS,
    );
    expect(down.json.error).toMatchObject({ kind: "unavailable", code: "store.unavailable" });
    expect(down.json.error.message).toContain("the store is unreachable");
    expect(down.res.headers.get("retry-after")).toBe("5");

    const health = await waitFor(
      "health to report the store",
      async () => {
        const r = await api("GET", "/health");
        return r.status === 503 ? r : undefined;
      },
      RESTART_DELAY_MS,
    );
    expect(health.json).toEqual({ ok: false, store: "unreachable" });
    expect(health.res.headers.get("retry-after")).toBe("5");

    const consolePage = await instructor.get(`/console/w/${WS}`);
    expect(consolePage.status).toBe(503);
    expect(consolePage.res.headers.get("content-type")).toContain("text/html");
    expect(consolePage.res.headers.get("retry-after")).toBe("5");
    expect(consolePage.text).toContain("Temporarily unavailable");
    expect(consolePage.text).toContain("the store is unreachable");

    const board = await student.get("/board");
    expect(board.status).toBe(503);
    expect(board.res.headers.get("content-type")).toContain("text/html");
    expect(board.res.headers.get("retry-after")).toBe("5");
    expect(board.text).toContain("Temporarily unavailable");
    expect(board.text).toContain("the store is unreachable");
    expect(board.text).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|ElectroError/);
    // The outage was seen before the supervisor's pause was over: it has not restarted yet.
    expect(logs.some((l) => l.includes('"DynamoDB Local restarted"'))).toBe(false);

    // --- the supervisor brings it back on the same data ---
    await waitFor(
      "health to be ok again",
      async () => {
        const r = await api("GET", "/health");
        return r.status === 200 ? r : undefined;
      },
      90_000,
    );
    expect((await api("GET", "/health")).json).toEqual({ ok: true, store: "ok" });
    expect(dynamoPid()).not.toBe(oldJava);
    expect(javaOn(join(dataDir, "dynamodb"))).toEqual([dynamoPid()]);
    expect(logs.some((l) => l.includes('"DynamoDB Local exited; restarting it"'))).toBe(true);
    expect(logs.some((l) => l.includes('"DynamoDB Local restarted"'))).toBe(true);

    // The run was paused, not failed, and finishes with every lab ready.
    await rt.executor.idle();
    const s = await api("GET", `/workshops/${WS}`);
    expect(s.json.runs.map((r: Json) => [r.id, r.kind, r.state])).toEqual([[runId, "up", "succeeded"]]);
    expect(s.json.hostList.map((h: Json) => h.state)).toEqual(["ready", "ready", "ready"]);
    expect(s.json.hostList.filter((h: Json) => h.error)).toEqual([]);
    expect(logs.some((l) => l.includes("run paused; it resumes when the store answers"))).toBe(true);

    // What was written before the kill is there: the portal's code, the console session, the student's access.
    expect((await api("GET", `/workshops/${WS}/portal/info`)).json.code).toBe(code);
    expect((await instructor.get(`/console/w/${WS}`)).status).toBe(200);
    expect((await student.get("/board")).status).toBe(200);

    // A claim after recovery.
    const claim = await student.post("/claim", {
      name: "Ada Lovelace",
      email: "ada@example.test",
      pin: "480271",
    });
    expect(claim.status, claim.text).toBe(303);
    expect(claim.location).toMatch(/^\/l\//);
    const claims = (await api("GET", `/workshops/${WS}/portal/status`)).json.claims;
    expect(claims).toHaveLength(1);

    // The TTL schedule armed before the kill fires, and its teardown runs.
    clock.advance(6 * 3_600_000 + 60_000);
    expect(await rt.tick()).toBe(1);
    await rt.executor.idle();
    const after = await api("GET", `/workshops/${WS}`);
    expect(after.json.runs.find((r: Json) => r.kind === "teardown")?.state).toBe("succeeded");
    expect(processesUnder(join(dataDir, "hosts"))).toEqual([]);
  }, 240_000);
});
