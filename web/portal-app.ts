import { baseApp } from "./base.ts";
import { portal } from "./portal/index.tsx";

/** The student portal alone: what the cloud's portal function serves (it holds no host or cloud permissions). */
export function createPortalApp() {
  const app = baseApp();
  app.route("/", portal);
  return app;
}
