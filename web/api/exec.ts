import { createRoute, z } from "@hono/zod-openapi";
import { stream } from "hono/streaming";
import { EXEC_STATUSES, ExecInput, prepareExec } from "../../shared/fleet/exec.ts";
import { apiRouter, errors, json, jsonBody, NameParams, readJson } from "./schemas.ts";

const ExecHostResult = z
  .object({
    host: z.string(),
    status: z.enum(EXEC_STATUSES).meta({
      description:
        "ok: exit 0; failed: another exit code; timeout: killed on the host after the timeout; error: the host could not be reached or could not run it; skipped: not started (max errors reached, or the request's time ran out)",
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

const ExecReport = z
  .object({
    workshop: z.string(),
    ok: z.boolean().meta({ description: "every selected host exited 0" }),
    startedAt: z.string(),
    durationMs: z.number().int(),
    timeoutSeconds: z
      .number()
      .int()
      .meta({ description: "each host's timeout (the request's budget may cut it)" }),
    concurrency: z.number().int(),
    maxErrors: z.number().int().nullable(),
    hosts: z.array(ExecHostResult).meta({ description: "one result per selected host, in the hosts' order" }),
    summary: z.object({
      total: z.number().int(),
      ok: z.number().int(),
      failed: z.number().int(),
      timeout: z.number().int(),
      error: z.number().int(),
      skipped: z.number().int(),
      text: z.string().meta({ example: "12 ok, 1 failed (exit 2): student-07; 1 timeout: student-03" }),
    }),
    notes: z.array(z.string()),
  })
  .meta({ id: "ExecReport" });

const KEEPALIVE_MS = 15_000;

const execRoute = createRoute({
  method: "post",
  path: "/{name}/exec",
  operationId: "execCommand",
  tags: ["fleet"],
  summary: "Run a command on the selected hosts",
  description:
    "Runs one shell command on every selected host, `concurrency` at a time, each under its own timeout, and answers once every host is done: one result per host with its exit code, status and the start of its output (64 KiB each of stdout and stderr; 20,000 and 6,800 bytes over SSM; 2 MiB in all). On AWS the request's time budget (25 s) bounds the whole run. Records an `exec` event, never the output.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(ExecInput, "The command and which hosts.", true) },
  responses: {
    200: json(ExecReport, "One result per host, and the summary."),
    ...errors(400, 401, 404),
  },
});

/** `POST /api/workshops/{name}/exec`. */
export const execApi = apiRouter().openapi(execRoute, async (c) => {
  // What can be refused is refused before the answer starts: a bad selection is a 400, a workshop a 404.
  const run = await prepareExec(c.req.valid("param").name, c.req.valid("json"));
  c.header("Content-Type", "application/json");
  // The answer's headers go out at once and a space every KEEPALIVE_MS while the hosts run (JSON allows
  // leading whitespace): an exec longer than an HTTP client's idle timeouts (Node's fetch: 300 s) still
  // reaches its client. On Lambda the answer is buffered and the request's budget bounds the run anyway.
  return stream(c, async (s) => {
    const timer = setInterval(() => void s.write(" "), KEEPALIVE_MS);
    try {
      const report: z.infer<typeof ExecReport> = await run();
      await s.write(JSON.stringify(report));
    } finally {
      clearInterval(timer);
    }
  }) as unknown as ReturnType<typeof c.json<z.infer<typeof ExecReport>, 200>>;
});
