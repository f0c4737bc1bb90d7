import { describe, expect, it } from "vitest";
import type { BoardLab } from "../../shared/portal/claims.ts";
import { BOARD_TILES_MAX, BoardPage } from "../../web/portal/views.tsx";

/** The student's board at a room's size and at a conference's: one tile per lab, then one per state. */

const labs = (n: number): BoardLab[] =>
  Array.from({ length: n }, (_, i): BoardLab => {
    const lab = `student-${String(i + 1).padStart(3, "0")}`;
    if (i % 5 === 0) return { lab, status: "claimed", firstName: "Ada" };
    if (i % 7 === 0) return { lab, status: "building" };
    if (i % 11 === 0) return { lab, status: "unavailable" };
    return { lab, status: "free" };
  });

const page = async (n: number) =>
  String(await BoardPage({ csrf: "x", open: true, labs: labs(n), now: new Date("2026-12-02T10:00:00Z") }));

describe("the portal's board", () => {
  it("shows one tile per lab up to a room's size, each with its state", async () => {
    const html = await page(BOARD_TILES_MAX);
    expect(html).toContain('aria-label="Labs"');
    expect(html.match(/<li class="(free|claimed|building|failed|unavailable)"/g)).toHaveLength(
      BOARD_TILES_MAX,
    );
    expect(html).toContain("claimed by Ada");
    // A lab that is ready but takes no claim now (a drained or silent host) is not offered as free.
    expect(html).toMatch(
      /<li class="unavailable"><span class="lab">student-012<\/span>[\s\S]*?not available now/,
    );
  });

  it("past that, one tile per state with its count, and the page stays small at 500 labs", async () => {
    const html = await page(500);
    expect(html).toContain('aria-label="Labs by state"');
    const counts = Object.fromEntries(
      [...html.matchAll(/<li class="(\w+)" data-count="\w+"><span class="lab">(\d+)<\/span>/g)].map((m) => [
        m[1],
        Number(m[2]),
      ]),
    );
    const all = labs(500);
    const of = (s: BoardLab["status"]) => all.filter((l) => l.status === s).length;
    expect(counts).toEqual({
      free: of("free"),
      claimed: of("claimed"),
      building: of("building"),
      unavailable: of("unavailable"),
    });
    expect(html).toContain(`${of("free")} of 500 labs free.`);
    // No lab's name or student's first name on a conference board, and the form is right below the tiles.
    expect(html).not.toContain("student-001");
    expect(html).not.toContain("Ada");
    expect(html.length).toBeLessThan(16 * 1024);
    expect(html).toContain('action="/claim"');
  });
});
