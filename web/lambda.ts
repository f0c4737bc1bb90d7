import { handle, type LambdaContext, type LambdaEvent } from "hono/aws-lambda";
import { Resource } from "sst/resource";
import { cloudConfig, cloudDeps } from "../shared/cloud/deps.ts";
import { portalDeps } from "../shared/cloud/portal-deps.ts";
import { instructorTokenFrom, linkedFrom } from "../shared/cloud/secrets.ts";
import { configure } from "../shared/runtime/deps.ts";
import { bootstrapAuth, createInstructorApp, createPortalApp } from "./app.ts";

/**
 * The web's Lambda entries, behind Function URLs. The portal and the instructor side are separate functions,
 * so the function students reach holds only its table access (infra/permissions.ts). Each composes its runtime
 * once per Lambda instance, on the first request.
 */
type Handler = ReturnType<typeof handle>;

let portalHandler: Handler | undefined;
let apiHandler: Handler | undefined;

/** The student portal: the table, the clock and the access key, nothing more. */
export const portal = (event: LambdaEvent, context?: LambdaContext) => {
  if (!portalHandler) {
    configure(portalDeps(process.env, { linked: linkedFrom(Resource) }));
    portalHandler = handle(createPortalApp());
  }
  return portalHandler(event, context);
};

/**
 * The instructor API and console. Until issue 6 brings OAuth sign-in and hashed API tokens, the one
 * instructor token is the `InstructorToken` secret, compared by hash in constant time.
 */
export const api = (event: LambdaEvent, context?: LambdaContext) => {
  if (!apiHandler) {
    const linked = linkedFrom(Resource);
    const token = instructorTokenFrom(linked);
    configure(cloudDeps(process.env, { linked }));
    const { portalUrl } = cloudConfig(process.env);
    apiHandler = handle(
      createInstructorApp({ auth: bootstrapAuth(token), ...(portalUrl ? { portalUrl } : {}) }),
    );
  }
  return apiHandler(event, context);
};
