import { z } from "zod";
import { withActor } from "./actor.ts";
import { lambdaDeadline, withDeadline } from "./deadline.ts";

/** The part of Lambda's context a handler reads: how long the invocation has left. */
export interface InvocationContext {
  getRemainingTimeInMillis?: () => number;
}

/**
 * A workflow task handler: parse the payload, act as the system, call one domain function.
 * Lambda calls it with the payload and its context, whose remaining time becomes the work's deadline (see
 * shared/runtime/deadline.ts); the local executor calls the same function in-process, without one.
 */
export function taskHandler<S extends z.ZodType, R>(
  name: string,
  schema: S,
  body: (input: z.output<S>) => Promise<R>,
) {
  return async (event: unknown, context?: InvocationContext): Promise<R> => {
    const input = schema.parse(event);
    const run = () => withActor({ type: "system", id: `task:${name}` }, () => body(input));
    const remaining = context?.getRemainingTimeInMillis?.();
    return remaining === undefined ? run() : withDeadline(lambdaDeadline(remaining), run);
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
