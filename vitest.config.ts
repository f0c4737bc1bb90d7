import { tmpdir } from "node:os";
import { join } from "node:path";
import { defineConfig } from "vitest/config";

/** Test files that run after the others, one at a time. */
const ALONE = ["tests/integration/scale-local.test.ts", "tests/integration/scale-cloud.test.ts"];

export default defineConfig({
  test: {
    globalSetup: ["tests/harness/global-setup.ts"],
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // The suite runs two files at a time; then the files that load the whole machine (hundreds of hosts as
    // local processes) run alone, so no other test's timing shares the machine with them.
    projects: [
      {
        extends: true,
        test: { name: "suite", include: ["tests/**/*.test.ts"], exclude: ALONE, sequence: { groupOrder: 0 } },
      },
      {
        extends: true,
        test: { name: "alone", include: ALONE, fileParallelism: false, sequence: { groupOrder: 1 } },
      },
    ],
    // Tests never read or write the operator's own ~/.labfleet (secrets, managed SSH key).
    env: {
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
      LABFLEET_LOG_LEVEL: "warn",
      LABFLEET_HOME: join(tmpdir(), `labfleet-test-home-${process.pid}`),
    },
  },
});
