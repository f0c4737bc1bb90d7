import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ExecReport } from "../../shared/fleet/exec.ts";
import { loadSshIdentity, publicKeyLine } from "../../shared/transports/ssh-identity.ts";
import { runCli } from "../harness/cli.ts";
import { fixturesDir, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";
import { type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/** `labfleet exec` on bring-your-own hosts over real OpenSSH, before any up: the hosts of workshop.yaml. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: FakeHosts;
let work: string;
let env: Record<string, string>;
const W = "byo-exec";

beforeAll(async () => {
  work = tempDir("labfleet-sshexec-");
  const home = join(work, "operator-home");
  mkdirSync(home, { recursive: true });
  const identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(3, { authorizedKeys: `${publicKeyLine(identity)}\n`, firstIndex: 61 });
  rt = await testRuntime({ labfleetHome: home });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  const hosts = fleet.hosts.map((h) => `  - id: ${h.id}\n    ssh: ${h.address}\n`).join("");
  writeFileSync(
    join(work, "w.yaml"),
    `name: ${W}\nlab:\n  source: ${join(fixturesDir, "labs", "quick")}\n  setup: bash setup.sh\n  health: test -f built\nprovider:\n  type: static\nhosts:\n${hosts}`,
  );
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await fleet?.stop();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

const exec = (args: string[]) => runCli(["exec", "-f", join(work, "w.yaml"), ...args], { env });
const report = async (args: string[]) => {
  const r = await exec(["--output", "json", ...args]);
  return { code: r.code, report: JSON.parse(r.stdout) as ExecReport };
};

describe("labfleet exec over SSH", () => {
  it("runs as the login user on each host, prefixed per host, with the failures in the summary", async () => {
    const [, second] = fleet.hosts;
    if (!second) throw new Error("no host");
    writeFileSync(join(second.root, "home", "broken"), "");
    const r = await exec(["--", 'echo "$(id -un) in $HOME"; test ! -e broken || { echo no >&2; exit 5; }']);
    expect(r.code, r.stderr).toBe(1);
    for (const h of fleet.hosts) expect(r.stdout).toContain(`${h.id} | lab in /home/lab\n`);
    expect(r.stdout).toContain(`${second.id} ! no\n${second.id} # failed (exit 5)\n`);
    expect(r.stdout.trimEnd().split("\n").at(-1)).toBe(`2 ok, 1 failed (exit 5): ${second.id}`);
  });

  it("-j runs hosts together, and --max-errors skips the rest after a failure", async () => {
    const meet = `/var/tmp/labfleet-exec-meet-${process.pid}`;
    const cmd = `mkdir -p -m 777 ${meet} 2>/dev/null; mktemp -p ${meet} m.XXXXXXXX >/dev/null; for i in $(seq 300); do [ "$(ls ${meet} | wc -l)" -ge 3 ] && exit 0; sleep 0.1; done; exit 1`;
    try {
      const together = await report(["-j", "3", "--", cmd]);
      expect(together.report.hosts.map((h) => h.status)).toEqual(["ok", "ok", "ok"]);
    } finally {
      removeDir(meet);
    }
    const stopped = await report(["-j", "1", "--max-errors", "1", "--", "exit 9"]);
    expect(stopped.code).toBe(1);
    expect(stopped.report.hosts.map((h) => [h.status, h.exitCode])).toEqual([
      ["failed", 9],
      ["skipped", null],
      ["skipped", null],
    ]);
  });

  it("--timeout kills the command and what it started on the host", async () => {
    const [first] = fleet.hosts;
    if (!first) throw new Error("no host");
    const r = await exec(["--host", first.id, "--timeout", "1", "--", "sleep 51 & sleep 52"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(`${first.id} # timeout: killed on the host after 1 s`);
    // Only the host's own sshd is left: no sleep outlived the timeout.
    await waitFor("the host's sleeps to end", () =>
      first
        .processes()
        .every((pid) => !/sleep 5[12]/.test(readFileSync(`/proc/${pid}/cmdline`, "utf8").replace(/\0/g, " ")))
        ? true
        : undefined,
    );
  });

  it("bounds the output per host and marks the cut", async () => {
    const { report: r } = await report(["--host", fleet.hosts[2]?.id ?? "", "--", "seq 1 40000"]);
    const h = r.hosts[0];
    expect(h?.stdoutTruncated).toBe(true);
    expect(h?.stdout.length).toBe(65_536);
    expect(h?.stdout.startsWith("1\n2\n3\n")).toBe(true);
    expect(h?.stdoutBytes).toBe(
      Buffer.byteLength(`${Array.from({ length: 40000 }, (_, i) => i + 1).join("\n")}\n`),
    );
  });

  it("a host that cannot be reached is an error of its own; the others still run", async () => {
    const [, , third] = fleet.hosts;
    if (!third) throw new Error("no host");
    await third.kill();
    try {
      const { code, report: r } = await report(["--", "echo up"]);
      expect(code).toBe(1);
      expect(r.hosts.map((h) => h.status)).toEqual(["ok", "ok", "error"]);
      expect(r.hosts[2]?.reason).toMatch(/unreachable|connect|refused/i);
      expect(r.summary.text).toBe(`2 ok, 1 error: ${third.id}`);
    } finally {
      await third.restart();
    }
  });
});
