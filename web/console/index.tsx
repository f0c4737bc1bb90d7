// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import { type Context, Hono } from "hono";
import { bodyLimit } from "hono/body-limit";
import { html } from "hono/html";
import type { Child } from "hono/jsx";
import { trimTrailingSlash } from "hono/trailing-slash";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { ZodError, z } from "zod";
import { assertSignInAllowed, recordSignInFailure } from "../../shared/auth/sign-in-limit.ts";
import { CreateTokenInput, createToken, listTokens, revokeToken, TokenId } from "../../shared/auth/tokens.ts";
import { ClaimedRebuildError } from "../../shared/fleet/claimed.ts";
import { ExtendInput, extendWorkshop } from "../../shared/fleet/extend.ts";
import { fleetView } from "../../shared/fleet/fleet-view.ts";
import { notReadyProblem, setStudentAccess } from "../../shared/fleet/open-access.ts";
import { diagnose, startDeploy, startRetry } from "../../shared/fleet/ops.ts";
import { findReceipt } from "../../shared/fleet/receipt.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { planScale, scaleOffer, scaleUp } from "../../shared/fleet/scale.ts";
import {
  getWorkshop,
  listHosts,
  listWorkshops,
  submitWorkshop,
  workshopStatus,
} from "../../shared/fleet/workshops.ts";
import { checksMatrix } from "../../shared/portal/checks.ts";
import { board } from "../../shared/portal/claims.ts";
import {
  type ClaimRow,
  closePortal,
  exportClaims,
  listClaims,
  openPortal,
  type PortalView,
  portalInfo,
  publishPortal,
  reassign,
  releaseLab,
  revokeEmail,
  rotateCode,
  unlockEmail,
} from "../../shared/portal/portal.ts";
import { listQueue, unqueueEmail } from "../../shared/portal/queue.ts";
import { HeldAddress, heldBack, unblock } from "../../shared/portal/rate-limit.ts";
import { swapLab } from "../../shared/portal/swap.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { errorMessage, VisibleError } from "../../shared/runtime/errors.ts";
import { RateLimited } from "../../shared/runtime/failure-counters.ts";
import { log } from "../../shared/runtime/logger.ts";
import { hasControlChars } from "../../shared/runtime/text.ts";
import { issueDetails } from "../../shared/runtime/zod.ts";
import { isStoreUnreachable } from "../../shared/store/unreachable.ts";
import { WORKSHOP_YAML_MAX_BYTES } from "../../shared/workshop/load.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { diagnoseArchive } from "../api/archive.ts";
import { answerStatus, asVisible, statusOf } from "../api/errors.ts";
import type { InstructorAuth } from "../app.ts";
import { clientAddress } from "../client-address.ts";
import { BODY_LIMITS } from "../limits.ts";
import { studentUrl } from "../portal-url.ts";
import { eventsAfter, recentEvents } from "./activity.ts";
import { execAction } from "./exec.tsx";
import { hostList, when } from "./format.ts";
import { consoleJs } from "./script.ts";
import {
  type CurrentSession,
  csrfValid,
  currentSession,
  endSession,
  loginCsrf,
  loginCsrfValid,
  ownOrigin,
  startSession,
} from "./session.ts";
import { consoleCss } from "./style.ts";
import {
  AccessResultPage,
  ActivityRows,
  BoardItems,
  ClaimRows,
  ConfirmPage,
  ErrorPage,
  FleetRows,
  FleetSummary,
  HeldBackSection,
  type LabAccess,
  LoginPage,
  NewWorkshopPage,
  type PortalData,
  PortalPage,
  PortalSummary,
  type ProviderLink,
  portText,
  RebuildConfirm,
  ResultPage,
  type RunHostRow,
  RunList,
  type RunRow,
  RunsPage,
  ScaleConfirmMessage,
  SlideBody,
  SlidePage,
  Summary,
  TokenCreatedPage,
  TokensPage,
  type Viewer,
  WaitingRows,
  WorkshopPage,
  type WorkshopRow,
  WorkshopRows,
  WorkshopsPage,
} from "./views.tsx";

/**
 * The instructor console, mounted at /console. Every page but sign-in needs a session; every POST also the
 * session's CSRF secret and this site's Origin. Handlers stay thin: parse the form, call one shared/ function
 * as the signed-in instructor, then redirect (with a fixed notice key, never data, in the URL) or render.
 * Pages poll `.../live` for server-rendered fragments of their live regions (see script.ts).
 */

type Env = { Variables: { session: CurrentSession } };
type Ctx = Context<Env>;

export interface ConsoleOptions {
  /** OAuth sign-in links shown on the sign-in page (routes of their own, such as /auth/github/start). */
  providers?: ProviderLink[];
}

const Name = z.string().regex(/^[a-z0-9-]{1,40}$/);
const Lab = z.string().regex(/^[a-z0-9](?:[a-z0-9-]{0,47})$/, { error: "expected a lab (host) id" });
const Email = z
  .string()
  .trim()
  .max(200)
  .regex(/^[^\s@]+@[^\s@]+$/, { error: "expected an email address" })
  .refine((s) => !hasControlChars(s), { error: "expected an email address without control characters" });
const Confirm = z.string().max(100).optional();
const LoginForm = z.object({ token: z.string().max(1000), next: z.string().max(300).optional() });
const DeployForm = z.object({
  hosts: z.string().max(4000).default(""),
  force: z.literal("yes").optional(),
  confirm: Confirm,
});
const DiagnoseForm = z.object({ all: z.literal("yes").optional() });
const ExtendForm = z.object({ hours: z.string().max(20) });
const ScaleForm = z.object({ count: z.string().max(20), confirm: Confirm });
const LabForm = z.object({ lab: Lab, confirm: Confirm });
const RevokeForm = z.object({ email: Email, confirm: Confirm });
const ReassignForm = z.object({ lab: Lab, to: Lab, confirm: Confirm });
const ConfirmForm = z.object({ confirm: Confirm });
const UnblockForm = z
  .object({ address: HeldAddress.optional(), all: z.literal("yes").optional() })
  .refine((f) => (f.address === undefined) !== (f.all === undefined), {
    error: "expected an address or all",
    path: ["address"],
  });
/** An event id (a ULID), where a workshop page's live updates continue from. */
const LiveQuery = z.object({
  after: z
    .string()
    .regex(/^[0-9A-HJKMNP-TV-Z]{26}$/, { error: "expected an event id" })
    .optional(),
});
/** The create form's fields, made into createToken's input; its schema checks them. */
const TokenForm = z
  .object({ name: z.string().max(200).default(""), days: z.string().trim().max(20).default("") })
  .transform((f) => ({
    name: f.name,
    // "" is no expiry; anything else must be a whole number, which CreateTokenInput checks.
    ...(f.days === "" ? {} : { expiresInDays: /^\d+$/.test(f.days) ? Number(f.days) : Number.NaN }),
  }))
  .pipe(CreateTokenInput);
const DAYS_ERROR = "expected a whole number of days from 1 to 3650, or nothing";
const RevokeTokenForm = z.object({ id: TokenId, confirm: Confirm });

/** What a redirect's `?notice=` key says on the next page. */
const NOTICES: Record<string, string> = {
  created: "Workshop saved. Press Up to bring it up.",
  updated: "Workshop updated. Labs already built keep their old setup until you deploy them again.",
  up: "Up started: hosts are provisioned, then labs are deployed. This page follows it live.",
  deploy: "Deploy started. This page follows it live.",
  scale:
    "Scale up started: the new hosts are provisioned and their labs deployed; each goes on the board once it is ready. This page follows it live.",
  retry: "Retry started for the failed hosts. This page follows it live.",
  "retry-none": "No host has failed: there is nothing to retry.",
  extended: "Extended: the new teardown time is in the summary above.",
  teardown: "Teardown started: every host is removed, and the portal with its claims.",
  "portal-open": "Claiming is open.",
  "portal-closed": "Claiming is closed. Students who hold a lab keep it.",
  "portal-published": "The board is published: students can enter the code and watch, not claim yet.",
  "code-rotated": "New code made: students must enter it again; personal links keep working.",
  released: "The lab was released and is free again. Its old personal link no longer works.",
  revoked: "The student's lab was released. Its old personal link no longer works.",
  unlocked: "The student's PIN lock was reset.",
  swapped:
    "The student was moved to a new lab: their personal link and cookie now open it. The old lab is being rebuilt.",
  "swapped-no-rebuild":
    "The student was moved to a new lab: their personal link and cookie now open it. The old lab could not be rebuilt now (another run holds the workshop): retry it later.",
  unqueued: "The student was taken out of the waiting line; the others moved up.",
  unblocked: "Let in again: the address's wrong attempts start from zero.",
  "unblock-none": "That address was no longer held back: nothing to lift.",
  "token-revoked": "The token was revoked: anything still using it is refused from now on.",
};

const noticeOf = (c: Context) => NOTICES[c.req.query("notice") ?? ""];

function page(c: Context, node: Child, status: ContentfulStatusCode = 200) {
  return c.html(html`<!doctype html>${node}`, status);
}

/** The server-rendered HTML of a live region, as a string for the JSON endpoints. */
async function fragment(node: Child): Promise<string> {
  return String(await (node as { toString(): string | Promise<string> }).toString());
}

async function live(c: Context, regions: Record<string, Child>, extra: Record<string, unknown> = {}) {
  const out: Record<string, string> = {};
  for (const [id, node] of Object.entries(regions)) out[id] = await fragment(node);
  return c.json({ at: useDeps().clock.now().toISOString(), regions: out, ...extra });
}

/** Who a session's actions are by in activity lists: the sign-in's display name, never its email. */
function actingName(s: CurrentSession): string {
  return s.name ?? (s.via === "token" ? "instructor token" : "instructor");
}

function viewer(c: Ctx): Viewer {
  const s = c.get("session");
  return {
    label: s.name ?? s.email ?? (s.via === "token" ? "instructor token" : s.id),
    csrf: s.csrf,
  };
}

/**
 * Starts a deploy or retry; when it would rebuild labs students have claimed and the instructor has not
 * confirmed yet, answers the page that names each lab and student instead (nothing is started).
 */
async function askBeforeRebuildingClaimed<T>(
  c: Ctx,
  name: string,
  verb: "deploy" | "retry",
  confirmed: boolean,
  how: { fields: Record<string, string>; start: (rebuildClaimed: boolean) => Promise<T> },
): Promise<T | Response> {
  try {
    return await how.start(confirmed);
  } catch (err) {
    if (!(err instanceof ClaimedRebuildError)) throw err;
    return page(
      c,
      <RebuildConfirm viewer={viewer(c)} name={name} verb={verb} claimed={err.claimed} fields={how.fields} />,
    );
  }
}

const now = () => useDeps().clock.now();

/** The :name of the route; anything that cannot be a workshop name is simply not found. */
function nameOf(c: Context): string {
  const name = c.req.param("name");
  if (!Name.safeParse(name).success)
    throw new VisibleError("not_found", "workshop.not_found", "there is no workshop by that name");
  return name as string;
}

/** Only console paths, so the sign-in form cannot be turned into a redirect to another site. */
function safeNext(next: string | undefined): string {
  if (next && /^\/console(\/[\w./-]*)?$/.test(next) && !next.includes("//") && !next.includes(".."))
    return next;
  return "/console";
}

/** The page a failed action goes back to. */
function backFor(path: string): string {
  if (path.startsWith("/console/tokens")) return "/console/tokens";
  const m = /^\/console\/w\/([a-z0-9-]{1,40})(\/portal|\/runs)?/.exec(path);
  return m ? `/console/w/${m[1]}${m[2] ?? ""}` : "/console";
}

const done = (c: Context, name: string, notice: string, tab = "") =>
  c.redirect(`/console/w/${name}${tab}?notice=${notice}`, 303);

function forbidden(c: Context, viewerOf?: Viewer) {
  return page(
    c,
    <ErrorPage
      viewer={viewerOf}
      title="This form could not be accepted"
      message="It was sent from another site, or it belongs to an earlier sign-in. Go back, reload the page and try again."
      back="/console"
    />,
    403,
  );
}

// ------------------------------------------------------------------------------------------ page data

async function workshopRows(): Promise<WorkshopRow[]> {
  const all = await listWorkshops();
  const rows = await Promise.all(
    all.map(async (w) => ({ ...w, claims: w.state === "torn_down" ? 0 : (await listClaims(w.name)).length })),
  );
  return rows.sort((a, b) => a.name.localeCompare(b.name));
}

async function workshopView(name: string) {
  const [s, fleet] = await Promise.all([workshopStatus(name), fleetView(name)]);
  return {
    summary: s,
    hosts: s.hostList,
    fleet,
    activeRun: s.runs.find((r) => r.state === "running"),
    now: now(),
    // Offered whenever the workshop may have a teardown pending; extendWorkshop says so when it has none.
    canExtend: !["draft", "tearing_down", "torn_down"].includes(s.state),
    access: labAccess(s.spec),
  };
}

/**
 * Whether this runtime's provider of the workshop can open its lab UIs (the check setStudentAccess makes):
 * only one with security groups (aws). The ports are accessPorts(spec).world, computed here so the console
 * does not load the EC2 client.
 */
function labAccess(spec: Workshop): LabAccess {
  const p = spec.provider;
  const provider = useDeps().providers[p.type] as { setOpenAccess?: unknown } | undefined;
  if (typeof provider?.setOpenAccess !== "function")
    return { kind: "none", provider: p.type, available: provider !== undefined };
  return {
    kind: "firewall",
    ports: [...new Set(spec.lab.ui_ports.map((u) => u.port))].filter((port) => port !== 22),
    byo: p.type === "aws" && Boolean(p.security_group_ids?.length),
    automatic: p.type === "aws" && p.student_access === "open",
  };
}

const byNumber = (a: string, b: string) => a.localeCompare(b, undefined, { numeric: true });

async function portalData(name: string): Promise<PortalData> {
  await getWorkshop(name);
  const info = await portalInfo(name).catch((err) => {
    if (err instanceof VisibleError && err.code === "portal.not_found") return undefined;
    throw err;
  });
  const [b, claims, hosts, held, waiting, checks] = await Promise.all([
    board(name),
    listClaims(name),
    listHosts(name),
    heldBack(),
    listQueue(name),
    checksMatrix(name),
  ]);
  const taken = new Set(claims.map((c) => c.lab));
  const free = hosts
    .filter((h) => h.state === "ready" && h.health !== "failing" && !taken.has(h.hostId))
    .map((h) => h.hostId)
    .sort(byNumber);
  const failing = Object.fromEntries(
    hosts
      .filter((h) => h.state === "ready" && h.health === "failing")
      .map((h) => [h.hostId, h.healthError ?? null]),
  );
  return { name, info, board: b, claims, waiting, free, failing, heldBack: held, checks };
}

async function claimOf(name: string, lab: string): Promise<ClaimRow> {
  const claim = (await listClaims(name)).find((c) => c.lab === lab);
  if (!claim) throw new VisibleError("not_found", "portal.not_claimed", `lab ${lab} is not claimed`);
  return claim;
}

/**
 * Each run with its hosts: the recorded per-host results of a finished run, the live states of a running
 * one. A host's build time is shown on the run its last deploy started in (host records keep only that one).
 */
async function runRows(name: string): Promise<RunRow[]> {
  const [s, hosts] = await Promise.all([workshopStatus(name), listHosts(name)]);
  const byId = new Map(hosts.map((h) => [h.hostId, h]));
  const at = now().getTime();
  return s.runs.slice(0, 50).map((run) => {
    const start = Date.parse(run.startedAt);
    const end = run.endedAt ? Date.parse(run.endedAt) : at;
    const results: [string, { state: string; error?: string | undefined }][] = run.hosts
      ? Object.entries(run.hosts)
      : run.state === "running" && run.kind !== "teardown"
        ? hosts
            .filter((h) => h.state !== "torn_down" && (!run.selection || run.selection.includes(h.hostId)))
            .map((h) => [h.hostId, { state: h.state, error: h.error }])
        : [];
    const rows: RunHostRow[] = results
      .map(([id, r]) => {
        const h = byId.get(id);
        const began = h?.deployStartedAt ? Date.parse(h.deployStartedAt) : Number.NaN;
        const inRun = began >= start && began <= end;
        const finished = h?.readyAt ? Date.parse(h.readyAt) : run.state === "running" ? at : Number.NaN;
        const seconds = inRun && finished >= began ? (finished - began) / 1000 : undefined;
        return { id, state: r.state, error: r.error, seconds };
      })
      .sort((a, b) => byNumber(a.id, b.id));
    return { run, hosts: rows };
  });
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
    await startSession(c, { id: who.id, via: "token" });
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

  // --- workshops ------------------------------------------------------------------------------------------
  app.get("/", async (c) =>
    page(
      c,
      <WorkshopsPage viewer={viewer(c)} rows={await workshopRows()} now={now()} notice={noticeOf(c)} />,
    ),
  );
  app.get("/live", async (c) =>
    live(c, { "live-workshops": <WorkshopRows rows={await workshopRows()} now={now()} /> }),
  );

  app.get("/new", (c) => page(c, <NewWorkshopPage viewer={viewer(c)} />));
  app.post("/new", async (c) => {
    const body = await c.req.parseBody();
    const file = body.file;
    const pasted = typeof body.yaml === "string" ? body.yaml : "";
    // A chosen file wins; browsers send a text area's lines with CRLF.
    const yaml = (file instanceof File && file.size > 0 ? await file.text() : pasted).replace(/\r\n?/g, "\n");
    const baseDir = typeof body.baseDir === "string" ? body.baseDir.trim() : "";
    const again = (status: ContentfulStatusCode, message: string, errors: VisibleError["details"] = []) =>
      page(
        c,
        <NewWorkshopPage
          viewer={viewer(c)}
          yaml={yaml}
          baseDir={baseDir}
          message={message}
          errors={errors}
        />,
        status,
      );
    if (!yaml.trim()) return again(400, "Paste workshop.yaml or choose the file.");
    if (Buffer.byteLength(yaml) > WORKSHOP_YAML_MAX_BYTES)
      return again(413, "workshop.yaml is too large (at most 1 MiB).");
    if (baseDir && !baseDir.startsWith("/"))
      return again(400, "The folder of workshop.yaml must be an absolute path.", [
        { path: "baseDir", message: "expected an absolute folder, such as /home/me/workshop" },
      ]);
    try {
      const r = await submitWorkshop(yaml, baseDir || undefined);
      return done(c, r.name, r.created ? "created" : "updated");
    } catch (err) {
      if (!(err instanceof VisibleError)) throw err;
      return again(statusOf(err.kind), err.message, err.details);
    }
  });

  // --- one workshop: hosts and fleet actions ----------------------------------------------------------------
  app.get("/w/:name", async (c) => {
    const name = nameOf(c);
    const [v, activity] = await Promise.all([workshopView(name), recentEvents(name)]);
    const scale = v.summary.state === "draft" ? undefined : await scaleOffer(name);
    // The teardown receipt, once the workshop is torn down (web/console/views/receipt.tsx).
    const receipt = v.summary.state === "torn_down" ? await findReceipt(name) : undefined;
    return page(
      c,
      <WorkshopPage
        viewer={viewer(c)}
        {...v}
        scale={scale}
        activity={activity}
        notice={noticeOf(c)}
        receipt={receipt}
      />,
    );
  });
  // The live regions, and the events after the page's newest (`?after=`): the script adds their rows at
  // the top of the activity list and asks from the returned `last` next time.
  app.get("/w/:name/live", async (c) => {
    const { after } = LiveQuery.parse(c.req.query());
    const name = nameOf(c);
    const [v, news] = await Promise.all([workshopView(name), eventsAfter(name, after)]);
    const newestFirst = [...news.events].reverse();
    return live(
      c,
      {
        "live-summary": <Summary summary={v.summary} activeRun={v.activeRun} now={v.now} />,
        "live-fleet": <FleetSummary fleet={v.fleet} />,
        "live-hosts": <FleetRows fleet={v.fleet} />,
      },
      {
        activity: {
          events: news.events,
          last: news.last,
          html: await fragment(<ActivityRows events={newestFirst} placeholder={false} />),
        },
      },
    );
  });
  app.post("/w/:name/up", async (c) => {
    const name = nameOf(c);
    await startRun(name, "up");
    return done(c, name, "up");
  });
  app.post("/w/:name/deploy", async (c) => {
    const name = nameOf(c);
    const f = DeployForm.parse(await c.req.parseBody());
    const hosts = hostList(f.hosts);
    const force = f.force === "yes";
    const run = await askBeforeRebuildingClaimed(c, name, "deploy", f.confirm === "yes", {
      fields: { hosts: f.hosts, ...(force ? { force: "yes" } : {}) },
      start: (rebuildClaimed) => startDeploy(name, hosts.length ? { hosts } : {}, { force, rebuildClaimed }),
    });
    return run instanceof Response ? run : done(c, name, "deploy");
  });
  // --- Run a command on the selected hosts (labfleet exec): web/console/exec.tsx -----------------------
  app.post("/w/:name/exec", async (c) => execAction(c, nameOf(c), viewer(c), (node) => page(c, node)));
  app.post("/w/:name/retry", async (c) => {
    const name = nameOf(c);
    const f = ConfirmForm.parse(await c.req.parseBody());
    const r = await askBeforeRebuildingClaimed(c, name, "retry", f.confirm === "yes", {
      fields: {},
      start: (rebuildClaimed) => startRetry(name, {}, { rebuildClaimed }),
    });
    return r instanceof Response ? r : done(c, name, r.run ? "retry" : "retry-none");
  });
  app.post("/w/:name/diagnose", async (c) => {
    const name = nameOf(c);
    const f = DiagnoseForm.parse(await c.req.parseBody());
    const d = await diagnose(name, {}, { allSelected: f.all === "yes" });
    // One part only (a download cannot ask for the next): its index.json says how to collect the rest.
    const part = await diagnoseArchive(d);
    return c.body(new Uint8Array(part.archive), 200, {
      "Content-Type": "application/gzip",
      "Content-Disposition": `attachment; filename="${part.name}.tar.gz"`,
      ...(part.next ? { "X-Labfleet-Diagnose-Next": part.next } : {}),
    });
  });
  // Scale up: the form's count, confirmed on a page that says what it adds (and who is waiting), then started.
  app.post("/w/:name/scale", async (c) => {
    const name = nameOf(c);
    const f = ScaleForm.parse(await c.req.parseBody());
    const count = /^\s*\d{1,3}\s*$/.test(f.count) ? Number(f.count) : Number.NaN;
    if (f.confirm !== "yes") {
      const plan = await planScale(name, count);
      const { provider } = await scaleOffer(name);
      const n = plan.add.length;
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Scale ${name} up to ${plan.to} hosts?`}
          message={<ScaleConfirmMessage plan={plan} provider={provider} />}
          action={`/console/w/${name}/scale`}
          fields={{ count: String(plan.to) }}
          button={`Add ${n} ${n === 1 ? "lab" : "labs"}`}
          buttonClass=""
          back={`/console/w/${name}`}
        />,
      );
    }
    await scaleUp(name, count);
    return done(c, name, "scale");
  });
  app.post("/w/:name/extend", async (c) => {
    const name = nameOf(c);
    const f = ExtendForm.parse(await c.req.parseBody());
    const { hours } = ExtendInput.parse({ hours: f.hours.trim() === "" ? Number.NaN : Number(f.hours) });
    const r = await extendWorkshop(name, hours);
    if (r.ok) return done(c, name, "extended");
    const problems = [
      ...(r.schedule.result === "error" ? [`schedule: ${r.schedule.detail ?? "not moved"}`] : []),
      ...(r.provider.result === "error" ? [`provider: ${r.provider.detail ?? "not moved"}`] : []),
      ...r.hosts.filter((h) => h.result === "error").map((h) => `${h.hostId}: ${h.detail ?? "not moved"}`),
    ];
    return page(
      c,
      <ResultPage viewer={viewer(c)} title="Extended, with problems" back={`/console/w/${name}`}>
        <p>
          The teardown now happens at {r.expiry}, but these parts still end at the old time (
          {r.previousExpiry}):
        </p>
        <ul>
          {problems.map((p) => (
            <li>{p}</li>
          ))}
        </ul>
      </ResultPage>,
      502,
    );
  });
  app.get("/w/:name/teardown", async (c) => {
    const name = nameOf(c);
    const s = await workshopStatus(name);
    return page(c, <TeardownConfirm c={c} name={name} hosts={s.hosts.total} />);
  });
  app.post("/w/:name/teardown", async (c) => {
    const name = nameOf(c);
    const f = ConfirmForm.parse(await c.req.parseBody());
    if ((f.confirm ?? "").trim() !== name) {
      const s = await workshopStatus(name);
      return page(
        c,
        <TeardownConfirm
          c={c}
          name={name}
          hosts={s.hosts.total}
          error={`That is not the workshop's name: type ${name} exactly.`}
        />,
        400,
      );
    }
    await startRun(name, "teardown");
    return done(c, name, "teardown");
  });

  // --- student access to the lab UIs (labfleet open-access [--close]) -----------------------------------
  // Opening puts the lab UI ports on the internet: a confirmation page first, which already refuses while a
  // host is not ready (setStudentAccess checks again). The provider's message is the answer (with the
  // workshop's own security groups, what to open by hand), so it is rendered, not redirected to a notice.
  app.post("/w/:name/open-access", async (c) => {
    const name = nameOf(c);
    const f = ConfirmForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes") {
      const access = labAccess((await getWorkshop(name)).spec as Workshop);
      // Without a firewall to open, setStudentAccess below gives the reason.
      if (access.kind === "firewall") {
        const hosts = await listHosts(name);
        const problem = notReadyProblem(name, hosts);
        if (problem) return accessRefused(c, name, true, problem);
        const live = hosts.filter((h) => h.state !== "torn_down").length;
        return page(c, <OpenAccessConfirm c={c} name={name} access={access} hosts={live} />);
      }
    }
    return changeAccess(c, name, true);
  });
  app.post("/w/:name/close-access", async (c) => changeAccess(c, nameOf(c), false));

  // --- the claim portal -------------------------------------------------------------------------------------
  app.get("/w/:name/portal", async (c) =>
    page(c, <PortalPage viewer={viewer(c)} data={await portalData(nameOf(c))} notice={noticeOf(c)} />),
  );
  app.get("/w/:name/portal/live", async (c) => {
    const data = await portalData(nameOf(c));
    return live(c, {
      "live-portal": <PortalSummary data={data} />,
      "live-board": <BoardItems labs={data.board.labs} />,
      "live-claims": <ClaimRows data={data} csrf={viewer(c).csrf} />,
      "live-waiting": <WaitingRows data={data} csrf={viewer(c).csrf} />,
      "live-held": <HeldBackSection data={data} csrf={viewer(c).csrf} />,
    });
  });
  // The slide: the portal's address as students reach it (the portal's own URL when it has one, else this
  // site's, which serves the portal).
  const slideUrl = (c: Context, info: PortalView | undefined) => studentUrl(c, info?.path ?? "/");
  const slideInfo = async (name: string) => (await portalData(name)).info;
  app.get("/w/:name/portal/slide", async (c) => {
    const name = nameOf(c);
    const info = await slideInfo(name);
    return page(c, <SlidePage viewer={viewer(c)} name={name} url={slideUrl(c, info)} info={info} />);
  });
  app.get("/w/:name/portal/slide/live", async (c) => {
    const info = await slideInfo(nameOf(c));
    return live(c, { "live-slide": <SlideBody url={slideUrl(c, info)} info={info} /> });
  });
  app.post("/w/:name/portal/open", async (c) => {
    const name = nameOf(c);
    await openPortal(name);
    return done(c, name, "portal-open", "/portal");
  });
  app.post("/w/:name/portal/close", async (c) => {
    const name = nameOf(c);
    await closePortal(name);
    return done(c, name, "portal-closed", "/portal");
  });
  app.post("/w/:name/portal/publish", async (c) => {
    const name = nameOf(c);
    await publishPortal(name);
    return done(c, name, "portal-published", "/portal");
  });
  app.post("/w/:name/portal/rotate-code", async (c) => {
    const name = nameOf(c);
    const f = ConfirmForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes")
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`New code for ${name}?`}
          message={
            <p>
              The current code stops working: every student on the board must type the new one. Students who
              claimed a lab keep it, and their personal links keep working.
            </p>
          }
          action={`/console/w/${name}/portal/rotate-code`}
          button="Make a new code"
          back={`/console/w/${name}/portal`}
        />,
      );
    await rotateCode(name);
    return done(c, name, "code-rotated", "/portal");
  });
  app.post("/w/:name/portal/release", async (c) => {
    const name = nameOf(c);
    const f = LabForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes") {
      const claim = await claimOf(name, f.lab);
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Release ${f.lab}?`}
          message={
            <p>
              {claim.name} loses lab {f.lab}: their personal link stops working, and the lab is free for
              someone else to claim. The lab itself is not rebuilt.
            </p>
          }
          action={`/console/w/${name}/portal/release`}
          fields={{ lab: f.lab }}
          button={`Release ${f.lab}`}
          back={`/console/w/${name}/portal`}
        />,
      );
    }
    await releaseLab(name, f.lab);
    return done(c, name, "released", "/portal");
  });
  app.post("/w/:name/portal/revoke", async (c) => {
    const name = nameOf(c);
    const f = RevokeForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes")
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title="Revoke this student's lab?"
          message={
            <p>
              The lab claimed with {f.email} is released: its personal link stops working and the lab is free
              again.
            </p>
          }
          action={`/console/w/${name}/portal/revoke`}
          fields={{ email: f.email }}
          button="Revoke"
          back={`/console/w/${name}/portal`}
        />,
      );
    await revokeEmail(name, f.email);
    return done(c, name, "revoked", "/portal");
  });
  app.post("/w/:name/portal/swap", async (c) => {
    const name = nameOf(c);
    const f = LabForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes") {
      const [claim, data] = await Promise.all([claimOf(name, f.lab), portalData(name)]);
      const to = data.free.at(-1);
      const why = data.failing[f.lab];
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Swap ${claim.name}'s lab?`}
          message={
            <>
              {f.lab in data.failing ? (
                <p>
                  Lab {f.lab} is failing its health check{why ? ":" : "."}
                  {why ? <pre class="error">{why}</pre> : null}
                </p>
              ) : null}
              <p>
                {to
                  ? `${claim.name} moves from ${f.lab} to ${to}, the highest-numbered free ready lab. `
                  : `No lab is free right now: the swap will be refused and nothing changes. `}
                Their personal link and cookie stay the same and open the new lab; nothing on the old lab is
                kept. Lab {f.lab} is then rebuilt and returns to the pool when it is ready.
              </p>
            </>
          }
          action={`/console/w/${name}/portal/swap`}
          fields={{ lab: f.lab }}
          button={to ? `Swap to ${to}` : "Swap"}
          back={`/console/w/${name}/portal`}
        />,
      );
    }
    const r = await swapLab(name, { hostId: f.lab });
    return done(c, name, r.rebuildRunId ? "swapped" : "swapped-no-rebuild", "/portal");
  });

  app.post("/w/:name/portal/unqueue", async (c) => {
    const name = nameOf(c);
    const f = RevokeForm.parse(await c.req.parseBody());
    await unqueueEmail(name, f.email);
    return done(c, name, "unqueued", "/portal");
  });
  app.post("/w/:name/portal/unlock", async (c) => {
    const name = nameOf(c);
    const f = LabForm.parse(await c.req.parseBody());
    await unlockEmail(name, (await claimOf(name, f.lab)).email);
    return done(c, name, "unlocked", "/portal");
  });
  app.post("/w/:name/portal/unblock", async (c) => {
    const name = nameOf(c);
    await getWorkshop(name);
    const f = UnblockForm.parse(await c.req.parseBody());
    const { addresses } = await unblock(f.all ? { all: true } : { address: f.address ?? "" });
    return done(c, name, addresses.length ? "unblocked" : "unblock-none", "/portal");
  });
  app.post("/w/:name/portal/reassign", async (c) => {
    const name = nameOf(c);
    const f = ReassignForm.parse(await c.req.parseBody());
    const claim = await claimOf(name, f.lab);
    const back = `/console/w/${name}/portal`;
    if (f.confirm !== "yes")
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Move ${claim.name} to ${f.to}?`}
          message={
            <p>
              {claim.name} moves from {f.lab} to {f.to} and keeps their PIN. Their old personal link stops
              working; you get the new one to give them.
            </p>
          }
          action={`/console/w/${name}/portal/reassign`}
          fields={{ lab: f.lab, to: f.to }}
          button={`Move to ${f.to}`}
          back={back}
        />,
      );
    const r = await reassign(name, claim.email, f.to);
    const link = `${new URL(c.req.url).origin}/l/${r.token}`;
    return page(
      c,
      <ResultPage viewer={viewer(c)} title={`${claim.name} now has ${r.lab}`} back={back}>
        <p>Give them their new personal link (it is shown only here, once):</p>
        <p>
          <code id="new-link">{link}</code>
        </p>
      </ResultPage>,
    );
  });
  app.get("/w/:name/portal/export", async (c) => {
    const name = nameOf(c);
    return c.body(await exportClaims(name), 200, {
      "Content-Type": "text/csv; charset=utf-8",
      "Content-Disposition": `attachment; filename="${name}-claims.csv"`,
    });
  });

  // --- runs ---------------------------------------------------------------------------------------------------
  app.get("/w/:name/runs", async (c) => {
    const name = nameOf(c);
    return page(c, <RunsPage viewer={viewer(c)} name={name} runs={await runRows(name)} />);
  });
  app.get("/w/:name/runs/live", async (c) =>
    live(c, { "live-runs": <RunList runs={await runRows(nameOf(c))} /> }),
  );

  // --- API tokens -----------------------------------------------------------------------------------------
  const tokensPage = async (c: Ctx, extra: Partial<Parameters<typeof TokensPage>[0]> = {}) =>
    page(
      c,
      <TokensPage viewer={viewer(c)} tokens={await listTokens()} notice={noticeOf(c)} {...extra} />,
      extra.errors ? 400 : 200,
    );
  app.get("/tokens", (c) => tokensPage(c));
  // The new token is in this response only: never in a URL (no redirect), a log or a cache (no-store).
  app.post("/tokens", async (c) => {
    const body = await c.req.parseBody();
    const field = (k: string) => (typeof body[k] === "string" ? (body[k] as string) : "");
    const form = TokenForm.safeParse({ name: field("name"), days: field("days") });
    if (!form.success) {
      const errors: { name?: string; days?: string } = {};
      for (const d of issueDetails(form.error.issues)) {
        if (d.path === "expiresInDays") errors.days ??= DAYS_ERROR;
        else errors.name ??= d.message;
      }
      return tokensPage(c, { form: { name: field("name"), days: field("days") }, errors });
    }
    const created = await createToken(form.data);
    return page(
      c,
      <TokenCreatedPage viewer={viewer(c)} token={created.token} info={created.info} url={ownOrigin(c)} />,
      201,
    );
  });
  app.post("/tokens/revoke", async (c) => {
    const f = RevokeTokenForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes") {
      const t = (await listTokens()).find((x) => x.id === f.id);
      if (!t)
        throw new VisibleError("not_found", "token.not_found", "there is no such token (revoked already?)");
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Revoke the token ${t.name}?`}
          message={
            <p>
              The token of {t.owner}
              {t.mine ? " (you)" : ""}, created {when(t.createdAt)}, stops working at once: a CLI signed in
              with it, or a script that sends it, is refused. This cannot be undone.
            </p>
          }
          action="/console/tokens/revoke"
          fields={{ id: t.id }}
          button={`Revoke ${t.name}`}
          back="/console/tokens"
        />,
      );
    }
    await revokeToken(f.id);
    return c.redirect("/console/tokens?notice=token-revoked", 303);
  });

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

function TeardownConfirm(props: { c: Ctx; name: string; hosts: number; error?: string }) {
  const { c, name } = props;
  return (
    <ConfirmPage
      viewer={viewer(c)}
      title={`Tear down ${name}?`}
      message={
        <p>
          All {props.hosts} hosts are removed with their labs, and the claim portal with every claim and
          personal link. Students lose their labs. This cannot be undone.
        </p>
      }
      action={`/console/w/${name}/teardown`}
      typed={name}
      button={`Tear down ${name}`}
      back={`/console/w/${name}`}
      error={props.error}
    />
  );
}

/** Opens or closes the lab UIs, answering with the provider's message or the refusal (never a 500). */
async function changeAccess(c: Ctx, name: string, open: boolean) {
  try {
    const view = await setStudentAccess(name, open);
    return page(c, <AccessResultPage viewer={viewer(c)} view={view} />);
  } catch (err) {
    return accessRefused(c, name, open, err);
  }
}

function accessRefused(c: Ctx, name: string, open: boolean, err: unknown) {
  if (isStoreUnreachable(err)) throw err; // not the provider's doing: the error page says so, with a 503
  const verb = open ? "opened" : "closed";
  const back = `/console/w/${name}`;
  if (err instanceof VisibleError) {
    const notReady = err.code === "open_access.not_ready";
    return page(
      c,
      <ErrorPage
        viewer={viewer(c)}
        title={`Lab access was not ${verb}`}
        message={err.message}
        // A host list: student-02: expected ready, got deploying (phase build).
        details={err.details.map((d) => ({ ...d, path: d.path.replace(/^hosts\./, "") }))}
        hint={
          notReady
            ? "Open lab access once every lab is ready: the Hosts table follows them live, and Retry failed hosts rebuilds the ones that failed."
            : undefined
        }
        back={back}
        backLabel={`Back to ${name}`}
      />,
      statusOf(err.kind),
    );
  }
  // The provider's call failed (an EC2 error, say): said as such, never an internal error page.
  const message = errorMessage(err);
  log.warn(`console: lab access not ${verb}`, { workshop: name, error: message });
  return page(
    c,
    <ErrorPage
      viewer={viewer(c)}
      title={`Lab access was not ${verb}`}
      message={`The provider could not change the security group: ${message}`}
      hint="Part of the change may have happened before the error. Trying again is safe: both actions leave the rules as asked whatever they were."
      back={back}
      backLabel={`Back to ${name}`}
    />,
    502,
  );
}

function OpenAccessConfirm(props: {
  c: Ctx;
  name: string;
  access: Extract<LabAccess, { kind: "firewall" }>;
  hosts: number;
}) {
  const { name, access } = props;
  const ready = props.hosts === 1 ? "The host is ready." : `All ${props.hosts} hosts are ready.`;
  return (
    <ConfirmPage
      viewer={viewer(props.c)}
      title={`Open the lab UIs of ${name} to the internet?`}
      message={
        access.byo ? (
          <p>
            {ready} This workshop uses its own security groups (provider.security_group_ids): labfleet changes
            none of them, and the next page says what to open by hand ({portText(access.ports)} from 0.0.0.0/0
            and ::/0).
          </p>
        ) : (
          <p>
            {ready} {props.hosts === 1 ? "Its" : "Their"} lab UIs ({portText(access.ports)}) become reachable
            from anywhere on the internet (0.0.0.0/0 and ::/0), by anyone who has a host's address, not only
            your students. Port 22 is never opened. Close lab access when the workshop ends.
          </p>
        )
      }
      action={`/console/w/${name}/open-access`}
      button="Open lab access"
      back={`/console/w/${name}`}
    />
  );
}
