// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { RunView } from "../../../shared/fleet/workshops.ts";
import { Time } from "../../time.tsx";
import { duration } from "../format.ts";
import { Layout, State, Tabs, type Viewer } from "./layout.tsx";

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
            {run.kind} <State state={run.state} />{" "}
            <small>
              <Time at={run.startedAt} />
            </small>
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
            <div class="scroll table-wrap">
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
