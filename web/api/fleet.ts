import { createRoute, z } from "@hono/zod-openapi";
import { ExtendInput, extendWorkshop } from "../../shared/fleet/extend.ts";
import {
  forgetHostKey,
  listHostKeys,
  PinHostKeyInput,
  pinHostKey,
  sshPublicKey,
} from "../../shared/fleet/host-keys.ts";
import { parseLabels } from "../../shared/fleet/hosts.ts";
import { OpenAccessInput, setStudentAccess } from "../../shared/fleet/open-access.ts";
import {
  accessSheet,
  diagnose,
  doctor,
  refreshHosts,
  startDeploy,
  startRetry,
} from "../../shared/fleet/ops.ts";
import { resolveStages } from "../../shared/fleet/stages.ts";
import { runView } from "../../shared/fleet/workshops.ts";
import { diagnoseArchive } from "./archive.ts";
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
  RunView,
  readJson,
} from "./schemas.ts";

const Selection = {
  hosts: z
    .array(HostId)
    .max(256)
    .optional()
    .meta({ description: "only these hosts (ids); none: every host", example: ["student-01"] }),
  labels: z
    .record(z.string(), z.string())
    .optional()
    .meta({ description: "only the hosts with all these labels", example: { room: "a" } }),
  concurrency: z.number().int().min(1).max(64).optional().meta({ description: "hosts worked on at once" }),
};
const SelectionBody = z.strictObject(Selection);
const DeployBody = z.strictObject({
  ...Selection,
  force: z.boolean().default(false).meta({
    description:
      "redeploy labs that are already ready, and labs students have claimed (without it, a deploy that would rebuild a claimed lab answers 409 `rebuild.claimed`)",
  }),
  ref: z
    .string()
    .regex(/^[\w./-]{1,200}$/, { error: "expected a branch, tag or commit" })
    .optional()
    .meta({ description: "deploy this git ref instead of `lab.ref`" }),
  ...StageFields,
});
const RetryBody = z.strictObject({
  ...Selection,
  allSelected: z
    .boolean()
    .default(false)
    .meta({ description: "every selected host, not only the failed ones" }),
  force: z.boolean().default(false).meta({
    description:
      "rebuild labs students have claimed too (without it, a retry that would rebuild a claimed lab answers 409 `rebuild.claimed`, naming each lab and its student)",
  }),
  ...StageFields,
});
const DiagnoseBody = z.strictObject({
  ...Selection,
  allSelected: RetryBody.shape.allSelected,
  from: z.string().min(1).max(64).optional().meta({
    description: "continue a diagnose at this host: the `X-Labfleet-Diagnose-Next` of the previous part",
  }),
  name: z
    .string()
    .max(120)
    .optional()
    .meta({ description: "the `X-Labfleet-Diagnose-Name` of the first part, when continuing" }),
});
/** `?host=a&host=b`: a query parameter given once or repeated, always a list. */
const repeated = (description: string, item: z.ZodString = z.string()) =>
  z
    .preprocess((v) => (v === undefined ? undefined : [v].flat()), z.array(item).max(256).optional())
    .meta({ description });

const sel = (b: { hosts?: string[] | undefined; labels?: Record<string, string> | undefined }) => ({
  ...(b.hosts ? { hosts: b.hosts } : {}),
  ...(b.labels ? { labels: b.labels } : {}),
});

const DoctorReport = z
  .object({
    host: z.string(),
    ok: z.boolean(),
    checks: z.array(
      z.object({
        name: z.string(),
        ok: z.boolean(),
        detail: z.string(),
        expected: z.string().optional(),
      }),
    ),
    facts: z.record(z.string(), z.string()).meta({ description: "what the host reported (user, os, ...)" }),
  })
  .meta({ id: "DoctorReport" });
const Outcome = z.object({ result: z.enum(["moved", "none", "error"]), detail: z.string().optional() });
const ExtendResult = z
  .object({
    workshop: z.string(),
    hours: z.number(),
    previousExpiry: z.string(),
    expiry: z.string().meta({ description: "the new teardown time" }),
    schedule: Outcome.meta({
      description: "the teardown schedule (`none` where the runtime keeps no mirror)",
    }),
    provider: Outcome.meta({ description: "the provider-side expiry (`none` when the provider keeps none)" }),
    hosts: z.array(
      z.object({
        hostId: z.string(),
        result: z.enum(["moved", "skipped", "error"]),
        detail: z.string().optional(),
      }),
    ),
    ok: z.boolean().meta({ description: "false when any part still ends at the old time" }),
  })
  .meta({ id: "ExtendResult" });
const OpenAccessView = z.object({
  workshop: z.string(),
  open: z.boolean().meta({ description: "what was asked: true to open, false to close" }),
  mode: z.enum(["managed", "byo"]).meta({
    description: "managed: labfleet's own security group; byo: the workshop's groups, left unchanged",
  }),
  changed: z.boolean().meta({ description: "labfleet added or removed a rule" }),
  groupIds: z.array(z.string()),
  ports: z.array(z.number().int()).meta({ description: "the lab UI ports concerned (never 22)" }),
  message: z.string(),
});

const tags = ["fleet"];
const selectionErrors = errors(400, 401, 404, 409, 502);

const doctorRoute = createRoute({
  method: "post",
  operationId: "runDoctor",
  path: "/{name}/doctor",
  tags,
  summary: "Check the hosts against lab.requires",
  description: "Reaches every selected host and checks memory, CPUs, disk, KVM, root and commands.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(SelectionBody, "Which hosts; empty: all.") },
  responses: {
    200: json(
      z.object({
        ok: z.boolean().meta({ description: "every host passed" }),
        reports: z.array(DoctorReport),
      }),
      "One report per host.",
    ),
    ...selectionErrors,
  },
});

const refreshRoute = createRoute({
  method: "post",
  operationId: "refreshHosts",
  path: "/{name}/refresh",
  tags,
  summary: "Refresh the hosts' states",
  description: "Asks every selected host how its lab is doing and records the answer.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(SelectionBody, "Which hosts; empty: all.") },
  responses: { 200: json(z.object({ hosts: z.array(HostView) }), "The hosts."), ...selectionErrors },
});

const deployRoute = createRoute({
  method: "post",
  operationId: "startDeploy",
  path: "/{name}/deploy",
  tags,
  summary: "Deploy the lab on hosts",
  description:
    "Starts a deploy run on the selected hosts (all by default); ready labs are skipped unless `force`. A deploy that would rebuild a lab a student has claimed answers 409 `rebuild.claimed` (naming each lab and its student) unless `force`.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(DeployBody, "Which hosts, and how.") },
  responses: { 202: json(RunAnswer, "The run was started."), ...selectionErrors },
});

const retryRoute = createRoute({
  method: "post",
  operationId: "retryFailed",
  path: "/{name}/retry",
  tags,
  summary: "Rebuild the failed labs",
  description:
    "Starts a retry run on the selected hosts that failed (or all selected with `allSelected`). A retry that would rebuild a lab a student has claimed answers 409 `rebuild.claimed` (naming each lab and its student) unless `force`.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(RetryBody, "Which hosts.") },
  responses: {
    200: json(
      z.object({ run: z.null(), hosts: z.array(z.string()).max(0) }),
      "Nothing to retry: no selected host failed.",
    ),
    202: json(
      z.object({ run: RunView, hosts: z.array(z.string()).meta({ description: "the hosts rebuilt" }) }),
      "The run was started.",
    ),
    ...selectionErrors,
  },
});

const diagnoseRoute = createRoute({
  method: "post",
  operationId: "diagnose",
  path: "/{name}/diagnose",
  tags,
  summary: "Download a diagnose archive",
  description:
    "Collects logs, status and facts from the selected hosts into a .tar.gz (failed hosts unless `allSelected`); its name is in `X-Labfleet-Diagnose-Name`. A large diagnose comes in parts of a few MB: when `X-Labfleet-Diagnose-Next` is set, ask again with `from` set to it and `name` to the name, and extract every part into the same folder.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(DiagnoseBody, "Which hosts, and where to continue.") },
  responses: {
    200: {
      description: "The archive, as an attachment.",
      content: { "application/gzip": { schema: z.string().meta({ format: "binary" }) } },
    },
    ...selectionErrors,
  },
});

const accessRoute = createRoute({
  method: "get",
  operationId: "getAccessSheet",
  path: "/{name}/access",
  tags,
  summary: "Read the access sheet",
  description: "Every selected host with its address, lab UI URLs and whether it has credentials.",
  request: {
    params: NameParams,
    query: z.object({
      host: repeated("only these hosts (repeat the parameter)", HostId),
      label: repeated("only the hosts with this `key=value` label (repeat for more)", z.string().max(400)),
    }),
  },
  responses: {
    200: json(
      z.object({
        columns: z.array(z.string()),
        rows: z.array(
          z.object({
            host: z.string(),
            state: z.string(),
            address: z.string(),
            urls: z.record(z.string(), z.string()),
            credentials: z.boolean(),
          }),
        ),
      }),
      "The sheet.",
    ),
    ...errors(400, 401, 404),
  },
});

const publicKeyRoute = createRoute({
  method: "get",
  operationId: "getSshPublicKey",
  path: "/{name}/ssh-public-key",
  tags,
  summary: "Read labfleet's SSH public key",
  description: "The key to put in `authorized_keys` on bring-your-own hosts.",
  request: { params: NameParams },
  responses: {
    200: json(
      z.object({ publicKey: z.string().meta({ example: "ssh-ed25519 AAAA... labfleet" }) }),
      "The key.",
    ),
    ...errors(400, 401),
  },
});

const HostKeys = z
  .object({
    hostId: z.string().meta({ description: "a host id, or `bastion:user@host:port`", example: "web-1" }),
    origin: z.enum(["tofu", "workshop", "pinned", "ssm"]).meta({
      description:
        "how the keys were obtained: tofu (the key the host showed at first contact), workshop (hosts[].host_key), pinned (labfleet hosts pin), ssm (read from the instance through SSM)",
    }),
    fingerprint: z.string().meta({ description: "the first key's fingerprint", example: "SHA256:..." }),
    keys: z.array(
      z.object({
        type: z.string().meta({ example: "ssh-ed25519" }),
        fingerprint: z.string().meta({ example: "SHA256:..." }),
      }),
    ),
    pinnedAt: z.string().meta({
      description: "when the keys were pinned (workshop: when the workshop file was last submitted)",
    }),
  })
  .meta({ id: "HostKeys" });

const HostKeyParams = z.object({
  name: Name,
  hostId: z
    .string()
    .min(1)
    .max(400)
    .meta({ description: "a host id, or `bastion:user@host:port` for a bastion", example: "student-01" }),
});

const hostKeysRoute = createRoute({
  method: "get",
  operationId: "listHostKeys",
  path: "/{name}/host-keys",
  tags,
  summary: "List the trusted SSH host keys",
  description:
    "Every host's trusted keys with their fingerprints and how they were obtained: given in workshop.yaml, pinned by hand, read through SSM, or trusted on first use.",
  request: { params: NameParams },
  responses: {
    200: json(z.object({ keys: z.array(HostKeys) }), "The trusted keys, by host."),
    ...errors(400, 401, 404),
  },
});

const pinKeyRoute = createRoute({
  method: "put",
  operationId: "pinHostKey",
  path: "/{name}/host-keys/{hostId}",
  tags,
  summary: "Pin a host's key, obtained out of band",
  description:
    "Trusts these keys for the host from now on (origin `pinned`), as read on the host itself or with ssh-keyscan over a network you trust. A different key pinned before (at first contact, by hand, or through SSM) is replaced only with `replace`; a host whose keys workshop.yaml gives (`hosts[].host_key`) is refused.",
  middleware: [readJson] as const,
  request: {
    params: HostKeyParams,
    body: jsonBody(PinHostKeyInput, "The key lines, and whether to replace another pin.", true),
  },
  responses: {
    200: json(
      z.object({
        pinned: HostKeys.extend({
          replaced: HostKeys.optional().meta({ description: "the pin this one replaced, if any" }),
        }),
      }),
      "The keys now trusted for the host.",
    ),
    ...errors(400, 401, 404, 409),
  },
});

const forgetKeyRoute = createRoute({
  method: "delete",
  operationId: "forgetHostKey",
  path: "/{name}/host-keys/{hostId}",
  tags,
  summary: "Forget a host's pinned key",
  description: "The next connection trusts whatever key the host shows, and pins it.",
  request: {
    params: HostKeyParams,
  },
  responses: {
    200: json(
      z.object({ forgotten: z.object({ hostId: z.string(), fingerprint: z.string() }) }),
      "The key that was forgotten.",
    ),
    ...errors(400, 401, 404, 409),
  },
});

const extendRoute = createRoute({
  method: "post",
  operationId: "extendWorkshop",
  path: "/{name}/extend",
  tags,
  summary: "Extend the workshop's time to live",
  description: "Moves the teardown time, the provider-side expiry and every host's dead-man switch.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(ExtendInput, "How many hours to add.", true) },
  responses: { 200: json(ExtendResult, "What moved."), ...errors(400, 401, 404, 409) },
});

const openAccessRoute = createRoute({
  method: "post",
  operationId: "setOpenAccess",
  path: "/{name}/open-access",
  tags,
  summary: "Open or close the lab UIs to students",
  description: "Opens (or with `close`, closes) the lab UI ports of the hosts' security group (EC2 only).",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(OpenAccessInput, "Open, or close.") },
  responses: { 200: json(OpenAccessView, "What changed."), ...errors(400, 401, 404, 409) },
});

/**
 * Instructor routes for fleet operations: doctor, refresh, deploy, retry, diagnose, access, host keys, extend,
 * open-access.
 */
export const fleet = apiRouter()
  .openapi(doctorRoute, async (c) => {
    const b = c.req.valid("json");
    const reports = await doctor(c.req.valid("param").name, sel(b), b.concurrency);
    return c.json({ ok: reports.every((r) => r.ok), reports }, 200);
  })
  .openapi(refreshRoute, async (c) => {
    const b = c.req.valid("json");
    return c.json({ hosts: await refreshHosts(c.req.valid("param").name, sel(b), b.concurrency) }, 200);
  })
  .openapi(deployRoute, async (c) => {
    const b = c.req.valid("json");
    const run = await startDeploy(c.req.valid("param").name, sel(b), {
      force: b.force,
      ...(b.ref ? { ref: b.ref } : {}),
      ...(b.concurrency ? { concurrency: b.concurrency } : {}),
      ...(b.only || b.skip ? { stages: resolveStages(b) } : {}),
    });
    return c.json({ run: runView(run) }, 202);
  })
  .openapi(retryRoute, async (c) => {
    const b = c.req.valid("json");
    const r = await startRetry(c.req.valid("param").name, sel(b), {
      allSelected: b.allSelected,
      force: b.force,
      ...(b.concurrency ? { concurrency: b.concurrency } : {}),
      ...(b.only || b.skip ? { stages: resolveStages(b) } : {}),
    });
    return r.run
      ? c.json({ run: runView(r.run), hosts: r.hosts }, 202)
      : c.json({ run: null, hosts: [] }, 200);
  })
  .openapi(diagnoseRoute, async (c) => {
    const b = c.req.valid("json");
    const d = await diagnose(c.req.valid("param").name, sel(b), {
      allSelected: b.allSelected,
      ...(b.concurrency ? { concurrency: b.concurrency } : {}),
      ...(b.from ? { from: b.from } : {}),
      ...(b.name ? { name: b.name } : {}),
    });
    const part = await diagnoseArchive(d);
    c.header("Content-Type", "application/gzip");
    c.header(
      "Content-Disposition",
      `attachment; filename="${part.name}${b.from ? `.from-${b.from}` : ""}.tar.gz"`,
    );
    c.header("X-Labfleet-Diagnose-Name", part.name);
    if (part.next) c.header("X-Labfleet-Diagnose-Next", part.next);
    return c.body(new Uint8Array(part.archive));
  })
  .openapi(accessRoute, async (c) => {
    const q = c.req.valid("query");
    const hosts = q.host ?? [];
    const labels = parseLabels(q.label ?? []);
    return c.json(
      await accessSheet(c.req.valid("param").name, { ...(hosts.length ? { hosts } : {}), labels }),
      200,
    );
  })
  .openapi(publicKeyRoute, async (c) => c.json({ publicKey: await sshPublicKey() }, 200))
  .openapi(hostKeysRoute, async (c) => c.json({ keys: await listHostKeys(c.req.valid("param").name) }, 200))
  .openapi(pinKeyRoute, async (c) => {
    const { name, hostId } = c.req.valid("param");
    return c.json({ pinned: await pinHostKey(name, hostId, c.req.valid("json")) }, 200);
  })
  .openapi(forgetKeyRoute, async (c) => {
    const { name, hostId } = c.req.valid("param");
    return c.json({ forgotten: await forgetHostKey(name, hostId) }, 200);
  })
  .openapi(extendRoute, async (c) =>
    c.json(await extendWorkshop(c.req.valid("param").name, c.req.valid("json").hours), 200),
  )
  .openapi(openAccessRoute, async (c) => {
    const b = c.req.valid("json");
    return c.json(await setStudentAccess(c.req.valid("param").name, !b.close), 200);
  });
