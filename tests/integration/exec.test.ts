import { chmodSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ExecJob } from "../../shared/fleet/exec-jobs.ts";
import { runCli, startCli } from "../harness/cli.ts";
import {
  processesUnder,
  removeDir,
  tempDir,
  testRuntime,
  waitFor,
  workshopYaml,
} from "../harness/runtime.ts";

/**
 * `labfleet exec` on local sandbox hosts, through the real CLI and the local runtime's API: the command runs as
 * a job (the exec workflow on the local executor), which the CLI follows.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const SECRET = "exec-operator-secret-5c1e";
const W = "execs";

beforeAll(async () => {
  work = tempDir("labfleet-exec-");
  const home = join(work, "operator-home");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "secrets.yaml"), `API_TOKEN: "${SECRET}"\n`);
  chmodSync(join(home, "secrets.yaml"), 0o600);
  rt = await testRuntime({ labfleetHome: home });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  writeFileSync(
    join(work, "w.yaml"),
    workshopYaml({ name: W, lab: "secret-ok", count: 3, extraLab: "  operator_secrets: [API_TOKEN]\n" }),
  );
  const up = await runCli(["up", "-f", join(work, "w.yaml")], { env });
  expect(up.code, up.stderr).toBe(0);
}, 120_000);

afterAll(async () => {
  await runCli(["down", W, "--yes"], { env });
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

const exec = (args: string[]) => runCli(["exec", W, ...args], { env });
const json = async (args: string[]) => {
  const r = await exec([
    ...args.slice(0, args.indexOf("--")),
    "--output",
    "json",
    ...args.slice(args.indexOf("--")),
  ]);
  return { code: r.code, report: JSON.parse(r.stdout) as ExecJob };
};

describe("labfleet exec on local hosts", () => {
  it("prefixes every line with its host, tells stdout from stderr, and exits 0 when every host succeeds", async () => {
    const r = await exec(["--", 'echo "out of $(basename "$PWD")"; echo warn >&2']);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("student-01 | out of student-01\nstudent-01 ! warn\n");
    expect(r.stdout).toContain("student-03 | out of student-03\n");
    expect(r.stdout.trimEnd().split("\n").at(-1)).toBe("3 ok");
  });

  it("names the failed hosts with their exit code in the summary and exits 1", async () => {
    const r = await exec(["--", 'case "$PWD" in */student-02) echo broken >&2; exit 2;; esac; echo fine']);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("student-02 ! broken\nstudent-02 # failed (exit 2)\n");
    expect(r.stdout.trimEnd().split("\n").at(-1)).toBe("2 ok, 1 failed (exit 2): student-02");
    const j = await json(["--host", "student-02", "--host", "student-03", "--", "exit 3"]);
    expect(j.code).toBe(1);
    expect(j.report.hosts.map((h) => [h.host, h.status, h.exitCode])).toEqual([
      ["student-02", "failed", 3],
      ["student-03", "failed", 3],
    ]);
    expect(j.report.summary.text).toBe("0 ok, 2 failed (exit 3): student-02, student-03");
  });

  it("--output json gives one document: per host exit code, status, output, truncated flags and duration", async () => {
    const none = await exec(["--label", "nothing=none", "--output", "json", "--", "true"]);
    expect(none.code).toBe(1); // an empty selection is an error, not a report
    expect(none.stderr).toContain("no host matches the selection");
    const { code, report } = await json(["--host", "student-01", "--", "printf 'a\\nb'; printf e >&2"]);
    expect(code).toBe(0);
    expect(report.ok).toBe(true);
    expect(report.hosts).toHaveLength(1);
    const h = report.hosts[0];
    expect(h).toMatchObject({
      host: "student-01",
      status: "ok",
      exitCode: 0,
      stdout: "a\nb",
      stderr: "e",
      stdoutTruncated: false,
      stderrTruncated: false,
      stdoutBytes: 3,
      stderrBytes: 1,
    });
    expect(h?.durationMs).toBeGreaterThanOrEqual(0);
    expect(report.summary).toMatchObject({ total: 1, ok: 1, failed: 0, timeout: 0, text: "1 ok" });
  });

  it("runs -j hosts at once: three hosts meet only when three may run together", async () => {
    const meet = join(work, "meet");
    // Each host waits up to `tries` tenths of a second for all three marks.
    const cmd = (dir: string, tries: number) =>
      `mkdir -p ${dir}; touch ${dir}/"$(basename "$PWD")"; for i in $(seq ${tries}); do [ "$(ls ${dir} | wc -l)" -ge 3 ] && exit 0; sleep 0.1; done; exit 1`;
    const together = await json(["-j", "3", "--", cmd(`${meet}-3`, 300)]);
    expect(together.report.hosts.map((h) => h.status)).toEqual(["ok", "ok", "ok"]);
    expect(together.report.concurrency).toBe(3);
    const oneByOne = await json(["-j", "1", "--", cmd(`${meet}-1`, 20)]);
    // One at a time, the first two wait in vain; the third finds the other two's marks.
    expect(oneByOne.report.hosts.map((h) => h.status)).toEqual(["failed", "failed", "ok"]);
  });

  it("--max-errors stops dispatching after that many failures: the hosts not started are skipped", async () => {
    const r = await exec(["-j", "1", "--max-errors", "1", "--", "exit 4"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("student-02 # skipped: not started: 1 host failed (max errors 1)");
    expect(r.stdout.trimEnd().split("\n").at(-1)).toBe("0 ok, 1 failed (exit 4): student-01; 2 skipped");
    const j = await json(["-j", "1", "--max-errors", "2", "--", "exit 4"]);
    expect(j.report.hosts.map((h) => h.status)).toEqual(["failed", "failed", "skipped"]);
    expect(j.report.maxErrors).toBe(2);
  });

  it("--timeout kills the command on the host, its children too, and reports timeout", async () => {
    const r = await exec([
      "--host",
      "student-01",
      "--timeout",
      "1",
      "--",
      "echo started; sleep 41 & sleep 42; echo never",
    ]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("student-01 | started\n");
    expect(r.stdout).not.toContain("never");
    expect(r.stdout).toContain("student-01 # timeout: killed on the host after 1 s");
    expect(r.stdout.trimEnd().split("\n").at(-1)).toBe("0 ok, 1 timeout: student-01");
    // Nothing the command started outlives it on the host.
    const hostDir = join(rt.dataDir, "hosts", W, "student-01");
    expect(readdirSync(hostDir).length).toBeGreaterThan(0);
    expect(processesUnder(hostDir)).toEqual([]);
  });

  it("bounds each host's output: 64 KiB of stdout kept, the rest counted and marked", async () => {
    const cmd = "head -c 100000 /dev/zero | tr '\\0' a; head -c 70000 /dev/zero | tr '\\0' b >&2";
    const { report } = await json(["--host", "student-03", "--", cmd]);
    const h = report.hosts[0];
    expect(h?.status).toBe("ok");
    expect(h?.stdout).toBe("a".repeat(65_536));
    expect(h?.stdoutTruncated).toBe(true);
    expect(h?.stdoutBytes).toBe(100_000);
    expect(h?.stderr).toBe("b".repeat(65_536));
    expect(h?.stderrTruncated).toBe(true);
    expect(h?.stderrBytes).toBe(70_000);
    const text = await exec(["--host", "student-03", "--", cmd]);
    expect(text.stdout).toContain("student-03 | [stdout truncated: 64 KiB of 98 KiB shown]");
    expect(text.stdout).toContain("student-03 ! [stderr truncated: 64 KiB of 69 KiB shown]");
  });

  it("redacts operator secrets from output, and records an exec event without output", async () => {
    const r = await exec(["--host", "student-01", "--", `echo "value ${SECRET}"; echo TOKEN=${SECRET} >&2`]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("student-01 | value [redacted]");
    expect(r.stdout).not.toContain(SECRET);
    const events = JSON.parse((await runCli(["events", W, "--output", "json"], { env })).stdout) as {
      events: { type: string; detail: Record<string, unknown> }[];
    };
    const last = events.events.filter((e) => e.type === "exec").at(-1);
    expect(last?.detail).toMatchObject({ hosts: 1, summary: "1 ok", by: expect.any(String) });
    expect(String(last?.detail.command)).toContain("[redacted]");
    expect(JSON.stringify(events)).not.toContain(SECRET);
  });

  it("refuses bad input with the field and what was expected", async () => {
    const none = await exec([]);
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("give the command after --");
    const zero = await exec(["--timeout", "0", "--", "true"]);
    expect(zero.code).toBe(2);
    expect(zero.stderr).toContain("--timeout expects a whole number from 1 to 3600, got 0");
    const res = await fetch(`${rt.url}/api/workshops/${W}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      body: JSON.stringify({ command: "true", timeoutSeconds: 99999, hosts: ["student-99"] }),
    });
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { details: { path: string; message: string }[] } };
    expect(body.error.details.map((d) => d.path)).toContain("timeoutSeconds");
    const unknown = await fetch(`${rt.url}/api/workshops/${W}/exec`, {
      method: "POST",
      headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      body: JSON.stringify({ command: "true", hosts: ["student-99"] }),
    });
    expect(unknown.status).toBe(400);
    expect(JSON.stringify(await unknown.json())).toContain("student-99");
  });

  it("is a job: 202 with its id and Location, followed with GET while it runs, cancelled with its commands ended", async () => {
    const api = (path: string, init: RequestInit = {}) =>
      fetch(`${rt.url}/api/workshops/${W}/exec${path}`, {
        ...init,
        headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
      });
    const started = await api("", {
      method: "POST",
      body: JSON.stringify({
        command: "echo begun; sleep 43; echo never",
        hosts: ["student-02", "student-03"],
        concurrency: 1,
        timeoutSeconds: 3600,
      }),
    });
    expect(started.status).toBe(202);
    const job = (await started.json()) as ExecJob;
    expect(job.jobId).toMatch(/^exj_[0-9A-Z]{26}$/);
    expect(started.headers.get("location")).toBe(`/api/workshops/${W}/exec/${job.jobId}`);
    expect(job).toMatchObject({
      state: "running",
      ok: false,
      endedAt: null,
      timeoutSeconds: 3600,
      concurrency: 1,
    });
    // One host at a time: student-02 runs, student-03 waits.
    const running = await waitFor("student-02 to run", async () => {
      const j = (await (await api(`/${job.jobId}`)).json()) as ExecJob;
      return j.running.includes("student-02") ? j : undefined;
    });
    expect(running).toMatchObject({ state: "running", hosts: [], waiting: 1 });
    const hostDir = join(rt.dataDir, "hosts", W, "student-02");
    await waitFor("the command to run on the host", () =>
      processesUnder(hostDir).length > 0 ? true : undefined,
    );
    const cancel = await api(`/${job.jobId}/cancel`, { method: "POST" });
    expect(cancel.status).toBe(202);
    expect(((await cancel.json()) as ExecJob).state).toMatch(/^(cancelling|cancelled)$/);
    const end = await waitFor("the job to end", async () => {
      const j = (await (await api(`/${job.jobId}`)).json()) as ExecJob;
      return j.state === "cancelled" ? j : undefined;
    });
    expect(end.hosts.map((h) => [h.host, h.status])).toEqual([
      ["student-02", "cancelled"],
      ["student-03", "skipped"],
    ]);
    expect(end.hosts[1]?.reason).toBe("not started: the job was cancelled");
    expect(end.summary.text).toBe("0 ok, 1 cancelled, 1 skipped");
    expect(end.endedAt).not.toBeNull();
    // Ended on the host, not only given up on.
    expect(processesUnder(hostDir)).toEqual([]);
    // A job that has ended is answered as it is; an unknown one is a 404, a malformed id a 400 naming it.
    expect(((await (await api(`/${job.jobId}/cancel`, { method: "POST" })).json()) as ExecJob).state).toBe(
      "cancelled",
    );
    expect((await api("/exj_01J9ZK3M4R7S8T9V0W1X2Y3Z4A")).status).toBe(404);
    const bad = await api("/run_nope");
    expect(bad.status).toBe(400);
    expect(JSON.stringify(await bad.json())).toContain("jobId");
  });

  it("the CLI prints each host as its result arrives, and Ctrl-C cancels the job and says how to look at it", async () => {
    const cli = startCli(
      ["exec", W, "-j", "3", "--", 'case "$PWD" in */student-01) echo quick;; *) sleep 44;; esac'],
      { env },
    );
    await waitFor("student-01's line before the others end", () =>
      cli.out.stdout.includes("student-01 | quick") ? true : undefined,
    );
    expect(cli.out.stdout).not.toContain("student-02");
    cli.child.kill("SIGINT");
    const code = await cli.exited;
    expect(code).toBe(1);
    expect(cli.out.stdout).toMatch(
      /cancelling exj_[0-9A-Z]{26}: the commands still running are ended on their hosts/,
    );
    expect(cli.out.stdout).toContain("student-02 # cancelled: cancelled while it ran");
    expect(cli.out.stdout.trimEnd().split("\n").at(-1)).toBe("cancelled: 1 ok, 2 cancelled");
    for (const host of ["student-02", "student-03"])
      expect(processesUnder(join(rt.dataDir, "hosts", W, host))).toEqual([]);
  });
});

describe("labfleet exec's output in all", () => {
  const MANY = "execcap";
  const COUNT = 18;
  const ids = Array.from({ length: COUNT }, (_, i) => `student-${String(i + 1).padStart(2, "0")}`);
  beforeAll(async () => {
    writeFileSync(
      join(work, "many.yaml"),
      workshopYaml({ name: MANY, lab: "instant", count: COUNT, concurrency: COUNT }),
    );
    const up = await runCli(["up", "-f", join(work, "many.yaml")], { env });
    expect(up.code, up.stderr).toBe(0);
  }, 180_000);
  afterAll(async () => {
    await runCli(["down", MANY, "--yes"], { env });
  });

  it("is cut at 2 MiB across the hosts, in host order, and says so", async () => {
    // Each host prints past its own caps (64 KiB of stdout and of stderr kept): 16 hosts fill the 2 MiB.
    const cmd = "head -c 70000 /dev/zero | tr '\\0' o; head -c 70000 /dev/zero | tr '\\0' e >&2";
    const r = await runCli(["exec", MANY, "-j", "18", "--output", "json", "--", cmd], { env });
    expect(r.code, r.stderr).toBe(0);
    const report = JSON.parse(r.stdout) as ExecJob;
    expect(report.hosts.map((h) => [h.host, h.status, h.stdoutBytes, h.stderrBytes])).toEqual(
      ids.map((id) => [id, "ok", 70_000, 70_000]),
    );
    const kept = report.hosts.map((h) => Buffer.byteLength(h.stdout) + Buffer.byteLength(h.stderr));
    expect(kept.reduce((a, b) => a + b, 0)).toBe(2 * 1024 * 1024);
    for (const h of report.hosts.slice(0, 16)) {
      expect(h.stdout).toBe("o".repeat(65_536));
      expect(h.stderr).toBe("e".repeat(65_536));
    }
    for (const h of report.hosts.slice(16)) {
      expect([h.stdout, h.stderr]).toEqual(["", ""]);
      expect([h.stdoutTruncated, h.stderrTruncated]).toEqual([true, true]);
    }
    expect(report.notes).toContain("the answer holds at most 2097152 bytes of output in all");
    expect(report.summary.text).toBe("18 ok");

    const text = await runCli(["exec", MANY, "--", cmd], { env });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain("student-16 | [stdout truncated: 64 KiB of 69 KiB shown]\n");
    expect(text.stdout).toContain("student-17 | [stdout truncated: 0 KiB of 69 KiB shown]\n");
    expect(text.stdout).toContain("student-18 ! [stderr truncated: 0 KiB of 69 KiB shown]\n");
    expect(text.stdout).not.toMatch(/^student-17 \| o/m);
    const tail = text.stdout.trimEnd().split("\n").slice(-2);
    expect(tail).toEqual(["note: the answer holds at most 2097152 bytes of output in all", "18 ok"]);
  }, 180_000);
});
