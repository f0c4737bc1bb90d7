import { z } from "zod";
import { withActor } from "./actor.ts";

/**
 * A workflow task handler: parse the payload, act as the system, call one domain function.
 * Lambda calls it with the payload; the local executor calls the same function in-process.
 */
export function taskHandler<S extends z.ZodType, R>(
  name: string,
  schema: S,
  body: (input: z.output<S>) => Promise<R>,
) {
  return async (event: unknown): Promise<R> => {
    const input = schema.parse(event);
    return withActor({ type: "system", id: `task:${name}` }, () => body(input));
  };
}

/** The `{Error, Cause}` a Catch puts in the state; Lambda's Cause is JSON with errorMessage. */
export const CaughtError = z.object({ Error: z.string(), Cause: z.string().optional() });

export function causeMessage(caught: z.output<typeof CaughtError>): string {
  const cause = caught.Cause ?? "";
  try {
    const parsed = JSON.parse(cause) as { errorMessage?: unknown };
    if (typeof parsed.errorMessage === "string") return parsed.errorMessage;
  } catch {
    // not JSON: a plain message
  }
  return cause || caught.Error;
}

export const WorkshopName = z.string().min(1).max(40);
export const RunId = z.string().regex(/^run_[0-9A-Z]{26}$/);
