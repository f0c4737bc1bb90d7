import { describe, expect, it } from "vitest";
import {
  formatClock,
  formatDuration,
  formatRelative,
  formatTimeLeft,
  formatWhen,
} from "../../shared/runtime/time-format.ts";

const NOW = Date.parse("2026-12-01T10:00:00.000Z");
const MIN = 60_000;

describe("times as people read them", () => {
  it("writes durations from seconds to days, minutes and seconds two digits wide", () => {
    expect(formatDuration(0)).toBe("0 s");
    expect(formatDuration(45)).toBe("45 s");
    expect(formatDuration(185)).toBe("3 min 05 s");
    expect(formatDuration(3900)).toBe("1 h 05 min");
    expect(formatDuration(26 * 3600 + 120)).toBe("1 d 02 h");
    expect(formatDuration(undefined)).toBe("");
    expect(formatDuration(-1)).toBe("");
  });

  it("writes times relative to now, ahead and behind", () => {
    expect(formatRelative(NOW + (5 * 60 + 58) * MIN, NOW)).toBe("in 5 h 58 min");
    expect(formatRelative(new Date(NOW - 3 * MIN - 20_000), NOW)).toBe("3 min ago");
    expect(formatRelative(NOW + 40_000, NOW)).toBe("in 40 s");
    expect(formatRelative(NOW + 300, NOW)).toBe("now");
    expect(formatRelative(NOW + (50 * 60 + 5) * MIN, NOW)).toBe("in 2 d 2 h");
    expect(formatRelative("not a time", NOW)).toBe("");
    expect(formatTimeLeft(NOW + 61 * MIN, NOW)).toBe("1 h 01 min");
    expect(formatTimeLeft(NOW - 1, NOW)).toBe("over");
  });

  it("writes clock times in the reader's zone, with the date only when it is not today there", () => {
    const at = "2026-12-01T12:43:07.000Z";
    expect(formatClock(at, NOW, { timeZone: "UTC" })).toBe("12:43");
    expect(formatClock(at, NOW, { timeZone: "UTC", seconds: true })).toBe("12:43:07");
    expect(formatClock(at, NOW, { timeZone: "Asia/Kolkata" })).toBe("18:13");
    // Now (10:00 UTC) is 23:00 on the 1st in Auckland; 12:43 UTC is already the 2nd there.
    expect(formatClock(at, NOW, { timeZone: "Pacific/Auckland" })).toBe("2026-12-02 01:43");
    expect(formatClock("2026-11-29T08:05:00Z", NOW, { timeZone: "UTC" })).toBe("2026-11-29 08:05");
    expect(formatClock("2026-12-01T00:05:00Z", NOW, { timeZone: "UTC" })).toBe("00:05");
    expect(formatWhen(at, NOW, { timeZone: "UTC" })).toBe("12:43 (in 2 h 43 min)");
    expect(formatClock("", NOW)).toBe("");
  });

  it("uses the process's zone (TZ) when none is given", () => {
    const local = new Date("2026-12-01T12:43:00.000Z");
    const hh = String(local.getHours()).padStart(2, "0");
    const mm = String(local.getMinutes()).padStart(2, "0");
    expect(formatClock(local, local)).toBe(`${hh}:${mm}`);
  });
});
