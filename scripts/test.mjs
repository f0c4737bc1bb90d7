#!/usr/bin/env node
// The one test command (`npm test`): makes sure the OS packages the tests need are here, then runs vitest.
// As root with apt-get it installs what is missing; otherwise it stops with the exact command to run for the
// platform. The check is the one `labfleet dev` (`npm start`) runs: cli/local/os-packages.ts.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";

const { register } = await import("tsx/esm/api");
register();
const { ensureNeeds, TEST_NEEDS } = await import("../cli/local/os-packages.ts");
const ready = ensureNeeds(TEST_NEEDS, { who: "labfleet tests", log: (line) => console.log(line) });
if (!ready.ok) {
  console.error(ready.message);
  process.exit(1);
}

// vitest also writes a JSON report, from which a plain closing line is printed for CI logs.
const report = "test-output/vitest.json";
rmSync(report, { force: true });
const r = spawnSync(
  "npx",
  [
    "vitest",
    "run",
    "--reporter=default",
    "--reporter=json",
    `--outputFile.json=${report}`,
    ...process.argv.slice(2),
  ],
  { stdio: "inherit" },
);
if (existsSync(report)) {
  const {
    numPassedTests,
    numFailedTests,
    numPendingTests,
    testResults = [],
  } = JSON.parse(readFileSync(report, "utf8"));
  // A file that failed outside any test (in a hook) counts as one failure, not as skipped tests.
  const brokenFiles = testResults.filter(
    (f) => f.status === "failed" && !(f.assertionResults ?? []).some((a) => a.status === "failed"),
  ).length;
  const failed = numFailedTests + brokenFiles;
  console.log(
    `\nTests: ${numPassedTests} passed, ${failed} failed${numPendingTests ? `, ${numPendingTests} skipped` : ""}`,
  );
}
process.exit(r.status ?? 1);
