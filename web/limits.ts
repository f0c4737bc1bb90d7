import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { HTTP_API_INTEGRATION_TIMEOUT_MS } from "../shared/cloud/env.ts";
import { WORK_SHARE } from "../shared/runtime/deadline.ts";
import { WORKSHOP_YAML_MAX_BYTES } from "../shared/workshop/load.ts";

/**
 * How large a request body may be, for every variant of the app (local, the instructor's function, the portal's).
 * A body over its limit is answered 413 before it is read whole: at once from its Content-Length, or as soon as
 * a streamed (chunked) body passes the limit, so a client sending 200 MB costs the server at most the limit.
 * Routes may hold a smaller limit of their own (the portal's forms: 16 KiB, with a page of their own).
 */
const KiB = 1024;
const MiB = 1024 * KiB;

export const BODY_LIMITS = {
  /** JSON bodies of the instructor API, sign-in forms and the console's forms. */
  json: 256 * KiB,
  /**
   * A request that carries workshop.yaml (the API's submit and plan, the console's upload): the YAML itself
   * is at most WORKSHOP_YAML_MAX_BYTES (1 MiB, checked when it is parsed), and JSON or a form may double it.
   */
  workshop: 4 * WORKSHOP_YAML_MAX_BYTES,
  /** A roster to invite: its CSV is at most 1 MiB (tens of thousands of students), in a JSON body. */
  roster: 4 * MiB,
  /** The sign-in endpoints anyone may call (device login): their bodies are a few short fields. */
  public: 16 * KiB,
} as const;

/** The limit of one request, by route. */
export function bodyLimitFor(method: string, path: string): number {
  if (method === "POST") {
    if (/^\/api\/workshops(\/plan)?\/?$/.test(path) || /^\/console\/new\/?$/.test(path))
      return BODY_LIMITS.workshop;
    if (/^\/api\/workshops\/[^/]+\/portal\/invite\/?$/.test(path)) return BODY_LIMITS.roster;
  }
  if (path.startsWith("/auth/")) return BODY_LIMITS.public;
  return BODY_LIMITS.json;
}

const human = (bytes: number) => (bytes >= MiB ? `${bytes / MiB} MiB` : `${bytes / KiB} KiB`);

const tooLarge = (maxSize: number) => (c: Context) =>
  c.json(
    {
      error: {
        kind: "too_large",
        code: "request.too_large",
        message: `the request body is larger than this route takes (at most ${human(maxSize)})`,
      },
    },
    413,
  );

/** The body limit middleware: one `bodyLimit` (hono/body-limit) per limit, chosen by route. */
export function bodyLimits(): MiddlewareHandler {
  const limiters = new Map<number, MiddlewareHandler>(
    Object.values(BODY_LIMITS).map((maxSize) => [
      maxSize,
      bodyLimit({ maxSize, onError: tooLarge(maxSize) }),
    ]),
  );
  return (c, next) => {
    const limiter = limiters.get(bodyLimitFor(c.req.method, c.req.path));
    return limiter ? limiter(c, next) : next();
  };
}

/**
 * The time a request has on Lambda: the function's remaining time, at most API Gateway's integration timeout
 * (after it, API Gateway answers the client 503 whatever the function still does).
 */
export function requestTimeMs(remainingMs: number): number {
  return Math.min(remainingMs, HTTP_API_INTEGRATION_TIMEOUT_MS);
}

/** What a request keeps after its work, inside its time: the writes after the last step, and the answer. */
export const REQUEST_HEADROOM_MS = 5_000;

/**
 * How long a request's work may take: its time (requestTimeMs) less the headroom, never less than half of it.
 * Behind API Gateway that is 25 of the 30 seconds: a function's own timeout is no longer than the integration
 * timeout, so half of it (what long-running functions keep, shared/runtime/deadline.ts) would leave an
 * operation on a fleet (extend, refresh) 15 s.
 */
export function requestWorkMs(remainingMs: number): number {
  const t = requestTimeMs(remainingMs);
  return Math.max(t * WORK_SHARE, t - REQUEST_HEADROOM_MS);
}
