/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { ClaimedLab } from "../../../shared/fleet/claimed.ts";
import { ConfirmPage, type Viewer } from "./layout.tsx";

/**
 * Asked before a deploy or retry rebuilds labs students have claimed: each lab and its student by name. The
 * button posts the same form again with `confirm=yes`; going back starts nothing.
 */
export function RebuildConfirm(props: {
  viewer: Viewer;
  name: string;
  verb: "deploy" | "retry";
  claimed: readonly ClaimedLab[];
  fields: Record<string, string>;
}) {
  const n = props.claimed.length;
  const labs = n === 1 ? "1 claimed lab" : `${n} claimed labs`;
  return (
    <ConfirmPage
      viewer={props.viewer}
      title={`Rebuild ${labs} in ${props.name}?`}
      message={
        <>
          <p>
            This {props.verb} rebuilds {n === 1 ? "a lab a student is using" : "labs students are using"}: the
            lab is installed again from scratch and what the student did on it is lost. Their claim stays, and
            they get the rebuilt lab under the same link once it is ready.
          </p>
          <div class="scroll">
            <table>
              <caption>Claimed labs this {props.verb} rebuilds</caption>
              <thead>
                <tr>
                  <th scope="col">Lab</th>
                  <th scope="col">Student</th>
                </tr>
              </thead>
              <tbody>
                {props.claimed.map((c) => (
                  <tr>
                    <th scope="row">{c.lab}</th>
                    <td>{c.student}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        </>
      }
      action={`/console/w/${props.name}/${props.verb}`}
      fields={props.fields}
      button={`Rebuild ${labs}`}
      back={`/console/w/${props.name}`}
    />
  );
}
