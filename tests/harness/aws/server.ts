import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { type AuthRequest, AwsError, type Call, type Operations, type Principal, RawReply } from "./core.ts";
import type { Iam } from "./iam.ts";
import { decodeRequest, encodeError, encodeResult, type RawRequest, type RawResponse } from "./protocol.ts";
import { RateLimits } from "./rate-limits.ts";

/**
 * The AWS double's one endpoint, on 127.0.0.1: every SDK client of the code under test reaches it through
 * `AWS_ENDPOINT_URL`. For each request it finds the caller by the access key id of its signature (as AWS does;
 * an unknown key is refused), the service by the signature's scope, the operation and its input by the
 * service's protocol (protocol.ts), refuses it past AWS's published request rates (rate-limits.ts, always on),
 * throttles it when a throttling fault is on, and runs the service double's
 * operation, whose `call.authorize` evaluates IAM for the caller. Every call is recorded.
 *
 * Routes under `/__fake/` are the double's own (an instance powering itself off, ...), never AWS's.
 */

export interface Service {
  operations: Operations;
}

export interface CallRecord {
  principal: string;
  service: string;
  operation: string;
  /** The decoded input, as the SDK command was given it. */
  input: unknown;
  /** ok, or the error code the caller got (AccessDeniedException, ThrottlingException, ...). */
  outcome: string;
  throttled: boolean;
  at: number;
}

export interface ThrottleFault {
  /** The share of each API's calls that is throttled, 0 to 1. */
  share: number;
  /** Seeds the choice, so a run throttles the same calls again. */
  seed?: number;
  /** Principals whose calls are never throttled (the test's own, by default the operator). */
  spare?: string[];
}

/** mulberry32: a small seeded PRNG, so throttling is reproducible. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The throttling error each service answers, as its API reference names it. */
function throttlingError(service: string): AwsError {
  if (service === "ec2") return new AwsError("RequestLimitExceeded", "Request limit exceeded.", 503);
  if (service === "lambda") return new AwsError("TooManyRequestsException", "Rate Exceeded.", 429);
  if (service === "dynamodb")
    return new AwsError("ThrottlingException", "Rate of requests exceeds the allowed throughput.", 400);
  if (service === "scheduler") return new AwsError("ThrottlingException", "Rate exceeded", 429);
  return new AwsError("ThrottlingException", "Rate exceeded", 400);
}

/** What AWS answers for a denied request: EC2's UnauthorizedOperation, everyone else's AccessDeniedException. */
export function accessDenied(service: string, principal: Principal, req: AuthRequest): AwsError {
  const why = `User: ${principal.arn} is not authorized to perform: ${req.action} on resource: ${req.resource} because no identity-based policy allows the ${req.action} action`;
  if (service === "ec2") {
    const encoded = Buffer.from(JSON.stringify({ action: req.action, resource: req.resource })).toString(
      "base64",
    );
    return new AwsError(
      "UnauthorizedOperation",
      `You are not authorized to perform this operation. ${why}. Encoded authorization failure message: ${encoded}`,
      403,
    );
  }
  const status = service === "lambda" || service === "scheduler" ? 403 : 400;
  return new AwsError("AccessDeniedException", why, status);
}

function unknownOperation(service: string): AwsError {
  if (service === "ec2")
    return new AwsError("InvalidAction", "The action is not valid for this web service.");
  return new AwsError("UnknownOperationException", "the AWS double does not implement this operation");
}

export class AwsServer {
  readonly calls: CallRecord[] = [];
  /** `service:Operation` of requests no service double implements (each got the service's unknown-operation error). */
  readonly unhandled: string[] = [];
  /** Bugs of the double: a service double threw something that is not an AwsError (a test fails on any). */
  readonly failures: string[] = [];
  url = "";
  /** AWS's published request rates (EC2's token buckets, Parameter Store's throughput), always enforced. */
  readonly rateLimits: RateLimits;
  private server: Server | undefined;
  private throttle: { share: number; spare: Set<string>; random: Map<string, () => number>; seed: number } = {
    share: 0,
    spare: new Set(),
    random: new Map(),
    seed: 1,
  };
  private readonly byKey = new Map<string, Principal>();
  private readonly routes = new Map<string, (body: unknown) => Promise<unknown> | unknown>();

  constructor(
    private readonly opts: {
      principals: Principal[];
      services: Record<string, Service>;
      iam: Iam;
      /** The rate limits' clock (ms). */
      now?: () => number;
    },
  ) {
    this.rateLimits = new RateLimits(opts.now);
    for (const p of opts.principals) this.addPrincipal(p);
  }

  addPrincipal(p: Principal): void {
    this.byKey.set(p.accessKeyId, p);
  }

  principal(name: string): Principal {
    const p = [...this.byKey.values()].find((x) => x.name === name);
    if (!p) throw new Error(`the AWS double has no principal ${name}`);
    return p;
  }

  /** A route of the double's own: `POST /__fake/<name>` with a JSON body, answered with `fn`'s JSON result. */
  route(name: string, fn: (body: unknown) => Promise<unknown> | unknown): void {
    this.routes.set(name, fn);
  }

  /** The inputs of the calls of one operation that succeeded (`ec2`, `RunInstances`), in order; by a principal. */
  inputs<I = Record<string, unknown>>(service: string, operation: string, principal?: string): I[] {
    return this.calls
      .filter(
        (c) =>
          c.service === service &&
          c.operation === operation &&
          c.outcome === "ok" &&
          (principal === undefined || c.principal === principal),
      )
      .map((c) => c.input as I);
  }

  /** Throttles a share of every API's calls (ThrottlingException, EC2's RequestLimitExceeded); 0 turns it off. */
  setThrottle(fault: ThrottleFault): void {
    this.throttle = {
      share: fault.share,
      spare: new Set(fault.spare ?? ["operator"]),
      random: new Map(),
      seed: fault.seed ?? 1,
    };
  }

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        this.failures.push(err instanceof Error ? (err.stack ?? err.message) : String(err));
        res.writeHead(500, { "content-type": "text/plain" }).end(`the AWS double failed: ${String(err)}`);
      });
    });
    this.server.keepAliveTimeout = 5_000;
    await new Promise<void>((resolve) => this.server?.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this.url;
  }

  async close(): Promise<void> {
    const s = this.server;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }

  /** Runs one operation as a principal, without HTTP (for the double's own services calling each other). */
  async invoke(
    principal: Principal,
    service: string,
    operation: string,
    input: unknown,
    requestId = randomUUID(),
  ): Promise<unknown> {
    const op = this.opts.services[service]?.operations[operation];
    if (!op) throw unknownOperation(service);
    return op(input, this.callOf(principal, service, operation, requestId));
  }

  private callOf(principal: Principal, service: string, operation: string, requestId: string): Call {
    return {
      principal,
      service,
      operation,
      requestId,
      authorize: async (requests) => {
        for (const r of requests) {
          if (!(await this.opts.iam.allowed(principal, r))) throw accessDenied(service, principal, r);
        }
      },
    };
  }

  private throttled(principal: Principal, service: string, operation: string): boolean {
    const t = this.throttle;
    if (t.share <= 0 || t.spare.has(principal.name)) return false;
    const api = `${service}:${operation}`;
    let random = t.random.get(api);
    if (!random) {
      let h = t.seed;
      for (const c of api) h = Math.imul(h ^ c.charCodeAt(0), 16777619);
      random = prng(h);
      t.random.set(api, random);
    }
    return random() < t.share;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const body = Buffer.concat(chunks);
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    if (url.pathname.startsWith("/__fake/")) {
      const fn = this.routes.get(url.pathname.slice("/__fake/".length));
      if (!fn) return void res.writeHead(404).end();
      const out = await fn(body.length ? JSON.parse(body.toString("utf8")) : {});
      return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(out ?? null));
    }
    const headers: Record<string, string | undefined> = {};
    for (const [k, v] of Object.entries(req.headers)) headers[k] = Array.isArray(v) ? v.join(",") : v;
    const raw: RawRequest = {
      method: req.method ?? "GET",
      path: url.pathname,
      query: url.searchParams,
      headers,
      body,
    };
    const requestId = randomUUID();
    const decoded = decodeRequest(raw);
    const { service, operation } = decoded;
    const send = (r: RawResponse) => {
      res.writeHead(r.status, { "x-amzn-requestid": requestId, ...r.headers }).end(r.body);
    };
    const principal = decoded.accessKeyId ? this.byKey.get(decoded.accessKeyId) : undefined;
    const record = (outcome: string, throttled = false) =>
      this.calls.push({
        principal: principal?.name ?? "(unknown)",
        service,
        operation: operation ?? "(unknown)",
        input: decoded.input,
        outcome,
        throttled,
        at: Date.now(),
      });
    if (!principal) {
      record("UnrecognizedClient");
      const [code, status] = service === "ec2" ? ["AuthFailure", 401] : ["UnrecognizedClientException", 400];
      return send(
        encodeError(
          service,
          operation,
          code,
          "The security token included in the request is invalid.",
          status,
          requestId,
        ),
      );
    }
    if (!operation || !this.opts.services[service]?.operations[operation]) {
      this.unhandled.push(`${service}:${operation ?? "(unknown)"}`);
      record("unhandled");
      const e = unknownOperation(service);
      return send(encodeError(service, operation, e.code, e.message, e.status, requestId));
    }
    const limited =
      principal.name === "operator" ? undefined : this.rateLimits.admit(service, operation, decoded.input);
    if (limited) {
      record(limited.code, true);
      return send(encodeError(service, operation, limited.code, limited.message, limited.status, requestId));
    }
    if (this.throttled(principal, service, operation)) {
      const e = throttlingError(service);
      record(e.code, true);
      return send(encodeError(service, operation, e.code, e.message, e.status, requestId));
    }
    try {
      const out = await this.invoke(principal, service, operation, decoded.input, requestId);
      if (out instanceof RawReply) {
        record(
          out.status < 300
            ? "ok"
            : ((out.headers["x-amzn-errortype"] ?? String(out.status)).split(":")[0] as string),
        );
        return send({ status: out.status, headers: out.headers, body: out.body });
      }
      record("ok");
      send(encodeResult(service, operation, out ?? {}, requestId));
    } catch (err) {
      if (!(err instanceof AwsError)) throw err;
      record(err.code);
      send(encodeError(service, operation, err.code, err.message, err.status, requestId));
    }
  }
}
