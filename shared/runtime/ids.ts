import { ulid } from "ulid";
import { z } from "zod";

const prefixes = {
  run: "run",
  schedule: "sch",
  request: "req",
  rollout: "rol",
  command: "cmd",
  exec: "exj",
} as const;

/** Prefixed, time-ordered ids: `run_01J...`. */
export function createID(kind: keyof typeof prefixes): string {
  return `${prefixes[kind]}_${ulid()}`;
}

/** What createID(kind) makes, for ids that come from outside (an API path): the prefix and a ULID. */
export function idSchema(kind: keyof typeof prefixes) {
  const prefix = prefixes[kind];
  return z.string().regex(new RegExp(`^${prefix}_[0-9A-HJKMNP-TV-Z]{26}$`), {
    error: `expected a ${kind} id: ${prefix}_ and 26 letters and digits`,
  });
}
