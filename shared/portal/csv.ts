import { escapeControlChars } from "../runtime/text.ts";

/**
 * One CSV cell, safe to open in a spreadsheet and to print in a terminal:
 * - control characters are shown as escapes (`\x1b`, `\n`), so no cell acts on a terminal or splits a row;
 * - a cell that starts with = + - @ (or a tab or carriage return, before escaping) would be read as a formula,
 *   so it gets a leading `'` and is read as text (OWASP, "CSV Injection");
 * - a cell holding a comma, a double quote or a leading or trailing space is quoted, its quotes doubled (RFC 4180).
 */
export function csvCell(value: string | null | undefined): string {
  const raw = value ?? "";
  const text = escapeControlChars(raw);
  const safe = /^[=+\-@\t\r]/.test(raw) || /^[=+\-@]/.test(text) ? `'${text}` : text;
  return /[",]|^\s|\s$/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

/** One CSV line (no line ending) of the given cells. */
export function csvLine(cells: readonly (string | null | undefined)[]): string {
  return cells.map(csvCell).join(",");
}
