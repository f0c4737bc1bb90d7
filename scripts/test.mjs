#!/usr/bin/env node
// The one test command (`npm test`): makes sure the OS packages the tests need are here, then runs vitest.
// As root on Debian it installs what is missing; otherwise it stops with the exact command to run.
import { spawnSync } from "node:child_process";

const needs = [
  { command: "java", package: "openjdk-17-jre-headless", why: "DynamoDB Local" },
  { command: "setsid", package: "util-linux", why: "detached lab setups" },
  { command: "tar", package: "tar", why: "syncing local lab sources" },
  { command: "git", package: "git", why: "git lab sources" },
];

const has = (cmd) => spawnSync("sh", ["-c", `command -v ${cmd}`], { stdio: "ignore" }).status === 0;
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

const r = spawnSync("npx", ["vitest", "run", ...process.argv.slice(2)], { stdio: "inherit" });
process.exit(r.status ?? 1);
