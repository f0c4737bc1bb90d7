import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, release, userInfo } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { doctorScript } from "../../shared/fleet/ops.ts";
import { removeDir, tempDir } from "../harness/runtime.ts";

/**
 * Doctor over a fleet runs its script on every host at once; on hosts that share a machine (the fake hosts, a
 * crowded hypervisor) each process it starts counts. Every external command the script may start is put on the
 * PATH as a wrapper that logs its name, so the test counts them.
 */
const work = tempDir("labfleet-doctor-script-");
afterAll(() => removeDir(work));

const COMMANDS = ["id", "sudo", "uname", "nproc", "getconf", "df", "awk", "cat", "head", "tr", "grep", "sed"];

/** Runs the script with every command it may start counted; as `nobody` when `asNobody` (the test runs as root). */
function runCounted(script: string, asNobody = false): { out: Record<string, string>; started: string[] } {
  const bin = join(work, "bin");
  const log = join(work, "started");
  mkdirSync(bin, { recursive: true });
  chmodSync(work, 0o755);
  writeFileSync(log, "");
  chmodSync(log, 0o666);
  for (const c of COMMANDS) {
    const real = execFileSync("bash", ["-c", `command -v ${c}`])
      .toString()
      .trim();
    writeFileSync(join(bin, c), `#!/bin/bash\necho ${c} >> ${log}\nexec ${real} "$@"\n`);
    chmodSync(join(bin, c), 0o755);
  }
  const text = execFileSync("bash", ["--noprofile", "--norc", "-c", script], {
    env: { PATH: `${bin}:/usr/sbin:/usr/bin:/sbin:/bin`, HOME: work },
    ...(asNobody ? { uid: NOBODY, gid: NOBODY } : {}),
  }).toString();
  const out = Object.fromEntries(
    text
      .split("\n")
      .filter((l) => l.includes("="))
      .map((l) => [l.slice(0, l.indexOf("=")), l.slice(l.indexOf("=") + 1)]),
  );
  return { out, started: readFileSync(log, "utf8").split("\n").filter(Boolean) };
}

const NOBODY = 65534;

describe("the doctor script", () => {
  it("reports the host's facts while starting one process (df), and sudo only as another user than root", () => {
    const { out, started } = runCounted(
      doctorScript(["bash", "tar", "nosuch-command"], { sudo: true, disk: true }),
    );
    expect(out.user).toBe(userInfo().username);
    expect(out.uid).toBe(String(process.getuid?.()));
    expect(out.kernel).toBe(release());
    // the CPUs this process may use, as nproc counts them (its affinity), not every CPU of the machine
    expect(out.cpus).toBe(execFileSync("nproc").toString().trim());
    expect(Number(out.cpus)).toBeLessThanOrEqual(cpus().length);
    const memTotal = /^MemTotal:\s+(\d+)/m.exec(readFileSync("/proc/meminfo", "utf8"))?.[1];
    expect(out.mem_kib).toBe(memTotal);
    expect(out.disk_free_kib).toMatch(/^[1-9]\d*$/);
    expect(out["cmd:bash"]).toBe("yes");
    expect(out["cmd:nosuch-command"]).toBe("no");
    // root needs no sudo check; anyone else adds one `sudo -n true`
    expect(started.filter((c) => c !== "sudo")).toEqual(["df"]);
  });

  it("starts no process at all for a lab that requires neither root nor free disk", () => {
    const spare = doctorScript(["bash"], { sudo: false, disk: false });
    const asRoot = runCounted(spare);
    expect(asRoot.started).toEqual([]);
    expect(asRoot.out.sudo).toBe("root"); // known without asking sudo
    expect(asRoot.out.disk_free_kib).toBeUndefined();
    expect(asRoot.out.mem_kib).toMatch(/^[1-9]\d*$/);

    // another user than root: sudo is asked only when the lab requires root
    const other = runCounted(spare, true);
    expect(other.out.uid).toBe(String(NOBODY));
    expect(other.out.sudo).toBe("unchecked");
    expect(other.started).toEqual([]);
    const asked = runCounted(doctorScript(["bash"], { sudo: true, disk: false }), true);
    expect(asked.started).toEqual(["sudo"]);
    expect(asked.out.sudo).toBe("no");
  });
});
