// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Child } from "hono/jsx";
import type { JoinPage } from "../../shared/portal/byod.ts";
import type { CheckView } from "../../shared/portal/checks.ts";
import type { BoardLab, LabPage } from "../../shared/portal/claims.ts";
import { COOKIES, RATE, RETENTION, WAITING_REFRESH_SECONDS } from "../../shared/portal/constants.ts";
import { type TimeLeft, timeLeft } from "../../shared/portal/time-left.ts";
import type { WaitingPage } from "../../shared/portal/waiting.ts";
import { Time } from "../time.tsx";
import { CSRF_FIELD } from "./security.ts";

/**
 * The student pages: plain HTML forms, readable on a phone. Each loads /portal.js, which only shows times in
 * the student's own zone and adds Copy buttons: every page works without it.
 */

export function Layout(props: {
  title: string;
  refreshSeconds?: number | undefined;
  /** The lab page: a wider page (the guide beside the details). */
  lab?: boolean;
  children?: Child;
}) {
  return (
    <html lang="en">
      <head>
        <meta charset="utf-8" />
        <meta name="viewport" content="width=device-width, initial-scale=1" />
        <meta name="referrer" content="same-origin" />
        {props.refreshSeconds ? <meta http-equiv="refresh" content={String(props.refreshSeconds)} /> : null}
        <title>{props.title}</title>
        <link rel="stylesheet" href="/portal.css" />
        <script src="/portal.js" defer />
      </head>
      <body>
        <main class={props.lab ? "lab" : undefined}>{props.children}</main>
        <footer>
          <a href="/privacy">Privacy: what this portal keeps, and for how long</a>
        </footer>
      </body>
    </html>
  );
}

const Csrf = (props: { token: string }) => <input type="hidden" name={CSRF_FIELD} value={props.token} />;

function Alert(props: { message?: string | undefined }) {
  return props.message ? (
    <p class="alert" role="alert">
      {props.message}
    </p>
  ) : null;
}

/** "Continue to your lab" and "Not you? Forget this device", for a browser that remembers a lab. */
function Remembered(props: {
  csrf: string;
  lab?: string | undefined;
  token: string;
  waiting?: boolean;
  joining?: boolean;
}) {
  return (
    <section class="notice" aria-labelledby="remembered">
      <h2 id="remembered">Welcome back</h2>
      <a class="button" href={`/l/${props.token}`}>
        {props.waiting
          ? "Continue to your place in line"
          : props.joining
            ? "Continue to your join page"
            : `Continue to your lab (${props.lab})`}
      </a>
      <form class="inline-form" method="post" action="/forget">
        <Csrf token={props.csrf} />
        <p>
          Not you?{" "}
          <button type="submit" class="secondary">
            Forget this device
          </button>
        </p>
      </form>
    </section>
  );
}

export interface RememberedLab {
  /** The lab, or none for a place in the waiting line (`waiting`). */
  lab?: string;
  token: string;
  waiting?: boolean;
  /** BYOD: a join page, before the student's machine joined. */
  joining?: boolean;
}

export function FrontPage(props: { csrf: string; error?: string | undefined; remembered?: RememberedLab }) {
  return (
    <Layout title="Workshop labs">
      {props.remembered ? <Remembered csrf={props.csrf} {...props.remembered} /> : null}
      <h1>Get your workshop lab</h1>
      <form method="post" action="/code">
        <Csrf token={props.csrf} />
        <label for="code">Workshop code</label>
        <input
          id="code"
          name="code"
          type="text"
          required
          autocomplete="off"
          autocapitalize="characters"
          spellcheck={false}
          maxlength={64}
          aria-describedby="code-hint"
          aria-invalid={props.error ? "true" : undefined}
        />
        <p class="hint" id="code-hint">
          It is on the instructor's slide, like LAB-ABCDEF-20261130. Case, spaces and dashes do not matter.
        </p>
        <Alert message={props.error} />
        <button type="submit">Continue</button>
      </form>
    </Layout>
  );
}

/**
 * Up to this many labs the board shows one tile per lab; past it, one per state with its count (the page stays a
 * few kilobytes and the claim form near the top at 500 labs).
 */
export const BOARD_TILES_MAX = 60;
const BOARD_STATES = [
  "free",
  "claimed",
  "building",
  "failed",
  "unavailable",
] as const satisfies readonly BoardLab["status"][];

const statusText: Record<BoardLab["status"], string> = {
  free: "free",
  claimed: "claimed",
  building: "still building",
  failed: "failed",
  unavailable: "not available now",
};

export type FieldErrors = Partial<Record<"name" | "email" | "pin", string>>;

function Field(props: {
  id: "name" | "email" | "pin";
  label: string;
  errors: FieldErrors;
  hint?: string;
  children: Child;
}) {
  const error = props.errors[props.id];
  return (
    <>
      <label for={props.id}>{props.label}</label>
      {props.children}
      {props.hint ? (
        <p class="hint" id={`${props.id}-hint`}>
          {props.hint}
        </p>
      ) : null}
      {error ? (
        <p class="field-error" id={`${props.id}-error`}>
          {error}
        </p>
      ) : null}
    </>
  );
}

const describedBy = (id: string, errors: FieldErrors, hint = false) =>
  [hint ? `${id}-hint` : "", errors[id as keyof FieldErrors] ? `${id}-error` : ""]
    .filter(Boolean)
    .join(" ") || undefined;

export function BoardPage(props: {
  csrf: string;
  open: boolean;
  labs: BoardLab[];
  /** Free labs kept off the board for swaps. */
  spares?: number;
  /** Students in the waiting line. */
  waiting?: number;
  /** When the workshop's labs are removed, if a teardown is set. */
  expiry?: string | null | undefined;
  now: Date;
  remembered?: RememberedLab | undefined;
  errors?: FieldErrors;
  message?: string | undefined;
  values?: { name?: string; email?: string };
  /** Bring your own device: the form gives the student a join page for their own machine, not a lab. */
  byod?: boolean;
}) {
  const errors = props.errors ?? {};
  const free = props.labs.filter((l) => l.status === "free").length;
  const waiting = props.waiting ?? 0;
  const byod = props.byod === true;
  // Nobody jumps the line: with students waiting, or no lab free, the form joins the line.
  const joins = !byod && (waiting > 0 || free === 0);
  const invalid = (id: keyof FieldErrors) => (errors[id] ? "true" : undefined);
  // No refresh here: it would wipe a claim form being filled in. The lab page refreshes itself.
  const left = props.expiry ? timeLeft(props.expiry, props.now) : undefined;
  return (
    <Layout title={warnTitle(left, "Workshop labs: the board")}>
      {props.remembered ? <Remembered csrf={props.csrf} {...props.remembered} /> : null}
      <h1>Workshop labs</h1>
      <p>
        {free} of {props.labs.length} labs free.
        {props.spares ? ` ${props.spares} more ${props.spares === 1 ? "is" : "are"} kept as spares.` : ""}
        {waiting ? ` ${waiting} ${waiting === 1 ? "student is" : "students are"} waiting for a lab.` : ""}
      </p>
      {left ? <EndNotice left={left} what="workshop" /> : null}
      {props.labs.length > BOARD_TILES_MAX ? (
        // A conference room's board: one tile per state, so the form is not hundreds of tiles down a phone.
        <ul class="board" aria-label="Labs by state">
          {BOARD_STATES.map((status) => {
            const n = props.labs.filter((l) => l.status === status).length;
            return n ? (
              <li class={status} data-count={status}>
                <span class="lab">{n}</span>
                <span class="status">{statusText[status]}</span>
              </li>
            ) : null;
          })}
        </ul>
      ) : (
        <ul class="board" aria-label="Labs">
          {props.labs.map((l) => (
            <li class={l.status}>
              <span class="lab">{l.lab}</span>
              <span class="status">
                {l.status === "claimed" && l.firstName ? `claimed by ${l.firstName}` : statusText[l.status]}
              </span>
            </li>
          ))}
        </ul>
      )}
      {props.open ? (
        <section aria-labelledby="claim">
          <h2 id="claim">
            {byod ? "Use your own machine as your lab" : joins ? "Join the line for a lab" : "Claim a lab"}
          </h2>
          {byod ? (
            <p class="hint">
              Your lab is built on your own computer. Fill in the form: you get a page with one line to run on
              it, and the page then shows your lab being built.
            </p>
          ) : null}
          {joins ? (
            <p class="hint">
              No lab is free for you right now. Join the line: the next lab that comes free is yours, in the
              order students joined, on the page you get.
            </p>
          ) : null}
          <form method="post" action="/claim" novalidate>
            <Csrf token={props.csrf} />
            <Alert message={props.message} />
            <Field id="name" label="Your name" errors={errors}>
              <input
                id="name"
                name="name"
                type="text"
                required
                maxlength={80}
                autocomplete="name"
                value={props.values?.name ?? ""}
                aria-invalid={invalid("name")}
                aria-describedby={describedBy("name", errors)}
              />
            </Field>
            <Field id="email" label="Your email" errors={errors} hint="Only the instructor sees it.">
              <input
                id="email"
                name="email"
                type="email"
                required
                maxlength={200}
                autocomplete="email"
                value={props.values?.email ?? ""}
                aria-invalid={invalid("email")}
                aria-describedby={describedBy("email", errors, true)}
              />
            </Field>
            <Field
              id="pin"
              label="Choose a 6-digit PIN"
              errors={errors}
              hint="With your email it gets your lab back on another device. Avoid 123456, 111111 and the like."
            >
              <input
                id="pin"
                name="pin"
                type="password"
                required
                inputmode="numeric"
                pattern="[0-9]{6}"
                minlength={6}
                maxlength={6}
                autocomplete="new-password"
                aria-invalid={invalid("pin")}
                aria-describedby={describedBy("pin", errors, true)}
              />
            </Field>
            <button type="submit">
              {byod ? "Get my join line" : joins ? "Join the line" : "Claim my lab"}
            </button>
          </form>
        </section>
      ) : (
        <>
          <Alert message={props.message} />
          <p class="notice">Claiming is closed right now. Your instructor will open it.</p>
        </>
      )}
      <h2>Already have a lab?</h2>
      <p>
        <a href="/recover">Get it back</a> with your email and PIN.
      </p>
    </Layout>
  );
}

const isWebUrl = (s: string) => /^https?:\/\//i.test(s);

function Link(props: { href: string; children: Child }) {
  return isWebUrl(props.href) ? (
    <a href={props.href} rel="noopener noreferrer" target="_blank">
      {props.children}
    </a>
  ) : (
    <code>{props.href}</code>
  );
}

/** When the labs are removed: the browser shows it in the student's zone (web/time.tsx). */
const endsAt = (expiry: string) => <Time at={expiry} />;

/** The title of a page while a warning shows: the minutes left come first, so a tab shows them. */
const warnTitle = (left: TimeLeft | undefined, title: string) =>
  left && (left.level === "soon" || left.level === "urgent") ? `${left.text} left · ${title}` : title;

/** The time left, and 30 and 10 minutes before the end a warning to save one's work (`what`: "lab", ...). */
function EndNotice(props: { left: TimeLeft; what: "lab" | "workshop" }) {
  const { left } = props;
  const removed = props.what === "lab" ? "the lab is removed" : "the labs are removed";
  switch (left.level) {
    case "time-left":
      return (
        <p class="notice" id="time-left">
          {props.what === "lab" ? `Time left: ${left.text}` : `The workshop ends in ${left.text}`} ({removed}{" "}
          at {endsAt(left.expiry)}).
        </p>
      );
    case "soon":
      return (
        <p class="warning" id="time-left" role="status">
          {`${left.text} left: ${removed} at `}
          {endsAt(left.expiry)}. Save your work somewhere else now.
        </p>
      );
    case "urgent":
      return (
        <p class="alert" id="time-left" role="alert">
          {`Only ${left.text} left: ${removed} at `}
          {endsAt(left.expiry)}. Save your work now.
        </p>
      );
    default:
      return (
        <p class="alert" id="time-left" role="alert">
          {props.what === "lab"
            ? "This workshop's time is up: the lab is being removed."
            : "This workshop's time is up: the labs are being removed."}
        </p>
      );
  }
}

/** How often a flagged lab's page reloads itself. */
const HEALTH_REFRESH_SECONDS = 20;

/** "Check my work": a plain POST form, and each check's last result for this claim, with its hint when it failed. */
function ChecksSection(props: {
  checks: CheckView[];
  csrf: string;
  token: string;
  checked: boolean;
  message?: string | undefined;
}) {
  const passed = props.checks.filter((c) => c.passed === true).length;
  const ran = props.checks.some((c) => c.passed !== null);
  return (
    <section class="checks" id="checks" aria-labelledby="checks-h">
      <h2 id="checks-h">Check my work</h2>
      {props.message ? (
        <p class="alert" role="alert">
          {props.message}
        </p>
      ) : props.checked ? (
        <p class={passed === props.checks.length ? "notice" : "warning"} role="status">
          {passed === props.checks.length
            ? props.checks.length === 1
              ? "The check passed."
              : `All ${props.checks.length} checks passed.`
            : props.checks.length === 1
              ? "The check did not pass yet."
              : `${passed} of ${props.checks.length} checks passed.`}
        </p>
      ) : null}
      <ul class="checks">
        {props.checks.map((c) => (
          <li class={c.passed === null ? "not-run" : c.passed ? "passed" : "failed"}>
            <span class="check-state">{c.passed === null ? "–" : c.passed ? "✓" : "✗"}</span>{" "}
            <span class="check-name">{c.name}</span>
            <span class="check-status">
              {c.passed === null
                ? " not checked yet"
                : c.passed
                  ? " passed"
                  : c.timedOut
                    ? " did not finish in time"
                    : " not yet"}
            </span>
            {c.passed === false && c.hint ? <p class="check-hint">Hint: {c.hint}</p> : null}
            {c.ranAt ? (
              <p class="check-when">
                Checked at <Time at={c.ranAt} show="exact" />
              </p>
            ) : null}
            {c.passed === false && c.output ? (
              <details>
                <summary>What the check printed</summary>
                <pre>{c.output}</pre>
              </details>
            ) : null}
          </li>
        ))}
      </ul>
      <form method="post" action={`/l/${props.token}/check#checks`}>
        <Csrf token={props.csrf} />
        <button type="submit">{ran ? "Check my work again" : "Check my work"}</button>
      </form>
    </section>
  );
}

export function LabView(props: {
  page: LabPage;
  now: Date;
  checks?: CheckView[];
  csrf?: string | undefined;
  token?: string;
  checked?: boolean;
  checkMessage?: string | undefined;
}) {
  const { page } = props;
  const urls = page.access?.urls ?? [];
  const credentials = page.access?.credentials ?? [];
  const other = page.access?.other ?? [];
  const left = page.expiry ? timeLeft(page.expiry, props.now) : undefined;
  const guide = page.guideUrl && isWebUrl(page.guideUrl) ? page.guideUrl : undefined;
  // The page looks again by itself when a warning is due, and every minute during one: no script needed.
  // A failing lab's page looks every HEALTH_REFRESH_SECONDS, so a swap shows the new lab by itself.
  // So does a lab being updated by a rollout: the page shows the new lab once it is promoted.
  // So does a lab still being built (a student's own machine, claimed before its lab is built), and one whose
  // machine stopped calling in: the page shows when it is ready, or back.
  const watching = page.build !== "ready" || page.unreachable;
  const refresh =
    page.failing || page.update === "updating" || watching
      ? Math.min(left?.refreshSeconds ?? HEALTH_REFRESH_SECONDS, HEALTH_REFRESH_SECONDS)
      : left?.refreshSeconds;
  return (
    <Layout title={warnTitle(left, `Your lab: ${page.lab}`)} refreshSeconds={refresh} lab>
      <div class={guide ? "lab-grid" : undefined}>
        <div class="lab-details">
          <h1>Your lab: {page.lab}</h1>
          <p>
            Hello {page.name}. This page is yours: keep its address private, and bookmark it to come back.
          </p>
          {left ? <EndNotice left={left} what="lab" /> : null}
          {page.unreachable ? (
            <p class="alert" id="lab-reachable" role="alert">
              Your lab's machine stopped calling in
              {page.lastSeenAt ? (
                <>
                  {" "}
                  (last heard from <Time at={page.lastSeenAt} show="relative" now={props.now} />)
                </>
              ) : null}
              . If it is your own computer, check that it is on, online and that the agent still runs (bash
              ~/.labfleet-agent/agent.sh run). This page says so here as soon as it calls in again.
            </p>
          ) : null}
          {page.build !== "ready" ? (
            <p class="alert" id="lab-build" role="status">
              {page.build === "waiting"
                ? "Your machine has joined. Your lab is built on it once the workshop starts (or your instructor lets it in): this page shows it here."
                : page.build === "failed"
                  ? "Building your lab failed. Your instructor has been told."
                  : `Your lab is being built${page.phase ? ` (now: ${page.phase})` : ""}. This page shows it here as soon as it is ready.`}
            </p>
          ) : null}
          {page.failing ? (
            <p class="alert" id="lab-health" role="alert">
              {page.autoSwap
                ? "Your lab is not answering: moving you to a new lab as soon as one is free. This page shows it here, at the same address."
                : "Your lab is not answering; your instructor has been told. This page shows your new lab here, at the same address, if you are moved."}
            </p>
          ) : null}
          {page.update === "updating" ? (
            <p class="alert" id="lab-update" role="status">
              Your instructor is updating this lab. A new copy is being built beside it; once it passes its
              checks, this page shows it here, at the same address. Save your work somewhere else now: what is
              on the lab now is not carried over.
            </p>
          ) : page.update === "updated" ? (
            <p class="alert" id="lab-update" role="status">
              Your lab was updated: this page now shows the new one. Sign in again with the details below.
            </p>
          ) : null}
          {page.access || page.build !== "ready" ? null : (
            <p class="alert" role="alert">
              The access details of this lab are not there yet. Reload in a minute, or ask your instructor.
            </p>
          )}
          {urls.length ? (
            <>
              <h2>Open</h2>
              <dl>
                {urls.map(({ label, value }) => (
                  <>
                    <dt>{label}</dt>
                    <dd>
                      <Link href={value}>{value}</Link>
                    </dd>
                  </>
                ))}
              </dl>
            </>
          ) : null}
          {credentials.length ? (
            <>
              <h2>Sign in with</h2>
              <dl>
                {credentials.map(({ label, value }) => (
                  <>
                    <dt>{label}</dt>
                    <dd>
                      <code data-copy={label}>{value}</code>
                    </dd>
                  </>
                ))}
              </dl>
            </>
          ) : null}
          {other.length ? (
            <>
              <h2>Details</h2>
              <dl>
                {other.map(({ label, value }) => (
                  <>
                    <dt>{label}</dt>
                    <dd>
                      <code>{value}</code>
                    </dd>
                  </>
                ))}
              </dl>
            </>
          ) : null}
          <p class="sr-only" id="copy-status" role="status" aria-live="polite" />
          {page.access?.notes.length ? (
            <>
              <h2>Notes</h2>
              {page.access.notes.map((note) => (
                <p>{note}</p>
              ))}
            </>
          ) : null}
          {page.sshCommand ? (
            <>
              <h2>SSH</h2>
              <p>
                <code data-copy="the SSH command">{page.sshCommand}</code>
              </p>
              {page.hostKeys.length ? (
                <>
                  <p>
                    The first time you connect, ssh shows the host's key fingerprint and asks whether to trust
                    it. Answer yes only if it is {page.hostKeys.length === 1 ? "this one" : "one of these"}:
                  </p>
                  <ul>
                    {page.hostKeys.map((k) => (
                      <li>
                        <code>{k.fingerprint}</code> ({k.type})
                      </li>
                    ))}
                  </ul>
                </>
              ) : null}
            </>
          ) : null}
          {props.checks?.length && props.csrf && props.token ? (
            <ChecksSection
              checks={props.checks}
              csrf={props.csrf}
              token={props.token}
              checked={props.checked === true}
              message={props.checkMessage}
            />
          ) : null}
          {page.guideUrl && !guide ? (
            <>
              <h2>Workshop guide</h2>
              <p>
                <code>{page.guideUrl}</code>
              </p>
            </>
          ) : null}
        </div>
        {guide ? (
          <aside class="guide" aria-labelledby="guide-h">
            <h2 id="guide-h">Workshop guide</h2>
            <p>
              <Link href={guide}>Open the guide in a new tab</Link>
            </p>
            {/* Beside the details on a wide screen, below them on a phone. The guide's own site decides
                whether it may be framed; the link above works either way. */}
            <iframe
              class="guide-frame"
              src={guide}
              title="Workshop guide"
              loading="lazy"
              referrerpolicy="no-referrer"
              sandbox="allow-scripts allow-same-origin allow-popups allow-popups-to-escape-sandbox allow-forms"
            />
          </aside>
        ) : null}
      </div>
    </Layout>
  );
}

/** A student in the waiting line: their number, reloading itself until their lab is handed over. */
export function WaitingView(props: { page: WaitingPage; token: string; csrf: string }) {
  const p = props.page;
  const others = p.waiting - 1;
  return (
    <Layout title={`Number ${p.number} in line`} refreshSeconds={WAITING_REFRESH_SECONDS}>
      <h1>You are number {p.number} in line</h1>
      <p>
        Hello {p.name}. {p.number === 1 ? "You are next: the" : "The"} next lab that comes free is handed to
        the first in line. This page checks every {WAITING_REFRESH_SECONDS} seconds and shows your lab here,
        at this same address, as soon as it is yours.
      </p>
      <ul class="facts">
        <li>
          {others === 0
            ? "Nobody else is"
            : `${others} ${others === 1 ? "other student is" : "other students are"}`}{" "}
          waiting.
        </li>
        <li>
          The workshop has {p.labs} {p.labs === 1 ? "lab" : "labs"}
          {p.building ? `, ${p.building} of them still being built` : ""}.
        </li>
      </ul>
      <p class="hint">
        Keep this page open, or come back with your email and PIN on any device (“Get it back”).
      </p>
      <form class="inline-form" method="post" action={`/l/${props.token}/leave`}>
        <Csrf token={props.csrf} />
        <button type="submit" class="secondary">
          Leave the line
        </button>
      </form>
    </Layout>
  );
}

/** How often a join page looks again by itself: it shows the lab once the student's machine joined. */
export const JOIN_REFRESH_SECONDS = 10;

/** Bring your own device: the one line the student runs on their own machine, until the machine joins. */
export function JoinView(props: { page: JoinPage; now: Date }) {
  const p = props.page;
  if (p.state !== "waiting")
    return (
      <Layout title="Your join line no longer works">
        <h1>Your join line no longer works</h1>
        <p id="join-state">
          {p.state === "ended"
            ? "The workshop has ended."
            : "It expired before a machine joined with it. Go back to the board and fill in the form again for a new one."}
        </p>
        {p.state === "expired" ? (
          <a class="button" href="/board">
            Back to the board
          </a>
        ) : null}
      </Layout>
    );
  return (
    <Layout title="Use your own machine" refreshSeconds={JOIN_REFRESH_SECONDS}>
      <h1>Use your own machine as your lab</h1>
      <p>
        Hello {p.name}. Open a terminal on the computer you want to use for the workshop (Linux or macOS with
        bash and curl) and run this line there, as yourself (not root):
      </p>
      <p>
        <code id="join-command" data-copy="the join line">
          {p.command}
        </code>
      </p>
      <p class="sr-only" id="copy-status" role="status" aria-live="polite" />
      <ul class="facts">
        <li>
          It works once, for one machine, until <Time at={p.expiry} now={props.now} />.
        </li>
        <li>
          It installs nothing as root: a small script calls labfleet and builds your lab in your home folder.
          Keep the terminal open while you work (or restart it later with bash ~/.labfleet-agent/agent.sh
          run).
        </li>
        <li>Keep this line to yourself: whoever runs it first gets your lab.</li>
      </ul>
      <p class="hint" id="join-state">
        This page checks every {JOIN_REFRESH_SECONDS} seconds and shows your lab here, at this same address,
        once your machine has joined.
      </p>
    </Layout>
  );
}

export function LinkGone() {
  return (
    <Layout title="This link no longer works">
      <h1>This link no longer works</h1>
      <p>
        It was replaced by a newer link, or the lab was given back (or its machine was removed from the
        workshop: then you may claim again from the board). If this is your lab, get it back with your email
        and PIN.
      </p>
      <a class="button" href="/recover">
        Get it back
      </a>
    </Layout>
  );
}

export function RecoverPage(props: {
  csrf: string;
  error?: string | undefined;
  email?: string;
  /** The workshop's students use their own machines: until one joined, there is no lab to get back. */
  byod?: boolean;
}) {
  return (
    <Layout title="Get your lab back">
      <h1>Get your lab back</h1>
      <p>
        Enter the email and PIN you claimed your lab (or joined the line) with. You get a new personal link;
        the old one stops.
      </p>
      {props.byod ? (
        <p id="recover-byod">
          Your machine has not joined yet? Then there is no lab to get back:{" "}
          <a href="/board">claim again from the board</a> with the same name and email, and you get a new line
          to run on it.
        </p>
      ) : null}
      <form method="post" action="/recover" novalidate>
        <Csrf token={props.csrf} />
        <Alert message={props.error} />
        <label for="email">Your email</label>
        <input
          id="email"
          name="email"
          type="email"
          required
          maxlength={200}
          autocomplete="email"
          value={props.email ?? ""}
        />
        <label for="pin">Your 6-digit PIN</label>
        <input
          id="pin"
          name="pin"
          type="password"
          required
          inputmode="numeric"
          pattern="[0-9]{6}"
          maxlength={6}
          autocomplete="current-password"
        />
        <button type="submit">Get my lab back</button>
      </form>
      <p>
        <a href="/board">Back to the board</a>
      </p>
    </Layout>
  );
}

/** A cookie's lifetime in words: "24 hours", "3 days", or the browser session. */
export function cookieDuration(seconds: number): string {
  if (seconds <= 0) return "until you close the browser";
  const plural = (n: number, unit: string) => `${n} ${unit}${n === 1 ? "" : "s"}`;
  if (seconds % 86_400 === 0 && seconds >= 2 * 86_400) return plural(seconds / 86_400, "day");
  if (seconds % 3600 === 0) return plural(seconds / 3600, "hour");
  return plural(Math.round(seconds / 60), "minute");
}

export function PrivacyPage() {
  const cookies = Object.values(COOKIES);
  return (
    <Layout title="Privacy">
      <h1>What this portal keeps</h1>
      <h2>When you claim a lab</h2>
      <ul>
        <li>your name (others on the board see only your first name);</li>
        <li>your email, encrypted; only your instructor can read it;</li>
        <li>a scrypt hash of your PIN, never the PIN itself;</li>
        <li>your personal link as a SHA-256 hash, never the link itself;</li>
        <li>when you claimed the lab and when you first opened it.</li>
      </ul>
      <p>
        Kept <span id="retention-claims">{RETENTION.claims}</span>.
      </p>
      <h2>When you use your own machine</h2>
      <p>
        In a workshop where students bring their own computers, the same, and until your machine joins, the
        line to run on it (encrypted) with your name, kept a day after the line stops working. Your machine
        reports its name, system, processor count, memory, free disk and a few installed commands, which your
        instructor sees.
      </p>
      <h2>Failed attempts</h2>
      <p>
        Counters of failed attempts (such as wrong workshop codes and wrong PINs) per network address and per
        browser, to slow down guessing, and a note of the network address when it is held back. Each counter
        covers {RATE.windowSeconds / 60} minutes and is kept{" "}
        <span id="retention-counters">{RETENTION.rateCounters}</span>.
      </p>
      <h2>Cookies</h2>
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">Cookie</th>
              <th scope="col">Why</th>
              <th scope="col">How long</th>
            </tr>
          </thead>
          <tbody>
            {cookies.map((k) => (
              <tr id={`cookie-${k.name}`}>
                <td>
                  <code>{k.name}</code>
                </td>
                <td>{k.purpose}</td>
                <td data-seconds={String(k.maxAgeSeconds)}>{cookieDuration(k.maxAgeSeconds)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <p>No tracking, no advertising, no third-party cookies. Logs never hold your email, PIN or links.</p>
      <p>
        <a href="/">Back to the portal</a>
      </p>
    </Layout>
  );
}

export function ErrorPage(props: { title: string; message: string; back?: string }) {
  return (
    <Layout title={props.title}>
      <h1>{props.title}</h1>
      <p>{props.message}</p>
      <p>
        <a href={props.back ?? "/"}>Back to the portal</a>
      </p>
    </Layout>
  );
}
