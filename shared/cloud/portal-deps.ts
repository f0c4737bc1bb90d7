import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { LambdaClient } from "@aws-sdk/client-lambda";
import { type Clock, systemClock } from "../runtime/clock.ts";
import type { Deps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { createStore } from "../store/entities.ts";
import { checksFunction } from "./checks-function.ts";
import { clientOptions } from "./clients.ts";
import { CLOUD_ENV } from "./env.ts";
import { accessKeyFrom, type Env, envLinkedSecrets, type LinkedSecrets, required } from "./secrets.ts";

const notHere = (what: string) =>
  new VisibleError("forbidden", "portal.not_here", `the portal function cannot ${what}`);

/**
 * Deps for the student portal's function: the table, the clock, the access key and the RunChecks function,
 * nothing else. It has no providers, transports, workflows or operator secrets, in code as in IAM
 * (infra/permissions.ts): a portal bug cannot reach a host, only ask RunChecks to run the lab's own checks. Kept apart from deps.ts so the portal's bundle holds no EC2, SSM or SSH code.
 */
export function portalDeps(
  env: Env,
  options: { linked?: LinkedSecrets; dynamodb?: DynamoDBClient; lambda?: LambdaClient; clock?: Clock } = {},
): Deps {
  required(env, [CLOUD_ENV.table, CLOUD_ENV.stage]);
  const linked = options.linked ?? envLinkedSecrets(env);
  const dynamodb = options.dynamodb ?? new DynamoDBClient(clientOptions(env.AWS_REGION));
  return {
    store: createStore(dynamodb, env[CLOUD_ENV.table] as string),
    clock: options.clock ?? systemClock,
    providers: {},
    transport: (host) => {
      throw notHere(`reach host ${host.hostId}`);
    },
    workflows: {
      start: async () => {
        throw notHere("start workflows");
      },
      stop: async () => {
        throw notHere("stop workflows");
      },
    },
    accessKey: accessKeyFrom(linked),
    // "Check my work": the RunChecks function reaches the host (one attempt more, not the SDK's usual retries:
    // the student is waiting).
    ...(env[CLOUD_ENV.checksFunction]
      ? {
          checks: checksFunction(
            options.lambda ?? new LambdaClient({ ...clientOptions(env.AWS_REGION), maxAttempts: 2 }),
            env[CLOUD_ENV.checksFunction] as string,
          ),
        }
      : {}),
    secrets: {
      get: async () => {
        throw notHere("read operator secrets");
      },
    },
    // Where a BYOD student's machine joins (web/portal: the join line): the instructor API, not this portal.
    ...(env[CLOUD_ENV.hostApiUrl] ? { hostApiUrl: () => env[CLOUD_ENV.hostApiUrl] } : {}),
  };
}
