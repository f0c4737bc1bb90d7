import type { z } from "zod";
import { VisibleError } from "./errors.ts";
import { issueDetails } from "./zod.ts";

/**
 * A domain function whose input is parsed with its schema first; the schema is exposed as `.schema`
 * so the API layer builds its request validation from it.
 */
export function fn<S extends z.ZodType, R>(schema: S, body: (input: z.output<S>) => R) {
  const wrapped = (input: z.input<S>): R => {
    const parsed = schema.safeParse(input);
    if (!parsed.success) {
      throw new VisibleError("input", "input.invalid", "invalid input", issueDetails(parsed.error.issues));
    }
    return body(parsed.data);
  };
  wrapped.schema = schema;
  return wrapped;
}
