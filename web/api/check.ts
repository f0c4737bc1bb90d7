import { createRoute, z } from "@hono/zod-openapi";
import { CHECK_ACTIONS, STAGES } from "../../shared/fleet/check.ts";
import { checkCommand } from "../../shared/fleet/check-run.ts";
import { StageList } from "../../shared/fleet/stages.ts";
import { WORKSHOP_YAML_MAX_BYTES } from "../../shared/workshop/load.ts";
import { apiRouter, errors, HostId, json, jsonBody, NameParams, readJson } from "./schemas.ts";

/** `only` and `skip`, as `up`, `deploy`, `retry` and `check` take them (shared/fleet/stages.ts). */
export const StageFields = {
  only: StageList.optional().meta({
    description: `run only these stages (of ${STAGES.join(", ")}), in workflow order`,
    example: ["provision", "deploy"],
  }),
  skip: StageList.optional().meta({
    description: "leave these stages out (after `only`)",
    example: ["wait"],
  }),
};

const CheckBody = z
  .strictObject({
    command: z
      .enum(["up", "deploy", "retry", "provision"], { error: "expected up, deploy, retry or provision" })
      .meta({
        description: "the command to check (provision: its one stage, whatever `only` and `skip` say)",
      }),
    yaml: z
      .string()
      .min(1, { error: "expected the text of workshop.yaml" })
      .max(WORKSHOP_YAML_MAX_BYTES, { error: "expected workshop.yaml of at most 1 MiB" })
      .optional()
      .meta({
        description: "up, provision: the workshop.yaml to check (default: the workshop as submitted)",
      }),
    baseDir: z
      .string()
      .startsWith("/", { error: "expected an absolute folder" })
      .optional()
      .meta({ description: "the folder a local `lab.source` path is relative to" }),
    ...StageFields,
    force: z.boolean().default(false).meta({ description: "as the command's `force`" }),
    ref: z
      .string()
      .regex(/^[\w./-]{1,200}$/, { error: "expected a branch, tag or commit" })
      .optional()
      .meta({ description: "deploy: the git ref instead of `lab.ref`" }),
    allSelected: z
      .boolean()
      .default(false)
      .meta({ description: "retry: every selected host, not only the failed ones" }),
    hosts: z.array(HostId).max(256).optional().meta({ description: "deploy, retry: only these hosts" }),
    labels: z
      .record(z.string(), z.string())
      .optional()
      .meta({ description: "deploy, retry: only the hosts with all these labels" }),
  })
  .meta({ id: "CheckRequest" });

export const CheckReportView = z
  .object({
    workshop: z.string(),
    command: z.string().meta({ description: "up, deploy, retry or provision" }),
    items: z.array(
      z.object({
        hostId: z.string().meta({ description: "the host; `*` for the whole workshop (publish)" }),
        stage: z.enum([...STAGES, "rollout"]),
        action: z.enum(CHECK_ACTIONS as [string, ...string[]]).meta({
          description: "create, reuse, rebuild, skip or promote; reuse and skip change nothing",
        }),
        detail: z.string().optional().meta({ example: "built at main, asked for v2" }),
      }),
    ),
    changes: z.boolean().meta({ description: "true when any item would change something (the CLI exits 2)" }),
  })
  .meta({ id: "CheckReport" });

const check = createRoute({
  method: "post",
  operationId: "checkWorkshop",
  path: "/{name}/check",
  tags: ["workshops"],
  summary: "Check what up, deploy, retry or provision would change",
  description:
    "Goes through the stages the command would run (`only`/`skip`) and says, per host and stage, what each would do: create, reuse, rebuild, skip (a claimed lab without `force`) or promote (publish), with the reason. Nothing is stored, started or run on a host. `up` and `provision` check the `yaml` given (a workshop not submitted yet: everything to create); `provision` goes through its one stage (which hosts would be created, which reused). 404 for deploy or retry of an unknown workshop; 409 `stages.missing` when the stages leave out provision and a host is not provisioned.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(CheckBody, "The command and its options.", true) },
  responses: {
    200: json(CheckReportView, "What the command would do."),
    ...errors(400, 401, 404, 409),
  },
});

/** Check mode: one implementation (shared/fleet/check-run.ts) for the CLI, the console and the cloud. */
export const checkApi = apiRouter().openapi(check, async (c) => {
  const b = c.req.valid("json");
  const report = await checkCommand(c.req.valid("param").name, {
    command: b.command,
    ...(b.yaml !== undefined ? { yaml: b.yaml } : {}),
    ...(b.baseDir ? { baseDir: b.baseDir } : {}),
    ...(b.only ? { only: b.only } : {}),
    ...(b.skip ? { skip: b.skip } : {}),
    force: b.force,
    ...(b.ref ? { ref: b.ref } : {}),
    allSelected: b.allSelected,
    selection: { ...(b.hosts ? { hosts: b.hosts } : {}), ...(b.labels ? { labels: b.labels } : {}) },
  });
  return c.json(report, 200);
});
