import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { ZodError } from "zod";
import { type ErrorKind, VisibleError } from "../../shared/runtime/errors.ts";
import { log } from "../../shared/runtime/logger.ts";
import { issueDetails } from "../../shared/runtime/zod.ts";

const statusOfKind: Record<ErrorKind, ContentfulStatusCode> = {
  input: 400,
  auth: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  rate_limited: 429,
  host: 502,
};

/** The HTTP status of an error kind: the API and the portal pages answer alike. */
export const statusOf = (kind: ErrorKind): ContentfulStatusCode => statusOfKind[kind];

/** The one place errors become HTTP: visible errors keep their kind and code, anything else is a bare 500. */
export function onError(err: Error, c: Context) {
  const requestId = c.get("requestId" as never) as string | undefined;
  if (err instanceof VisibleError) {
    return c.json(
      { error: { kind: err.kind, code: err.code, message: err.message, details: err.details } },
      statusOfKind[err.kind],
    );
  }
  if (err instanceof ZodError) {
    return c.json(
      {
        error: {
          kind: "input",
          code: "input.invalid",
          message: "invalid input",
          details: issueDetails(err.issues),
        },
      },
      400,
    );
  }
  if (err instanceof SyntaxError) {
    return c.json(
      { error: { kind: "input", code: "input.bad_json", message: "the request body is not valid JSON" } },
      400,
    );
  }
  log.error("unhandled error", { requestId, name: err.name, error: err.message, stack: err.stack });
  return c.json({ error: { kind: "internal", code: "internal", message: "internal error", requestId } }, 500);
}
