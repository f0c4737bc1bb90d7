import type { Context, MiddlewareHandler } from "hono";

/**
 * Where students reach the portal, as the instructor's side shows it. The cloud's instructor function serves no
 * student page: the portal has a URL of its own (its HTTP API's custom domain, else its execute-api URL), given by
 * `portalAt` to the routes below it, and the addresses labfleet prints (`portal info`, `portal slide`, the
 * console's slide) are on it. Without one (the local runtime serves both), they are on this site's URL.
 */

const KEY = "labfleetPortalUrl";

/** Gives the routes registered after it the portal's own URL (nothing when there is none). */
export function portalAt(url: string | undefined): MiddlewareHandler {
  return async (c, next) => {
    if (url) c.set(KEY as never, url as never);
    await next();
  };
}

/** The portal's own URL, when this site has one set. */
export function portalBase(c: Context): string | undefined {
  return c.get(KEY as never) as string | undefined;
}

/** A portal path as students reach it: on the portal's own URL when one is set, else on this site's. */
export function studentUrl(c: Context, path: string): string {
  return new URL(path, portalBase(c) ?? c.req.url).toString();
}
