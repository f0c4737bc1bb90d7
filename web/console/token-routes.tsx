// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Hono } from "hono";
import { createToken, listTokens, revokeToken } from "../../shared/auth/tokens.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { issueDetails } from "../../shared/runtime/zod.ts";
import { Time } from "../time.tsx";
import {
  type Ctx,
  DAYS_ERROR,
  type Env,
  noticeOf,
  page,
  RevokeTokenForm,
  TokenForm,
  viewer,
} from "./common.tsx";
import { ownOrigin } from "./session.ts";
import { ConfirmPage, TokenCreatedPage, TokensPage } from "./views.tsx";

/** The API tokens page: list, create (shown once), revoke. */
export function tokenRoutes(app: Hono<Env>) {
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
              {t.mine ? " (you)" : ""}, created <Time at={t.createdAt} />, stops working at once: a CLI signed
              in with it, or a script that sends it, is refused. This cannot be undone.
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
}
