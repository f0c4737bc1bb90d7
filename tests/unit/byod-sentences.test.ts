import { describe, expect, it } from "vitest";
import { eventSentence } from "../../shared/fleet/event-sentences.ts";
import type { EventView } from "../../shared/fleet/events.ts";

/** Activity sentences of a BYOD workshop: a machine enrolled from a join page, and a removed machine's claim. */
const event = (type: EventView["type"], detail: Record<string, unknown>): EventView => ({
  id: "01J0",
  workshop: "w",
  type,
  at: "2026-12-01T10:00:00.000Z",
  hostId: "ada-laptop",
  runId: null,
  detail,
});

describe("BYOD activity", () => {
  it("says a student enrolled their own machine as their lab", () => {
    expect(eventSentence(event("lab.claimed", { how: "byod", student: "Ada Lovelace" }))).toBe(
      "Ada Lovelace enrolled their own machine as lab ada-laptop (from their join page).",
    );
  });

  it("says a removed machine's claim ended, and that the removal released it", () => {
    expect(eventSentence(event("lab.released", { how: "removed", student: "Ada Lovelace" }))).toBe(
      "Ada Lovelace's claim on lab ada-laptop ended: its machine was removed from the workshop.",
    );
    expect(
      eventSentence(event("host.removed", { by: "Alice", student: "Ada Lovelace", released: true })),
    ).toContain("(Ada Lovelace's lab, now released): its agent forgets the workshop.");
  });
});
