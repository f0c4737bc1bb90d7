import { describe, expect, it } from "vitest";
import { bootstrapAuth, createApp } from "../../web/app.ts";

/**
 * Walks every route the app registers under /api: each must refuse a request without a valid instructor
 * token. A new route added without auth fails here. The only public API route is /api/health.
 */
const app = createApp({ auth: bootstrapAuth("walk-token") });
const PUBLIC = new Set(["GET /api/health"]);

const apiRoutes = [
  ...new Set(
    app.routes
      .filter((r) => r.path.startsWith("/api/") && r.method !== "ALL")
      .map((r) => `${r.method} ${r.path}`),
  ),
];

function concrete(path: string): string {
  return path
    .replace(/:name/g, "demo")
    .replace(/:runId/g, "run_01J0000000000000000000000")
    .replace(/:[A-Za-z]+/g, "x");
}

describe("every instructor route needs a token", () => {
  it("finds the routes (fleet, portal and workshop routes are all registered)", () => {
    expect(apiRoutes.length).toBeGreaterThan(25);
    for (const must of [
      "POST /api/workshops/:name/doctor",
      "POST /api/workshops/:name/portal/release",
      "GET /api/workshops/:name",
    ]) {
      expect(apiRoutes).toContain(must);
    }
  });

  it.each(apiRoutes.filter((r) => !PUBLIC.has(r)))(
    "%s answers 401 without a token and with a wrong one",
    async (route) => {
      const [method = "GET", path = "/"] = route.split(" ");
      const url = concrete(path);
      const none = await app.request(url, { method });
      expect(none.status).toBe(401);
      const wrong = await app.request(url, { method, headers: { authorization: "Bearer not-the-token" } });
      expect(wrong.status).toBe(401);
    },
  );
});
