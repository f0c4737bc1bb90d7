// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { ChecksMatrix } from "../../../shared/portal/checks.ts";
import type { BoardLab } from "../../../shared/portal/claims.ts";
import type { ClaimRow, PortalView } from "../../../shared/portal/portal.ts";
import type { WaitingRow } from "../../../shared/portal/queue.ts";
import type { HeldBack, Hold } from "../../../shared/portal/rate-limit.ts";
import { Time } from "../../time.tsx";
import { Csrf, DataTable, Layout, Notice, State, Tabs, type Viewer } from "./layout.tsx";

// ---------------------------------------------------------------------------------------------- portal

export interface PortalData {
  name: string;
  info?: PortalView | undefined;
  board: { open: boolean; labs: BoardLab[]; spares?: number };
  claims: ClaimRow[];
  /** The waiting line, first in line first. */
  waiting: WaitingRow[];
  /** Ready labs nobody holds (and not failing their health check): where a student can be moved. */
  free: string[];
  /** Claimed or free labs failing their in-use health check, with the last check's output. */
  failing: Record<string, string | null>;
  /** Who the portal's rate limits hold back now (the whole portal's limits, every workshop). */
  heldBack: HeldBack;
  /** "Check my work": each student's latest result per check (no checks: an empty list of checks). */
  checks?: ChecksMatrix | undefined;
}

/** The students x checks matrix: ✓ passed, ✗ failed, – not run yet; the last row counts who passed. */
export function ChecksSection(props: { matrix: ChecksMatrix }) {
  const { checks, students } = props.matrix;
  const mark = (r: boolean | null) =>
    r === null ? (
      <span class="check-none" title="not run yet">
        –
      </span>
    ) : r ? (
      <span class="st-ready" title="passed">
        ✓
      </span>
    ) : (
      <span class="st-failed" title="failed">
        ✗
      </span>
    );
  return (
    <>
      <h2 id="checks-h">Check my work</h2>
      {students.length === 0 ? (
        <p>No lab is claimed yet.</p>
      ) : (
        <DataTable
          labelledBy="checks-h"
          columns={["Lab", "Name", ...checks.map((k) => k.name), "Last checked"]}
        >
          {students.map((s) => (
            <tr>
              <td>{s.lab}</td>
              <td>{s.name}</td>
              {s.results.map((r) => (
                <td>{mark(r)}</td>
              ))}
              <td>{s.lastRanAt ? <Time at={s.lastRanAt} /> : "never"}</td>
            </tr>
          ))}
          <tr class="checks-total">
            <th scope="row" colspan={2}>
              Passed
            </th>
            {checks.map((k) => (
              <td>
                {k.passed} of {students.length}
              </td>
            ))}
            <td />
          </tr>
        </DataTable>
      )}
      <p class="hint">Students run the checks from their lab page (at most once every 30 seconds each).</p>
    </>
  );
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
          {board.spares ? `, ${board.spares} spare${board.spares === 1 ? "" : "s"} kept off the board` : ""}
        </dd>
      </div>
      <div>
        <dt class="sr-only">Waiting line</dt>
        <dd>
          {props.data.waiting.length ? `${props.data.waiting.length} waiting for a lab` : "Nobody waiting"}
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
  unavailable: "not available now",
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
        <tr id={`claim-${c.lab}`} data-health={c.lab in props.data.failing ? "failing" : undefined}>
          <th scope="row">
            {c.lab}
            {c.lab in props.data.failing ? (
              <>
                <br />
                <State state="failed" label="health check failing" />
              </>
            ) : null}
          </th>
          <td>{c.name}</td>
          <td>{c.email}</td>
          <td class="num">
            <Time at={c.claimedAt} />
            <br />
            <small>{c.how}</small>
          </td>
          <td class="num">
            {c.firstOpenedAt ? <Time at={c.firstOpenedAt} /> : "not yet"}
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
            <form method="post" action={`${base}/swap`}>
              <Csrf token={props.csrf} />
              <input type="hidden" name="lab" value={c.lab} />
              <button
                type="submit"
                class={c.lab in props.data.failing ? "" : "secondary"}
                aria-label={`Swap the lab of ${c.name} (${c.lab})`}
              >
                Swap
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

/** 75 as "1 min", 4000 as "1 h 6 min". */
function waitedText(seconds: number): string {
  if (seconds < 60) return `${seconds} s`;
  const m = Math.floor(seconds / 60);
  return m < 60 ? `${m} min` : `${Math.floor(m / 60)} h ${m % 60} min`;
}

/** The waiting line in order, with how long each has waited and a button that takes them out. */
export function WaitingRows(props: { data: PortalData; csrf: string }) {
  const { name, waiting } = props.data;
  if (waiting.length === 0)
    return (
      <tr>
        <td colspan={5}>Nobody is waiting.</td>
      </tr>
    );
  return (
    <>
      {waiting.map((w) => (
        <tr>
          <th scope="row" class="num">
            {w.number}
          </th>
          <td>{w.name}</td>
          <td>{w.email}</td>
          <td class="num">{waitedText(w.waitedSeconds)}</td>
          <td>
            <form method="post" action={`/console/w/${name}/portal/unqueue`}>
              <Csrf token={props.csrf} />
              <input type="hidden" name="email" value={w.email} />
              <button type="submit" class="danger secondary" aria-label={`Remove ${w.name} from the line`}>
                Remove
              </button>
            </form>
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
      <Time at={portalWide.liftsAt} show="when" />, students who already typed a wrong code a few times wait.
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
      <div class="scroll">
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
                    <td class="num">
                      <Time at={h.liftsAt} show="when" />
                    </td>
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
      </div>
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
      <h2 id="waiting-h">Waiting line</h2>
      <DataTable
        labelledBy="waiting-h"
        columns={["#", "Name", "Email", "Waiting", "Actions"]}
        bodyId="live-waiting"
      >
        <WaitingRows data={props.data} csrf={csrf} />
      </DataTable>
      <p class="hint">
        Students who found no lab free wait here in order; the next lab that comes free (released, rebuilt,
        added, or a spare no longer kept) goes to the first in line, on the link they already have.
      </p>
      {props.data.checks?.checks.length ? <ChecksSection matrix={props.data.checks} /> : null}
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
