import { describe, expect, it } from "vitest";
import type { ZodError } from "zod";
import {
  commandForEvent,
  type ExecHostResult,
  ExecInput,
  execScript,
  outputCaps,
  parseExecOutput,
  redactCommandText,
  summarize,
} from "../../shared/fleet/exec.ts";
import { EXEC_JOB_MAX_MS, waitAfter } from "../../shared/fleet/exec-jobs.ts";
import { redactor } from "../../shared/fleet/secrets.ts";

const result = (
  host: string,
  status: ExecHostResult["status"],
  exitCode: number | null = null,
): ExecHostResult => ({
  host,
  status,
  exitCode,
  stdout: "",
  stderr: "",
  stdoutTruncated: false,
  stderrTruncated: false,
  stdoutBytes: 0,
  stderrBytes: 0,
  durationMs: 1,
});

describe("exec summary", () => {
  it("counts each status and names the hosts of each failure, grouped by exit code", () => {
    const hosts = [
      ...Array.from({ length: 12 }, (_, i) => result(`student-${String(i + 1).padStart(2, "0")}`, "ok", 0)),
      result("student-13", "failed", 2),
      result("student-14", "timeout"),
    ];
    expect(summarize(hosts)).toEqual({
      total: 14,
      ok: 12,
      failed: 1,
      timeout: 1,
      error: 0,
      skipped: 0,
      cancelled: 0,
      text: "12 ok, 1 failed (exit 2): student-13; 1 timeout: student-14",
    });
    const mixed = summarize([
      result("a", "failed", 2),
      result("b", "failed", 1),
      result("c", "failed", 2),
      result("d", "error"),
      result("e", "skipped"),
    ]);
    expect(mixed.text).toBe("0 ok, 3 failed (exit 1: b; exit 2: a, c), 1 error: d; 1 skipped");
    expect(summarize([result("a", "ok", 0)]).text).toBe("1 ok");
  });

  it("names at most ten hosts per kind, then how many more", () => {
    const hosts = Array.from({ length: 13 }, (_, i) => result(`h${i + 1}`, "timeout"));
    expect(summarize(hosts).text).toBe(
      "0 ok, 13 timeout: h1, h2, h3, h4, h5, h6, h7, h8, h9, h10 and 3 more",
    );
  });
});

describe("the host-side script and its answer", () => {
  it("quotes the command, caps each stream and ends with a marker on stderr", () => {
    const script = execScript("echo 'it''s'; exit 3", 30, outputCaps("ssh"));
    expect(script).toContain(
      "timeout -k 2 30 bash --noprofile --norc -c 'echo '\\''it'\\'''\\''s'\\''; exit 3'",
    );
    expect(script).toContain("cap 65536");
    expect(execScript("true", 5, outputCaps("ssm"))).toMatch(/cap 6800 .*cap 20000/s);
  });

  it("reads the marker and strips it from stderr; output without one is not the script's", () => {
    const parsed = parseExecOutput("out\n", "err\n\n@@labfleet-exec rc=2 out=10 err=0 timedout=0\n");
    expect(parsed).toEqual({
      exitCode: 2,
      stdout: "out\n",
      stderr: "err\n",
      outRest: 10,
      errRest: 0,
      timedOut: false,
    });
    // A command that prints a fake marker early does not fool it: only the last line counts.
    const spoofed = parseExecOutput(
      "",
      "\n@@labfleet-exec rc=0 out=0 err=0 timedout=0\nx\n@@labfleet-exec rc=7 out=0 err=0 timedout=1\n",
    );
    expect(spoofed?.exitCode).toBe(7);
    expect(spoofed?.timedOut).toBe(true);
    expect(parseExecOutput("", "bash: mktemp: command not found\n")).toBeUndefined();
  });
});

describe("the command as the exec event keeps it", () => {
  it("redacts operator secrets and values after key-like names, and keeps the first 80 characters", () => {
    const redact = redactor(["s3cr3t-value"]);
    expect(commandForEvent("curl -H 'Authorization: Bearer abc.def' https://x", redact)).toBe(
      "curl -H 'Authorization: [redacted] [redacted] https://x",
    );
    expect(commandForEvent("API_TOKEN=abc123 ./run --password hunter2 s3cr3t-value", redact)).toBe(
      "API_TOKEN=[redacted] ./run --password [redacted] [redacted]",
    );
    expect(redactCommandText("mysql -u root --pass='x y'")).toBe("mysql -u root --pass=[redacted]");
    const long = commandForEvent(`echo ${"a".repeat(200)}`, (t) => t);
    expect(long).toHaveLength(80);
    expect(long.endsWith("…")).toBe(true);
  });
});

describe("exec input", () => {
  it("refuses bad fields with their path and what was expected", () => {
    const bad = ExecInput.safeParse({ command: " ", timeoutSeconds: 0, concurrency: 65, maxErrors: 0 });
    expect(bad.success).toBe(false);
    const paths = (bad.error as ZodError).issues.map((i) => [i.path.join("."), i.message]);
    expect(paths).toEqual(
      expect.arrayContaining([
        ["command", "expected a command to run"],
        ["timeoutSeconds", expect.stringMatching(/>=1|at least|too small/i)],
        ["concurrency", expect.any(String)],
        ["maxErrors", expect.any(String)],
      ]),
    );
    expect(ExecInput.parse({ command: "uptime" }).timeoutSeconds).toBe(60);
    expect(ExecInput.safeParse({ command: "x", extra: 1 }).success).toBe(false);
  });
});

describe("exec job waits", () => {
  it("waits 1 s at first and longer as a job goes on, so its longest run fits one execution's history", () => {
    expect([0, 9_000, 30_000, 200_000, 1_800_000, 7_200_000].map(waitAfter)).toEqual([1, 1, 2, 5, 10, 30]);
    // Each step is a Task, a Choice and a Wait: about 9 history events; Step Functions keeps 25,000.
    let steps = 0;
    for (let t = 0; t < EXEC_JOB_MAX_MS; t += waitAfter(t) * 1000) steps++;
    expect(steps * 9).toBeLessThan(25_000);
  });
});
