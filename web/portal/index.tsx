// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import { type Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { getCookie } from "hono/cookie";
import { html } from "hono/html";
import type { Child } from "hono/jsx";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { z } from "zod";
import { isByod, joinPageForLink, startOwnMachine } from "../../shared/portal/byod.ts";
import { checkMyWork, checksForLink, type LabChecks } from "../../shared/portal/checks.ts";
import { board, enterCode, labForLink, linkLab } from "../../shared/portal/claims.ts";
import { COOKIES } from "../../shared/portal/constants.ts";
import { serveQueue, waitingCount } from "../../shared/portal/queue.ts";
import { workshopRecord } from "../../shared/portal/reads.ts";
import {
  claimOrWait,
  isWaitingLink,
  leaveLine,
  recoverLabOrPlace,
  waitingForLink,
  workshopOfWaitingLink,
} from "../../shared/portal/waiting.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { RateLimited } from "../../shared/runtime/failure-counters.ts";
import { log } from "../../shared/runtime/logger.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { cspWith } from "../base.ts";
import { portalJs } from "./script.ts";
import {
  answerStatus,
  asVisible,
  clearAccessCookie,
  clearLabCookie,
  csrfField,
  guardPost,
  type PortalEnv,
  portalClient,
  readAccess,
  readLabCookie,
  setAccessCookie,
  setLabCookie,
  statusOf,
  vouchForBrowser,
} from "./security.ts";
import { portalCss } from "./style.ts";
import {
  BoardPage,
  ErrorPage,
  type FieldErrors,
  FrontPage,
  JoinView,
  LabView,
  LinkGone,
  PrivacyPage,
  RecoverPage,
  type RememberedLab,
  WaitingView,
} from "./views.tsx";

/**
 * The student portal: workshop code -> board -> claim -> personal lab page, and getting a lab back.
 * Handlers parse the form, call one domain function and render; domain errors become the same page again
 * with the message, at the status of the error's kind. Routes are registered one by one (no `use("*")`),
 * because this app is mounted at the root beside /api and /console.
 */
type Ctx = Context<PortalEnv>;

/** The origin of a guide URL the lab page may frame (http or https only), or undefined. */
function guideOrigin(url: string | null): string | undefined {
  if (!url || !/^https?:\/\//i.test(url)) return undefined;
  try {
    return new URL(url).origin;
  } catch {
    return undefined;
  }
}

function render(c: Ctx, node: Child, status: ContentfulStatusCode = 200) {
  c.header("Cache-Control", "no-store");
  return c.html(html`<!doctype html>${node}`, status);
}

const forbidden = (c: Ctx) =>
  render(
    c,
    <ErrorPage
      title="This form could not be accepted"
      message="It expired, or it was sent from another site. Go back, reload the page and try again."
    />,
    403,
  );

const post = [
  bodyLimit({
    maxSize: 16 * 1024,
    onError: (c) =>
      render(c as Ctx, <ErrorPage title="Too much data" message="That form was far too large." />, 413),
  }),
  guardPost(forbidden),
] as const;

const CodeForm = z.object({ code: z.string().max(200) });
const ClaimForm = z.object({
  name: z.string().max(500),
  email: z.string().max(500),
  pin: z.string().max(64),
});
const RecoverForm = z.object({ email: z.string().max(500), pin: z.string().max(64) });

/** A domain error to show on the page (a refusal for too many failures also says when to come back). */
const visible = (c: Ctx, err: unknown): VisibleError => {
  if (!(err instanceof VisibleError)) throw err;
  if (err instanceof RateLimited) c.header("Retry-After", String(err.retryAfterSeconds));
  return err;
};

/** The lab this browser remembers, when its personal link still resolves. */
async function remembered(c: Ctx): Promise<RememberedLab | undefined> {
  const token = readLabCookie(c);
  if (!token) return undefined;
  const found = await linkLab(token); // looking, not opening: firstOpenedAt stays as it is
  if (found) return { lab: found.lab, token };
  if (await isWaitingLink(token)) return { token, waiting: true };
  return (await joinPageForLink(token, agentApiUrl(c))) ? { token, joining: true } : undefined;
}

async function showBoard(
  c: Ctx,
  workshop: string,
  extra: {
    status?: ContentfulStatusCode;
    errors?: FieldErrors;
    message?: string;
    values?: { name?: string; email?: string };
  } = {},
) {
  const [b, known, waiting, w] = await Promise.all([
    board(workshop),
    remembered(c),
    waitingCount(workshop),
    workshopRecord(workshop),
  ]);
  return render(
    c,
    <BoardPage
      csrf={csrfField(c)}
      open={b.open}
      labs={b.labs}
      spares={b.spares}
      waiting={waiting}
      expiry={b.expiry}
      now={useDeps().clock.now()}
      remembered={known}
      byod={isByod(w?.spec as Workshop | undefined)}
      {...(extra.errors ? { errors: extra.errors } : {})}
      {...(extra.values ? { values: extra.values } : {})}
      message={extra.message}
    />,
    extra.status,
  );
}

/** Where a claim error is shown: next to the field it is about, else above the form. */
function claimErrors(err: VisibleError): { errors: FieldErrors; message?: string } {
  if (err.code === "portal.email_has_lab" || err.code === "portal.email_in_line")
    return { errors: { email: err.message } };
  const errors: FieldErrors = {};
  for (const d of err.details) {
    if (d.path === "name" || d.path === "email" || d.path === "pin") errors[d.path] = d.message;
  }
  return Object.keys(errors).length
    ? { errors, message: "Please check the fields below." }
    : { errors, message: err.message };
}

/** Where a student's machine reaches labfleet's agent endpoints: the runtime's host-facing URL, else this origin. */
function agentApiUrl(c: Ctx): string {
  return useDeps().hostApiUrl?.() || new URL(c.req.url).origin;
}

/** Pages behind the workshop code: without a valid access cookie, back to the front page. */
/** Whether the workshop's students enroll their own machines (shared/portal/byod.ts). */
async function byodWorkshop(workshop: string): Promise<boolean> {
  return isByod((await workshopRecord(workshop))?.spec as Workshop | undefined);
}

async function needAccess(c: Ctx) {
  const access = await readAccess(c);
  if (!access && getCookie(c, COOKIES.access.name)) clearAccessCookie(c);
  return access;
}

/** A student's lab page, with their checks ("Check my work") when the lab has any. */
async function showLab(
  c: Ctx,
  token: string,
  extra: { checks?: LabChecks; checked?: boolean; message?: string; status?: ContentfulStatusCode } = {},
) {
  let [page, checks] = await Promise.all([
    labForLink(token),
    extra.checks ? extra.checks : checksForLink(token),
  ]);
  if (!page) {
    // A place in line: serve the line first (cheap when nothing is free), then show the lab or the place.
    const workshop = await workshopOfWaitingLink(token);
    if (workshop) {
      await serveQueue(workshop);
      page = await labForLink(token);
      if (page && !extra.checks) checks = await checksForLink(token);
    }
    if (!page) {
      const waiting = workshop ? await waitingForLink(token) : undefined;
      if (!waiting) {
        // BYOD: the student's join page, until their machine joins (then the link opens the lab).
        const join = await joinPageForLink(token, agentApiUrl(c));
        if (join) return render(c, <JoinView page={join} now={useDeps().clock.now()} />);
        return render(c, <LinkGone />, 404);
      }
      return render(c, <WaitingView page={waiting} token={token} csrf={csrfField(c)} />);
    }
  }
  // The guide is framed beside the lab's details: its origin, and only it, may be framed here.
  const guide = guideOrigin(page.guideUrl);
  if (guide) c.header("Content-Security-Policy", cspWith([guide]));
  return render(
    c,
    <LabView
      page={page}
      now={useDeps().clock.now()}
      checks={checks?.checks ?? []}
      csrf={checks?.checks.length ? csrfField(c) : undefined}
      token={token}
      checked={extra.checked === true}
      checkMessage={extra.message}
    />,
    extra.status,
  );
}

export const portal = new Hono<PortalEnv>()
  .get("/", async (c) => {
    if (await needAccess(c)) return c.redirect("/board", 303);
    const known = await remembered(c);
    return render(c, <FrontPage csrf={csrfField(c)} {...(known ? { remembered: known } : {})} />);
  })
  .post("/code", ...post, async (c) => {
    const form = CodeForm.safeParse(await c.req.parseBody());
    const front = async (error: string, status: ContentfulStatusCode) => {
      const known = await remembered(c);
      return render(
        c,
        <FrontPage csrf={csrfField(c)} error={error} {...(known ? { remembered: known } : {})} />,
        status,
      );
    };
    if (!form.success) return front("Enter the workshop code.", 400);
    try {
      setAccessCookie(c, await enterCode(form.data.code, portalClient(c)));
      vouchForBrowser(c);
      return c.redirect("/board", 303);
    } catch (err) {
      const e = visible(c, err);
      return front(e.message, statusOf(e.kind));
    }
  })
  .get("/board", async (c) => {
    const access = await needAccess(c);
    if (!access) return c.redirect("/", 303);
    return showBoard(c, access.workshop);
  })
  .post("/claim", ...post, async (c) => {
    const access = await needAccess(c);
    if (!access) return c.redirect("/", 303);
    const form = ClaimForm.safeParse(await c.req.parseBody());
    if (!form.success)
      return showBoard(c, access.workshop, { status: 400, message: "Fill in your name, email and PIN." });
    try {
      if (await byodWorkshop(access.workshop)) {
        // Bring your own device: the student's join page, at their personal link.
        const token = await startOwnMachine(access.workshop, form.data, portalClient(c));
        log.info("join page made", { workshop: access.workshop });
        setLabCookie(c, token);
        return c.redirect(`/l/${token}`, 303);
      }
      const { lab, token } = await claimOrWait(access.workshop, form.data, portalClient(c));
      if (lab) log.info("lab claimed", { workshop: access.workshop, lab });
      setLabCookie(c, token);
      return c.redirect(`/l/${token}`, 303);
    } catch (err) {
      const e = visible(c, err);
      return showBoard(c, access.workshop, {
        status: statusOf(e.kind),
        ...claimErrors(e),
        values: { name: form.data.name, email: form.data.email },
      });
    }
  })
  .get("/l/:token", (c) => showLab(c, c.req.param("token")))
  .post("/l/:token/check", ...post, async (c) => {
    const token = c.req.param("token");
    try {
      const checks = await checkMyWork(token);
      return showLab(c, token, { checks, checked: true });
    } catch (err) {
      const e = visible(c, err);
      if (e.code === "portal.link_gone") return render(c, <LinkGone />, 404);
      if (e.code === "checks.none")
        return render(c, <ErrorPage title="No checks" message={e.message} back={`/l/${token}`} />, 404);
      return showLab(c, token, { message: e.message, status: statusOf(e.kind) });
    }
  })
  .post("/l/:token/leave", ...post, async (c) => {
    const token = c.req.param("token");
    const left = await leaveLine(token);
    if (readLabCookie(c) === token) clearLabCookie(c);
    if (!left) return render(c, <LinkGone />, 404);
    return c.redirect("/", 303);
  })
  .get("/recover", async (c) => {
    const access = await needAccess(c);
    if (!access) return c.redirect("/", 303);
    return render(c, <RecoverPage csrf={csrfField(c)} byod={await byodWorkshop(access.workshop)} />);
  })
  .post("/recover", ...post, async (c) => {
    const access = await needAccess(c);
    if (!access) return c.redirect("/", 303);
    const form = RecoverForm.safeParse(await c.req.parseBody());
    if (!form.success)
      return render(c, <RecoverPage csrf={csrfField(c)} error="Enter your email and PIN." />, 400);
    try {
      const { lab, token } = await recoverLabOrPlace(
        access.workshop,
        form.data.email,
        form.data.pin,
        portalClient(c),
      );
      log.info(lab ? "lab recovered" : "place in line recovered", { workshop: access.workshop, lab });
      setLabCookie(c, token);
      return c.redirect(`/l/${token}`, 303);
    } catch (err) {
      const e = visible(c, err);
      return render(
        c,
        <RecoverPage
          csrf={csrfField(c)}
          error={e.message}
          email={form.data.email}
          byod={await byodWorkshop(access.workshop)}
        />,
        statusOf(e.kind),
      );
    }
  })
  .post("/forget", ...post, (c) => {
    clearLabCookie(c);
    return c.redirect("/", 303);
  })
  .get("/privacy", (c) => c.html(html`<!doctype html>${<PrivacyPage />}`))
  .get("/portal.js", (c) =>
    c.body(portalJs, 200, {
      "Content-Type": "text/javascript; charset=utf-8",
      "Cache-Control": "public, max-age=3600",
    }),
  )
  .get("/portal.css", (c) =>
    c.body(portalCss, 200, {
      "Content-Type": "text/css; charset=utf-8",
      "Cache-Control": "public, max-age=3600",
    }),
  );

// Anything unexpected: an HTML page with the request id, logged without internals reaching the student.
portal.onError((err, c) => {
  const visible = asVisible(err, c);
  if (visible)
    return render(
      c,
      <ErrorPage
        title={visible.kind === "unavailable" ? "Temporarily unavailable" : "That did not work"}
        message={visible.message}
      />,
      answerStatus(c, visible),
    );
  const requestId = c.get("requestId" as never) as string | undefined;
  log.error("unhandled error", { requestId, name: err.name, error: err.message, stack: err.stack });
  return render(
    c,
    <ErrorPage
      title="Something went wrong"
      message={`Please try again in a moment. If it keeps happening, tell your instructor: ${requestId ?? "no request id"}.`}
    />,
    500,
  );
});
