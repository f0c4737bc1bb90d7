import { createHash, timingSafeEqual } from "node:crypto";
import { Hono } from "hono";
import { secureHeaders } from "hono/secure-headers";
import { withActor } from "../shared/runtime/actor.ts";
import { VisibleError } from "../shared/runtime/errors.ts";
import { createID } from "../shared/runtime/ids.ts";
import { log } from "../shared/runtime/logger.ts";
import { onError } from "./api/errors.ts";
import { fleet } from "./api/fleet.ts";
import { workshops } from "./api/workshops.ts";
import { consolePage } from "./console/page.ts";

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

export function createApp(opts: { auth: InstructorAuth }) {
  const app = new Hono();
  app.use(async (c, next) => {
    const requestId = createID("request");
    c.set("requestId" as never, requestId as never);
    const started = Date.now();
    await next();
    // The path only: query strings may carry secrets and are never logged.
    log.info("request", {
      requestId,
      method: c.req.method,
      path: c.req.path,
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
    }),
  );
  app.onError(onError);
  app.notFound((c) =>
    c.json({ error: { kind: "not_found", code: "route.not_found", message: "no such route" } }, 404),
  );

  app.get("/api/health", (c) => c.json({ ok: true }));

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
    const who = await opts.auth.verify(match[1]);
    if (!who) throw new VisibleError("auth", "auth.invalid", "the instructor token is not valid");
    c.header("Cache-Control", "no-store");
    await withActor({ type: "instructor", id: who.id }, () => next());
  });
  api.route("/workshops", workshops);
  api.route("/workshops", fleet);
  app.route("/api", api);

  app.get("/", (c) => c.redirect("/console"));
  app.route("/console", consolePage);
  return app;
}

export type App = ReturnType<typeof createApp>;
