import type { z } from "zod";

/** zod issues as `{path, message}` pairs, an unknown key reported at its own path. */
export function issuePaths(issues: readonly z.core.$ZodIssue[]): { path: PropertyKey[]; message: string }[] {
  return issues.flatMap((issue) => {
    if (issue.code === "unrecognized_keys") {
      return issue.keys.map((key) => ({
        path: [...issue.path, key],
        message: "unknown key: expected none here",
      }));
    }
    // zod reports the input only when parsing with `reportInput: true`; missing means undefined there.
    if (issue.code === "invalid_type" && "input" in issue && issue.input === undefined) {
      return [{ path: issue.path, message: `required: ${issue.message}` }];
    }
    return [{ path: issue.path, message: issue.message }];
  });
}

/** `lab.concurrency`, `hosts[2].id`: a path as a reader of YAML or JSON would write it. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += out ? `.${String(key)}` : String(key);
  }
  return out || "(root)";
}

export function issueDetails(issues: readonly z.core.$ZodIssue[]): { path: string; message: string }[] {
  return issuePaths(issues).map((d) => ({ path: formatPath(d.path), message: d.message }));
}
