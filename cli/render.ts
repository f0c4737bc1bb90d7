import type { HostView, RunView } from "../shared/fleet/workshops.ts";

/** Per-host progress lines: redrawn in place on a TTY, printed only when they change otherwise. */
export interface Output {
  write(text: string): void;
  isTTY: boolean;
  color: boolean;
}

/** Where output goes: process.stdout, or a stand-in in tests. */
export interface Stream {
  isTTY?: boolean;
  write(text: string): unknown;
}

/**
 * Colour only on a terminal, and never when NO_COLOR is set to anything but "" (https://no-color.org) or the
 * terminal is TERM=dumb.
 */
export function colorEnabled(isTTY: boolean, env: NodeJS.ProcessEnv = process.env): boolean {
  return isTTY && !env.NO_COLOR && env.TERM !== "dumb";
}

/** Progress is redrawn in place only on a terminal that can move the cursor (not TERM=dumb). */
export function stdoutOutput(stream: Stream = process.stdout, env: NodeJS.ProcessEnv = process.env): Output {
  const isTTY = Boolean(stream.isTTY);
  return {
    write: (t) => {
      stream.write(t);
    },
    isTTY: isTTY && env.TERM !== "dumb",
    color: colorEnabled(isTTY, env),
  };
}

const colors: Record<string, string> = { ready: "32", failed: "31", deploying: "33", torn_down: "90" };

export function paint(out: Output, state: string, text = state): string {
  const code = colors[state];
  return out.color && code ? `\u001b[${code}m${text}\u001b[0m` : text;
}

function duration(s?: number): string {
  if (s === undefined) return "";
  const m = Math.floor(s / 60);
  return m > 0 ? `${m}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

export function hostLine(out: Output, h: HostView, idWidth: number, elapsed = true): string {
  const index = h.phases.findIndex((p) => p.name === h.phase);
  const phase = h.phase ? `${h.phase}${index >= 0 ? ` (phase ${index + 1})` : ""}` : "-";
  const err = h.state === "failed" && h.error ? `  ${h.error.split("\n")[0]}` : "";
  return `${h.id.padEnd(idWidth)}  ${paint(out, h.state, h.state.padEnd(10))}  ${phase.padEnd(34)}  ${elapsed ? duration(h.elapsedSeconds).padStart(6) : ""}${err}`.trimEnd();
}

export class ProgressView {
  private drawn = 0;
  private last = new Map<string, string>();

  constructor(private readonly out: Output) {}

  update(hosts: HostView[]): void {
    const width = Math.max(4, ...hosts.map((h) => h.id.length));
    if (this.out.isTTY) {
      const lines = hosts.map((h) => hostLine(this.out, h, width));
      const up = this.drawn > 0 ? `\u001b[${this.drawn}A` : "";
      this.out.write(`${up}${lines.map((l) => `\u001b[2K${l}\n`).join("")}`);
      this.drawn = lines.length;
      return;
    }
    for (const h of hosts) {
      // Without a TTY, a line is printed when the state or phase changes, not for elapsed time.
      const key = `${h.state}|${h.phase}|${h.error ?? ""}`;
      if (this.last.get(h.id) === key) continue;
      this.last.set(h.id, key);
      this.out.write(`${hostLine(this.out, h, width, false)}\n`);
    }
  }

  /** Ends in-place drawing so what follows prints below. */
  release(): void {
    this.drawn = 0;
  }
}

export function runLine(r: RunView): string {
  return `${r.kind} ${r.state}${r.durationSeconds !== undefined ? ` in ${duration(r.durationSeconds)}` : ""} · ${r.transitions} state transitions`;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: matching the colour codes paint() writes
const ANSI = /\u001b\[[0-9;]*m/g;

/** The width a cell takes on screen: colour codes take none. */
export function visibleLength(text: string): number {
  return text.replace(ANSI, "").length;
}

/** Columns padded to their widest cell, two spaces apart (coloured cells line up too). */
export function writeTable(rows: string[][], out: Output): void {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => visibleLength(r[i] ?? "")))) ?? [];
  for (const r of rows)
    out.write(
      `${r
        .map((c, i) => c + " ".repeat(Math.max(0, (widths[i] ?? 0) - visibleLength(c))))
        .join("  ")
        .trimEnd()}\n`,
    );
}
