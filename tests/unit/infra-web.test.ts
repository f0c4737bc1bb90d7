import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { FUNCTIONS, type FunctionName, specOf } from "../../infra/permissions.ts";
import {
  ACCESS_LOG_FORMAT,
  DEFAULT_ACCOUNT_CONCURRENCY,
  DOMAIN_ENV,
  domainsFrom,
  HTTP_API_QUOTAS,
  HTTP_APIS,
  routeKeysOf,
  stageSettings,
  throttleOf,
  type WebApiName,
} from "../../infra/web.ts";
import { HTTP_API_INTEGRATION_TIMEOUT_MS } from "../../shared/cloud/env.ts";
import { requestTimeMs, requestWorkMs } from "../../web/limits.ts";
import { durationMs } from "../harness/aws/lambda.ts";

/**
 * The web's edge in AWS as plain data (infra/web.ts): an HTTP API in front of each web function, throttled so that a
 * flood stays within a share of the account's Lambda concurrency, on a custom domain when the stage sets one.
 */

const root = join(import.meta.dirname, "..", "..");
const read = (path: string) => readFileSync(join(root, path), "utf8");
const apis = Object.keys(HTTP_APIS) as WebApiName[];

describe("the web functions are reached through API Gateway HTTP APIs only", () => {
  it("puts an HTTP API in front of each web function and gives no function a Function URL", () => {
    const web = (Object.keys(FUNCTIONS) as FunctionName[]).filter((n) => specOf(n).web);
    expect(web.sort()).toEqual(["Api", "Portal"]);
    expect(apis.map((a) => HTTP_APIS[a].function).sort()).toEqual(["Api", "Portal"]);
    const config = read("sst.config.ts");
    expect(config).toContain("new sst.aws.ApiGatewayV2(");
    expect(config).toContain("gateway.route(key, target.arn)");
    expect(config).toContain("cors: false");
    expect(config).not.toContain("url: true");
    expect(config).not.toMatch(/\b(api|portal|fn\([^)]*\))\.url\b/);
    expect(config).toContain("return { api: apiHttp.url, portal: portalHttp.url, table: table.name }");
    expect(config).toContain("[CLOUD_ENV.portalUrl]: portalHttp.url");
  });

  it("ends each web request within the 30 s integration timeout", () => {
    expect(HTTP_API_QUOTAS.integrationTimeoutMs).toBe(30_000);
    for (const api of apis)
      expect(durationMs(specOf(HTTP_APIS[api].function).timeout), api).toBeLessThanOrEqual(
        HTTP_API_INTEGRATION_TIMEOUT_MS,
      );
    // The Lambda entry plans its work within the shorter of its remaining time and the integration timeout.
    expect(requestTimeMs(300_000)).toBe(30_000);
    expect(requestTimeMs(12_000)).toBe(12_000);
    // Its work takes all of that but a 5 s headroom, and never less than half.
    expect(requestWorkMs(300_000)).toBe(25_000);
    expect(requestWorkMs(8_000)).toBe(4_000);
  });
});

describe("throttling", () => {
  it("sets the stage's default route throttle on every API", () => {
    for (const api of apis) {
      const s = stageSettings(api);
      expect(s.defaultRouteSettings.throttlingBurstLimit, api).toBeGreaterThan(0);
      expect(s.defaultRouteSettings.throttlingRateLimit, api).toBeGreaterThan(0);
      expect(s.routeSettings.map((r) => r.routeKey)).toEqual(routeKeysOf(api).slice(1));
    }
  });

  it("throttles the portal's claim and recover POSTs more strictly than its pages, on routes the portal has", () => {
    const portal = read("web/portal/index.tsx");
    expect(routeKeysOf("Portal")).toEqual(["$default", "POST /claim", "POST /recover"]);
    for (const key of ["POST /claim", "POST /recover"]) {
      expect(portal).toContain(`.post("${key.slice(5)}"`);
      const t = throttleOf("Portal", key);
      expect(t.rateLimit, key).toBeLessThan(HTTP_APIS.Portal.throttle.rateLimit);
      expect(t.burstLimit, key).toBeLessThan(HTTP_APIS.Portal.throttle.burstLimit);
    }
    expect(throttleOf("Portal", "GET /board")).toEqual(HTTP_APIS.Portal.throttle);
  });

  it("keeps a flood within each API's concurrency budget, and the budgets a tenth of the account's", () => {
    let budgets = 0;
    for (const api of apis) {
      const spec = HTTP_APIS[api];
      const keys = routeKeysOf(api);
      const bursts = keys.reduce((n, k) => n + throttleOf(api, k).burstLimit, 0);
      const steady = keys.reduce((n, k) => {
        const seconds = spec.floodSeconds[k];
        expect(seconds, `${api} ${k}`).toBeGreaterThan(0);
        return n + throttleOf(api, k).rateLimit * (seconds as number);
      }, 0);
      expect(bursts, api).toBeLessThanOrEqual(spec.concurrencyBudget);
      expect(steady, api).toBeLessThanOrEqual(spec.concurrencyBudget);
      for (const k of keys) {
        expect(throttleOf(api, k).rateLimit).toBeLessThanOrEqual(HTTP_API_QUOTAS.accountRateLimit);
        expect(throttleOf(api, k).burstLimit).toBeLessThanOrEqual(HTTP_API_QUOTAS.accountBurstLimit);
      }
      budgets += spec.concurrencyBudget;
    }
    expect(budgets).toBeLessThanOrEqual(DEFAULT_ACCOUNT_CONCURRENCY / 10);
  });

  it("still lets a room of 300 claim within half a minute", () => {
    expect(throttleOf("Portal", "POST /claim").rateLimit * 30).toBeGreaterThanOrEqual(300);
  });
});

describe("the access log", () => {
  it("logs the route key, never the path or query (personal and admin links are paths)", () => {
    const fields = JSON.parse(ACCESS_LOG_FORMAT) as Record<string, string>;
    expect(Object.values(fields)).toContain("$context.routeKey");
    for (const v of Object.values(fields)) expect(v).not.toMatch(/path|querystring|rawQuery/i);
    expect(read("sst.config.ts")).toContain("format: web.ACCESS_LOG_FORMAT");
  });
});

describe("custom domains", () => {
  it("are optional: without them each API keeps its execute-api URL", () => {
    expect(domainsFrom({})).toEqual({});
    expect(domainsFrom({ [DOMAIN_ENV.Portal.name]: "  " })).toEqual({});
  });

  it("take a name (Route 53 makes the certificate and record) or a name and an ACM certificate", () => {
    const cert = "arn:aws:acm:eu-west-1:123456789012:certificate/0f1e2d3c-4b5a-6978-8695-a4b3c2d1e0f9";
    expect(
      domainsFrom({
        LABFLEET_PORTAL_DOMAIN: "Labs.Example.com.",
        LABFLEET_API_DOMAIN: "labfleet.example.com",
        LABFLEET_API_CERT_ARN: cert,
      }),
    ).toEqual({ Portal: { name: "labs.example.com" }, Api: { name: "labfleet.example.com", cert } });
    const config = read("sst.config.ts");
    expect(config).toContain("web.domainsFrom(process.env)");
    expect(config).toContain("{ name: domain.name, dns: false as const, cert: domain.cert }");
  });

  it("refuse what is not a host name or a certificate ARN, naming the variable", () => {
    expect(() => domainsFrom({ LABFLEET_PORTAL_DOMAIN: "https://labs.example.com/" })).toThrow(
      /LABFLEET_PORTAL_DOMAIN must be a host name such as labs\.example\.com/,
    );
    expect(() =>
      domainsFrom({ LABFLEET_PORTAL_DOMAIN: "labs.example.com", LABFLEET_PORTAL_CERT_ARN: "my-cert" }),
    ).toThrow(/LABFLEET_PORTAL_CERT_ARN must be an ACM certificate ARN/);
    expect(() => domainsFrom({ LABFLEET_API_CERT_ARN: "arn:aws:acm:x" })).toThrow(
      /LABFLEET_API_CERT_ARN is set but LABFLEET_API_DOMAIN is not/,
    );
    expect(() =>
      domainsFrom({ LABFLEET_PORTAL_DOMAIN: "labs.example.com", LABFLEET_API_DOMAIN: "labs.example.com" }),
    ).toThrow(/must differ/);
  });
});
