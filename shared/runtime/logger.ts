/**
 * Structured JSON logs from one place. Fields whose names suggest a secret are replaced before writing,
 * as a second line of defence: callers must not pass secrets in the first place.
 */
export type LogLevel = "debug" | "info" | "warn" | "error";
export type LogSink = (line: string) => void;

const SECRET_KEY = /token|secret|password|passwd|pin|email|code|key|credential|authorization|cookie/i;
const order: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };

let sink: LogSink = (line) => process.stderr.write(`${line}\n`);
let minLevel: LogLevel = (process.env.LABFLEET_LOG_LEVEL as LogLevel | undefined) ?? "info";

export function setLogSink(next: LogSink, level: LogLevel = minLevel): void {
  sink = next;
  minLevel = level;
}

function redact(fields: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(fields)) out[k] = SECRET_KEY.test(k) ? "[redacted]" : v;
  return out;
}

function write(level: LogLevel, msg: string, fields: Record<string, unknown> = {}): void {
  if (order[level] < order[minLevel]) return;
  sink(JSON.stringify({ time: new Date().toISOString(), level, msg, ...redact(fields) }));
}

export const log = {
  debug: (msg: string, fields?: Record<string, unknown>) => write("debug", msg, fields),
  info: (msg: string, fields?: Record<string, unknown>) => write("info", msg, fields),
  warn: (msg: string, fields?: Record<string, unknown>) => write("warn", msg, fields),
  error: (msg: string, fields?: Record<string, unknown>) => write("error", msg, fields),
};
