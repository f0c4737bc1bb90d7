// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import { approxText as approx, basisText, type FleetEstimate } from "../../../shared/fleet/estimate.ts";
import type { FleetLab, FleetView } from "../../../shared/fleet/fleet-view.ts";
import { type PhaseBar, phaseBars } from "../../../shared/fleet/timeline.ts";
import { Time } from "../../time.tsx";
import { duration, timeLeft } from "../format.ts";
import { State } from "./layout.tsx";

/**
 * The workshop page's fleet view: the counts and the ready estimate (region `live-fleet`) above one table of
 * every lab (region `live-hosts`), each row with its phase timeline. Both regions update live.
 */

function EstimateText(props: { estimate: FleetEstimate }) {
  const e = props.estimate;
  const failed = e.failed ? ` ${e.failed} failed ${e.failed === 1 ? "lab is" : "labs are"} not counted.` : "";
  if (e.kind === "ready")
    return (
      <p id="fleet-estimate" data-kind="ready">
        Every lab that did not fail is ready.{failed}
      </p>
    );
  if (e.kind === "unknown")
    return (
      <p id="fleet-estimate" data-kind="unknown">
        Ready estimate: not yet. It appears once a build of this lab has finished, in this run or an earlier
        one.{failed}
      </p>
    );
  return (
    <p id="fleet-estimate" data-kind="estimated" data-remaining={String(e.remainingSeconds)}>
      All {e.building} {e.building === 1 ? "lab" : "labs"} still building ready in{" "}
      <strong>{approx(e.remainingSeconds)}</strong> (by <Time at={e.readyAt} />
      ), <span id="fleet-basis">{basisText(e.basis)}</span>.{failed}
    </p>
  );
}

/** The counts on top of the fleet table, and the ready estimate with its basis. */
export function FleetSummary(props: { fleet: FleetView }) {
  const c = props.fleet.counts;
  const items: [string, number][] = [
    ["building", c.building],
    ["ready", c.ready],
    ["failed", c.failed],
    ["claimed", c.claimed],
    ["free", c.free],
    ["waiting", c.waiting],
    // Only when some enrolled host went silent: a fleet without agents shows no such count.
    ...(c.unreachable > 0 ? [["unreachable", c.unreachable] as [string, number]] : []),
  ];
  return (
    <>
      <ul class="summary fleet-counts" aria-label="Labs">
        {items.map(([k, n]) => (
          <li data-count={k}>
            <strong>{n}</strong> {k}
          </li>
        ))}
      </ul>
      <EstimateText estimate={props.fleet.estimate} />
    </>
  );
}

const W = 240;
const H = 22;
const BAR = { done: "#0b57d0", running: "#b45309", failed: "#a4141b" } as const;

function barTitle(host: string, b: PhaseBar): string {
  const len = duration(b.to - b.from) ?? "0 s";
  const what =
    b.state === "running" ? `running for ${len}` : b.state === "failed" ? `failed after ${len}` : len;
  return `${host}: phase ${b.name}, ${what} (from ${duration(b.from) ?? "0 s"} after the deploy's start)`;
}

/**
 * A host's phases as an SVG on the fleet's common time scale (`scale` seconds across): one bar per phase, a
 * failed one red with a "failed: NAME" label, a dashed box for the time the estimate says is left. Each bar has
 * a title (read out by screen readers, shown on hover); the picture as a whole has a label that says it all.
 */
export function Timeline(props: { lab: FleetLab; scale: number; now: Date }) {
  const { lab } = props;
  const end = lab.endedAt ? new Date(lab.endedAt) : props.now;
  const bars = phaseBars(lab.phases, lab.deployStartedAt ?? undefined, end, lab.state === "failed");
  if (!lab.deployStartedAt) return <span class="hint">not started</span>;
  const x = (s: number) => Math.round((s / props.scale) * W * 10) / 10;
  const failed = bars.find((b) => b.state === "failed");
  const elapsed = (end.getTime() - Date.parse(lab.deployStartedAt)) / 1000;
  const left = lab.remainingSeconds ?? 0;
  const summary = bars.length
    ? bars
        .map(
          (b) => `${b.name} ${b.state === "running" ? "running" : b.state} ${duration(b.to - b.from) ?? ""}`,
        )
        .join(", ")
    : "no phase reported yet";
  const label = `${lab.id} timeline: ${summary}${left > 0 ? `; ${approx(left)} to go` : ""}`;
  return (
    <svg
      class="timeline"
      role="img"
      aria-label={label}
      viewBox={`0 0 ${W} ${H}`}
      width={W}
      height={H}
      xmlns="http://www.w3.org/2000/svg"
    >
      <title>{label}</title>
      <rect x="0" y="9" width={W} height="4" fill="#e1e4e9" />
      {bars.map((b) => (
        // biome-ignore lint/a11y/noInteractiveElementToNoninteractiveRole: an SVG <g> is not interactive; the role names each bar for screen readers
        <g
          class={`bar bar-${b.state}`}
          data-phase={b.name}
          data-state={b.state}
          role="img"
          aria-label={barTitle(lab.id, b)}
        >
          <title>{barTitle(lab.id, b)}</title>
          <rect
            x={x(b.from)}
            y="3"
            width={Math.max(2, x(b.to) - x(b.from))}
            height="16"
            fill={BAR[b.state]}
            stroke="#fff"
            stroke-width="1"
          />
        </g>
      ))}
      {left > 0 ? (
        <rect
          class="bar-left"
          x={x(elapsed)}
          y="3"
          width={Math.max(2, x(elapsed + left) - x(elapsed))}
          height="16"
          fill="none"
          stroke="#3d4450"
          stroke-dasharray="3 2"
        >
          <title>{`${lab.id}: ${approx(left)} to go (estimate)`}</title>
        </rect>
      ) : null}
      {failed ? (
        <text class="bar-label" x={Math.min(x(failed.to) + 3, W - 2)} y="16" font-size="11" fill="#5c0a10">
          {`✗ failed: ${failed.name}`}
        </text>
      ) : null}
    </svg>
  );
}

/** The seconds the timelines span: the longest build so far, or the estimate's end, whichever is later. */
export function timelineScale(fleet: FleetView, now: Date): number {
  let max = 60;
  for (const l of fleet.labs) {
    if (!l.deployStartedAt) continue;
    const end = l.endedAt ? Date.parse(l.endedAt) : now.getTime();
    max = Math.max(max, (end - Date.parse(l.deployStartedAt)) / 1000 + (l.remainingSeconds ?? 0));
  }
  return max;
}

function phaseText(l: FleetLab): string {
  if (l.state === "ready" || l.state === "torn_down") return l.phase;
  const known = l.phases.length ? ` (${l.phasesDone}/${l.phases.length} done)` : "";
  return `${l.phase}${known}`;
}

export const FLEET_COLUMNS = [
  "Lab",
  "State",
  "Phase",
  "Health",
  "Student",
  "Checks",
  "Time left",
  "Timeline",
  "Last error",
];

/**
 * Beside an enrolled host's state: `unreachable` with when its agent last called in (once it missed three
 * check-ins), `drained` and `disabled` when the instructor set them. Nothing for an online host or one that does
 * not call in.
 */
export function AgentBadges(props: { lab: FleetLab; now: Date }) {
  const { lab } = props;
  if (lab.reachable === null) return null;
  return (
    <>
      {lab.reachable === "unreachable" ? (
        <span class="agent" data-agent="unreachable">
          {" "}
          <State state="failed" label="unreachable" />
          {lab.lastSeenAt ? (
            <span class="hint">
              {" "}
              last seen <Time at={lab.lastSeenAt} show="relative" now={props.now} />
            </span>
          ) : null}
        </span>
      ) : null}
      {lab.drained ? (
        <span class="agent" data-agent="drained">
          {" "}
          <State state="pending" label="drained" />
        </span>
      ) : null}
      {lab.disabled ? (
        <span class="agent" data-agent="disabled">
          {" "}
          <State state="failed" label="disabled" />
        </span>
      ) : null}
    </>
  );
}

/** One row per lab: what the fleet view's table shows, for the page and its live updates. */
export function FleetRows(props: { fleet: FleetView }) {
  const { fleet } = props;
  const now = new Date(fleet.at);
  if (fleet.labs.length === 0)
    return (
      <tr>
        <td colspan={FLEET_COLUMNS.length}>No hosts yet: press Up to provision them.</td>
      </tr>
    );
  const scale = timelineScale(fleet, now);
  return (
    <>
      {fleet.labs.map((l) => (
        <tr
          id={`host-${l.id}`}
          data-state={l.state}
          data-phase={l.phase}
          {...(l.reachable ? { "data-reachable": l.reachable } : {})}
        >
          <th scope="row">{l.id}</th>
          <td>
            <State state={l.state} />
            <AgentBadges lab={l} now={now} />
          </td>
          <td class="num">
            <progress
              max={l.phasesTotal}
              value={l.phasesDone}
              aria-label={`${l.id}: ${l.phasesDone} of ${l.phasesTotal} phases done`}
            />
            <span class="phase">{phaseText(l)}</span>
          </td>
          <td data-health={l.health ?? ""}>
            {l.health === "flagged" ? (
              <State state="failed" label="flagged" />
            ) : l.health === "ok" ? (
              <State state="ready" label="ok" />
            ) : (
              ""
            )}
          </td>
          <td class="student">{l.student ?? ""}</td>
          <td class="num">{l.checks ? `${l.checks.passed}/${l.checks.total}` : ""}</td>
          <td class="num">{l.state === "failed" || !l.expiry ? "" : timeLeft(l.expiry, now)}</td>
          <td>
            <Timeline lab={l} scale={scale} now={now} />
          </td>
          <td>
            {l.error ? <pre class="error">{l.error}</pre> : ""}
            {l.healthError ? <pre class="error">{`lab.health: ${l.healthError}`}</pre> : null}
          </td>
        </tr>
      ))}
    </>
  );
}

/**
 * Which labs the fleet table shows when the fleet is larger than a page (the table shows a page of labs; the
 * counts and the estimate above it are the whole fleet's): "Labs 101 to 200 of 500", and links to the
 * previous and next pages. Nothing for a fleet that fits one page.
 */
export function FleetPager(props: { fleet: FleetView; base: string }) {
  const { page, counts, labs } = props.fleet;
  if (page.prev === null && page.next === null) return null;
  const first = page.start + 1;
  const last = page.start + labs.length;
  const to = (cursor: string) => (cursor ? `${props.base}?labs=${encodeURIComponent(cursor)}` : props.base);
  return (
    <nav class="pager" aria-label="Pages of labs">
      <p>
        Labs {first} to {last} of {counts.total}.{" "}
        {page.prev !== null ? (
          <a href={to(page.prev)} rel="prev">
            Previous {page.limit}
          </a>
        ) : null}
        {page.prev !== null && page.next !== null ? " · " : null}
        {page.next !== null ? (
          <a href={to(page.next)} rel="next">
            Next labs
          </a>
        ) : null}
      </p>
    </nav>
  );
}
