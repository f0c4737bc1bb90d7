import type { Hono } from "hono";
import { parsePushedProgress, receiveProgress } from "../../shared/agent/progress.ts";
import { type AgentVars, signed } from "./signed.ts";

/**
 * `POST /agent/v1/progress`: a host's lab progress, pushed by its wrapper (shared/agent/progress.ts), signed by the
 * host. Answers the host's state and whether the push moved it (`applied`: false when no run waits for that host).
 */
export function progressRoutes(app: Hono<{ Variables: AgentVars }>): void {
  app.post("/progress", signed(), async (c) => {
    const body = parsePushedProgress(c.var.agentBody);
    return c.json(await receiveProgress(body));
  });
}
