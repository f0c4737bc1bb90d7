import { randomBytes } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHECK_IN_SECONDS, MISSED_CHECK_INS } from "../../shared/agent/check-in.ts";
import { controlHost } from "../../shared/agent/host-controls.ts";
import { validHostSecrets } from "../../shared/agent/host-secrets.ts";
import { signedHeaders } from "../../shared/agent/signing.ts";
import { listEvents } from "../../shared/fleet/events.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import { listClaims, openPortal } from "../../shared/portal/portal.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { type AgentProcess, agentProcess } from "../harness/agents.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import { fixturesDir, movableClock, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";

/**
 * Bring your own device on the local runtime, with real agents: students claim from the portal and get a join page
 * instead of a lab; the line on it, run in a temporary HOME, fetches the agent, joins with the student's own token
 * and calls in. The machine becomes the student's claimed lab: it waits for `up` when it joins before it, is
 * deployed by itself when it joins after; its lab page shows it waiting, then ready, and says when its machine
 * stopped calling in and when it is back. `hosts remove` releases the claim; a rotation rewrites push.env so pushes
 * keep working; a teardown drops every secret, so nothing signed with one is accepted, and each agent forgets.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const clock = movableClock();
const WS = "byo";
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);
let code = "";

const yaml = `name: ${WS}
lab:
  source: ${join(fixturesDir, "labs", "quick")}
  setup: bash setup.sh
  health: test -f built
  concurrency: 4
  timeout_minutes: 5
  requires:
    commands: [tar, curl]
provider:
  type: enrolled
  expected: 3
portal:
  enabled: true
  enrollment: claim
`;

const htmlText = (s: string) =>
  s
    .replace(/&#39;/g, "'")
    .replace(/&quot;/g, '"')
    .replace(/&lt;/g, "<")
    .replace(/&gt;/g, ">")
    .replace(/&amp;/g, "&");

/** A student's browser over HTTP: cookies, the last form's CSRF field, redirects not followed. */
class Browser {
  readonly jar = new Map<string, string>();
  csrf = "";
  private async take(res: Response) {
    storeCookies(this.jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { status: res.status, text, location: res.headers.get("location") ?? "" };
  }
  async get(path: string) {
    return this.take(
      await fetch(`${rt.url}${path}`, { headers: cookieHeader(this.jar), redirect: "manual" }),
    );
  }
  async post(path: string, fields: Record<string, string>) {
    return this.take(
      await fetch(`${rt.url}${path}`, {
        method: "POST",
        redirect: "manual",
        headers: { ...cookieHeader(this.jar), "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ _csrf: this.csrf, ...fields }),
      }),
    );
  }
  /** Code, board, claim: the student's personal link (a join page until their machine joins). */
  async claim(student: { name: string; email: string; pin: string }) {
    await this.get("/");
    expect((await this.post("/code", { code })).status).toBe(303);
    const board = await this.get("/board");
    expect(board.text).toContain("Get my join line");
    const r = await this.post("/claim", student);
    expect(r.status, r.text).toBe(303);
    const token = /^\/l\/([\w-]+)$/.exec(r.location)?.[1] ?? "";
    expect(token).not.toBe("");
    return token;
  }
}

const machines: AgentProcess[] = [];

/** Runs the join page's line in bash, as a student would paste it on their laptop (a fresh HOME). */
function runJoinLine(command: string, name: string): AgentProcess {
  const m = agentProcess(tempDir("labfleet-byod-home-"), ["-c", command], {
    LABFLEET_POLL_WAIT: "2",
    LABFLEET_NAME: name,
  });
  machines.push(m);
  return m;
}

/** The agent's `run` again, from the copy `join` kept, as after a reboot. */
const restartAgent = (m: AgentProcess) =>
  m.relaunch([join(m.home, ".labfleet-agent", "agent.sh"), "run", WS]);

const joinLineOf = (page: string) => {
  const m = /<code id="join-command"[^>]*>([^<]+)<\/code>/.exec(page);
  expect(m?.[1], page).toBeTruthy();
  return htmlText(m?.[1] ?? "");
};

const host = (hostId: string) => rt.store.host.get({ workshop: WS, hostId }).go({ consistent: true });
const events = async (type: string) =>
  (await asInstructor(() => listEvents(WS))).events.filter((e) => e.type === type);

const ada = { name: "Ada Lovelace", email: "ada@example.test", pin: "503917" };
const bob = { name: "Bob Byte", email: "bob@example.test", pin: "640271" };
const cy = { name: "Cy Cable", email: "cy@example.test", pin: "718204" };
const adaBrowser = new Browser();
const bobBrowser = new Browser();
let adaLink = "";
let adaHost = "";
let bobLink = "";
let bobHost = "";
let adaMachine: AgentProcess;
let bobMachine: AgentProcess;

beforeAll(async () => {
  rt = await testRuntime({ clock });
  await asInstructor(() => submitWorkshop(yaml));
  code = (await asInstructor(() => openPortal(WS))).code;
});
afterAll(async () => {
  for (const m of machines) {
    await m.stop();
    removeDir(m.home);
  }
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("a BYOD workshop (portal.enrollment: claim)", () => {
  it("gives a student a join page; the machine that joins with its line is their claimed lab, waiting for up", async () => {
    adaLink = await adaBrowser.claim(ada);
    const page = await adaBrowser.get(`/l/${adaLink}`);
    expect(page.status).toBe(200);
    expect(page.text).toContain("Use your own machine as your lab");
    const line = joinLineOf(page.text);
    expect(line).toMatch(
      /^curl -fsSL http:\/\/127\.0\.0\.1:\d+\/agent\/v1\/agent\.sh \| LABFLEET_JOIN_TOKEN=lfj_byo_/,
    );
    // The same link shows the same line again (a reload), and the board offers to continue to it.
    expect(joinLineOf((await adaBrowser.get(`/l/${adaLink}`)).text)).toBe(line);
    expect((await adaBrowser.get("/board")).text).toContain("Continue to your join page");
    // The token is bound to Ada: one use, made by the portal, her name on it.
    const created = await events("join_token.created");
    expect(created.map((e) => e.detail)).toEqual([expect.objectContaining({ uses: 1, student: ada.name })]);

    adaMachine = runJoinLine(line, "ada-laptop");
    await waitFor("Ada's machine to join", async () => (await host("ada-laptop")).data !== null, 30_000);
    adaHost = "ada-laptop";
    await waitFor("Ada's agent to call in", () => adaMachine.output().includes("calling in to"), 30_000);
    expect(adaMachine.output()).toContain(`joined ${WS} as ${adaHost} (approved)`);
    // Her claim, with her link: the link now opens the lab, which waits for the workshop's up.
    const claims = await asInstructor(() => listClaims(WS));
    expect(claims).toEqual([expect.objectContaining({ lab: adaHost, name: ada.name, email: ada.email })]);
    const lab = await adaBrowser.get(`/l/${adaLink}`);
    expect(lab.text).toContain(`Your lab: ${adaHost}`);
    expect(lab.text).toContain('id="lab-build"');
    expect(lab.text).toContain("once the workshop starts");
    expect((await host(adaHost)).data).toMatchObject({ state: "pending", enrollment: "approved" });
    expect((await events("lab.claimed")).map((e) => [e.hostId, e.detail])).toEqual([
      [adaHost, expect.objectContaining({ how: "byod", student: ada.name })],
    ]);
    // One email, one lab: claiming again is refused.
    const again = new Browser();
    await again.get("/");
    await again.post("/code", { code });
    await again.get("/board");
    const refused = await again.post("/claim", ada);
    expect(refused.status).toBe(409);
    expect(refused.text).toContain("This email already has a lab");
  });

  it("checks lab.requires at join with the student's token, which a refused machine leaves unused", async () => {
    const cyBrowser = new Browser();
    const link = await cyBrowser.claim(cy);
    const line = joinLineOf((await cyBrowser.get(`/l/${link}`)).text);
    const token = /LABFLEET_JOIN_TOKEN=(\S+)/.exec(line)?.[1] ?? "";
    const res = await fetch(`${rt.url}/agent/v1/enroll`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token, name: "cy-old-pc", facts: { commands: ["tar"] } }),
    });
    const body = (await res.json()) as { error: { code: string; details: { path: string }[] } };
    expect([res.status, body.error.code]).toEqual([422, "join.requirements"]);
    expect(body.error.details.map((d) => d.path)).toEqual(["facts.commands"]);
    expect((await host("cy-old-pc")).data).toBeNull();
    // Still Cy's join page: the token was not used.
    expect((await cyBrowser.get(`/l/${link}`)).text).toContain('id="join-command"');
  });

  it("deploys the waiting machine at up, and one that joins after up by itself; the lab pages show them ready", async () => {
    const up = await asInstructor(() => startRun(WS, "up"));
    await rt.executor.idle();
    const status = await asInstructor(() => workshopStatus(WS));
    expect(status.runs.find((r) => r.id === up.runId)?.state).toBe("succeeded");
    expect((await host(adaHost)).data?.state).toBe("ready");
    const adaPage = await adaBrowser.get(`/l/${adaLink}`);
    expect(adaPage.text).not.toContain('id="lab-build"');
    expect(adaPage.text).toContain(`s3cret-${adaHost}`);

    // Bob comes late: his machine is deployed without anyone running up again.
    bobLink = await bobBrowser.claim(bob);
    bobMachine = runJoinLine(joinLineOf((await bobBrowser.get(`/l/${bobLink}`)).text), "bob-laptop");
    bobHost = "bob-laptop";
    await waitFor("Bob's machine to join", async () => (await host(bobHost)).data !== null, 30_000);
    await waitFor("Bob's lab to be ready", async () => (await host(bobHost)).data?.state === "ready", 60_000);
    await rt.executor.idle();
    const runs = (await asInstructor(() => workshopStatus(WS))).runs;
    expect(runs.filter((r) => r.kind === "deploy").map((r) => r.state)).toEqual(["succeeded"]);
    const bobPage = await bobBrowser.get(`/l/${bobLink}`);
    expect(bobPage.text).toContain(`Your lab: ${bobHost}`);
    expect(bobPage.text).toContain(`s3cret-${bobHost}`);
    // The instructor sees both as claimed labs.
    expect((await asInstructor(() => listClaims(WS))).map((c) => [c.lab, c.name])).toEqual([
      [adaHost, ada.name],
      [bobHost, bob.name],
    ]);
  });

  it("tells the student when their machine stopped calling in, and when it is back", async () => {
    await adaMachine.stop();
    clock.advance(MISSED_CHECK_INS * CHECK_IN_SECONDS * 1000 + 2000);
    await rt.tick();
    expect((await host(adaHost)).data?.reachable).toBe("unreachable");
    const silent = await adaBrowser.get(`/l/${adaLink}`);
    expect(silent.text).toContain('id="lab-reachable"');
    expect(silent.text).toContain("machine stopped calling in");
    // (Bob's machine may miss the jump of the clock too, and come back at its next poll.)
    expect(
      (await events("host.unreachable")).filter((e) => e.hostId === adaHost).map((e) => e.detail),
    ).toEqual([expect.objectContaining({ student: ada.name })]);
    await restartAgent(adaMachine);
    await waitFor(
      "Ada's machine to call in again",
      async () => (await host(adaHost)).data?.reachable === "online",
      30_000,
    );
    const back = await adaBrowser.get(`/l/${adaLink}`);
    expect(back.text).not.toContain('id="lab-reachable"');
    expect((await events("host.reachable")).filter((e) => e.hostId === adaHost).map((e) => e.detail)).toEqual(
      [expect.objectContaining({ student: ada.name })],
    );
  });

  it("rewrites push.env when a host's secret rotates, so its pushes are accepted with the new one", async () => {
    const pushEnv = join(bobMachine.home, ".labfleet", WS, "push.env");
    expect(existsSync(pushEnv)).toBe(true);
    const before = (await validHostSecrets(WS, bobHost))[0] ?? "";
    expect(readFileSync(pushEnv, "utf8")).toContain(`LABFLEET_HOST_SECRET='${before}'`);
    await asInstructor(() => controlHost(WS, bobHost, "rotate-secret"));
    await waitFor(
      "Bob's agent to rewrite push.env",
      () => bobMachine.output().includes("push settings have the new secret"),
      30_000,
    );
    const after = (await validHostSecrets(WS, bobHost))[0] ?? "";
    expect(after).not.toBe(before);
    const written = readFileSync(pushEnv, "utf8");
    expect(written).toContain(`LABFLEET_HOST_SECRET='${after}'`);
    expect(written).not.toContain(before);
    // A push signed as the wrapper signs it (with push.env's secret) once the old secret's grace is over (its
    // end moved to now: the agents sign with the real clock, so the runtime's cannot jump ten minutes).
    await rt.store.hostSecret
      .patch({ workshop: WS, hostId: bobHost })
      .set({ previousUntil: new Date(clock.now().getTime() - 1000).toISOString() })
      .go();
    const status = await push(bobHost, /LABFLEET_HOST_SECRET='([0-9a-f]+)'/.exec(written)?.[1] ?? "");
    expect(status).toBe(200);
    expect(await push(bobHost, before)).toBe(401);
  });

  it("releases the student's claim when the instructor removes their machine, and records it", async () => {
    await asInstructor(() => controlHost(WS, adaHost, "remove"));
    expect((await asInstructor(() => listClaims(WS))).map((c) => c.lab)).toEqual([bobHost]);
    expect((await adaBrowser.get(`/l/${adaLink}`)).status).toBe(404);
    expect((await events("lab.released")).map((e) => [e.hostId, e.detail])).toEqual([
      [adaHost, expect.objectContaining({ how: "removed", student: ada.name })],
    ]);
    expect((await events("host.removed")).map((e) => e.detail)).toEqual([
      expect.objectContaining({ student: ada.name, released: true }),
    ]);
    await waitFor("Ada's agent to forget the workshop", () => adaMachine.child.exitCode === 0, 30_000).catch(
      (e) => {
        throw new Error(`${e}: ${adaMachine.output().slice(-1500)} exit=${adaMachine.child.exitCode}`);
      },
    );
    // She may claim again: a new join page.
    const again = await adaBrowser.claim(ada);
    const joinPage = (await adaBrowser.get(`/l/${again}`)).text;
    expect(joinPage).toContain('id="join-command"');
    // She loses that page before her machine joined: there is no lab to get back yet, and the recover page says
    // what to do instead, which works: claiming again with the same email gives her a new line to run.
    const elsewhere = new Browser();
    await elsewhere.get("/");
    await elsewhere.post("/code", { code });
    const recover = await elsewhere.get("/recover");
    expect(recover.text).toContain('id="recover-byod"');
    const notYet = await elsewhere.post("/recover", { email: ada.email, pin: ada.pin });
    expect(notYet.status).toBe(400);
    expect(notYet.text).toContain("That email and PIN do not match a lab.");
    expect(notYet.text).toContain("Your machine has not joined yet?");
    const fresh = await elsewhere.claim(ada);
    expect(fresh).not.toBe(again);
    expect(joinLineOf((await elsewhere.get(`/l/${fresh}`)).text)).not.toBe(joinLineOf(joinPage));
  });

  it("drops every host's secret at teardown: nothing signed with one is accepted, and each agent forgets", async () => {
    const secret = (await validHostSecrets(WS, bobHost))[0] ?? "";
    expect(await push(bobHost, secret)).toBe(200);
    await asInstructor(() => startRun(WS, "teardown"));
    await rt.executor.idle();
    expect(await validHostSecrets(WS, bobHost)).toEqual([]);
    expect(await push(bobHost, secret)).toBe(401);
    await waitFor("Bob's agent to forget the workshop", () => bobMachine.child.exitCode === 0, 30_000);
    expect(bobMachine.output()).toContain(`${WS} was torn down: forgot it`);
    expect(existsSync(join(bobMachine.home, ".labfleet-agent", `${WS}.env`))).toBe(false);
  });
});

/** A progress push for the host signed with `secret`: its HTTP status. */
async function push(hostId: string, secret: string): Promise<number> {
  const verdict = "pid=1 alive=0 rc=0 rc_age=1 started=1 run=";
  const probe = Buffer.from(
    `${verdict}\n@@status\n{"phase":"verify","state":"done"}\n\n@@log\n\n@@end ${verdict}\n`,
  ).toString("base64");
  const body = JSON.stringify({ event: "health", probe, health: { exitCode: 0 } });
  const path = "/agent/v1/progress";
  const parts = {
    method: "POST",
    path,
    body,
    timestamp: Math.floor(clock.now().getTime() / 1000),
    nonce: randomBytes(16).toString("hex"),
  };
  const res = await fetch(`${rt.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...signedHeaders(WS, hostId, secret, parts) },
    body,
  });
  await res.text();
  return res.status;
}
