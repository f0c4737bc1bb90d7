import { handle, type LambdaContext, type LambdaEvent } from "hono/aws-lambda";
import { Resource } from "sst/resource";
import { portalDeps } from "../shared/cloud/portal-deps.ts";
import { linkedFrom } from "../shared/cloud/secrets.ts";
import { configure } from "../shared/runtime/deps.ts";
import { createPortalApp } from "./portal-app.ts";

/**
 * The student portal's Lambda entry, behind its own API Gateway HTTP API (payload format 2.0, infra/web.ts): the table, the clock and the access key, nothing
 * more (shared/cloud/portal-deps.ts). It imports nothing of the instructor's side, so its bundle holds no EC2,
 * SSM, SSH or workflow code, and its role no such permission. It composes its runtime once per Lambda instance.
 */
let portalHandler: ReturnType<typeof handle> | undefined;

export const portal = (event: LambdaEvent, context?: LambdaContext) => {
  if (!portalHandler) {
    configure(portalDeps(process.env, { linked: linkedFrom(Resource) }));
    portalHandler = handle(createPortalApp());
  }
  return portalHandler(event, context);
};
