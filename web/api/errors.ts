import type { Context } from "hono";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { ZodError } from "zod";
import { type ErrorKind, VisibleError } from "../../shared/runtime/errors.ts";
import { log } from "../../shared/runtime/logger.ts";
import { issueDetails } from "../../shared/runtime/zod.ts";
import {
  isStoreUnreachable,
  STORE_RETRY_AFTER_SECONDS,
  storeUnavailable,
} from "../../shared/store/unreachable.ts";

const statusOfKind: Record<ErrorKind, ContentfulStatusCode> = {
  input: 400,
  auth: 401,
  forbidden: 403,
  not_found: 404,
  conflict: 409,
  rate_limited: 429,
  host: 502,
  unavailable: 503,
};

/** The HTTP status of an error kind: the API and the portal pages answer alike. */
export const statusOf = (kind: ErrorKind): ContentfulStatusCode => statusOfKind[kind];

/**
 * The error a user may see for `err`: a VisibleError as it is, the store being unreachable as
 * `store.unavailable` (logged once here, as a warning: it is an outage, not a bug); undefined for anything else.
 */
export function asVisible(err: unknown, c?: Context): VisibleError | undefined {
  if (err instanceof VisibleError) return err;
  if (!isStoreUnreachable(err)) return undefined;
  const requestId = c?.get("requestId" as never) as string | undefined;
  log.warn("the store is unreachable", { requestId, error: (err as Error).message });
  return storeUnavailable();
}

/** The status to answer a visible error with; a 503 also says when to ask again (Retry-After). */
export function answerStatus(c: Context, err: VisibleError): ContentfulStatusCode {
  if (err.kind === "unavailable") c.header("Retry-After", String(STORE_RETRY_AFTER_SECONDS));
  return statusOfKind[err.kind];
}

/** The one place errors become HTTP: visible errors keep their kind and code, anything else is a bare 500. */
export function onError(err: Error, c: Context) {
  const requestId = c.get("requestId" as never) as string | undefined;
  const visible = asVisible(err, c);
  if (visible) {
    return c.json(
      {
        error: {
          kind: visible.kind,
          code: visible.code,
          message: visible.message,
          details: visible.details,
        },
      },
      answerStatus(c, visible),
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
