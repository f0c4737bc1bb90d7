/**
 * The one error type that may reach a user. `kind` decides the HTTP status (see web/api/errors.ts),
 * `code` is a stable dotted identifier (`workshop.not_found`), `message` is safe to show and to log:
 * it never carries a token, email, code, PIN, password or key.
 */
export type ErrorKind =
  | "input"
  | "auth"
  | "forbidden"
  | "not_found"
  | "conflict"
  | "rate_limited"
  | "host"
  /** Something labfleet needs is down for now (the store: `store.unavailable`); the request may be sent again. */
  | "unavailable";

export interface ErrorDetail {
  path: string;
  message: string;
  line?: number;
  column?: number;
}

export class VisibleError extends Error {
  override name = "VisibleError";
  constructor(
    readonly kind: ErrorKind,
    readonly code: string,
    message: string,
    readonly details: ErrorDetail[] = [],
  ) {
    super(message);
  }
}

export function isVisibleError(err: unknown): err is VisibleError {
  return err instanceof VisibleError;
}

/** The message of anything thrown, for records meant for the instructor (never for secrets-bearing errors). */
export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  return String(err);
}
