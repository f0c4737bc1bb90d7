import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureNeeds, RUNTIME_NEEDS } from "../../cli/local/os-packages.ts";
import { runCli } from "../harness/cli.ts";
import { removeDir, tempDir } from "../harness/runtime.ts";

/** `npm start` on a machine without Java: what `labfleet dev` does before it starts anything. */
let work: string;
let bin: string;

/** A PATH folder with node, the shell tools and the runtime's other needs, but no java and no apt-get. */
beforeAll(() => {
  work = tempDir("labfleet-fresh-");
  bin = join(work, "bin");
  mkdirSync(bin);
  for (const c of ["node", "sh", "bash", "setsid", "tar"]) {
    const at = execFileSync("sh", ["-c", `command -v ${c}`], { encoding: "utf8" }).trim();
    symlinkSync(at, join(bin, c));
  }
});
afterAll(() => {
  if (work) removeDir(work);
});

describe("a machine without Java", () => {
  it("labfleet dev names what is missing and the command that installs it, exits 1 and writes nothing", async () => {
    const dataDir = join(work, "data");
    const r = await runCli(
      ["dev", "-f", "examples/demo/workshop.yaml", "--data-dir", dataDir, "--port", "0"],
      {
        env: { PATH: bin, LABFLEET_DYNAMODB_ENDPOINT: undefined },
      },
    );
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("labfleet: labfleet dev needs: java (DynamoDB Local).\nInstall them with:\n");
    // This machine is Debian: the apt-get command, since there is no apt-get on that PATH to run it with.
    expect(r.stderr).toContain(
      "  sudo apt-get update && sudo apt-get install -y --no-install-recommends openjdk-17-jre-headless",
    );
    expect(r.stdout).toBe("");
    expect(existsSync(dataDir)).toBe(false);
  });

  it("as root with apt-get, it runs apt-get update and install for the missing package, then goes on", () => {
    // A stand-in apt-get: records its arguments and, on install, puts a java on the PATH as the package would.
    const fake = join(work, "apt-bin");
    mkdirSync(fake);
    const calls = join(work, "apt-calls");
    writeFileSync(
      join(fake, "apt-get"),
      `#!/bin/sh\necho "$DEBIAN_FRONTEND $*" >> ${calls}\n` +
        `if [ "$1" = install ]; then printf '#!/bin/sh\\n' > ${fake}/java; /bin/chmod +x ${fake}/java; fi\n`,
    );
    chmodSync(join(fake, "apt-get"), 0o755);
    const log: string[] = [];
    const r = ensureNeeds(RUNTIME_NEEDS, {
      who: "labfleet dev",
      path: `${fake}:${bin}`,
      platform: "linux",
      osRelease: "ID=debian\n",
      isRoot: true,
      log: (l) => log.push(l),
    });
    expect(r).toEqual({ ok: true, installed: ["openjdk-17-jre-headless"] });
    expect(readFileSync(calls, "utf8")).toBe(
      "noninteractive update\nnoninteractive install -y --no-install-recommends openjdk-17-jre-headless\n",
    );
    expect(log).toEqual(["installing openjdk-17-jre-headless for labfleet dev (java (DynamoDB Local))"]);
  });

  it("as root, an apt-get that fails is reported with its exit code", () => {
    const fake = join(work, "apt-fail");
    mkdirSync(fake);
    writeFileSync(join(fake, "apt-get"), "#!/bin/sh\nexit 100\n");
    chmodSync(join(fake, "apt-get"), 0o755);
    const r = ensureNeeds(RUNTIME_NEEDS, {
      who: "labfleet dev",
      path: `${fake}:${bin}`,
      platform: "linux",
      osRelease: "ID=debian\n",
      isRoot: true,
    });
    expect(r).toEqual({ ok: false, message: "apt-get update failed with exit code 100" });
  });
});
