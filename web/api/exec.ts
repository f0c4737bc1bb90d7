import { createRoute, z } from "@hono/zod-openapi";
import { EXEC_STATUSES, ExecInput } from "../../shared/fleet/exec.ts";
import { cancelExecJob, EXEC_JOB_STATES, execJob, startExecJob } from "../../shared/fleet/exec-jobs.ts";
import { idSchema } from "../../shared/runtime/ids.ts";
import { apiRouter, errors, json, jsonBody, Name, readJson } from "./schemas.ts";

const ExecHostResult = z
  .object({
    host: z.string(),
    status: z.enum(EXEC_STATUSES).meta({
      description:
        "ok: exit 0; failed: another exit code; timeout: killed on the host after the timeout; error: the host could not be reached or could not run it; skipped: not started (max errors reached, or the job was cancelled first); cancelled: ended on the host when the job was cancelled",
    }),
    exitCode: z.number().int().nullable().meta({ description: "null unless the command ended on its own" }),
    stdout: z.string().meta({ description: "the start of its stdout, operator secrets redacted" }),
    stderr: z.string().meta({ description: "the start of its stderr, operator secrets redacted" }),
    stdoutTruncated: z.boolean(),
    stderrTruncated: z.boolean(),
    stdoutBytes: z.number().int().meta({ description: "what the command wrote to stdout in all" }),
    stderrBytes: z.number().int(),
    durationMs: z.number().int(),
    reason: z.string().optional().meta({ description: "why it did not run, or how it ended" }),
  })
  .meta({ id: "ExecHostResult" });

const ExecJob = z
  .object({
    jobId: z.string().meta({ example: "exj_01J9ZK3M4R7S8T9V0W1X2Y3Z4A" }),
    workshop: z.string(),
    state: z.enum(EXEC_JOB_STATES).meta({
      description:
        "running; cancelling (asked to stop: the next step ends what runs); succeeded (every host exited 0); failed (it ended, and some host did not succeed, or the job itself failed: see error); cancelled",
    }),
    command: z.string().meta({ description: "the command's start, key-like values redacted" }),
    ok: z.boolean().meta({ description: "the job ended and every selected host exited 0" }),
    startedAt: z.string(),
    endedAt: z.string().nullable(),
    durationMs: z.number().int().meta({ description: "so far, while it runs" }),
    timeoutSeconds: z.number().int().meta({ description: "each host's timeout" }),
    concurrency: z.number().int(),
    maxErrors: z.number().int().nullable(),
    hosts: z
      .array(ExecHostResult)
      .meta({ description: "the results so far, one per host that has ended, in the hosts' order" }),
    selected: z.array(z.string()).meta({ description: "the selected hosts, in the order of `hosts`" }),
    running: z.array(z.string()).meta({ description: "the hosts whose command runs now" }),
    waiting: z.number().int().meta({ description: "hosts not started yet" }),
    summary: z.object({
      total: z.number().int().meta({ description: "the selected hosts" }),
      ok: z.number().int(),
      failed: z.number().int(),
      timeout: z.number().int(),
      error: z.number().int(),
      skipped: z.number().int(),
      cancelled: z.number().int(),
      text: z.string().meta({ example: "12 ok, 1 failed (exit 2): student-07; 1 timeout: student-03" }),
    }),
    notes: z.array(z.string()),
    transitions: z.number().int().meta({
      description:
        "the workflow's Step Functions state transitions: so far on the local runtime, once the job ended in the cloud",
    }),
    error: z.string().optional().meta({ description: "why the job failed outside its hosts" }),
  })
  .meta({ id: "ExecJob" });

const JobParams = z.object({
  name: Name,
  jobId: idSchema("exec").meta({ description: "an exec job id", example: "exj_01J9ZK3M4R7S8T9V0W1X2Y3Z4A" }),
});
const NameOnly = z.object({ name: Name });

const execRoute = createRoute({
  method: "post",
  path: "/{name}/exec",
  operationId: "startExec",
  tags: ["fleet"],
  summary: "Run a command on the selected hosts (a job)",
  description:
    "Starts an exec job: one shell command on every selected host, `concurrency` at a time, each under its own timeout (up to 3600 s), and answers at once with the job (Location: where to follow it). The command runs detached on each host; the job keeps each host's exit code, status and the start of its output (64 KiB each of stdout and stderr; 20,000 and 6,800 bytes over SSM). Follow it with `GET .../exec/{jobId}`. Records an `exec` event when it ends, never the output.",
  middleware: [readJson] as const,
  request: { params: NameOnly, body: jsonBody(ExecInput, "The command and which hosts.", true) },
  responses: {
    202: {
      ...json(ExecJob, "The job was started."),
      headers: z.object({ Location: z.string().meta({ description: "the job: GET it to follow it" }) }),
    },
    ...errors(400, 401, 404),
  },
});

const jobRoute = createRoute({
  method: "get",
  path: "/{name}/exec/{jobId}",
  operationId: "getExec",
  tags: ["fleet"],
  summary: "An exec job: its state and the host results so far",
  description:
    "The job as it is now: its state, one result per host that has ended (2 MiB of output in all), the hosts still running and the summary so far. Jobs are kept for a day.",
  request: { params: JobParams },
  responses: { 200: json(ExecJob, "The job."), ...errors(400, 401, 404) },
});

const cancelRoute = createRoute({
  method: "post",
  path: "/{name}/exec/{jobId}/cancel",
  operationId: "cancelExec",
  tags: ["fleet"],
  summary: "Cancel an exec job",
  description:
    "Asks a running job to stop: no further host starts, and the commands still running are ended on their hosts (status cancelled) at the job's next step. A job that has ended is answered as it is.",
  request: { params: JobParams },
  responses: { 202: json(ExecJob, "The job, asked to stop."), ...errors(400, 401, 404) },
});

/** `POST /api/workshops/{name}/exec`, `GET .../exec/{jobId}`, `POST .../exec/{jobId}/cancel`. */
export const execApi = apiRouter()
  .openapi(execRoute, async (c) => {
    const { name } = c.req.valid("param");
    const job = await startExecJob(name, c.req.valid("json"));
    c.header("Location", `/api/workshops/${encodeURIComponent(name)}/exec/${job.jobId}`);
    return c.json(job, 202);
  })
  .openapi(jobRoute, async (c) => {
    const { name, jobId } = c.req.valid("param");
    return c.json(await execJob(name, jobId), 200);
  })
  .openapi(cancelRoute, async (c) => {
    const { name, jobId } = c.req.valid("param");
    return c.json(await cancelExecJob(name, jobId), 202);
  });
