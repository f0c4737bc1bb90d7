import { spawnSync } from "node:child_process";
import { accessSync, constants, existsSync, readFileSync } from "node:fs";
import { delimiter, join } from "node:path";

/**
 * The programs the local runtime and the tests need from the operating system, and how to get the missing
 * ones on this machine: installed with apt-get when running as root where apt-get is, otherwise the exact
 * command to run for the platform (Debian/Ubuntu, Fedora, macOS). `labfleet dev` (`npm start`) and
 * `npm test` (scripts/test.mjs) both check through here.
 */

export type PackageManager = "apt" | "dnf" | "brew";

export interface Need {
  /** A command looked up on the PATH, or an absolute path. */
  command: string;
  why: string;
  /** Its package per package manager; absent where the platform has it already (macOS: tar, bash). */
  packages: Partial<Record<PackageManager, string>>;
}

const JAVA: Need = {
  command: "java",
  why: "DynamoDB Local",
  packages: { apt: "openjdk-17-jre-headless", dnf: "java-17-openjdk-headless", brew: "openjdk@17" },
};
const UTIL_LINUX = { apt: "util-linux", dnf: "util-linux", brew: "util-linux" };

/** What `labfleet dev` needs: DynamoDB Local's Java, and what local hosts run their setup with. */
export const RUNTIME_NEEDS: readonly Need[] = [
  JAVA,
  { command: "setsid", why: "detached lab setups", packages: UTIL_LINUX },
  { command: "tar", why: "syncing local lab sources", packages: { apt: "tar", dnf: "tar" } },
];

/** What the whole test suite needs besides: git sources, fake SSH hosts and the browser. */
export const TEST_NEEDS: readonly Need[] = [
  ...RUNTIME_NEEDS,
  { command: "git", why: "git lab sources", packages: { apt: "git", dnf: "git", brew: "git" } },
  {
    command: "/usr/sbin/sshd",
    why: "fake SSH hosts",
    packages: { apt: "openssh-server", dnf: "openssh-server" },
  },
  {
    command: "ssh-keygen",
    why: "fake SSH hosts' host keys",
    packages: { apt: "openssh-client", dnf: "openssh-clients" },
  },
  { command: "unshare", why: "fake SSH hosts' own files", packages: UTIL_LINUX },
  { command: "sudo", why: "sudo checks on fake SSH hosts", packages: { apt: "sudo", dnf: "sudo" } },
  {
    command: "curl",
    why: "agents and progress pushes on enrolled and fake hosts",
    packages: { apt: "curl", dnf: "curl", brew: "curl" },
  },
  {
    command: "openssl",
    why: "signing agents' and hosts' calls (HMAC-SHA256)",
    packages: { apt: "openssl", dnf: "openssl", brew: "openssl" },
  },
  {
    command: "chromium",
    why: "portal pages in a headless browser",
    packages: { apt: "chromium", dnf: "chromium", brew: "chromium" },
  },
];

/** Whether `command` runs here: an absolute path that exists, or an executable file in a PATH folder. */
export function hasCommand(command: string, path = process.env.PATH ?? ""): boolean {
  if (command.startsWith("/")) return existsSync(command);
  return path
    .split(delimiter)
    .filter(Boolean)
    .some((dir) => {
      try {
        accessSync(join(dir, command), constants.X_OK);
        return true;
      } catch {
        return false;
      }
    });
}

export function missingNeeds(needs: readonly Need[], path = process.env.PATH ?? ""): Need[] {
  return needs.filter((n) => !hasCommand(n.command, path));
}

/** The package manager of a platform: macOS has brew; Linux by /etc/os-release's ID and ID_LIKE. */
export function packageManagerFor(platform: NodeJS.Platform, osRelease = ""): PackageManager | undefined {
  if (platform === "darwin") return "brew";
  if (platform !== "linux") return undefined;
  const field = (k: string) =>
    (new RegExp(`^${k}=["']?([^"'\\n]*)`, "m").exec(osRelease)?.[1] ?? "").toLowerCase().split(/\s+/);
  const ids = [...field("ID"), ...field("ID_LIKE")];
  if (ids.some((id) => id === "debian" || id === "ubuntu")) return "apt";
  if (ids.some((id) => id === "fedora" || id === "rhel" || id === "centos")) return "dnf";
  return undefined;
}

/** The packages that provide the missing commands, each once. */
export function packagesFor(missing: readonly Need[], pm: PackageManager): string[] {
  return [...new Set(missing.flatMap((m) => (m.packages[pm] ? [m.packages[pm]] : [])))];
}

/** The exact command that installs them, as a person types it. */
export function installCommand(pm: PackageManager, packages: readonly string[]): string {
  const list = packages.join(" ");
  switch (pm) {
    case "apt":
      return `sudo apt-get update && sudo apt-get install -y --no-install-recommends ${list}`;
    case "dnf":
      return `sudo dnf install -y ${list}`;
    case "brew": {
      // Homebrew's openjdk@17 is keg-only: its java is not on the PATH until it is put there.
      const java = packages.includes("openjdk@17")
        ? ' && export PATH="$(brew --prefix openjdk@17)/bin:$PATH"'
        : "";
      return `brew install ${list}${java}`;
    }
  }
}

export interface EnsureOptions {
  /** Whose needs, for the messages: "labfleet dev", "labfleet tests". */
  who: string;
  path?: string;
  platform?: NodeJS.Platform;
  osRelease?: string;
  isRoot?: boolean;
  /** Where progress goes (the apt-get run itself inherits stdout and stderr). */
  log?: (line: string) => void;
}

export type EnsureResult = { ok: true; installed: string[] } | { ok: false; message: string };

function readOsRelease(): string {
  try {
    return readFileSync("/etc/os-release", "utf8");
  } catch {
    return "";
  }
}

/**
 * Makes sure the needed commands are here. As root with apt-get it installs what is missing (apt-get update,
 * then install); otherwise it answers the message to show: what is missing, why, and the command for this
 * platform. The caller exits 1 on `ok: false`.
 */
export function ensureNeeds(needs: readonly Need[], opts: EnsureOptions): EnsureResult {
  const path = opts.path ?? process.env.PATH ?? "";
  const missing = missingNeeds(needs, path);
  if (missing.length === 0) return { ok: true, installed: [] };
  const platform = opts.platform ?? process.platform;
  const pm = packageManagerFor(platform, opts.osRelease ?? (platform === "linux" ? readOsRelease() : ""));
  const list = missing.map((m) => `${m.command} (${m.why})`).join(", ");
  const isRoot = opts.isRoot ?? process.getuid?.() === 0;
  const env = { ...process.env, PATH: path, DEBIAN_FRONTEND: "noninteractive" };
  if (pm === "apt" && isRoot && hasCommand("apt-get", path)) {
    const pkgs = packagesFor(missing, "apt");
    opts.log?.(`installing ${pkgs.join(" ")} for ${opts.who} (${list})`);
    for (const args of [["update"], ["install", "-y", "--no-install-recommends", ...pkgs]]) {
      const r = spawnSync("apt-get", args, { stdio: "inherit", env });
      if (r.status !== 0)
        return { ok: false, message: `apt-get ${args.join(" ")} failed with exit code ${r.status}` };
    }
    const still = missingNeeds(needs, path);
    if (still.length)
      return {
        ok: false,
        message: `still missing after apt-get install: ${still.map((m) => m.command).join(", ")}`,
      };
    return { ok: true, installed: pkgs };
  }
  const how = pm
    ? `Install them with:\n  ${installCommand(pm, packagesFor(missing, pm))}`
    : `Install them with your system's package manager (on Debian or Ubuntu: ${installCommand("apt", packagesFor(missing, "apt"))}).`;
  return { ok: false, message: `${opts.who} needs: ${list}.\n${how}` };
}
