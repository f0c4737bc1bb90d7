import { isAbsolute, resolve } from "node:path";
import { isMap, isSeq, LineCounter, parseDocument, type Node as YamlNode } from "yaml";
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

/** Parse and validate workshop.yaml text. Every problem is reported at once, each with its YAML path. */
export function validateWorkshopYaml(text: string): ValidationResult {
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
  const data = doc.toJS({ maxAliasCount: 100 });
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
