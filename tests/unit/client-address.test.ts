import { Hono } from "hono";
import { afterEach, describe, expect, it } from "vitest";
import { clientAddress } from "../../web/client-address.ts";

/** The address the portal's and the sign-in's rate limits count against, per runtime. */

const app = new Hono().get("/", (c) => c.text(clientAddress(c)));
const spoofed = { "x-forwarded-for": "203.0.113.9" };
const lambda = { requestContext: { http: { sourceIp: "198.51.100.7" } } };
const ask = async (bindings?: object) => (await app.request("/", { headers: spoofed }, bindings)).text();

afterEach(() => {
  delete process.env.LABFLEET_TRUST_PROXY;
});

describe("clientAddress", () => {
  it("on Lambda is API Gateway's sourceIp, even where a proxy is trusted: X-Forwarded-For is the client's to forge there", async () => {
    expect(await ask(lambda)).toBe("198.51.100.7");
    process.env.LABFLEET_TRUST_PROXY = "1";
    expect(await ask(lambda)).toBe("198.51.100.7");
  });

  it("under Node is the socket's peer, or the proxy's last X-Forwarded-For entry when the proxy is trusted", async () => {
    const node = { incoming: { socket: { remoteAddress: "127.0.0.1" } } };
    expect(await ask(node)).toBe("127.0.0.1");
    process.env.LABFLEET_TRUST_PROXY = "1";
    expect(await ask(node)).toBe("203.0.113.9");
    delete process.env.LABFLEET_TRUST_PROXY;
    expect(await ask()).toBe("local");
  });
});
