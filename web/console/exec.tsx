/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Context } from "hono";
import type { Child } from "hono/jsx";
import { z } from "zod";
import { execTargets } from "../../shared/fleet/exec.ts";
import { cancelExecJob, execJob, startExecJob } from "../../shared/fleet/exec-jobs.ts";
import { listClaims } from "../../shared/portal/portal.ts";
import { idSchema } from "../../shared/runtime/ids.ts";
import { live } from "./common.tsx";
import { hostList } from "./format.ts";
import { ExecJobPage, ExecRows, ExecStatus } from "./views/exec.tsx";
import { ConfirmPage, type Viewer } from "./views/layout.tsx";

/**
 * The console's Run a command (POST /console/w/:name/exec): starts an exec job (the same domain function as
 * `labfleet exec`) and sends the browser to the job's page, which follows it live (one row per host as its
 * result arrives; web/console/views/exec.tsx). When a selected lab is claimed the first post asks, naming each
 * student, and the confirmed second post starts it.
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
  const job = await startExecJob(name, { command: f.command, ...sel, timeoutSeconds });
  return c.redirect(`/console/w/${name}/exec/${job.jobId}`, 303);
}

const JobId = idSchema("exec");

/** GET /console/w/:name/exec/:jobId: the job's page, following it live while it runs. */
export async function execJobPage(
  c: Context,
  name: string,
  viewer: Viewer,
  page: (node: Child) => Response | Promise<Response>,
): Promise<Response> {
  const job = await execJob(name, JobId.parse(c.req.param("jobId")));
  return page(<ExecJobPage viewer={viewer} name={name} job={job} csrf={viewer.csrf} />);
}

/** GET /console/w/:name/exec/:jobId/live: the job page's live regions. */
export async function execJobLive(c: Context, name: string, viewer: Viewer): Promise<Response> {
  const job = await execJob(name, JobId.parse(c.req.param("jobId")));
  return live(c, {
    "live-exec-status": <ExecStatus job={job} base={`/console/w/${name}`} csrf={viewer.csrf} />,
    "exec-results": <ExecRows job={job} />,
  });
}

/** POST /console/w/:name/exec/:jobId/cancel: asks the job to stop, back to its page. */
export async function execCancel(c: Context, name: string): Promise<Response> {
  const job = await cancelExecJob(name, JobId.parse(c.req.param("jobId")));
  return c.redirect(`/console/w/${name}/exec/${job.jobId}`, 303);
}
