/**
 * Characters that make text lie when it is shown: C0 controls (NUL, BEL, TAB, LF, CR, ESC, ...), DEL, the C1
 * controls U+0080 to U+009F (U+009B starts a terminal sequence like ESC [ does), and the bidirectional embedding,
 * override and isolate marks U+202A to U+202E and U+2066 to U+2069, which reorder what a terminal, an editor or
 * a spreadsheet shows. Student-supplied text may hold none of them; anything printed escapes them.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters being matched
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters being matched
const CONTROL_ALL = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters being matched
const CONTROL_BUT_NEWLINE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

export function hasControlChars(text: string): boolean {
  return CONTROL.test(text);
}

const NAMED: Record<string, string> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };

function visible(ch: string): string {
  const named = NAMED[ch];
  if (named) return named;
  const code = ch.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16)}`;
}

/**
 * The text with every control character shown as an escape (`\x1b`, `\n`, `\u202e`), so it prints as what it
 * is and never acts on the terminal. `keepNewlines` leaves line feeds alone, for text of several lines.
 */
export function escapeControlChars(text: string, opts: { keepNewlines?: boolean } = {}): string {
  return text.replace(opts.keepNewlines ? CONTROL_BUT_NEWLINE : CONTROL_ALL, visible);
}

/** The message for a field that holds a control character, or undefined when it holds none. */
export function controlCharProblem(text: string): string | undefined {
  return hasControlChars(text)
    ? "must not contain control characters (line breaks, tabs, escape codes or direction marks)"
    : undefined;
}

const ids = new Intl.Collator("en", { numeric: true });

/** Lab and host ids in the order people count them: student-9 before student-10, student-99 before student-100. */
export const byNumber = (a: string, b: string): number => ids.compare(a, b);
