import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ApiDocument, operations } from "../../web/api/openapi.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * The OpenAPI document at /api/openapi.json and the reference page at /api/docs: both describe every route
 * the app serves under /api (walked from app.routes, like auth-walk), and the validators behind the
 * document answer invalid input as the rest of the app does.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "test-token-for-the-openapi-suite";
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

/** `GET /api/workshops/{name}` for every route the app registers under /api. */
const served = [
  ...new Set(
    app.routes
      .filter((r) => (r.path === "/api" || r.path.startsWith("/api/")) && r.method !== "ALL")
      .map((r) => `${r.method} ${r.path.replace(/:([A-Za-z0-9_]+)/g, "{$1}")}`),
  ),
].sort();

async function fetchDocument(): Promise<ApiDocument> {
  const res = await app.request("/api/openapi.json", { headers: auth });
  expect(res.status).toBe(200);
  expect(res.headers.get("content-type")).toMatch(/^application\/json/);
  return j(res);
}

const documented = (doc: ApiDocument) => operations(doc).map((o) => `${o.method} ${o.path}`);

/** Every `$ref` anywhere in a JSON value. */
function refs(value: unknown, out: string[] = []): string[] {
  if (Array.isArray(value)) for (const v of value) refs(v, out);
  else if (value && typeof value === "object") {
    for (const [k, v] of Object.entries(value)) {
      if (k === "$ref" && typeof v === "string") out.push(v);
      else refs(v, out);
    }
  }
  return out;
}

const post = (path: string, body: string, headers: Record<string, string> = {}) =>
  app.request(path, { method: "POST", headers: { ...auth, ...headers }, body });
const detailPaths = (body: { error: { details?: { path: string }[] } }) =>
  (body.error.details ?? []).map((d) => d.path).sort();

describe("the OpenAPI document", () => {
  it("is served behind the instructor token, like the rest of /api", async () => {
    for (const path of ["/api/openapi.json", "/api/docs"]) {
      const none = await app.request(path);
      expect(none.status, path).toBe(401);
      expect((await j(none)).error.code).toBe("auth.missing");
      const wrong = await app.request(path, { headers: { authorization: "Bearer nope" } });
      expect(wrong.status, path).toBe(401);
    }
  });

  it("is an OpenAPI 3.1 document with a bearer security scheme", async () => {
    const doc = await fetchDocument();
    expect(doc.openapi).toBe("3.1.0");
    expect(doc.info.title).toBe("labfleet instructor API");
    expect(doc.info.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(Object.keys(doc.paths ?? {}).length).toBeGreaterThan(25);
    expect(doc.components?.securitySchemes?.bearerAuth).toMatchObject({ type: "http", scheme: "bearer" });
    expect(doc.security).toEqual([{ bearerAuth: [] }]);
    expect(doc.paths?.["/api/health"]?.get?.security).toEqual([]);

    // Every reference resolves, every status is a status.
    const schemas = doc.components?.schemas ?? {};
    for (const ref of refs(doc)) {
      expect(ref).toMatch(/^#\/components\/schemas\//);
      expect(schemas, ref).toHaveProperty([ref.replace("#/components/schemas/", "")]);
    }
    for (const { method, path, op } of operations(doc)) {
      for (const status of Object.keys(op.responses ?? {}))
        expect(status, `${method} ${path}`).toMatch(/^[1-5]\d\d$/);
      // The parameters of the path template, no more, no fewer, each required.
      const inPath = [...path.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]).sort();
      const declared = (op.parameters ?? []).filter((p) => p.in === "path");
      expect(declared.map((p) => p.name).sort(), `${method} ${path}`).toEqual(inPath);
      for (const p of declared) expect(p.required, `${method} ${path} ${p.name}`).toBe(true);
    }
    expect(schemas).toHaveProperty("Error");
  });

  it("describes every route the app serves under /api, and only those", async () => {
    const doc = await fetchDocument();
    expect(served.length).toBeGreaterThan(25);
    for (const must of [
      "GET /api/health",
      "GET /api/openapi.json",
      "GET /api/docs",
      "POST /api/workshops/{name}/doctor",
      "POST /api/workshops/{name}/portal/release",
    ]) {
      expect(served).toContain(must);
    }
    expect(documented(doc).sort()).toEqual(served);
  });

  it("gives every operation a summary, a success answer and its error answers in the error shape", async () => {
    const doc = await fetchDocument();
    for (const { method, path, op } of operations(doc)) {
      const what = `${method} ${path}`;
      expect(op.summary?.trim(), what).toBeTruthy();
      const statuses = Object.keys(op.responses ?? {});
      expect(
        statuses.some((s) => s.startsWith("2")),
        what,
      ).toBe(true);
      const isPublic = (op.security ?? doc.security ?? []).length === 0;
      if (!isPublic) {
        expect(op.responses?.["401"]?.content?.["application/json"]?.schema, what).toEqual({
          $ref: "#/components/schemas/Error",
        });
      }
      if ((op.parameters ?? []).length > 0 || op.requestBody) expect(statuses, what).toContain("400");
    }
    expect(operations(doc).filter((o) => (o.op.security ?? doc.security ?? []).length === 0)).toHaveLength(1);
    // The error shape every 4xx answer has.
    const error = doc.components?.schemas?.Error as {
      properties: { error: { properties: Record<string, unknown>; required: string[] } };
    };
    expect(error.properties.error.required).toEqual(expect.arrayContaining(["kind", "code", "message"]));
    expect(Object.keys(error.properties.error.properties)).toEqual(
      expect.arrayContaining(["kind", "code", "message", "details"]),
    );
  });

  it("is generated from the schemas the routes validate with", async () => {
    const doc = await fetchDocument();
    const submit = doc.paths?.["/api/workshops"]?.post?.requestBody as {
      content: { "application/json": { schema: { $ref: string } } };
    };
    const ref = submit.content["application/json"].schema.$ref.replace("#/components/schemas/", "");
    expect(doc.components?.schemas?.[ref]).toMatchObject({
      type: "object",
      required: ["yaml"],
      additionalProperties: false,
      properties: { yaml: { type: "string", minLength: 1 }, baseDir: { type: "string" } },
    });
    const name = doc.paths?.["/api/workshops/{name}"]?.get?.parameters?.[0] as {
      name: string;
      schema: { pattern: string };
    };
    expect(name).toMatchObject({ name: "name", in: "path" });
    // The pattern the document states is the one the validator applies.
    expect(new RegExp(name.schema.pattern).test("demo-1")).toBe(true);
    expect((await app.request("/api/workshops/demo-1", { headers: auth })).status).toBe(404);
    expect(new RegExp(name.schema.pattern).test("Demo_1")).toBe(false);
    expect((await app.request("/api/workshops/Demo_1", { headers: auth })).status).toBe(400);
  });
});

describe("validation behind the document", () => {
  it("answers a body that fails its schema with 400 and each field's path", async () => {
    const res = await post(
      "/api/workshops/demo/portal/release",
      JSON.stringify({ lab: "Not A Lab", extra: 1 }),
      { "content-type": "application/json" },
    );
    expect(res.status).toBe(400);
    const body = await j(res);
    expect(body.error).toMatchObject({ kind: "input", code: "input.invalid" });
    expect(detailPaths(body)).toEqual(["extra", "lab"]);
    expect(body.error.details.find((d: { path: string }) => d.path === "lab").message).toBe(
      "expected a lab (host) id",
    );

    const scale = await post("/api/workshops/demo/portal/scale-down", JSON.stringify({ unclaimed: 0 }), {
      "content-type": "application/json",
    });
    expect(scale.status).toBe(400);
    expect(detailPaths(await j(scale))).toEqual(["unclaimed"]);

    const missing = await post("/api/workshops", "{}", { "content-type": "application/json" });
    expect(missing.status).toBe(400);
    expect(detailPaths(await j(missing))).toEqual(["yaml"]);
  });

  it("answers a path parameter that fails its schema with 400 at the parameter's name", async () => {
    for (const [method, path] of [
      ["GET", "/api/workshops/Not_A_Name"],
      ["POST", "/api/workshops/Not_A_Name/teardown"],
      ["GET", "/api/workshops/Not_A_Name/portal/status"],
    ] as const) {
      const res = await app.request(path, { method, headers: auth });
      expect(res.status, path).toBe(400);
      const body = await j(res);
      expect(body.error.code).toBe("input.invalid");
      expect(detailPaths(body)).toEqual(["name"]);
    }
  });

  it("answers a body that is not JSON with 400 input.bad_json, whatever its content type", async () => {
    for (const type of ["application/json", "text/plain", undefined]) {
      const res = await post(
        "/api/workshops/demo/portal/release",
        "{not json",
        type ? { "content-type": type } : {},
      );
      expect(res.status, String(type)).toBe(400);
      expect((await j(res)).error.code).toBe("input.bad_json");
    }
  });

  it("reads an empty body as {} and a body without a JSON content type as JSON, as before", async () => {
    // Validation passes, so the domain answers: the workshop does not exist.
    const variants: Record<string, string>[] = [
      {},
      { "content-type": "application/json" },
      { "content-type": "text/plain" },
    ];
    for (const headers of variants) {
      const empty = await post("/api/workshops/nope/up", "", headers);
      expect(empty.status, JSON.stringify(headers)).toBe(404);
      expect((await j(empty)).error.code).toBe("workshop.not_found");
    }
    const untyped = await post("/api/workshops/nope/up", JSON.stringify({ force: true }));
    expect(untyped.status).toBe(404);

    const created = await post("/api/workshops", JSON.stringify({ yaml: workshopYaml({ name: "oa-ws" }) }), {
      "content-type": "text/plain",
    });
    expect(created.status).toBe(201);
    expect(await j(created)).toEqual({ name: "oa-ws", created: true });
    const status = await app.request("/api/workshops/oa-ws", { headers: auth });
    expect(status.status).toBe(200);
    expect((await j(status)).state).toBe("draft");
  });
});

describe("the reference page", () => {
  const escapeHtml = (s: string) =>
    s
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");

  it("lists every operation with its summary, parameters, body fields and answers, without scripts", async () => {
    const doc = await fetchDocument();
    const res = await app.request("/api/docs", { headers: auth });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/html/);
    expect(res.headers.get("content-security-policy")).toContain("script-src 'self'");
    const page = await res.text();
    expect(page).not.toMatch(/<script/i);
    expect(page).not.toMatch(/(src|href)="https?:/i);

    const sections = page.split('<section class="op"').slice(1);
    const listed = sections.map((s) => {
      const m = /<span class="method[^"]*">([A-Z]+)<\/span> <code>([^<]+)<\/code>/.exec(s);
      return `${m?.[1]} ${m?.[2]}`;
    });
    expect(listed.sort()).toEqual(documented(doc).sort());
    expect(listed.sort()).toEqual(served);

    for (const { method, path, op } of operations(doc)) {
      const section = sections.find((s) => s.includes(`">${method}</span> <code>${path}</code>`)) ?? "";
      expect(section, `${method} ${path}`).toContain(escapeHtml(op.summary ?? ""));
      for (const status of Object.keys(op.responses ?? {})) expect(section).toContain(`>${status}</span>`);
      for (const p of op.parameters ?? []) expect(section).toContain(`<code>${p.name}</code>`);
    }

    const release =
      sections.find((s) => s.includes("<code>/api/workshops/{name}/portal/release</code>")) ?? "";
    expect(release).toContain("Request body");
    expect(release).toContain('<code class="field">lab</code> <span class="req">required</span>');
    const submit = sections.find((s) => s.includes('">POST</span> <code>/api/workshops</code>')) ?? "";
    expect(submit).toContain('<code class="field">yaml</code>');
    expect(submit).toContain('<code class="field">baseDir</code>');
  });
});
