import { z } from "zod";
import { Workshop } from "./schema.ts";

/** The JSON Schema editors use to complete workshop.yaml (input shape: defaults make fields optional). */
export function workshopJsonSchema(): Record<string, unknown> {
  return {
    ...z.toJSONSchema(Workshop, { io: "input", unrepresentable: "any" }),
    title: "labfleet workshop.yaml",
    description:
      "A workshop: the lab every student gets, where the hosts come from, and the claim portal. See docs/workshop-yaml.md.",
  };
}
