// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import { type CheckReport, checkSummary, WORKSHOP_ITEM } from "../../../shared/fleet/check.ts";
import type { PlannedHost, RolloutHostView, RolloutView } from "../../../shared/fleet/rollout.ts";
import { Time } from "../../time.tsx";
import { Csrf, Layout, State, type Viewer } from "./layout.tsx";

/**
 * Rollouts and check mode in the console: the Rollout form among the workshop's actions, the confirmation
 * that names the claimed labs a rollout would touch, the live rollout region (each lab's old and new ref, its
 * stage, its gate and the log of a failure, with Resume and Abort), and the page of a check report (what a
 * rollout, up, deploy or retry would do, per host, with nothing changed).
 */

// ------------------------------------------------------------------------------------------------ the form

export function RolloutForm(props: { base: string; csrf: string }) {
  return (
    <form method="post" action={`${props.base}/rollout`} aria-labelledby="act-rollout" id="rollout-form">
      <Csrf token={props.csrf} />
      <h3 id="act-rollout">Rollout</h3>
      <label for="rollout-ref">Git ref to roll out</label>
      <input id="rollout-ref" name="ref" type="text" required spellcheck={false} placeholder="v2" />
      <label for="rollout-canary">Canary labs (first, alone)</label>
      <input id="rollout-canary" name="canary" type="number" min="1" max="1000" step="1" value="1" />
      <label for="rollout-batch">Labs per batch (blank: a quarter)</label>
      <input id="rollout-batch" name="batch" type="number" min="1" max="1000" step="1" />
      <label class="check">
        <input id="rollout-claimed" name="includeClaimed" type="checkbox" value="yes" /> Include claimed labs
        (their students are told before and after)
      </label>
      <p class="hint">
        Each lab gets a new host at the ref beside its old one, promoted only once lab.health passes there;
        the first failure halts the rollout. Check shows what it would do; Roll out asks first.
      </p>
      <p class="row">
        <button type="submit">Roll out…</button>
        <button type="submit" class="secondary" formaction={`${props.base}/rollout/check`}>
          Check
        </button>
      </p>
    </form>
  );
}

// -------------------------------------------------------------------------------------------- confirmation

/** What the confirmation says: how many labs, in which batches, and by name the claimed labs it touches. */
export function RolloutConfirmMessage(props: {
  name: string;
  ref: string;
  hosts: PlannedHost[];
  batch: number;
  includeClaimed: boolean;
  /** Claimed labs left alone (include-claimed is off): lab and student. */
  claimedLeft: { hostId: string; student: string }[];
  /** Labs left alone for another reason: lab and why. */
  skipped: { hostId: string; detail: string }[];
}) {
  const n = props.hosts.length;
  const canary = props.hosts.filter((h) => h.batch === 0).map((h) => h.hostId);
  const batches = new Set(props.hosts.filter((h) => h.batch > 0).map((h) => h.batch)).size;
  const claimed = props.hosts.filter((h) => h.student !== null);
  return (
    <>
      <p id="rollout-what">
        Rolls {props.ref} out to {plural(n, "lab")} of {props.name}: the canary first ({canary.join(", ")})
        {batches > 0 ? `, then ${plural(batches, "batch", "batches")} of at most ${props.batch}` : ""}. Each
        lab gets a new host at {props.ref} beside its old one and is promoted only once lab.health passes
        there; the first failure halts the rollout and leaves every lab not reached as it is.
      </p>
      {claimed.length > 0 ? (
        <>
          <p class="alert" id="rollout-claimed-count">
            {plural(claimed.length, "claimed lab")} would be touched: {claimed.length === 1 ? "its" : "their"}{" "}
            {claimed.length === 1 ? "student sees" : "students see"} a notice before and after, and{" "}
            {claimed.length === 1 ? "the student's" : "each student's"} link moves to the new lab once it
            passes. What they did on the old lab is not carried over.
          </p>
          <div class="scroll">
            <table id="rollout-claimed">
              <caption>Claimed labs this rollout updates</caption>
              <thead>
                <tr>
                  <th scope="col">Lab</th>
                  <th scope="col">Student</th>
                  <th scope="col">Batch</th>
                </tr>
              </thead>
              <tbody>
                {claimed.map((h) => (
                  <tr>
                    <th scope="row">{h.hostId}</th>
                    <td>{h.student}</td>
                    <td>{batchName(h.batch)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      ) : (
        <p id="rollout-claimed-count">
          No claimed lab is touched
          {props.claimedLeft.length > 0
            ? `: ${plural(props.claimedLeft.length, "claimed lab")} ${props.claimedLeft.length === 1 ? "stays" : "stay"} as ${props.claimedLeft.length === 1 ? "it is" : "they are"} (${props.claimedLeft.map((c) => `${c.hostId}: ${c.student}`).join(", ")}); tick Include claimed labs to update ${props.claimedLeft.length === 1 ? "it" : "them"}.`
            : "."}
        </p>
      )}
      {props.skipped.length > 0 ? (
        <>
          <p>Left alone:</p>
          <ul id="rollout-skipped">
            {props.skipped.map((s) => (
              <li>
                {s.hostId}: {s.detail}
              </li>
            ))}
          </ul>
        </>
      ) : null}
    </>
  );
}

// ------------------------------------------------------------------------------------- the live region

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
const batchName = (b: number) => (b === 0 ? "canary" : `batch ${b}`);

/** Where a lab is in its rollout, in words: waiting, building, gate passed or failed, promoted, in place. */
export function rolloutStage(h: RolloutHostView): { label: string; style: string } {
  switch (h.state) {
    case "pending":
      return { label: "waiting", style: "pending" };
    case "building":
      return {
        label: h.mode === "replace" ? "building the new host" : "updating in place",
        style: "building",
      };
    case "promoted":
      return { label: "gate passed, promoted", style: "ready" };
    case "updated":
      return { label: "gate passed, updated in place", style: "ready" };
    case "failed":
      return { label: h.gate === "failed" ? "gate failed" : "build failed", style: "failed" };
    case "skipped":
      return {
        label: h.reason?.startsWith("claimed by") ? "left alone: claimed during the rollout" : "left alone",
        style: "pending",
      };
    case "aborted":
      return { label: "stopped by abort", style: "aborted" };
  }
}

/**
 * The workshop page's rollout region (`live-rollout`): the latest rollout, each lab's old and new ref, its
 * stage and gate, the error and log tail of a failure (redacted when it was recorded), why a halt happened and
 * what to do, and the Resume or Abort button. Nothing when the workshop has had no rollout.
 */
export function RolloutRegion(props: { base: string; csrf: string; rollout?: RolloutView | undefined }) {
  const r = props.rollout;
  if (!r) return null;
  const done = r.hosts.filter((h) => h.state === "promoted" || h.state === "updated").length;
  const failed = r.hosts.filter((h) => h.state === "failed");
  const leftAlone = r.hosts.filter((h) => h.state === "skipped");
  const from = r.fromRef ?? "the default branch";
  return (
    <section class="rollout" aria-labelledby="rollout-h" data-state={r.state} data-rollout={r.id}>
      <h2 id="rollout-h">
        Rollout to {r.ref}
        <span class="sr-only"> ({r.state})</span>
      </h2>
      <ul class="summary" id="rollout-summary">
        <li>
          State: <State state={r.state} />
        </li>
        <li>
          {done}/{r.hosts.length} labs on {r.ref}
          {leftAlone.length ? `, ${plural(leftAlone.length, "lab")} left alone` : ""}
        </li>
        <li>From {from}</li>
        <li>
          Canary {r.canary}, batches of {r.batch}
          {r.includeClaimed ? ", claimed labs included" : ""}
        </li>
        <li>
          Started <Time at={r.createdAt} />
          {r.by ? ` by ${r.by}` : ""}
        </li>
      </ul>
      {r.state === "halted" ? (
        <div class="alert" role="alert" id="rollout-halt">
          <p>
            The rollout halted: {failed.length ? failed.map((h) => h.hostId).join(", ") : "a lab"} failed the
            update to {r.ref}. No further batch started: every lab not reached is still on its old ref, with
            its student, and a failed lab's new host was removed.
          </p>
          <p>
            What to do: read the log below, fix the lab at {r.ref} (push the fix to that ref), then press
            Resume: the failed labs are tried again, then the batches not reached. To go back instead, roll
            out {r.fromRef ?? "the previous ref"} again: the labs already promoted return to it.
          </p>
        </div>
      ) : r.state === "aborted" ? (
        <p class="notice" id="rollout-halt">
          The rollout was aborted: new hosts not yet promoted were removed, and the labs already promoted keep{" "}
          {r.ref}. Resume goes on with it.
        </p>
      ) : r.state === "running" ? (
        <p class="hint">
          The new hosts build beside the old ones; students keep their labs until theirs passes. This region
          follows it live.
        </p>
      ) : null}
      <div class="scroll table-wrap">
        <table aria-labelledby="rollout-h">
          <thead>
            <tr>
              <th scope="col">Lab</th>
              <th scope="col">Batch</th>
              <th scope="col">Old ref</th>
              <th scope="col">New ref</th>
              <th scope="col">Stage</th>
              <th scope="col">Gate</th>
              <th scope="col">Student</th>
            </tr>
          </thead>
          <tbody id="rollout-hosts">
            {r.hosts.map((h) => {
              const stage = rolloutStage(h);
              return (
                <tr data-host={h.hostId} data-state={h.state}>
                  <th scope="row">{h.hostId}</th>
                  <td>{batchName(h.batch)}</td>
                  <td>{h.fromRef ?? "(default)"}</td>
                  <td>{h.toRef}</td>
                  <td>
                    <State state={stage.style} label={stage.label} />
                    {h.mode === "in_place" && h.state !== "updated" ? (
                      <span class="hint"> (in place)</span>
                    ) : null}
                  </td>
                  <td>{h.gate ?? "—"}</td>
                  <td class="student">{h.student ?? ""}</td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
      {leftAlone.length ? (
        <ul id="rollout-left-alone">
          {leftAlone.map((h) => (
            <li data-left-alone={h.hostId}>
              {h.hostId} was left as it was: {h.reason ?? "the rollout did not update it"}
            </li>
          ))}
        </ul>
      ) : null}
      {r.hosts
        .filter((h) => h.state === "failed" && (h.error || h.logTail))
        .map((h) => (
          <div class="failure" data-failure={h.hostId}>
            <h3>{h.hostId}: why its update failed</h3>
            {h.error ? <pre class="error">{h.error}</pre> : null}
            {h.logTail ? (
              <>
                <p class="hint">The end of its setup log (secrets redacted):</p>
                <pre class="command log-tail">{h.logTail}</pre>
              </>
            ) : null}
          </div>
        ))}
      <div class="row">
        {r.state === "running" ? (
          <form method="post" action={`${props.base}/rollout/abort`}>
            <Csrf token={props.csrf} />
            <button type="submit" class="danger secondary">
              Abort rollout…
            </button>
          </form>
        ) : null}
        {r.state === "halted" || r.state === "aborted" ? (
          <form method="post" action={`${props.base}/rollout/resume`}>
            <Csrf token={props.csrf} />
            <button type="submit">Resume rollout</button>
          </form>
        ) : null}
      </div>
    </section>
  );
}

// -------------------------------------------------------------------------------------------- check page

/** A check report as a page: the summary (hosts counted apart from the workshop) and one row per item. */
export function CheckPage(props: { viewer: Viewer; title: string; report: CheckReport; back: string }) {
  const r = props.report;
  const summary = checkSummary(r);
  return (
    <Layout title={props.title} viewer={props.viewer}>
      <h1>{props.title}</h1>
      <p class="notice" role="status" id="check-summary">
        {summary.text[0]?.toUpperCase()}
        {summary.text.slice(1)}. Nothing was changed: this is what {r.command} would do now.
      </p>
      {r.items.length === 0 ? (
        <p>No host to act on.</p>
      ) : (
        <div class="scroll table-wrap">
          <table>
            <caption>What {r.command} would do, per host and stage</caption>
            <thead>
              <tr>
                <th scope="col">Host</th>
                <th scope="col">Stage</th>
                <th scope="col">Action</th>
                <th scope="col">Why</th>
              </tr>
            </thead>
            <tbody id="check-items">
              {r.items.map((i) => (
                <tr data-host={i.hostId} data-stage={i.stage} data-action={i.action}>
                  <th scope="row">{i.hostId === WORKSHOP_ITEM ? "the workshop" : i.hostId}</th>
                  <td>{i.stage}</td>
                  <td>
                    <State state={ACTION_STYLE[i.action] ?? "pending"} label={i.action} />
                  </td>
                  <td class="what">{i.detail ?? ""}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <p>
        <a href={props.back}>Back</a>
      </p>
    </Layout>
  );
}

const ACTION_STYLE: Record<string, string> = {
  create: "building",
  rebuild: "building",
  promote: "building",
  reuse: "ready",
  skip: "pending",
};
