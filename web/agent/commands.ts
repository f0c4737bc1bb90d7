import type { Hono } from "hono";
import { agentScript } from "../../shared/agent/agent-script.ts";
import { checkIn } from "../../shared/agent/check-in.ts";
import { AgentResult, recordResult } from "../../shared/agent/commands.ts";
import { agentPoll, agentRotate } from "../../shared/agent/poll.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { type AgentVars, signed } from "./signed.ts";

/**
 * The agent's routes: the script itself (GET /agent.sh, unsigned: it holds no secret), and, signed by the host,
 * its long poll for commands (POST /poll), its results (POST /result) and its secret rotation (POST /rotate).
 */
export function commandRoutes(app: Hono<{ Variables: AgentVars }>): void {
  app.get("/agent.sh", (c) =>
    c.body(agentScript(), 200, {
      "content-type": "text/x-shellscript; charset=utf-8",
      "cache-control": "no-store",
    }),
  );

  app.post("/poll", signed(), async (c) => {
    const { workshop, hostId } = c.var.agentHost;
    return c.json(await agentPoll(workshop, hostId, JSON.parse(c.var.agentBody || "{}")));
  });

  app.post("/result", signed(), async (c) => {
    const { workshop, hostId } = c.var.agentHost;
    const result = AgentResult.parse(JSON.parse(c.var.agentBody));
    const host = (await useDeps().store.host.get({ workshop, hostId }).go()).data;
    if (host) await checkIn(host);
    return c.json({ recorded: await recordResult(workshop, hostId, result) });
  });

  app.post("/rotate", signed(), async (c) => {
    const { workshop, hostId } = c.var.agentHost;
    c.header("cache-control", "no-store");
    return c.json(await agentRotate(workshop, hostId));
  });
}
