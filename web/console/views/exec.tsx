// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import {
  EXEC_DEFAULT_CONCURRENCY,
  EXEC_DEFAULT_TIMEOUT_SECONDS,
  EXEC_MAX_CONCURRENCY,
  EXEC_MAX_TIMEOUT_SECONDS,
  type ExecHostResult,
  ExecInput,
} from "../../../shared/fleet/exec.ts";
import type { ExecJob } from "../../../shared/fleet/exec-jobs.ts";
import { Csrf, DataTable, Layout, type Viewer } from "./layout.tsx";

/**
 * Run a command (labfleet exec) from the workshop page: the form among the actions, and the job's page, one row
 * per host with its status, exit code and the start of its output. While the job runs the page follows it live
 * (its regions `live-exec-*` come again from `.../exec/:jobId/live`), with a button that cancels it.
 */

/** The most failures `maxErrors` takes: the API's own bound. */
export const EXEC_MAX_ERRORS = ExecInput.shape.maxErrors.unwrap().maxValue ?? 10_000;

/** What the form holds: as typed (sent back with its errors), or the defaults. */
export interface ExecFormValues {
  command: string;
  hosts: string;
  timeout: string;
  concurrency: string;
  maxErrors: string;
}

/** The form's fields, each with its id and label (the error list names them the same way). */
export const EXEC_FIELDS = {
  command: { id: "exec-command", label: "Command (bash, on each host)" },
  hosts: { id: "exec-hosts", label: "Hosts (blank: all)" },
  timeout: { id: "exec-timeout", label: "Timeout per host (seconds)" },
  concurrency: { id: "exec-concurrency", label: "Hosts at once" },
  maxErrors: { id: "exec-max-errors", label: "Stop after this many failures" },
} as const satisfies Record<keyof ExecFormValues, { id: string; label: string }>;

export type ExecFormErrors = Partial<Record<keyof ExecFormValues, string>>;

/** A field's id, and `aria-invalid` and `aria-describedby` when it has an error or a hint. */
function attrs(name: keyof ExecFormValues, errors: ExecFormErrors, hint?: boolean) {
  const id = EXEC_FIELDS[name].id;
  const described = [errors[name] ? `${id}-error` : "", hint ? `${id}-hint` : ""].filter(Boolean).join(" ");
  return {
    id,
    ...(errors[name] ? { "aria-invalid": "true" } : {}),
    ...(described ? { "aria-describedby": described } : {}),
  };
}

function Label(props: { name: keyof ExecFormValues }) {
  return <label for={EXEC_FIELDS[props.name].id}>{EXEC_FIELDS[props.name].label}</label>;
}

/** Under a field: its hint, and the error it came back with. */
function Notes(props: { name: keyof ExecFormValues; errors: ExecFormErrors; hint?: string }) {
  const id = EXEC_FIELDS[props.name].id;
  const error = props.errors[props.name];
  return (
    <>
      {props.hint ? (
        <p class="hint" id={`${id}-hint`}>
          {props.hint}
        </p>
      ) : null}
      {error ? (
        <p class="field-error" id={`${id}-error`}>
          {error}
        </p>
      ) : null}
    </>
  );
}

export function ExecForm(props: {
  base: string;
  csrf: string;
  values?: ExecFormValues | undefined;
  errors?: ExecFormErrors | undefined;
}) {
  const v = props.values;
  const errors = props.errors ?? {};
  return (
    <form method="post" action={`${props.base}/exec`} aria-labelledby="act-exec">
      <Csrf token={props.csrf} />
      <h3 id="act-exec">Run a command</h3>
      <Label name="command" />
      <textarea
        {...attrs("command", errors)}
        name="command"
        rows={2}
        required
        spellcheck={false}
        placeholder="uptime"
      >
        {v?.command ?? ""}
      </textarea>
      <Notes name="command" errors={errors} />
      <Label name="hosts" />
      <input
        {...attrs("hosts", errors)}
        name="hosts"
        type="text"
        spellcheck={false}
        placeholder="student-01 student-02"
        value={v?.hosts ?? ""}
      />
      <Notes name="hosts" errors={errors} />
      <Label name="timeout" />
      <input
        {...attrs("timeout", errors)}
        name="timeout"
        type="number"
        min="1"
        max={String(EXEC_MAX_TIMEOUT_SECONDS)}
        step="1"
        value={v?.timeout ?? String(EXEC_DEFAULT_TIMEOUT_SECONDS)}
        required
      />
      <Notes name="timeout" errors={errors} />
      <Label name="concurrency" />
      <input
        {...attrs("concurrency", errors, true)}
        name="concurrency"
        type="number"
        min="1"
        max={String(EXEC_MAX_CONCURRENCY)}
        step="1"
        value={v?.concurrency ?? String(EXEC_DEFAULT_CONCURRENCY)}
      />
      <Notes
        name="concurrency"
        errors={errors}
        hint={`1 to ${EXEC_MAX_CONCURRENCY} (blank: ${EXEC_DEFAULT_CONCURRENCY}), as labfleet exec -j.`}
      />
      <Label name="maxErrors" />
      <input
        {...attrs("maxErrors", errors, true)}
        name="maxErrors"
        type="number"
        min="1"
        max={String(EXEC_MAX_ERRORS)}
        step="1"
        value={v?.maxErrors ?? ""}
      />
      <Notes
        name="maxErrors"
        errors={errors}
        hint="Once this many hosts failed, no further host starts (they are skipped). Blank: never stop."
      />
      <p class="hint">Labs students have claimed are named on a page that asks first.</p>
      <button type="submit">Run</button>
    </form>
  );
}

/**
 * The form sent back with what is wrong (400): the errors listed first, each naming its field and linking to
 * it, then the form as it was typed, each wrong field marked.
 */
export function ExecFormPage(props: {
  viewer: Viewer;
  name: string;
  values: ExecFormValues;
  errors: ExecFormErrors;
  message?: string | undefined;
}) {
  const base = `/console/w/${props.name}`;
  const listed = Object.entries(props.errors) as [keyof ExecFormValues, string][];
  return (
    <Layout title={`Run a command on ${props.name}`} viewer={props.viewer}>
      <h1>Run a command on {props.name}</h1>
      <div class="alert" role="alert" id="exec-errors" tabindex={-1}>
        <p>{props.message ?? "The command did not start: some fields are not right."}</p>
        <ul>
          {listed.map(([field, message]) => (
            <li data-field={field}>
              <a href={`#${EXEC_FIELDS[field].id}`}>{EXEC_FIELDS[field].label}</a> ({field}): {message}
            </li>
          ))}
        </ul>
      </div>
      <div class="panel">
        <ExecForm base={base} csrf={props.viewer.csrf} values={props.values} errors={props.errors} />
      </div>
      <p>
        <a href={base}>Back to {props.name}</a>
      </p>
    </Layout>
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
      <p class="hint" id="exec-options">
        {j.selected.length} {j.selected.length === 1 ? "host" : "hosts"}, {j.concurrency} at once, timeout{" "}
        {j.timeoutSeconds} s per host,{" "}
        {j.maxErrors === null
          ? "no stop on failures"
          : `no further host starts after ${j.maxErrors} ${j.maxErrors === 1 ? "failure" : "failures"}`}
        .
      </p>
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
