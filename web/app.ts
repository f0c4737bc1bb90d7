import { createHash, timingSafeEqual } from "node:crypto";
import { Hono } from "hono";
import { secureHeaders } from "hono/secure-headers";
import { withActor } from "../shared/runtime/actor.ts";
import { VisibleError } from "../shared/runtime/errors.ts";
import { createID } from "../shared/runtime/ids.ts";
import { log } from "../shared/runtime/logger.ts";
import { onError } from "./api/errors.ts";
import { events } from "./api/events.ts";
import { fleet } from "./api/fleet.ts";
import { apiReference } from "./api/openapi.ts";
import { adminPage, portalApi } from "./api/portal.ts";
import { workshops } from "./api/workshops.ts";
import { type AuthConfig, authConfigFromEnv } from "./auth/config.ts";
import { authRoutes, signInLinks } from "./auth/routes.ts";
import { tokensApi } from "./auth/tokens-api.ts";
import { consoleRoutes } from "./console/index.tsx";
import { portal } from "./portal/index.tsx";

/** Decides who an API token belongs to; local mode checks the bootstrap token, the cloud a hashed token table. */
export interface InstructorAuth {
  verify(token: string): Promise<{ id: string } | undefined>;
}

/** A single shared token, compared in constant time (the local runtime's bootstrap token). */
export function bootstrapAuth(token: string): InstructorAuth {
  const want = createHash("sha256").update(token).digest();
  return {
    async verify(given) {
      const got = createHash("sha256").update(given).digest();
      return timingSafeEqual(want, got) ? { id: "bootstrap" } : undefined;
    },
  };
}

/** A path fit for the logs: personal links and admin links carry their secret in the path. */
export function logPath(path: string): string {
  return path.replace(/^\/l\/[^/]*/, "/l/:token").replace(/^\/admin\/([^/]*)\/[^/]*/, "/admin/$1/:token");
}

/** What every variant of the app shares: request logs, security headers, the error mapping, /api/health. */
function baseApp() {
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
      contentSecurityPolicy: {
        defaultSrc: ["'self'"],
        scriptSrc: ["'self'"],
        styleSrc: ["'self'", "'unsafe-inline'"],
        frameAncestors: ["'none'"],
        formAction: ["'self'"],
      },
      // same-origin, not no-referrer: with no-referrer, Chromium sends "Origin: null" on the portal's own
      // form posts, which the CSRF check must then refuse. Nothing is ever sent to another site.
      referrerPolicy: "same-origin",
    }),
  );
  app.onError(onError);
  app.notFound((c) =>
    c.json({ error: { kind: "not_found", code: "route.not_found", message: "no such route" } }, 404),
  );

  app.get("/api/health", (c) => c.json({ ok: true }));
  return app;
}

/** The instructor's side: the JSON API behind the bearer token, the console, the portal's admin page. */
function addInstructorRoutes(app: Hono, auth: InstructorAuth, authConfig: AuthConfig): void {
  const api = new Hono();
  api.use(async (c, next) => {
    const header = c.req.header("authorization") ?? "";
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    if (!match?.[1])
      throw new VisibleError(
        "auth",
        "auth.missing",
        "an instructor token is required (Authorization: Bearer ...)",
      );
    const who = await auth.verify(match[1]);
    if (!who) throw new VisibleError("auth", "auth.invalid", "the instructor token is not valid");
    c.header("Cache-Control", "no-store");
    await withActor({ type: "instructor", id: who.id }, () => next());
  });
  api.route("/workshops", workshops);
  api.route("/workshops", fleet);
  api.route("/workshops", portalApi);
  api.route("/workshops", events);
  api.route("/tokens", tokensApi);
  api.route("/", apiReference); // GET /api/openapi.json and /api/docs, behind the token like all of /api
  app.route("/api", api);

  app.route("/auth", authRoutes(authConfig));
  app.route("/console", consoleRoutes(auth, { providers: signInLinks(authConfig) }));
  app.route("/admin", adminPage);
}

/**
 * The whole app in one process: the instructor's side and the student portal. The local runtime serves it
 * (`labfleet dev`); the cloud splits it in two functions, createInstructorApp and createPortalApp.
 */
export function createApp(opts: { auth: InstructorAuth; authConfig?: AuthConfig }) {
  const app = baseApp();
  addInstructorRoutes(app, opts.auth, opts.authConfig ?? authConfigFromEnv({}));
  // The student portal owns the root (/, /board, /l/:token, ...): registered last, route by route.
  app.route("/", portal);
  return app;
}

/** The student portal alone: what the cloud's portal function serves (it holds no host or cloud permissions). */
export function createPortalApp() {
  const app = baseApp();
  app.route("/", portal);
  return app;
}

const INSTRUCTOR_PREFIXES = ["/api/", "/console", "/admin/", "/auth/"];

/**
 * The instructor's side alone: what the cloud's API function serves. With `portalUrl` (the portal function's
 * URL), a GET for any other path is sent there with its path and query, so links the CLI prints with the API's
 * URL (`portal info`, invites, personal links) still reach the portal.
 */
export function createInstructorApp(opts: {
  auth: InstructorAuth;
  authConfig?: AuthConfig;
  portalUrl?: string;
}) {
  const app = baseApp();
  addInstructorRoutes(app, opts.auth, opts.authConfig ?? authConfigFromEnv({}));
  const portalUrl = opts.portalUrl;
  if (portalUrl) {
    app.get("*", (c) => {
      const path = c.req.path;
      if (path === "/api" || INSTRUCTOR_PREFIXES.some((p) => path.startsWith(p))) return c.notFound();
      const target = new URL(path, portalUrl);
      target.search = new URL(c.req.url).search;
      return c.redirect(target.toString(), 302);
    });
  }
  return app;
}

export type App = ReturnType<typeof createApp>;
