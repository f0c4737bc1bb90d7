import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { listHosts } from "../../shared/fleet/workshops.ts";
import type { OpenAccessResult } from "../../shared/providers/aws.ts";
import { accessPorts, byoAccessMessage } from "../../shared/providers/aws-security-groups.ts";
import { hostIdsOf, type Provider } from "../../shared/providers/types.ts";
import { configure, type Deps, useDeps } from "../../shared/runtime/deps.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { LocalTransport } from "../../shared/transports/local.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import { fixturesDir, removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * The console's "Open lab access" and "Close lab access" (labfleet open-access [--close]) through
 * app.request(), over the local runtime with an EC2-like provider whose "instances" are folders reached by the
 * local transport, and whose setOpenAccess records each call (as in open-access.test.ts).
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let saved: Deps;
const TOKEN = "console-access-suite-token-0123";
const ORIGIN = "http://localhost";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const logs: string[] = [];

const SG = "sg-0123456789abcdef0";
const BYO = ["sg-0aaaaaaaaaaaaaaaa", "sg-0bbbbbbbbbbbbbbbb"];
const OPENED = `opened TCP 8443 to 0.0.0.0/0 and ::/0 in ${SG}`;
const CLOSED = `closed TCP 8443 from 0.0.0.0/0 and ::/0 in ${SG}`;

/** Every call of the fake setOpenAccess, with the host states the provider saw at that moment. */
const calls: { workshop: string; open: boolean; states: string[] }[] = [];
let openFails: Error | undefined;

async function setOpenAccess(spec: Workshop, open: boolean): Promise<OpenAccessResult> {
  calls.push({ workshop: spec.name, open, states: (await listHosts(spec.name)).map((h) => h.state) });
  if (openFails) throw openFails;
  const ports = accessPorts(spec).world;
  const p = spec.provider;
  if (p.type === "aws" && p.security_group_ids?.length) {
    const groupIds = p.security_group_ids;
    return { mode: "byo", changed: false, groupIds, ports, message: byoAccessMessage(groupIds, ports, open) };
  }
  return { mode: "managed", changed: true, groupIds: [SG], ports, message: open ? OPENED : CLOSED };
}

const fakeAws: Provider & { setOpenAccess: typeof setOpenAccess } = {
  name: "aws",
  transport: "ssm",
  validate: () => [],
  plan: async (spec) =>
    hostIdsOf(spec).map((hostId) => ({ hostId, action: "create" as const, detail: "m7i.large" })),
  provision: async (spec, ids) =>
    (ids ?? hostIdsOf(spec)).map((hostId) => {
      const dir = join(work, "ec2", spec.name, hostId);
      mkdirSync(dir, { recursive: true });
      return { hostId, address: dir, providerId: `i-${spec.name}-${hostId}` };
    }),
  deprovision: async (_spec, ids) => ids.map((hostId) => ({ hostId, result: "destroyed" as const })),
  setOpenAccess,
};

function awsYaml(o: { name: string; count?: number; provider?: string }) {
  return `name: ${o.name}
lab:
  source: ${join(fixturesDir, "labs", "quick")}
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 5
  ui_ports:
    - { name: ide, port: 8443 }
provider:
  type: aws
  region: eu-west-1
  count: ${o.count ?? 2}
  ttl_hours: 4
${o.provider ?? ""}`;
}

/** A browser for app.request(): a cookie jar, the CSRF field of the last page it saw, its own Origin. */
class Browser {
  readonly jar = new Map<string, string>();
  csrf = "";

  private cookieHeader(): Record<string, string> {
    return cookieHeader(this.jar);
  }
  private async take(res: Response) {
    storeCookies(this.jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { status: res.status, text, location: res.headers.get("location") ?? "" };
  }
  async get(path: string) {
    return this.take(await app.request(`${ORIGIN}${path}`, { headers: this.cookieHeader() }));
  }
  async post(
    path: string,
    fields: Record<string, string> = {},
    opts: { headers?: Record<string, string>; csrf?: string | null } = {},
  ) {
    const csrf = opts.csrf === undefined ? this.csrf : opts.csrf;
    const body = new URLSearchParams({ ...(csrf === null ? {} : { _csrf: csrf }), ...fields });
    return this.take(
      await app.request(`${ORIGIN}${path}`, {
        method: "POST",
        headers: {
          ...this.cookieHeader(),
          "content-type": "application/x-www-form-urlencoded",
          origin: ORIGIN,
          "sec-fetch-site": "same-origin",
          ...opts.headers,
        },
        body,
      }),
    );
  }
  async signIn() {
    await this.get("/console/login");
    return this.post("/console/login", { token: TOKEN });
  }
}

const b = new Browser();

/** Saves the workshop and brings it up from the console, as an instructor would. */
async function create(yaml: string, name: string) {
  await b.get("/console/new");
  const saved = await b.post("/console/new", { yaml });
  expect(saved.status, saved.text).toBe(303);
  await b.get(`/console/w/${name}`);
  const up = await b.post(`/console/w/${name}/up`);
  expect(up.location).toBe(`/console/w/${name}?notice=up`);
  await rt.executor.idle();
  const states = (await listHostStates(name)).sort();
  expect(
    states.every((s) => s === "ready"),
    states.join(),
  ).toBe(true);
}
const listHostStates = async (name: string) => (await listHosts(name)).map((h) => h.state);
const setHost = (workshop: string, hostId: string, set: { state: "ready" | "deploying"; phase?: string }) =>
  rt.store.host.patch({ workshop, hostId }).set(set).go();

beforeAll(async () => {
  work = tempDir("labfleet-console-access-");
  rt = await testRuntime({ dataDir: join(work, ".labfleet"), token: TOKEN });
  saved = useDeps();
  configure({
    ...saved,
    providers: { ...saved.providers, aws: fakeAws },
    transport: (h) => (h.transport === "ssm" ? new LocalTransport(h.address) : saved.transport(h)),
  });
  setLogSink((line) => logs.push(line), "info");
  expect((await b.signIn()).status).toBe(303);
});
afterAll(async () => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  if (saved) configure(saved);
  await rt?.close();
  if (work) removeDir(work);
});
beforeEach(() => {
  openFails = undefined;
});

describe("lab access on a workshop's page (aws)", () => {
  it("offers Open lab access (confirmed on the next page) and Close lab access", async () => {
    await create(awsYaml({ name: "acc" }), "acc");
    const p = await b.get("/console/w/acc");
    expect(p.status).toBe(200);
    expect(p.text).toContain('action="/console/w/acc/open-access"');
    expect(p.text).toContain('action="/console/w/acc/close-access"');
    expect(p.text).toContain("Open lab access…</button>");
    expect(p.text).toContain("Close lab access</button>");
    expect(p.text).toContain("Opens the lab UIs (TCP 8443) of every host to the internet");
    expect(p.text).not.toContain('id="access-note"');
    expect(calls).toEqual([]);
  });

  it("refuses to open while a host is not ready, naming it, before and after the confirmation", async () => {
    await setHost("acc", "student-02", { state: "deploying", phase: "build" });
    await b.get("/console/w/acc");
    const ask = await b.post("/console/w/acc/open-access");
    expect(ask.status).toBe(409);
    expect(ask.text).toContain("<h1>Lab access was not opened</h1>");
    expect(ask.text).toContain(
      "not opening the lab UIs of acc: 1 of 2 hosts are not ready (their health check has not passed): student-02 (deploying, phase build)",
    );
    expect(ask.text).toContain("<code>student-02</code>: expected ready, got deploying (phase build)");
    expect(ask.text).toContain("once every lab is ready");
    expect(ask.text).toContain('href="/console/w/acc"');
    expect(ask.text).not.toContain('name="confirm" value="yes"'); // no confirmation for a refusal
    // A confirmed form sent anyway (the page was open while a lab broke) is refused the same way.
    const confirmed = await b.post("/console/w/acc/open-access", { confirm: "yes" });
    expect(confirmed.status).toBe(409);
    expect(confirmed.text).toContain("student-02 (deploying, phase build)");
    expect(calls).toEqual([]);
  });

  it("asks for a confirmation, then opens once every host is ready, showing the provider's message", async () => {
    await setHost("acc", "student-02", { state: "ready" });
    await b.get("/console/w/acc");
    const ask = await b.post("/console/w/acc/open-access");
    expect(ask.status).toBe(200);
    expect(ask.text).toContain("<h1>Open the lab UIs of acc to the internet?</h1>");
    expect(ask.text).toContain("All 2 hosts are ready.");
    expect(ask.text).toContain("(TCP 8443) become reachable from anywhere on the internet");
    expect(ask.text).toContain("Port 22 is never opened.");
    expect(ask.text).toContain('action="/console/w/acc/open-access"');
    expect(ask.text).toContain('name="confirm" value="yes"');
    expect(ask.text).toContain('<a href="/console/w/acc">Cancel</a>');
    expect(calls).toEqual([]); // not yet

    const r = await b.post("/console/w/acc/open-access", { confirm: "yes" });
    expect(r.status).toBe(200);
    expect(r.text).toContain("<h1>acc: lab access opened</h1>");
    expect(r.text).toMatch(new RegExp(`<p class="notice" role="status" id="access-message">${OPENED}</p>`));
    expect(r.text).toContain(`Security groups: ${SG}`);
    expect(r.text).toContain('href="/console/w/acc"');
    expect(calls).toEqual([{ workshop: "acc", open: true, states: ["ready", "ready"] }]);
    expect(logs.some((l) => l.includes('"msg":"student access opened"') && l.includes('"acc"'))).toBe(true);
  });

  it("closes without a confirmation, whatever the hosts' states", async () => {
    calls.length = 0;
    await setHost("acc", "student-01", { state: "deploying", phase: "setup" });
    await b.get("/console/w/acc");
    const r = await b.post("/console/w/acc/close-access");
    expect(r.status).toBe(200);
    expect(r.text).toContain("<h1>acc: lab access closed</h1>");
    expect(r.text).toContain(`id="access-message">${CLOSED}</p>`);
    expect(calls).toEqual([{ workshop: "acc", open: false, states: ["deploying", "ready"] }]);
    await setHost("acc", "student-01", { state: "ready" });
  });

  it("shows a provider failure as an error page (502), not an internal error", async () => {
    calls.length = 0;
    openFails = new Error("AuthorizeSecurityGroupIngress: UnauthorizedOperation");
    await b.get("/console/w/acc");
    const r = await b.post("/console/w/acc/open-access", { confirm: "yes" });
    expect(r.status).toBe(502);
    expect(r.text).toContain("<h1>Lab access was not opened</h1>");
    expect(r.text).toContain(
      "The provider could not change the security group: AuthorizeSecurityGroupIngress: UnauthorizedOperation",
    );
    expect(r.text).not.toContain("Something went wrong");
    const close = await b.post("/console/w/acc/close-access");
    expect(close.status).toBe(502);
    expect(close.text).toContain("<h1>Lab access was not closed</h1>");
    expect(calls).toHaveLength(2);
  });

  it("refuses an open or a close without the session's CSRF secret or from another site; nothing is called", async () => {
    calls.length = 0;
    await b.get("/console/w/acc");
    const attempts = [
      await b.post("/console/w/acc/open-access", { confirm: "yes" }, { csrf: null }),
      await b.post("/console/w/acc/open-access", { confirm: "yes" }, { csrf: "x".repeat(43) }),
      await b.post(
        "/console/w/acc/open-access",
        { confirm: "yes" },
        { headers: { origin: "https://evil.example" } },
      ),
      await b.post("/console/w/acc/open-access", {}, { headers: { "sec-fetch-site": "cross-site" } }),
      await b.post("/console/w/acc/close-access", {}, { csrf: null }),
      await b.post("/console/w/acc/close-access", {}, { headers: { origin: "https://evil.example" } }),
    ];
    for (const r of attempts) {
      expect(r.status).toBe(403);
      expect(r.text).toContain("This form could not be accepted");
    }
    expect(calls).toEqual([]);
  });

  it("without a session, sends the form to the sign-in page and calls nothing", async () => {
    const stranger = new Browser();
    for (const path of ["/console/w/acc/open-access", "/console/w/acc/close-access"]) {
      const r = await stranger.post(path, { confirm: "yes" }, { csrf: "x".repeat(43) });
      expect(r.status, path).toBe(303);
      expect(r.location).toBe("/console/login");
    }
    expect(calls).toEqual([]);
  });

  it("answers an unknown workshop with a 404 page", async () => {
    await b.get("/console/w/acc");
    const r = await b.post("/console/w/nope/open-access", { confirm: "yes" });
    expect(r.status).toBe(404);
    expect(r.text).toContain("no workshop named nope");
  });
});

describe("bring-your-own security groups", () => {
  it("confirms, changes nothing and says what to open by hand; closing says what to remove", async () => {
    calls.length = 0;
    await create(
      awsYaml({ name: "acc-byo", count: 1, provider: `  security_group_ids: [${BYO.join(", ")}]\n` }),
      "acc-byo",
    );
    const p = await b.get("/console/w/acc-byo");
    expect(p.text).toContain("This workshop uses its own security groups: labfleet changes none");
    const ask = await b.post("/console/w/acc-byo/open-access");
    expect(ask.status).toBe(200);
    expect(ask.text).toContain("The host is ready. This workshop uses its own security groups");
    expect(ask.text).toContain('name="confirm" value="yes"');
    const r = await b.post("/console/w/acc-byo/open-access", { confirm: "yes" });
    expect(r.status).toBe(200);
    expect(r.text).toContain("<h1>acc-byo: open the lab UIs by hand</h1>");
    expect(r.text).toContain(`id="access-message">${byoAccessMessage(BYO, [8443], true)}</p>`);
    expect(r.text).toContain(`allow inbound TCP 8443 from 0.0.0.0/0 and ::/0 in ${BYO.join(", ")}`);
    expect(r.text).toContain("labfleet changed nothing");
    const close = await b.post("/console/w/acc-byo/close-access");
    expect(close.status).toBe(200);
    expect(close.text).toContain("<h1>acc-byo: close the lab UIs by hand</h1>");
    expect(close.text).toContain("to close the lab UIs, remove the inbound rules for TCP 8443");
    expect(calls.map((c) => c.open)).toEqual([true, false]);
  });
});

describe("local and static labs", () => {
  it("show a note instead of the actions, and a sent form is refused with the reason (400)", async () => {
    calls.length = 0;
    await create(workshopYaml({ name: "acc-local", count: 1 }), "acc-local");
    const p = await b.get("/console/w/acc-local");
    expect(p.status).toBe(200);
    expect(p.text).toContain('id="access-note"');
    expect(p.text).toContain(
      "Nothing to open: local and static (bring-your-own-host) labs have no firewall that labfleet manages",
    );
    expect(p.text).not.toContain("/console/w/acc-local/open-access");
    expect(p.text).not.toContain("/console/w/acc-local/close-access");
    for (const [path, verb] of [
      ["open-access", "open"],
      ["close-access", "close"],
    ] as const) {
      const r = await b.post(`/console/w/acc-local/${path}`);
      expect(r.status, path).toBe(400);
      expect(r.text).toContain(`<h1>Lab access was not ${verb === "open" ? "opened" : "closed"}</h1>`);
      expect(r.text).toContain(`nothing to ${verb}: workshop acc-local uses the local provider`);
      expect(r.text).not.toContain('name="confirm" value="yes"');
    }
    expect(calls).toEqual([]);
  });
});
