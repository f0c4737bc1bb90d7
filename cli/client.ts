import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import type { HostView, RunView, WorkshopPlan, WorkshopStatus } from "../shared/fleet/workshops.ts";
import type { ErrorDetail } from "../shared/runtime/errors.ts";

/**
 * Where the CLI finds the API: LABFLEET_URL + LABFLEET_TOKEN, else the credentials `labfleet login` stored,
 * else the local runtime's 0600 file.
 */
export interface Target {
  url: string;
  token: string;
}

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
    readonly details: ErrorDetail[] = [],
    /** The API's error code, when the error is the API's answer (`store.unavailable`, `workshop.not_found`). */
    readonly code?: string,
  ) {
    super(message);
  }
}

/** The API's store is unreachable for now (503 `store.unavailable`): the same request may be sent again. */
export const isStoreUnavailable = (err: unknown): boolean =>
  err instanceof CliError && err.code === "store.unavailable";

type ErrorAnswer = { error?: { code?: string; message?: string; details?: ErrorDetail[] } };

/**
 * The error of an API answer that is not ok: the API's message, else the status. A 401 and
 * the store being unreachable (503 `store.unavailable`) exit 3, like an API that cannot be reached at all.
 */
function answerError(status: number, body: ErrorAnswer): CliError {
  const e = body.error;
  const code = typeof e?.code === "string" ? e.code : undefined;
  const message = typeof e?.message === "string" && e.message ? e.message : `HTTP ${status}`;
  const exitCode = status === 401 || code === "store.unavailable" ? 3 : 1;
  return new CliError(message, exitCode, e?.details ?? [], code);
}

export function findRuntimeFile(from = process.cwd()): string | undefined {
  if (process.env.LABFLEET_DATA_DIR) {
    const f = join(resolve(process.env.LABFLEET_DATA_DIR), "runtime.json");
    return existsSync(f) ? f : undefined;
  }
  let dir = resolve(from);
  for (;;) {
    const f = join(dir, ".labfleet", "runtime.json");
    if (existsSync(f)) return f;
    const up = dirname(dir);
    if (up === dir) return undefined;
    dir = up;
  }
}

export function resolveTarget(): Target {
  const url = process.env.LABFLEET_URL;
  const token = process.env.LABFLEET_TOKEN;
  if (url && token) return { url: url.replace(/\/$/, ""), token };
  if (url || token) throw new CliError("set both LABFLEET_URL and LABFLEET_TOKEN, or neither", 2);
  const credentials = readCredentials();
  if (credentials) return credentials;
  const file = findRuntimeFile();
  if (!file) {
    throw new CliError(
      "no labfleet runtime found: start one with `npx labfleet dev`, sign in with `labfleet login --url URL` (or set LABFLEET_URL and LABFLEET_TOKEN)",
      3,
    );
  }
  const info = JSON.parse(readFileSync(file, "utf8")) as { url: string; token: string };
  return { url: info.url, token: info.token };
}

// --- ~/.labfleet/credentials: what `labfleet login` stores ------------------------------------------------

/** The operator's own folder: $LABFLEET_HOME, else ~/.labfleet. */
export function labfleetHome(): string {
  return process.env.LABFLEET_HOME ? resolve(process.env.LABFLEET_HOME) : join(homedir(), ".labfleet");
}

export function credentialsFile(): string {
  return join(labfleetHome(), "credentials");
}

/** The stored {url, token}, or undefined when nobody logged in. A damaged file is an error, not a guess. */
export function readCredentials(): Target | undefined {
  const file = credentialsFile();
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new CliError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? "error"}`, 2);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = undefined;
  }
  const c = parsed as Partial<Target> | undefined;
  if (typeof c?.url !== "string" || !/^https?:\/\//.test(c.url) || typeof c.token !== "string" || !c.token) {
    throw new CliError(`${file} is damaged: run \`labfleet login\` again (or \`labfleet logout\`)`, 2);
  }
  if ((statSync(file).mode & 0o077) !== 0) {
    process.stderr.write(`labfleet: warning: ${file} is readable by others; run chmod 600 on it\n`);
  }
  return { url: c.url.replace(/\/+$/, ""), token: c.token };
}

/** Writes {url, token} with mode 0600 (in a 0700 folder), replacing the file in one rename. */
export function writeCredentials(target: Target): string {
  const file = credentialsFile();
  mkdirSync(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.${process.pid}.tmp`;
  // A new file ("wx"), so the 0600 mode holds from its first byte; a stale one from a crash goes first.
  rmSync(tmp, { force: true });
  writeFileSync(tmp, `${JSON.stringify({ url: target.url, token: target.token }, null, 2)}\n`, {
    mode: 0o600,
    flag: "wx",
  });
  chmodSync(tmp, 0o600); // in case the umask took bits away from 0600 (it cannot add any)
  renameSync(tmp, file);
  return file;
}

/** Removes the credentials file; false when there was none. */
export function removeCredentials(): boolean {
  const file = credentialsFile();
  if (!existsSync(file)) return false;
  rmSync(file, { force: true });
  return true;
}

export class ApiClient {
  constructor(readonly target: Target) {}

  async call<T>(method: string, path: string, body?: unknown): Promise<T> {
    let res: Response;
    try {
      res = await fetch(`${this.target.url}/api${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.target.token}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (err) {
      throw new CliError(`cannot reach the labfleet API at ${this.target.url}: ${(err as Error).message}`, 3);
    }
    const text = await res.text();
    let json: unknown = {};
    try {
      json = text ? (JSON.parse(text) as unknown) : {};
    } catch {
      if (res.ok)
        throw new CliError(`the labfleet API at ${this.target.url} answered something that is not JSON`);
    }
    if (!res.ok) throw answerError(res.status, json as ErrorAnswer);
    return json as T;
  }

  /** The raw response, for answers that are not JSON (the diagnose archive). */
  async raw(method: string, path: string, body?: unknown): Promise<Response> {
    let res: Response;
    try {
      res = await fetch(`${this.target.url}/api${path}`, {
        method,
        headers: { authorization: `Bearer ${this.target.token}`, "content-type": "application/json" },
        ...(body === undefined ? {} : { body: JSON.stringify(body) }),
      });
    } catch (err) {
      throw new CliError(`cannot reach the labfleet API at ${this.target.url}: ${(err as Error).message}`, 3);
    }
    if (!res.ok) throw answerError(res.status, (await res.json().catch(() => ({}))) as ErrorAnswer);
    return res;
  }

  submit(yaml: string, baseDir: string) {
    return this.call<{ name: string; created: boolean; countKept?: { file: number; kept: number } }>(
      "POST",
      "/workshops",
      { yaml, baseDir },
    );
  }
  plan(yaml: string, baseDir: string) {
    return this.call<WorkshopPlan>("POST", "/workshops/plan", { yaml, baseDir });
  }
  up(name: string, force = false) {
    return this.call<{ run: RunView }>("POST", `/workshops/${encodeURIComponent(name)}/up`, { force });
  }
  teardown(name: string) {
    return this.call<{ run: RunView }>("POST", `/workshops/${encodeURIComponent(name)}/teardown`, {});
  }
  status(name: string) {
    return this.call<WorkshopStatus>("GET", `/workshops/${encodeURIComponent(name)}`);
  }
}

export type { HostView, RunView, WorkshopPlan, WorkshopStatus };
