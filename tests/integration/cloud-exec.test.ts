import { readFileSync } from "node:fs";
import type { SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ExecJob } from "../../shared/fleet/exec-jobs.ts";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";
import { runCli } from "../harness/cli.ts";
import { processesUnder, removeDir, tempDir, waitFor } from "../harness/runtime.ts";

/**
 * `labfleet exec` in the cloud, as a job: the Api function records it and starts the exec state machine; its
 * ExecStep function starts the command detached on each EC2 host through SSM Run Command (AWS-RunShellScript)
 * and checks it between Wait states, so a command longer than the request's budget (25 s) runs to its end and
 * no function runs as long as it does (ExecStep's timeout is cut to 30 s here, less than the 32 s command). Each check's output stays inside
 * what GetCommandInvocation returns inline.
 */
const W = "cloud-exec";
let cloud: Cloud;
const STEP_TIMEOUT_MS = 30_000;

beforeAll(async () => {
  cloud = await startCloud({ timeoutMs: { ExecStep: STEP_TIMEOUT_MS } });
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

const cmdline = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ");
  } catch {
    return ""; // gone meanwhile
  }
};

/** Starts a job (202, Location) and follows it to its end. */
const exec = async (body: Record<string, unknown>, timeoutMs = 120_000) => {
  const started = await cloud.api(`/${W}/exec`, body);
  if (started.status !== 202) return { status: started.status, body: started.body as ExecJob };
  const job = started.body as ExecJob;
  expect(started.headers.get("location")).toBe(`/api/workshops/${W}/exec/${job.jobId}`);
  const end = await waitFor(
    "the exec job to end",
    async () => {
      const r = await cloud.api(`/${W}/exec/${job.jobId}`, undefined, "GET");
      const j = r.body as ExecJob;
      return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
    },
    timeoutMs,
  );
  return { status: started.status, body: end };
};
const fnName = (fn: string) => cloud.account.deployed.functionName(fn as never);

describe("exec as a job: the exec state machine and SSM", { timeout: 240_000 }, () => {
  it("runs on every EC2 host through SSM Run Command, one result per host", async () => {
    const created = await cloud.api("", {
      yaml: awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 3 }),
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    expect((await cloud.runToEnd(W, started.body.run.id, 120_000)).state).toBe("succeeded");

    const r = await exec({ command: "echo hello; echo note >&2; test -f nope" });
    expect(r.status, JSON.stringify(r.body)).toBe(202);
    const report = r.body;
    expect(report.state).toBe("failed");
    expect(report.hosts.map((h) => [h.host, h.status, h.exitCode, h.stdout, h.stderr])).toEqual([
      ["student-01", "failed", 1, "hello\n", "note\n"],
      ["student-02", "failed", 1, "hello\n", "note\n"],
      ["student-03", "failed", 1, "hello\n", "note\n"],
    ]);
    expect(report.summary.text).toBe("0 ok, 3 failed (exit 1): student-01, student-02, student-03");
    // The command went out as SSM Run Command from the ExecStep function (a start and at least one check per
    // host), never from the Api function.
    const sent = cloud.account.server
      .inputs<SendCommandCommandInput>("ssm", "SendCommand", "ExecStep")
      .filter((c) => c.Comment?.endsWith(": exec"));
    // Hosts sent the same command at once share a SendCommand: counted per instance.
    expect(sent.reduce((n, c) => n + (c.InstanceIds?.length ?? 0), 0)).toBeGreaterThanOrEqual(6);
    expect(sent.every((c) => c.DocumentName === "AWS-RunShellScript")).toBe(true);
    expect(
      cloud.account.server
        .inputs<SendCommandCommandInput>("ssm", "SendCommand", "Api")
        .filter((c) => c.Comment?.endsWith(": exec")),
    ).toEqual([]);
  });

  it("labfleet exec from the CLI over SSM: -j, --max-errors stopping dispatch, prefixed lines, --output json", async () => {
    const env = { LABFLEET_URL: cloud.account.apiEndpoint, LABFLEET_TOKEN: cloud.token };
    const hosts = ["student-01", "student-02", "student-03"];
    const home = (h: string) => cloud.account.ec2.instanceOf(W, h).home;
    /** The exec commands SSM was sent for a host so far (starts, checks and kills). */
    const sentTo = (h: string) =>
      cloud.account.server
        .inputs<SendCommandCommandInput>("ssm", "SendCommand", "ExecStep")
        .filter((c) => c.Comment === `labfleet ${W} ${h}: exec`).length;
    const last = (text: string) => text.trimEnd().split("\n").at(-1);

    // One host at a time, and no further host once two have failed: student-03 is never sent the command.
    const before = hosts.map(sentTo);
    const r = await runCli(
      ["exec", W, "-j", "1", "--max-errors", "2", "--", 'echo "home $HOME"; echo warn >&2; exit 4'],
      { env },
    );
    expect(r.code, r.stderr).toBe(1);
    for (const h of ["student-01", "student-02"])
      expect(r.stdout).toContain(`${h} | home ${home(h)}\n${h} ! warn\n${h} # failed (exit 4)\n`);
    expect(r.stdout).toContain("student-03 # skipped: not started: 2 hosts failed (max errors 2)\n");
    expect(r.stdout).not.toContain(`home ${home("student-03")}`);
    expect(last(r.stdout)).toBe("0 ok, 2 failed (exit 4): student-01, student-02; 1 skipped");
    const after = hosts.map(sentTo);
    expect(after[0]).toBeGreaterThan(before[0] ?? 0);
    expect(after[1]).toBeGreaterThan(before[1] ?? 0);
    expect(after[2]).toBe(before[2]);

    // --output json: one document, the job's final answer; after one failure the other two are skipped.
    const j = await runCli(["exec", W, "-j", "1", "--max-errors", "1", "--output", "json", "--", "exit 5"], {
      env,
    });
    expect(j.code, j.stderr).toBe(1);
    const report = JSON.parse(j.stdout) as ExecJob;
    expect(report).toMatchObject({ state: "failed", ok: false, concurrency: 1, maxErrors: 1 });
    expect(report.hosts.map((h) => [h.host, h.status, h.exitCode])).toEqual([
      ["student-01", "failed", 5],
      ["student-02", "skipped", null],
      ["student-03", "skipped", null],
    ]);
    expect(report.hosts[1]?.reason).toBe("not started: 1 host failed (max errors 1)");
    expect(report.summary.text).toBe("0 ok, 1 failed (exit 5): student-01; 2 skipped");

    // -j 3: the three hosts run at once, so each finds the other two's marks in a folder they all see.
    const meet = tempDir("labfleet-cloud-exec-meet-");
    try {
      const together = await runCli(
        [
          "exec",
          W,
          "-j",
          "3",
          "--output",
          "json",
          "--",
          `touch ${meet}/"$(basename "$(dirname "$HOME")")"; for i in $(seq 300); do [ "$(ls ${meet} | wc -l)" -ge 3 ] && echo met && exit 0; sleep 0.1; done; exit 1`,
        ],
        { env },
      );
      expect(together.code, together.stdout + together.stderr).toBe(0);
      const met = JSON.parse(together.stdout) as ExecJob;
      expect(met.concurrency).toBe(3);
      expect(met.hosts.map((h) => [h.host, h.status, h.stdout])).toEqual(
        hosts.map((h) => [h, "ok", "met\n"]),
      );
    } finally {
      removeDir(meet);
    }
  });

  it("keeps each host's output inside what GetCommandInvocation returns, and marks the cut", async () => {
    const r = await exec({ command: "seq 1 20000; seq 1 3000 >&2", hosts: ["student-01"] });
    expect(r.status).toBe(202);
    const h = r.body.hosts[0];
    expect(h?.status).toBe("ok");
    expect(h?.stdoutTruncated).toBe(true);
    expect(Buffer.byteLength(h?.stdout ?? "")).toBe(20_000);
    expect(h?.stdout.startsWith("1\n2\n3\n")).toBe(true);
    expect(h?.stdoutBytes).toBe(108_894);
    expect(h?.stderrTruncated).toBe(true);
    expect(Buffer.byteLength(h?.stderr ?? "")).toBe(6_800);
    expect(h?.stderrBytes).toBe(13_893);
  });

  it("runs a command longer than the request's budget to its end, no function running as long as it does", async () => {
    const before = cloud.account.lambda.invocations.length;
    const r = await exec({
      command: "echo begun; sleep 32; echo finished",
      hosts: ["student-02"],
      timeoutSeconds: 3600,
    });
    expect(r.body).toMatchObject({ state: "succeeded", ok: true, timeoutSeconds: 3600 });
    // Its transitions are counted from the execution's history, one step and one wait per check at least.
    expect(r.body.transitions).toBeGreaterThan(2 * 3);
    expect(r.body.hosts[0]).toMatchObject({
      host: "student-02",
      status: "ok",
      exitCode: 0,
      stdout: "begun\nfinished\n",
    });
    expect(r.body.hosts[0]?.durationMs).toBeGreaterThanOrEqual(32_000);
    // Every step ended well inside ExecStep's timeout; the Api answered within its own.
    const ran = cloud.account.lambda.invocations.slice(before);
    const steps = ran.filter((i) => i.functionName === fnName("ExecStep"));
    expect(steps.length).toBeGreaterThan(3);
    expect(steps.filter((i) => i.outcome !== "ok")).toEqual([]);
    expect(Math.max(...steps.map((i) => i.durationMs))).toBeLessThan(STEP_TIMEOUT_MS);
    expect(ran.filter((i) => i.functionName === fnName("Api") && i.outcome !== "ok")).toEqual([]);
  });

  it("a timeout of its own kills the command on the host; a cancel ends a running one there too", async () => {
    const r = await exec({ command: "echo begun; sleep 600", hosts: ["student-02"], timeoutSeconds: 2 });
    expect(r.body.hosts[0]).toMatchObject({
      host: "student-02",
      status: "timeout",
      exitCode: null,
      stdout: "begun\n",
    });
    const home = cloud.account.ec2.instanceOf(W, "student-02").home;
    await waitFor("the command to be gone from the host", () =>
      processesUnder(home).every((pid) => !cmdline(pid).includes("sleep 600")) ? true : undefined,
    );
    const started = await cloud.api(`/${W}/exec`, {
      command: "sleep 601",
      hosts: ["student-01"],
      timeoutSeconds: 3600,
    });
    expect(started.status).toBe(202);
    const job = started.body as ExecJob;
    const h1 = cloud.account.ec2.instanceOf(W, "student-01").home;
    await waitFor("the command to run on the host", () =>
      processesUnder(h1).some((pid) => cmdline(pid).includes("sleep 601")) ? true : undefined,
    );
    expect((await cloud.api(`/${W}/exec/${job.jobId}/cancel`, {})).status).toBe(202);
    const end = await waitFor("the job to be cancelled", async () => {
      const j = (await cloud.api(`/${W}/exec/${job.jobId}`, undefined, "GET")).body as ExecJob;
      return j.state === "cancelled" ? j : undefined;
    });
    expect(end.hosts.map((h) => [h.host, h.status])).toEqual([["student-01", "cancelled"]]);
    await waitFor("the cancelled command to be gone from the host", () =>
      processesUnder(h1).every((pid) => !cmdline(pid).includes("sleep 601")) ? true : undefined,
    );
  });

  it("a job whose workflow is aborted outside labfleet fails with why (ReconcileRun), not left running", async () => {
    const started = await cloud.api(`/${W}/exec`, {
      command: "sleep 602",
      hosts: ["student-01"],
      timeoutSeconds: 20,
    });
    expect(started.status).toBe(202);
    const job = started.body as ExecJob;
    const aws = cloud.account;
    const execution = await waitFor(
      "the job's execution",
      () => [...aws.sfn.executions.values()].find((e) => e.name === job.jobId && e.status === "RUNNING"),
      20_000,
    );
    await aws.server.invoke(aws.server.principal("operator"), "states", "StopExecution", {
      executionArn: execution.executionArn,
      error: "Console",
      cause: "stopped by hand",
    });
    const end = await waitFor("the job to fail", async () => {
      const j = (await cloud.api(`/${W}/exec/${job.jobId}`, undefined, "GET")).body as ExecJob;
      return j.state === "failed" ? j : undefined;
    });
    expect(end.error).toMatch(
      /^its workflow was aborted \(Console: stopped by hand\); commands still running end/,
    );
    // Nothing ends the command but its own timeout on the host (no function may reach hosts after the abort).
    const h1 = cloud.account.ec2.instanceOf(W, "student-01").home;
    await waitFor(
      "the command to end at its timeout",
      () => (processesUnder(h1).every((pid) => !cmdline(pid).includes("sleep 602")) ? true : undefined),
      60_000,
    );
  });

  it("IAM: ExecStep's grant to send commands is what lets the job reach the hosts; only the Api starts jobs", async () => {
    const pairs = cloud.account.actionPairs();
    expect(pairs.filter((p) => p.principal === "ExecStep").map((p) => p.action)).toEqual(
      expect.arrayContaining(["ssm:SendCommand", "ssm:GetCommandInvocation"]),
    );
    expect(pairs.filter((p) => p.principal === "Api").map((p) => p.action)).toContain(
      "states:StartExecution",
    );
    expect(
      pairs.filter((p) => (p.principal === "ExecStep" || p.principal === "Api") && p.denied > 0),
    ).toEqual([]);
    const refused = await cloud.account.withPolicy(
      "ExecStep",
      (policy) => ({
        ...policy,
        Statement: policy.Statement.filter((st) => (st as { Sid?: string }).Sid !== "SendToManagedInstances"),
      }),
      () => exec({ command: "true", hosts: ["student-01"] }),
    );
    expect(refused.status).toBe(202);
    const h = refused.body.hosts[0];
    expect(h?.status).toBe("error");
    expect(h?.reason).toContain("AccessDeniedException");
    const denied = cloud.account
      .actionPairs()
      .find((p) => p.principal === "ExecStep" && p.action === "ssm:SendCommand");
    expect(denied?.denied).toBeGreaterThan(0);
  });
});
