import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import * as format from "../../shared/runtime/time-format.ts";
import { serverTimeText } from "../../web/time.tsx";
import { TIME_FORMAT_SOURCE_SHA256, timeFormatJs } from "../../web/time-format-js.ts";

/**
 * The pages' times: web/time-format-js.ts is shared/runtime/time-format.ts compiled for the browser (`npm run
 * time-script`), so the console and the portal show times as the CLI does; without a script a page reads UTC.
 */

type Format = typeof format;

/** The compiled script run as a browser runs it: a fresh global scope, nothing of Node's. */
function inBrowserScope(): Format {
  const scope: { labfleetTime?: Format } = {};
  runInNewContext(timeFormatJs, scope);
  if (!scope.labfleetTime) throw new Error("the script defined no labfleetTime");
  return scope.labfleetTime;
}

describe("the browser's copy of time-format.ts", () => {
  it("is compiled from the time-format.ts in the tree (else: npm run time-script)", () => {
    const source = readFileSync(new URL("../../shared/runtime/time-format.ts", import.meta.url));
    expect(createHash("sha256").update(source).digest("hex"), "run npm run time-script").toBe(
      TIME_FORMAT_SOURCE_SHA256,
    );
  });

  it("formats every kind of time as the CLI does, in any zone", () => {
    const browser = inBrowserScope();
    const now = Date.parse("2026-12-01T21:00:00Z");
    const times = [
      "2026-12-01T21:00:00.400Z",
      "2026-12-01T20:57:00Z",
      "2026-12-02T02:58:30Z",
      "2026-12-03T09:15:07Z",
      "2026-11-30T23:59:59Z",
      "not a time",
    ];
    for (const timeZone of ["UTC", "Asia/Kolkata", "America/Los_Angeles"])
      for (const t of times) {
        for (const seconds of [false, true])
          expect(browser.formatClock(t, now, { timeZone, seconds }), `${t} ${timeZone}`).toBe(
            format.formatClock(t, now, { timeZone, seconds }),
          );
        expect(browser.formatClock("2026-12-03T09:15:07Z", now, { timeZone: "Asia/Kolkata" })).toBe(
          "2026-12-03 14:45",
        );
        expect(browser.formatWhen(t, now, { timeZone })).toBe(format.formatWhen(t, now, { timeZone }));
      }
    for (const t of times) expect(browser.formatRelative(t, now)).toBe(format.formatRelative(t, now));
    for (const s of [0, 59, 185, 3900, 183_600])
      expect(browser.formatDuration(s)).toBe(format.formatDuration(s));
    // Spot checks, so the comparison above cannot pass on two equally wrong copies.
    expect(browser.formatClock("2026-12-01T20:57:00Z", now, { timeZone: "Asia/Kolkata" })).toBe("02:27");
    expect(browser.formatWhen("2026-12-02T02:58:30Z", now, { timeZone: "UTC" })).toBe(
      "2026-12-02 02:58 (in 5 h 58 min)",
    );
    expect(browser.formatRelative("2026-12-01T20:57:00Z", now)).toBe("3 min ago");
  });
});

describe("a time's text without a script", () => {
  const now = new Date("2026-12-01T21:00:00Z");
  it("is the date and time in UTC, said so, to the second for activity entries", () => {
    expect(serverTimeText("2026-12-01T20:57:09.123Z", "clock", now)).toBe("2026-12-01 20:57 UTC");
    expect(serverTimeText("2026-12-01T20:57:09.123Z", "when", now)).toBe("2026-12-01 20:57 UTC");
    expect(serverTimeText("2026-12-01T20:57:09.123Z", "exact", now)).toBe("2026-12-01 20:57:09 UTC");
    expect(serverTimeText("2026-12-01T20:57:09.123Z", "relative", now)).toBe("2 min ago");
    expect(serverTimeText("soon", "clock", now)).toBe("");
  });
});
