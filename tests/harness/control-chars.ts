/**
 * One character of each class labfleet refuses in student-supplied text and escapes in text output, with
 * how the CLI shows it: C0 controls (NUL, BEL, TAB, LF, CR, ESC), DEL, C1 controls, bidirectional marks.
 */
export const CONTROL_CLASSES: [name: string, char: string, shown: string][] = [
  ["NUL", "\u0000", "\\x00"],
  ["BEL", "\u0007", "\\x07"],
  ["TAB", "\t", "\\t"],
  ["LF", "\n", "\\n"],
  ["CR", "\r", "\\r"],
  ["ESC", "\u001b", "\\x1b"],
  ["DEL", "\u007f", "\\x7f"],
  ["C1 CSI", "\u009b", "\\x9b"],
  ["bidi override", "\u202e", "\\u202e"],
  ["bidi isolate", "\u2066", "\\u2066"],
];

/** Any character of those classes but the line feed: what must never reach a terminal raw. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: the characters being looked for
export const RAW_CONTROL = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/;
