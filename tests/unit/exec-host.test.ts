import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { execScript, outputCaps, parseExecOutput } from "../../shared/fleet/exec.ts";
import {
  killScript,
  POLL_GONE,
  POLL_RUNNING,
  POLL_UNKNOWN,
  parsePoll,
  pollScript,
  startScript,
} from "../../shared/fleet/exec-host.ts";
import { waitFor } from "../harness/runtime.ts";

/**
 * The host side of an exec job, run with bash in a temporary HOME: the command starts detached, a check answers
 * at once while it runs and with its output once it has ended, and a kill ends its whole session.
 */
const home = mkdtempSync(join(tmpdir(), "labfleet-exec-host-"));
const bash = (script: string, input?: string) => {
  const r = spawnSync("bash", ["-c", script], {
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: home },
    cwd: home,
    input: input ?? "",
    encoding: "utf8",
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
};
const JOB = "exj_01J9ZK3M4R7S8T9V0W1X2Y3Z4A";
const caps = outputCaps("local");

afterAll(() => rmSync(home, { recursive: true, force: true }));

describe("exec on the host: start, check, kill", () => {
  it("starts detached, answers running at once, then the output, the exit code and the duration", async () => {
    const started = bash(
      startScript(JOB),
      execScript('echo "in $PWD"; echo warn >&2; sleep 1; exit 3', 60, caps),
    );
    expect(started).toMatchObject({ code: 0, stdout: "started\n" });
    // A second start of the same job (a retried step) starts nothing more.
    expect(bash(startScript(JOB), "exit 99").stdout).toBe("started\n");
    expect(bash(pollScript(JOB)).code).toBe(POLL_RUNNING);
    const done = await waitFor("the command to end", () => {
      const r = bash(pollScript(JOB));
      return r.code === 0 ? r : undefined;
    });
    const p = parsePoll(done.stdout, done.stderr);
    expect(p.ms).toBeGreaterThanOrEqual(1000);
    expect(parseExecOutput(p.stdout, p.stderr)).toMatchObject({
      exitCode: 3,
      stdout: `in ${home}\n`,
      stderr: "warn\n",
      timedOut: false,
    });
    // Collected once: the host keeps no record of it afterwards.
    expect(existsSync(join(home, ".labfleet", "exec", JOB))).toBe(false);
    expect(bash(pollScript(JOB)).code).toBe(POLL_UNKNOWN);
  });

  it("a kill ends the command and everything it started; a wrapper that died is told from one still running", async () => {
    const job = "exj_01J9ZK3M4R7S8T9V0W1X2Y3Z4B";
    bash(startScript(job), execScript("sleep 61 & sleep 62", 600, caps));
    expect(bash(pollScript(job)).code).toBe(POLL_RUNNING);
    const pid = bash(`cat "$HOME/.labfleet/exec/${job}/pid"`).stdout.trim();
    expect(bash(killScript(job)).code).toBe(0);
    await waitFor("the command's session to be gone", () =>
      bash(`pgrep -s ${pid}`).code === 1 ? true : undefined,
    );
    expect(bash(pollScript(job)).code).toBe(POLL_UNKNOWN);

    const gone = "exj_01J9ZK3M4R7S8T9V0W1X2Y3Z4C";
    bash(startScript(gone), execScript("sleep 63", 600, caps));
    const p = bash(`cat "$HOME/.labfleet/exec/${gone}/pid"`).stdout.trim();
    // The wrapper killed from outside, without its end written.
    // (again while any is left: a process forked while pkill read the process list escapes one round)
    await waitFor("the wrapper to be gone", () => {
      bash(`pkill -KILL -s ${p}`);
      return bash(`pgrep -s ${p}`).code === 1 ? true : undefined;
    });
    expect(bash(pollScript(gone)).code).toBe(POLL_GONE);
  });
});
