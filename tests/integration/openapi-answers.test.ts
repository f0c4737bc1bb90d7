import { request as httpRequest } from "node:http";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";
import formats from "ajv-formats";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { recordEnrolledHost } from "../../shared/agent/enrolled-hosts.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { type ApiDocument, apiDocument, operations } from "../../web/api/openapi.ts";
import { makeRolloutLab, type RolloutLab, rolloutYaml } from "../harness/rollout-lab.ts";
import { removeDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * The API document says what the API really answers: every operation in it is called on the local runtime (over
 * HTTP, in the order a workshop lives: created, up, operated, its portal used, torn down; error cases where they
 * are cheap), and each answer's status must be one the operation documents and its body must pass the document's
 * schema for that status and content type (ajv, JSON Schema 2020-12 as OpenAPI 3.1 uses), with no field the
 * document does not mention; a request body the API accepts must pass the document's request schema. An operation
 * in the document that no call reaches fails "called every operation": a new operation needs its entry in CALLS
 * (one line).
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const WS = "oa-every";
/** Two labs, the portal in both modes (a code, and invitations from a roster). */
const YAML = workshopYaml({ name: WS, count: 2, extraLab: "portal:\n  mode: both\n" });
const doc: ApiDocument = apiDocument();

/** What the calls learn and later calls use: path parameters ({name}, {runId}, ...) and tokens. */
const vars: Record<string, string> = { name: WS, hostId: "student-01" };

interface Call {
  /** The operation, as the document writes it: `METHOD /api/path/{param}`. */
  op: string;
  /** The status this call must answer (it must also be one the operation documents). */
  status: number;
  /** The concrete path when it is not the operation's with `vars` filled in (error cases, queries). */
  path?: string | (() => string);
  body?: unknown;
  /** The bearer token: the runtime's by default; a function reads one a call learned; null sends none. */
  token?: null | (() => string);
  headers?: Record<string, string>;
  /** Runs before the call (set up what it needs). */
  before?: () => Promise<void>;
  /** Runs after the call with its JSON body (learn an id, wait for a run to end). */
  // biome-ignore lint/suspicious/noExplicitAny: bodies are checked against the document's schemas
  after?: (body: any) => Promise<void> | void;
}

const ROLL = "oa-roll";
let rolloutLab: RolloutLab | undefined;
/** A workshop of the rollout lab (a git source, so it has refs to roll out), up and ready. */
const upRolloutWorkshop = async () => {
  rolloutLab = makeRolloutLab();
  const post = (path: string, body: unknown) =>
    fetch(`${rt.url}/api/workshops${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      body: JSON.stringify(body),
    });
  expect((await post("", { yaml: rolloutYaml(ROLL, rolloutLab.source, 2) })).status).toBe(201);
  expect((await post(`/${ROLL}/up`, {})).status).toBe(202);
  await rt.executor.idle();
};

const ENROLL = "oa-enroll";
const submitEnrollWorkshop = async () => {
  const res = await fetch(`${rt.url}/api/workshops`, {
    method: "POST",
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    body: JSON.stringify({ yaml: workshopYaml({ name: ENROLL, count: 1 }) }),
  });
  expect(res.status).toBe(201);
};
/** A machine joins the enrollment workshop with the token made above (POST /agent/v1/enroll). */
const machineJoins = (name: string) => async () => {
  const res = await fetch(`${rt.url}/agent/v1/enroll`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ token: vars.joinToken, name, facts: { cpus: 2 } }),
  });
  expect(res.status).toBe(201);
};

const runEnds = async (body: { run?: { id: string } }) => {
  if (body.run?.id) vars.runId = body.run.id;
  await rt.executor.idle();
};
const idle = () => rt.executor.idle();
const claim = (name: string, email: string) => async () => {
  await claimLab(WS, { name, email, pin: "503917" }, "192.0.2.10");
};

/** The calls, in order. A new operation: add one entry (a success case), more for its cheap error cases. */
const CALLS: Call[] = [
  { op: "GET /api/health", status: 200, token: null },
  { op: "GET /api/health", status: 421, token: null, headers: { host: "rebound.example.test" } },
  { op: "GET /api/openapi.json", status: 200 },
  { op: "GET /api/openapi.json", status: 401, token: null },
  { op: "GET /api/docs", status: 200 },
  { op: "GET /api/workshops", status: 200 },
  { op: "GET /api/workshops", status: 401, token: () => "not-the-token" },
  { op: "POST /api/workshops/plan", status: 200, body: { yaml: YAML } },
  { op: "POST /api/workshops/plan", status: 400, body: { yaml: "name: Bad Name\n" } },
  { op: "POST /api/workshops", status: 201, body: { yaml: YAML } },
  { op: "POST /api/workshops", status: 200, body: { yaml: YAML } },
  { op: "POST /api/workshops", status: 400, body: {} },
  { op: "GET /api/workshops/{name}", status: 200 },
  { op: "GET /api/workshops/{name}", status: 404, path: "/api/workshops/oa-none" },
  { op: "GET /api/workshops/{name}", status: 400, path: "/api/workshops/Not_A_Name" },
  { op: "POST /api/workshops/{name}/provision", status: 202, after: runEnds },
  { op: "POST /api/workshops/{name}/up", status: 202, after: runEnds },
  { op: "POST /api/workshops/{name}/up", status: 404, path: "/api/workshops/oa-none/up" },
  { op: "POST /api/workshops/{name}/up", status: 400, body: { only: ["build"] } },
  { op: "POST /api/workshops/{name}/check", status: 200, body: { command: "up" } },
  {
    op: "POST /api/workshops/{name}/check",
    status: 200,
    body: { command: "deploy", force: true, skip: ["wait"] },
  },
  { op: "POST /api/workshops/{name}/check", status: 400, body: { command: "up", skip: ["later"] } },
  {
    op: "POST /api/workshops/{name}/check",
    status: 404,
    path: "/api/workshops/oa-none/check",
    body: { command: "retry" },
  },
  { op: "GET /api/workshops/{name}/runs/{runId}", status: 200 },
  {
    op: "GET /api/workshops/{name}/runs/{runId}",
    status: 404,
    path: `/api/workshops/${WS}/runs/run_01J00000000000000000000000`,
  },
  { op: "GET /api/workshops/{name}", status: 200 },
  { op: "GET /api/workshops/{name}/hosts/{hostId}/access", status: 200 },
  { op: "GET /api/workshops/{name}/fleet", status: 200 },
  { op: "GET /api/workshops/{name}/fleet", status: 404, path: "/api/workshops/oa-none/fleet" },
  { op: "POST /api/workshops/{name}/doctor", status: 200 },
  { op: "POST /api/workshops/{name}/doctor", status: 400, body: { hosts: ["Not A Host"] } },
  { op: "POST /api/workshops/{name}/refresh", status: 200 },
  { op: "POST /api/workshops/{name}/deploy", status: 202, body: { hosts: ["student-02"] }, after: runEnds },
  { op: "POST /api/workshops/{name}/retry", status: 200 },
  { op: "GET /api/workshops/{name}/rollout", status: 404 },
  // A ref needs a git source: the rollouts run on a second workshop of the rollout lab (tests/harness/rollout-lab.ts).
  { op: "POST /api/workshops/{name}/rollout/check", status: 400, body: { ref: "v2" } },
  { op: "POST /api/workshops/{name}/rollout", status: 400, body: { ref: "not a ref" } },
  {
    op: "POST /api/workshops/{name}/rollout/check",
    status: 200,
    path: `/api/workshops/${ROLL}/rollout/check`,
    body: { ref: "v2" },
    before: upRolloutWorkshop,
  },
  {
    op: "POST /api/workshops/{name}/rollout",
    status: 202,
    path: `/api/workshops/${ROLL}/rollout`,
    body: { ref: "v2", canary: 1, batch: 1 },
    after: idle,
  },
  { op: "GET /api/workshops/{name}/rollout", status: 200, path: `/api/workshops/${ROLL}/rollout` },
  {
    op: "POST /api/workshops/{name}/rollout",
    status: 409,
    path: `/api/workshops/${ROLL}/rollout`,
    body: { ref: "v2" },
  },
  {
    op: "POST /api/workshops/{name}/rollout/resume",
    status: 409,
    path: `/api/workshops/${ROLL}/rollout/resume`,
  },
  {
    op: "POST /api/workshops/{name}/rollout/abort",
    status: 409,
    path: `/api/workshops/${ROLL}/rollout/abort`,
  },
  {
    op: "POST /api/workshops/{name}/exec",
    status: 202,
    body: { command: "echo hi", hosts: ["student-01"] },
    after: (b) => {
      vars.jobId = b.jobId;
    },
  },
  { op: "POST /api/workshops/{name}/exec", status: 400, body: { command: "" } },
  {
    op: "GET /api/workshops/{name}/exec/{jobId}",
    status: 200,
    // Once the job has ended, so the answer with a host result is the one validated.
    before: () =>
      waitFor("the exec job to end", async () => {
        const r = await fetch(`${rt.url}/api/workshops/${WS}/exec/${vars.jobId}`, {
          headers: { authorization: `Bearer ${rt.token}` },
        });
        const j = (await r.json()) as { state: string };
        return j.state === "succeeded" ? true : undefined;
      }).then(() => undefined),
  },
  {
    op: "GET /api/workshops/{name}/exec/{jobId}",
    status: 404,
    path: `/api/workshops/${WS}/exec/exj_01J00000000000000000000000`,
  },
  { op: "GET /api/workshops/{name}/exec/{jobId}", status: 400, path: `/api/workshops/${WS}/exec/nope` },
  { op: "POST /api/workshops/{name}/exec/{jobId}/cancel", status: 202 },
  { op: "POST /api/workshops/{name}/diagnose", status: 200, body: { hosts: ["student-01"] } },
  { op: "GET /api/workshops/{name}/access", status: 200 },
  {
    op: "GET /api/workshops/{name}/access",
    status: 200,
    path: `/api/workshops/${WS}/access?host=student-02`,
  },
  { op: "GET /api/workshops/{name}/ssh-public-key", status: 200 },
  { op: "GET /api/workshops/{name}/host-keys", status: 200 },
  {
    op: "PUT /api/workshops/{name}/host-keys/{hostId}",
    status: 200,
    body: {
      keys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGQZr3A9d2lDGT/0vNa+LF6iyT9qnNIgpAg7sev0MANu root@web-1"],
    },
  },
  { op: "DELETE /api/workshops/{name}/host-keys/{hostId}", status: 200 },
  {
    op: "POST /api/workshops/{name}/hosts/{hostId}/control",
    status: 200,
    path: () => `/api/workshops/${WS}/hosts/pc-1/control`,
    body: { action: "drain" },
    before: async () => {
      await recordEnrolledHost({ workshop: WS, name: "pc-1", facts: {}, enrollment: "approved" });
    },
  },
  // The status and the fleet view with an enrolled host (drained): its agent's fields are in the document too.
  {
    op: "GET /api/workshops/{name}",
    status: 200,
    after: (b) =>
      expect(b.hostList.find((h: { id: string }) => h.id === "pc-1")).toMatchObject({ drained: true }),
  },
  {
    op: "GET /api/workshops/{name}/fleet",
    status: 200,
    after: (b) =>
      expect(b.labs.find((l: { id: string }) => l.id === "pc-1")).toMatchObject({ drained: true }),
  },
  { op: "POST /api/workshops/{name}/hosts/{hostId}/control", status: 400, body: { action: "drain" } },
  { op: "POST /api/workshops/{name}/hosts/{hostId}/control", status: 400, body: { action: "explode" } },
  {
    op: "POST /api/workshops/{name}/hosts/{hostId}/control",
    status: 404,
    path: () => `/api/workshops/${WS}/hosts/nobody/control`,
    body: { action: "drain" },
  },
  { op: "POST /api/workshops/{name}/extend", status: 200, body: { hours: 1 } },
  { op: "POST /api/workshops/{name}/extend", status: 400, body: { hours: 0 } },
  // The local provider manages no firewall: open-access is for the aws provider only.
  { op: "POST /api/workshops/{name}/open-access", status: 400 },
  { op: "POST /api/workshops/{name}/portal/publish", status: 200 },
  { op: "POST /api/workshops/{name}/portal/open", status: 200 },
  { op: "POST /api/workshops/{name}/portal/rotate-code", status: 200 },
  { op: "GET /api/workshops/{name}/portal/info", status: 200 },
  {
    op: "POST /api/workshops/{name}/portal/release",
    status: 200,
    before: claim("Ada", "ada@example.test"),
    body: { lab: "student-01" },
  },
  { op: "POST /api/workshops/{name}/portal/release", status: 400, body: { lab: "Not A Lab" } },
  {
    op: "POST /api/workshops/{name}/portal/revoke",
    status: 200,
    before: claim("Ada", "ada@example.test"),
    body: { email: "ada@example.test" },
  },
  { op: "POST /api/workshops/{name}/portal/revoke", status: 404, body: { email: "nobody@example.test" } },
  { op: "GET /api/workshops/{name}/portal/status", status: 200, before: claim("Ada", "ada@example.test") },
  { op: "GET /api/workshops/{name}/portal/checks", status: 200 },
  { op: "GET /api/workshops/{name}/portal/export", status: 200 },
  { op: "POST /api/workshops/{name}/portal/admin-link", status: 200 },
  // The lab a student leaves is rebuilt (a retry run).
  {
    op: "POST /api/workshops/{name}/portal/swap",
    status: 200,
    body: { email: "ada@example.test" },
    after: idle,
  },
  {
    op: "POST /api/workshops/{name}/portal/reassign",
    status: 200,
    body: { email: "ada@example.test", lab: "student-01" },
  },
  { op: "POST /api/workshops/{name}/portal/unlock", status: 200, body: { email: "ada@example.test" } },
  { op: "POST /api/workshops/{name}/portal/unqueue", status: 404, body: { email: "ada@example.test" } },
  { op: "POST /api/workshops/{name}/portal/unblock", status: 200, body: { address: "198.51.100.7" } },
  {
    op: "POST /api/workshops/{name}/portal/invite",
    status: 200,
    body: { csv: "name,email\nGrace Hopper,grace@example.test\n" },
  },
  { op: "POST /api/workshops/{name}/portal/scale-down", status: 409, body: { unclaimed: 1 } },
  { op: "POST /api/workshops/{name}/scale", status: 202, body: { count: 3 }, after: runEnds },
  {
    op: "POST /api/workshops/{name}/portal/scale-down",
    status: 200,
    body: { unclaimed: 1 },
    after: idle,
  },
  { op: "POST /api/workshops/{name}/portal/close", status: 200 },
  { op: "GET /api/workshops/{name}/events", status: 200 },
  { op: "GET /api/workshops/{name}/events", status: 400, path: `/api/workshops/${WS}/events?after=nope` },
  {
    op: "POST /api/tokens",
    status: 201,
    body: { name: "every operation" },
    after: (b) => {
      vars.apiToken = b.token;
      vars.id = b.info.id;
    },
  },
  { op: "POST /api/tokens", status: 400, body: { name: "" } },
  { op: "GET /api/tokens", status: 200 },
  { op: "GET /api/tokens/current", status: 200 },
  { op: "GET /api/tokens/current", status: 200, token: () => vars.apiToken ?? "" },
  { op: "DELETE /api/tokens/current", status: 200, token: () => vars.apiToken ?? "" },
  { op: "DELETE /api/tokens/current", status: 200 },
  // Revoked by its own bearer: refused from then on.
  { op: "DELETE /api/tokens/current", status: 401, token: () => vars.apiToken ?? "" },
  {
    op: "POST /api/tokens",
    status: 201,
    body: { name: "revoked by id" },
    after: (b) => {
      vars.id = b.info.id;
    },
  },
  { op: "DELETE /api/tokens/{id}", status: 200 },
  { op: "DELETE /api/tokens/{id}", status: 404 },
  { op: "DELETE /api/tokens/{id}", status: 400, path: "/api/tokens/not-a-token-id" },
  // Enrollment, on a workshop of its own: join tokens, and machines (played with fetch) that join with them.
  {
    op: "POST /api/workshops/{name}/join-tokens",
    status: 201,
    path: `/api/workshops/${ENROLL}/join-tokens`,
    body: { uses: 2, approve: "manual", expiresInSeconds: 3600 },
    before: submitEnrollWorkshop,
    after: (b) => {
      vars.joinToken = b.token;
      vars.tokenId = b.joinToken.id;
    },
  },
  {
    op: "POST /api/workshops/{name}/join-tokens",
    status: 400,
    path: `/api/workshops/${ENROLL}/join-tokens`,
    body: { uses: 0 },
  },
  { op: "POST /api/workshops/{name}/join-tokens", status: 404, path: "/api/workshops/oa-none/join-tokens" },
  { op: "GET /api/workshops/{name}/join-tokens", status: 200, path: `/api/workshops/${ENROLL}/join-tokens` },
  {
    op: "GET /api/workshops/{name}/enrollment/pending",
    status: 200,
    path: `/api/workshops/${ENROLL}/enrollment/pending`,
    before: machineJoins("oa-pc"),
  },
  {
    op: "POST /api/workshops/{name}/enrollment/approve",
    status: 200,
    path: `/api/workshops/${ENROLL}/enrollment/approve`,
    body: { hosts: ["oa-pc"] },
  },
  {
    op: "POST /api/workshops/{name}/enrollment/approve",
    status: 404,
    path: `/api/workshops/${ENROLL}/enrollment/approve`,
    body: { hosts: ["nobody"] },
  },
  {
    op: "POST /api/workshops/{name}/enrollment/reject",
    status: 409,
    path: `/api/workshops/${ENROLL}/enrollment/reject`,
    body: { hosts: ["oa-pc"] },
  },
  {
    op: "POST /api/workshops/{name}/enrollment/reject",
    status: 200,
    path: `/api/workshops/${ENROLL}/enrollment/reject`,
    body: { hosts: ["oa-pc2"] },
    before: machineJoins("oa-pc2"),
  },
  {
    op: "POST /api/workshops/{name}/enrollment/reject",
    status: 400,
    path: `/api/workshops/${ENROLL}/enrollment/reject`,
    body: { hosts: [] },
  },
  {
    op: "DELETE /api/workshops/{name}/join-tokens/{tokenId}",
    status: 200,
    path: () => `/api/workshops/${ENROLL}/join-tokens/${vars.tokenId}`,
  },
  {
    op: "DELETE /api/workshops/{name}/join-tokens/{tokenId}",
    status: 404,
    path: `/api/workshops/${ENROLL}/join-tokens/jtk_01J00000000000000000000000`,
  },
  {
    op: "DELETE /api/workshops/{name}/join-tokens/{tokenId}",
    status: 400,
    path: `/api/workshops/${ENROLL}/join-tokens/not-a-token`,
  },
  { op: "GET /api/workshops/{name}/receipt", status: 404 },
  { op: "POST /api/workshops/{name}/teardown", status: 202, after: runEnds },
  { op: "POST /api/workshops/{name}/teardown", status: 404, path: "/api/workshops/oa-none/teardown" },
  { op: "GET /api/workshops/{name}/receipt", status: 200 },
];

// --- the document's schemas, compiled once ---------------------------------------------------------------

const DOC_ID = "https://labfleet.test/openapi.json";
const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false, strictTypes: false });
// ajv-formats is CommonJS: its default export is the module object under Node's ESM.
formats.default(ajv);
// OpenAPI's own keywords, and the formats of OpenAPI's format registry ajv-formats does not check.
ajv.addVocabulary(["example", "discriminator", "xml", "externalDocs"]);
for (const format of ["binary", "ipv4-cidr", "ipv6-cidr"]) ajv.addFormat(format, true);
/**
 * A schema as the answers are checked against it: `#/components/schemas/X` becomes `DOC_ID#/$defs/X` (the named
 * schemas under one id), and an object that lists its properties allows no others (`unevaluatedProperties`), so a
 * field the API answers and the document does not mention fails too.
 */
function withRefs(schema: unknown): object {
  const closed = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(closed);
    if (!v || typeof v !== "object") return v;
    const out = Object.fromEntries(
      Object.entries(v).map(([k, x]) => [k, k === "properties" ? mapValues(x) : closed(x)]),
    );
    if ("properties" in out && !("additionalProperties" in out)) out.unevaluatedProperties = false;
    return out;
  };
  const mapValues = (props: unknown) =>
    Object.fromEntries(Object.entries(props as Record<string, unknown>).map(([k, x]) => [k, closed(x)]));
  return JSON.parse(
    JSON.stringify(closed(schema)).replaceAll('"#/components/schemas/', `"${DOC_ID}#/$defs/`),
  );
}
ajv.addSchema({ $id: DOC_ID, $defs: withRefs(doc.components?.schemas ?? {}) });

const ops = new Map(operations(doc).map((o) => [`${o.method} ${o.path}`, o.op]));
const compiled = new Map<string, ValidateFunction>();
function validator(key: string, schema: unknown): ValidateFunction {
  let v = compiled.get(key);
  if (!v) {
    v = ajv.compile(withRefs(schema));
    compiled.set(key, v);
  }
  return v;
}

// --- calling ---------------------------------------------------------------------------------------------

interface Answer {
  status: number;
  type: string;
  text: string;
}

function send(method: string, path: string, headers: Record<string, string>, body?: string): Promise<Answer> {
  const url = new URL(path, rt.url);
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { method, headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          type: String(res.headers["content-type"] ?? ""),
          text: Buffer.concat(chunks).toString("utf8"),
        }),
      );
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body);
  });
}

const called = new Set<string>();
const fill = (template: string) =>
  template.replace(/\{([^}]+)\}/g, (_, p: string) => {
    const v = vars[p];
    if (v === undefined) throw new Error(`no value for {${p}} yet`);
    return v;
  });

beforeAll(async () => {
  rt = await testRuntime();
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  rolloutLab?.remove();
});

describe("the check itself", () => {
  it("refuses an answer with a field the document does not mention, or of the wrong type", () => {
    const op = ops.get("GET /api/tokens/current");
    const validate = validator("self-check", op?.responses?.["200"]?.content?.["application/json"]?.schema);
    expect(validate({ owner: "bootstrap", token: null })).toBe(true);
    expect(validate({ owner: "bootstrap", token: null, secret: "x" })).toBe(false);
    expect(
      validate({ owner: "bootstrap", token: { id: "tok_1", name: "n", owner: "o", createdAt: "t", x: 1 } }),
    ).toBe(false);
    expect(validate({ owner: "bootstrap", token: "lf_..." })).toBe(false);
  });
});

describe("every operation answers as the document says", () => {
  it.each(CALLS.map((c, i) => [`${i + 1}. ${c.op} -> ${c.status}`, c] as const))("%s", async (_, call) => {
    const [method = "", template = ""] = call.op.split(" ");
    const op = ops.get(call.op);
    expect(op, `${call.op} is not in the document`).toBeDefined();
    await call.before?.();
    // A body the API accepts must pass the document's request schema too (what a generated client checks).
    const requestSchema = op?.requestBody?.content?.["application/json"]?.schema;
    if (call.status < 300 && call.body !== undefined && requestSchema) {
      const validate = validator(`${call.op} request`, requestSchema);
      expect(validate(call.body) ? [] : validate.errors, `${call.op}: the request body`).toEqual([]);
    }
    const path = typeof call.path === "function" ? call.path() : (call.path ?? fill(template));
    const token = call.token === undefined ? rt.token : call.token?.();
    const headers: Record<string, string> = {
      ...(token ? { authorization: `Bearer ${token}` } : {}),
      ...(call.body !== undefined ? { "content-type": "application/json" } : {}),
      ...call.headers,
    };
    const res = await send(
      method,
      path,
      headers,
      call.body === undefined ? undefined : JSON.stringify(call.body),
    );
    called.add(call.op);

    const what = `${method} ${path} answered ${res.status}: ${res.text.slice(0, 500)}`;
    expect(res.status, what).toBe(call.status);
    const answer = op?.responses?.[String(res.status)];
    expect(answer, `${call.op}: status ${res.status} is not documented`).toBeDefined();
    const type = res.type.split(";")[0]?.trim() ?? "";
    const media = answer?.content?.[type];
    expect(media, `${call.op} ${res.status}: content type ${type} is not documented`).toBeDefined();
    if (type === "application/json") {
      const body = JSON.parse(res.text);
      const validate = validator(`${call.op} ${res.status}`, media?.schema ?? {});
      const ok = validate(body);
      expect(ok ? [] : validate.errors, `${what}\ndoes not match the document`).toEqual([]);
      await call.after?.(body);
    } else {
      expect(res.text.length, what).toBeGreaterThan(0);
      await call.after?.(undefined);
    }
  });

  it("called every operation in the document", () => {
    const missing = [...ops.keys()].filter((k) => !called.has(k));
    expect(missing).toEqual([]);
  });
});

describe("the workshop the calls walked through", () => {
  it("ends torn down, so the calls did what they say", async () => {
    const state = await waitFor("the teardown", async () => {
      const r = await send("GET", `/api/workshops/${WS}`, { authorization: `Bearer ${rt.token}` });
      const s = JSON.parse(r.text).state as string;
      return s === "torn_down" ? s : undefined;
    });
    expect(state).toBe("torn_down");
  });
});
