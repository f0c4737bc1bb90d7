import { describe, expect, it } from "vitest";
import { eventParts, eventSentence } from "../../shared/fleet/event-sentences.ts";
import type { EventView } from "../../shared/fleet/events.ts";
import { formatWhen } from "../../shared/runtime/time-format.ts";

const EXPIRY = "2026-12-01T18:30:00.000Z";
const extended = (detail: Record<string, unknown>): EventView => ({
  id: "01J0",
  workshop: "w",
  type: "workshop.extended",
  at: "2026-12-01T10:00:00.000Z",
  hostId: null,
  runId: null,
  detail,
});

describe("the extend's sentence", () => {
  it("keeps the teardown time as a time part, for each reader to show in its own zone", () => {
    expect(eventParts(extended({ by: "Alice", hours: 2, expiry: EXPIRY, ok: true }))).toEqual([
      "Alice extended the workshop by 2 h; the teardown is at ",
      { time: EXPIRY },
      ".",
    ]);
  });

  it("writes the time in the CLI's human format by default, and as the caller asks otherwise", () => {
    const e = extended({ by: "Alice", hours: 2, expiry: EXPIRY, ok: false });
    expect(eventSentence(e)).toBe(
      `Alice extended the workshop by 2 h; the teardown is at ${formatWhen(EXPIRY)} (with problems).`,
    );
    expect(eventSentence(e, (iso) => `<${iso}>`)).toBe(
      `Alice extended the workshop by 2 h; the teardown is at <${EXPIRY}> (with problems).`,
    );
    expect(eventSentence(e)).not.toContain("UTC");
  });

  it("leaves the time out when the event has none, or one that is not a time", () => {
    expect(eventSentence(extended({ by: "Alice", hours: 1 }))).toBe("Alice extended the workshop by 1 h.");
    expect(eventParts(extended({ by: "Alice", expiry: "soon" }))).toEqual(["Alice extended the workshop."]);
  });
});

describe("a rollout's sentences", () => {
  const event = (type: EventView["type"], detail: Record<string, unknown>): EventView => ({
    id: "01J1",
    workshop: "w",
    type,
    at: "2026-12-01T10:00:00.000Z",
    hostId: "student-01",
    runId: "run_1",
    detail,
  });

  it("says a lab was left on its old ref because a student claimed it during the rollout, and who", () => {
    expect(eventSentence(event("lab.update_skipped", { ref: "v2", student: "Dee Noether" }))).toBe(
      "student-01 was left on its old ref (not updated to v2): Dee Noether claimed it during the rollout.",
    );
    expect(eventSentence(event("lab.update_skipped", {}))).toBe(
      "student-01 was left on its old ref: a student claimed it during the rollout.",
    );
  });
});
