// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Child } from "hono/jsx";
import type { ErrorDetail } from "../../../shared/runtime/errors.ts";
import { CSRF_FIELD } from "../session.ts";

/**
 * The console's pages: plain forms that work without JavaScript, tables with captions and scoped headers,
 * a label on every control. Regions that update live carry an id (`live-...`); the same components render
 * them for the page and for its JSON endpoint, so a polled update is exactly what a reload would show.
 */

export interface Viewer {
  /** What the header says: the name or email, or "instructor token". */
  label: string;
  csrf: string;
}

export interface ProviderLink {
  /** A provider id: github, google or oidc. */
  id: string;
  /** The button's text, such as "Sign in with GitHub". */
  label: string;
  /** Where the sign-in starts, such as /auth/github/start. */
  href: string;
}

type Section = "workshops" | "new" | "tokens" | undefined;

export const Csrf = (props: { token: string }) => (
  <input type="hidden" name={CSRF_FIELD} value={props.token} />
);

/** A console table: scrollable wrapper, a caption or a heading that names it, column headers, a body. */
export function DataTable(props: {
  columns: string[];
  caption?: string;
  labelledBy?: string;
  wrapClass?: string;
  bodyId?: string;
  /** The newest event id shown (the activity list's live cursor). */
  after?: string;
  children?: Child;
}) {
  return (
    <div class={`scroll ${props.wrapClass ?? "table-wrap"}`}>
      <table {...(props.labelledBy ? { "aria-labelledby": props.labelledBy } : {})}>
        {props.caption ? <caption>{props.caption}</caption> : null}
        <thead>
          <tr>
            {props.columns.map((c) => (
              <th scope="col">{c}</th>
            ))}
          </tr>
        </thead>
        <tbody
          {...(props.bodyId ? { id: props.bodyId } : {})}
          {...(props.after !== undefined ? { "data-after": props.after } : {})}
        >
          {props.children}
        </tbody>
      </table>
    </div>
  );
}
export function Layout(props: {
  title: string;
  viewer?: Viewer | undefined;
  section?: Section;
  live?: string;
  children?: Child;
}) {
  const current = (s: Section) => (props.section === s ? "page" : undefined);
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="referrer" content="same-origin" />
        <title>{`${props.title} · labfleet console`}</title>
        <link rel="stylesheet" href="/console/console.css" />
        <script src="/console/console.js" defer />
      </head>
      <body>
        <a class="skip" href="#main">
          Skip to content
        </a>
        <header class="top">
          <a class="brand" href="/console">
            labfleet console
          </a>
          {props.viewer ? (
            <>
              <nav aria-label="Console">
                <a href="/console" aria-current={current("workshops")}>
                  Workshops
                </a>
                <a href="/console/new" aria-current={current("new")}>
                  New workshop
                </a>
                <a href="/console/tokens" aria-current={current("tokens")}>
                  API tokens
                </a>
                <a href="/api/docs">API docs</a>
              </nav>
              <div class="who">
                <span>Signed in: {props.viewer.label}</span>
                <form method="post" action="/console/logout">
                  <Csrf token={props.viewer.csrf} />
                  <button type="submit">Sign out</button>
                </form>
              </div>
            </>
          ) : null}
        </header>
        <main id="main" data-live={props.live}>
          {props.live ? <p id="live-status" class="live-status" role="status" /> : null}
          {props.children}
        </main>
      </body>
    </html>
  );
}

export function Notice(props: { text?: string | undefined }) {
  return props.text ? (
    <p class="notice" role="status">
      {props.text}
    </p>
  ) : null;
}

export function Details(props: { details: ErrorDetail[] }) {
  return props.details.length ? (
    <ul>
      {props.details.map((d) => (
        <li>
          <code>{d.path}</code>
          {d.line !== undefined ? ` (line ${d.line}, column ${d.column})` : ""}: {d.message}
        </li>
      ))}
    </ul>
  ) : null;
}

export const State = (props: { state: string; label?: string }) => (
  <span class={`state st-${props.state}`}>{props.label ?? props.state.replace(/_/g, " ")}</span>
);

export function Tabs(props: { name: string; current: "hosts" | "portal" | "runs" | "enrollment" }) {
  const base = `/console/w/${props.name}`;
  const cur = (t: string) => (props.current === t ? "page" : undefined);
  return (
    <nav class="tabs" aria-label={`Workshop ${props.name}`}>
      <a href={base} aria-current={cur("hosts")}>
        Hosts
      </a>
      <a href={`${base}/portal`} aria-current={cur("portal")}>
        Portal
      </a>
      <a href={`${base}/runs`} aria-current={cur("runs")}>
        Runs
      </a>
      <a href={`${base}/enroll`} aria-current={cur("enrollment")}>
        Enrollment
      </a>
    </nav>
  );
}

// ------------------------------------------------------------------------------ confirmations and results

export function ConfirmPage(props: {
  viewer: Viewer;
  title: string;
  message: Child;
  action: string;
  button: string;
  /** The confirming button's look: `danger` (the default) for what cannot be undone. */
  buttonClass?: string;
  back: string;
  fields?: Record<string, string>;
  /** Ask for this text to be typed (the workshop name), instead of a plain second click. */
  typed?: string;
  error?: string | undefined;
}) {
  return (
    <Layout title={props.title} viewer={props.viewer}>
      <h1>{props.title}</h1>
      <div>{props.message}</div>
      <form method="post" action={props.action} class="panel">
        <Csrf token={props.viewer.csrf} />
        {Object.entries(props.fields ?? {}).map(([k, v]) => (
          <input type="hidden" name={k} value={v} />
        ))}
        {props.typed ? (
          <>
            <label for="confirm">Type {props.typed} to confirm</label>
            <input
              id="confirm"
              name="confirm"
              type="text"
              required
              autocomplete="off"
              spellcheck={false}
              aria-invalid={props.error ? "true" : undefined}
              aria-describedby={props.error ? "confirm-error" : undefined}
            />
            {props.error ? (
              <p class="alert" role="alert" id="confirm-error">
                {props.error}
              </p>
            ) : null}
          </>
        ) : (
          <input type="hidden" name="confirm" value="yes" />
        )}
        <p class="row">
          <button type="submit" class={props.buttonClass ?? "danger"}>
            {props.button}
          </button>
          <a href={props.back}>Cancel</a>
        </p>
      </form>
    </Layout>
  );
}

export function ResultPage(props: { viewer: Viewer; title: string; children: Child; back: string }) {
  return (
    <Layout title={props.title} viewer={props.viewer}>
      <h1>{props.title}</h1>
      {props.children}
      <p>
        <a href={props.back}>Back</a>
      </p>
    </Layout>
  );
}

export function ErrorPage(props: {
  viewer?: Viewer | undefined;
  title: string;
  message: string;
  details?: ErrorDetail[];
  back: string;
  backLabel?: string;
  /** What to do about it, under the alert. */
  hint?: Child;
}) {
  return (
    <Layout title={props.title} viewer={props.viewer}>
      <h1>{props.title}</h1>
      <div class="alert" role="alert">
        <p>{props.message}</p>
        <Details details={props.details ?? []} />
      </div>
      {props.hint ? <p class="hint">{props.hint}</p> : null}
      <p>
        <a href={props.back}>{props.backLabel ?? "Back"}</a>
      </p>
    </Layout>
  );
}
