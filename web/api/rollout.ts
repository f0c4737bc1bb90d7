import { createRoute, z } from "@hono/zod-openapi";
import { CHECK_ACTIONS } from "../../shared/fleet/check.ts";
import {
  abortRollout,
  checkRollout,
  RolloutOptions,
  resumeRollout,
  rolloutStatus,
  startRollout,
} from "../../shared/fleet/rollout.ts";
import { ROLLOUT_HOST_STATES, ROLLOUT_STATES } from "../../shared/store/entities.ts";
import { apiRouter, errors, json, jsonBody, NameParams, RunId, readJson } from "./schemas.ts";

const tags = ["fleet"];
const nullable = <T extends z.ZodType>(t: T) => z.union([t, z.null()]);

const RolloutHost = z
  .object({
    hostId: z.string().meta({ example: "student-01" }),
    batch: z.number().int().meta({ description: "0 is the canary" }),
    mode: z.enum(["replace", "in_place"]).meta({
      description:
        "replace: a new host beside the old one, promoted once it passes; in_place: a bring-your-own host",
    }),
    state: z.enum(ROLLOUT_HOST_STATES),
    fromRef: nullable(z.string()).meta({ description: "the ref the lab was at (null: the default branch)" }),
    toRef: z.string(),
    gate: nullable(z.enum(["passed", "failed"])).meta({ description: "lab.health on the new lab" }),
    student: nullable(z.string()).meta({
      description: "the student's name, when the lab was claimed (at the start, or during the rollout)",
    }),
    reason: nullable(z.string()).meta({
      description:
        "why the rollout left the lab alone (state skipped): a student claimed it during the rollout without includeClaimed, or it was no longer ready",
    }),
    needsAttention: z.boolean().meta({
      description: "a bring-your-own host an earlier rollout left needing attention, updated in place again",
    }),
    error: nullable(z.string()),
    logTail: nullable(z.string()).meta({ description: "the end of a failed setup's log, redacted" }),
    startedAt: nullable(z.string()),
    endedAt: nullable(z.string()),
  })
  .meta({ id: "RolloutHost" });

export const RolloutView = z
  .object({
    id: z.string().meta({ example: "rol_01JABCDEFGHJKMNPQRSTVWXYZ0" }),
    workshop: z.string(),
    ref: z.string(),
    fromRef: nullable(z.string()),
    state: z.enum(ROLLOUT_STATES),
    canary: z.number().int(),
    batch: z.number().int(),
    includeClaimed: z.boolean(),
    runId: RunId,
    by: nullable(z.string()),
    error: nullable(z.string()),
    createdAt: z.string(),
    endedAt: nullable(z.string()),
    hosts: z.array(RolloutHost),
  })
  .meta({ id: "Rollout" });

const RolloutCheck = z
  .object({
    workshop: z.string(),
    command: z.literal("rollout"),
    items: z.array(
      z.object({
        hostId: z.string(),
        stage: z.literal("rollout"),
        action: z.enum(CHECK_ACTIONS as [string, ...string[]]),
        detail: z.string().optional(),
      }),
    ),
    changes: z
      .boolean()
      .meta({ description: "whether any lab would change (`labfleet rollout --check` exits 2)" }),
  })
  .meta({ id: "RolloutCheck" });

const Answer = z.object({ rollout: RolloutView });

const startRoute = createRoute({
  method: "post",
  operationId: "startRollout",
  path: "/{name}/rollout",
  tags,
  summary: "Roll a new ref out to the labs",
  description:
    "Starts a rollout to `ref`: the canary labs first, then batches; each lab gets a new host at the new ref beside its old one (bring-your-own hosts: updated in place) and is promoted only once `lab.health` passes there. The first failure halts the rollout. Claimed labs are left alone unless `includeClaimed`. 409 `rollout.running` while one runs, `rollout.nothing_to_do` when no lab would change, `workshop.busy` while another run holds the workshop.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(RolloutOptions, "The ref, and how.", true) },
  responses: { 202: json(Answer, "The rollout was started."), ...errors(400, 401, 404, 409) },
});

const checkRoute = createRoute({
  method: "post",
  operationId: "checkRollout",
  path: "/{name}/rollout/check",
  tags,
  summary: "Check what a rollout would do",
  description:
    "What a rollout to `ref` would do to each lab (promote, rebuild in place, skip, with why), changing nothing.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(RolloutOptions, "The ref, and how.", true) },
  responses: { 200: json(RolloutCheck, "What would happen."), ...errors(400, 401, 404, 409) },
});

const statusRoute = createRoute({
  method: "get",
  operationId: "getRollout",
  path: "/{name}/rollout",
  tags,
  summary: "Read the latest rollout",
  description:
    "The workshop's latest rollout: each lab's old and new ref, state, gate result and the log of a failure. 404 `rollout.not_found` when it has had none.",
  request: { params: NameParams },
  responses: { 200: json(Answer, "The rollout."), ...errors(400, 401, 404) },
});

const resumeRoute = createRoute({
  method: "post",
  operationId: "resumeRollout",
  path: "/{name}/rollout/resume",
  tags,
  summary: "Resume a halted or aborted rollout",
  description:
    "Goes on with the latest rollout: its failed and stopped labs are tried again, then the batches it had not reached. 409 `rollout.completed` when it has completed.",
  request: { params: NameParams },
  responses: { 202: json(Answer, "The rollout goes on."), ...errors(400, 401, 404, 409) },
});

const abortRoute = createRoute({
  method: "post",
  operationId: "abortRollout",
  path: "/{name}/rollout/abort",
  tags,
  summary: "Stop the running rollout",
  description:
    "Stops the running rollout and removes its new hosts not yet promoted; labs already promoted keep the new ref. 409 `rollout.not_running` when none runs.",
  request: { params: NameParams },
  responses: { 200: json(Answer, "The rollout was stopped."), ...errors(400, 401, 404, 409) },
});

/** Instructor routes for rollouts: start, check, status, resume, abort. */
export const rolloutApi = apiRouter()
  .openapi(checkRoute, async (c) => {
    const report = await checkRollout(c.req.valid("param").name, c.req.valid("json"));
    return c.json(
      {
        ...report,
        command: "rollout" as const,
        items: report.items.map((i) => ({ ...i, stage: "rollout" as const })),
      },
      200,
    );
  })
  .openapi(startRoute, async (c) =>
    c.json({ rollout: await startRollout(c.req.valid("param").name, c.req.valid("json")) }, 202),
  )
  .openapi(statusRoute, async (c) => c.json({ rollout: await rolloutStatus(c.req.valid("param").name) }, 200))
  .openapi(resumeRoute, async (c) => c.json({ rollout: await resumeRollout(c.req.valid("param").name) }, 202))
  .openapi(abortRoute, async (c) => c.json({ rollout: await abortRollout(c.req.valid("param").name) }, 200));
