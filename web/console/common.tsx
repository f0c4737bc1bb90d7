// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Context } from "hono";
import { html } from "hono/html";
import type { Child } from "hono/jsx";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { z } from "zod";
import { CreateTokenInput, TokenId } from "../../shared/auth/tokens.ts";
import { ClaimedRebuildError } from "../../shared/fleet/claimed.ts";
import { parseFleetCursor } from "../../shared/fleet/fleet-view.ts";
import { HeldAddress } from "../../shared/portal/rate-limit.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { hasControlChars } from "../../shared/runtime/text.ts";
import type { CurrentSession } from "./session.ts";
import { ErrorPage, RebuildConfirm, type Viewer } from "./views.tsx";

/** What the console's route files share: the session's context, form fields, notices, pages and live answers. */

export type Env = { Variables: { session: CurrentSession } };
export type Ctx = Context<Env>;

export const Name = z.string().regex(/^[a-z0-9-]{1,40}$/);
export const Lab = z.string().regex(/^[a-z0-9](?:[a-z0-9-]{0,47})$/, { error: "expected a lab (host) id" });
export const Email = z
  .string()
  .trim()
  .max(200)
  .regex(/^[^\s@]+@[^\s@]+$/, { error: "expected an email address" })
  .refine((s) => !hasControlChars(s), { error: "expected an email address without control characters" });
export const Confirm = z.string().max(100).optional();
export const LoginForm = z.object({ token: z.string().max(1000), next: z.string().max(300).optional() });
export const DeployForm = z.object({
  hosts: z.string().max(4000).default(""),
  force: z.literal("yes").optional(),
  confirm: Confirm,
});
export const DiagnoseForm = z.object({ all: z.literal("yes").optional() });
export const ExtendForm = z.object({ hours: z.string().max(20) });
export const ScaleForm = z.object({ count: z.string().max(20), confirm: Confirm });
export const LabForm = z.object({ lab: Lab, confirm: Confirm });
export const RevokeForm = z.object({ email: Email, confirm: Confirm });
export const ReassignForm = z.object({ lab: Lab, to: Lab, confirm: Confirm });
export const ConfirmForm = z.object({ confirm: Confirm });
export const UnblockForm = z
  .object({ address: HeldAddress.optional(), all: z.literal("yes").optional() })
  .refine((f) => (f.address === undefined) !== (f.all === undefined), {
    error: "expected an address or all",
    path: ["address"],
  });
/** An event id (a ULID), where a workshop page's live updates continue from. */
/** The fleet table's page: a cursor the fleet view made (shared/fleet/fleet-view.ts). */
export const FleetCursor = z
  .string()
  .refine((c) => parseFleetCursor(c) !== undefined, { error: "expected a page of the fleet table" });
/** The workshop page's query: which page of the fleet table. */
export const PageQuery = z.object({ labs: FleetCursor.optional() });
export const LiveQuery = z.object({
  after: z
    .string()
    .regex(/^[0-9A-HJKMNP-TV-Z]{26}$/, { error: "expected an event id" })
    .optional(),
  labs: FleetCursor.optional(),
});
/** The create form's fields, made into createToken's input; its schema checks them. */
export const TokenForm = z
  .object({ name: z.string().max(200).default(""), days: z.string().trim().max(20).default("") })
  .transform((f) => ({
    name: f.name,
    // "" is no expiry; anything else must be a whole number, which CreateTokenInput checks.
    ...(f.days === "" ? {} : { expiresInDays: /^\d+$/.test(f.days) ? Number(f.days) : Number.NaN }),
  }))
  .pipe(CreateTokenInput);
export const DAYS_ERROR = "expected a whole number of days from 1 to 3650, or nothing";
export const RevokeTokenForm = z.object({ id: TokenId, confirm: Confirm });

/** What a redirect's `?notice=` key says on the next page. */
export const NOTICES: Record<string, string> = {
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
  // Rollouts (web/console/rollout-routes.tsx).
  rollout:
    "Rollout started: the canary first, then batches; each lab is promoted only once its new host passes lab.health. The Rollout section follows it live.",
  "rollout-resumed":
    "Rollout resumed: the failed and stopped labs are tried again, then the batches not reached. The Rollout section follows it live.",
  "rollout-aborted":
    "Rollout aborted: new hosts not yet promoted were removed; the labs already promoted keep the new ref.",
  // enrollment
  "join-token-revoked": "The join token was revoked: machines that present it are refused from now on.",
  "host-approved": "The host was approved: it may be given work from now on.",
  "host-approved-already": "That host was approved already.",
  "host-rejected": "The host was rejected: it was removed and its signing secret dropped.",
};

export const noticeOf = (c: Context) => NOTICES[c.req.query("notice") ?? ""];

export function page(c: Context, node: Child, status: ContentfulStatusCode = 200) {
  return c.html(html`<!doctype html>${node}`, status);
}

/** The server-rendered HTML of a live region, as a string for the JSON endpoints. */
export async function fragment(node: Child): Promise<string> {
  return String(await (node as { toString(): string | Promise<string> }).toString());
}

export async function live(c: Context, regions: Record<string, Child>, extra: Record<string, unknown> = {}) {
  const out: Record<string, string> = {};
  for (const [id, node] of Object.entries(regions)) out[id] = await fragment(node);
  return c.json({ at: useDeps().clock.now().toISOString(), regions: out, ...extra });
}

/** Who a session's actions are by in activity: the sign-in's display name or the token's name, never an email. */
export function actingName(s: CurrentSession): string {
  return s.name ?? (s.via === "token" ? "instructor token" : "instructor");
}

export function viewer(c: Ctx): Viewer {
  const s = c.get("session");
  return {
    label: s.via === "token" ? "instructor token" : (s.name ?? s.email ?? s.id),
    csrf: s.csrf,
  };
}

/**
 * Starts a deploy or retry; when it would rebuild labs students have claimed and the instructor has not
 * confirmed yet, answers the page that names each lab and student instead (nothing is started).
 */
export async function askBeforeRebuildingClaimed<T>(
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

export const now = () => useDeps().clock.now();

/** The :name of the route; anything that cannot be a workshop name is simply not found. */
export function nameOf(c: Context): string {
  const name = c.req.param("name");
  if (!Name.safeParse(name).success)
    throw new VisibleError("not_found", "workshop.not_found", "there is no workshop by that name");
  return name as string;
}

/** Only console paths, so the sign-in form cannot be turned into a redirect to another site. */
export function safeNext(next: string | undefined): string {
  if (next && /^\/console(\/[\w./-]*)?$/.test(next) && !next.includes("//") && !next.includes(".."))
    return next;
  return "/console";
}

/** The page a failed action goes back to. */
export function backFor(path: string): string {
  if (path.startsWith("/console/tokens")) return "/console/tokens";
  const m = /^\/console\/w\/([a-z0-9-]{1,40})(\/portal|\/runs)?/.exec(path);
  return m ? `/console/w/${m[1]}${m[2] ?? ""}` : "/console";
}

export const done = (c: Context, name: string, notice: string, tab = "") =>
  c.redirect(`/console/w/${name}${tab}?notice=${notice}`, 303);

export function forbidden(c: Context, viewerOf?: Viewer) {
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
