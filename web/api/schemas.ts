import { OpenAPIHono, z } from "@hono/zod-openapi";
import { createMiddleware } from "hono/factory";
import { idSchema } from "../../shared/runtime/ids.ts";
import { HOST_STATES, RUN_KINDS, RUN_STATES, WORKSHOP_STATES } from "../../shared/store/entities.ts";
import { HostEntry } from "../../shared/workshop/schema.ts";

/**
 * What the instructor API's route files share: the sub-app factory, the lenient JSON body reader, the error
 * answer, the workshop name parameter and the views several resources return. Every schema here is read
 * twice: by the validators (requests) or the typechecker (responses), and by the OpenAPI generator.
 */

/**
 * A sub-app of the instructor API. A request that fails its schema is thrown as the ZodError itself, so
 * web/api/errors.ts answers as it does for every other invalid input: 400 `input.invalid` with one
 * `{path, message}` per field.
 */
export const apiRouter = () =>
  new OpenAPIHono({
    defaultHook: (result) => {
      if (!result.success) throw result.error;
    },
  });

/**
 * Reads a JSON body as the API always has: whatever the content type, an empty body is `{}` and a body that
 * is not JSON is a SyntaxError (400 `input.bad_json` in errors.ts). The body validator that follows then sees
 * `application/json`; without this, @hono/zod-openapi answers 415 to a body sent without a content type and
 * throws its own 400 for bad JSON, neither in the app's error shape. Every route with a JSON body lists it
 * in its `middleware`.
 */
export const readJson = createMiddleware(async (c, next) => {
  const text = (await c.req.text()) || "{}";
  JSON.parse(text); // only to throw the SyntaxError here, before the validator's own 400
  const headers = new Headers(c.req.raw.headers);
  headers.set("content-type", "application/json");
  headers.delete("content-length");
  c.req.raw = new Request(c.req.url, { method: c.req.method, headers, body: text });
  c.req.bodyCache = {};
  await next();
});

// --- errors ---------------------------------------------------------------------------------------------

export const ErrorDetail = z
  .object({
    path: z.string().meta({ description: "the field, dotted as written in JSON or YAML", example: "lab" }),
    message: z.string().meta({ example: "expected a lab (host) id" }),
    line: z.number().int().optional().meta({ description: "workshop.yaml errors: the line" }),
    column: z.number().int().optional().meta({ description: "workshop.yaml errors: the column" }),
  })
  .meta({ id: "ErrorDetail" });

export const ErrorBody = z
  .object({
    error: z.object({
      kind: z
        .enum([
          "input",
          "auth",
          "forbidden",
          "not_found",
          "conflict",
          "rate_limited",
          "host",
          "unavailable",
          "internal",
        ])
        .meta({
          description:
            "decides the status: input 400, auth 401, forbidden 403, not_found 404, conflict 409, rate_limited 429, host 502, unavailable 503 (the store does not answer: ask again after Retry-After), internal 500",
        }),
      code: z.string().meta({ description: "a stable dotted code", example: "input.invalid" }),
      message: z
        .string()
        .meta({ description: "safe to show; never holds a secret", example: "invalid input" }),
      details: z
        .array(ErrorDetail)
        .optional()
        .meta({ description: "one entry per invalid field (input errors)" }),
      requestId: z
        .string()
        .optional()
        .meta({ description: "internal errors only: quote it in a bug report" }),
    }),
  })
  .meta({ id: "Error" });

const ERROR_ANSWERS = {
  400: "Invalid input: `error.details` lists every invalid field with its path (`input.invalid`), or the body is not JSON (`input.bad_json`).",
  401: "No instructor token (`auth.missing`) or not a valid one (`auth.invalid`).",
  404: "No such workshop (`workshop.not_found`) or no such item in it.",
  409: "The workshop's state does not allow it now (a conflict: the message says why).",
  502: "A host could not be reached or refused (`host.*`).",
} as const;
type ErrorStatus = keyof typeof ERROR_ANSWERS;

type ErrorAnswer = { description: string; content: { "application/json": { schema: typeof ErrorBody } } };

/** The error answers of a route, all in the one error shape. */
export function errors<const S extends ErrorStatus>(...statuses: S[]): Record<S, ErrorAnswer> {
  const out: Partial<Record<S, ErrorAnswer>> = {};
  for (const s of statuses)
    out[s] = { description: ERROR_ANSWERS[s], content: { "application/json": { schema: ErrorBody } } };
  return out as Record<S, ErrorAnswer>;
}

/** A JSON answer. */
export const json = <T extends z.ZodType>(schema: T, description: string) => ({
  description,
  content: { "application/json": { schema } },
});

/** A JSON request body; `required` when an empty body (read as `{}`) could never pass. */
export const jsonBody = <T extends z.ZodType>(schema: T, description: string, required = false) => ({
  description,
  required,
  content: { "application/json": { schema } },
});

// --- parameters -----------------------------------------------------------------------------------------

export const Name = z
  .string()
  .regex(/^[a-z0-9-]{1,40}$/, { error: "expected a workshop name" })
  .meta({ description: "the workshop's name (`name:` in workshop.yaml)", example: "demo" });

/** `{name}`: every route under /api/workshops/{name}. */
export const NameParams = z.object({ name: Name });

/**
 * Ids in a path are checked with the domain's own schemas, so they are as long as the domain makes them: one that
 * could never exist is a 400 naming the parameter (as a bad `{name}` is), a well-formed unknown one a 404.
 */
export const HostId = HostEntry.shape.id.meta({ description: "a host id", example: "student-01" });
export const RunId = idSchema("run").meta({
  description: "a run id",
  example: "run_01J9ZK3M4R7S8T9V0W1X2Y3Z4A",
});

// --- views returned by several resources ---------------------------------------------------------------

export const RunView = z
  .object({
    id: z.string().meta({ example: "run_01J9ZK3M4R7S8T9V0W1X2Y3Z4A" }),
    kind: z.enum(RUN_KINDS),
    state: z.enum(RUN_STATES),
    startedAt: z.string().meta({ description: "ISO 8601" }),
    endedAt: z.string().optional(),
    durationSeconds: z.number().optional(),
    transitions: z.number().int().meta({ description: "Step Functions state transitions so far" }),
    selection: z
      .array(z.string())
      .optional()
      .meta({ description: "the hosts a deploy or retry acted on, or a scale added" }),
    stages: z
      .array(z.enum(["provision", "deploy", "wait", "publish"]))
      .optional()
      .meta({ description: "the stages the run goes through, when not every one (`only`/`skip`)" }),
    hosts: z
      .record(z.string(), z.object({ state: z.string(), error: z.string().optional() }))
      .optional()
      .meta({ description: "per host: its result in this run" }),
    error: z.string().optional(),
  })
  .meta({ id: "Run" });

export const RunAnswer = z.object({ run: RunView });

export const HostView = z
  .object({
    id: z.string().meta({ example: "student-01" }),
    state: z.enum(HOST_STATES),
    phase: z.string().nullable().meta({ description: "the phase the lab's setup reports now" }),
    phases: z.array(z.object({ name: z.string(), state: z.string() })),
    error: z.string().nullable(),
    address: z.string().optional(),
    providerId: z.string().optional(),
    expiry: z.string().optional(),
    elapsedSeconds: z.number().optional().meta({ description: "time spent deploying (until ready)" }),
    readyAt: z.string().optional(),
    hasAccess: z.boolean().meta({ description: "the lab wrote its access details ($LABFLEET_ACCESS)" }),
    health: z
      .object({
        state: z.enum(["ok", "failing"]).meta({
          description: "failing: lab.health failed twice in a row while the lab was ready",
        }),
        checkedAt: z.string().nullable(),
        error: z
          .string()
          .nullable()
          .meta({ description: "the last failed check's output (secrets redacted)" }),
      })
      .optional()
      .meta({ description: "the in-use health check of a ready lab, once it has run" }),
    hostKey: z
      .object({
        origin: z.enum(["tofu", "workshop", "pinned", "ssm"]),
        fingerprints: z.array(z.string()).meta({ example: ["SHA256:..."] }),
      })
      .optional()
      .meta({
        description:
          "workshop status: the SSH host keys trusted for this host and how they were obtained (see GET .../host-keys)",
      }),
    reachable: z.enum(["online", "unreachable"]).optional().meta({
      description:
        "enrolled hosts only: unreachable once its agent missed three check-ins (90 s without a call), judged against the clock at this read; online again at its next call",
    }),
    lastSeenAt: z
      .string()
      .nullable()
      .optional()
      .meta({ description: "enrolled hosts only: when its agent last called in (ISO 8601)" }),
    drained: z
      .boolean()
      .optional()
      .meta({ description: "enrolled hosts only: drained, so no new work and no new claims" }),
    disabled: z
      .boolean()
      .optional()
      .meta({ description: "enrolled hosts only: disabled, so labfleet sends it nothing" }),
  })
  .meta({ id: "Host" });

export const WorkshopSummary = z
  .object({
    name: z.string(),
    state: z.enum(WORKSHOP_STATES),
    provider: z.string().meta({ example: "local" }),
    hosts: z.object({
      total: z.number().int(),
      ready: z.number().int(),
      failed: z.number().int(),
    }),
    expiry: z.string().optional().meta({ description: "when the workshop is torn down (ISO 8601)" }),
    lastRunId: z.string().optional(),
    updatedAt: z.string(),
  })
  .meta({ id: "WorkshopSummary" });
