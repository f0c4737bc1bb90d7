import { createRoute, z } from "@hono/zod-openapi";
import {
  FLEET_PAGE_DEFAULT,
  FLEET_PAGE_MAX,
  fleetView,
  parseFleetCursor,
} from "../../shared/fleet/fleet-view.ts";
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
  pace: z
    .object({
      ratio: z.number().meta({
        description:
          "this run's phase times over the earlier runs' for the same phases (1.3: 30 % slower); the estimate is scaled by it",
      }),
      phases: z.number().int().meta({ description: "the finished phases of this run it was measured on" }),
    })
    .optional()
    .meta({ description: "absent until a phase of this run finished, or without earlier builds" }),
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
    reachable: z.enum(["online", "unreachable"]).nullable().meta({
      description:
        "an enrolled host's agent: unreachable once it missed three check-ins (90 s without a call), judged against the clock at this read; null for hosts that do not call in",
    }),
    lastSeenAt: z
      .string()
      .nullable()
      .meta({ description: "when an enrolled host's agent last called in; null for other hosts" }),
    drained: z.boolean().meta({ description: "an enrolled host drained: no new work and no new claims" }),
    disabled: z.boolean().meta({ description: "an enrolled host disabled: labfleet sends it nothing" }),
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
      free: z.number().int().meta({
        description:
          "ready, healthy and unclaimed (and, for enrolled hosts, neither drained, disabled nor unreachable)",
      }),
      unreachable: z
        .number()
        .int()
        .meta({ description: "enrolled hosts whose agent stopped calling in (three missed check-ins)" }),
      waiting: z.number().int().meta({ description: "students in the waiting line" }),
    }),
    estimate: Estimate,
    labs: z.array(FleetLab).meta({ description: "this page's labs, in host order" }),
    page: z
      .object({
        limit: z.number().int().meta({ description: "the most labs this page holds" }),
        start: z.number().int().meta({ description: "the page's first lab, counted from 0 in host order" }),
        next: z.string().nullable().meta({
          description: "pass it as `cursor` for the next page; null on the last page",
        }),
        prev: z.string().nullable().meta({
          description:
            "the `cursor` of the previous page (empty: the first page, no cursor); null on the first page",
        }),
      })
      .meta({ id: "FleetPage" }),
  })
  .meta({ id: "FleetView" });

const FleetQuery = z.strictObject({
  limit: z.coerce
    .number({ error: `expected a number of labs, 1 to ${FLEET_PAGE_MAX}` })
    .int({ error: `expected a whole number of labs, 1 to ${FLEET_PAGE_MAX}` })
    .min(1, { error: `expected 1 to ${FLEET_PAGE_MAX}` })
    .max(FLEET_PAGE_MAX, { error: `expected 1 to ${FLEET_PAGE_MAX}` })
    .optional()
    .meta({
      description: `at most this many labs (default ${FLEET_PAGE_DEFAULT}, at most ${FLEET_PAGE_MAX})`,
    }),
  cursor: z
    .string()
    .refine((c) => parseFleetCursor(c) !== undefined, { error: "expected the page.next of an earlier page" })
    .optional()
    .meta({ description: "the `page.next` of the previous page: the labs after it" }),
});

const fleetRoute = createRoute({
  method: "get",
  path: "/{name}/fleet",
  tags: ["fleet"],
  operationId: "getFleetView",
  summary: "Read the fleet view",
  description:
    "The labs (state and phase, health, the student's name, checks passed, time left, timed phases) a page at a time in host order, the whole fleet's counts, and the estimate of when every lab still building will be ready, with its basis (its per-lab seconds for this page's labs). Follow `page.next` as `?cursor=` until it is null.",
  request: { params: NameParams, query: FleetQuery },
  responses: {
    200: json(FleetViewSchema, "The fleet."),
    ...errors(400, 401, 404),
  },
});

/** GET /api/workshops/{name}/fleet: what the console's fleet view shows. */
export const fleetViewApi = apiRouter().openapi(fleetRoute, async (c) => {
  const q = c.req.valid("query");
  return c.json(
    await fleetView(c.req.valid("param").name, {
      limit: q.limit ?? FLEET_PAGE_DEFAULT,
      ...(q.cursor !== undefined ? { cursor: q.cursor } : {}),
    }),
    200,
  );
});
