import { createRoute, z } from "@hono/zod-openapi";
import { type Context, Hono } from "hono";
import { html, raw } from "hono/html";
import { studentsWaiting } from "../../shared/fleet/scale.ts";
import { getWorkshop, hostAccess, workshopStatus } from "../../shared/fleet/workshops.ts";
import { type AccessPair, accessView } from "../../shared/portal/access-view.ts";
import { checksMatrix } from "../../shared/portal/checks.ts";
import {
  checkAdminLink,
  closePortal,
  exportClaims,
  inviteRoster,
  newAdminLink,
  openPortal,
  portalInfo,
  publishPortal,
  reassign,
  releaseLab,
  revokeEmail,
  rotateCode,
  unlockEmail,
} from "../../shared/portal/portal.ts";
import { portalStatus } from "../../shared/portal/portal-status.ts";
import { listQueue, unqueueEmail } from "../../shared/portal/queue.ts";
import { HeldAddress, heldBack, unblock } from "../../shared/portal/rate-limit.ts";
import { scaleDownUnclaimed } from "../../shared/portal/scale-down.ts";
import { swapLab } from "../../shared/portal/swap.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { hasControlChars } from "../../shared/runtime/text.ts";
import { MAX_WORKSHOP_HOSTS } from "../../shared/workshop/limits.ts";
import { portalBase, studentUrl } from "../portal-url.ts";
import { apiRouter, errors, json, jsonBody, Name, NameParams, readJson } from "./schemas.ts";

const Lab = z
  .string()
  .regex(/^[a-z0-9](?:[a-z0-9-]{0,47})$/, { error: "expected a lab (host) id" })
  .meta({ description: "a lab (host) id", example: "student-01" });
const Email = z
  .string()
  .trim()
  .max(200)
  .regex(/^[^\s@]+@[^\s@]+$/, { error: "expected an email address" })
  .refine((s) => !hasControlChars(s), { error: "expected an email address without control characters" })
  .meta({ description: "the student's email (any case)", example: "ada@example.com" });
const ReleaseBody = z.strictObject({ lab: Lab });
const EmailBody = z.strictObject({ email: Email });
const InviteBody = z.strictObject({
  csv: z
    .string()
    .min(1, { error: "expected the roster CSV: name,email[,host_id]" })
    .max(1024 * 1024)
    .meta({
      description: "the roster: one `name,email[,host_id]` line per student, an optional header line",
      example: "name,email\nAda Lovelace,ada@example.com\n",
    }),
});
const ScaleDownBody = z.strictObject({
  unclaimed: z
    .union([z.literal("all"), z.number().int().min(1).max(MAX_WORKSHOP_HOSTS)], {
      error: 'expected a number of labs, or "all"',
    })
    .meta({ description: 'how many unclaimed labs to remove, or "all"' }),
  force: z.boolean().default(false).meta({ description: "take claimed labs when too few are unclaimed" }),
});

const ReassignBody = z.strictObject({
  email: Email,
  lab: Lab.meta({ description: "the (free, ready) lab to move to" }),
});

const SwapBody = z
  .strictObject({
    email: Email.optional().meta({ description: "the student to move (or give lab)" }),
    lab: Lab.optional().meta({ description: "the claimed lab to move its student off (or give email)" }),
  })
  .refine((b) => (b.email === undefined) !== (b.lab === undefined), {
    error: "expected either email or lab",
    path: ["email"],
  });
const SwapAnswer = z.object({
  from: z.string().meta({ example: "student-02" }),
  to: z.string().meta({ description: "the lab the student now has", example: "student-05" }),
  name: z.string().meta({ description: "the student's name" }),
  rebuildRunId: z.string().nullable().meta({ description: "the run rebuilding the old lab" }),
  rebuild: z.string().meta({ description: "what happens to the old lab" }),
});
const LabHealth = z
  .object({
    lab: z.string(),
    health: z.enum(["ok", "failing"]),
    checkedAt: z.string().nullable(),
    error: z.string().nullable().meta({ description: "the last failed check's output (secrets redacted)" }),
  })
  .meta({ id: "LabHealth" });

const PortalView = z
  .object({
    workshop: z.string(),
    state: z.enum(["published", "open", "closed"]).meta({
      description: "published: the board is live but nobody can claim; open: claiming; closed: neither",
    }),
    mode: z.string().meta({ description: "open, roster or both (from workshop.yaml)" }),
    code: z.string().meta({ description: "the workshop code students type", example: "KQZTRW" }),
    codeVersion: z.number().int(),
    path: z.string().meta({ description: "where students go, on the portal's URL", example: "/" }),
    url: z.string().optional().meta({
      description:
        "where students go, in full, when the portal has a URL of its own (in the cloud: its HTTP API's custom domain or execute-api URL); without it, `path` is on this API's URL",
      example: "https://labs.example.com/",
    }),
  })
  .meta({ id: "Portal" });
const BoardLab = z
  .object({
    lab: z.string(),
    status: z.enum(["free", "claimed", "building", "failed", "unavailable"]),
    firstName: z.string().optional().meta({ description: "the claimant's first name only" }),
  })
  .meta({ id: "BoardLab" });
const ClaimRow = z
  .object({
    lab: z.string(),
    name: z.string(),
    email: z.string(),
    how: z.string().meta({ description: "how the lab was claimed: open, roster, reassign, ..." }),
    claimedAt: z.string(),
    firstOpenedAt: z.string().nullable(),
    locked: z.boolean().meta({ description: "too many wrong PINs: `unlock` lets the student in again" }),
  })
  .meta({ id: "Claim" });
const WaitingRow = z
  .object({
    number: z.number().int().meta({ description: "1 for the first in line" }),
    name: z.string(),
    email: z.string(),
    joinedAt: z.string().meta({ description: "when the student joined the line (ISO 8601)" }),
    waitedSeconds: z.number().int(),
  })
  .meta({ id: "Waiting" });
const Hold = z
  .object({
    address: z.string().meta({ description: "the network address held back", example: "198.51.100.7" }),
    scope: z.enum(["address", "new_browsers", "browser"]).meta({
      description:
        "address: everything from it; new_browsers: browsers from it that never entered a right code (the students who did go on); browser: one browser at it",
    }),
    browser: z.string().optional().meta({ description: "a browser hold: the end of the browser's id" }),
    count: z.number().int().meta({ description: "failures counted (this window and the one before)" }),
    limit: z.number().int().meta({ description: "the limit they reached" }),
    liftsAt: z.string().meta({ description: "when it lifts by itself if nothing more fails (ISO 8601)" }),
  })
  .meta({ id: "Hold" });
const HeldBack = z
  .object({
    holds: z.array(Hold),
    portalWide: z.object({
      wrongCodes: z.number().int(),
      limit: z.number().int(),
      active: z.boolean().meta({
        description: "past the limit: clients that already sent a few wrong attempts wait too",
      }),
      liftsAt: z.string().nullable(),
    }),
  })
  .meta({
    id: "HeldBack",
    description:
      "Who the portal's rate limits hold back now. The limits are the whole portal's, across workshops.",
  });
const Address = HeldAddress.meta({
  description: "the address, as `portal status` shows it",
  example: "198.51.100.7",
});
const UnblockBody = z
  .strictObject({
    address: Address.optional(),
    all: z.literal(true, { error: "expected true" }).optional().meta({ description: "every held address" }),
  })
  .refine((b) => (b.address === undefined) !== (b.all === undefined), {
    error: "expected either address or all: true",
    path: ["address"],
  });
const LabAnswer = z.object({ lab: z.string() });
const LinkPath = z
  .string()
  .meta({ description: "a personal link: append to the portal's URL", example: "/l/3q2-..." });

const tags = ["portal"];
const portalAction = (operationId: string, path: string, summary: string, description: string) =>
  createRoute({
    method: "post",
    operationId,
    path,
    tags,
    summary,
    description,
    request: { params: NameParams },
    responses: { 200: json(PortalView, "The portal, with its code."), ...errors(400, 401, 404) },
  });

const openRoute = portalAction(
  "openPortal",
  "/{name}/portal/open",
  "Open claiming",
  "Creates the portal (and its code) if needed and lets students claim labs.",
);
const closeRoute = portalAction(
  "closePortal",
  "/{name}/portal/close",
  "Close claiming",
  "Nobody can claim; claimed labs and personal links keep working.",
);
const publishRoute = portalAction(
  "publishPortal",
  "/{name}/portal/publish",
  "Publish the board",
  "The board goes live before claiming opens; a portal already open or closed is left as it is.",
);
const rotateRoute = portalAction(
  "rotateCode",
  "/{name}/portal/rotate-code",
  "Rotate the workshop code",
  "A new code: everyone on the board enters it again; personal links keep working.",
);

const infoRoute = createRoute({
  method: "get",
  operationId: "getPortalInfo",
  path: "/{name}/portal/info",
  tags,
  summary: "Read the portal with its code",
  description: "What goes on the slide: where to go and the code to type.",
  request: { params: NameParams },
  responses: { 200: json(PortalView, "The portal, with its code."), ...errors(400, 401, 404) },
});

const statusRoute = createRoute({
  method: "get",
  operationId: "getPortalStatus",
  path: "/{name}/portal/status",
  tags,
  summary: "Read the portal, its board and its claims",
  description:
    "The portal without its code, every lab on the board, every claim with its email, the waiting line in order, the spares kept, and who the rate limits hold back.",
  request: { params: NameParams },
  responses: {
    200: json(
      z.object({
        portal: PortalView.omit({ code: true }).extend({
          open: z.boolean().meta({ description: "the claim form is offered now" }),
        }),
        labs: z.array(BoardLab),
        claims: z.array(ClaimRow),
        health: z.array(LabHealth).meta({ description: "the labs checked while in use (lab.health)" }),
        waiting: z.array(WaitingRow).meta({ description: "students waiting for a lab, first in line first" }),
        spares: z.number().int().meta({ description: "free ready labs kept off the board (portal.spares)" }),
        heldBack: HeldBack,
      }),
      "The portal's state.",
    ),
    ...errors(400, 401, 404),
  },
});

const exportRoute = createRoute({
  method: "get",
  operationId: "exportClaims",
  path: "/{name}/portal/export",
  tags,
  summary: "Export the claims as CSV",
  description: "A CSV attachment (`NAME-claims.csv`) with one line per claim.",
  request: { params: NameParams },
  responses: {
    200: {
      description: "The claims, as CSV.",
      content: { "text/csv": { schema: z.string().meta({ example: "lab,name,email,...\n" }) } },
    },
    ...errors(400, 401, 404),
  },
});

const adminLinkRoute = createRoute({
  method: "post",
  operationId: "createAdminLink",
  path: "/{name}/portal/admin-link",
  tags,
  summary: "Make a new instructor link",
  description:
    "A secret link to a read-only page of every lab, claimant and credential. The previous link stops working.",
  request: { params: NameParams },
  responses: {
    200: json(
      z.object({
        token: z.string(),
        path: z.string().meta({ example: "/admin/demo/3q2-..." }),
      }),
      "The new link.",
    ),
    ...errors(400, 401, 404),
  },
});

const releaseRoute = createRoute({
  method: "post",
  operationId: "releaseLab",
  path: "/{name}/portal/release",
  tags,
  summary: "Release a claimed lab",
  description: "The lab becomes free again; its personal link stops working.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(ReleaseBody, "The lab to release.", true) },
  responses: { 200: json(LabAnswer, "The released lab."), ...errors(400, 401, 404) },
});

const revokeRoute = createRoute({
  method: "post",
  operationId: "revokeClaim",
  path: "/{name}/portal/revoke",
  tags,
  summary: "Revoke a student's claim",
  description: "Frees the lab claimed with this email.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(EmailBody, "The student's email.", true) },
  responses: { 200: json(LabAnswer, "The freed lab."), ...errors(400, 401, 404) },
});

const reassignRoute = createRoute({
  method: "post",
  operationId: "reassignStudent",
  path: "/{name}/portal/reassign",
  tags,
  summary: "Move a student to another lab",
  description: "The student keeps their PIN; their old personal link stops, the new one is returned.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(ReassignBody, "The student and the lab.", true) },
  responses: {
    200: json(z.object({ lab: z.string(), token: z.string(), path: LinkPath }), "The new claim."),
    ...errors(400, 401, 404, 409),
  },
});

const swapRoute = createRoute({
  method: "post",
  operationId: "swapLab",
  path: "/{name}/portal/swap",
  tags,
  summary: "Swap a student's lab, keeping their link",
  description:
    "Moves the student (by email, or by their lab) to the highest-numbered free ready lab that is not failing its health check (a spare when there is one). Their personal link, PIN and lab cookie stay the same and now open the new lab. The old lab is marked failed and rebuilt by a retry run. 409 `portal.no_lab_free` when no lab is free: nothing is changed.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(SwapBody, "The student or their lab.", true) },
  responses: { 200: json(SwapAnswer, "The swap."), ...errors(400, 401, 404, 409) },
});

const unlockRoute = createRoute({
  method: "post",
  operationId: "unlockStudent",
  path: "/{name}/portal/unlock",
  tags,
  summary: "Unlock a student locked out by wrong PINs",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(EmailBody, "The student's email.", true) },
  responses: { 200: json(z.object({ unlocked: z.boolean() }), "Unlocked."), ...errors(400, 401, 404) },
});

const unqueueRoute = createRoute({
  method: "post",
  operationId: "unqueueStudent",
  path: "/{name}/portal/unqueue",
  tags,
  summary: "Take a student out of the waiting line",
  description: "Their place, their email's record and their personal link go; the others move up.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(EmailBody, "The student's email.", true) },
  responses: { 200: json(z.object({ removed: z.boolean() }), "Removed."), ...errors(400, 401, 404) },
});

const unblockRoute = createRoute({
  method: "post",
  operationId: "unblockAddress",
  path: "/{name}/portal/unblock",
  tags,
  summary: "Let a held-back address in again",
  description:
    "Lifts the rate limits' holds on one address (its own counters and its held browsers start from zero) or on every held address. The limits are the whole portal's: this lifts them for every workshop.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(UnblockBody, "The address, or all.", true) },
  responses: {
    200: json(
      z.object({ addresses: z.array(z.string()).meta({ description: "the addresses that were held back" }) }),
      "The holds are lifted.",
    ),
    ...errors(400, 401, 404),
  },
});

const inviteRoute = createRoute({
  method: "post",
  operationId: "inviteRoster",
  path: "/{name}/portal/invite",
  tags,
  summary: "Invite a roster",
  description:
    'Reserves a lab for each student of the roster (portal.mode "roster" or "both") and returns their personal links.',
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(InviteBody, "The roster.", true) },
  responses: {
    200: json(
      z.object({
        invites: z.array(z.object({ name: z.string(), email: z.string(), lab: z.string(), path: LinkPath })),
        skipped: z.array(z.object({ email: z.string(), reason: z.string() })),
      }),
      "The invitations, and the rows that got none.",
    ),
    ...errors(400, 401, 404, 409),
  },
});

const scaleDownRoute = createRoute({
  method: "post",
  operationId: "scaleDown",
  path: "/{name}/portal/scale-down",
  tags,
  summary: "Remove unclaimed labs",
  description:
    "Unready labs go first, then free labs from the highest number down; a claimed lab only with `force`.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(ScaleDownBody, "How many labs.", true) },
  responses: {
    200: json(
      z.object({
        removed: z.array(z.string()),
        releasedClaims: z.array(z.string()),
        waiting: z.number().int().meta({ description: "students in the portal's waiting room" }),
      }),
      "The labs removed, the claims released with them, and how many students wait for a lab.",
    ),
    ...errors(400, 401, 404, 409),
  },
});

/** A portal view with its full address when the portal has a URL of its own. */
function withUrl<T extends { path: string }>(c: Context, view: T): T & { url?: string } {
  return portalBase(c) ? { ...view, url: studentUrl(c, view.path) } : view;
}
const ChecksMatrix = z
  .object({
    workshop: z.string(),
    checks: z.array(
      z.object({
        name: z.string().meta({ description: "the check's name (lab.checks[].name)" }),
        passed: z.number().int().meta({ description: "how many students passed it" }),
      }),
    ),
    students: z.array(
      z.object({
        lab: z.string(),
        name: z.string().meta({ description: "the student's name as they typed it" }),
        results: z.array(z.boolean().nullable()).meta({
          description: "per check, in the order of `checks`: true passed, false failed, null not run yet",
        }),
        lastRanAt: z.string().nullable().meta({ description: "when the student last checked (ISO 8601)" }),
      }),
    ),
  })
  .meta({ id: "ChecksMatrix" });

const checksRoute = createRoute({
  method: "get",
  operationId: "getChecks",
  path: "/{name}/portal/checks",
  tags,
  summary: "Read the students x checks matrix",
  description:
    "Every claimed lab's latest result of each of the lab's checks (\"Check my work\" on the lab page), and how many students passed each check.",
  request: { params: NameParams },
  responses: { 200: json(ChecksMatrix, "The matrix."), ...errors(400, 401, 404) },
});

/**
 * Instructor routes for the claim portal, under /api/workshops/{name}/portal/ (bearer token, no-store, the
 * instructor actor: all set by the /api middleware).
 */
export const portalApi = apiRouter()
  .openapi(openRoute, async (c) => c.json(withUrl(c, await openPortal(c.req.valid("param").name)), 200))
  .openapi(closeRoute, async (c) => c.json(withUrl(c, await closePortal(c.req.valid("param").name)), 200))
  .openapi(publishRoute, async (c) => c.json(withUrl(c, await publishPortal(c.req.valid("param").name)), 200))
  .openapi(rotateRoute, async (c) => c.json(withUrl(c, await rotateCode(c.req.valid("param").name)), 200))
  .openapi(infoRoute, async (c) => c.json(withUrl(c, await portalInfo(c.req.valid("param").name)), 200))
  .openapi(statusRoute, async (c) => {
    const { name } = c.req.valid("param");
    const { code: _code, ...portal } = await portalInfo(name); // the code only where asked for: info
    const [{ board: b, claims, hosts }, waiting, held] = await Promise.all([
      portalStatus(name),
      listQueue(name),
      heldBack(),
    ]);
    const health = hosts.flatMap((h) =>
      h.health && h.state === "ready"
        ? [
            {
              lab: h.hostId,
              health: h.health,
              checkedAt: h.healthCheckedAt ?? null,
              error: h.healthError ?? null,
            },
          ]
        : [],
    );
    return c.json(
      {
        portal: { ...portal, open: b.open },
        labs: b.labs,
        claims,
        health,
        waiting,
        spares: b.spares,
        heldBack: held,
      },
      200,
    );
  })
  .openapi(checksRoute, async (c) => c.json(await checksMatrix(c.req.valid("param").name), 200))
  .openapi(exportRoute, async (c) => {
    const { name } = c.req.valid("param");
    const csv = await exportClaims(name);
    c.header("Content-Type", "text/csv; charset=utf-8");
    c.header("Content-Disposition", `attachment; filename="${name}-claims.csv"`);
    return c.body(csv);
  })
  .openapi(adminLinkRoute, async (c) => {
    const { name } = c.req.valid("param");
    const { token } = await newAdminLink(name);
    return c.json({ token, path: `/admin/${name}/${token}` }, 200);
  })
  .openapi(releaseRoute, async (c) =>
    c.json(await releaseLab(c.req.valid("param").name, c.req.valid("json").lab), 200),
  )
  .openapi(revokeRoute, async (c) =>
    c.json(await revokeEmail(c.req.valid("param").name, c.req.valid("json").email), 200),
  )
  .openapi(reassignRoute, async (c) => {
    const b = c.req.valid("json");
    const r = await reassign(c.req.valid("param").name, b.email, b.lab);
    return c.json({ ...r, path: `/l/${r.token}` }, 200);
  })
  .openapi(swapRoute, async (c) => {
    const b = c.req.valid("json");
    const target = b.email !== undefined ? { email: b.email } : { hostId: b.lab as string };
    return c.json(await swapLab(c.req.valid("param").name, target), 200);
  })
  .openapi(unlockRoute, async (c) =>
    c.json(await unlockEmail(c.req.valid("param").name, c.req.valid("json").email), 200),
  )
  .openapi(unqueueRoute, async (c) =>
    c.json(await unqueueEmail(c.req.valid("param").name, c.req.valid("json").email), 200),
  )
  .openapi(unblockRoute, async (c) => {
    const { name } = c.req.valid("param");
    await getWorkshop(name);
    const b = c.req.valid("json");
    return c.json(await unblock(b.address !== undefined ? { address: b.address } : { all: true }, name), 200);
  })
  .openapi(inviteRoute, async (c) => {
    const r = await inviteRoster(c.req.valid("param").name, c.req.valid("json").csv);
    c.header("Cache-Control", "no-store");
    return c.json(
      {
        invites: r.invites.map((i) => ({ name: i.name, email: i.email, lab: i.lab, path: `/l/${i.token}` })),
        skipped: r.skipped,
      },
      200,
    );
  })
  .openapi(scaleDownRoute, async (c) => {
    const b = c.req.valid("json");
    const { name } = c.req.valid("param");
    const r = await scaleDownUnclaimed(name, b.unclaimed, b.force);
    return c.json({ ...r, waiting: await studentsWaiting(name) }, 200);
  });

// --- the instructor page behind the secret admin link -----------------------------------------------------

const style = `
body { font: 15px/1.45 system-ui, sans-serif; margin: 1rem; color: #111; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 0.35rem 0.5rem; border-bottom: 1px solid #ccc; vertical-align: top; }
dl { margin: 0; } dt { font-weight: 600; display: inline; } dd { display: inline; margin: 0 0.75rem 0 0.25rem; }
code { overflow-wrap: anywhere; } .st-ready { color: #0a6b2d; font-weight: 600; } .st-failed { color: #a4141b; font-weight: 600; }
`;

const notFound = () =>
  html`<!doctype html>
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <title>Not found</title>
      </head>
      <body>
        <h1>This instructor link does not work</h1>
        <p>It was replaced by a newer one: <code>labfleet portal admin-link NAME</code> makes a new one.</p>
      </body>
    </html>`;

const pairs = (r: AccessPair[], link: boolean) =>
  r.map(({ label: k, value: s }) => {
    return html`<dt>${k}</dt><dd>${
      link && /^https?:\/\//i.test(s)
        ? html`<a href="${s}" rel="noopener noreferrer">${s}</a>`
        : html`<code>${s}</code>`
    }</dd>`;
  });

/**
 * GET /admin/:workshop/:token: every lab with its state, phase progress, claimant and credentials, for the
 * holder of the current admin link (made by `labfleet portal admin-link`). Public route: the link is the key.
 */
export const adminPage = new Hono().get("/:workshop/:token", async (c) => {
  c.header("Cache-Control", "no-store");
  const workshop = c.req.param("workshop");
  if (!Name.safeParse(workshop).success || !(await checkAdminLink(workshop, c.req.param("token"))))
    return c.html(notFound(), 404);
  return withActor({ type: "instructor", id: `admin-link:${workshop}`, name: "admin link" }, async () => {
    const [status, { claims, board: b }] = await Promise.all([
      workshopStatus(workshop),
      portalStatus(workshop),
    ]);
    const byLab = new Map(claims.map((cl) => [cl.lab, cl]));
    const hosts = status.hostList.filter((h) => h.state !== "torn_down");
    const access = await Promise.all(
      hosts.map((h) => (h.hasAccess ? hostAccess(workshop, h.id).then(accessView, () => null) : null)),
    );
    const rows = hosts.map((h, i) => {
      const claim = byLab.get(h.id);
      const a = access[i];
      const done = h.phases.filter((p) => p.state === "done").length;
      return html`<tr>
        <td>${h.id}</td>
        <td class="st-${h.state}">${h.state}</td>
        <td>${h.phase ?? ""}${h.phases.length ? ` (${done}/${h.phases.length} phases done)` : ""}</td>
        <td>${
          claim
            ? html`${claim.name}<br /><code>${claim.email}</code><br /><small
                  >${claim.how}, ${claim.claimedAt}${claim.locked ? " · locked" : ""}</small
                >`
            : "free"
        }</td>
        <td>${a ? html`<dl>${pairs(a.urls, true)}${pairs(a.credentials, false)}${pairs(a.other, false)}</dl>` : ""}</td>
      </tr>`;
    });
    return c.html(html`<!doctype html>
      <html lang="en">
        <head>
          <meta charset="utf-8" />
          <meta name="viewport" content="width=device-width, initial-scale=1" />
          <meta name="referrer" content="same-origin" />
          <title>${workshop}: labs and claims</title>
          <style>${raw(style)}</style>
        </head>
        <body>
          <h1>${workshop}</h1>
          <p>
            ${status.state} · ${status.hosts.ready}/${status.hosts.total} ready · claiming
            ${b.open ? "open" : "closed"} · ${claims.length} claimed
            ${status.expiry ? ` · expires ${status.expiry}` : ""}
          </p>
          <div class="scroll">
          <table>
            <thead>
              <tr>
                <th scope="col">Lab</th>
                <th scope="col">State</th>
                <th scope="col">Phase</th>
                <th scope="col">Claimant</th>
                <th scope="col">Access</th>
              </tr>
            </thead>
            <tbody>
              ${rows}
            </tbody>
          </table>
          </div>
        </body>
      </html>`);
  });
});
