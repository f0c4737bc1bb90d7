// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Child } from "hono/jsx";
import type { TokenInfo } from "../../shared/auth/tokens.ts";
import type { EventView } from "../../shared/fleet/events.ts";
import type { OpenAccessView } from "../../shared/fleet/open-access.ts";
import type { HostView, RunView, WorkshopSummary } from "../../shared/fleet/workshops.ts";
import type { BoardLab } from "../../shared/portal/claims.ts";
import type { ClaimRow, PortalView } from "../../shared/portal/portal.ts";
import type { HeldBack, Hold } from "../../shared/portal/rate-limit.ts";
import type { ErrorDetail } from "../../shared/runtime/errors.ts";
import { eventLabel, eventSentence } from "./activity.ts";
import { duration, timeLeft, when, whenExact } from "./format.ts";
import { CSRF_FIELD } from "./session.ts";

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
function DataTable(props: {
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
    <div class={props.wrapClass ?? "table-wrap"}>
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

function Details(props: { details: ErrorDetail[] }) {
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

const State = (props: { state: string; label?: string }) => (
  <span class={`state st-${props.state}`}>{props.label ?? props.state.replace(/_/g, " ")}</span>
);

// ------------------------------------------------------------------------------------------------- sign-in

export function LoginPage(props: {
  csrf: string;
  next?: string | undefined;
  error?: string | undefined;
  notice?: string | undefined;
  providers: ProviderLink[];
}) {
  return (
    <Layout title="Sign in">
      <div class="login">
        <h1>Sign in to the instructor console</h1>
        <Notice text={props.notice} />
        {props.error ? (
          <p class="alert" role="alert" id="token-error" data-login-error="">
            {props.error}
          </p>
        ) : null}
        <form method="post" action="/console/login" class="panel">
          <input type="hidden" name={CSRF_FIELD} value={props.csrf} />
          {props.next ? <input type="hidden" name="next" value={props.next} /> : null}
          <label for="token">Instructor token</label>
          <input
            id="token"
            name="token"
            type="password"
            required
            autocomplete="current-password"
            spellcheck={false}
            aria-describedby={props.error ? "token-hint token-error" : "token-hint"}
            aria-invalid={props.error ? "true" : undefined}
          />
          <p class="hint" id="token-hint">
            <code>labfleet dev</code> prints it when it starts (its console link signs you in directly). In
            the cloud, use the bootstrap token (the <code>InstructorToken</code> secret).
          </p>
          <p>
            <button type="submit">Sign in</button>
          </p>
        </form>
        {props.providers.length ? (
          <section aria-labelledby="providers">
            <h2 id="providers">Or sign in with an account</h2>
            <ul class="providers">
              {props.providers.map((p) => (
                <li>
                  <a class="button secondary" href={p.href} data-provider={p.id}>
                    {p.label}
                  </a>
                </li>
              ))}
            </ul>
          </section>
        ) : null}
      </div>
    </Layout>
  );
}

// ----------------------------------------------------------------------------------------- workshops list

export interface WorkshopRow extends WorkshopSummary {
  claims: number;
}

export function WorkshopRows(props: { rows: WorkshopRow[]; now: Date }) {
  if (props.rows.length === 0)
    return (
      <tr>
        <td colspan={5}>
          No workshops yet: <a href="/console/new">create one from its workshop.yaml</a>.
        </td>
      </tr>
    );
  return (
    <>
      {props.rows.map((w) => (
        <tr id={`workshop-${w.name}`}>
          <th scope="row">
            <a href={`/console/w/${w.name}`}>{w.name}</a>
          </th>
          <td>
            <State state={w.state} />
          </td>
          <td class="num">
            {w.hosts.ready}/{w.hosts.total} ready{w.hosts.failed ? `, ${w.hosts.failed} failed` : ""}
          </td>
          <td class="num">{w.claims}</td>
          <td class="num">{w.state === "torn_down" ? "" : timeLeft(w.expiry, props.now)}</td>
        </tr>
      ))}
    </>
  );
}

export function WorkshopsPage(props: {
  viewer: Viewer;
  rows: WorkshopRow[];
  now: Date;
  notice?: string | undefined;
}) {
  return (
    <Layout title="Workshops" viewer={props.viewer} section="workshops" live="/console/live">
      <h1>Workshops</h1>
      <Notice text={props.notice} />
      <p>
        <a class="button" href="/console/new">
          New workshop
        </a>
      </p>
      <DataTable
        caption="Every workshop, its hosts and claims (updates live)"
        columns={["Workshop", "State", "Hosts", "Claims", "Time left"]}
        bodyId="live-workshops"
      >
        <WorkshopRows rows={props.rows} now={props.now} />
      </DataTable>
    </Layout>
  );
}

// ------------------------------------------------------------------------------------------- new workshop

export function NewWorkshopPage(props: {
  viewer: Viewer;
  yaml?: string;
  baseDir?: string;
  message?: string | undefined;
  errors?: ErrorDetail[];
}) {
  const errors = props.errors ?? [];
  const lines = (props.yaml ?? "").split("\n");
  const failed = Boolean(props.message);
  return (
    <Layout title="New workshop" viewer={props.viewer} section="new">
      <h1>New workshop</h1>
      <p>
        Paste <code>workshop.yaml</code> or choose the file. A workshop whose name exists already is updated
        (its hosts stay); nothing is provisioned until you press Up on its page.
      </p>
      {failed ? (
        <div class="alert" role="alert" id="yaml-errors" tabindex={-1}>
          <h2>{props.message}</h2>
          {errors.length ? (
            <ul>
              {errors.map((e) => (
                <li data-path={e.path}>
                  <code>{e.path}</code>
                  {e.line !== undefined ? ` (line ${e.line}, column ${e.column})` : ""}: {e.message}
                  {e.line !== undefined && lines[e.line - 1] !== undefined ? (
                    <code class="yaml-line">
                      {e.line}: {lines[e.line - 1]}
                    </code>
                  ) : null}
                </li>
              ))}
            </ul>
          ) : null}
        </div>
      ) : null}
      <form method="post" action="/console/new" enctype="multipart/form-data" class="panel">
        <Csrf token={props.viewer.csrf} />
        <label for="yaml">workshop.yaml</label>
        <textarea
          id="yaml"
          name="yaml"
          rows={18}
          spellcheck={false}
          aria-describedby={failed ? "yaml-hint yaml-errors" : "yaml-hint"}
          aria-invalid={failed ? "true" : undefined}
        >
          {/* The parser drops one newline right after <textarea>: this one, so the text keeps its lines. */}
          {`\n${props.yaml ?? ""}`}
        </textarea>
        <p class="hint" id="yaml-hint">
          Errors are shown at their YAML path and line. See docs/workshop-yaml.md for every key.
        </p>
        <label for="file">Or choose the file</label>
        <input id="file" name="file" type="file" accept=".yaml,.yml,text/yaml,application/yaml" />
        <label for="base-dir">Folder of workshop.yaml (optional)</label>
        <input
          id="base-dir"
          name="baseDir"
          type="text"
          value={props.baseDir ?? ""}
          spellcheck={false}
          aria-describedby="base-dir-hint"
        />
        <p class="hint" id="base-dir-hint">
          Only for a <code>lab.source</code> that is a relative path: the absolute folder it is relative to,
          on the machine that runs labfleet.
        </p>
        <p>
          <button type="submit">Save workshop</button>
        </p>
      </form>
    </Layout>
  );
}

// ------------------------------------------------------------------------------------------ one workshop

export function Tabs(props: { name: string; current: "hosts" | "portal" | "runs" }) {
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
    </nav>
  );
}

export interface WorkshopHeader {
  summary: WorkshopSummary;
  activeRun?: RunView | undefined;
  now: Date;
}

export function Summary(props: WorkshopHeader) {
  const s = props.summary;
  return (
    <ul class="summary">
      <li>
        State: <State state={s.state} />
      </li>
      <li>
        {s.hosts.ready}/{s.hosts.total} ready
      </li>
      <li>{s.hosts.failed} failed</li>
      <li>Provider: {s.provider}</li>
      {s.state === "torn_down" ? null : <li>{timeLeft(s.expiry, props.now)}</li>}
      {props.activeRun ? (
        <li>
          Running: {props.activeRun.kind} (<a href={`/console/w/${s.name}/runs`}>runs</a>)
        </li>
      ) : null}
    </ul>
  );
}

/** Phases done over phases reported; a ready lab is complete whatever its setup reported. */
export function progressOf(h: HostView): { done: number; total: number } {
  const total = Math.max(h.phases.length, 1);
  if (h.state === "ready") return { done: total, total };
  return { done: h.phases.filter((p) => p.state === "done").length, total };
}

function phaseText(h: HostView): string {
  if (h.state === "ready") return "ready";
  if (h.state === "torn_down") return "";
  const { done } = progressOf(h);
  const known = h.phases.length ? ` (${done}/${h.phases.length} done)` : "";
  return `${h.phase ?? "waiting"}${known}`;
}

export function HostRows(props: { hosts: HostView[] }) {
  if (props.hosts.length === 0)
    return (
      <tr>
        <td colspan={5}>No hosts yet: press Up to provision them.</td>
      </tr>
    );
  return (
    <>
      {props.hosts.map((h) => {
        const p = progressOf(h);
        return (
          <tr id={`host-${h.id}`} data-state={h.state}>
            <th scope="row">{h.id}</th>
            <td>
              <State state={h.state} />
            </td>
            <td class="num">
              <progress
                max={p.total}
                value={p.done}
                aria-label={`${h.id}: ${p.done} of ${p.total} phases done`}
              />
              <span class="phase">{phaseText(h)}</span>
            </td>
            <td class="num">{duration(h.elapsedSeconds) ?? ""}</td>
            <td>{h.error ? <pre class="error">{h.error}</pre> : ""}</td>
          </tr>
        );
      })}
    </>
  );
}

/** The newest events first: one row each, with the event's id so a live update never adds it twice. */
export function ActivityRows(props: {
  events: EventView[];
  /** Without events, a "nothing yet" row (the page's), or nothing at all (a live update's). */
  placeholder?: boolean;
}) {
  if (props.events.length === 0)
    return props.placeholder === false ? null : (
      <tr data-empty="">
        <td colspan={4}>
          Nothing has happened yet: events appear here as hosts get ready or fail, labs are claimed and runs
          go.
        </td>
      </tr>
    );
  return (
    <>
      {props.events.map((e) => (
        <tr id={`event-${e.id}`} data-type={e.type}>
          <td class="num">
            <time datetime={e.at}>{whenExact(e.at)}</time>
          </td>
          <td>
            <span class={`state ev-${e.type.replace(/[._]/g, "-")}`}>{eventLabel(e.type)}</span>
          </td>
          <td>{e.hostId ?? ""}</td>
          <td class="what">{eventSentence(e)}</td>
        </tr>
      ))}
    </>
  );
}

/**
 * Whether a workshop's lab UIs can be opened to students from here: `firewall` when its provider manages
 * security groups (aws), with the ports concerned; `none` for local and static labs (or a provider this
 * runtime lacks).
 */
export type LabAccess =
  | {
      kind: "firewall";
      /** The `lab.ui_ports` opened to the world (never 22). */
      ports: number[];
      /** `provider.security_group_ids` is set: labfleet changes nothing and says what to open by hand. */
      byo: boolean;
      /** `provider.student_access: open`: up opens access by itself once every lab is ready. */
      automatic: boolean;
    }
  | { kind: "none"; provider: string; available: boolean };

export const portText = (ports: number[]) =>
  ports.length ? `TCP ${ports.join(", ")}` : "no port (lab.ui_ports lists none)";

/** The workshop page's lab access actions: open (confirmed on the next page) and close, or a note. */
function AccessActions(props: { base: string; csrf: string; access: LabAccess }) {
  const a = props.access;
  if (a.kind === "none")
    return (
      <div class="card" id="lab-access">
        <h3 id="act-access">Lab access</h3>
        <p class="hint" id="access-note">
          {a.available
            ? "Nothing to open: local and static (bring-your-own-host) labs have no firewall that labfleet manages, so their lab UIs are reachable as the hosts' own network allows."
            : `The ${a.provider} provider is not available here, so lab access cannot be opened or closed from this console.`}
        </p>
      </div>
    );
  return (
    <>
      <form method="post" action={`${props.base}/open-access`} aria-labelledby="act-open-access">
        <Csrf token={props.csrf} />
        <h3 id="act-open-access">Open lab access</h3>
        <p class="hint">
          {a.byo
            ? `This workshop uses its own security groups: labfleet changes none and says what to open by hand (${portText(a.ports)}).`
            : `Opens the lab UIs (${portText(a.ports)}) of every host to the internet, once every lab is ready. Port 22 stays closed.`}{" "}
          You confirm on the next page.
        </p>
        {a.automatic ? (
          <p class="hint">
            <code>student_access: open</code> is set: Up opens it by itself once every lab is ready.
          </p>
        ) : null}
        <button type="submit">Open lab access…</button>
      </form>
      <form method="post" action={`${props.base}/close-access`} aria-labelledby="act-close-access">
        <Csrf token={props.csrf} />
        <h3 id="act-close-access">Close lab access</h3>
        <p class="hint">
          {a.byo
            ? "Says which inbound rules to remove from your security groups."
            : "Removes the internet rules: only the operator addresses reach the lab UIs again."}
        </p>
        <button type="submit" class="secondary">
          Close lab access
        </button>
      </form>
    </>
  );
}

/** What opening or closing lab access did: the provider's message (with own groups, what to do by hand). */
export function AccessResultPage(props: { viewer: Viewer; view: OpenAccessView }) {
  const v = props.view;
  const verb = v.open ? "open" : "close";
  const title =
    v.mode === "byo"
      ? `${v.workshop}: ${verb} the lab UIs by hand`
      : `${v.workshop}: lab access ${v.open ? "opened" : "closed"}`;
  return (
    <ResultPage viewer={props.viewer} title={title} back={`/console/w/${v.workshop}`}>
      <p class="notice" role="status" id="access-message">
        {v.message}
      </p>
      <ul class="summary">
        <li>Ports: {portText(v.ports)}</li>
        <li>Security groups: {v.groupIds.length ? v.groupIds.join(", ") : "none"}</li>
        <li>
          {v.mode === "byo"
            ? "labfleet changed nothing (the workshop's own groups)"
            : v.changed
              ? "labfleet changed the rules"
              : "nothing needed to change"}
        </li>
      </ul>
      {v.mode === "byo" ? (
        <p>
          Make the change in your security groups (EC2 console or <code>aws ec2</code>); labfleet never edits
          groups it does not own.
        </p>
      ) : v.open ? (
        <p>
          Anyone with a host's address can reach its lab UIs now, not only your students. Close lab access
          when the workshop ends; teardown removes the security group anyway.
        </p>
      ) : null}
    </ResultPage>
  );
}

export interface ActivityData {
  /** Newest first. */
  events: EventView[];
  /** The newest event's id: where the page's live updates continue from. */
  last: string | null;
}

export function WorkshopPage(
  props: WorkshopHeader & {
    viewer: Viewer;
    hosts: HostView[];
    canExtend: boolean;
    access: LabAccess;
    activity: ActivityData;
    notice?: string | undefined;
  },
) {
  const name = props.summary.name;
  const base = `/console/w/${name}`;
  const csrf = props.viewer.csrf;
  // A workshop torn down (or going) has nothing left to deploy, diagnose, extend or tear down: only Up.
  const gone = props.summary.state === "torn_down" || props.summary.state === "tearing_down";
  return (
    <Layout title={name} viewer={props.viewer} live={`${base}/live`}>
      <Tabs name={name} current="hosts" />
      <h1>{name}</h1>
      <div id="live-summary" aria-live="polite">
        <Summary summary={props.summary} activeRun={props.activeRun} now={props.now} />
      </div>
      <Notice text={props.notice} />
      <h2 id="hosts-h">Hosts</h2>
      <DataTable
        labelledBy="hosts-h"
        columns={["Host", "State", "Progress", "Elapsed", "Last error"]}
        bodyId="live-hosts"
      >
        <HostRows hosts={props.hosts} />
      </DataTable>
      <h2 id="actions-h">Actions</h2>
      <div class="actions">
        <form method="post" action={`${base}/up`} aria-labelledby="act-up">
          <Csrf token={csrf} />
          <h3 id="act-up">Up</h3>
          <p class="hint">
            Provision every host, deploy the lab, wait until ready. Running it again resumes.
          </p>
          <button type="submit">Up</button>
        </form>
        {gone ? null : (
          <>
            <form method="post" action={`${base}/deploy`} aria-labelledby="act-deploy">
              <Csrf token={csrf} />
              <h3 id="act-deploy">Deploy</h3>
              <label for="deploy-hosts">Hosts (blank: all)</label>
              <input
                id="deploy-hosts"
                name="hosts"
                type="text"
                spellcheck={false}
                placeholder="student-01 student-02"
              />
              <label class="check">
                <input id="deploy-force" name="force" type="checkbox" value="yes" /> Rebuild labs already
                built
              </label>
              <button type="submit">Deploy</button>
            </form>
            <form method="post" action={`${base}/retry`} aria-labelledby="act-retry">
              <Csrf token={csrf} />
              <h3 id="act-retry">Retry failed</h3>
              <p class="hint">Reads every host again, then rebuilds the labs that failed.</p>
              <button type="submit">Retry failed hosts</button>
            </form>
            <form method="post" action={`${base}/diagnose`} aria-labelledby="act-diagnose">
              <Csrf token={csrf} />
              <h3 id="act-diagnose">Diagnose</h3>
              <label class="check">
                <input id="diagnose-all" name="all" type="checkbox" value="yes" /> All hosts, not only failed
                ones
              </label>
              <p class="hint">Logs, phases and a summary per host, secrets redacted.</p>
              <button type="submit">Download diagnosis</button>
            </form>
            {props.canExtend ? (
              <form method="post" action={`${base}/extend`} aria-labelledby="act-extend">
                <Csrf token={csrf} />
                <h3 id="act-extend">Extend</h3>
                <label for="extend-hours">Hours to add to the teardown time</label>
                <input
                  id="extend-hours"
                  name="hours"
                  type="number"
                  min="0.5"
                  max="168"
                  step="0.5"
                  value="2"
                  required
                />
                <button type="submit">Extend</button>
              </form>
            ) : null}
            <AccessActions base={base} csrf={csrf} access={props.access} />
            <div class="card">
              <h3 id="act-teardown">Tear down</h3>
              <p class="hint">
                Removes every host and the portal with its claims. You confirm on the next page.
              </p>
              <a class="button danger" href={`${base}/teardown`}>
                Tear down…
              </a>
            </div>
          </>
        )}
      </div>
      <h2 id="activity-h">Activity</h2>
      <DataTable
        wrapClass="table-wrap activity"
        labelledBy="activity-h"
        columns={["Time", "Event", "Host", "What happened"]}
        bodyId="live-activity"
        after={props.activity.last ?? ""}
      >
        <ActivityRows events={props.activity.events} />
      </DataTable>
      <p class="hint">Newest first; new events are added at the top as they happen.</p>
    </Layout>
  );
}

// ---------------------------------------------------------------------------------------------- portal

export interface PortalData {
  name: string;
  info?: PortalView | undefined;
  board: { open: boolean; labs: BoardLab[] };
  claims: ClaimRow[];
  /** Ready labs nobody holds: where a student can be moved. */
  free: string[];
  /** Who the portal's rate limits hold back now (the whole portal's limits, every workshop). */
  heldBack: HeldBack;
}

export function PortalSummary(props: { data: PortalData }) {
  const { info, board, claims } = props.data;
  if (!info)
    return (
      <p>
        No portal yet. Open claiming, or publish the board first so students can watch their labs get ready.
      </p>
    );
  const free = board.labs.filter((l) => l.status === "free").length;
  return (
    <dl class="summary">
      <div>
        <dt class="sr-only">Claim window</dt>
        <dd>
          Claiming:{" "}
          <State state={info.state} label={info.state === "published" ? "board only" : info.state} />
          {info.mode !== "open" ? ` (mode ${info.mode})` : ""}
        </dd>
      </div>
      <div>
        <dt class="sr-only">Workshop code</dt>
        <dd>
          Code: <code class="code-big">{info.code}</code>
        </dd>
      </div>
      <div>
        <dt class="sr-only">Claims</dt>
        <dd>
          {claims.length} claimed, {free} free of {board.labs.length}
        </dd>
      </div>
    </dl>
  );
}

const boardText: Record<BoardLab["status"], string> = {
  free: "free",
  claimed: "claimed",
  building: "still building",
  failed: "failed",
};

export function BoardItems(props: { labs: BoardLab[] }) {
  if (props.labs.length === 0) return <li>No labs yet.</li>;
  return (
    <>
      {props.labs.map((l) => (
        <li class={l.status}>
          <span class="lab">{l.lab}</span>
          <State
            state={l.status}
            label={l.status === "claimed" && l.firstName ? `claimed by ${l.firstName}` : boardText[l.status]}
          />
        </li>
      ))}
    </>
  );
}

export function ClaimRows(props: { data: PortalData; csrf: string }) {
  const { name, claims, free } = props.data;
  const base = `/console/w/${name}/portal`;
  if (claims.length === 0)
    return (
      <tr>
        <td colspan={6}>No claims yet.</td>
      </tr>
    );
  return (
    <>
      {claims.map((c) => (
        <tr id={`claim-${c.lab}`}>
          <th scope="row">{c.lab}</th>
          <td>{c.name}</td>
          <td>{c.email}</td>
          <td class="num">
            {when(c.claimedAt)}
            <br />
            <small>{c.how}</small>
          </td>
          <td class="num">
            {c.firstOpenedAt ? when(c.firstOpenedAt) : "not yet"}
            {c.locked ? (
              <>
                <br />
                <strong>PIN locked</strong>
              </>
            ) : null}
          </td>
          <td>
            <form method="post" action={`${base}/release`}>
              <Csrf token={props.csrf} />
              <input type="hidden" name="lab" value={c.lab} />
              <button type="submit" class="danger secondary" aria-label={`Release ${c.lab}`}>
                Release
              </button>
            </form>
            {c.locked ? (
              <form method="post" action={`${base}/unlock`}>
                <Csrf token={props.csrf} />
                <input type="hidden" name="lab" value={c.lab} />
                <button type="submit" class="secondary" aria-label={`Unlock the PIN of ${c.lab}'s student`}>
                  Unlock PIN
                </button>
              </form>
            ) : null}
            {free.length ? (
              <form method="post" action={`${base}/reassign`}>
                <Csrf token={props.csrf} />
                <input type="hidden" name="lab" value={c.lab} />
                <label class="sr-only" for={`move-${c.lab}`}>
                  Move the student of {c.lab} to
                </label>
                <select id={`move-${c.lab}`} name="to">
                  {free.map((f) => (
                    <option value={f}>{f}</option>
                  ))}
                </select>
                <button type="submit" class="secondary" aria-label={`Move the student of ${c.lab}`}>
                  Move
                </button>
              </form>
            ) : null}
          </td>
        </tr>
      ))}
    </>
  );
}

const holdText: Record<Hold["scope"], string> = {
  address: "everything from it",
  new_browsers: "browsers that never entered a right code",
  browser: "one browser",
};

/** Who the rate limits hold back, each address with a button that lets it in again. */
export function HeldBackSection(props: { data: PortalData; csrf: string }) {
  const { name, heldBack } = props.data;
  const { holds, portalWide } = heldBack;
  const base = `/console/w/${name}/portal`;
  const addresses = [...new Set(holds.map((h) => h.address))];
  const wide = portalWide.active ? (
    <p>
      The portal as a whole got {portalWide.wrongCodes} wrong codes (limit {portalWide.limit}): until{" "}
      {when(portalWide.liftsAt)}, students who already typed a wrong code a few times wait.
    </p>
  ) : null;
  if (addresses.length === 0)
    return (
      <>
        <p>Nobody is held back by the rate limits.</p>
        {wide}
      </>
    );
  return (
    <>
      <table aria-labelledby="held-h">
        <thead>
          <tr>
            <th scope="col">Address</th>
            <th scope="col">Held back</th>
            <th scope="col">Wrong attempts</th>
            <th scope="col">Lifts by itself</th>
            <th scope="col">Actions</th>
          </tr>
        </thead>
        <tbody>
          {addresses.map((address) =>
            holds
              .filter((h) => h.address === address)
              .map((h, i) => (
                <tr>
                  <th scope="row">{i === 0 ? address : ""}</th>
                  <td>
                    {h.scope === "browser" && h.browser ? `one browser (…${h.browser})` : holdText[h.scope]}
                  </td>
                  <td class="num">
                    {h.count} of {h.limit}
                  </td>
                  <td class="num">{when(h.liftsAt)}</td>
                  <td>
                    {i === 0 ? (
                      <form method="post" action={`${base}/unblock`}>
                        <Csrf token={props.csrf} />
                        <input type="hidden" name="address" value={address} />
                        <button type="submit" class="secondary" aria-label={`Let ${address} in again`}>
                          Let in
                        </button>
                      </form>
                    ) : null}
                  </td>
                </tr>
              )),
          )}
        </tbody>
      </table>
      {addresses.length > 1 ? (
        <form method="post" action={`${base}/unblock`}>
          <Csrf token={props.csrf} />
          <input type="hidden" name="all" value="yes" />
          <button type="submit" class="secondary">
            Let every address in
          </button>
        </form>
      ) : null}
      {wide}
    </>
  );
}

export function PortalPage(props: { viewer: Viewer; data: PortalData; notice?: string | undefined }) {
  const { name, info } = props.data;
  const base = `/console/w/${name}/portal`;
  const csrf = props.viewer.csrf;
  const button = (action: string, label: string, cls = "secondary") => (
    <form method="post" action={`${base}/${action}`}>
      <Csrf token={csrf} />
      <button type="submit" class={cls}>
        {label}
      </button>
    </form>
  );
  return (
    <Layout title={`${name}: portal`} viewer={props.viewer} live={`${base}/live`}>
      <Tabs name={name} current="portal" />
      <h1>{name}: claim portal</h1>
      <div id="live-portal" aria-live="polite">
        <PortalSummary data={props.data} />
      </div>
      <Notice text={props.notice} />
      <h2 id="window-h">Claim window</h2>
      <div class="row">
        {info?.state === "open" ? null : button("open", "Open claiming", "")}
        {info && info.state !== "closed" ? button("close", "Close claiming") : null}
        {info ? null : button("publish", "Publish the board only")}
        {info ? button("rotate-code", "New code…", "danger secondary") : null}
        <a class="button secondary" href={`${base}/export`} download="">
          Export claims (CSV)
        </a>
        <a class="button secondary" href={`${base}/slide`}>
          Slide for the room
        </a>
      </div>
      <p class="hint">
        Students go to this site's address and type the code. A new code makes everyone type it again;
        personal links keep working.
      </p>
      <h2 id="board-h">Board</h2>
      <ul class="board" id="live-board" aria-labelledby="board-h">
        <BoardItems labs={props.data.board.labs} />
      </ul>
      <h2 id="claims-h">Claims</h2>
      <DataTable
        labelledBy="claims-h"
        columns={["Lab", "Name", "Email", "Claimed", "Opened", "Actions"]}
        bodyId="live-claims"
      >
        <ClaimRows data={props.data} csrf={csrf} />
      </DataTable>
      <h2 id="held-h">Held back by the rate limits</h2>
      <div id="live-held" aria-live="polite">
        <HeldBackSection data={props.data} csrf={csrf} />
      </div>
      <p class="hint">
        Too many wrong codes or PINs from one network hold it back for up to 20 minutes. A room behind one
        address gets in as long as its students keep their browsers; let an address in when you know it is
        your room.
      </p>
      <h2 id="revoke-h">Revoke by email</h2>
      <form method="post" action={`${base}/revoke`} class="panel" aria-labelledby="revoke-h">
        <Csrf token={csrf} />
        <label for="revoke-email">Student's email</label>
        <input id="revoke-email" name="email" type="email" required autocomplete="off" />
        <p>
          <button type="submit" class="danger secondary">
            Revoke…
          </button>
        </p>
      </form>
    </Layout>
  );
}

// ------------------------------------------------------------------------------------------------- runs

export interface RunHostRow {
  id: string;
  state: string;
  error?: string | undefined;
  seconds?: number | undefined;
}

export interface RunRow {
  run: RunView;
  hosts: RunHostRow[];
}

export function RunList(props: { runs: RunRow[] }) {
  if (props.runs.length === 0) return <p>No runs yet.</p>;
  return (
    <>
      {props.runs.map(({ run, hosts }) => (
        <section class="run panel" id={`run-${run.id}`} aria-labelledby={`run-${run.id}-h`}>
          <h2 id={`run-${run.id}-h`}>
            {run.kind} <State state={run.state} /> <small>{when(run.startedAt)}</small>
          </h2>
          <ul class="summary">
            <li>
              Run <code>{run.id}</code>
            </li>
            <li>{run.endedAt ? `took ${duration(run.durationSeconds)}` : "still running"}</li>
            <li>{run.transitions} state transitions</li>
            {run.selection ? <li>hosts: {run.selection.join(", ")}</li> : null}
          </ul>
          {run.error ? <pre class="error">{run.error}</pre> : null}
          {hosts.length ? (
            <div class="table-wrap">
              <table>
                <caption class="sr-only">Hosts of run {run.id}</caption>
                <thead>
                  <tr>
                    <th scope="col">Host</th>
                    <th scope="col">Result</th>
                    <th scope="col">Build time</th>
                    <th scope="col">Error</th>
                  </tr>
                </thead>
                <tbody>
                  {hosts.map((h) => (
                    <tr>
                      <th scope="row">{h.id}</th>
                      <td>
                        <State state={h.state} />
                      </td>
                      <td class="num">{duration(h.seconds) ?? ""}</td>
                      <td>{h.error ? <pre class="error">{h.error}</pre> : ""}</td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </div>
          ) : null}
        </section>
      ))}
    </>
  );
}

export function RunsPage(props: { viewer: Viewer; name: string; runs: RunRow[] }) {
  const base = `/console/w/${props.name}`;
  return (
    <Layout title={`${props.name}: runs`} viewer={props.viewer} live={`${base}/runs/live`}>
      <Tabs name={props.name} current="runs" />
      <h1>{props.name}: runs</h1>
      <p class="hint">
        Newest first. A host's build time is its last deploy's, shown on the run it happened in.
      </p>
      <div id="live-runs">
        <RunList runs={props.runs} />
      </div>
    </Layout>
  );
}

// ------------------------------------------------------------------------------------------- API tokens

export type TokenRow = TokenInfo & { mine: boolean };

export function TokenRows(props: { tokens: TokenRow[]; csrf: string }) {
  if (props.tokens.length === 0)
    return (
      <tr>
        <td colspan={6}>No API tokens yet. Create one below, or run labfleet login.</td>
      </tr>
    );
  return (
    <>
      {props.tokens.map((t) => (
        <tr id={`tok-${t.id}`}>
          <th scope="row">{t.name}</th>
          <td>
            {t.owner}
            {t.mine ? " (you)" : ""}
          </td>
          <td class="num">{when(t.createdAt)}</td>
          <td class="num">{t.lastUsedAt ? when(t.lastUsedAt) : "never"}</td>
          <td class="num">{t.expiresAt ? when(t.expiresAt) : "never"}</td>
          <td>
            <form method="post" action="/console/tokens/revoke">
              <Csrf token={props.csrf} />
              <input type="hidden" name="id" value={t.id} />
              <button type="submit" class="danger secondary" aria-label={`Revoke the token ${t.name}`}>
                Revoke…
              </button>
            </form>
          </td>
        </tr>
      ))}
    </>
  );
}

export function TokensPage(props: {
  viewer: Viewer;
  tokens: TokenRow[];
  notice?: string | undefined;
  /** The create form sent back: what was typed, and its errors by field (name, days). */
  form?: { name: string; days: string };
  errors?: { name?: string | undefined; days?: string | undefined };
}) {
  const errors = props.errors ?? {};
  const failed = Boolean(errors.name || errors.days);
  return (
    <Layout title="API tokens" viewer={props.viewer} section="tokens">
      <h1>API tokens</h1>
      <Notice text={props.notice} />
      <p>
        The CLI and scripts send an API token to the instructor API. labfleet keeps only a hash of each token:
        a token is shown once, when it is created. Every instructor's tokens are listed, and any instructor
        may revoke one (a lost laptop's, say).
      </p>
      <DataTable
        caption="Tokens that work now (expired ones are left out)"
        columns={["Name", "Owner", "Created", "Last used", "Expires", "Actions"]}
      >
        <TokenRows tokens={props.tokens} csrf={props.viewer.csrf} />
      </DataTable>
      <h2 id="create-h">Create a token</h2>
      {failed ? (
        <div class="alert" role="alert" id="token-errors">
          <h3>The token was not created</h3>
          <ul>
            {errors.name ? <li>Name: {errors.name}</li> : null}
            {errors.days ? <li>Expires after: {errors.days}</li> : null}
          </ul>
        </div>
      ) : null}
      <form method="post" action="/console/tokens" class="panel" aria-labelledby="create-h">
        <Csrf token={props.viewer.csrf} />
        <label for="token-name">Name</label>
        <input
          id="token-name"
          name="name"
          type="text"
          required
          maxlength={80}
          autocomplete="off"
          value={props.form?.name ?? ""}
          aria-describedby="token-name-hint"
          aria-invalid={errors.name ? "true" : undefined}
        />
        <p class="hint" id="token-name-hint">
          Where it will be used, such as "laptop CLI" or "CI deploy job".
        </p>
        <label for="token-days">Expires after (days)</label>
        <input
          id="token-days"
          name="days"
          type="number"
          min="1"
          max="3650"
          step="1"
          value={props.form?.days ?? "90"}
          aria-describedby="token-days-hint"
          aria-invalid={errors.days ? "true" : undefined}
        />
        <p class="hint" id="token-days-hint">
          From 1 to 3650. Leave it empty for a token that works until it is revoked.
        </p>
        <p>
          <button type="submit">Create token</button>
        </p>
      </form>
    </Layout>
  );
}

export function TokenCreatedPage(props: { viewer: Viewer; token: string; info: TokenInfo; url: string }) {
  return (
    <Layout title="Token created" viewer={props.viewer} section="tokens">
      <h1>Token created: {props.info.name}</h1>
      <p class="notice" role="status">
        Copy the token now. It is shown only on this page, once: labfleet keeps only its hash.
      </p>
      <label for="new-token">The new API token</label>
      <input
        id="new-token"
        class="secret"
        type="text"
        readonly
        value={props.token}
        spellcheck={false}
        autocomplete="off"
        aria-describedby="new-token-hint"
      />
      <p class="hint" id="new-token-hint">
        {props.info.expiresAt
          ? `It works until ${when(props.info.expiresAt)}`
          : "It works until it is revoked"}
        , for the instructor API at this address.
      </p>
      <h2>Use it with the CLI</h2>
      <p>Run this, then paste the token when asked (or pipe it in):</p>
      <pre class="command">
        <code id="login-hint">labfleet login --url {props.url} --token</code>
      </pre>
      <p class="hint">
        The CLI stores it in <code>~/.labfleet/credentials</code> (mode 0600). Scripts send it as{" "}
        <code>Authorization: Bearer ...</code>.
      </p>
      <p>
        <a href="/console/tokens">Back to API tokens</a>
      </p>
    </Layout>
  );
}

// ------------------------------------------------------------------------------ confirmations and results

export function ConfirmPage(props: {
  viewer: Viewer;
  title: string;
  message: Child;
  action: string;
  button: string;
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
          <button type="submit" class="danger">
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
