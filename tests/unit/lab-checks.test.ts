import { describe, expect, it } from "vitest";
import { CHECK_OUTPUT_BYTES, checksScript, parseChecks } from "../../shared/fleet/lab-checks.ts";
import { Workshop } from "../../shared/workshop/schema.ts";

const spec = Workshop.parse({
  name: "w",
  lab: {
    source: "/tmp/lab",
    setup: "true",
    checks: [
      { name: "one", run: "echo 'it''s' && true", hint: "h" },
      { name: "two", run: "sleep 9", timeout_seconds: 3 },
    ],
  },
  provider: { type: "local", count: 1 },
});
const checks = spec.lab.checks;
const b64 = (s: string) => Buffer.from(s).toString("base64");

describe("the checks' host command", () => {
  it("runs every check under its own timeout, in the lab folder, quoted, and keeps a bounded tail", () => {
    const script = checksScript(spec, "'/h/lab'", "student-01");
    expect(script).toContain(`timeout -k 2 10 bash -c 'echo '\\''it'\\'''\\''s'\\'' && true'`);
    expect(script).toContain("timeout -k 2 3 bash -c 'sleep 9'");
    expect(script.match(/cd '\/h\/lab' && LABFLEET_STATUS=/g)).toHaveLength(2);
    expect(script).toContain(`tail -c ${CHECK_OUTPUT_BYTES}`);
    expect(script).toContain("LABFLEET_HOST_ID='student-01'");
  });

  it("reads each check's exit code and output; a timed-out check is marked; secrets and escapes go", () => {
    const out = `@@check 0 0\n${b64("ok\n")}\n@@check 1 124\n${b64("tok-1234 \x1b[31mred\x1b[0m\x07\n")}\n@@end\n`;
    const r = parseChecks(checks, out, (t) => t.replaceAll("tok-1234", "[redacted]"));
    expect(r).toEqual([
      { name: "one", passed: true, timedOut: false, exitCode: 0, output: "ok" },
      { name: "two", passed: false, timedOut: true, exitCode: 124, output: "[redacted] red" },
    ]);
  });

  it("refuses an answer cut before its end line, and fails a check that reported no exit code", () => {
    expect(() => parseChecks(checks, `@@check 0 0\n${b64("ok")}\n`, (t) => t)).toThrow(/cut off/);
    const r = parseChecks(checks, `@@check 0 0\n\n@@end\n`, (t) => t);
    expect(r[1]).toMatchObject({ name: "two", passed: false, exitCode: -1 });
  });
});
