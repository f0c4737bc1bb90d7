/**
 * What a lab's access details ($LABFLEET_ACCESS, docs/lab-contract.md) show on the student's lab page and the
 * instructor's admin page. The intended shape is `{"urls": {name: url}, "credentials": {name: value}, "notes":
 * text}`, but any JSON is accepted, so each part is read in the shapes labs write in practice: a list of URLs,
 * a list of `{"label", "url"}` or `{"label", "value"}` objects, notes as a list of lines, and keys of their own
 * beside those three. Whatever fits none of them is shown as its JSON text, never as "[object Object]".
 */

export interface AccessPair {
  label: string;
  value: string;
}

export interface AccessView {
  urls: AccessPair[];
  credentials: AccessPair[];
  notes: string[];
  /** The document's other top-level keys (or the whole document, when it is not an object). */
  other: AccessPair[];
}

const LABEL_KEYS = ["label", "name", "title"];
const URL_KEYS = ["url", "href", "link"];
const VALUE_KEYS = ["value", "secret"];

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** A value as the page shows it: text as it is, anything else as its JSON. */
function text(v: unknown): string {
  if (typeof v === "string") return v;
  if (v === null || v === undefined) return "";
  if (typeof v === "number" || typeof v === "boolean") return String(v);
  return JSON.stringify(v);
}

function first(o: Record<string, unknown>, keys: string[]): string | undefined {
  for (const k of keys) {
    const v = o[k];
    if (typeof v === "string" || typeof v === "number" || typeof v === "boolean") return String(v);
  }
  return undefined;
}

/** One part's entries: an object's keys with their values, a list's items numbered, a lone value as "1". */
function pairs(part: unknown, valueKeys: string[]): AccessPair[] {
  const one = (label: string, v: unknown): AccessPair =>
    isObject(v)
      ? { label: first(v, LABEL_KEYS) ?? label, value: first(v, valueKeys) ?? text(v) }
      : { label, value: text(v) };
  if (part === undefined || part === null) return [];
  if (Array.isArray(part)) return part.map((v, i) => one(String(i + 1), v));
  if (isObject(part)) return Object.entries(part).map(([k, v]) => ({ ...one(k, v), label: k }));
  return [one("1", part)];
}

export function accessView(doc: unknown): AccessView {
  if (!isObject(doc)) {
    if (typeof doc === "string") return { urls: [], credentials: [], notes: [doc], other: [] };
    return {
      urls: [],
      credentials: [],
      notes: [],
      other: doc === null ? [] : [{ label: "details", value: text(doc) }],
    };
  }
  const { urls, credentials, notes, ...rest } = doc;
  return {
    urls: pairs(urls, URL_KEYS),
    credentials: pairs(credentials, VALUE_KEYS),
    notes: Array.isArray(notes)
      ? notes.map(text)
      : notes === undefined || notes === null
        ? []
        : [text(notes)],
    other: Object.entries(rest).map(([label, v]) => ({ label, value: text(v) })),
  };
}
