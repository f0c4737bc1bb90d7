import { AsyncLocalStorage } from "node:async_hooks";
import { VisibleError } from "./errors.ts";

/**
 * The time an entry point has for its work, as context (like the actor): a Lambda handler is given its
 * function's remaining time, and every wait below it (each command on a host, each step of a fan-out) is bounded
 * so the function ends well inside its timeout instead of being killed mid-step. Locally there is no deadline
 * and nothing changes.
 */

const storage = new AsyncLocalStorage<number>();

/**
 * The share of a Lambda's remaining time an invocation plans to use: the rest is headroom for what cannot be
 * bounded (the store's writes after the last host, a slow cold start), so a function ends well inside its timeout.
 */
export const WORK_SHARE = 0.5;

/** Runs `fn` with a deadline (epoch ms); an earlier deadline already in force is kept. */
export function withDeadline<T>(at: number, fn: () => T): T {
  const current = storage.getStore();
  return storage.run(current === undefined ? at : Math.min(current, at), fn);
}

/** The deadline in force (epoch ms), if any. */
export function currentDeadline(): number | undefined {
  return storage.getStore();
}

/** Milliseconds left before the deadline; Infinity without one. */
export function timeLeft(now = Date.now()): number {
  const at = storage.getStore();
  return at === undefined ? Number.POSITIVE_INFINITY : at - now;
}

/**
 * The deadline for a Lambda invocation given its remaining time (Lambda's `context.getRemainingTimeInMillis()`):
 * WORK_SHARE of it from now.
 */
export function lambdaDeadline(remainingMs: number, now = Date.now()): number {
  return now + Math.max(0, remainingMs) * WORK_SHARE;
}

/** Thrown instead of starting a step after the deadline: the step is left for the next invocation. */
export function outOfTime(step: string): VisibleError {
  return new VisibleError(
    "host",
    "host.out_of_time",
    `${step} was not started: the time this step may take ran out`,
  );
}
