import { describe, expect, it } from "vitest";
import { timeLeft, WARNING_REFRESH_SECONDS } from "../../shared/portal/time-left.ts";

const END = "2026-12-01T18:00:00.000Z";
const at = (msBefore: number) => new Date(Date.parse(END) - msBefore);
const MIN = 60_000;

describe("the time a workshop has left", () => {
  it("is plain until 30 minutes before the end, and asks to be read again when the warning is due", () => {
    expect(timeLeft(END, at(3 * 1440 * MIN + 2 * 60 * MIN))).toMatchObject({
      level: "time-left",
      text: "3 days 2 h",
      refreshSeconds: (3 * 1440 + 2 * 60 - 30) * 60,
    });
    expect(timeLeft(END, at(95 * MIN))).toMatchObject({
      level: "time-left",
      text: "1 h 35 min",
      refreshSeconds: 65 * 60,
    });
    expect(timeLeft(END, at(30 * MIN + 1))).toMatchObject({ level: "time-left", refreshSeconds: 1 });
  });

  it("warns from 30 minutes before the end, and more strongly from 10, counting the minutes up", () => {
    expect(timeLeft(END, at(30 * MIN))).toMatchObject({ level: "soon", minutes: 30, text: "30 min" });
    expect(timeLeft(END, at(29 * MIN + 1))).toMatchObject({ level: "soon", minutes: 30 });
    expect(timeLeft(END, at(10 * MIN + 1))).toMatchObject({ level: "soon", minutes: 11 });
    expect(timeLeft(END, at(10 * MIN))).toMatchObject({ level: "urgent", minutes: 10, text: "10 min" });
    expect(timeLeft(END, at(1))).toMatchObject({ level: "urgent", minutes: 1, text: "1 min" });
  });

  it("during a warning, is read again every minute and at the end", () => {
    expect(timeLeft(END, at(20 * MIN))?.refreshSeconds).toBe(WARNING_REFRESH_SECONDS);
    expect(timeLeft(END, at(20_000))?.refreshSeconds).toBe(20);
    expect(timeLeft(END, at(1))?.refreshSeconds).toBe(1);
  });

  it("is over at the end, with nothing more to look again for; and no time for an expiry that is none", () => {
    expect(timeLeft(END, at(0))).toEqual({
      level: "over",
      expiry: END,
      minutes: 0,
      text: undefined,
      refreshSeconds: undefined,
    });
    expect(timeLeft(END, at(-MIN))?.level).toBe("over");
    expect(timeLeft("soon", at(0))).toBeUndefined();
  });
});
