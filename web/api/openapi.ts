import { createRoute, OpenAPIHono, type RouteConfig, z } from "@hono/zod-openapi";
import { html, raw } from "hono/html";
import type { HtmlEscapedString } from "hono/utils/html";
import pkg from "../../package.json" with { type: "json" };
import { CreateTokenInput, TokenInfo } from "../../shared/auth/tokens.ts";
import { EVENT_TYPES } from "../../shared/store/entities.ts";
import { SESSION_COOKIE } from "../console/session.ts";
import { agentHostsApi } from "./agent-hosts.ts";
import { checkApi } from "./check.ts";
import { enrollmentApi } from "./enrollment.ts";
import { execApi } from "./exec.ts";
import { fleet } from "./fleet.ts";
import { fleetViewApi } from "./fleet-view.ts";
import { portalApi } from "./portal.ts";
import { receiptApi } from "./receipt.ts";
import { rolloutApi } from "./rollout.ts";
import { apiRouter, errors, json, jsonBody, NameParams } from "./schemas.ts";
import { workshops } from "./workshops.ts";

/**
 * The instructor API's OpenAPI 3.1 document, generated from the same zod schemas the routes validate with,
 * and a reference page rendered from it. Both are served behind the instructor token like the rest of /api
 * (web/app.ts mounts `apiReference` inside the authenticated sub-app), and open from a signed-in console session
 * too; only /api/health is public.
 */

export const SECURITY_SCHEME = "bearerAuth";
/** The console's session cookie: it opens the document and the reference page (web/app.ts, SESSION_READABLE). */
export const SESSION_SCHEME = "consoleSession";

// --- routes served by code that does not describe itself --------------------------------------------------

/** GET /api/health is served by web/app.ts itself, without a token. */
const health: RouteConfig = {
  method: "get",
  operationId: "getHealth",
  path: "/api/health",
  tags: ["meta"],
  summary: "Health check",
  description:
    "Answers without a token: 200 while the store answers, 503 (with `Retry-After`) while it is unreachable or answers with an error of its own.",
  security: [],
  responses: {
    200: json(z.object({ ok: z.literal(true), store: z.literal("ok") }), "Up."),
    421: {
      description:
        "The request's `Host` is not a name this runtime serves (DNS rebinding guard; `LABFLEET_PUBLIC_URL` adds one).",
      content: { "text/plain": { schema: z.string() } },
    },
    503: json(
      z.object({
        ok: z.literal(false),
        store: z.enum(["unreachable", "error"]).meta({
          description: "unreachable: no answer (ask again after `Retry-After`); error: the store refused",
        }),
      }),
      "The store does not answer.",
    ),
  },
};

const TokenId = z.string().meta({ description: "a token id", example: "tok_01J9ZK3M4R7S8T9V0W1X2Y3Z4A" });
const TokenView = TokenInfo.meta({ id: "Token" });

/**
 * /api/tokens (web/auth/tokens-api.ts) validates its own input with the schemas of shared/auth/tokens.ts; it
 * is described here from the same schemas.
 */
const tokens: RouteConfig[] = [
  {
    method: "get",
    operationId: "listTokens",
    path: "/api/tokens",
    tags: ["tokens"],
    summary: "List API tokens",
    description: "Every live token: never a token or its hash.",
    responses: {
      200: json(
        z.object({
          tokens: z.array(TokenView.extend({ mine: z.boolean().meta({ description: "yours" }) })),
        }),
        "The tokens, newest first.",
      ),
      ...errors(401),
    },
  },
  {
    method: "post",
    operationId: "createToken",
    path: "/api/tokens",
    tags: ["tokens"],
    summary: "Create an API token",
    description: "The token itself is in this answer only: store it (`labfleet login` does).",
    request: { body: jsonBody(CreateTokenInput, "A name, and optionally the days until it expires.", true) },
    responses: {
      201: json(z.object({ token: z.string().meta({ example: "lf_..." }), info: TokenView }), "Created."),
      ...errors(400, 401),
    },
  },
  {
    method: "get",
    operationId: "getCurrentToken",
    path: "/api/tokens/current",
    tags: ["tokens"],
    summary: "Who the bearer is",
    description:
      "The instructor's id, and the token's info when the bearer is an API token (null otherwise).",
    responses: {
      // A union, not .nullable(): the generator writes a nullable named schema as an allOf that null never passes.
      200: json(z.object({ owner: z.string(), token: z.union([TokenView, z.null()]) }), "The bearer."),
      ...errors(401),
    },
  },
  {
    method: "delete",
    operationId: "revokeCurrentToken",
    path: "/api/tokens/current",
    tags: ["tokens"],
    summary: "Revoke the bearer's own token",
    description: "`labfleet logout`: false when the bearer is not an API token or it is already gone.",
    responses: {
      200: json(z.object({ revoked: z.boolean() }), "Whether a token was revoked."),
      ...errors(401),
    },
  },
  {
    method: "delete",
    operationId: "revokeToken",
    path: "/api/tokens/{id}",
    tags: ["tokens"],
    summary: "Revoke a token",
    request: { params: z.object({ id: TokenId }) },
    responses: {
      200: json(z.object({ revoked: TokenView }), "The revoked token."),
      ...errors(400, 401, 404),
    },
  },
];

/** /api/workshops/{name}/events (web/api/events.ts) validates its query itself; described here. */
const events: RouteConfig = {
  method: "get",
  operationId: "listEvents",
  path: "/api/workshops/{name}/events",
  tags: ["workshops"],
  summary: "Read a workshop's events",
  description:
    "State changes (runs, hosts ready or failed, claims, teardown), oldest first. Poll with `?after=<last>` for what happened since.",
  request: {
    params: NameParams,
    query: z.strictObject({
      after: z
        .string()
        .regex(/^[0-9A-HJKMNP-TV-Z]{26}$/)
        .optional()
        .meta({ description: "an event id (a ULID): only the events after it" }),
      limit: z.coerce
        .number()
        .int()
        .min(1)
        .max(500)
        .optional()
        .meta({ description: "at most this many (default 100)" }),
    }),
  },
  responses: {
    200: json(
      z.object({
        events: z.array(
          z
            .object({
              id: z.string(),
              workshop: z.string(),
              type: z.enum(EVENT_TYPES),
              at: z.string(),
              hostId: z.string().nullable(),
              runId: z.string().nullable(),
              detail: z.record(z.string(), z.unknown()),
            })
            .meta({ id: "Event" }),
        ),
        last: z.string().nullable().meta({ description: "pass it as `after` on the next poll" }),
      }),
      "The events.",
    ),
    ...errors(400, 401),
  },
};

// --- the document -------------------------------------------------------------------------------------

export type ApiDocument = ReturnType<OpenAPIHono["getOpenAPI31Document"]>;

const DESCRIPTION = `The JSON API the \`labfleet\` CLI and the console use. Every route except /api/health needs an
instructor token: \`Authorization: Bearer <token>\` (local mode prints its bootstrap token at start; \`labfleet login\`
makes API tokens). Errors share one shape, \`{"error": {"kind", "code", "message", "details": [{"path", "message"}]}}\`;
invalid input answers 400 with one detail per field path.`;

let document: ApiDocument | undefined;

/** The whole document, built once: every route of the sub-apps at the paths web/app.ts mounts them on. */
export function apiDocument(): ApiDocument {
  if (document) return document;
  const all = new OpenAPIHono();
  all.route("/api/workshops", workshops);
  all.route("/api/workshops", fleet);
  all.route("/api/workshops", execApi);
  all.route("/api/workshops", fleetViewApi);
  all.route("/api/workshops", portalApi);
  all.route("/api/workshops", receiptApi);
  all.route("/api/workshops", checkApi);
  all.route("/api/workshops", rolloutApi);
  all.route("/api/workshops", agentHostsApi);
  all.route("/api/workshops", enrollmentApi);
  all.route("/api", apiReference);
  for (const route of [health, events, ...tokens]) all.openAPIRegistry.registerPath(route);
  all.openAPIRegistry.registerComponent("securitySchemes", SECURITY_SCHEME, {
    type: "http",
    scheme: "bearer",
    description:
      "An instructor token: the local runtime's bootstrap token or an API token (`labfleet login`).",
  });
  all.openAPIRegistry.registerComponent("securitySchemes", SESSION_SCHEME, {
    type: "apiKey",
    in: "cookie",
    name: SESSION_COOKIE,
    description:
      "A signed-in console session (sign in at /console): it opens this document and the reference page only.",
  });
  document = all.getOpenAPI31Document({
    openapi: "3.1.0",
    info: {
      title: "labfleet instructor API",
      version: pkg.version,
      description: DESCRIPTION,
      license: { name: pkg.license, url: "https://www.apache.org/licenses/LICENSE-2.0" },
    },
    // Relative: the runtime that serves this document (local or cloud) is the API's server.
    servers: [{ url: "/", description: "the labfleet runtime that serves this document" }],
    security: [{ [SECURITY_SCHEME]: [] }],
    tags: [
      {
        name: "workshops",
        description: "Submit workshop.yaml, start up and teardown, read status and runs.",
      },
      { name: "fleet", description: "Operate on hosts: doctor, deploy, retry, diagnose, access, keys, TTL." },
      { name: "portal", description: "The claim portal: open and close, the code, claims, rosters." },
      { name: "tokens", description: "API tokens for the CLI." },
      {
        name: "enrollment",
        description: "Machines that dial in: join tokens, and the hosts that wait for approval.",
      },
      { name: "reference", description: "This document and its reference page." },
      { name: "meta", description: "Health." },
    ],
  });
  return document;
}

// --- the reference page ---------------------------------------------------------------------------------

/** The parts of a JSON Schema (as the generator writes them) the page shows. */
interface Schema {
  $ref?: string;
  type?: string | string[];
  format?: string;
  description?: string;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  items?: Schema;
  anyOf?: Schema[];
  oneOf?: Schema[];
  allOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
  default?: unknown;
  pattern?: string;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  minItems?: number;
  maxItems?: number;
}
interface Parameter {
  name: string;
  in: string;
  required?: boolean;
  description?: string;
  schema?: Schema;
}
interface Media {
  schema?: Schema;
}
interface Operation {
  summary?: string;
  description?: string;
  tags?: string[];
  security?: Record<string, string[]>[];
  parameters?: Parameter[];
  requestBody?: { description?: string; required?: boolean; content?: Record<string, Media> };
  responses?: Record<string, { description?: string; content?: Record<string, Media> }>;
}

export const METHODS = ["get", "put", "post", "delete", "patch", "head", "options"] as const;

/** Every operation of the document, in document order: method (upper case), path, the operation. */
export function operations(doc: ApiDocument): { method: string; path: string; op: Operation }[] {
  const out: { method: string; path: string; op: Operation }[] = [];
  for (const [path, item] of Object.entries(doc.paths ?? {})) {
    for (const m of METHODS) {
      const op = (item as Record<string, unknown>)[m];
      if (op) out.push({ method: m.toUpperCase(), path, op: op as Operation });
    }
  }
  return out;
}

const anchor = (method: string, path: string) =>
  `op-${method.toLowerCase()}-${path.replace(/[^A-Za-z0-9]+/g, "-").replace(/^-|-$/g, "")}`;
const refName = (ref: string) => ref.replace(/^#\/components\/schemas\//, "");

type Html = HtmlEscapedString | Promise<HtmlEscapedString>;

/** Descriptions are short prose where `backticks` mark code. */
const prose = (text: string | undefined): Html =>
  html`${(text ?? "").split("`").map((part, i) => (i % 2 ? html`<code>${part}</code>` : part))}`;

function typeOf(s: Schema | undefined): Html {
  if (!s) return html`any`;
  if (s.$ref) return html`<a href="#schema-${refName(s.$ref)}">${refName(s.$ref)}</a>`;
  if (s.const !== undefined) return html`<code>${JSON.stringify(s.const)}</code>`;
  if (s.enum) return html`${s.enum.map((v, i) => html`${i ? " | " : ""}<code>${JSON.stringify(v)}</code>`)}`;
  const union = s.anyOf ?? s.oneOf;
  if (union) return html`${union.map((u, i) => html`${i ? " | " : ""}${typeOf(u)}`)}`;
  if (s.allOf) return html`${s.allOf.map((u, i) => html`${i ? " & " : ""}${typeOf(u)}`)}`;
  const types = Array.isArray(s.type) ? s.type : s.type ? [s.type] : [];
  return html`${types.map((t, i) => {
    const sep = i ? " | " : "";
    if (t === "array") return html`${sep}${typeOf(s.items)}[]`;
    if (t === "object" && !s.properties && typeof s.additionalProperties === "object")
      return html`${sep}map of ${typeOf(s.additionalProperties)}`;
    return html`${sep}${t}${s.format ? ` (${s.format})` : ""}`;
  })}${types.length ? "" : "any"}`;
}

function constraints(s: Schema | undefined): string {
  if (!s) return "";
  const c: string[] = [];
  if (s.pattern) c.push(`pattern ${s.pattern}`);
  if (s.minimum !== undefined) c.push(`≥ ${s.minimum}`);
  if (s.exclusiveMinimum !== undefined) c.push(`> ${s.exclusiveMinimum}`);
  if (s.maximum !== undefined) c.push(`≤ ${s.maximum}`);
  if (s.exclusiveMaximum !== undefined) c.push(`< ${s.exclusiveMaximum}`);
  if (s.minLength !== undefined) c.push(`at least ${s.minLength} characters`);
  if (s.maxLength !== undefined) c.push(`at most ${s.maxLength} characters`);
  if (s.minItems !== undefined) c.push(`at least ${s.minItems} items`);
  if (s.maxItems !== undefined) c.push(`at most ${s.maxItems} items`);
  if (s.default !== undefined) c.push(`default ${JSON.stringify(s.default)}`);
  if (s.additionalProperties === false && s.properties) c.push("no other fields");
  return c.join(" · ");
}

/** The object a schema describes inline (arrays of objects included), for a nested field list. */
function inlineObject(s: Schema | undefined): Schema | undefined {
  if (!s || s.$ref) return undefined;
  if (s.properties) return s;
  if (s.items && !s.items.$ref && s.items.properties) return s.items;
  return undefined;
}

/** The fields of an object schema, nested objects as nested lists. */
function fields(s: Schema, depth = 0): Html {
  const required = new Set(s.required ?? []);
  return html`<ul class="fields">
    ${Object.entries(s.properties ?? {}).map(([name, p]) => {
      const nested = depth < 4 ? inlineObject(p) : undefined;
      const more = constraints(p);
      return html`<li>
        <code class="field">${name}</code>${required.has(name) ? html` <span class="req">required</span>` : ""}
        <span class="type">${typeOf(p)}</span>${p.description ? html` — ${prose(p.description)}` : ""}${
          more ? html` <span class="constraints">(${more})</span>` : ""
        }${nested ? fields(nested, depth + 1) : ""}
      </li>`;
    })}
  </ul>`;
}

/** A body or answer: its type, and its fields when it is an object (a named schema's too, with `expand`). */
function content(doc: ApiDocument, media: Record<string, Media> | undefined, expand: boolean): Html {
  const schemas = (doc.components?.schemas ?? {}) as Record<string, Schema>;
  return html`${Object.entries(media ?? {}).map(([type, m]) => {
    const named = m.schema?.$ref && expand ? schemas[refName(m.schema.$ref)] : undefined;
    const obj = inlineObject(named ?? m.schema);
    return html`<p><code>${type}</code>: ${typeOf(m.schema)}</p>
      ${obj ? fields(obj) : ""}`;
  })}`;
}

function operation(doc: ApiDocument, method: string, path: string, op: Operation): Html {
  const security = op.security ?? doc.security ?? [];
  const open = security.length === 0;
  const session = security.some((s) => SESSION_SCHEME in s);
  const params = op.parameters ?? [];
  return html`<section class="op" id="${anchor(method, path)}">
    <h3><span class="method m-${method.toLowerCase()}">${method}</span> <code>${path}</code></h3>
    <p class="summary">${op.summary ?? ""}</p>
    ${op.description ? html`<p>${prose(op.description)}</p>` : ""}
    <p class="auth">${
      open
        ? "Public: no token."
        : html`Needs <code>Authorization: Bearer &lt;token&gt;</code>${session ? ", or a signed-in console session" : ""}.`
    }</p>
    ${
      params.length
        ? html`<h4>Parameters</h4>
            <table>
              <thead>
                <tr><th scope="col">Name</th><th scope="col">In</th><th scope="col">Type</th><th scope="col">Description</th></tr>
              </thead>
              <tbody>
                ${params.map(
                  (p) => html`<tr>
                    <td><code>${p.name}</code>${p.required ? html` <span class="req">required</span>` : ""}</td>
                    <td>${p.in}</td>
                    <td>${typeOf(p.schema)}${constraints(p.schema) ? html` <span class="constraints">(${constraints(p.schema)})</span>` : ""}</td>
                    <td>${prose(p.description ?? p.schema?.description)}</td>
                  </tr>`,
                )}
              </tbody>
            </table>`
        : ""
    }
    ${
      op.requestBody
        ? html`<h4>Request body${op.requestBody.required ? "" : " (optional)"}</h4>
            ${op.requestBody.description ? html`<p>${prose(op.requestBody.description)}</p>` : ""}
            ${content(doc, op.requestBody.content, true)}`
        : ""
    }
    <h4>Responses</h4>
    <dl class="responses">
      ${Object.entries(op.responses ?? {}).map(
        ([status, r]) => html`<dt><span class="status s${status.slice(0, 1)}">${status}</span></dt>
          <dd>${prose(r.description)} ${content(doc, r.content, status.startsWith("2"))}</dd>`,
      )}
    </dl>
  </section>`;
}

const style = `
body { font: 15px/1.5 system-ui, sans-serif; margin: 0 auto; max-width: 60rem; padding: 1rem; color: #111; }
code { font: 13px/1.4 ui-monospace, monospace; overflow-wrap: anywhere; }
h3 { margin: 0 0 0.25rem; font-size: 1.05rem; } h4 { margin: 0.75rem 0 0.25rem; font-size: 0.95rem; }
.op, .schema { border-top: 1px solid #bbb; padding: 1rem 0; }
.method { display: inline-block; min-width: 4.5em; font: 700 12px/1.8 ui-monospace, monospace; text-align: center;
  border-radius: 3px; color: #fff; background: #444; }
.m-get { background: #155e9c; } .m-post { background: #17693a; } .m-delete { background: #a4141b; }
.summary { font-weight: 600; margin: 0.25rem 0; } .auth { color: #444; font-size: 0.9rem; }
.req { color: #a4141b; font-size: 0.8rem; } .type { color: #333; }
.constraints { color: #555; font-size: 0.85rem; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; } th, td { text-align: left; padding: 0.25rem 0.5rem;
  border-bottom: 1px solid #ddd; vertical-align: top; }
dl.responses dt { float: left; clear: left; width: 3.5rem; } dl.responses dd { margin: 0 0 0.5rem 3.5rem; }
.status { font: 700 13px ui-monospace, monospace; } .s2 { color: #17693a; } .s4 { color: #a4141b; }
ul.fields { margin: 0.25rem 0; padding-left: 1.25rem; } nav ul { columns: 2; } a { color: #0b4f8a; }
`;

/** The reference page: every operation with its parameters, body fields and answers; no script, no CDN. */
export function renderReference(doc: ApiDocument): Html {
  const ops = operations(doc);
  const tagNames = [
    ...new Set([...(doc.tags ?? []).map((t) => t.name), ...ops.flatMap((o) => o.op.tags ?? [])]),
  ];
  const byTag = tagNames
    .map((tag) => ({
      tag,
      description: doc.tags?.find((t) => t.name === tag)?.description,
      ops: ops.filter((o) => (o.op.tags?.[0] ?? "other") === tag),
    }))
    .filter((g) => g.ops.length > 0);
  const untagged = ops.filter((o) => !o.op.tags?.length);
  if (untagged.length) byTag.push({ tag: "other", description: undefined, ops: untagged });
  const schemas = Object.entries((doc.components?.schemas ?? {}) as Record<string, Schema>);
  return html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>${doc.info.title} ${doc.info.version}</title>
        <style>${raw(style)}</style>
      </head>
      <body>
        <header>
          <h1>${doc.info.title} <small>${doc.info.version}</small></h1>
          <p>${prose(doc.info.description)}</p>
          <p>
            The machine-readable document: <a href="/api/openapi.json"><code>GET /api/openapi.json</code></a>
            (OpenAPI ${doc.openapi}). Both open with the same bearer token as the rest of the API, or from a signed-in
            <a href="/console">console</a> session.
          </p>
        </header>
        <nav aria-label="Operations">
          <h2>Operations</h2>
          ${byTag.map(
            (g) => html`<h3>${g.tag}</h3>
              ${g.description ? html`<p>${prose(g.description)}</p>` : ""}
              <ul>
                ${g.ops.map(
                  (o) =>
                    html`<li><a href="#${anchor(o.method, o.path)}"><code>${o.method} ${o.path}</code></a> ${o.op.summary ?? ""}</li>`,
                )}
              </ul>`,
          )}
        </nav>
        <main>
          ${byTag.map(
            (g) => html`<h2 id="tag-${g.tag}">${g.tag}</h2>
              ${g.ops.map((o) => operation(doc, o.method, o.path, o.op))}`,
          )}
          <h2 id="schemas">Schemas</h2>
          ${schemas.map(
            ([name, s]) => html`<section class="schema" id="schema-${name}">
              <h3>${name}</h3>
              ${s.description ? html`<p>${prose(s.description)}</p>` : ""}
              <p>${typeOf(s)}${constraints(s) ? html` <span class="constraints">(${constraints(s)})</span>` : ""}</p>
              ${inlineObject(s) ? fields(inlineObject(s) as Schema) : ""}
            </section>`,
          )}
        </main>
      </body>
    </html>`;
}

// --- the two routes -----------------------------------------------------------------------------------

const tags = ["reference"];
/** The bearer token, or the console's session cookie (either one). */
const readable: Record<string, string[]>[] = [{ [SECURITY_SCHEME]: [] }, { [SESSION_SCHEME]: [] }];

const documentRoute = createRoute({
  method: "get",
  operationId: "getOpenApiDocument",
  path: "/openapi.json",
  tags,
  summary: "The OpenAPI 3.1 document",
  security: readable,
  description: "This API described for tools: generate a client, or validate requests.",
  responses: {
    200: json(
      z.looseObject({
        openapi: z.string(),
        info: z.looseObject({ title: z.string(), version: z.string() }),
        paths: z.record(z.string(), z.any()).optional(),
      }),
      "The document.",
    ),
    ...errors(401),
  },
});

const docsRoute = createRoute({
  method: "get",
  operationId: "getApiReference",
  path: "/docs",
  tags,
  summary: "The API reference page",
  security: readable,
  description: "Every operation with its parameters, body fields and answers, as one HTML page.",
  responses: {
    200: { description: "The page.", content: { "text/html": { schema: z.string() } } },
    ...errors(401),
  },
});

/** GET /api/openapi.json and GET /api/docs, mounted by web/app.ts behind the instructor token. */
export const apiReference = apiRouter()
  .openapi(documentRoute, (c) => c.json(apiDocument(), 200))
  .openapi(docsRoute, async (c) => c.html(await renderReference(apiDocument())));
