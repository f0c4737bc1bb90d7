import type { MiddlewareHandler } from "hono";
import { verifySignedCall } from "../../shared/agent/host-secrets.ts";
import { withActor } from "../../shared/runtime/actor.ts";

export interface AgentVars {
  /** Who signed the call (set by `signed()`). */
  agentHost: { workshop: string; hostId: string };
  /** The call's body as signed (the handler parses it: `JSON.parse(c.var.agentBody)`). */
  agentBody: string;
}

/**
 * Refuses any call not signed by a host (shared/agent/signing.ts; 401 with the reason) and runs the handler as
 * that host's actor. The path signed is the request's path and query as sent.
 */
export function signed(): MiddlewareHandler<{ Variables: AgentVars }> {
  return async (c, next) => {
    const url = new URL(c.req.url);
    const body = await c.req.text();
    const who = await verifySignedCall({
      method: c.req.method,
      path: url.pathname + url.search,
      body,
      header: (name) => c.req.header(name),
    });
    c.set("agentHost", who);
    c.set("agentBody", body);
    await withActor({ type: "host", workshop: who.workshop, hostId: who.hostId }, () => next());
  };
}
