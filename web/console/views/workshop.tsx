// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { EventView } from "../../../shared/fleet/events.ts";
import type { FleetView } from "../../../shared/fleet/fleet-view.ts";
import type { OpenAccessView } from "../../../shared/fleet/open-access.ts";
import type { Receipt } from "../../../shared/fleet/receipt.ts";
import type { RolloutView } from "../../../shared/fleet/rollout.ts";
import type { ScaleOffer, ScalePlan } from "../../../shared/fleet/scale.ts";
import type { HostView, RunView, WorkshopSummary } from "../../../shared/fleet/workshops.ts";
import { Time } from "../../time.tsx";
import { eventLabel, eventParts } from "../activity.ts";
import { timeLeft } from "../format.ts";
import { ExecForm } from "./exec.tsx";
import { FLEET_COLUMNS, FleetPager, FleetRows, FleetSummary } from "./fleet.tsx";
import { Csrf, DataTable, Layout, Notice, ResultPage, State, Tabs, type Viewer } from "./layout.tsx";
import { ReceiptRegion } from "./receipt.tsx";
import { RolloutForm, RolloutRegion } from "./rollout.tsx";

// ------------------------------------------------------------------------------------------ one workshop

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
            <Time at={e.at} show="exact" />
          </td>
          <td>
            <span class={`state ev-${e.type.replace(/[._]/g, "-")}`}>{eventLabel(e.type)}</span>
          </td>
          <td>{e.hostId ?? ""}</td>
          <td class="what">
            {eventParts(e).map((p) => (typeof p === "string" ? p : <Time at={p.time} show="when" />))}
          </td>
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

/** "3 students are waiting for a lab", where the instructor decides to add or remove labs; nothing at 0. */
export function Waiting(props: { waiting: number }) {
  if (props.waiting <= 0) return null;
  return (
    <p class="notice" role="status" data-testid="students-waiting">
      {props.waiting} {props.waiting === 1 ? "student is" : "students are"} waiting for a lab.
    </p>
  );
}

/** The workshop page's Scale up form (confirmed on the next page), or why this workshop cannot scale. */
function ScaleActions(props: { name: string; base: string; csrf: string; offer: ScaleOffer }) {
  const o = props.offer;
  if (!o.createsHosts)
    return (
      <div class="card" id="scale">
        <h3 id="act-scale">Scale up</h3>
        <p class="hint" id="scale-note">
          {o.provider === "enrolled"
            ? "This workshop's hosts are machines that join it (provider.type enrolled): labfleet creates none. Make a join token (Enrollment) for more machines; each is deployed once approved."
            : `This workshop brings its own hosts (provider.type ${o.provider}): labfleet creates none. Add hosts to hosts[] in workshop.yaml and press Up.`}
        </p>
      </div>
    );
  const full = o.hosts >= o.max;
  return (
    <form method="post" action={`${props.base}/scale`} aria-labelledby="act-scale">
      <Csrf token={props.csrf} />
      <h3 id="act-scale">Scale up</h3>
      <Waiting waiting={o.waiting} />
      <label for="scale-count">
        Hosts to have (now {o.hosts}, at most {o.max})
      </label>
      <input
        id="scale-count"
        name="count"
        type="number"
        min={String(Math.min(o.hosts + 1, o.max))}
        max={String(o.max)}
        step="1"
        value={String(Math.min(o.hosts + 1, o.max))}
        required
        disabled={full}
      />
      <p class="hint">
        {full
          ? `The workshop has the most hosts it may have (${o.max}).`
          : "New hosts are provisioned and deployed; their labs go on the board as they pass their health check. You confirm on the next page."}{" "}
        To remove labs nobody claimed: <code>labfleet down {props.name} --unclaimed N</code>.
      </p>
      <button type="submit" disabled={full}>
        Scale up…
      </button>
    </form>
  );
}

/** The confirmation of a scale up: how many labs it adds, from how many to how many, who is waiting. */
export function ScaleConfirmMessage(props: { plan: ScalePlan; provider: string }) {
  const { plan } = props;
  const n = plan.add.length;
  return (
    <>
      <p id="scale-what">
        Adds {n} {n === 1 ? "lab" : "labs"} ({plan.from} → {plan.to}): {plan.add.join(", ")}.
      </p>
      <Waiting waiting={plan.waiting} />
      <p>
        {n === 1 ? "The new host is" : "Each new host is"} provisioned
        {props.provider === "aws" ? " (an EC2 instance, billed from its launch until the teardown)" : ""}, the
        lab is deployed on it, and it goes on the board once it passes its health check. The {plan.from} labs
        already there, and the students on them, are not touched.
      </p>
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

/** A form's second button: what its command would do (POST .../check with the form's fields), changing nothing. */
function CheckButton(props: { base: string; command: "up" | "deploy" | "retry" }) {
  return (
    <button
      type="submit"
      class="secondary"
      formaction={`${props.base}/check`}
      name="command"
      value={props.command}
    >
      Check
    </button>
  );
}

export function WorkshopPage(
  props: WorkshopHeader & {
    viewer: Viewer;
    hosts: HostView[];
    /** The fleet view: counts, the ready estimate and one row per lab of the table's page. */
    fleet: FleetView;
    /** The fleet table's page (its cursor), when not the first. */
    labs?: string | undefined;
    canExtend: boolean;
    access: LabAccess;
    /** The Scale up form's offer; absent for a workshop never brought up. */
    scale?: ScaleOffer | undefined;
    activity: ActivityData;
    notice?: string | undefined;
    /** The last teardown's receipt, shown once the workshop is torn down (or its teardown failed). */
    receipt?: Receipt | undefined;
    /** The workshop's latest rollout, if it has had one (the live rollout region). */
    rollout?: RolloutView | undefined;
  },
) {
  const name = props.summary.name;
  const base = `/console/w/${name}`;
  const csrf = props.viewer.csrf;
  // A workshop torn down (or going) has nothing left to deploy, diagnose, extend or tear down: only Up.
  const gone = props.summary.state === "torn_down" || props.summary.state === "tearing_down";
  return (
    <Layout
      title={name}
      viewer={props.viewer}
      live={`${base}/live${props.labs ? `?labs=${encodeURIComponent(props.labs)}` : ""}`}
    >
      <Tabs name={name} current="hosts" />
      <h1>{name}</h1>
      <div id="live-summary" aria-live="polite">
        <Summary summary={props.summary} activeRun={props.activeRun} now={props.now} />
      </div>
      <Notice text={props.notice} />
      <div id="live-receipt" aria-live="polite">
        <ReceiptRegion
          receipt={props.receipt}
          teardown={props.activeRun?.kind === "teardown" ? props.activeRun : undefined}
          hosts={props.summary.hosts.total}
        />
      </div>
      <div id="live-rollout" aria-live="polite">
        <RolloutRegion base={base} csrf={csrf} rollout={props.rollout} />
      </div>
      <h2 id="hosts-h">Fleet</h2>
      <div id="live-fleet" aria-live="polite">
        <FleetSummary fleet={props.fleet} />
      </div>
      <DataTable
        wrapClass="table-wrap scroll fleet"
        labelledBy="hosts-h"
        columns={FLEET_COLUMNS}
        bodyId="live-hosts"
      >
        <FleetRows fleet={props.fleet} />
      </DataTable>
      <div id="live-pager">
        <FleetPager fleet={props.fleet} base={base} />
      </div>
      <p class="hint">
        Timeline: one bar per phase from the deploy's start (blue done, amber running, red failed), on one
        time scale for every lab; the dashed box is the time the estimate says is left.
      </p>
      <h2 id="actions-h">Actions</h2>
      <div class="actions">
        <form method="post" action={`${base}/up`} aria-labelledby="act-up">
          <Csrf token={csrf} />
          <h3 id="act-up">Up</h3>
          <p class="hint">
            Provision every host, deploy the lab, wait until ready. Running it again resumes.
          </p>
          <p class="row">
            <button type="submit">Up</button>
            <CheckButton base={base} command="up" />
          </p>
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
              <p class="row">
                <button type="submit">Deploy</button>
                <CheckButton base={base} command="deploy" />
              </p>
            </form>
            <form method="post" action={`${base}/retry`} aria-labelledby="act-retry">
              <Csrf token={csrf} />
              <h3 id="act-retry">Retry failed</h3>
              <p class="hint">Reads every host again, then rebuilds the labs that failed.</p>
              <p class="row">
                <button type="submit">Retry failed hosts</button>
                <CheckButton base={base} command="retry" />
              </p>
            </form>
            <RolloutForm base={base} csrf={csrf} />
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
            {props.scale ? <ScaleActions name={name} base={base} csrf={csrf} offer={props.scale} /> : null}
            <AccessActions base={base} csrf={csrf} access={props.access} />
            <ExecForm base={base} csrf={csrf} />
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
