import { handle, type LambdaContext, type LambdaEvent } from "hono/aws-lambda";
import { Resource } from "sst/resource";
import { instructorAuth } from "../shared/auth/tokens.ts";
import { cloudConfig, cloudDeps } from "../shared/cloud/deps.ts";
import { instructorTokenFrom, linkedFrom } from "../shared/cloud/secrets.ts";
import { withDeadline } from "../shared/runtime/deadline.ts";
import { configure } from "../shared/runtime/deps.ts";
import { bootstrapAuth, createInstructorApp } from "./app.ts";
import { authConfigFromEnv } from "./auth/config.ts";
import { requestWorkMs } from "./limits.ts";

/**
 * The instructor side's Lambda entry, behind its API Gateway HTTP API (payload format 2.0 events, infra/web.ts). The student portal is a function of its own
 * (web/portal-lambda.ts), so the function students reach holds only its table access (infra/permissions.ts) and
 * its bundle none of this code. It composes its runtime once per Lambda instance, on the first request.
 */
type Handler = ReturnType<typeof handle>;

let apiHandler: Handler | undefined;

/**
 * The instructor API and console: hashed API tokens (`labfleet login`), OAuth sign-in for the console, and
 * the bootstrap `InstructorToken` secret, compared by hash in constant time.
 */
export const api = (event: LambdaEvent, context?: LambdaContext) => {
  if (!apiHandler) {
    const linked = linkedFrom(Resource);
    const token = instructorTokenFrom(linked);
    configure(cloudDeps(process.env, { linked }));
    const { portalUrl } = cloudConfig(process.env);
    // OAuth client secrets come linked (sst.Secret), never as plain environment variables.
    const authConfig = authConfigFromEnv({
      ...process.env,
      LABFLEET_GITHUB_CLIENT_SECRET: linked("GithubClientSecret"),
      LABFLEET_GOOGLE_CLIENT_SECRET: linked("GoogleClientSecret"),
    });
    apiHandler = handle(
      createInstructorApp({
        auth: instructorAuth(bootstrapAuth(token)),
        authConfig,
        ...(portalUrl ? { portalUrl } : {}),
      }),
    );
  }
  const handler = apiHandler;
  // The request's work ends well inside the function's timeout (diagnose parts, refreshes of many hosts), and
  // inside API Gateway's integration timeout, after which its client is answered 503 whatever the function does.
  const remaining = context?.getRemainingTimeInMillis?.();
  return remaining === undefined
    ? handler(event, context)
    : withDeadline(Date.now() + requestWorkMs(remaining), () => handler(event, context));
};
