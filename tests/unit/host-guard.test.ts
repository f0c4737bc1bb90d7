import { describe, expect, it } from "vitest";
import { hostnameOf, servedNames } from "../../web/host-guard.ts";
import { createPortalApp } from "../../web/portal-app.ts";

/** The Host rule on Lambda: a Function URL's domain is the name AWS routes to the function. */
describe("the Host rule", () => {
  const app = createPortalApp();
  const FN = "abcdefghij0123456789klmnopqrstuv.lambda-url.eu-west-1.on.aws";
  const lambda = (host: string, domainName = FN) =>
    app.request("/portal.css", { headers: { host } }, { requestContext: { domainName } }); // touches no store

  it("on Lambda, answers for the domain the request came in on", async () => {
    expect((await lambda(FN)).status).toBe(200);
    expect((await lambda(`${FN}:443`)).status).toBe(200);
  });

  it("refuses a Host that is not the Function URL's domain, nor a served name", async () => {
    const r = await lambda("rebind.attacker.example");
    expect(r.status).toBe(421);
    expect(await r.text()).toMatch(/^421 Misdirected Request: this labfleet runtime answers only for/);
    expect((await lambda(`${FN}.attacker.example`)).status).toBe(421);
  });

  it("reads the served names from LABFLEET_PUBLIC_URL, and refuses one that is not a URL", () => {
    expect(servedNames({})).toEqual(["127.0.0.1", "localhost", "[::1]"]);
    expect(servedNames({ LABFLEET_PUBLIC_URL: "https://Labs.Example.org:8443/" })).toContain(
      "labs.example.org",
    );
    expect(() => servedNames({ LABFLEET_PUBLIC_URL: "labs.example.org" })).toThrow(
      "LABFLEET_PUBLIC_URL is not a URL",
    );
  });

  it("takes the name out of a Host header, and nothing that is not one", () => {
    expect(hostnameOf("127.0.0.1:8787")).toBe("127.0.0.1");
    expect(hostnameOf("[::1]:8787")).toBe("[::1]");
    expect(hostnameOf("Labs.Example.org")).toBe("labs.example.org");
    for (const bad of ["", "a b", "evil.example@127.0.0.1", "127.0.0.1:8787:1", "[::1"])
      expect(hostnameOf(bad)).toBeUndefined();
  });
});
