import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { GetCommand } from "@aws-sdk/lib-dynamodb";
import { pause } from "../runtime/concurrency.ts";
import { VisibleError } from "../runtime/errors.ts";
import type { Store } from "./entities.ts";

/**
 * The store being unreachable: DynamoDB (DynamoDB Local in `labfleet dev`) refusing connections, dropping them
 * or not answering in time. It is told apart from every other failure in one place, here: the API and the pages
 * answer it with 503 `store.unavailable`, the local executor pauses a run on it and resumes the run when the
 * store answers again, and the scheduler tries again. Nothing else in the project looks at network error codes
 * of the store.
 */

/** How long a client should wait before it asks again (the Retry-After of a 503). */
export const STORE_RETRY_AFTER_SECONDS = 5;

/** Set on every error that comes out of the store's DynamoDB client (see `markStoreErrors`). */
const FROM_STORE = Symbol.for("labfleet.store-error");

/** Node's and undici's codes for a connection that could not be made, was cut or went silent. */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ECONNABORTED",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "EHOSTDOWN",
  "ENETUNREACH",
  "ENETDOWN",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ERR_SOCKET_CONNECTION_TIMEOUT",
  "UND_ERR_SOCKET",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_CLOSED",
]);

/**
 * The SDK's names for the same (its request handler's timeouts are `TimeoutError`s), and DynamoDB's own answer
 * that it cannot serve now (HTTP 503, which the SDK has already retried).
 */
const UNAVAILABLE_NAMES = new Set(["TimeoutError", "RequestTimeout", "ServiceUnavailable"]);

/**
 * Marks every error the client's calls end with as the store's, so that `isStoreUnreachable` never mistakes
 * another service's network error (EC2's, a git server's, an SSH host's) for the store's. Called once per
 * client, by `createStore`; the document client shares the client's middleware stack.
 */
export function markStoreErrors(client: DynamoDBClient): void {
  client.middlewareStack.add(
    (next) => async (args) => {
      try {
        return await next(args);
      } catch (err) {
        if (typeof err === "object" && err !== null && !Object.isFrozen(err))
          Object.defineProperty(err, FROM_STORE, { value: true, enumerable: false });
        throw err;
      }
    },
    { step: "initialize", name: "labfleetStoreErrors", override: true },
  );
}

function unreachableHere(e: object): boolean {
  const { code, name, $metadata } = e as { code?: unknown; name?: unknown; $metadata?: unknown };
  if (typeof code === "string" && NETWORK_CODES.has(code)) return true;
  if (typeof name === "string" && UNAVAILABLE_NAMES.has(name)) return true;
  return ($metadata as { httpStatusCode?: unknown } | undefined)?.httpStatusCode === 503;
}

/**
 * Whether `err` says the store could not be reached: a network failure (connection refused or reset, a
 * timeout) or a 503 of the store's client, found anywhere along the error's cause chain (ElectroDB wraps
 * the client's error in an ElectroError whose `cause` it is). A conditional check that failed, a validation
 * error or any error of another service is not one.
 */
export function isStoreUnreachable(err: unknown): boolean {
  let fromStore = false;
  let unreachable = false;
  const seen = new Set<unknown>();
  for (let e = err; typeof e === "object" && e !== null && !seen.has(e) && seen.size < 8; ) {
    seen.add(e);
    if ((e as Record<symbol, unknown>)[FROM_STORE]) fromStore = true;
    if (unreachableHere(e)) unreachable = true;
    // An AggregateError (a connection tried on several addresses) holds the reasons in `errors`.
    const inner = (e as { errors?: unknown }).errors;
    if (
      !unreachable &&
      Array.isArray(inner) &&
      inner.some((x) => typeof x === "object" && x && unreachableHere(x))
    )
      unreachable = true;
    e = (e as { cause?: unknown }).cause;
  }
  return fromStore && unreachable;
}

/** What a user sees instead: 503 with a stable code; the message holds nothing of the network. */
export function storeUnavailable(): VisibleError {
  return new VisibleError(
    "unavailable",
    "store.unavailable",
    `the store is unreachable: labfleet cannot read or write its data right now; try again in ${STORE_RETRY_AFTER_SECONDS} seconds`,
  );
}

/**
 * One read of a key that never exists: answers when the store does, costs one read unit. The key lies in the
 * workshop-name partitions (`$labfleet#name_...`), which every function of the cloud may read, the portal's
 * included; no workshop name can start with `~`.
 */
export async function probeStore(store: Store, timeoutMs = 2000): Promise<void> {
  await store.doc.send(
    new GetCommand({ TableName: store.table, Key: { pk: "$labfleet#name_~health", sk: "~health" } }),
    { abortSignal: AbortSignal.timeout(timeoutMs) },
  );
}

export type StoreHealth = "ok" | "unreachable" | "error";

const HEALTH_CACHE_MS = 500;
const checks = new WeakMap<Store, { at: number; answer: Promise<StoreHealth> }>();

/**
 * The store's health for /api/health: one probe at a time, its answer kept HEALTH_CACHE_MS, so a health check
 * polled by a load balancer or a script costs at most two reads a second. `error` is a store that answered with
 * an error of its own (a missing table, a denied read).
 */
export function storeHealth(store: Store, now = Date.now()): Promise<StoreHealth> {
  const last = checks.get(store);
  if (last && now - last.at < HEALTH_CACHE_MS) return last.answer;
  const answer = probeStore(store).then(
    (): StoreHealth => "ok",
    (err): StoreHealth => (isStoreUnreachable(err) || isAbort(err) ? "unreachable" : "error"),
  );
  checks.set(store, { at: now, answer });
  return answer;
}

function isAbort(err: unknown): boolean {
  const name = (err as { name?: unknown } | undefined)?.name;
  return name === "AbortError" || name === "TimeoutError";
}

export interface StoreWaitOptions {
  /** Ends the waiting: the last error is thrown. */
  signal?: AbortSignal;
  /** The first pause (ms); each next one doubles, up to `maxDelayMs`. */
  delayMs?: number;
  maxDelayMs?: number;
  /** Stop trying at this time (epoch ms) and throw the last error. */
  until?: number;
  /** Called before each pause, with the number of failed attempts so far. */
  onWait?: (attempt: number, err: unknown) => void;
}

/**
 * Calls `fn` until it does not fail because the store is unreachable: between attempts it waits, with a
 * doubling pause. Any other error is thrown at once; so is the store's, once `signal` aborts or `until` passes.
 * For idempotent work only (every workflow step and scheduler action is).
 */
export async function untilStoreAnswers<T>(fn: () => Promise<T>, opts: StoreWaitOptions = {}): Promise<T> {
  let delay = opts.delayMs ?? 250;
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (err) {
      if (!isStoreUnreachable(err) || opts.signal?.aborted) throw err;
      if (opts.until !== undefined && Date.now() + delay > opts.until) throw err;
      opts.onWait?.(attempt, err);
      await pause(delay, opts.signal);
      if (opts.signal?.aborted) throw err;
      delay = Math.min(delay * 2, opts.maxDelayMs ?? 5000);
    }
  }
}
