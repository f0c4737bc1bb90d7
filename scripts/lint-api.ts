// Lints the instructor API's OpenAPI document (`npm run lint:api`): writes it to a temporary file and runs
// `redocly lint` on it with the rules of redocly.yaml (Redocly's `recommended`). Exits 1 on any error or warning,
// which `redocly lint` alone lets pass. With a file argument it lints that document instead.
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { apiDocument } from "../web/api/openapi.ts";

const root = new URL("..", import.meta.url).pathname;
const cli = join(root, "node_modules/@redocly/cli/bin/cli.js");

interface Problem {
  ruleId: string;
  severity: string;
  message: string;
  location?: { pointer?: string }[];
}

const dir = mkdtempSync(join(tmpdir(), "labfleet-openapi-"));
try {
  const file = join(dir, "openapi.json");
  const given = process.argv[2];
  writeFileSync(file, given ? readFileSync(given, "utf8") : JSON.stringify(apiDocument(), null, 2));
  const run = spawnSync(
    process.execPath,
    [cli, "lint", file, "--config", join(root, "redocly.yaml"), "--format", "json"],
    {
      cwd: root,
      encoding: "utf8",
      // No telemetry and no update check: the lint never leaves this machine.
      env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_NOTIFICATIONS: "true" },
    },
  );
  let report: { totals: { errors: number; warnings: number }; problems: Problem[] };
  try {
    report = JSON.parse(run.stdout);
  } catch {
    console.error(`redocly lint did not report (exit ${run.status}):\n${run.stderr}`);
    process.exit(2);
  }
  for (const p of report.problems) {
    const where = p.location?.[0]?.pointer ?? "";
    console.log(`${p.severity === "error" ? "error" : "warning"} ${p.ruleId} ${where}: ${p.message}`);
  }
  const { errors, warnings } = report.totals;
  console.log(`openapi.json: ${errors} errors, ${warnings} warnings (redocly lint, recommended rules)`);
  process.exitCode = errors + warnings > 0 ? 1 : 0;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
