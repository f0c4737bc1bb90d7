import { chmodSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  ensureNeeds,
  hasCommand,
  installCommand,
  missingNeeds,
  packageManagerFor,
  packagesFor,
  RUNTIME_NEEDS,
  TEST_NEEDS,
} from "../../cli/local/os-packages.ts";

const DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n';
const UBUNTU = "NAME=Ubuntu\nID=ubuntu\nID_LIKE=debian\n";
const FEDORA = "NAME=Fedora Linux\nID=fedora\nVERSION_ID=41\n";
const ROCKY = 'ID="rocky"\nID_LIKE="rhel centos fedora"\n';

const dir = join(tmpdir(), `labfleet-os-packages-${process.pid}`);
const bin = join(dir, "bin");
mkdirSync(bin, { recursive: true });
for (const c of ["setsid", "tar"]) {
  writeFileSync(join(bin, c), "#!/bin/sh\n");
  chmodSync(join(bin, c), 0o755);
}
writeFileSync(join(bin, "java"), "not executable");
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("what the local runtime needs from the OS", () => {
  it("finds commands on the PATH it is given, executable ones only", () => {
    expect(hasCommand("setsid", bin)).toBe(true);
    expect(hasCommand("java", bin)).toBe(false); // there, but not executable
    expect(hasCommand("java", "")).toBe(false);
    expect(missingNeeds(RUNTIME_NEEDS, bin).map((n) => n.command)).toEqual(["java"]);
    expect(missingNeeds(TEST_NEEDS, bin).map((n) => n.command)).toContain("git");
  });

  it("knows the package manager of Debian, Ubuntu, Fedora, its relatives and macOS", () => {
    expect(packageManagerFor("linux", DEBIAN)).toBe("apt");
    expect(packageManagerFor("linux", UBUNTU)).toBe("apt");
    expect(packageManagerFor("linux", FEDORA)).toBe("dnf");
    expect(packageManagerFor("linux", ROCKY)).toBe("dnf");
    expect(packageManagerFor("darwin")).toBe("brew");
    expect(packageManagerFor("linux", "ID=alpine\n")).toBeUndefined();
    expect(packageManagerFor("win32")).toBeUndefined();
  });

  it("prints the exact install command for each platform", () => {
    const java = missingNeeds(RUNTIME_NEEDS, bin);
    expect(installCommand("apt", packagesFor(java, "apt"))).toBe(
      "sudo apt-get update && sudo apt-get install -y --no-install-recommends openjdk-17-jre-headless",
    );
    expect(installCommand("dnf", packagesFor(java, "dnf"))).toBe(
      "sudo dnf install -y java-17-openjdk-headless",
    );
    expect(installCommand("brew", packagesFor(java, "brew"))).toBe(
      'brew install openjdk@17 && export PATH="$(brew --prefix openjdk@17)/bin:$PATH"',
    );
    // Every package once, though setsid and unshare both come from util-linux.
    expect(packagesFor(TEST_NEEDS, "apt")).toEqual([
      "openjdk-17-jre-headless",
      "util-linux",
      "tar",
      "git",
      "openssh-server",
      "openssh-client",
      "sudo",
      "curl",
      "openssl",
      "chromium",
    ]);
  });

  it("without root answers what is missing, why, and the command for the platform", () => {
    for (const [osRelease, platform, command] of [
      [
        DEBIAN,
        "linux",
        "sudo apt-get update && sudo apt-get install -y --no-install-recommends openjdk-17-jre-headless",
      ],
      [FEDORA, "linux", "sudo dnf install -y java-17-openjdk-headless"],
      ["", "darwin", "brew install openjdk@17"],
    ] as const) {
      const r = ensureNeeds(RUNTIME_NEEDS, {
        who: "labfleet dev",
        path: bin,
        platform,
        osRelease,
        isRoot: false,
      });
      expect(r.ok).toBe(false);
      if (!r.ok) {
        expect(r.message).toContain("labfleet dev needs: java (DynamoDB Local).\nInstall them with:\n  ");
        expect(r.message).toContain(command);
      }
    }
    expect(ensureNeeds(RUNTIME_NEEDS.slice(1), { who: "x", path: bin })).toEqual({ ok: true, installed: [] });
  });
});
