import { Hono } from "hono";
import { html, raw } from "hono/html";
import { z } from "zod";
import { hostAccess, workshopStatus } from "../../shared/fleet/workshops.ts";
import { board } from "../../shared/portal/claims.ts";
import {
  checkAdminLink,
  closePortal,
  exportClaims,
  inviteRoster,
  listClaims,
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
import { scaleDownUnclaimed } from "../../shared/portal/scale-down.ts";
import { withActor } from "../../shared/runtime/actor.ts";

const Name = z.string().regex(/^[a-z0-9-]{1,40}$/, { error: "expected a workshop name" });
const Lab = z.string().regex(/^[a-z0-9](?:[a-z0-9-]{0,47})$/, { error: "expected a lab (host) id" });
const Email = z
  .string()
  .trim()
  .max(200)
  .regex(/^[^\s@]+@[^\s@]+$/, { error: "expected an email address" });
const ReleaseBody = z.strictObject({ lab: Lab });
const EmailBody = z.strictObject({ email: Email });
const InviteBody = z.strictObject({
  csv: z
    .string()
    .min(1, { error: "expected the roster CSV: name,email[,host_id]" })
    .max(1024 * 1024),
});
const ScaleDownBody = z.strictObject({
  unclaimed: z.union([z.literal("all"), z.number().int().min(1).max(64)], {
    error: 'expected a number of labs, or "all"',
  }),
  force: z.boolean().default(false),
});

const ReassignBody = z.strictObject({ email: Email, lab: Lab });

async function body(req: Request): Promise<unknown> {
  const text = await req.text();
  return text === "" ? {} : JSON.parse(text);
}

/**
 * Instructor routes for the claim portal, under /api/workshops/:name/portal/ (bearer token, no-store, the
 * instructor actor: all set by the /api middleware).
 */
export const portalApi = new Hono()
  .post("/:name/portal/open", async (c) => c.json(await openPortal(Name.parse(c.req.param("name")))))
  .post("/:name/portal/close", async (c) => c.json(await closePortal(Name.parse(c.req.param("name")))))
  .post("/:name/portal/publish", async (c) => c.json(await publishPortal(Name.parse(c.req.param("name")))))
  .post("/:name/portal/rotate-code", async (c) => c.json(await rotateCode(Name.parse(c.req.param("name")))))
  .get("/:name/portal/info", async (c) => c.json(await portalInfo(Name.parse(c.req.param("name")))))
  .get("/:name/portal/status", async (c) => {
    const name = Name.parse(c.req.param("name"));
    const { code: _code, ...portal } = await portalInfo(name); // the code only where asked for: info
    const [b, claims] = await Promise.all([board(name), listClaims(name)]);
    return c.json({ portal: { ...portal, open: b.open }, labs: b.labs, claims });
  })
  .get("/:name/portal/export", async (c) => {
    const name = Name.parse(c.req.param("name"));
    const csv = await exportClaims(name);
    c.header("Content-Type", "text/csv; charset=utf-8");
    c.header("Content-Disposition", `attachment; filename="${name}-claims.csv"`);
    return c.body(csv);
  })
  .post("/:name/portal/admin-link", async (c) => {
    const name = Name.parse(c.req.param("name"));
    const { token } = await newAdminLink(name);
    return c.json({ token, path: `/admin/${name}/${token}` });
  })
  .post("/:name/portal/release", async (c) => {
    const b = ReleaseBody.parse(await body(c.req.raw));
    return c.json(await releaseLab(Name.parse(c.req.param("name")), b.lab));
  })
  .post("/:name/portal/revoke", async (c) => {
    const b = EmailBody.parse(await body(c.req.raw));
    return c.json(await revokeEmail(Name.parse(c.req.param("name")), b.email));
  })
  .post("/:name/portal/reassign", async (c) => {
    const b = ReassignBody.parse(await body(c.req.raw));
    const r = await reassign(Name.parse(c.req.param("name")), b.email, b.lab);
    return c.json({ ...r, path: `/l/${r.token}` });
  })
  .post("/:name/portal/unlock", async (c) => {
    const b = EmailBody.parse(await body(c.req.raw));
    return c.json(await unlockEmail(Name.parse(c.req.param("name")), b.email));
  })
  .post("/:name/portal/invite", async (c) => {
    const b = InviteBody.parse(await body(c.req.raw));
    const r = await inviteRoster(Name.parse(c.req.param("name")), b.csv);
    c.header("Cache-Control", "no-store");
    return c.json({
      invites: r.invites.map((i) => ({ name: i.name, email: i.email, lab: i.lab, path: `/l/${i.token}` })),
      skipped: r.skipped,
    });
  })
  .post("/:name/portal/scale-down", async (c) => {
    const b = ScaleDownBody.parse(await body(c.req.raw));
    return c.json(await scaleDownUnclaimed(Name.parse(c.req.param("name")), b.unclaimed, b.force));
  });

// --- the instructor page behind the secret admin link -----------------------------------------------------

interface Access {
  urls?: Record<string, unknown>;
  credentials?: Record<string, unknown>;
  notes?: unknown;
}

const style = `
body { font: 15px/1.45 system-ui, sans-serif; margin: 1rem; color: #111; }
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

const pairs = (r: Record<string, unknown> | undefined, link: boolean) =>
  Object.entries(r ?? {}).map(([k, v]) => {
    const s = String(v);
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
  return withActor({ type: "instructor", id: `admin-link:${workshop}` }, async () => {
    const [status, claims, b] = await Promise.all([
      workshopStatus(workshop),
      listClaims(workshop),
      board(workshop),
    ]);
    const byLab = new Map(claims.map((cl) => [cl.lab, cl]));
    const hosts = status.hostList.filter((h) => h.state !== "torn_down");
    const access = await Promise.all(
      hosts.map((h) =>
        h.hasAccess ? (hostAccess(workshop, h.id) as Promise<Access>).catch(() => null) : null,
      ),
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
        <td>${a ? html`<dl>${pairs(a.urls, true)}${pairs(a.credentials, false)}</dl>` : ""}</td>
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
        </body>
      </html>`);
  });
});
