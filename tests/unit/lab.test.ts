import { describe, expect, it } from "vitest";
import { judge, ProbeCutError, parsePhases, parseProbe } from "../../shared/fleet/lab.ts";

/** A probe's output as the host prints it: the verdict, the sections, and the verdict again on the end line. */
const probe = (head: string, status = "", log = "") =>
  `${head}\n@@status\n${status}\n@@log\n${log}\n@@end ${head.replace(/\n/g, " ")}\n`;

describe("lab contract: reading a host's records", () => {
  it("parses the probe sections", () => {
    const p = parseProbe(
      probe("pid=42\nalive=1\nrc=\nrc_age=\nstarted=1", '{"phase":"a","state":"running"}\n', "line 1\n"),
    );
    expect(p).toEqual({
      pid: 42,
      alive: true,
      rc: undefined,
      rcAgeSeconds: undefined,
      started: true,
      statusLines: ['{"phase":"a","state":"running"}'],
      logTail: ["line 1"],
    });
  });

  it("reads which run started the setup, so a resumed forced run knows its own", () => {
    const head = "pid=42 alive=1 rc= rc_age= started=1 run=run_01JABCDEF";
    expect(parseProbe(probe(head)).runId).toBe("run_01JABCDEF");
    expect(parseProbe(probe("pid=42 alive=1 rc= rc_age= started=1 run=")).runId).toBeUndefined();
  });

  it("takes the verdict from the end line, so a probe cut at its start still reads right", () => {
    const full = probe("pid=42 alive=1 rc= rc_age= started=1", '{"phase":"a","state":"running"}', "x");
    // A transport that keeps the end of a long output (labfleet's SSM wrapper) drops the first lines.
    const cutFront = full.slice(full.indexOf('{"phase"'));
    expect(parseProbe(cutFront)).toMatchObject({ pid: 42, alive: true, started: true, rc: undefined });
  });

  it("refuses a probe whose end line is missing (SSM keeps the first 24,000 characters) instead of reading it as not started", () => {
    const full = probe(
      "pid=42 alive=1 rc= rc_age= started=1",
      '{"phase":"a","state":"running"}\n'.repeat(3),
      "log",
    );
    const cutEnd = full.slice(0, full.indexOf("@@log"));
    expect(() => parseProbe(cutEnd)).toThrow(ProbeCutError);
    expect(() => parseProbe(cutEnd)).toThrow(/cut off/);
    expect(() => parseProbe("")).toThrow(ProbeCutError);
  });

  it("orders phases by first appearance with their latest state, skipping bad lines", () => {
    const lines = [
      '{"phase":"fetch","state":"running"}',
      "not json",
      '{"phase":"build"}',
      '{"phase":"fetch","state":"done"}',
      '{"state":"x"}',
      "[1]",
    ];
    expect(parsePhases(lines)).toEqual({
      phases: [
        { name: "fetch", state: "done" },
        { name: "build", state: "running" },
      ],
      current: "fetch",
    });
    expect(parsePhases([])).toEqual({ phases: [] });
  });

  it("judges exit codes, live wrappers and dead wrappers", () => {
    const base = { alive: false, started: true, statusLines: [], logTail: [] };
    expect(judge({ ...base, rc: 0 })).toEqual({ state: "complete" });
    expect(judge({ ...base, alive: true })).toEqual({ state: "running" });
    const failed = judge({ ...base, rc: 3, logTail: ["a", "b", "c", "d", "e", "f: boom"] });
    expect(failed).toEqual({
      state: "failed",
      reason: "setup exited with code 3; last lines of the log:\nb\nc\nd\ne\nf: boom",
    });
    const dead = judge({ ...base, pid: 99 });
    expect(dead.state).toBe("failed");
    expect(dead.state === "failed" && dead.reason).toMatch(/wrapper died without an exit code \(pid 99\)/);
    expect(judge({ ...base, started: false })).toEqual({ state: "not_started" });
  });
});
