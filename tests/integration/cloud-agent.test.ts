import type { ChildProcess } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, inject, it } from "vitest";
import { localClient } from "../../cli/local/dynamodb.ts";
import { signedHeaders } from "../../shared/agent/signing.ts";
import { createStore } from "../../shared/store/entities.ts";
import { agentProcess, fetchAgentScript } from "../harness/agents.ts";
import { cloudForTests } from "../harness/aws/cloud.ts";
import { portalStudent } from "../harness/aws/student.ts";
import { processesUnder, removeDir, tempDir, waitFor } from "../harness/runtime.ts";

/**
 * Enrolled hosts in the cloud path, on the AWS double with the Lambda bundles: real agents (the script the API
 * serves, run by bash in temporary HOMEs) join with a join token and long-poll the instructor API's function
 * through its API Gateway HTTP API; the workflow's functions reach them through the command queue in the table;
 * their lab wrappers push progress to the same API. A whole `up` (join, approve, deploy, poll, ready, claim),
 * refused replays and tampered calls at API Gateway, a lab claimable within 2 s of its health passing with the
 * first poll 15 s away, and doctor and an exec through the API that end inside API Gateway's 30 s.
 */

// Each Wait state of the up workflow lasts 15 s: the first poll comes about 15 s after the deploy.
const cloud = cloudForTests({ labs: ["pushed"], timing: { waitMs: 15_000, retryMs: 100 } });
const W = "byod-cloud";

interface JoinedAgent {
  home: string;
  child: ChildProcess;
  output(): string;
  hostId(): string | undefined;
  secret(): string | undefined;
  stop(): Promise<void>;
}
const agents: JoinedAgent[] = [];
let scriptDir: string | undefined;

afterAll(async () => {
  for (const a of agents) {
    await a.stop();
    removeDir(a.home);
  }
  if (scriptDir) removeDir(scriptDir);
});

/** The join line's work, as a machine runs it: `LABFLEET_JOIN_TOKEN=... bash agent.sh join <api>` (then it polls). */
function joinAs(script: string, token: string, name: string): JoinedAgent {
  const home = tempDir("labfleet-cloud-agent-");
  const proc = agentProcess(home, [script, "join", cloud.account.apiEndpoint], {
    LABFLEET_JOIN_TOKEN: token,
    LABFLEET_NAME: name,
    LABFLEET_POLL_WAIT: "20",
  });
  const env = () => {
    try {
      return readFileSync(join(home, ".labfleet-agent", `${W}.env`), "utf8");
    } catch {
      return "";
    }
  };
  const agent: JoinedAgent = {
    home,
    child: proc.child,
    output: proc.output,
    hostId: () => /LABFLEET_HOST_ID='([^']+)'/.exec(env())?.[1],
    secret: () => /LABFLEET_HOST_SECRET='([0-9a-f]+)'/.exec(env())?.[1],
    stop: proc.stop,
  };
  agents.push(agent);
  return agent;
}

function workshopYaml(source: string): string {
  return `name: ${W}
lab:
  source: ${source}
  setup: bash setup.sh
  health: test -f built && { [ -f healthy_at ] || date +%s%3N > healthy_at; }
  poll_seconds: 5
  timeout_minutes: 5
  requires:
    commands: [git, curl]
provider:
  type: enrolled
  expected: 2
portal:
  enabled: true
`;
}

describe("enrolled hosts in the cloud", { timeout: 400_000 }, () => {
  it("join with a token, wait for approval, and run a whole up through the API's function; pushed progress makes a lab claimable within 2 s of its health", async () => {
    expect((await cloud.api("", { yaml: workshopYaml(cloud.lab("pushed")) })).status).toBe(201);
    const made = await cloud.api(`/${W}/join-tokens`, { uses: 2, approve: "manual" });
    expect(made.status, JSON.stringify(made.body)).toBe(201);
    // The line printed for the room names the API's public address, as API Gateway tells the function.
    expect(made.body.command).toContain(`${cloud.account.apiUrl}/agent/v1/agent.sh`);
    scriptDir = tempDir("labfleet-cloud-agent-script-");
    const script = await fetchAgentScript(cloud.account.apiEndpoint, scriptDir);
    const a = joinAs(script, made.body.token, "lab-pc");
    const b = joinAs(script, made.body.token, "lab-pc");
    for (const agent of [a, b])
      await waitFor("the agent to join", () => /joined .* \(pending\)/.test(agent.output()), 30_000).catch(
        (err: Error) => {
          throw new Error(`${err.message}; the agent said: ${agent.output()}`);
        },
      );
    expect([a.hostId(), b.hostId()].sort()).toEqual(["lab-pc", "lab-pc-2"]);
    // A third machine is refused: the token had two uses.
    const third = await fetch(`${cloud.account.apiEndpoint}/agent/v1/enroll`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ token: made.body.token, name: "late", facts: { hostname: "late" } }),
    });
    expect(third.status).toBe(409);
    expect(((await third.json()) as { error: { code: string } }).error.code).toBe("join.used_up");

    const pending = await cloud.api(`/${W}/enrollment/pending`);
    expect(pending.body.hosts.map((h: { id: string }) => h.id).sort()).toEqual(["lab-pc", "lab-pc-2"]);
    const approved = await cloud.api(`/${W}/enrollment/approve`, { hosts: ["lab-pc", "lab-pc-2"] });
    expect(approved.status, JSON.stringify(approved.body)).toBe(200);
    expect((await cloud.api(`/${W}/portal/open`, {})).status).toBe(200);

    // The API function as a room keeps it: warm instances (agents polling, instructors looking). On this
    // machine a new instance's Init takes seconds (on Lambda, well under one): a push that waited for one would
    // time the double's start-up, not the push.
    await Promise.all(Array.from({ length: 8 }, () => cloud.api(`/${W}`)));

    const started = await cloud.api(`/${W}/up`, {});
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    // The first poll is 15 s after the deploy; the pushes come long before it. A lab is claimable once its record
    // says ready (the claim's transaction reads the record; the board's reads are shared for at most 1 s). The
    // records are read from the table itself, so watching them keeps no instance of the API function busy.
    const ddb = localClient(inject("dynamoEndpoint"));
    const store = createStore(ddb, cloud.account.table);
    const hostsOf = async () =>
      (await store.host.query.byWorkshop({ workshop: W }).go({ pages: "all" })).data.filter(
        (h) => h.state !== "torn_down",
      );
    const ready = await waitFor(
      "both labs ready",
      async () => {
        const hosts = await hostsOf();
        return hosts.length === 2 && hosts.every((h) => h.state === "ready") ? hosts : undefined;
      },
      150_000,
    )
      .catch(async (err: Error) => {
        throw new Error(`${err.message}: ${JSON.stringify(await hostsOf())}; ${a.output()} ${b.output()}`);
      })
      .finally(() => ddb.destroy());
    for (const agent of [a, b]) {
      const healthyAt = Number(readFileSync(join(agent.home, "lab", "healthy_at"), "utf8"));
      const readyAt = Date.parse(ready.find((h) => h.hostId === agent.hostId())?.readyAt as string);
      expect(readyAt - healthyAt, agent.hostId()).toBeLessThan(2_000);
      // DeployHost wrote the API's URL (LABFLEET_API_URL, where the double's hosts reach it) and the agent's own
      // secret into push.env, readable by the host's user only.
      const pushEnv = join(agent.home, ".labfleet", W, "push.env");
      expect(readFileSync(pushEnv, "utf8")).toContain(`LABFLEET_API='${cloud.account.apiEndpoint}'`);
      expect(readFileSync(pushEnv, "utf8")).toContain(`LABFLEET_HOST_SECRET='${agent.secret()}'`);
      expect(statSync(pushEnv).mode & 0o777).toBe(0o600);
    }
    const board = await waitFor("both labs free on the board", async () => {
      const s = await cloud.api(`/${W}/portal/status`);
      const labs = s.body.labs as { lab: string; status: string }[];
      return s.body.portal?.open && labs.every((l) => l.status === "free") ? labs : undefined;
    });
    expect(board.map((l) => l.lab).sort()).toEqual(["lab-pc", "lab-pc-2"]);
    // Ready came from the pushes: the run still waits for its first poll, which then ends it.
    const before = (await cloud.api(`/${W}/runs/${started.body.run.id}`)).body.run;
    expect(before.state).toBe("running");
    const run = await cloud.runToEnd(W, started.body.run.id, 150_000);
    expect(run.state, JSON.stringify(run)).toBe("succeeded");
    const status = (await cloud.api(`/${W}`)).body;
    expect(status.hostList.map((h: { id: string; state: string }) => [h.id, h.state]).sort()).toEqual([
      ["lab-pc", "ready"],
      ["lab-pc-2", "ready"],
    ]);

    // A student claims one through the portal's own function.
    const info = (await cloud.api(`/${W}/portal/info`)).body;
    const s = portalStudent(cloud.account);
    await s.get("/");
    expect((await s.post("/code", { code: info.code })).status).toBe(303);
    await s.get("/board");
    const claimed = await s.post("/claim", { name: "Ada Agent", email: "ada@example.test", pin: "480271" });
    expect(claimed.status, claimed.text).toBe(303);
    const lab = await s.get(claimed.location);
    expect(lab.text).toMatch(/lab-pc(-2)?\.example\.test/);

    // Every call the functions made was allowed by their roles; no function ran past its timeout.
    expect(cloud.account.actionPairs().filter((p) => p.denied > 0)).toEqual([]);
    expect(cloud.account.server.failures).toEqual([]);
  });

  it("refuses replayed, tampered, forged and unsigned agent calls at API Gateway, and they change nothing", async () => {
    const a = agents[0] as JoinedAgent;
    const hostId = a.hostId() as string;
    const secret = a.secret() as string;
    const path = "/agent/v1/progress";
    const probe = (phase: string) => {
      const verdict = "pid=1 alive=1 rc= rc_age=1 started=1 run=";
      const status = `{"phase":"${phase}","state":"running"}`;
      return Buffer.from(`${verdict}\n@@status\n${status}\n\n@@log\n\n@@end ${verdict}\n`).toString("base64");
    };
    let n = 0;
    const send = async (
      body: string,
      key: string,
      extra: { body?: string; headers?: Record<string, string> } = {},
    ) => {
      const headers =
        extra.headers ??
        signedHeaders(W, hostId, key, {
          method: "POST",
          path,
          body,
          timestamp: Math.floor(Date.now() / 1000),
          nonce: `nonce-${Date.now()}-${n++}-cloudtest`,
        });
      const res = await fetch(`${cloud.account.apiEndpoint}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: extra.body ?? body,
      });
      return {
        status: res.status,
        code: ((await res.json()) as { error?: { code: string } }).error?.code,
        headers,
      };
    };
    const forgedPhase = JSON.stringify({ event: "phase", probe: probe("forged") });
    expect(await send(forgedPhase, "0".repeat(64))).toMatchObject({
      status: 401,
      code: "agent.bad_signature",
    });
    const signedFor = JSON.stringify({ event: "phase", probe: probe("building") });
    expect(await send(signedFor, secret, { body: forgedPhase })).toMatchObject({
      status: 401,
      code: "agent.bad_signature",
    });
    expect(await send(forgedPhase, secret, { headers: {} })).toMatchObject({
      status: 401,
      code: "agent.unsigned",
    });
    // The host's own call goes through once (its lab is ready: a running probe changes nothing); again, it is a
    // replay, whichever Lambda instance answers it.
    const first = await send(signedFor, secret);
    expect(first.status).toBe(200);
    expect(await send(signedFor, secret, { headers: first.headers })).toMatchObject({
      status: 401,
      code: "agent.replayed",
    });
    const host = (await cloud.api(`/${W}`)).body.hostList.find((h: { id: string }) => h.id === hostId);
    expect(host.state).toBe("ready");
    expect(JSON.stringify(host)).not.toContain("forged");
    // The agent's long polls were answered by the function well inside API Gateway's integration timeout.
    const cutOff = cloud.account.apigateway.requests.filter((r) => r.invoked && r.status === 503);
    expect(cutOff).toEqual([]);
  });

  it("doctor and exec through the API reach enrolled hosts by the queue; an exec longer than API Gateway's 30 s runs as a job to its end", async () => {
    const checked = await cloud.api(`/${W}/doctor`, {});
    expect(checked.status, JSON.stringify(checked.body)).toBe(200);
    expect(checked.body.reports.map((r: { host: string; ok: boolean }) => [r.host, r.ok]).sort()).toEqual([
      ["lab-pc", true],
      ["lab-pc-2", true],
    ]);
    expect(
      checked.body.reports[0].checks.find((c: { name: string }) => c.name === "command:git"),
    ).toMatchObject({ ok: true });
    // An exec is a job: the Api answers at once and the exec workflow's steps reach the agents through the
    // queue, so a command longer than API Gateway's 30 s runs to its end.
    const started = await cloud.api(`/${W}/exec`, { command: "echo started; sleep 32; echo done" });
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    const job = await waitFor(
      "the exec job to end",
      async () => {
        const j = (await cloud.api(`/${W}/exec/${started.body.jobId}`, undefined, "GET")).body;
        return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
      },
      120_000,
    );
    expect(job.state, JSON.stringify(job)).toBe("succeeded");
    expect(
      job.hosts
        .map((h: { host: string; status: string; stdout: string }) => [h.host, h.status, h.stdout])
        .sort(),
    ).toEqual([
      ["lab-pc", "ok", "started\ndone\n"],
      ["lab-pc-2", "ok", "started\ndone\n"],
    ]);
    // Nothing of it is left running on the machines.
    for (const a of agents)
      expect(
        processesUnder(a.home).some((pid) => {
          try {
            return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("sleep\u000032");
          } catch {
            return false;
          }
        }),
      ).toBe(false);
  });
});
