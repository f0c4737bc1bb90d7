import { HTTP_API_INTEGRATION_TIMEOUT_MS } from "../shared/cloud/env.ts";

/**
 * How the web reaches AWS, as plain data: the portal and the instructor API are each served by an API Gateway HTTP
 * API (sst.aws.ApiGatewayV2) in front of their Lambda, never by a bare Function URL, so every request passes API
 * Gateway's throttling before it can start a function. sst.config.ts maps this onto resources;
 * tests/unit/infra-web.test.ts checks it, and the AWS double (tests/harness/aws/apigateway.ts) serves it.
 *
 * Two APIs, not one: the portal and the instructor's side stay two origins (a page of one cannot read the
 * other's cookies or pages), and a flood of students cannot use up the instructor's throttle.
 *
 * Imports nothing but the environment contract: sst.config.ts loads it without the application code.
 */

/** API Gateway's token bucket for a route: at most `burstLimit` requests at once, `rateLimit` a second after it. */
export interface Throttle {
  burstLimit: number;
  rateLimit: number;
}

export type WebApiName = "Portal" | "Api";

export interface HttpApiSpec {
  /** The function (infra/permissions.ts FUNCTIONS) every route of this API invokes, payload format 2.0. */
  function: WebApiName;
  /** The stage's default route settings: the throttle of every route without one of its own. */
  throttle: Throttle;
  /** Routes with a throttle of their own (stricter), by route key; every other request takes `$default`. */
  routes: Record<string, Throttle>;
  /**
   * How long one request of a route keeps a function busy (seconds) when it is one of a flood: what anybody can
   * send without a token or a claimed lab (a page, a code entry, a claim with its PIN hashed by scrypt; an API call
   * without a valid token ends at its 401). Concurrency is rate times this.
   */
  floodSeconds: Record<string, number>;
  /**
   * The Lambda concurrency this API may keep busy at most: its routes' bursts together, and their rates times
   * their flood seconds together, stay within it. The account's concurrency (1,000 by default) is shared with the
   * workflows' task functions, which must keep room to deploy and tear down hosts while students arrive.
   */
  concurrencyBudget: number;
}

/**
 * API Gateway's own limits for HTTP APIs (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html
 * and https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html): 10,000 requests a
 * second with a burst of 5,000 across all APIs of an account per Region, a 30 s integration timeout that cannot be
 * raised, and 10 MB of payload.
 */
export const HTTP_API_QUOTAS = {
  accountRateLimit: 10_000,
  accountBurstLimit: 5_000,
  integrationTimeoutMs: HTTP_API_INTEGRATION_TIMEOUT_MS,
  payloadBytes: 10 * 1024 * 1024,
} as const;

/** Lambda's default concurrent executions per account and Region (a new account may start lower). */
export const DEFAULT_ACCOUNT_CONCURRENCY = 1000;

export const HTTP_APIS: Record<WebApiName, HttpApiSpec> = {
  Portal: {
    function: "Portal",
    // A room loading the board at once, waiting-room pages refreshing themselves, labs opened.
    throttle: { burstLimit: 30, rateLimit: 100 },
    routes: {
      // A room of 300 claiming within half a minute is 10 a second; a claim hashes a PIN (scrypt).
      "POST /claim": { burstLimit: 20, rateLimit: 20 },
      // Coming back on another device: few at a time, and each one hashes a PIN too.
      "POST /recover": { burstLimit: 10, rateLimit: 10 },
    },
    floodSeconds: { $default: 0.25, "POST /claim": 0.5, "POST /recover": 0.5 },
    concurrencyBudget: 60,
  },
  Api: {
    function: "Api",
    // Instructors and their CLI: a few people, each call behind a token.
    throttle: { burstLimit: 20, rateLimit: 20 },
    routes: {},
    floodSeconds: { $default: 1 },
    concurrencyBudget: 20,
  },
};

/** Every route key of an API, `$default` first: each is integrated with the API's function. */
export function routeKeysOf(name: WebApiName): string[] {
  return ["$default", ...Object.keys(HTTP_APIS[name].routes)];
}

/** The throttle a route key gets: its own, else the stage's default route settings. */
export function throttleOf(name: WebApiName, routeKey: string): Throttle {
  const spec = HTTP_APIS[name];
  return spec.routes[routeKey] ?? spec.throttle;
}

/** The stage's settings as aws.apigatewayv2.Stage takes them (defaultRouteSettings and routeSettings). */
export function stageSettings(name: WebApiName) {
  const spec = HTTP_APIS[name];
  return {
    defaultRouteSettings: {
      throttlingBurstLimit: spec.throttle.burstLimit,
      throttlingRateLimit: spec.throttle.rateLimit,
    },
    routeSettings: Object.entries(spec.routes).map(([routeKey, t]) => ({
      routeKey,
      throttlingBurstLimit: t.burstLimit,
      throttlingRateLimit: t.rateLimit,
    })),
  };
}

/**
 * The stage's access log line. Not SST's default, which logs `$context.path`: a personal link (`/l/<token>`) and
 * an admin link are paths, and a token never goes to a log. The route key (`$default`, `POST /claim`) says enough.
 * Variables: https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-logging-variables.html
 */
export const ACCESS_LOG_FORMAT = JSON.stringify({
  requestTime: "$context.requestTime",
  requestId: "$context.requestId",
  httpMethod: "$context.httpMethod",
  routeKey: "$context.routeKey",
  status: "$context.status",
  responseLatency: "$context.responseLatency",
  integrationStatus: "$context.integrationStatus",
  integrationError: "$context.integrationErrorMessage",
  ip: "$context.identity.sourceIp",
});

/**
 * The stage's custom domains: environment variables sst.config.ts reads at deploy time (`export` them, or put
 * them in `.env.<stage>`, which SST loads for that stage). Without a name, the API keeps its execute-api URL.
 */
export const DOMAIN_ENV: Record<WebApiName, { name: string; cert: string }> = {
  Portal: { name: "LABFLEET_PORTAL_DOMAIN", cert: "LABFLEET_PORTAL_CERT_ARN" },
  Api: { name: "LABFLEET_API_DOMAIN", cert: "LABFLEET_API_CERT_ARN" },
};

export interface CustomDomain {
  name: string;
  /**
   * An ACM certificate for the name, in the deployment's Region: the DNS is not in Route 53, so SST makes no
   * certificate and no record (you point the name at the API's domain yourself). Without one, SST validates a
   * new certificate and adds the alias record in the Route 53 hosted zone of the name.
   */
  cert?: string;
}

const HOSTNAME = /^(?=.{1,253}$)(?!-)[a-z0-9-]{1,63}(?<!-)(\.(?!-)[a-z0-9-]{1,63}(?<!-))+$/;
const CERT_ARN = /^arn:aws(-cn|-us-gov)?:acm:[a-z0-9-]+:\d{12}:certificate\/[0-9a-f-]{36}$/;

/** The custom domains the environment sets; a value that is not a hostname or an ACM certificate ARN is named. */
export function domainsFrom(
  env: Record<string, string | undefined>,
): Partial<Record<WebApiName, CustomDomain>> {
  const out: Partial<Record<WebApiName, CustomDomain>> = {};
  const problems: string[] = [];
  for (const api of Object.keys(DOMAIN_ENV) as WebApiName[]) {
    const vars = DOMAIN_ENV[api];
    const name = env[vars.name]?.trim().toLowerCase().replace(/\.$/, "");
    const cert = env[vars.cert]?.trim();
    if (!name) {
      if (cert) problems.push(`${vars.cert} is set but ${vars.name} is not: set the domain name it is for`);
      continue;
    }
    if (!HOSTNAME.test(name))
      problems.push(`${vars.name} must be a host name such as labs.example.com (no scheme, port or path)`);
    if (cert && !CERT_ARN.test(cert))
      problems.push(
        `${vars.cert} must be an ACM certificate ARN (arn:aws:acm:REGION:ACCOUNT:certificate/ID) in the Region you deploy to`,
      );
    out[api] = { name, ...(cert ? { cert } : {}) };
  }
  if (out.Portal && out.Api && out.Portal.name === out.Api.name)
    problems.push(
      `${DOMAIN_ENV.Portal.name} and ${DOMAIN_ENV.Api.name} must differ: the portal and the instructor API are two sites`,
    );
  if (problems.length > 0) throw new Error(`labfleet's custom domains: ${problems.join("; ")}`);
  return out;
}
