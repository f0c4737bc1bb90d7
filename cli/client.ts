import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { HostView, RunView, WorkshopPlan, WorkshopStatus } from "../shared/fleet/workshops.ts";
import type { ErrorDetail } from "../shared/runtime/errors.ts";

/** Where the CLI finds the API: LABFLEET_URL + LABFLEET_TOKEN, else the local runtime's 0600 file. */
export interface Target {
  url: string;
  token: string;
}

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode = 1,
    readonly details: ErrorDetail[] = [],
  ) {
    super(message);
  }
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
  const file = findRuntimeFile();
  if (!file) {
    throw new CliError(
      "no labfleet runtime found: start one with `npx labfleet dev` (or set LABFLEET_URL and LABFLEET_TOKEN)",
      3,
    );
  }
  const info = JSON.parse(readFileSync(file, "utf8")) as { url: string; token: string };
  return { url: info.url, token: info.token };
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
    const json = text ? (JSON.parse(text) as unknown) : {};
    if (!res.ok) {
      const e = (json as { error?: { message?: string; details?: ErrorDetail[] } }).error;
      throw new CliError(e?.message ?? `HTTP ${res.status}`, res.status === 401 ? 3 : 1, e?.details ?? []);
    }
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
    if (!res.ok) {
      const e = (
        (await res.json().catch(() => ({}))) as { error?: { message?: string; details?: ErrorDetail[] } }
      ).error;
      throw new CliError(e?.message ?? `HTTP ${res.status}`, res.status === 401 ? 3 : 1, e?.details ?? []);
    }
    return res;
  }

  submit(yaml: string, baseDir: string) {
    return this.call<{ name: string; created: boolean }>("POST", "/workshops", { yaml, baseDir });
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
