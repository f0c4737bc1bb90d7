import { createRoute, z } from "@hono/zod-openapi";
import { fleetView } from "../../shared/fleet/fleet-view.ts";
import { HOST_STATES } from "../../shared/store/entities.ts";
import { apiRouter, errors, json, NameParams } from "./schemas.ts";

const TimedPhase = z.object({
  name: z.string(),
  state: z.string().meta({ description: "as the lab reports it: running, done or failed" }),
  startedAt: z.string().optional().meta({ description: "when labfleet first saw the phase (ISO 8601)" }),
  endedAt: z.string().optional().meta({ description: "when labfleet first saw it done or failed" }),
});

const Basis = z.object({
  earlierRuns: z.number().int().meta({ description: "earlier runs of the same lab whose builds were used" }),
  earlierBuilds: z.number().int(),
  thisRunBuilds: z.number().int().meta({ description: "builds of the current run that finished" }),
});

const Estimate = z
  .discriminatedUnion("kind", [
    z.object({ kind: z.literal("ready"), failed: z.number().int() }),
    z.object({ kind: z.literal("unknown"), building: z.number().int(), failed: z.number().int() }),
    z.object({
      kind: z.literal("estimated"),
      readyAt: z.string().meta({ description: "when the slowest lab still building should be ready" }),
      remainingSeconds: z.number(),
      building: z.number().int(),
      failed: z.number().int(),
      basis: Basis,
      hosts: z.record(z.string(), z.number()).meta({ description: "seconds each lab still building needs" }),
    }),
  ])
  .meta({
    id: "FleetEstimate",
    description:
      "ready: every lab that did not fail is ready; unknown: no build of this lab has finished yet (here or in an earlier run); estimated: from the phase durations of finished builds",
  });

const FleetLab = z
  .object({
    id: z.string().meta({ example: "student-01" }),
    state: z.enum(HOST_STATES),
    phase: z.string().meta({ description: "`ready` for a ready lab, else the phase its setup reports" }),
    phasesDone: z.number().int(),
    phasesTotal: z.number().int(),
    phases: z.array(TimedPhase),
    health: z
      .enum(["ok", "flagged"])
      .nullable()
      .meta({ description: "the in-use health check of a ready lab" }),
    healthError: z.string().nullable(),
    student: z.string().nullable().meta({ description: "the display name of the student who holds the lab" }),
    checks: z.object({ passed: z.number().int(), total: z.number().int() }).nullable().meta({
      description: "Check my work: checks the student passed; null when unclaimed or without checks",
    }),
    expiry: z.string().nullable(),
    deployStartedAt: z.string().nullable(),
    readyAt: z.string().nullable(),
    endedAt: z
      .string()
      .nullable()
      .meta({ description: "where its timeline ends: ready, or its failure recorded; null while building" }),
    error: z.string().nullable(),
    remainingSeconds: z.number().nullable().meta({ description: "by the estimate, while building" }),
  })
  .meta({ id: "FleetLab" });

export const FleetViewSchema = z
  .object({
    workshop: z.string(),
    at: z.string(),
    runId: z.string().nullable().meta({ description: "the run building labs now" }),
    counts: z.object({
      total: z.number().int(),
      building: z.number().int(),
      ready: z.number().int(),
      failed: z.number().int(),
      claimed: z.number().int(),
      free: z.number().int().meta({ description: "ready, healthy and unclaimed" }),
      waiting: z.number().int().meta({ description: "students in the waiting line" }),
    }),
    estimate: Estimate,
    labs: z.array(FleetLab),
  })
  .meta({ id: "FleetView" });

const fleetRoute = createRoute({
  method: "get",
  path: "/{name}/fleet",
  tags: ["fleet"],
  operationId: "getFleetView",
  summary: "Read the fleet view",
  description:
    "Every lab in one list (state and phase, health, the student's name, checks passed, time left, timed phases), the counts, and the estimate of when every lab still building will be ready, with its basis.",
  request: { params: NameParams },
  responses: {
    200: json(FleetViewSchema, "The fleet."),
    ...errors(400, 401, 404),
  },
});

/** GET /api/workshops/{name}/fleet: what the console's fleet view shows. */
export const fleetViewApi = apiRouter().openapi(fleetRoute, async (c) =>
  c.json(await fleetView(c.req.valid("param").name), 200),
);
