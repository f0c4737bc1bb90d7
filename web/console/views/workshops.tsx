// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { WorkshopSummary } from "../../../shared/fleet/workshops.ts";
import type { ErrorDetail } from "../../../shared/runtime/errors.ts";
import { timeLeft } from "../format.ts";
import { CSRF_FIELD } from "../session.ts";
import { Csrf, DataTable, Layout, Notice, type ProviderLink, State, type Viewer } from "./layout.tsx";

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
