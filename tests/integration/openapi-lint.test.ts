import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { apiDocument } from "../../web/api/openapi.ts";
import { removeDir, tempDir } from "../harness/runtime.ts";

/**
 * `npm run lint:api` (scripts/lint-api.ts): the API document passes `redocly lint` with the recommended rules,
 * and the script fails on a warning as well as on an error.
 */
const root = new URL("../..", import.meta.url).pathname;
const dir = tempDir("labfleet-lint-api-");
afterAll(() => removeDir(dir));

function lintApi(...args: string[]) {
  const run = spawnSync(process.execPath, ["--import", "tsx", join(root, "scripts/lint-api.ts"), ...args], {
    cwd: root,
    encoding: "utf8",
    timeout: 50_000,
  });
  return { status: run.status, out: `${run.stdout}${run.stderr}` };
}

describe("npm run lint:api", () => {
  it("passes the document with no error and no warning", () => {
    const { status, out } = lintApi();
    expect(out).toContain("openapi.json: 0 errors, 0 warnings (redocly lint, recommended rules)");
    expect(status, out).toBe(0);
  });

  it("fails a document with only a warning, naming the rule and where", () => {
    const doc = structuredClone(apiDocument()) as { info: { license?: unknown } };
    delete doc.info.license;
    const file = join(dir, "no-license.json");
    writeFileSync(file, JSON.stringify(doc));
    const { status, out } = lintApi(file);
    expect(out).toContain("warning info-license #/info");
    expect(out).toContain("openapi.json: 0 errors, 1 warnings");
    expect(status).toBe(1);
  });
});
