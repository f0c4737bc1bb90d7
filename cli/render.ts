import type { HostView, RunView } from "../shared/fleet/workshops.ts";
import type { ErrorDetail } from "../shared/runtime/errors.ts";
import { escapeControlChars } from "../shared/runtime/text.ts";
import { formatErrors } from "../shared/workshop/load.ts";

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

/**
 * A value as text output shows it: every control character escaped (`\x1b`, `\n`, `\u202e`), so nothing a
 * value holds (a student's name, a host's error, a lab's note) moves the cursor, clears the screen, colours the
 * terminal or starts a fake row. Every text printer passes what it did not write itself through here, or
 * through `block()` for text of several lines; JSON output needs neither (JSON escapes them).
 */
export function clean(value: unknown): string {
  return escapeControlChars(String(value ?? ""));
}

/** Text of several lines (an error with its log tail): line breaks kept, every other control character escaped. */
export function block(value: unknown): string {
  return escapeControlChars(String(value ?? ""), { keepNewlines: true });
}

const JSON_UNESCAPED = /[\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/**
 * A document for `--output json`, pretty-printed, one line feed after it. JSON.stringify escapes C0 controls;
 * DEL, C1 controls and direction marks are escaped here too (`\u009b`), which JSON reads back as the same text.
 */
export function jsonText(doc: unknown): string {
  const text = JSON.stringify(doc, null, 2).replace(
    JSON_UNESCAPED,
    (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
  return `${text}\n`;
}

/** Error details (a path, a message, a line), one a line, each value escaped. */
export function detailLines(details: ErrorDetail[]): string {
  return formatErrors(details.map((d) => ({ ...d, path: clean(d.path), message: clean(d.message) })));
}

/**
 * A cell or a word the CLI coloured itself: its text escaped, its colour the CLI's own. Where a string is
 * expected it is the coloured text; writeTable measures it by its text.
 */
export class Painted {
  readonly text: string;
  constructor(
    text: string,
    private readonly code: string | undefined,
  ) {
    this.text = clean(text);
  }
  toString(): string {
    return this.code ? `\u001b[${this.code}m${this.text}\u001b[0m` : this.text;
  }
}

const colors: Record<string, string> = { ready: "32", failed: "31", deploying: "33", torn_down: "90" };

export function paint(out: Output, state: string, text = state): Painted {
  return new Painted(text, out.color ? colors[state] : undefined);
}

function duration(s?: number): string {
  if (s === undefined) return "";
  const m = Math.floor(s / 60);
  return m > 0 ? `${m}m${String(s % 60).padStart(2, "0")}s` : `${s}s`;
}

export function hostLine(out: Output, h: HostView, idWidth: number, elapsed = true): string {
  const index = h.phases.findIndex((p) => p.name === h.phase);
  const phase = h.phase ? `${clean(h.phase)}${index >= 0 ? ` (phase ${index + 1})` : ""}` : "-";
  const err = h.state === "failed" && h.error ? `  ${clean(h.error.split("\n")[0])}` : "";
  return `${clean(h.id).padEnd(idWidth)}  ${paint(out, h.state, h.state.padEnd(10))}  ${phase.padEnd(34)}  ${elapsed ? duration(h.elapsedSeconds).padStart(6) : ""}${err}`.trimEnd();
}

export class ProgressView {
  private drawn = 0;
  private last = new Map<string, string>();

  constructor(private readonly out: Output) {}

  update(hosts: HostView[]): void {
    const width = Math.max(4, ...hosts.map((h) => clean(h.id).length));
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
  return `${clean(r.kind)} ${clean(r.state)}${r.durationSeconds !== undefined ? ` in ${duration(r.durationSeconds)}` : ""} · ${r.transitions} state transitions`;
}

/** A table cell: text (escaped here) or a word the CLI coloured. */
export type Cell = string | Painted;

/** The width a cell takes on screen: colour codes take none. */
export function visibleLength(cell: Cell): number {
  return (cell instanceof Painted ? cell.text : clean(cell)).length;
}

/**
 * Columns padded to their widest cell, two spaces apart (coloured cells line up too). Every cell is escaped
 * (clean()), so a value cannot break a row or reach the terminal as a control sequence.
 */
export function writeTable(rows: Cell[][], out: Output): void {
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => visibleLength(r[i] ?? "")))) ?? [];
  for (const r of rows)
    out.write(
      `${r
        .map((c, i) => {
          const shown = c instanceof Painted ? String(c) : clean(c);
          return shown + " ".repeat(Math.max(0, (widths[i] ?? 0) - visibleLength(c)));
        })
        .join("  ")
        .trimEnd()}\n`,
    );
}
