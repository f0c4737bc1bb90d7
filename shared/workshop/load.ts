import { isAbsolute, resolve } from "node:path";
import {
  CST,
  isAlias,
  isCollection,
  isMap,
  isPair,
  isSeq,
  Lexer,
  LineCounter,
  Parser,
  parseDocument,
  visit,
  type Node as YamlNode,
} from "yaml";
import { type ErrorDetail, VisibleError } from "../runtime/errors.ts";
import { formatPath, issuePaths } from "../runtime/zod.ts";

export { formatPath };

import { Workshop } from "./schema.ts";

export type ValidationResult = { ok: true; workshop: Workshop } | { ok: false; errors: ErrorDetail[] };

function locate(doc: ReturnType<typeof parseDocument>, lines: LineCounter, path: readonly PropertyKey[]) {
  // Walk down as far as the document goes, so an error on a missing key points at its parent.
  let node: unknown = doc.contents;
  let found: YamlNode | undefined = node as YamlNode | undefined;
  for (const key of path) {
    if (isMap(node)) node = node.get(key as string, true);
    else if (isSeq(node) && typeof key === "number") node = node.get(key, true);
    else break;
    if (node && typeof node === "object" && "range" in node) found = node as YamlNode;
    else break;
  }
  const offset = found?.range?.[0];
  if (offset === undefined) return {};
  const pos = lines.linePos(offset);
  return { line: pos.line, column: pos.col };
}

/**
 * What workshop.yaml may be, checked before it is parsed in full: a real one is a few KiB, a handful of levels
 * deep, with a few aliases. Past these it is refused with a plain message and the line, never a stack
 * overflow or the memory of a "billion laughs".
 */
export const WORKSHOP_YAML_LIMITS = {
  /** Bytes of UTF-8. */
  maxBytes: 1024 * 1024,
  /** Collections (mappings and lists, block or flow) nested inside each other. */
  maxDepth: 64,
  /**
   * The `yaml` package's `maxAliasCount` (its default): an anchor and its aliases count up to it, so one anchor
   * may be used through 99 aliases, fewer when what it anchors holds aliases itself: nested aliases cannot
   * multiply into a "billion laughs".
   */
  maxAliasCount: 100,
} as const;

export const WORKSHOP_YAML_MAX_BYTES = WORKSHOP_YAML_LIMITS.maxBytes;

const MiB = 1024 * 1024;

/** Line and column (1-based) of a character offset. */
function position(text: string, offset: number): { line: number; column: number } {
  let line = 1;
  let start = 0;
  for (let i = text.indexOf("\n"); i !== -1 && i < offset; i = text.indexOf("\n", i + 1)) {
    line++;
    start = i + 1;
  }
  return { line, column: offset - start + 1 };
}

const yamlError = (text: string, message: string, offset?: number): ErrorDetail => ({
  path: "(yaml)",
  message,
  ...(offset === undefined ? {} : position(text, offset)),
});

/** The lexer's own markers, which stand for no character of the source. */
const MARKERS = new Set<string>([CST.DOCUMENT, CST.FLOW_END, CST.SCALAR]);

/**
 * The offset of the first collection nested deeper than maxDepth, or undefined. Measured on the way in, without
 * recursion: the lexer's flow brackets (`[[[[...` stops here at once), then the parser's tokens (block nesting),
 * walked with a stack of their own. The `yaml` parser keeps its own stack too; only its composer recurses.
 */
function tooDeepAt(text: string): number | undefined {
  const max = WORKSHOP_YAML_LIMITS.maxDepth;
  const parser = new Parser();
  const deepest = (doc: CST.Token): number | undefined => {
    const stack: [CST.Token | undefined, number][] = [[doc, 0]];
    for (let next = stack.pop(); next; next = stack.pop()) {
      const [token, depth] = next;
      if (!token) continue;
      if (token.type === "document") stack.push([token.value, depth]);
      if (token.type === "block-map" || token.type === "block-seq" || token.type === "flow-collection") {
        if (depth + 1 > max) return token.offset;
        for (const item of token.items) {
          stack.push([("key" in item ? item.key : undefined) ?? undefined, depth + 1]);
          stack.push([item.value, depth + 1]);
        }
      }
    }
    return undefined;
  };
  let offset = 0;
  let flow = 0;
  for (const lexeme of new Lexer().lex(text)) {
    const type = CST.tokenType(lexeme);
    if (type === "flow-map-start" || type === "flow-seq-start") {
      if (++flow > max) return offset;
    } else if (type === "flow-map-end" || type === "flow-seq-end") flow = Math.max(0, flow - 1);
    if (!MARKERS.has(lexeme)) offset += lexeme.length;
    for (const doc of parser.next(lexeme)) {
      const at = deepest(doc);
      if (at !== undefined) return at;
    }
  }
  for (const doc of parser.end()) {
    const at = deepest(doc);
    if (at !== undefined) return at;
  }
  return undefined;
}

/**
 * After the `yaml` package refused the aliases: the alias that stands for the most values, to point at. The
 * document's nesting is bounded by then, so counting may recurse; an alias inside its own anchor counts as
 * without end.
 */
function biggestAlias(doc: ReturnType<typeof parseDocument>): {
  source: string;
  size: number;
  offset?: number;
} {
  const sizes = new Map<unknown, number>();
  const sizeOf = (node: unknown): number => {
    if (isAlias(node)) {
      const target = node.resolve(doc);
      return target ? sizeOf(target) : 1;
    }
    if (!isCollection(node) && !isPair(node)) return 1;
    const known = sizes.get(node);
    if (known !== undefined) return known;
    sizes.set(node, Number.POSITIVE_INFINITY); // while counting: an alias back to here never ends
    const items: unknown[] = isPair(node) ? [node.key, node.value] : node.items;
    const size = items.reduce<number>((sum, item) => sum + sizeOf(item), 1);
    sizes.set(node, size);
    return size;
  };
  let biggest: { source: string; size: number; offset?: number } = { source: "", size: 0 };
  visit(doc, {
    Alias: (_key, alias) => {
      const size = sizeOf(alias);
      if (size > biggest.size)
        biggest = { source: alias.source, size, ...(alias.range ? { offset: alias.range[0] } : {}) };
    },
  });
  return biggest;
}

/** Parse and validate workshop.yaml text. Every problem is reported at once, each with its YAML path. */
export function validateWorkshopYaml(text: string): ValidationResult {
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes > WORKSHOP_YAML_LIMITS.maxBytes) {
    return {
      ok: false,
      errors: [
        yamlError(
          text,
          `workshop.yaml is ${bytes.toLocaleString("en-US")} bytes; it may be at most ${WORKSHOP_YAML_LIMITS.maxBytes / MiB} MiB (${WORKSHOP_YAML_LIMITS.maxBytes.toLocaleString("en-US")} bytes)`,
        ),
      ],
    };
  }
  const deep = tooDeepAt(text);
  if (deep !== undefined) {
    return {
      ok: false,
      errors: [
        yamlError(
          text,
          `not valid here: mappings and lists nested more than ${WORKSHOP_YAML_LIMITS.maxDepth} levels deep`,
          deep,
        ),
      ],
    };
  }
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    return {
      ok: false,
      errors: doc.errors.map((e) => {
        const pos = e.linePos?.[0];
        return {
          path: "(yaml)",
          message: `not valid YAML: ${(e.message.split("\n")[0] ?? "").replace(/ at line \d+, column \d+:?$/, "")}`,
          ...(pos ? { line: pos.line, column: pos.col } : {}),
        };
      }),
    };
  }
  let data: unknown;
  try {
    data = doc.toJS({ maxAliasCount: WORKSHOP_YAML_LIMITS.maxAliasCount });
  } catch (err) {
    if (!(err instanceof ReferenceError)) throw err;
    if (!/excessive alias count/i.test(err.message))
      return { ok: false, errors: [yamlError(text, `not valid YAML: ${err.message.split("\n")[0]}`)] };
    const alias = biggestAlias(doc);
    const stands = Number.isFinite(alias.size)
      ? `expands to ${alias.size.toLocaleString("en-US")} nodes`
      : "refers to the node that holds it";
    return {
      ok: false,
      errors: [
        yamlError(
          text,
          `not valid here: aliases expand too far (one anchor may be used through at most ${WORKSHOP_YAML_LIMITS.maxAliasCount - 1} aliases, fewer when it holds aliases itself); *${alias.source} ${stands}`,
          alias.offset,
        ),
      ],
    };
  }
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    return {
      ok: false,
      errors: [{ path: "(root)", message: "expected a mapping with name, lab and provider" }],
    };
  }
  const parsed = Workshop.safeParse(data, { reportInput: true });
  if (parsed.success) return { ok: true, workshop: parsed.data };
  const errors = issuePaths(parsed.error.issues).map((d) => ({
    path: formatPath(d.path),
    message:
      d.path.length && d.message.startsWith("unknown key")
        ? `${d.message} (check its spelling against docs/workshop-yaml.md)`
        : d.message,
    ...locate(doc, lines, d.path),
  }));
  return { ok: false, errors };
}

/** As validateWorkshopYaml, but throws one input error that carries every detail. */
export function parseWorkshopYaml(text: string): Workshop {
  const result = validateWorkshopYaml(text);
  if (!result.ok) {
    throw new VisibleError("input", "workshop.invalid", "workshop.yaml is not valid", result.errors);
  }
  return result.workshop;
}

/**
 * A local-path `lab.source` is relative to the folder of workshop.yaml. It is made absolute when the file
 * is submitted, because the runtime that deploys it does not know where the file was.
 */
export function resolveLabSource(workshop: Workshop, baseDir: string): Workshop {
  const src = workshop.lab.source;
  if (src.startsWith("git:") || isAbsolute(src)) return workshop;
  return { ...workshop, lab: { ...workshop.lab, source: resolve(baseDir, src) } };
}

export function formatErrors(errors: ErrorDetail[]): string {
  return errors
    .map(
      (e) => `${e.path}: ${e.message}${e.line !== undefined ? ` (line ${e.line}, column ${e.column})` : ""}`,
    )
    .join("\n");
}
