import { createHash, timingSafeEqual } from "node:crypto";
import { Hono } from "hono";
import { withActor } from "../shared/runtime/actor.ts";
import { VisibleError } from "../shared/runtime/errors.ts";
import { agentApp } from "./agent/index.ts";
import { agentHostsApi } from "./api/agent-hosts.ts";
import { checkApi } from "./api/check.ts";
import { enrollmentApi } from "./api/enrollment.ts";
import { events } from "./api/events.ts";
import { execApi } from "./api/exec.ts";
import { fleet } from "./api/fleet.ts";
import { fleetViewApi } from "./api/fleet-view.ts";
import { apiReference } from "./api/openapi.ts";
import { adminPage, portalApi } from "./api/portal.ts";
import { receiptApi } from "./api/receipt.ts";
import { rolloutApi } from "./api/rollout.ts";
import { workshops } from "./api/workshops.ts";
import { type AuthConfig, authConfigFromEnv } from "./auth/config.ts";
import { authRoutes, signInLinks } from "./auth/routes.ts";
import { tokensApi } from "./auth/tokens-api.ts";
import { baseApp } from "./base.ts";
import { consoleRoutes } from "./console/index.tsx";
import { currentSession } from "./console/session.ts";
import { portal } from "./portal/index.tsx";
import { portalAt } from "./portal-url.ts";

export { logPath } from "./base.ts";
export { createPortalApp } from "./portal-app.ts";

/** Decides who an API token belongs to; local mode checks the bootstrap token, the cloud a hashed token table. */
export interface InstructorAuth {
  /** The instructor, with the name activity shows for what they do (the token's name). */
  verify(token: string): Promise<{ id: string; name?: string } | undefined>;
}

/** A single shared token, compared in constant time (the local runtime's bootstrap token). */
/** Who the runtime's bootstrap token is in activity lists. */
export const BOOTSTRAP_TOKEN_NAME = "bootstrap token";

export function bootstrapAuth(token: string): InstructorAuth {
  const want = createHash("sha256").update(token).digest();
  return {
    async verify(given) {
      const got = createHash("sha256").update(given).digest();
      return timingSafeEqual(want, got) ? { id: "bootstrap", name: BOOTSTRAP_TOKEN_NAME } : undefined;
    },
  };
}

/**
 * What a signed-in console session may read under /api without a token: the API document and its reference page
 * (GET only, so the session's CSRF secret is not needed), which the console links to. Everything else needs the
 * bearer token.
 */
export const SESSION_READABLE = new Set(["/api/openapi.json", "/api/docs"]);

/** The instructor's side: the JSON API behind the bearer token, the console, the portal's admin page. */
function addInstructorRoutes(app: Hono, auth: InstructorAuth, authConfig: AuthConfig): void {
  const api = new Hono();
  api.use(async (c, next) => {
    const header = c.req.header("authorization") ?? "";
    const match = /^Bearer\s+(\S+)$/i.exec(header);
    if (!match?.[1]) {
      const session =
        !header && c.req.method === "GET" && SESSION_READABLE.has(c.req.path)
          ? await currentSession(c)
          : undefined;
      if (session) {
        c.header("Cache-Control", "no-store");
        return withActor({ type: "instructor", id: session.id }, () => next());
      }
      throw new VisibleError(
        "auth",
        "auth.missing",
        "an instructor token is required (Authorization: Bearer ...)",
      );
    }
    const who = await auth.verify(match[1]);
    if (!who) throw new VisibleError("auth", "auth.invalid", "the instructor token is not valid");
    c.header("Cache-Control", "no-store");
    await withActor({ type: "instructor", id: who.id, ...(who.name ? { name: who.name } : {}) }, () =>
      next(),
    );
  });
  api.route("/workshops", workshops);
  api.route("/workshops", fleet);
  api.route("/workshops", execApi);
  api.route("/workshops", fleetViewApi);
  api.route("/workshops", portalApi);
  api.route("/workshops", events);
  api.route("/workshops", receiptApi);
  api.route("/workshops", checkApi);
  api.route("/workshops", rolloutApi);
  api.route("/workshops", agentHostsApi);
  api.route("/workshops", enrollmentApi);
  api.route("/tokens", tokensApi);
  api.route("/", apiReference); // GET /api/openapi.json and /api/docs: the token, or a console session
  app.route("/api", api);

  app.route("/auth", authRoutes(authConfig));
  app.route("/console", consoleRoutes(auth, { providers: signInLinks(authConfig) }));
  app.route("/admin", adminPage);
  app.route("/agent/v1", agentApp);
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

const INSTRUCTOR_PREFIXES = ["/api/", "/console", "/admin/", "/auth/", "/agent/"];

/**
 * The instructor's side alone: what the cloud's API function serves. With `portalUrl` (the portal's own public
 * URL), the portal's addresses it shows are on it (`portal info`, the console's slide: web/portal-url.ts), and a
 * GET for any other path is sent there with its path and query, so links the CLI prints with the API's URL
 * (invites, personal links) still reach the portal.
 */
export function createInstructorApp(opts: {
  auth: InstructorAuth;
  authConfig?: AuthConfig;
  portalUrl?: string;
}) {
  const app = baseApp();
  const portalUrl = opts.portalUrl;
  app.use(portalAt(portalUrl));
  addInstructorRoutes(app, opts.auth, opts.authConfig ?? authConfigFromEnv({}));
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
