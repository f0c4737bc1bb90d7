// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import { Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { trimTrailingSlash } from "hono/trailing-slash";
import { ZodError } from "zod";
import { assertSignInAllowed, recordSignInFailure } from "../../shared/auth/sign-in-limit.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { RateLimited } from "../../shared/runtime/failure-counters.ts";
import { log } from "../../shared/runtime/logger.ts";
import { issueDetails } from "../../shared/runtime/zod.ts";
import { answerStatus, asVisible } from "../api/errors.ts";
import type { InstructorAuth } from "../app.ts";
import { clientAddress } from "../client-address.ts";
import { BODY_LIMITS } from "../limits.ts";
import {
  actingName,
  backFor,
  type Ctx,
  type Env,
  forbidden,
  LoginForm,
  page,
  safeNext,
  viewer,
} from "./common.tsx";
import { enrollRoutes } from "./enroll-routes.tsx";
import { portalRoutes } from "./portal-routes.tsx";
import { rolloutRoutes } from "./rollout-routes.tsx";
import { consoleJs } from "./script.ts";
import {
  type CurrentSession,
  csrfValid,
  currentSession,
  endSession,
  loginCsrf,
  loginCsrfValid,
  startSession,
} from "./session.ts";
import { consoleCss } from "./style.ts";
import { tokenRoutes } from "./token-routes.tsx";
import { ErrorPage, LoginPage, type ProviderLink } from "./views.tsx";
import { workshopRoutes } from "./workshop-routes.tsx";

/**
 * The instructor console, mounted at /console. Every page but sign-in needs a session; every POST also the
 * session's CSRF secret and this site's Origin. Handlers stay thin: parse the form, call one shared/ function
 * as the signed-in instructor, then redirect (with a fixed notice key, never data, in the URL) or render.
 * Pages poll `.../live` for server-rendered fragments of their live regions (see script.ts).
 */

export interface ConsoleOptions {
  /** OAuth sign-in links shown on the sign-in page (routes of their own, such as /auth/github/start). */
  providers?: ProviderLink[];
}

// ---------------------------------------------------------------------------------------------- routes

export function consoleRoutes(auth: InstructorAuth, opts: ConsoleOptions = {}) {
  const providers = opts.providers ?? [];
  const app = new Hono<Env>();

  // Static assets first: public, cacheable, no session needed.
  app.get("/console.css", (c) =>
    c.body(consoleCss, 200, {
      "Content-Type": "text/css; charset=utf-8",
      "Cache-Control": "public, max-age=300",
    }),
  );
  app.get("/console.js", (c) =>
    c.body(consoleJs, 200, {
      "Content-Type": "text/javascript; charset=utf-8",
      "Cache-Control": "public, max-age=300",
    }),
  );

  // /console/ and the like: the same page without the slash (a GET that would otherwise be a 404).
  app.use(trimTrailingSlash());
  // Everything else shows instructor data, or signs in: never cached anywhere.
  app.use(async (c, next) => {
    c.header("Cache-Control", "no-store");
    await next();
  });
  app.use(
    bodyLimit({
      maxSize: BODY_LIMITS.workshop,
      onError: (c) =>
        page(
          c,
          <ErrorPage
            title="Too much data"
            message="That form was far too large."
            back={backFor(c.req.path)}
          />,
          413,
        ),
    }),
  );

  // --- sign-in ------------------------------------------------------------------------------------------
  app.get("/login", async (c) => {
    const next = c.req.query("next");
    if (await currentSession(c)) return c.redirect(safeNext(next), 303);
    return page(
      c,
      <LoginPage
        csrf={loginCsrf(c)}
        next={next === undefined ? undefined : safeNext(next)}
        notice={c.req.query("signed_out") === undefined ? undefined : "You are signed out."}
        providers={providers}
      />,
    );
  });
  app.post("/login", async (c) => {
    if (!(await loginCsrfValid(c))) return forbidden(c);
    const form = LoginForm.safeParse(await c.req.parseBody());
    const next = safeNext(form.data?.next);
    const again = (error: string, status: 401 | 429) =>
      page(c, <LoginPage csrf={loginCsrf(c)} next={next} error={error} providers={providers} />, status);
    // Too many failures from this address: refused before the token is even looked at.
    const address = clientAddress(c);
    try {
      await assertSignInAllowed(address);
    } catch (err) {
      if (!(err instanceof RateLimited)) throw err;
      c.header("Retry-After", String(err.retryAfterSeconds));
      return again(err.message, 429);
    }
    const token = form.success ? form.data.token.trim() : "";
    const who = token ? await auth.verify(token) : undefined;
    if (!who) {
      await recordSignInFailure(address);
      log.warn("console sign-in refused: not a valid instructor token", { address });
      return again(
        "That is not a valid instructor token. Copy it again from where labfleet printed it.",
        401,
      );
    }
    // The token's name is who the session's actions are by in activity (`by`), as for the API.
    await startSession(c, { id: who.id, via: "token", ...(who.name ? { name: who.name } : {}) });
    return c.redirect(next, 303);
  });

  // --- everything below needs a session; a POST also its CSRF secret and this site's Origin --------------
  app.use(async (c, next) => {
    const session = await currentSession(c);
    if (!session) {
      if (c.req.path.endsWith("/live"))
        return c.json(
          { error: { kind: "auth", code: "console.signed_out", message: "sign in to the console again" } },
          401,
        );
      const back = c.req.method === "GET" ? `?next=${encodeURIComponent(c.req.path)}` : "";
      return c.redirect(`/console/login${back}`, 303);
    }
    if (c.req.method !== "GET" && c.req.method !== "HEAD" && !(await csrfValid(c, session)))
      return forbidden(c, { label: session.name ?? session.email ?? "instructor", csrf: session.csrf });
    c.set("session", session);
    return withActor({ type: "instructor", id: session.id, name: actingName(session) }, () => next());
  });

  app.post("/logout", async (c) => {
    await endSession(c);
    return c.redirect("/console/login?signed_out=1", 303);
  });

  workshopRoutes(app);
  rolloutRoutes(app);
  portalRoutes(app);
  tokenRoutes(app);
  enrollRoutes(app);

  // Errors become a page with a way back (or JSON for the live endpoints), at the status of their kind.
  app.onError((err, c) => {
    const session = (c as Ctx).get("session") as CurrentSession | undefined;
    const who = session ? viewer(c as Ctx) : undefined;
    const visible =
      asVisible(err, c) ??
      (err instanceof ZodError
        ? new VisibleError("input", "input.invalid", "Some fields are not right.", issueDetails(err.issues))
        : undefined);
    if (c.req.path.endsWith("/live")) {
      if (visible)
        return c.json(
          { error: { kind: visible.kind, code: visible.code, message: visible.message } },
          answerStatus(c, visible),
        );
    }
    if (visible)
      return page(
        c,
        <ErrorPage
          viewer={who}
          title={visible.kind === "unavailable" ? "Temporarily unavailable" : "That did not work"}
          message={visible.message}
          details={visible.details}
          back={backFor(c.req.path)}
        />,
        answerStatus(c, visible),
      );
    const requestId = c.get("requestId" as never) as string | undefined;
    log.error("unhandled error", { requestId, name: err.name, error: err.message, stack: err.stack });
    return page(
      c,
      <ErrorPage
        viewer={who}
        title="Something went wrong"
        message={`The console hit an internal error (request ${requestId ?? "without an id"}); it is in the logs.`}
        back={backFor(c.req.path)}
      />,
      500,
    );
  });

  return app;
}
