// The pragmas make the JSX runtime explicit: tsx (the CLI's loader) reads tsconfig.json from the current
// folder, and `labfleet dev` may run from any folder.
/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Receipt } from "../../../shared/fleet/receipt.ts";
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
      <p>
        Teardown ended <Time at={r.endedAt} />
        {r.region ? ` in ${r.region}` : ""}. Used: {u.hostHours.toFixed(2)} host-hours on {u.hosts} host
        {u.hosts === 1 ? "" : "s"}, <strong>{cost}</strong> <span class="hint">({u.basis})</span>.
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
