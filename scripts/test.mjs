#!/usr/bin/env node
// The one test command (`npm test`): makes sure the OS packages the tests need are here, then runs vitest.
// As root on Debian it installs what is missing; otherwise it stops with the exact command to run.
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";

const needs = [
  { command: "java", package: "openjdk-17-jre-headless", why: "DynamoDB Local" },
  { command: "setsid", package: "util-linux", why: "detached lab setups" },
  { command: "tar", package: "tar", why: "syncing local lab sources" },
  { command: "git", package: "git", why: "git lab sources" },
  { command: "/usr/sbin/sshd", package: "openssh-server", why: "fake SSH hosts" },
  { command: "ssh-keygen", package: "openssh-client", why: "fake SSH hosts' host keys" },
  { command: "unshare", package: "util-linux", why: "fake SSH hosts' own files" },
  { command: "sudo", package: "sudo", why: "sudo checks on fake SSH hosts" },
  { command: "chromium", package: "chromium", why: "portal pages in a headless browser" },
];

const has = (cmd) =>
  cmd.startsWith("/")
    ? existsSync(cmd)
    : spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
const missing = needs.filter((n) => !has(n.command));
if (missing.length > 0) {
  const pkgs = [...new Set(missing.map((m) => m.package))].join(" ");
  const list = missing.map((m) => `${m.command} (${m.why})`).join(", ");
  const isRoot = process.getuid?.() === 0;
  if (!isRoot || !has("apt-get")) {
    console.error(
      `labfleet tests need: ${list}.\nInstall them with:\n  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${pkgs}`,
    );
    process.exit(1);
  }
  console.log(`installing ${pkgs} for the tests (${list})`);
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  for (const args of [["update"], ["install", "-y", "--no-install-recommends", ...pkgs.split(" ")]]) {
    const r = spawnSync("apt-get", args, { stdio: "inherit", env });
    if (r.status !== 0) {
      console.error(`apt-get ${args.join(" ")} failed with exit code ${r.status}`);
      process.exit(1);
    }
  }
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
