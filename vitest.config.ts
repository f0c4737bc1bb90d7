import { tmpdir } from "node:os";
import { join } from "node:path";
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["tests/**/*.test.ts"],
    globalSetup: ["tests/harness/global-setup.ts"],
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // Tests never read or write the operator's own ~/.labfleet (secrets, managed SSH key).
    env: {
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
      LABFLEET_LOG_LEVEL: "warn",
      LABFLEET_HOME: join(tmpdir(), `labfleet-test-home-${process.pid}`),
    },
  },
});
