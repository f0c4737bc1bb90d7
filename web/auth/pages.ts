import { html, raw } from "hono/html";
import type { HtmlEscapedString } from "hono/utils/html";
import { CSRF_FIELD } from "../console/session.ts";

/** The sign-in pages: plain HTML, no script, every interpolated value escaped by `html`. */

type Body = HtmlEscapedString | Promise<HtmlEscapedString>;

const style = `
body { margin: 0; font: 17px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #111; background: #fafafa; }
main { max-width: 34rem; margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.5rem; }
a { color: #0645ad; }
a:focus-visible, button:focus-visible, input:focus-visible { outline: 3px solid #f5a623; outline-offset: 2px; }
.button, button { display: block; width: 100%; box-sizing: border-box; margin: 0.75rem 0; padding: 0.75rem 1rem; min-height: 3rem;
  font: inherit; font-weight: 600; text-align: center; text-decoration: none; color: #fff; background: #0b57d0; border: 0; border-radius: 6px; cursor: pointer; }
button.secondary { background: #fff; color: #0b57d0; border: 2px solid #0b57d0; }
label { display: block; font-weight: 600; margin-top: 1rem; }
input[type=text] { width: 100%; box-sizing: border-box; font-size: 1.2rem; padding: 0.6rem; border: 2px solid #555; border-radius: 6px; }
.code { font: 700 2rem/1.2 ui-monospace, monospace; letter-spacing: 0.15em; padding: 0.5rem 0; }
.alert { color: #8a0016; background: #fdecee; border-left: 5px solid #b00020; padding: 0.75rem 1rem; border-radius: 4px; }
.ok { background: #e7f5ec; border-left: 5px solid #0a6b2d; padding: 0.75rem 1rem; border-radius: 4px; }
`;

export function layout(title: string, body: Body) {
  return html`<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <meta name="referrer" content="same-origin" />
    <title>${title} · labfleet</title>
    <style>${raw(style)}</style>
  </head>
  <body>
    <main>
      <h1>${title}</h1>
      ${body}
    </main>
  </body>
</html>`;
}

/** The refusal: it says what to do, and names no email (the page may be on a projector). */
export function notAllowedPage(via: string, githubOrg: string | undefined, signInPath: string) {
  return layout(
    "Not allowed",
    html`<p class="alert" role="alert">
        The ${via} account you signed in with is not allowed to use this labfleet console.
      </p>
      <p>
        Instructors are admitted by a verified email on the allow-list${
          githubOrg ? html` or by membership of the GitHub organisation <strong>${githubOrg}</strong>` : ""
        }. Ask whoever runs this labfleet to add you, or <a href="${signInPath}">sign in with another account</a>.
      </p>
      <p>Nothing was stored about this attempt.</p>`,
  );
}

export function problemPage(title: string, message: string, signInPath: string) {
  return layout(
    title,
    html`<p class="alert" role="alert">${message}</p>
      <p><a href="${signInPath}">Start the sign-in again</a></p>`,
  );
}

/**
 * The device page without a console session: the provider buttons come back here after sign-in; the token
 * sign-in is the console's own page.
 */
export function deviceSignInPage(
  providers: { href: string; label: string }[],
  tokenSignIn: string,
  here: string,
) {
  return layout(
    "Sign in to approve the CLI",
    html`<p>
        To let <code>labfleet login</code> in, sign in to the labfleet console first. You come back to this page
        and see the code to confirm.
      </p>
      ${providers.map((p) => html`<a class="button" href="${p.href}">${p.label}</a>`)}
      <p>
        Or <a href="${tokenSignIn}">sign in with the instructor token</a>, then open
        <a href="${here}">this page</a> again.
      </p>`,
  );
}

export function deviceEnterPage(message?: string) {
  return layout(
    "Sign in the labfleet CLI",
    html`${message ? html`<p class="alert" role="alert">${message}</p>` : ""}
      <form method="get" action="/auth/device/verify">
        <label for="code">The code <code>labfleet login</code> shows in your terminal</label>
        <input type="text" id="code" name="code" autocomplete="off" autocapitalize="characters" required />
        <button type="submit">Continue</button>
      </form>`,
  );
}

export function deviceConfirmPage(opts: { userCode: string; clientName: string; csrf: string; who: string }) {
  return layout(
    "Sign in the labfleet CLI?",
    html`<p>Check that your terminal shows this code:</p>
      <p class="code" aria-label="code ${opts.userCode.split("").join(" ")}">${opts.userCode}</p>
      <p>
        Approving gives <strong>${opts.clientName}</strong> an API token that acts as you (${opts.who}).
        Approve only if you ran <code>labfleet login</code> yourself, just now, and the codes match.
      </p>
      <form method="post" action="/auth/device/verify">
        <input type="hidden" name="${CSRF_FIELD}" value="${opts.csrf}" />
        <input type="hidden" name="code" value="${opts.userCode}" />
        <button type="submit" name="decision" value="approve">Approve</button>
        <button type="submit" name="decision" value="deny" class="secondary">Refuse</button>
      </form>`,
  );
}

export function deviceDonePage(approved: boolean) {
  return layout(
    approved ? "CLI signed in" : "Sign-in refused",
    approved
      ? html`<p class="ok" role="status">Done. Go back to your terminal: <code>labfleet login</code> finishes by itself.</p>`
      : html`<p class="ok" role="status">Refused. The CLI that asked gets no token.</p>`,
  );
}
