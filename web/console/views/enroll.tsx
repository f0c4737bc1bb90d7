// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { EnrolledHostView } from "../../../shared/agent/enrollment.ts";
import type { JoinTokenInfo } from "../../../shared/agent/join-tokens.ts";
import { Time } from "../../time.tsx";
import { Csrf, DataTable, Layout, Notice, State, Tabs, type Viewer } from "./layout.tsx";

// ------------------------------------------------------------------------------------------- enrollment

const STATE_LOOK: Record<JoinTokenInfo["state"], string> = {
  active: "ready",
  used_up: "torn_down",
  expired: "torn_down",
  revoked: "failed",
};

function TokenRows(props: { name: string; tokens: JoinTokenInfo[]; csrf: string }) {
  if (props.tokens.length === 0)
    return (
      <tr>
        <td colspan={7}>No join tokens yet. Make one below.</td>
      </tr>
    );
  return (
    <>
      {props.tokens.map((t) => (
        <tr id={`jtk-${t.id}`}>
          <th scope="row">
            <code>{t.id.slice(-8)}</code>
            {t.student ? ` (for ${t.student})` : ""}
          </th>
          <td>
            <State state={STATE_LOOK[t.state]} label={t.state.replace("_", " ")} />
          </td>
          <td class="num">
            {t.used}/{t.uses}
          </td>
          <td>{t.approve === "auto" ? "at once" : "by an instructor"}</td>
          <td class="num">
            <Time at={t.expiry} show="when" />
          </td>
          <td>{t.hosts.length ? t.hosts.join(", ") : "none yet"}</td>
          <td>
            {t.state === "active" ? (
              <form method="post" action={`/console/w/${props.name}/enroll/revoke`}>
                <Csrf token={props.csrf} />
                <input type="hidden" name="id" value={t.id} />
                <button type="submit" class="danger secondary" aria-label={`Revoke the join token ${t.id}`}>
                  Revoke
                </button>
              </form>
            ) : null}
          </td>
        </tr>
      ))}
    </>
  );
}

const facts = (h: EnrolledHostView) =>
  [
    h.facts.hostname,
    [h.facts.os, h.facts.arch].filter(Boolean).join(" "),
    h.facts.cpus === undefined ? undefined : `${h.facts.cpus} CPUs`,
    h.facts.memoryMb === undefined ? undefined : `${(h.facts.memoryMb / 1024).toFixed(1)} GiB`,
  ]
    .filter(Boolean)
    .join(" · ") || "nothing reported";

export function PendingRows(props: { name: string; hosts: EnrolledHostView[]; csrf: string }) {
  if (props.hosts.length === 0)
    return (
      <tr>
        <td colspan={4}>No machine waits for approval.</td>
      </tr>
    );
  return (
    <>
      {props.hosts.map((h) => (
        <tr id={`pending-${h.id}`}>
          <th scope="row">{h.id}</th>
          <td>{facts(h)}</td>
          <td class="num">
            <Time at={h.joinedAt} />
          </td>
          <td class="actions">
            <form method="post" action={`/console/w/${props.name}/enroll/approve`}>
              <Csrf token={props.csrf} />
              <input type="hidden" name="host" value={h.id} />
              <button type="submit" aria-label={`Approve ${h.id}`}>
                Approve
              </button>
            </form>
            <form method="post" action={`/console/w/${props.name}/enroll/reject`}>
              <Csrf token={props.csrf} />
              <input type="hidden" name="host" value={h.id} />
              <button type="submit" class="danger secondary" aria-label={`Reject ${h.id}`}>
                Reject…
              </button>
            </form>
          </td>
        </tr>
      ))}
    </>
  );
}

export function EnrollPage(props: {
  viewer: Viewer;
  name: string;
  tokens: JoinTokenInfo[];
  pending: EnrolledHostView[];
  notice?: string | undefined;
  /** The make form sent back: what was typed, and its errors. */
  form?: { uses: string; hours: string; approve: string };
  errors?: string[];
}) {
  const f = props.form ?? { uses: "1", hours: "24", approve: "auto" };
  return (
    <Layout title={`${props.name}: enrollment`} viewer={props.viewer} section="workshops">
      <h1>{props.name}</h1>
      <Tabs name={props.name} current="enrollment" />
      <Notice text={props.notice} />
      <p>
        Machines labfleet cannot reach (behind NAT, on premises, students' laptops) join this workshop with a
        join token: the agent they run calls labfleet, signed with a secret of each host's own. A token is
        shown once; labfleet keeps only its hash.
      </p>
      <h2 id="pending-h">Waiting for approval</h2>
      <DataTable
        labelledBy="pending-h"
        columns={["Host", "Reported", "Joined", "Actions"]}
        bodyId="live-pending"
      >
        <PendingRows name={props.name} hosts={props.pending} csrf={props.viewer.csrf} />
      </DataTable>
      <h2 id="tokens-h">Join tokens</h2>
      <DataTable
        labelledBy="tokens-h"
        columns={["Token", "State", "Used", "Approval", "Expires", "Hosts", "Actions"]}
      >
        <TokenRows name={props.name} tokens={props.tokens} csrf={props.viewer.csrf} />
      </DataTable>
      <h2 id="make-h">Make a join token</h2>
      {props.errors?.length ? (
        <div class="alert" role="alert" id="join-token-errors">
          <h3>The token was not made</h3>
          <ul>
            {props.errors.map((e) => (
              <li>{e}</li>
            ))}
          </ul>
        </div>
      ) : null}
      <form
        method="post"
        action={`/console/w/${props.name}/enroll/tokens`}
        class="panel"
        aria-labelledby="make-h"
      >
        <Csrf token={props.viewer.csrf} />
        <label for="jt-uses">Machines that may join with it</label>
        <input id="jt-uses" name="uses" type="number" min="1" max="1000" step="1" required value={f.uses} />
        <label for="jt-hours">Expires after (hours)</label>
        <input id="jt-hours" name="hours" type="number" min="1" max="720" step="1" required value={f.hours} />
        <label for="jt-approve">Hosts that join</label>
        <select id="jt-approve" name="approve">
          <option value="auto" selected={f.approve !== "manual"}>
            are approved at once
          </option>
          <option value="manual" selected={f.approve === "manual"}>
            wait for an instructor's approval
          </option>
        </select>
        <p>
          <button type="submit">Make join token</button>
        </p>
      </form>
    </Layout>
  );
}

export function JoinTokenCreatedPage(props: {
  viewer: Viewer;
  name: string;
  token: string;
  command: string;
  info: JoinTokenInfo;
}) {
  return (
    <Layout title={`${props.name}: join token`} viewer={props.viewer} section="workshops">
      <h1>Join token for {props.name}</h1>
      <p class="notice" role="status">
        Copy it now. It is shown only on this page, once: labfleet keeps only its hash.
      </p>
      <label for="new-join-token">The join token</label>
      <input
        id="new-join-token"
        class="secret"
        type="text"
        readonly
        value={props.token}
        spellcheck={false}
        autocomplete="off"
      />
      <p class="hint">
        {props.info.uses === 1 ? "One machine" : `${props.info.uses} machines`} may join with it until{" "}
        <Time at={props.info.expiry} show="when" />;{" "}
        {props.info.approve === "auto" ? "they are approved at once" : "each waits for your approval"}.
      </p>
      <h2>Run this on each machine</h2>
      <p>
        It needs bash, curl and openssl; the token goes to the agent in its environment, never on a command
        line.
      </p>
      <pre class="command">
        <code id="join-command">{props.command}</code>
      </pre>
      <p>
        <a href={`/console/w/${props.name}/enroll`}>Back to enrollment</a>
      </p>
    </Layout>
  );
}
