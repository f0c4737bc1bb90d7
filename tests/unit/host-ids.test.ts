import { describe, expect, it } from "vitest";
import { hostIdsOf } from "../../shared/providers/types.ts";
import { parseWorkshopYaml } from "../../shared/workshop/load.ts";

const spec = (count: number) =>
  parseWorkshopYaml(
    `name: ids\nlab:\n  source: ./lab\n  setup: ./setup.sh\nprovider:\n  type: local\n  count: ${count}\n`,
  );

describe("generated host ids", () => {
  it("keep two digits at least and never change as the count grows past 99", () => {
    const small = hostIdsOf(spec(99));
    const large = hostIdsOf(spec(500));
    expect(small.slice(0, 2)).toEqual(["student-01", "student-02"]);
    expect(large.slice(0, 99)).toEqual(small);
    expect(large.slice(98, 101)).toEqual(["student-99", "student-100", "student-101"]);
    expect(large.at(-1)).toBe("student-500");
    expect(new Set(large).size).toBe(500);
  });
});
