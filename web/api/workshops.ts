import { createRoute, z } from "@hono/zod-openapi";
import { getRun, startRun } from "../../shared/fleet/runs.ts";
import { ScaleInput, scaleUp } from "../../shared/fleet/scale.ts";
import { resolveStages } from "../../shared/fleet/stages.ts";
import { startUp } from "../../shared/fleet/start-up.ts";
import {
  hostAccess,
  listWorkshops,
  planWorkshop,
  runView,
  submitWorkshop,
  workshopStatus,
} from "../../shared/fleet/workshops.ts";
import { WORKSHOP_YAML_MAX_BYTES } from "../../shared/workshop/load.ts";
import { Workshop } from "../../shared/workshop/schema.ts";
import { StageFields } from "./check.ts";
import {
  apiRouter,
  errors,
  HostId,
  HostView,
  json,
  jsonBody,
  Name,
  NameParams,
  RunAnswer,
  RunId,
  RunView,
  readJson,
  WorkshopSummary,
} from "./schemas.ts";

const SubmitBody = z
  .strictObject({
    yaml: z
      .string()
      .min(1, { error: "expected the text of workshop.yaml" })
      .max(WORKSHOP_YAML_MAX_BYTES, { error: "expected workshop.yaml of at most 1 MiB" })
      .meta({ description: "the text of workshop.yaml", example: "name: demo\nlab:\n  ..." }),
    baseDir: z
      .string()
      .startsWith("/", { error: "expected an absolute folder" })
      .optional()
      .meta({ description: "the folder a local `lab.source` path is relative to (the CLI sends its own)" }),
  })
  .meta({ id: "WorkshopSubmit" });
const UpBody = z.strictObject({
  force: z.boolean().default(false).meta({ description: "redeploy labs that are already ready" }),
  ...StageFields,
});
/** Provisioning takes no option: only `{}` (or an empty body); an unknown key is a 400. */
const ProvisionBody = z.strictObject({});

const Created = z.object({
  name: z.string(),
  created: z.boolean(),
  countKept: z
    .object({
      file: z.number().int().meta({ description: "provider.count in the submitted file" }),
      kept: z.number().int().meta({ description: "the workshop's count, which it keeps" }),
    })
    .optional()
    .meta({
      description:
        "present when the file's provider.count is lower than the count of a workshop that was brought up (scaled up since, say): the workshop keeps its count, no host is removed; `down --unclaimed` removes labs",
    }),
});
const ScaleBody = ScaleInput.meta({ id: "ScaleRequest" });
const ScaleAnswer = z
  .object({
    run: RunView,
    scale: z.object({
      workshop: z.string(),
      from: z.number().int().meta({ description: "the hosts the workshop had" }),
      to: z.number().int().meta({ description: "the hosts it has once the run is done" }),
      add: z.array(z.string()).meta({ description: "the host ids added", example: ["student-03"] }),
      waiting: z.number().int().meta({ description: "students in the portal's waiting room" }),
    }),
  })
  .meta({ id: "ScaleAnswer" });
const Plan = z.object({
  name: z.string(),
  provider: z.string(),
  items: z.array(
    z.object({
      hostId: z.string(),
      action: z.enum(["create", "reuse", "noop"]),
      detail: z.string().optional(),
    }),
  ),
});
const WorkshopStatus = WorkshopSummary.extend({
  spec: Workshop.meta({ id: "WorkshopSpec" }),
  hostList: z.array(HostView),
  runs: z.array(RunView).meta({ description: "newest first" }),
}).meta({ id: "WorkshopStatus" });

const tags = ["workshops"];

const list = createRoute({
  method: "get",
  operationId: "listWorkshops",
  path: "/",
  tags,
  summary: "List workshops",
  description: "Every workshop with its state and host counts.",
  responses: {
    200: json(z.object({ workshops: z.array(WorkshopSummary) }), "The workshops."),
    ...errors(401),
  },
});

const submit = createRoute({
  method: "post",
  operationId: "submitWorkshop",
  path: "/",
  tags,
  summary: "Create or update a workshop from workshop.yaml",
  description:
    "Checks the YAML and stores it: 201 for a new workshop, 200 for an update. YAML errors answer 400 `workshop.invalid` with each error at its YAML path and line.",
  middleware: [readJson] as const,
  request: { body: jsonBody(SubmitBody, "The text of workshop.yaml.", true) },
  responses: {
    200: json(Created, "The workshop existed and was updated."),
    201: json(Created, "The workshop was created."),
    ...errors(400, 401, 409),
  },
});

const plan = createRoute({
  method: "post",
  operationId: "planWorkshop",
  path: "/plan",
  tags,
  summary: "Plan a workshop (dry run)",
  description: "What `up` would do per host: create, reuse or nothing. Nothing is stored or created.",
  middleware: [readJson] as const,
  request: { body: jsonBody(SubmitBody, "The text of workshop.yaml.", true) },
  responses: {
    200: json(Plan, "One item per host."),
    ...errors(400, 401),
  },
});

const status = createRoute({
  method: "get",
  operationId: "getWorkshop",
  path: "/{name}",
  tags,
  summary: "Read a workshop",
  description: "Its state, spec, every host with its phase and error, and its runs.",
  request: { params: NameParams },
  responses: {
    200: json(WorkshopStatus, "The workshop."),
    ...errors(400, 401, 404),
  },
});

const up = createRoute({
  method: "post",
  operationId: "startUp",
  path: "/{name}/up",
  tags,
  summary: "Start up: provision, deploy, wait until ready, publish",
  description:
    "Starts the `up` workflow; labs already ready are skipped unless `force`. Poll the run. `only`/`skip` pick its stages (provision, deploy, wait, publish); `only: [provision]` is a provision run. A selection without provision answers 409 `stages.missing` when a host is not provisioned.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(UpBody, "Optional; `{}` or an empty body is fine.") },
  responses: {
    202: json(RunAnswer, "The run was started."),
    ...errors(400, 401, 404, 409),
  },
});

const provision = createRoute({
  method: "post",
  operationId: "startProvision",
  path: "/{name}/provision",
  tags,
  summary: "Start provision: create or reuse the hosts, deploy nothing",
  description:
    "Starts a `provision` run (the `up` workflow, stopping after provisioning): the hosts are created or reused and recorded (new ones `pending`, with their address), and the TTL teardown is armed. No lab is deployed: a later `up` deploys them. Operator secrets are not needed yet. A second start while one runs returns the running one. Poll the run: it succeeds when every host was provisioned.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(ProvisionBody, "Optional; `{}` or an empty body.") },
  responses: {
    202: json(RunAnswer, "The run was started."),
    ...errors(400, 401, 404, 409),
  },
});

const scale = createRoute({
  method: "post",
  operationId: "scaleUp",
  path: "/{name}/scale",
  tags,
  summary: "Scale up: add hosts to a running workshop",
  description:
    "Records `count` as the workshop's provider.count and starts a `scale` run (the `up` workflow on the new hosts only): they are provisioned and deployed, and go on the board as they pass their health check; the hosts already there are untouched. Only for providers that create hosts (`local`, `aws`): `static` answers 400 `scale.provider_static`. `count` must be more than the hosts the workshop has (400 `scale.not_more`, which names `down --unclaimed` for removing) and within provider.count's limit. 409 `workshop.busy` names the run in progress; 409 `scale.not_up` for a workshop never brought up.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(ScaleBody, "The number of hosts to have.", true) },
  responses: {
    202: json(ScaleAnswer, "The run was started."),
    ...errors(400, 401, 404, 409),
  },
});

const teardown = createRoute({
  method: "post",
  operationId: "startTeardown",
  path: "/{name}/teardown",
  tags,
  summary: "Tear the workshop down",
  description: "Starts the `teardown` workflow: every host labfleet created goes, the portal closes.",
  request: { params: NameParams },
  responses: {
    202: json(RunAnswer, "The run was started."),
    ...errors(400, 401, 404, 409),
  },
});

const access = createRoute({
  method: "get",
  operationId: "getLabAccess",
  path: "/{name}/hosts/{hostId}/access",
  tags,
  summary: "Read a lab's access details",
  description:
    "What the lab wrote to $LABFLEET_ACCESS (usually `urls`, `credentials`, `notes`), decrypted. 404 `host.no_access` until the lab wrote it.",
  request: {
    params: z.object({ name: Name, hostId: HostId }),
  },
  responses: {
    200: json(
      z.object({
        access: z.unknown().meta({ description: "the JSON the lab wrote, as it wrote it" }),
      }),
      "The access details.",
    ),
    ...errors(400, 401, 404),
  },
});

const run = createRoute({
  method: "get",
  operationId: "getRun",
  path: "/{name}/runs/{runId}",
  tags,
  summary: "Read a run",
  description: "A workflow run with its per-host results.",
  request: {
    params: z.object({ name: Name, runId: RunId }),
  },
  responses: {
    200: json(RunAnswer, "The run."),
    ...errors(400, 401, 404),
  },
});

/** Instructor routes for workshops: submit YAML, start up/provision/scale/teardown, read status and runs. */
export const workshops = apiRouter()
  .openapi(list, async (c) => c.json({ workshops: await listWorkshops() }, 200))
  .openapi(submit, async (c) => {
    const body = c.req.valid("json");
    const result = await submitWorkshop(body.yaml, body.baseDir);
    return result.created ? c.json(result, 201) : c.json(result, 200);
  })
  .openapi(plan, async (c) => {
    const body = c.req.valid("json");
    return c.json(await planWorkshop(body.yaml, body.baseDir), 200);
  })
  .openapi(status, async (c) => c.json(await workshopStatus(c.req.valid("param").name), 200))
  .openapi(up, async (c) => {
    const b = c.req.valid("json");
    const run = await startUp(c.req.valid("param").name, {
      force: b.force,
      ...(b.only || b.skip ? { stages: resolveStages(b) } : {}),
    });
    return c.json({ run: runView(run) }, 202);
  })
  .openapi(provision, async (c) => {
    const run = await startRun(c.req.valid("param").name, "provision");
    return c.json({ run: runView(run) }, 202);
  })
  .openapi(scale, async (c) => {
    const { plan, run } = await scaleUp(c.req.valid("param").name, c.req.valid("json").count);
    return c.json({ run: runView(run), scale: plan }, 202);
  })
  .openapi(teardown, async (c) => {
    const run = await startRun(c.req.valid("param").name, "teardown");
    return c.json({ run: runView(run) }, 202);
  })
  .openapi(access, async (c) => {
    const { name, hostId } = c.req.valid("param");
    return c.json({ access: await hostAccess(name, hostId) }, 200);
  })
  .openapi(run, async (c) => {
    const { name, runId } = c.req.valid("param");
    return c.json({ run: runView(await getRun(name, runId)) }, 200);
  });
