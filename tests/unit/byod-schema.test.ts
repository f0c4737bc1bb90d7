import { describe, expect, it } from "vitest";
import { isByod } from "../../shared/portal/byod.ts";
import { validateWorkshopYaml } from "../../shared/workshop/load.ts";

/** `portal.enrollment: claim` (bring your own device) in workshop.yaml, and the enrolled provider's `approve`. */
const base = (provider: string, portal = "  enabled: true\n  enrollment: claim\n") => `name: byo
lab:
  source: ./lab
  setup: bash setup.sh
provider:
${provider}
portal:
${portal}`;

describe("portal.enrollment: claim", () => {
  it("is accepted with provider.type enrolled, whose machines start approved unless approve says manual", () => {
    const auto = validateWorkshopYaml(base("  type: enrolled\n  expected: 20"));
    expect(auto.ok).toBe(true);
    if (!auto.ok) return;
    expect(auto.workshop.portal.enrollment).toBe("claim");
    expect(auto.workshop.provider).toMatchObject({ type: "enrolled", approve: "auto" });
    expect(isByod(auto.workshop)).toBe(true);
    const manual = validateWorkshopYaml(base("  type: enrolled\n  approve: manual"));
    expect(manual.ok && manual.workshop.provider).toMatchObject({ approve: "manual" });
  });

  it("is refused with any other provider, at portal.enrollment, saying what it needs", () => {
    const r = validateWorkshopYaml(base("  type: local\n  count: 2"));
    expect(r.ok).toBe(false);
    if (r.ok) return;
    expect(r.errors.map((e) => [e.path, e.message])).toEqual([
      [
        "portal.enrollment",
        "expected portal.enrollment: claim only with provider.type enrolled (students enroll their own machines), got provider.type local",
      ],
    ]);
  });

  it("is refused with the roster mode, and a value other than claim is refused", () => {
    const roster = validateWorkshopYaml(
      base("  type: enrolled", "  enabled: true\n  enrollment: claim\n  mode: roster\n"),
    );
    expect(roster.ok || roster.errors.map((e) => e.path)).toEqual(["portal.mode"]);
    const other = validateWorkshopYaml(base("  type: enrolled", "  enrollment: token\n"));
    expect(other.ok || other.errors.map((e) => [e.path, e.message])).toEqual([
      ["portal.enrollment", expect.stringContaining("expected claim")],
    ]);
    const approve = validateWorkshopYaml(base("  type: enrolled\n  approve: maybe"));
    expect(approve.ok || approve.errors.map((e) => e.path)).toEqual(["provider.approve"]);
  });

  it("is off by default: a workshop without it hands out the fleet's labs", () => {
    const r = validateWorkshopYaml(base("  type: enrolled", "  enabled: true\n"));
    expect(r.ok && isByod(r.workshop)).toBe(false);
  });
});
