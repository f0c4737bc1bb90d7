import { describe, expect, it } from "vitest";
import { type CheckItem, checkExitCode, checkReport, checkSummary } from "../../shared/fleet/check.ts";

/** The summary line of a check (CLI and console): hosts are counted as hosts, the workshop-level item apart. */

const item = (hostId: string, stage: CheckItem["stage"], action: CheckItem["action"]): CheckItem => ({
  hostId,
  stage,
  action,
});

describe("checkSummary", () => {
  it("does not count the workshop-level item as a host", () => {
    const report = checkReport("ws", "up", [
      item("student-01", "provision", "create"),
      item("student-02", "provision", "create"),
      item("student-01", "deploy", "create"),
      item("student-02", "deploy", "create"),
      item("student-01", "wait", "reuse"),
      item("student-02", "wait", "reuse"),
      item("*", "publish", "promote"),
    ]);
    expect(checkSummary(report)).toEqual({
      hostChanges: 4,
      hosts: 2,
      workshopChanges: 1,
      workshopStages: ["publish"],
      text: "4 changes on 2 hosts and 1 to the workshop (publish)",
    });
    expect(checkExitCode(report)).toBe(2);
  });

  it("says when only the workshop would change, or one host, or nothing", () => {
    const onlyPublish = checkReport("ws", "up", [
      item("student-01", "deploy", "reuse"),
      item("*", "publish", "promote"),
    ]);
    expect(checkSummary(onlyPublish)).toMatchObject({ hosts: 0, text: "1 change to the workshop (publish)" });
    const oneHost = checkReport("ws", "deploy", [
      item("student-01", "deploy", "rebuild"),
      item("student-02", "deploy", "skip"),
    ]);
    expect(checkSummary(oneHost).text).toBe("1 change on 1 host");
    const none = checkReport("ws", "retry", [item("student-01", "deploy", "reuse")]);
    expect(checkSummary(none).text).toBe("nothing would change");
    expect(checkExitCode(none)).toBe(0);
  });
});
