import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "test-token-for-the-api-suite";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}` };
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();

beforeAll(async () => {
  rt = await testRuntime({ token: TOKEN });
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

const post = (path: string, body: unknown, headers: Record<string, string> = auth) =>
  app.request(path, {
    method: "POST",
    headers: { ...headers, "content-type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });

describe("instructor API", () => {
  it("answers health without auth", async () => {
    const res = await app.request("/api/health");
    expect(res.status).toBe(200);
    expect(await j(res)).toEqual({ ok: true, store: "ok" });
  });

  it.each([
    ["GET", "/api/workshops"],
    ["POST", "/api/workshops"],
    ["GET", "/api/workshops/demo"],
    ["POST", "/api/workshops/demo/up"],
    ["POST", "/api/workshops/demo/teardown"],
    ["GET", "/api/workshops/demo/runs/run_01J0000000000000000000000"],
    ["GET", "/api/workshops/demo/hosts/student-01/access"],
  ])("%s %s needs a valid bearer token", async (method, path) => {
    const none = await app.request(path, { method });
    expect(none.status).toBe(401);
    expect((await j(none)).error.code).toBe("auth.missing");
    const wrong = await app.request(path, { method, headers: { authorization: "Bearer nope" } });
    expect(wrong.status).toBe(401);
    expect((await j(wrong)).error.code).toBe("auth.invalid");
  });

  it("rejects invalid YAML with a 400 listing every path, and stores nothing", async () => {
    const res = await post("/api/workshops", {
      yaml: "name: Bad Name\nlab:\n  source: x\n  concurrency: 0\nprovider:\n  type: local\n  count: 999\n",
    });
    expect(res.status).toBe(400);
    const body = await j(res);
    expect(body.error.code).toBe("workshop.invalid");
    expect(body.error.details.map((d: { path: string }) => d.path).sort()).toEqual([
      "lab.concurrency",
      "lab.setup",
      "name",
      "provider.count",
    ]);
    expect(body.error.details.find((d: { path: string }) => d.path === "provider.count").line).toBe(7);
    const list = await j(await app.request("/api/workshops", { headers: auth }));
    expect(list.workshops).toEqual([]);
  });

  it("rejects a malformed body with a 400, never a 500", async () => {
    expect((await post("/api/workshops", "{not json")).status).toBe(400);
    const wrongShape = await post("/api/workshops", { yml: "x" });
    expect(wrongShape.status).toBe(400);
    const body = await j(wrongShape);
    expect(body.error.details.map((d: { path: string }) => d.path).sort()).toEqual(["yaml", "yml"]);
    expect((await post("/api/workshops", { yaml: "name: x", baseDir: "relative/dir" })).status).toBe(400);
  });

  it("answers 404 for an unknown workshop, run or route", async () => {
    for (const [method, path] of [
      ["GET", "/api/workshops/nope"],
      ["POST", "/api/workshops/nope/up"],
      ["POST", "/api/workshops/nope/teardown"],
    ] as const) {
      const res = await app.request(path, { method, headers: auth });
      expect(res.status, path).toBe(404);
      expect((await j(res)).error.code).toBe("workshop.not_found");
    }
    expect((await app.request("/api/nothing-here", { headers: auth })).status).toBe(404);
  });

  it("creates, updates and reads a workshop, then runs up and teardown", async () => {
    const yaml = workshopYaml({ name: "api-ws", count: 1 });
    const created = await post("/api/workshops", { yaml });
    expect(created.status).toBe(201);
    expect(await j(created)).toEqual({ name: "api-ws", created: true });
    const updated = await post("/api/workshops", { yaml });
    expect(updated.status).toBe(200);
    expect((await j(updated)).created).toBe(false);

    const up = await post("/api/workshops/api-ws/up", {});
    expect(up.status).toBe(202);
    const { run } = await j(up);
    expect(run).toMatchObject({ kind: "up", state: "running" });
    await rt.executor.idle();

    const status = await j(await app.request("/api/workshops/api-ws", { headers: auth }));
    expect(status.state).toBe("ready");
    expect(status.hostList.map((h: { id: string; state: string }) => [h.id, h.state])).toEqual([
      ["student-01", "ready"],
    ]);
    const access = await app.request("/api/workshops/api-ws/hosts/student-01/access", { headers: auth });
    expect(access.status).toBe(200);
    expect(access.headers.get("cache-control")).toBe("no-store");
    expect((await j(access)).access.credentials).toEqual({ password: "s3cret-student-01" });
    expect(
      (await app.request("/api/workshops/api-ws/hosts/student-09/access", { headers: auth })).status,
    ).toBe(404);
    const runRes = await app.request(`/api/workshops/api-ws/runs/${run.id}`, { headers: auth });
    expect((await j(runRes)).run.state).toBe("succeeded");

    const td = await post("/api/workshops/api-ws/teardown", {});
    expect(td.status).toBe(202);
    await rt.executor.idle();
    const after = await j(await app.request("/api/workshops/api-ws", { headers: auth }));
    expect(after.state).toBe("torn_down");
    // Credentials are dropped with the hosts.
    expect(
      (await app.request("/api/workshops/api-ws/hosts/student-01/access", { headers: auth })).status,
    ).toBe(404);
  });

  it("sets security headers and no-store on API answers", async () => {
    const res = await app.request("/api/workshops", { headers: auth });
    expect(res.headers.get("cache-control")).toBe("no-store");
    expect(res.headers.get("content-security-policy")).toContain("frame-ancestors 'none'");
    expect(res.headers.get("x-content-type-options")).toBe("nosniff");
  });
});
