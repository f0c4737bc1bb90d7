import type { Hono } from "hono";
import { joinWorkshop } from "../../shared/agent/enrollment.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import type { AgentVars } from "./signed.ts";

/**
 * `POST /agent/v1/enroll`: a machine joins a workshop with a join token, sent in the JSON body (never in the URL:
 * URLs are logged by proxies). Body `{token, name?, facts}`; answer 201 `{workshop, hostId, secret, enrollment}`
 * (the host's signing secret, this once; `no-store`). Refusals in the API's error shape: 400 for a body that is
 * not right (field paths), 401 `join.invalid` / `join.revoked` / `join.expired`, 409 `join.used_up` /
 * `join.workshop_ended`, 422 `join.requirements` with one detail per unmet requirement of `lab.requires`.
 */
export function enrollRoutes(app: Hono<{ Variables: AgentVars }>): void {
  app.post("/enroll", async (c) => {
    c.header("Cache-Control", "no-store");
    const text = await c.req.text();
    const body: unknown = JSON.parse(text || "{}"); // a SyntaxError is 400 input.bad_json (web/api/errors.ts)
    try {
      const joined = await withActor({ type: "public" }, () => joinWorkshop(body as never));
      return c.json(joined, 201);
    } catch (err) {
      // What the machine lacks is not a malformed request: 422, with the list of what is missing.
      if (err instanceof VisibleError && err.code === "join.requirements")
        return c.json(
          { error: { kind: err.kind, code: err.code, message: err.message, details: err.details } },
          422,
        );
      throw err;
    }
  });
}
