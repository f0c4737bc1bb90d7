import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Store } from "../../shared/store/entities.ts";
import { git } from "./git-http.ts";

/**
 * A git lab for rollout tests, with one branch per version (reachable as `git:file://<dir>` from local hosts
 * and from fake SSH hosts: it lives under /var/tmp, which fake hosts share, and everyone may read it):
 * - `main`: version 1, three phases, an access file, the `built` marker the health check looks for;
 * - `v2`: the same lab at version 2 (a second longer, so a test can see a lab while it is being updated);
 * - `broken`: a setup that fails, printing `broken build of version 3`;
 * - `gated`: version 4, whose setup waits until `$HOME/go` exists (to interrupt a rollout at a chosen point);
 * - `unhealthy`: version 5, whose setup succeeds but leaves no `built` marker, so lab.health fails after it;
 * - `fixable`: a setup that fails, printing `broken build of version 6`, until `fix("fixable")` pushes a good
 *   version 6 to it.
 * Every build appends a line to `$HOME/builds`, and writes the version to VERSION in the lab folder.
 */
export interface RolloutLab {
  dir: string;
  source: string;
  /** Pushes a fix to `branch`: a setup that builds version 6 (as `fixable` should have). */
  fix(branch: string): void;
  remove(): void;
}

const setup = (version: number, extra: string) =>
  `set -eu
echo "build $version" >> "$HOME/builds"
${extra}
for p in fetch build verify; do
  echo "{\\"phase\\":\\"$p\\",\\"state\\":\\"running\\"}" >> "$LABFLEET_STATUS"
  sleep 0.1
  echo "{\\"phase\\":\\"$p\\",\\"state\\":\\"done\\"}" >> "$LABFLEET_STATUS"
done
echo ${version} > VERSION
printf '{"urls":{"ui":"https://%s.example.test/"},"credentials":{"password":"v${version}-%s"}}' "$LABFLEET_HOST_ID" "$LABFLEET_HOST_ID" > "$LABFLEET_ACCESS"
touch built
echo "lab version ${version} built on $LABFLEET_HOST_ID"
`.replace("$version", String(version));

export function makeRolloutLab(): RolloutLab {
  const root = mkdtempSync("/var/tmp/labfleet-rollout-lab-");
  const dir = join(root, "lab");
  mkdirSync(dir);
  git(root, "init", "-q", "-b", "main", dir);
  const commit = (branch: string, text: string) => {
    if (branch !== "main") git(dir, "checkout", "-q", "-b", branch, "main");
    writeFileSync(join(dir, "setup.sh"), text);
    git(dir, "add", "-A");
    git(dir, "commit", "-q", "--no-gpg-sign", "-m", branch);
    git(dir, "checkout", "-q", "main");
  };
  commit("main", setup(1, ""));
  commit("v2", setup(2, "sleep 1"));
  commit("broken", `echo "build 3" >> "$HOME/builds"\necho "broken build of version 3" >&2\nexit 1\n`);
  commit(
    "gated",
    setup(4, 'for _ in $(seq 1 1200); do [ -e "$HOME/go" ] && break; sleep 0.1; done; [ -e "$HOME/go" ]'),
  );
  commit("unhealthy", setup(5, "").replace("touch built\n", "rm -f built\n"));
  commit("fixable", `echo "build 6" >> "$HOME/builds"\necho "broken build of version 6" >&2\nexit 1\n`);
  chmodSync(root, 0o755);
  return {
    dir,
    source: `git:file://${dir}`,
    fix: (branch) => {
      git(dir, "checkout", "-q", branch);
      writeFileSync(join(dir, "setup.sh"), setup(6, ""));
      git(dir, "commit", "-q", "--no-gpg-sign", "-am", `fix ${branch}`);
      git(dir, "checkout", "-q", "main");
    },
    remove: () => rmSync(root, { recursive: true, force: true }),
  };
}

/** workshop.yaml for the rollout lab on local hosts, its portal enabled. */
export function rolloutYaml(name: string, source: string, count: number, extra = ""): string {
  return `name: ${name}
lab:
  source: ${source}
  ref: main
  setup: bash setup.sh
  health: test -f built || { echo "no built marker in the lab folder"; exit 1; }
  concurrency: 4
  timeout_minutes: 5
provider:
  type: local
  count: ${count}
  ttl_hours: 6
portal:
  enabled: true
${extra}`;
}

/**
 * Makes the next read of one lab's claim (`store.claim.get`) answer "no claim", as a read made a moment before the
 * claim would: the crossing of a student's claim and a rollout step that read the claim just before it. Only that
 * one read; `restore` puts the store's own reads back.
 */
export function missNextClaimRead(
  store: Store,
  workshop: string,
  hostId: string,
): { misses: () => number; restore: () => void } {
  const claims = store.claim;
  const realGet = claims.get.bind(claims);
  let misses = 0;
  const stub = (key: { workshop: string; hostId: string }) => {
    if (misses === 0 && key.workshop === workshop && key.hostId === hostId) {
      misses++;
      return { go: async () => ({ data: null }) };
    }
    return realGet(key);
  };
  claims.get = stub as unknown as typeof claims.get;
  return {
    misses: () => misses,
    restore: () => {
      claims.get = realGet;
    },
  };
}
