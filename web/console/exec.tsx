/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Context } from "hono";
import type { Child } from "hono/jsx";
import { z } from "zod";
import { execCommand, execTargets } from "../../shared/fleet/exec.ts";
import { listClaims } from "../../shared/portal/portal.ts";
import { hostList } from "./format.ts";
import { ExecResultPage } from "./views/exec.tsx";
import { ConfirmPage, type Viewer } from "./views/layout.tsx";

/**
 * The console's Run a command (POST /console/w/:name/exec): the selected hosts run the command (the same
 * domain function as `labfleet exec`), and the page shows one row per host. When a selected lab is claimed
 * the first post asks, naming each student, and the confirmed second post runs it.
 */
const ExecForm = z.object({
  command: z.string().max(16 * 1024),
  hosts: z.string().max(4000).default(""),
  timeout: z.string().max(10).default("60"),
  confirm: z.string().max(100).optional(),
});

export async function execAction(
  c: Context,
  name: string,
  viewer: Viewer,
  page: (node: Child) => Response | Promise<Response>,
): Promise<Response> {
  const f = ExecForm.parse(await c.req.parseBody());
  const hosts = hostList(f.hosts);
  const sel = hosts.length ? { hosts } : {};
  const timeoutSeconds = /^\s*\d{1,5}\s*$/.test(f.timeout) ? Number(f.timeout) : Number.NaN;
  if (f.confirm !== "yes") {
    const ids = new Set((await execTargets(name, sel)).map((h) => h.hostId));
    const claimed = (await listClaims(name)).filter((cl) => ids.has(cl.lab));
    if (claimed.length > 0) {
      return page(
        <ConfirmPage
          viewer={viewer}
          title={`Run on ${claimed.length} claimed lab${claimed.length === 1 ? "" : "s"}?`}
          message={
            <>
              <p>Students are working on these labs; the command runs in their lab as it is now:</p>
              <ul>
                {claimed.map((cl) => (
                  <li>
                    {cl.lab}: {cl.name}
                  </li>
                ))}
              </ul>
              <pre class="command">{f.command}</pre>
            </>
          }
          action={`/console/w/${name}/exec`}
          fields={{ command: f.command, hosts: f.hosts, timeout: f.timeout }}
          button={`Run on ${ids.size} host${ids.size === 1 ? "" : "s"}`}
          back={`/console/w/${name}`}
        />,
      );
    }
  }
  const report = await execCommand(name, { command: f.command, ...sel, timeoutSeconds });
  return page(<ExecResultPage viewer={viewer} name={name} command={f.command} report={report} />);
}
