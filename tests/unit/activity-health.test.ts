import { describe, expect, it } from "vitest";
import type { EventView } from "../../shared/fleet/events.ts";
import { eventSentence } from "../../web/console/activity.ts";

const event = (type: EventView["type"], detail: Record<string, unknown> = {}): EventView => ({
  id: "01J0",
  workshop: "w",
  type,
  at: "2026-12-01T10:00:00.000Z",
  hostId: "student-01",
  runId: null,
  detail,
});

describe("the console's sentences for health while in use and swaps", () => {
  it("says which lab fails its check and why, when it passes again, and who moved where", () => {
    expect(eventSentence(event("lab.unhealthy", { reason: "exit code 1: db down" }))).toBe(
      "Lab student-01 is failing its health check: exit code 1: db down",
    );
    expect(eventSentence(event("lab.unhealthy"))).toBe("Lab student-01 is failing its health check.");
    expect(eventSentence(event("lab.healthy"))).toBe("Lab student-01 passes its health check again.");
    expect(eventSentence(event("lab.swapped", { from: "student-01", to: "student-05", name: "Ada" }))).toBe(
      "Ada swapped lab student-01 for student-05; student-01 is rebuilt.",
    );
    const byInstructor = { from: "student-01", to: "student-05", student: "Ada Lovelace", by: "Alice Admin" };
    expect(eventSentence(event("lab.swapped", byInstructor))).toBe(
      "Alice Admin swapped Ada Lovelace's lab student-01 for student-05; student-01 is rebuilt.",
    );
  });
});
