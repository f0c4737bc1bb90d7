import { ulid } from "ulid";

const prefixes = { run: "run", schedule: "sch", request: "req" } as const;

/** Prefixed, time-ordered ids: `run_01J...`. */
export function createID(kind: keyof typeof prefixes): string {
  return `${prefixes[kind]}_${ulid()}`;
}
