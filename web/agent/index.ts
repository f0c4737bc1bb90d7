import { Hono } from "hono";
import { commandRoutes } from "./commands.ts";
import { enrollRoutes } from "./enroll.ts";
import { progressRoutes } from "./progress.ts";
import type { AgentVars } from "./signed.ts";

/**
 * What hosts call, under /agent/v1 (on the instructor's side: locally in the one app, in the cloud on the API
 * function). Not part of the instructor API's OpenAPI document: hosts are not API clients. Every route but the
 * join (`POST /enroll`, authorised by its join token) and the agent script itself is signed by the calling host
 * (web/agent/signed.ts). Each file registers its routes here:
 * - enroll.ts: joining with a join token;
 * - commands.ts: the agent's long poll for commands and its results, secret rotation, the agent script;
 * - progress.ts: a host's pushed lab progress.
 */
export const agentApp = new Hono<{ Variables: AgentVars }>();
commandRoutes(agentApp);
enrollRoutes(agentApp);
progressRoutes(agentApp);
