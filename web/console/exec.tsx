/** @jsxRuntime automatic */
/** @jsxImportSource hono/jsx */
import type { Context } from "hono";
import type { Child } from "hono/jsx";
import type { ContentfulStatusCode } from "hono/utils/http-status";
import { z } from "zod";
import {
  EXEC_COMMAND_MAX_CHARS,
  EXEC_DEFAULT_CONCURRENCY,
  EXEC_MAX_CONCURRENCY,
  EXEC_MAX_TIMEOUT_SECONDS,
  execTargets,
} from "../../shared/fleet/exec.ts";
import { cancelExecJob, execJob, startExecJob } from "../../shared/fleet/exec-jobs.ts";
import { listClaims } from "../../shared/portal/portal.ts";
import { isVisibleError } from "../../shared/runtime/errors.ts";
import { idSchema } from "../../shared/runtime/ids.ts";
import { issueDetails } from "../../shared/runtime/zod.ts";
import { live } from "./common.tsx";
import { hostList } from "./format.ts";
import {
  EXEC_MAX_ERRORS,
  type ExecFormErrors,
  ExecFormPage,
  type ExecFormValues,
  ExecJobPage,
  ExecRows,
  ExecStatus,
} from "./views/exec.tsx";
import { ConfirmPage, type Viewer } from "./views/layout.tsx";

/**
 * The console's Run a command (POST /console/w/:name/exec): starts an exec job (the same domain function as
 * `labfleet exec`) and sends the browser to the job's page, which follows it live (one row per host as its
 * result arrives; web/console/views/exec.tsx). When a selected lab is claimed the first post asks, naming each
 * student, and the confirmed second post starts it. Bad input (a field out of range, a host the workshop does
 * not have) comes back as the form, as typed, with each error at its field (400).
 */
/** A whole number from `min` to `max` as the form sends it (trimmed); blank only where `blank` allows it. */
const whole = (min: number, max: number, blank?: string) =>
  z
    .string()
    .max(20)
    .default("")
    .transform((t) => t.trim())
    .refine((t) => (blank !== undefined && t === "") || (/^\d{1,6}$/.test(t) && +t >= min && +t <= max), {
      error: `expected a whole number from ${min} to ${max}${blank ? `, or blank for ${blank}` : ""}`,
    });

/** The form's fields: each error's path is the field's name. */
const ExecFormFields = z.object({
  command: z
    .string({ error: "expected a command to run" })
    .max(EXEC_COMMAND_MAX_CHARS, { error: `expected at most ${EXEC_COMMAND_MAX_CHARS} characters` })
    .refine((t) => t.trim() !== "", { error: "expected a command to run" }),
  hosts: z.string().max(4000, { error: "expected at most 4000 characters" }).default(""),
  timeout: whole(1, EXEC_MAX_TIMEOUT_SECONDS),
  concurrency: whole(1, EXEC_MAX_CONCURRENCY, `${EXEC_DEFAULT_CONCURRENCY} at once`),
  maxErrors: whole(1, EXEC_MAX_ERRORS, "never stop"),
  confirm: z.string().max(100).optional(),
});

/** The API's field names for the form's (what ExecInput or the selection calls them). */
const FORM_FIELD: Record<string, keyof ExecFormValues> = {
  command: "command",
  hosts: "hosts",
  timeoutSeconds: "timeout",
  timeout: "timeout",
  concurrency: "concurrency",
  maxErrors: "maxErrors",
};

export async function execAction(
  c: Context,
  name: string,
  viewer: Viewer,
  page: (node: Child, status?: ContentfulStatusCode) => Response | Promise<Response>,
): Promise<Response> {
  const body = await c.req.parseBody();
  const text = (k: string) => (typeof body[k] === "string" ? (body[k] as string) : "");
  const values: ExecFormValues = {
    command: text("command").replace(/\r\n?/g, "\n"),
    hosts: text("hosts"),
    timeout: text("timeout"),
    concurrency: text("concurrency"),
    maxErrors: text("maxErrors"),
  };
  const again = (errors: ExecFormErrors, message?: string) =>
    page(<ExecFormPage viewer={viewer} name={name} values={values} errors={errors} message={message} />, 400);
  const parsed = ExecFormFields.safeParse({ ...values, confirm: body.confirm });
  if (!parsed.success) {
    const errors: ExecFormErrors = {};
    for (const d of issueDetails(parsed.error.issues)) {
      const field = FORM_FIELD[d.path.split(".")[0] ?? ""];
      if (field) errors[field] ??= d.message;
    }
    return again(errors);
  }
  const f = parsed.data;
  const hosts = hostList(f.hosts);
  const sel = hosts.length ? { hosts } : {};
  const input = {
    command: f.command,
    ...sel,
    timeoutSeconds: Number(f.timeout),
    ...(f.concurrency ? { concurrency: Number(f.concurrency) } : {}),
    ...(f.maxErrors ? { maxErrors: Number(f.maxErrors) } : {}),
  };
  try {
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
            fields={{
              command: f.command,
              hosts: f.hosts,
              timeout: f.timeout,
              concurrency: f.concurrency,
              maxErrors: f.maxErrors,
            }}
            button={`Run on ${ids.size} host${ids.size === 1 ? "" : "s"}`}
            back={`/console/w/${name}`}
          />,
        );
      }
    }
    const job = await startExecJob(name, input);
    return c.redirect(`/console/w/${name}/exec/${job.jobId}`, 303);
  } catch (err) {
    // A host the workshop does not have, an empty selection: at the field it came from.
    if (!isVisibleError(err) || err.kind !== "input") throw err;
    const errors: ExecFormErrors = {};
    for (const d of err.details) {
      const field = FORM_FIELD[d.path.split(".")[0] ?? ""];
      if (field) errors[field] ??= d.message;
    }
    if (Object.keys(errors).length === 0 && err.code.startsWith("selection.")) errors.hosts = err.message;
    return again(errors, Object.keys(errors).length ? undefined : err.message);
  }
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
