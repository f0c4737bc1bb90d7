import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildBundle, type LambdaBundle } from "../../scripts/build-lambdas.ts";
import { FakeApiGateway, type HttpApiConfig, PAYLOAD_LIMIT } from "../harness/aws/apigateway.ts";
import { arn } from "../harness/aws/core.ts";
import { FakeLambda } from "../harness/aws/lambda.ts";
import { waitFor } from "../harness/runtime.ts";

/**
 * The AWS double's API Gateway HTTP APIs keep API Gateway's contracts for what labfleet uses: routes to a Lambda
 * integration with payload format 2.0 events and responses, throttling (429 without invoking the function), the
 * integration timeout (503) and the payload limit (413).
 */

const work = mkdtempSync(join(tmpdir(), "labfleet-fake-apigw-test-"));
let fixture: LambdaBundle;
let lambda: FakeLambda;
let gateway: FakeApiGateway;
/** The throttles' clock, held still unless a test moves it. */
let clock = 0;

beforeAll(async () => {
  fixture = await buildBundle({ entry: "tests/fixtures/lambda/handlers.ts", dir: join(work, "fixture") });
  lambda = new FakeLambda({
    endpoint: "http://127.0.0.1:9/",
    functions: [
      {
        name: "web",
        arn: arn.lambda("web"),
        handler: { dir: fixture.dir, file: fixture.file, exportName: "web" },
        timeoutMs: 10_000,
        memoryMb: 256,
        env: {},
      },
    ],
  });
  gateway = new FakeApiGateway({ lambda, now: () => clock });
}, 60_000);

afterAll(async () => {
  await gateway?.close();
  await lambda?.close();
  rmSync(work, { recursive: true, force: true });
});

const api = (over: Partial<HttpApiConfig> = {}) =>
  gateway.addHttpApi({
    name: `Test${Math.random()}`,
    routes: { $default: "web", "POST /claim": "web" },
    throttle: { burstLimit: 50, rateLimit: 50 },
    ...over,
  });

const invocations = () => lambda.invocations.length;

describe("FakeApiGateway", { timeout: 60_000 }, () => {
  it("sends payload format 2.0 events to the route's function and maps its response, cookies one Set-Cookie each", async () => {
    const a = await api({ domainName: "labs.example.test" });
    expect(a.url).toBe("https://labs.example.test");
    const res = await fetch(`${a.endpoint}/echo/path?a=1&a=2`, {
      headers: { cookie: "c1=v1; c2=v2", "user-agent": "apigw-test", "x-forwarded-for": "203.0.113.9" },
    });
    expect(res.status).toBe(201);
    expect(res.headers.getSetCookie()).toEqual(["a=1; Path=/", "b=2; HttpOnly"]);
    expect(res.headers.get("x-custom")).toBe("yes");
    expect(res.headers.get("apigw-requestid")).toMatch(/^[0-9a-f-]{36}$/);
    const event = (await res.json()) as Record<string, unknown> & {
      headers: Record<string, string>;
      requestContext: Record<string, unknown> & { http: Record<string, string> };
    };
    expect(event).toMatchObject({
      version: "2.0",
      routeKey: "$default",
      rawPath: "/echo/path",
      rawQueryString: "a=1&a=2",
      queryStringParameters: { a: "1,2" },
      cookies: ["c1=v1", "c2=v2"],
      isBase64Encoded: false,
      requestContext: {
        apiId: a.apiId,
        domainName: "labs.example.test",
        domainPrefix: "labs",
        routeKey: "$default",
        stage: "$default",
        http: { method: "GET", path: "/echo/path", sourceIp: "127.0.0.1", userAgent: "apigw-test" },
      },
    });
    expect(event.headers.host).toBe("labs.example.test");
    expect(event.headers["x-forwarded-proto"]).toBe("https");
    // API Gateway appends the address it saw: whatever the client claimed comes first.
    expect(event.headers["x-forwarded-for"]).toBe("203.0.113.9,127.0.0.1");
    expect(event.headers.cookie).toBeUndefined();

    const claim = await fetch(`${a.endpoint}/claim`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: "name=Ada",
    });
    expect(((await claim.json()) as { routeKey: string }).routeKey).toBe("POST /claim");
    const get = await fetch(`${a.endpoint}/claim`);
    expect(((await get.json()) as { routeKey: string }).routeKey).toBe("$default");
    // The execute-api domain when there is no custom one.
    expect((await api()).url).toMatch(/^https:\/\/[a-z0-9]{10}\.execute-api\.eu-west-1\.amazonaws\.com$/);
  });

  it("answers 429 past a route's burst, without invoking the function, and lets requests through as tokens return", async () => {
    const a = await api({
      throttle: { burstLimit: 3, rateLimit: 1 },
      routeThrottle: { "POST /claim": { burstLimit: 2, rateLimit: 1 } },
    });
    const before = invocations();
    const claims = await Promise.all(
      Array.from({ length: 5 }, () => fetch(`${a.endpoint}/claim`, { method: "POST", body: "x" })),
    );
    const statuses = claims.map((r) => r.status).sort();
    expect(statuses).toEqual([201, 201, 429, 429, 429]);
    const refused = claims.find((r) => r.status === 429) as Response;
    expect(refused.headers.get("content-type")).toBe("application/json");
    expect(await refused.json()).toEqual({ message: "Too Many Requests" });
    expect(invocations() - before).toBe(2);
    const mine = gateway.requests.filter((r) => r.routeKey === "POST /claim").slice(-5);
    expect(mine.filter((r) => r.status === 429).every((r) => !r.invoked)).toBe(true);

    // Other routes have buckets of their own: the stage's default route settings.
    const pages = await Promise.all(Array.from({ length: 4 }, () => fetch(`${a.endpoint}/board`)));
    expect(pages.map((r) => r.status).sort()).toEqual([201, 201, 201, 429]);

    // A second later, one more token (rate 1 a second).
    clock += 1000;
    const again = await Promise.all(
      Array.from({ length: 2 }, () => fetch(`${a.endpoint}/claim`, { method: "POST", body: "x" })),
    );
    expect(again.map((r) => r.status).sort()).toEqual([201, 429]);
    expect(invocations() - before).toBe(6);
  });

  it("answers 503 when the function outlives the integration timeout, and the function goes on", async () => {
    const a = await api({ integrationTimeoutMs: 300 });
    const started = lambda.invocations.length;
    const res = await fetch(`${a.endpoint}/slow?ms=1500`);
    expect(res.status).toBe(503);
    expect(await res.json()).toEqual({ message: "Service Unavailable" });
    const done = await waitFor(
      "the slow invocation to end",
      async () => lambda.invocations.slice(started).find((r) => r.durationMs >= 1000),
      10_000,
    );
    expect(done.outcome).toBe("ok");
    await expect(api({ integrationTimeoutMs: 30_001 })).rejects.toThrow(/between 50 ms and 30000 ms/);
  });

  it("answers 500 when the function fails, and 413 past 10 MB without invoking it", async () => {
    const a = await api();
    const failed = await fetch(`${a.endpoint}/fail`);
    expect(failed.status).toBe(500);
    expect(await failed.json()).toEqual({ message: "Internal Server Error" });
    const before = invocations();
    const big = await fetch(`${a.endpoint}/claim`, {
      method: "POST",
      headers: { "content-type": "application/octet-stream" },
      body: new Uint8Array(PAYLOAD_LIMIT + 1),
    });
    expect(big.status).toBe(413);
    expect(await big.json()).toEqual({ message: "Request Entity Too Large" });
    expect(invocations()).toBe(before);
  });

  it("refuses route settings for a route the API does not have", async () => {
    await expect(
      api({ routeThrottle: { "POST /recover": { burstLimit: 1, rateLimit: 1 } } }),
    ).rejects.toThrow(/Unable to find Route by key POST \/recover/);
  });
});
