import { createRoute, z } from "@hono/zod-openapi";
import { controlHost, HOST_CONTROLS, HostControlInput } from "../../shared/agent/host-controls.ts";
import { apiRouter, errors, HostId, json, jsonBody, Name, readJson } from "./schemas.ts";

const tags = ["fleet"];

const HostControlAnswer = z
  .object({
    hostId: z.string(),
    action: z.enum(HOST_CONTROLS),
    drained: z.boolean().meta({ description: "no new work and no new claims" }),
    disabled: z.boolean().meta({ description: "labfleet sends it nothing" }),
    state: z.string().meta({ description: "the host's state; torn_down once removed" }),
  })
  .meta({ id: "HostControl" });

const controlRoute = createRoute({
  method: "post",
  operationId: "controlEnrolledHost",
  path: "/{name}/hosts/{hostId}/control",
  tags,
  summary: "Drain, disable, enable, remove an enrolled host, or rotate its secret",
  description:
    "For machines that joined with a join token (provider `enrolled`). `drain`: no new work and no new claims; `disable`: labfleet sends it nothing (its queued commands are dropped); `enable` undoes both; `remove`: the host leaves the workshop (a student's claim on its lab is released) and its agent forgets the workshop at its next poll; `rotate-secret`: its agent gets a new signing secret at its next poll. 400 `host.not_enrolled` for any other host, 404 `host.not_found` for a host the workshop does not have.",
  middleware: [readJson] as const,
  request: {
    params: z.object({ name: Name, hostId: HostId }),
    body: jsonBody(HostControlInput, "What to do.", true),
  },
  responses: {
    200: json(HostControlAnswer, "The host after the change."),
    ...errors(400, 401, 404),
  },
});

export const agentHostsApi = apiRouter().openapi(controlRoute, async (c) => {
  const { name, hostId } = c.req.valid("param");
  return c.json(await controlHost(name, hostId, c.req.valid("json").action), 200);
});
