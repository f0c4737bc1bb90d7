// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { ExecHostResult } from "../../../shared/fleet/exec.ts";
import type { ExecJob } from "../../../shared/fleet/exec-jobs.ts";
import { Csrf, DataTable, Layout, type Viewer } from "./layout.tsx";

/**
 * Run a command (labfleet exec) from the workshop page: the form among the actions, and the job's page, one row
 * per host with its status, exit code and the start of its output. While the job runs the page follows it live
 * (its regions `live-exec-*` come again from `.../exec/:jobId/live`), with a button that cancels it.
 */

export function ExecForm(props: { base: string; csrf: string }) {
  return (
    <form method="post" action={`${props.base}/exec`} aria-labelledby="act-exec">
      <Csrf token={props.csrf} />
      <h3 id="act-exec">Run a command</h3>
      <label for="exec-command">Command (bash, on each host)</label>
      <textarea id="exec-command" name="command" rows={2} required spellcheck={false} placeholder="uptime" />
      <label for="exec-hosts">Hosts (blank: all)</label>
      <input
        id="exec-hosts"
        name="hosts"
        type="text"
        spellcheck={false}
        placeholder="student-01 student-02"
      />
      <label for="exec-timeout">Timeout per host (seconds)</label>
      <input id="exec-timeout" name="timeout" type="number" min="1" max="3600" step="1" value="60" required />
      <p class="hint">Labs students have claimed are named on a page that asks first.</p>
      <button type="submit">Run</button>
    </form>
  );
}

const KiB = 1024;
const size = (bytes: number) =>
  bytes >= 1024 * KiB ? `${(bytes / 1024 / KiB).toFixed(1)} MiB` : `${Math.ceil(bytes / KiB)} KiB`;

function Output(props: { label: string; text: string; truncated: boolean; bytes: number }) {
  if (props.text === "" && !props.truncated) return null;
  return (
    <>
      <span class="hint">{props.label}</span>
      <pre class="command">{props.text}</pre>
      {props.truncated ? (
        <span class="hint">
          (truncated: {size(Buffer.byteLength(props.text))} of {size(props.bytes)} shown)
        </span>
      ) : null}
    </>
  );
}

function ResultRow(props: { h: ExecHostResult }) {
  const h = props.h;
  return (
    <tr data-host={h.host} data-status={h.status}>
      <th scope="row">{h.host}</th>
      <td>
        <span
          class={`state ${h.status === "ok" ? "ready" : h.status === "skipped" || h.status === "cancelled" ? "pending" : "failed"}`}
        >
          {h.status}
        </span>
      </td>
      <td>{h.exitCode ?? "-"}</td>
      <td class="nowrap">{(h.durationMs / 1000).toFixed(1)} s</td>
      <td class="exec-output">
        {h.reason ? <p class="hint">{h.reason}</p> : null}
        <Output label="stdout" text={h.stdout} truncated={h.stdoutTruncated} bytes={h.stdoutBytes} />
        <Output label="stderr" text={h.stderr} truncated={h.stderrTruncated} bytes={h.stderrBytes} />
      </td>
    </tr>
  );
}

const ended = (j: ExecJob) => j.state === "succeeded" || j.state === "failed" || j.state === "cancelled";

/** The job's state line: what runs, what waits, the summary so far; at the end the summary alone. */
export function ExecStatus(props: { job: ExecJob; base: string; csrf: string }) {
  const j = props.job;
  const done = ended(j);
  return (
    <>
      <p class={done ? (j.ok ? "notice" : "alert") : "hint"} id="exec-summary" data-state={j.state}>
        {done
          ? j.state === "cancelled"
            ? `cancelled: ${j.summary.text}`
            : j.summary.text
          : `${j.state === "cancelling" ? "cancelling" : "running"}: ${j.hosts.length} of ${j.summary.total} done, ${j.running.length} running, ${j.waiting} waiting (${j.summary.text})`}
      </p>
      {j.error ? <p class="alert">{j.error}</p> : null}
      {j.notes.map((n) => (
        <p class="hint">{n}</p>
      ))}
      {j.state === "running" ? (
        <form method="post" action={`${props.base}/exec/${j.jobId}/cancel`}>
          <Csrf token={props.csrf} />
          <button type="submit" class="danger">
            Cancel the command
          </button>
        </form>
      ) : null}
    </>
  );
}

/** One row per host with a result, then one per host still running. */
export function ExecRows(props: { job: ExecJob }) {
  return (
    <>
      {props.job.hosts.map((h) => (
        <ResultRow h={h} />
      ))}
      {props.job.running.map((host) => (
        <tr data-host={host} data-status="running">
          <th scope="row">{host}</th>
          <td>
            <span class="state deploying">running</span>
          </td>
          <td>-</td>
          <td>-</td>
          <td />
        </tr>
      ))}
    </>
  );
}

export function ExecJobPage(props: { viewer: Viewer; name: string; job: ExecJob; csrf: string }) {
  const j = props.job;
  const base = `/console/w/${props.name}`;
  return (
    <Layout
      title={`Command on ${props.name}`}
      viewer={props.viewer}
      {...(ended(j) ? {} : { live: `${base}/exec/${j.jobId}/live` })}
    >
      <h1>Command on {props.name}</h1>
      <pre class="command">{j.command}</pre>
      <div id="live-exec-status" role="status">
        <ExecStatus job={j} base={base} csrf={props.csrf} />
      </div>
      <h2 id="exec-results-h">Per host</h2>
      <DataTable
        wrapClass="table-wrap scroll"
        labelledBy="exec-results-h"
        columns={["Host", "Status", "Exit", "Took", "Output"]}
        bodyId="exec-results"
      >
        <ExecRows job={j} />
      </DataTable>
      <p>
        <a href={base}>Back to {props.name}</a>
      </p>
    </Layout>
  );
}
