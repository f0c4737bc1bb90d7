// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Receipt } from "../../../shared/fleet/receipt.ts";
import type { RunView } from "../../../shared/fleet/workshops.ts";
import { Time } from "../../time.tsx";
import { DataTable } from "./layout.tsx";

/**
 * The teardown receipt on a torn-down workshop's page: the host-hours and their cost, what is left (why, and
 * the command that removes it, ready to copy) and what was removed.
 */
export function ReceiptSection(props: { receipt: Receipt }) {
  const r = props.receipt;
  const u = r.usage;
  const cost = u.costUsd === undefined ? "cost unknown" : `$${u.costUsd.toFixed(2)}`;
  return (
    <section aria-labelledby="receipt-h" id="receipt">
      <h2 id="receipt-h">Teardown receipt</h2>
      {r.failed !== undefined ? (
        <p class="error" role="alert" id="receipt-failed">
          <strong>The teardown failed</strong> <Time at={r.endedAt} />:{" "}
          {r.failed.replace(/^the teardown failed: /, "")}. Run it again to remove what is left:{" "}
          <code>labfleet down {r.workshop} --yes</code>, or Tear down… on this page.
        </p>
      ) : null}
      <p>
        Teardown {r.failed !== undefined ? "stopped" : "ended"} <Time at={r.endedAt} />
        {r.region ? ` in ${r.region}` : ""}. Used: {u.hostHours.toFixed(2)} host-hours on {u.hosts} host
        {u.hosts === 1 ? "" : "s"}
        {u.earlier
          ? ` (${u.earlier.hosts} removed before the teardown: ${u.earlier.hostHours.toFixed(2)} host-hours)`
          : ""}
        , <strong>{cost}</strong> <span class="hint">({u.basis})</span>.
      </p>
      {r.checkError ? (
        <p class="error" role="alert">
          The check for leftovers did not finish: {r.checkError}
        </p>
      ) : null}
      {r.left.length === 0 ? (
        <p class="ok" id="receipt-status">
          Nothing left{r.checkError ? " was found, but the check is incomplete" : ""}: checked{" "}
          <Time at={r.checkedAt} />.
        </p>
      ) : (
        <>
          <h3 id="receipt-left-h">Left ({r.left.length})</h3>
          <DataTable
            wrapClass="table-wrap receipt"
            labelledBy="receipt-left-h"
            columns={["What", "Id", "Host", "Why", "Remove it with"]}
          >
            {r.left.map((l) => (
              <tr>
                <td>{l.kind}</td>
                <td>
                  <code>{l.id}</code>
                </td>
                <td>{l.hostId ?? ""}</td>
                <td>
                  {l.why}
                  {l.foundBy === "sweeper" ? (
                    <>
                      {" "}
                      (found by the sweeper <Time at={l.foundAt} />)
                    </>
                  ) : (
                    ""
                  )}
                </td>
                <td>
                  <code>{l.command}</code>
                  {l.byHand ? (
                    <>
                      {" "}
                      or by hand: <code>{l.byHand}</code>
                    </>
                  ) : null}
                </td>
              </tr>
            ))}
          </DataTable>
        </>
      )}
      <h3 id="receipt-removed-h">Removed ({r.removed.length})</h3>
      <DataTable
        wrapClass="table-wrap receipt"
        labelledBy="receipt-removed-h"
        columns={["What", "Id", "Host", "Detail"]}
      >
        {r.removed.map((e) => (
          <tr>
            <td>{e.kind}</td>
            <td>
              <code>{e.id}</code>
            </td>
            <td>{e.hostId ?? ""}</td>
            <td>{e.detail ?? ""}</td>
          </tr>
        ))}
      </DataTable>
    </section>
  );
}

/**
 * The receipt's live region on the workshop page (`live-receipt`): while a teardown runs, what it is doing and
 * that the receipt follows; then the receipt of the last teardown (also one that failed), until another run
 * starts.
 */
export function ReceiptRegion(props: {
  receipt?: Receipt | undefined;
  teardown?: RunView | undefined;
  hosts: number;
}) {
  const t = props.teardown;
  if (t && props.receipt?.runId !== t.id) {
    return (
      <section aria-labelledby="receipt-h" id="receipt">
        <h2 id="receipt-h">Teardown receipt</h2>
        <p id="receipt-progress">
          Tearing down since <Time at={t.startedAt} />: stopping the labs and giving{" "}
          {props.hosts === 1 ? "the 1 host" : `the ${props.hosts} hosts`} back, then checking that nothing is
          left. The receipt appears here when it is taken.
        </p>
      </section>
    );
  }
  return props.receipt ? <ReceiptSection receipt={props.receipt} /> : null;
}
