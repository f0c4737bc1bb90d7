import { readFileSync } from "node:fs";
import type { SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ExecReport } from "../../shared/fleet/exec.ts";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";
import { processesUnder, waitFor } from "../harness/runtime.ts";

/**
 * `labfleet exec` in the cloud: the Api function sends the command to each EC2 host through SSM Run Command
 * (AWS-RunShellScript), inside the request's time budget, and the output stays inside what
 * GetCommandInvocation returns inline.
 */
const W = "cloud-exec";
let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud();
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

const exec = (body: Record<string, unknown>) => cloud.api(`/${W}/exec`, body);

describe("exec through the Api function and SSM", { timeout: 240_000 }, () => {
  it("runs on every EC2 host through SSM Run Command, one result per host", async () => {
    const created = await cloud.api("", { yaml: awsWorkshopYaml({ name: W, source: cloud.lab("quick") }) });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    expect((await cloud.runToEnd(W, started.body.run.id, 120_000)).state).toBe("succeeded");

    const r = await exec({ command: "echo hello; echo note >&2; test -f nope" });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const report = r.body as ExecReport;
    expect(report.hosts.map((h) => [h.host, h.status, h.exitCode, h.stdout, h.stderr])).toEqual([
      ["student-01", "failed", 1, "hello\n", "note\n"],
      ["student-02", "failed", 1, "hello\n", "note\n"],
    ]);
    expect(report.summary.text).toBe("0 ok, 2 failed (exit 1): student-01, student-02");
    // The command went out as SSM Run Command from the Api function, one per host.
    const sent = cloud.account.server
      .inputs<SendCommandCommandInput>("ssm", "SendCommand", "Api")
      .filter((c) => c.Comment?.endsWith(": exec"));
    expect(sent).toHaveLength(2);
    expect(sent.every((c) => c.DocumentName === "AWS-RunShellScript")).toBe(true);
  });

  it("keeps each host's output inside what GetCommandInvocation returns, and marks the cut", async () => {
    const r = await exec({ command: "seq 1 20000; seq 1 3000 >&2", hosts: ["student-01"] });
    expect(r.status).toBe(200);
    const h = (r.body as ExecReport).hosts[0];
    expect(h?.status).toBe("ok");
    expect(h?.stdoutTruncated).toBe(true);
    expect(Buffer.byteLength(h?.stdout ?? "")).toBe(20_000);
    expect(h?.stdout.startsWith("1\n2\n3\n")).toBe(true);
    expect(h?.stdoutBytes).toBe(108_894);
    expect(h?.stderrTruncated).toBe(true);
    expect(Buffer.byteLength(h?.stderr ?? "")).toBe(6_800);
    expect(h?.stderrBytes).toBe(13_893);
  });

  it("bounds the run by the request's time budget: the timeout is cut and the command killed on the host", async () => {
    const r = await exec({ command: "echo begun; sleep 600", hosts: ["student-02"], timeoutSeconds: 3600 });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    const report = r.body as ExecReport;
    expect(report.timeoutSeconds).toBeLessThanOrEqual(25);
    expect(report.notes.join(" ")).toMatch(/this request has \d+ s for its work/);
    expect(report.hosts[0]).toMatchObject({ host: "student-02", status: "timeout", exitCode: null });
    expect(report.hosts[0]?.stdout).toBe("begun\n");
    // Killed on the instance, not only given up on: no `sleep 600` is left there.
    const home = cloud.account.ec2.instanceOf(W, "student-02").home;
    await waitFor("the command to be gone from the host", () =>
      processesUnder(home).every((pid) => !cmdline(pid).includes("sleep 600")) ? true : undefined,
    );
  });

  it("IAM: the Api function's grant to send commands is what lets exec reach the hosts", async () => {
    const pairs = cloud.account.actionPairs().filter((p) => p.principal === "Api");
    expect(pairs.map((p) => p.action)).toEqual(
      expect.arrayContaining(["ssm:SendCommand", "ssm:GetCommandInvocation"]),
    );
    expect(pairs.filter((p) => p.denied > 0)).toEqual([]);
    const refused = await cloud.account.withPolicy(
      "Api",
      (policy) => ({
        ...policy,
        Statement: policy.Statement.filter((st) => (st as { Sid?: string }).Sid !== "SendToManagedInstances"),
      }),
      () => exec({ command: "true", hosts: ["student-01"] }),
    );
    expect(refused.status).toBe(200);
    const h = (refused.body as ExecReport).hosts[0];
    expect(h?.status).toBe("error");
    expect(h?.reason).toContain("AccessDeniedException");
    const denied = cloud.account
      .actionPairs()
      .find((p) => p.principal === "Api" && p.action === "ssm:SendCommand");
    expect(denied?.denied).toBeGreaterThan(0);
  });
});
