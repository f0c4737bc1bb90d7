import { createHash, randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Throttle } from "../../../infra/web.ts";
import { AwsError, FAKE_REGION } from "./core.ts";
import { type FakeLambda, functionUrlEvent, functionUrlResponse, type InvokeResult } from "./lambda.ts";

/**
 * API Gateway HTTP APIs of the AWS double, for what labfleet uses of them: routes integrated with a Lambda
 * function (AWS_PROXY, payload format 2.0), the `$default` stage's throttling, the integration timeout and the
 * payload limit. Each API is an HTTP server on 127.0.0.1; requests to it are taken as sent to the API's domain
 * (its custom domain, else `<api-id>.execute-api.<region>.amazonaws.com`) over HTTPS, which is what API Gateway
 * tells the function.
 *
 * Not modelled: authorizers, CORS, mTLS, API mappings with a base path, stages other than `$default`, parameter
 * mapping, the 10,240-byte limit on the request line and headers, and integrations other than Lambda.
 */

/**
 * The 2.0 event and response (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-develop-integrations-lambda.html):
 * header names lower-cased and repeated headers joined with commas; the Cookie header as the `cookies` array; the
 * matched `routeKey`; `requestContext.http.{method,path,protocol,sourceIp,userAgent}`, `domainName`, `stage`; the
 * body as text or base64 with `isBase64Encoded`. A response with a `statusCode` gives its status, headers, each of
 * `cookies` as a Set-Cookie header, and its body (base64-decoded when `isBase64Encoded`); valid JSON without
 * `statusCode` is the body of a 200 application/json. The same shape Function URLs use (lambda.ts builds both).
 */
const PAYLOAD_FORMAT = "2.0";

/**
 * Throttling (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-throttling.html): a token bucket
 * per route (its route settings, else the stage's default route settings) and one for the whole account per
 * Region (10,000 requests a second, a burst of 5,000). A request past either is answered 429
 * `{"message":"Too Many Requests"}` and never reaches the function.
 */
export const ACCOUNT_THROTTLE: Throttle = { burstLimit: 5000, rateLimit: 10_000 };

/**
 * Quotas (https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html): the integration
 * timeout is 30 seconds at most (a function still running then has its client answered 503
 * `{"message":"Service Unavailable"}`, and goes on running), and a payload may be 10 MB (a larger request is
 * answered 413 without invoking anything).
 */
export const INTEGRATION_TIMEOUT_MS = 30_000;
export const PAYLOAD_LIMIT = 10 * 1024 * 1024;

export interface HttpApiConfig {
  /** The API's name (sst.config.ts: `PortalHttp`, `ApiHttp`). */
  name: string;
  /** Route key (`$default`, `POST /claim`) -> the Lambda function its integration invokes. */
  routes: Record<string, string>;
  /** The `$default` stage's default route settings. */
  throttle: Throttle;
  /** The stage's route settings, by route key. */
  routeThrottle?: Record<string, Throttle>;
  /** A custom domain; the execute-api domain otherwise. */
  domainName?: string;
  /** A shorter integration timeout (milliseconds, 50 to 30,000, as the integration's TimeoutInMillis allows). */
  integrationTimeoutMs?: number;
}

export interface HttpApiRequest {
  api: string;
  /** The route the request matched (`-` when none did). */
  routeKey: string;
  status: number;
  /** Whether the function was invoked. */
  invoked: boolean;
  sourceIp: string;
}

export interface DeployedHttpApi {
  apiId: string;
  /** Where the test connects: http://127.0.0.1:PORT */
  endpoint: string;
  /** The API's URL as sst.config.ts outputs it: https://DOMAIN */
  url: string;
  domainName: string;
}

class Bucket {
  private tokens: number;
  private at: number;
  constructor(
    private readonly t: Throttle,
    now: number,
  ) {
    this.tokens = t.burstLimit;
    this.at = now;
  }
  take(now: number): boolean {
    this.tokens = Math.min(this.t.burstLimit, this.tokens + ((now - this.at) / 1000) * this.t.rateLimit);
    this.at = now;
    if (this.tokens < 1) return false;
    this.tokens -= 1;
    return true;
  }
}

/** The API's id: 10 lower-case letters and digits, stable per API name. */
function apiIdOf(name: string): string {
  const digest = createHash("sha256").update(`labfleet-fake-apigw:${name}`).digest();
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  let id = "";
  for (let i = 0; i < 10; i++) id += alphabet[(digest[i] as number) % alphabet.length];
  return id;
}

const json = (res: ServerResponse, status: number, message: string, requestId: string) => {
  res.writeHead(status, { "content-type": "application/json", "apigw-requestid": requestId });
  res.end(JSON.stringify({ message }));
};

export class FakeApiGateway {
  /** Every request the APIs answered, in order. */
  readonly requests: HttpApiRequest[] = [];
  private readonly servers: Server[] = [];
  private readonly account: Bucket;
  private readonly now: () => number;

  constructor(
    private readonly opts: {
      lambda: FakeLambda;
      region?: string;
      /** The throttles' clock (milliseconds); a test may hold it still. */
      now?: () => number;
    },
  ) {
    this.now = opts.now ?? (() => performance.now());
    this.account = new Bucket(ACCOUNT_THROTTLE, this.now());
  }

  async addHttpApi(config: HttpApiConfig): Promise<DeployedHttpApi> {
    const timeout = config.integrationTimeoutMs ?? INTEGRATION_TIMEOUT_MS;
    if (timeout < 50 || timeout > INTEGRATION_TIMEOUT_MS)
      throw new AwsError(
        "BadRequestException",
        "Timeout must be between 50 ms and 30000 ms for HTTP APIs",
        400,
      );
    for (const key of Object.keys(config.routeThrottle ?? {}))
      if (!config.routes[key])
        throw new AwsError(
          "BadRequestException",
          `Unable to find Route by key ${key} within the provided RouteSettings`,
          400,
        );
    const apiId = apiIdOf(config.name);
    const domainName =
      config.domainName ?? `${apiId}.execute-api.${this.opts.region ?? FAKE_REGION}.amazonaws.com`;
    const buckets = new Map(
      Object.keys(config.routes).map((key) => [
        key,
        new Bucket(config.routeThrottle?.[key] ?? config.throttle, this.now()),
      ]),
    );
    const server = createServer((req, res) => {
      this.serve({ config, apiId, domainName, buckets, timeout }, req, res).catch((e: unknown) => {
        if (!res.headersSent) res.writeHead(500, { "content-type": "application/json" });
        res.end(JSON.stringify({ message: "Internal Server Error", double: String(e) }));
      });
    });
    this.servers.push(server);
    const port = await new Promise<number>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port));
    });
    return { apiId, endpoint: `http://127.0.0.1:${port}`, url: `https://${domainName}`, domainName };
  }

  /** HTTP API route selection: the exact `METHOD /path`, then `ANY /path`, then `$default`. */
  private route(routes: Record<string, string>, method: string, path: string): string | undefined {
    for (const key of [`${method} ${path}`, `ANY ${path}`, "$default"]) if (routes[key]) return key;
    return undefined;
  }

  private async serve(
    api: {
      config: HttpApiConfig;
      apiId: string;
      domainName: string;
      buckets: Map<string, Bucket>;
      timeout: number;
    },
    req: IncomingMessage,
    res: ServerResponse,
  ): Promise<void> {
    const requestId = randomUUID();
    const sourceIp = (req.socket.remoteAddress ?? "").replace(/^::ffff:/, "");
    const path = (req.url ?? "/").split("?")[0] ?? "/";
    const routeKey = this.route(api.config.routes, req.method ?? "GET", path);
    const record = (status: number, invoked: boolean) =>
      this.requests.push({ api: api.config.name, routeKey: routeKey ?? "-", status, invoked, sourceIp });

    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of req) {
      size += (chunk as Buffer).length;
      if (size <= PAYLOAD_LIMIT) chunks.push(chunk as Buffer);
    }
    if (!routeKey) {
      record(404, false);
      return json(res, 404, "Not Found", requestId);
    }
    const now = this.now();
    const bucket = api.buckets.get(routeKey) as Bucket;
    if (!bucket.take(now) || !this.account.take(now)) {
      record(429, false);
      return json(res, 429, "Too Many Requests", requestId);
    }
    if (size > PAYLOAD_LIMIT) {
      record(413, false);
      return json(res, 413, "Request Entity Too Large", requestId);
    }

    const event = functionUrlEvent(req, Buffer.concat(chunks), { requestId, apiId: api.apiId }) as {
      routeKey: string;
      headers: Record<string, string>;
      requestContext: Record<string, unknown>;
    };
    event.routeKey = routeKey;
    // What the client reached: the API's domain over HTTPS, whatever Host it sent.
    event.headers.host = api.domainName;
    event.headers["x-forwarded-proto"] = "https";
    event.headers["x-forwarded-port"] = "443";
    Object.assign(event.requestContext, {
      routeKey,
      domainName: api.domainName,
      domainPrefix: api.domainName.split(".")[0],
      stage: "$default",
    });
    (event as Record<string, unknown>).version = PAYLOAD_FORMAT;

    const fn = api.config.routes[routeKey] as string;
    const invocation = this.opts.lambda.invoke(fn, JSON.stringify(event), { requestId });
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), api.timeout);
    });
    let result: InvokeResult | "timeout" | AwsError;
    try {
      result = await Promise.race([invocation, timedOut]);
    } catch (e) {
      if (!(e instanceof AwsError)) throw e;
      result = e;
    } finally {
      clearTimeout(timer);
    }
    // An invocation past the timeout goes on; its result (or error) is dropped.
    invocation.catch(() => undefined);
    if (result === "timeout") {
      record(503, true);
      return json(res, 503, "Service Unavailable", requestId);
    }
    // Lambda refused the invocation (throttled, too large) or the function failed: a 500 to the client.
    if (result instanceof AwsError || result.functionError) {
      record(500, !(result instanceof AwsError));
      return json(res, 500, "Internal Server Error", requestId);
    }
    let reply: ReturnType<typeof functionUrlResponse>;
    try {
      reply = functionUrlResponse(result.payload);
    } catch {
      record(500, true);
      return json(res, 500, "Internal Server Error", requestId);
    }
    res.statusCode = reply.statusCode;
    for (const [k, v] of Object.entries(reply.headers)) res.setHeader(k, v);
    if (reply.cookies.length > 0) res.setHeader("set-cookie", reply.cookies);
    res.setHeader("apigw-requestid", requestId);
    record(reply.statusCode, true);
    res.end(reply.body);
  }

  async close(): Promise<void> {
    await Promise.all(
      this.servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            s.closeAllConnections();
            s.close(() => resolve());
          }),
      ),
    );
  }
}
