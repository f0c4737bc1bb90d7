import type { Readable } from "node:stream";

export interface RunBashRequest {
  command: string;
  cwd: string;
  env: Record<string, string>;
  stdin?: string | Buffer | Uint8Array;
  timeoutMs?: number;
  /** Bytes kept of stdout and of stderr each. */
  cap: number;
}

export interface RunBashResult {
  /** The exit code, or null when a signal ended it. */
  code: number | null;
  signal: string | null;
  timedOut: boolean;
  stdout: Buffer;
  stderr: Buffer;
  truncated: boolean;
}

export function runBash(req: RunBashRequest, input?: Readable): Promise<RunBashResult>;

/** The first `cap` bytes a stream writes, and whether it wrote more. */
export function collectBytes(
  stream: NodeJS.ReadableStream,
  cap: number,
): { bytes(): Buffer; readonly truncated: boolean };
