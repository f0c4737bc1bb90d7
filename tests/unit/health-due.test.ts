import { describe, expect, it } from "vitest";
import { healthDue } from "../../shared/fleet/health.ts";
import type { HostItem } from "../../shared/store/entities.ts";
import { parseWorkshopYaml, validateWorkshopYaml } from "../../shared/workshop/load.ts";

const yaml = (lab: string) => `name: w
lab:
  source: ./lab
  setup: bash setup.sh
${lab}provider:
  type: local
  count: 1
`;
const spec = (lab: string) => parseWorkshopYaml(yaml(lab));

const READY_AT = "2026-12-01T10:00:00.000Z";
const host = (over: Partial<HostItem> = {}) =>
  ({
    workshop: "w",
    hostId: "student-01",
    provider: "local",
    state: "ready",
    address: "/tmp/h",
    readyAt: READY_AT,
    createdAt: READY_AT,
    updatedAt: READY_AT,
    ...over,
  }) as HostItem;
const at = (seconds: number) => new Date(Date.parse(READY_AT) + seconds * 1000);

describe("when a ready lab's in-use health check is due", () => {
  const checked = spec("  health: test -f built\n");

  it("defaults to every 180 s after the lab became ready, then after its last check", () => {
    expect(checked.lab.health_interval_seconds).toBe(180);
    expect(healthDue(checked, host(), at(179))).toBe(false);
    expect(healthDue(checked, host(), at(180))).toBe(true);
    const later = host({ healthCheckedAt: at(200).toISOString() });
    expect(healthDue(checked, later, at(379))).toBe(false);
    expect(healthDue(checked, later, at(380))).toBe(true);
  });

  it("never for a lab without lab.health, with the interval 0, not ready, or never found ready by a poll", () => {
    expect(healthDue(spec(""), host(), at(1000))).toBe(false);
    expect(healthDue(spec("  health: test -f built\n  health_interval_seconds: 0\n"), host(), at(1000))).toBe(
      false,
    );
    expect(healthDue(checked, host({ state: "deploying" }), at(1000))).toBe(false);
    expect(healthDue(checked, host({ address: undefined }), at(1000))).toBe(false);
    expect(healthDue(checked, host({ readyAt: undefined }), at(1000))).toBe(false);
  });

  it("refuses an interval out of range, naming the field", () => {
    const r = validateWorkshopYaml(yaml("  health: test -f built\n  health_interval_seconds: 5000\n"));
    expect(r.ok).toBe(false);
    expect(r.ok ? [] : r.errors.map((e) => [e.path, e.message])).toEqual([
      [
        "lab.health_interval_seconds",
        "expected seconds between health checks of ready labs while the workshop runs (0: none): a whole number from 0 to 3600",
      ],
    ]);
  });
});
