import { approxText, basisText, type FleetEstimate } from "../shared/fleet/estimate.ts";
import type { HostView, RunView } from "../shared/fleet/workshops.ts";
import type { ErrorDetail } from "../shared/runtime/errors.ts";
import { escapeControlChars } from "../shared/runtime/text.ts";
import {
  formatClock,
  formatDuration,
  formatRelative,
  formatTimeLeft,
  formatWhen,
} from "../shared/runtime/time-format.ts";
import { formatErrors } from "../shared/workshop/load.ts";

/** Where the CLI writes: a terminal (redrawn in place, coloured) or not. */
export interface Output {
  write(text: string): void;
  isTTY: boolean;
  color: boolean;
  /** The terminal's size, where it says (progress is fitted to it: cli/progress.ts). */
  rows?: number;
  columns?: number;
}

/** Where output goes: process.stdout, or a stand-in in tests. */
export interface Stream {
  isTTY?: boolean;
  rows?: number;
  columns?: number;
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
    // Read at each use: the terminal may be resized while a run is followed.
    get rows() {
      return stream.rows;
    },
    get columns() {
      return stream.columns;
    },
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

/** Elapsed time as the one formatter writes it ("3 min 05 s"); "" when unknown. */
export function duration(s?: number): string {
  return formatDuration(s);
}

/** A time the CLI shows: local clock time, then how far from now ("12:43 (in 5 h 58 min)"). */
export function when(iso: string | null | undefined, now = Date.now()): string {
  return iso ? formatWhen(iso, now) : "";
}

/** What a workshop has left: "5 h 58 min left, torn down at 12:43"; "teardown was due 3 min ago" once past. */
export function timeLeftText(expiry: string, now = Date.now()): string {
  const left = formatTimeLeft(expiry, now);
  if (left === "over") return `teardown was due ${formatRelative(expiry, now)}`;
  return `${left} left, torn down at ${formatClock(expiry, now)}`;
}

/** How far from now: "in 5 h 58 min", "3 min ago". */
export function relative(iso: string | null | undefined, now = Date.now()): string {
  return iso ? formatRelative(iso, now) : "";
}

/** A local clock time alone ("12:43", with the date when not today); `seconds` for events. */
export function clock(iso: string | null | undefined, seconds = false, now = Date.now()): string {
  return iso ? formatClock(iso, now, { seconds }) : "";
}

/**
 * The ready estimate as `status` shows it while labs build: "every lab ready in about 14 min, by 12:43 (from 3
 * earlier runs)", with the failed labs it leaves out; "" once every lab that did not fail is ready.
 */
export function estimateLine(e: FleetEstimate, now = Date.now()): string {
  const failed = e.failed ? ` · ${e.failed} failed ${e.failed === 1 ? "lab" : "labs"} not counted` : "";
  if (e.kind === "ready") return "";
  if (e.kind === "unknown")
    return `ready estimate: not yet (no build of this lab has finished, here or in an earlier run)${failed}`;
  return `every lab ready in ${approxText(e.remainingSeconds)}, by ${clock(e.readyAt, false, now)} (${basisText(e.basis)})${failed}`;
}

/** A host's phase as shown: "install (phase 2)"; a ready lab is past its phases and reads "ready". */
export function phaseText(h: HostView): string {
  if (h.state === "ready") return "ready";
  const index = h.phases.findIndex((p) => p.name === h.phase);
  return h.phase ? `${clean(h.phase)}${index >= 0 ? ` (phase ${index + 1})` : ""}` : "-";
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
