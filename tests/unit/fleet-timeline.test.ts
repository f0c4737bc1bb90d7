import { describe, expect, it } from "vitest";
import { approxText as approx } from "../../shared/fleet/estimate.ts";
import type { FleetLab } from "../../shared/fleet/fleet-view.ts";
import { Timeline } from "../../web/console/views/fleet.tsx";

/**
 * A host's phase timeline as the console draws it on the server: one bar per phase with a title and a label for
 * screen readers, a failed phase red and labelled in words, the time the estimate says is left as a dashed box.
 */

const T0 = Date.parse("2026-05-01T10:00:00.000Z");
const at = (s: number) => new Date(T0 + s * 1000).toISOString();

const lab = (over: Partial<FleetLab>): FleetLab => ({
  id: "student-04",
  state: "deploying",
  phase: "install",
  phasesDone: 1,
  phasesTotal: 2,
  phases: [],
  health: null,
  healthError: null,
  student: null,
  checks: null,
  expiry: null,
  deployStartedAt: at(0),
  readyAt: null,
  endedAt: null,
  error: null,
  remainingSeconds: null,
  reachable: null,
  lastSeenAt: null,
  drained: false,
  disabled: false,
  ...over,
});

const render = async (l: FleetLab, nowSeconds: number) =>
  String(await Timeline({ lab: l, scale: 200, now: new Date(T0 + nowSeconds * 1000) }).toString());

describe("the phase timeline", () => {
  it("draws one titled bar per phase and the estimate's time left as a dashed box", async () => {
    const svg = await render(
      lab({
        phases: [
          { name: "prepare", state: "done", startedAt: at(5), endedAt: at(35) },
          { name: "install", state: "running", startedAt: at(35) },
        ],
        remainingSeconds: 180,
      }),
      100,
    );
    expect(svg).toMatch(
      /^<svg class="timeline" role="img" aria-label="student-04 timeline: prepare done 30 s, install running 1 min 05 s; about 3 min to go"/,
    );
    expect(svg.match(/<g class="bar /g)).toHaveLength(2);
    expect(svg).toContain(
      'aria-label="student-04: phase prepare, 30 s (from 5 s after the deploy&#39;s start)"',
    );
    expect(svg).toContain("<title>student-04: phase install, running for 1 min 05 s");
    // 240 px for 200 s: prepare from 6 px, 36 px wide.
    expect(svg).toMatch(/<rect x="6" y="3" width="36" height="16" fill="#0b57d0"/);
    expect(svg).toContain('class="bar-left"');
    expect(svg).not.toContain("failed");
  });

  it("marks a failed phase in colour and in words", async () => {
    const svg = await render(
      lab({
        state: "failed",
        phases: [
          { name: "prepare", state: "done", startedAt: at(5), endedAt: at(35) },
          { name: "install", state: "running", startedAt: at(35) },
        ],
        error: "setup exited with code 7",
        endedAt: at(100),
      }),
      400,
    );
    expect(svg).toContain('data-phase="install" data-state="failed"');
    expect(svg).toContain('fill="#a4141b"');
    expect(svg).toContain(">✗ failed: install</text>");
    expect(svg).toContain("student-04: phase install, failed after 1 min 05 s");
  });

  it("says a lab has not started, and rounds estimates as estimates", async () => {
    expect(await render(lab({ deployStartedAt: null }), 10)).toContain("not started");
    expect(approx(42)).toBe("about 40 s");
    expect(approx(2)).toBe("about 5 s");
    expect(approx(14 * 60 + 20)).toBe("about 14 min");
    expect(approx(2 * 3600 + 5 * 60)).toBe("about 2 h 05 min");
  });
});
