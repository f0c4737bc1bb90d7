import { Hono } from "hono";
import { secureHeaders } from "hono/secure-headers";
import { createID } from "../shared/runtime/ids.ts";
import { log } from "../shared/runtime/logger.ts";
import { onError } from "./api/errors.ts";
import { health } from "./health.ts";
import { hostGuard } from "./host-guard.ts";
import { bodyLimits } from "./limits.ts";

/**
 * What every variant of the web app starts from (the whole app, the instructor's side, the portal alone): request
 * logs, security headers, the error mapping, /api/health. Imports nothing of the instructor's side, so the
 * portal's function bundles none of it.
 */

/** The pages' Content-Security-Policy: their own scripts and styles, no framing by others, forms to themselves. */
const CSP = {
  defaultSrc: ["'self'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'", "'unsafe-inline'"],
  frameAncestors: ["'none'"],
  formAction: ["'self'"],
};

/** The same policy as a header value, with pages it may frame (`frame-src`): origins such as `https://x.org`. */
export function cspWith(frameSrc: string[]): string {
  const directives: Record<string, string[]> = { ...CSP, frameSrc };
  return Object.entries(directives)
    .map(([k, v]) => `${k.replace(/[A-Z]/g, (m) => `-${m.toLowerCase()}`)} ${v.join(" ")}`)
    .join("; ");
}

/** A path fit for the logs: personal links and admin links carry their secret in the path. */
export function logPath(path: string): string {
  return path.replace(/^\/l\/[^/]*/, "/l/:token").replace(/^\/admin\/([^/]*)\/[^/]*/, "/admin/$1/:token");
}

/** What every variant of the app shares: request logs, security headers, the error mapping, /api/health. */
export function baseApp() {
  const app = new Hono();
  app.use(async (c, next) => {
    const requestId = createID("request");
    c.set("requestId" as never, requestId as never);
    const started = Date.now();
    await next();
    // The path only, with link tokens replaced: query strings may carry secrets and are never logged.
    log.info("request", {
      requestId,
      method: c.req.method,
      path: logPath(c.req.path),
      status: c.res.status,
      ms: Date.now() - started,
    });
  });
  app.use(
    secureHeaders({
      contentSecurityPolicy: CSP,
      // A page that needs more (the lab page frames the workshop's guide) sets its own policy with cspWith().
      overwrite: false,
      // same-origin, not no-referrer: with no-referrer, Chromium sends "Origin: null" on the portal's own
      // form posts, which the CSRF check must then refuse. Nothing is ever sent to another site.
      referrerPolicy: "same-origin",
    }),
  );
  app.use(hostGuard()); // only the names the runtime is served at (DNS rebinding): 421 otherwise
  app.use(bodyLimits()); // every body bounded before it is read (web/limits.ts)
  app.onError(onError);
  app.notFound((c) =>
    c.json({ error: { kind: "not_found", code: "route.not_found", message: "no such route" } }, 404),
  );

  app.get("/api/health", health);
  return app;
}
