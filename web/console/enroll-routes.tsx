// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Hono } from "hono";
import { z } from "zod";
import { approveHosts, listPendingHosts, rejectHosts } from "../../shared/agent/enrollment.ts";
import {
  createJoinToken,
  JoinTokenId,
  JoinTokenOptions,
  joinCommand,
  listJoinTokens,
  revokeJoinToken,
} from "../../shared/agent/join-tokens.ts";
import { issueDetails } from "../../shared/runtime/zod.ts";
import { Confirm, type Ctx, type Env, Lab, nameOf, noticeOf, page, viewer } from "./common.tsx";
import { ownOrigin } from "./session.ts";
import { ConfirmPage, EnrollPage, JoinTokenCreatedPage } from "./views.tsx";

const HostForm = z.object({ host: Lab, confirm: Confirm });
const RevokeForm = z.object({ id: JoinTokenId });
/** The make form: whole numbers typed in boxes, read as JoinTokenOptions (hours to seconds). */
const MakeForm = z.object({
  uses: z.string().max(20),
  hours: z.string().max(20),
  approve: z.string().max(20),
});

const USES_ERROR = "Machines: expected a whole number from 1 to 1000";
const HOURS_ERROR = "Expires after: expected a whole number of hours from 1 to 720 (30 days)";

/** The enrollment page of a workshop: its join tokens (made, shown once, revoked) and the hosts awaiting approval. */
export function enrollRoutes(app: Hono<Env>) {
  const enrollPage = async (c: Ctx, extra: Partial<Parameters<typeof EnrollPage>[0]> = {}) => {
    const name = nameOf(c);
    const [tokens, pending] = await Promise.all([listJoinTokens(name), listPendingHosts(name)]);
    return page(
      c,
      <EnrollPage
        viewer={viewer(c)}
        name={name}
        tokens={tokens}
        pending={pending}
        notice={noticeOf(c)}
        {...extra}
      />,
      extra.errors?.length ? 400 : 200,
    );
  };
  app.get("/w/:name/enroll", (c) => enrollPage(c));

  // The new token is in this response only: never in a URL (no redirect), a log or a cache (no-store).
  app.post("/w/:name/enroll/tokens", async (c) => {
    const name = nameOf(c);
    const form = MakeForm.parse(await c.req.parseBody());
    const whole = (s: string) => (/^\d{1,7}$/.test(s.trim()) ? Number(s.trim()) : Number.NaN);
    const hours = whole(form.hours);
    const options = JoinTokenOptions.safeParse({
      uses: whole(form.uses),
      expiresInSeconds: hours * 3600,
      approve: form.approve,
    });
    if (!options.success) {
      const errors = [
        ...new Set(
          issueDetails(options.error.issues).map((d) =>
            d.path === "uses"
              ? USES_ERROR
              : d.path === "expiresInSeconds"
                ? HOURS_ERROR
                : `Hosts that join: ${d.message}`,
          ),
        ),
      ];
      return enrollPage(c, { form, errors });
    }
    const made = await createJoinToken(name, options.data);
    return page(
      c,
      <JoinTokenCreatedPage
        viewer={viewer(c)}
        name={name}
        token={made.token}
        command={joinCommand(ownOrigin(c), made.token)}
        info={made.info}
      />,
      201,
    );
  });

  app.post("/w/:name/enroll/revoke", async (c) => {
    const f = RevokeForm.parse(await c.req.parseBody());
    await revokeJoinToken(nameOf(c), f.id);
    return c.redirect(`/console/w/${nameOf(c)}/enroll?notice=join-token-revoked`, 303);
  });

  app.post("/w/:name/enroll/approve", async (c) => {
    const f = HostForm.parse(await c.req.parseBody());
    const [d] = await approveHosts(nameOf(c), [f.host]);
    const notice = d?.result === "approved" ? "host-approved" : "host-approved-already";
    return c.redirect(`/console/w/${nameOf(c)}/enroll?notice=${notice}`, 303);
  });

  // Rejecting removes the host: asked once more first.
  app.post("/w/:name/enroll/reject", async (c) => {
    const name = nameOf(c);
    const f = HostForm.parse(await c.req.parseBody());
    if (f.confirm !== "yes")
      return page(
        c,
        <ConfirmPage
          viewer={viewer(c)}
          title={`Reject ${f.host}?`}
          message={
            <p>
              The machine is removed from {name} and its signing secret dropped: its agent's calls are refused
              from then on. To join again it needs a new join token.
            </p>
          }
          action={`/console/w/${name}/enroll/reject`}
          fields={{ host: f.host }}
          button={`Reject ${f.host}`}
          back={`/console/w/${name}/enroll`}
        />,
      );
    await rejectHosts(name, [f.host]);
    return c.redirect(`/console/w/${name}/enroll?notice=host-rejected`, 303);
  });
}
