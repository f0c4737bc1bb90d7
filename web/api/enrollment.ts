import { createRoute, z } from "@hono/zod-openapi";
import { approveHosts, HostIds, listPendingHosts, rejectHosts } from "../../shared/agent/enrollment.ts";
import {
  createJoinToken,
  JOIN_TOKEN_STATES,
  JoinTokenId,
  JoinTokenOptions,
  joinCommand,
  listJoinTokens,
  revokeJoinToken,
} from "../../shared/agent/join-tokens.ts";
import { ownOrigin } from "../console/session.ts";
import { apiRouter, errors, json, jsonBody, Name, NameParams, readJson } from "./schemas.ts";

const tags = ["enrollment"];
const nullable = <T extends z.ZodType>(t: T) => z.union([t, z.null()]);

const JoinToken = z
  .object({
    id: z.string().meta({ example: "jtk_01JABCDEFGHJKMNPQRSTVWXYZ0" }),
    workshop: z.string(),
    uses: z.number().int().meta({ description: "how many machines may join with it" }),
    used: z.number().int().meta({ description: "how many have" }),
    approve: z.enum(["auto", "manual"]).meta({
      description: "auto: hosts that join are approved at once; manual: they wait as pending",
    }),
    state: z.enum(JOIN_TOKEN_STATES),
    expiry: z.string().meta({ description: "when it stops working (ISO time)" }),
    createdAt: z.string(),
    by: z.string().meta({ description: "who made it" }),
    revokedAt: nullable(z.string()),
    hosts: z.array(z.string()).meta({ description: "the hosts that joined with it, in order" }),
    student: nullable(z.string()).meta({ description: "a student's own token (BYOD): their name" }),
  })
  .meta({ id: "JoinToken" });

const Facts = z
  .object({
    hostname: z.string().optional(),
    os: z.string().optional(),
    arch: z.string().optional(),
    cpus: z.number().optional(),
    memoryMb: z.number().optional(),
    diskGb: z.number().optional(),
    kvm: z.boolean().optional(),
    nested: z.boolean().optional(),
    commands: z.array(z.string()).optional(),
    agentVersion: z.string().optional(),
  })
  .meta({ id: "HostFacts", description: "what the machine reported about itself at join" });

const EnrolledHost = z
  .object({
    id: z.string().meta({ example: "lab-pc-2" }),
    enrollment: z.enum(["pending", "approved"]),
    state: z.string(),
    joinedAt: z.string(),
    lastSeenAt: nullable(z.string()),
    facts: Facts,
  })
  .meta({ id: "EnrolledHost" });

const Decision = z
  .object({
    hostId: z.string(),
    result: z.enum(["approved", "rejected", "unchanged"]).meta({
      description: "unchanged: approving a host that was approved already",
    }),
  })
  .meta({ id: "EnrollmentDecision" });

const HostsBody = z.strictObject({ hosts: HostIds });
const TokenParams = z.object({ name: Name, tokenId: JoinTokenId });

const createTokenRoute = createRoute({
  method: "post",
  operationId: "createJoinToken",
  path: "/{name}/join-tokens",
  tags,
  summary: "Make a join token",
  description:
    "A token machines present to join the workshop as hosts (POST /agent/v1/enroll), shown in this answer only (labfleet keeps its hash), with the one line to run on a machine. 404 when there is no such workshop, 409 `workshop.torn_down`.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(JoinTokenOptions, "Uses, expiry, approval.") },
  responses: {
    201: json(
      z.object({
        token: z.string().meta({ description: "the token itself: shown this once" }),
        joinToken: JoinToken,
        command: z.string().meta({
          description:
            "the line to run on a machine: fetches the agent from this API and joins, the token in the environment",
        }),
      }),
      "The token was made.",
    ),
    ...errors(400, 401, 404, 409),
  },
});

const listTokensRoute = createRoute({
  method: "get",
  operationId: "listJoinTokens",
  path: "/{name}/join-tokens",
  tags,
  summary: "List the join tokens",
  description:
    "The workshop's join tokens, newest first, with their uses and state; never the tokens themselves.",
  request: { params: NameParams },
  responses: {
    200: json(z.object({ joinTokens: z.array(JoinToken) }), "The tokens."),
    ...errors(400, 401, 404),
  },
});

const revokeTokenRoute = createRoute({
  method: "delete",
  operationId: "revokeJoinToken",
  path: "/{name}/join-tokens/{tokenId}",
  tags,
  summary: "Revoke a join token",
  description:
    "Machines that present it from now on are refused (`join.revoked`); hosts that joined with it stay. 404 `join_token.not_found`.",
  request: { params: TokenParams },
  responses: {
    200: json(z.object({ joinToken: JoinToken }), "The token was revoked."),
    ...errors(400, 401, 404),
  },
});

const pendingRoute = createRoute({
  method: "get",
  operationId: "listPendingHosts",
  path: "/{name}/enrollment/pending",
  tags,
  summary: "List the hosts waiting for approval",
  description:
    "Machines that joined with a token that does not approve them; they get no work until approved.",
  request: { params: NameParams },
  responses: {
    200: json(z.object({ hosts: z.array(EnrolledHost) }), "The pending hosts, oldest first."),
    ...errors(400, 401, 404),
  },
});

const approveRoute = createRoute({
  method: "post",
  operationId: "approveHosts",
  path: "/{name}/enrollment/approve",
  tags,
  summary: "Approve pending hosts",
  description:
    "The hosts may be given work from now on. Every id is checked first, so one that is not a host of the workshop (404 `host.not_found`) or did not join with a token (409 `host.not_enrolled`) changes nothing.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(HostsBody, "The host ids.", true) },
  responses: {
    200: json(z.object({ results: z.array(Decision) }), "What was done to each host."),
    ...errors(400, 401, 404, 409),
  },
});

const rejectRoute = createRoute({
  method: "post",
  operationId: "rejectHosts",
  path: "/{name}/enrollment/reject",
  tags,
  summary: "Reject pending hosts",
  description:
    "Each host is removed and its signing secret dropped: its later calls are refused with 401 `agent.forgotten`, so its agent forgets the workshop and stops. Pending hosts only (409 `enrollment.not_pending` for an approved one); every id is checked first.",
  middleware: [readJson] as const,
  request: { params: NameParams, body: jsonBody(HostsBody, "The host ids.", true) },
  responses: {
    200: json(z.object({ results: z.array(Decision) }), "What was done to each host."),
    ...errors(400, 401, 404, 409),
  },
});

/** Instructor routes for enrollment: join tokens, and the hosts that wait for approval. */
export const enrollmentApi = apiRouter()
  .openapi(createTokenRoute, async (c) => {
    const made = await createJoinToken(c.req.valid("param").name, c.req.valid("json"));
    return c.json(
      { token: made.token, joinToken: made.info, command: joinCommand(ownOrigin(c), made.token) },
      201,
    );
  })
  .openapi(listTokensRoute, async (c) =>
    c.json({ joinTokens: await listJoinTokens(c.req.valid("param").name) }, 200),
  )
  .openapi(revokeTokenRoute, async (c) => {
    const p = c.req.valid("param");
    return c.json({ joinToken: await revokeJoinToken(p.name, p.tokenId) }, 200);
  })
  .openapi(pendingRoute, async (c) =>
    c.json({ hosts: await listPendingHosts(c.req.valid("param").name) }, 200),
  )
  .openapi(approveRoute, async (c) =>
    c.json({ results: await approveHosts(c.req.valid("param").name, c.req.valid("json").hosts) }, 200),
  )
  .openapi(rejectRoute, async (c) =>
    c.json({ results: await rejectHosts(c.req.valid("param").name, c.req.valid("json").hosts) }, 200),
  );
