import { existsSync, readFileSync } from "node:fs";
import { connect } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { memoryPins } from "../../shared/transports/host-keys.ts";
import { SshTransport } from "../../shared/transports/ssh.ts";
import { loadSshIdentity, publicKeyLine, type SshIdentity } from "../../shared/transports/ssh-identity.ts";
import { removeDir, tempDir, waitFor } from "../harness/runtime.ts";
import { addressLockPath, type FakeHost, type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

let work: string;
let identity: SshIdentity;
let fleet: FakeHosts;
const pins = memoryPins();
const opened: SshTransport[] = [];

beforeAll(async () => {
  work = tempDir("labfleet-ssh-hosts-");
  identity = await loadSshIdentity({ labfleetHome: work });
  fleet = await startFakeHosts(3, {
    authorizedKeys: publicKeyLine(identity),
    firstIndex: 4,
    sudo: ["nopasswd", "password", "none"],
  });
});

afterAll(async () => {
  await Promise.all(opened.map((t) => t.close()));
  await fleet?.stop();
  if (work) removeDir(work);
});

function ssh(host: FakeHost, connectTimeoutMs?: number): SshTransport {
  const t = new SshTransport({
    workshop: "harness",
    hostId: host.id,
    address: host.address,
    identity,
    pins,
    ...(connectTimeoutMs ? { connectTimeoutMs } : {}),
  });
  opened.push(t);
  return t;
}

/** Whether a process still runs (a zombie waiting for the machine's init to reap it does not). */
function alive(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** Whether something accepts TCP connections on the address. */
function listening(ip: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: ip, port });
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
  });
}

describe("fake SSH hosts", () => {
  it("gives each host its own id, loopback address, host key and folders", async () => {
    const [a, b, c] = fleet.hosts as [FakeHost, FakeHost, FakeHost];
    expect(fleet.hosts.map((h) => h.id)).toEqual(["byo-04", "byo-05", "byo-06"]);
    expect(fleet.hosts.map((h) => h.index)).toEqual([4, 5, 6]);
    for (const h of fleet.hosts) {
      expect(h.ip).toMatch(/^127\.10\.0\.\d+$/);
      expect(h.ip).not.toBe("127.0.1.1");
      expect(h.port).toBe(2222);
      expect(h.address).toBe(`lab@${h.ip}:2222`);
      expect(h.running).toBe(true);
    }
    expect(new Set(fleet.hosts.map((h) => h.ip)).size).toBe(3);
    expect(new Set(fleet.hosts.map((h) => h.hostKeyBase64)).size).toBe(3);
    expect(new Set(fleet.hosts.map((h) => h.root)).size).toBe(3);

    const write = await ssh(a).exec(
      "echo mine > ~/mark && echo t > /tmp/t && echo s > /srv/s && ls -A ~ /tmp /srv",
    );
    expect(write.exitCode).toBe(0);
    expect(readFileSync(join(a.root, "home", "mark"), "utf8")).toBe("mine\n");
    expect(readFileSync(join(a.root, "tmp", "t"), "utf8")).toBe("t\n");
    expect(readFileSync(join(a.root, "srv", "s"), "utf8")).toBe("s\n");
    for (const other of [b, c]) {
      const look = await ssh(other).exec(
        "ls -A ~ /tmp /srv; test -e ~/mark || test -e /tmp/t || test -e /srv/s",
      );
      expect(look.exitCode).toBe(1);
      expect(look.stdout).not.toMatch(/mark|^t$|^s$/m);
    }
    // the host's own processes only
    const ps = await ssh(b).exec("ps -e -o pid=,comm= | sort -n");
    expect(ps.stdout).toMatch(/^\s*1 bash$/m);
    expect(ps.stdout).toMatch(/sshd/);
    expect(ps.stdout.split("\n").length).toBeLessThan(15);
    expect(pins.all.get(a.id)).toBe(a.hostKeyBase64);
  });

  it("sets sudo per host: without a password, with one, or not at all", async () => {
    const [a, b, c] = fleet.hosts as [FakeHost, FakeHost, FakeHost];
    expect((await ssh(a).exec("sudo -n id -u")).stdout).toBe("0\n");
    const asks = await ssh(b).exec("sudo -n true");
    expect(asks.exitCode).not.toBe(0);
    expect(asks.stderr).toContain("a password is required");
    const listed = await ssh(b).exec("sudo -n -l 2>&1 || true");
    expect(listed.stdout).toContain("password");
    const none = await ssh(c).exec("sudo -n true");
    expect(none.exitCode).not.toBe(0);
  });

  it("kill ends everything on the host, detached jobs too; restart keeps its files and key", async () => {
    const host = fleet.hosts[0] as FakeHost;
    const t = ssh(host);
    const job = await t.exec("setsid -f sleep 301 > /dev/null 2>&1 < /dev/null; echo started");
    expect(job.stdout).toBe("started\n");
    await waitFor("the detached job", () =>
      host.processes().some((pid) => readCmdline(pid) === "sleep\u0000301\u0000"),
    );
    const pids = host.processes();
    const oldPid = host.pid;
    const key = host.hostKeyBase64;

    await host.kill();
    expect(host.running).toBe(false);
    expect(pids.filter(alive)).toEqual([]);
    expect(host.processes()).toEqual([]);
    expect(await listening(host.ip, host.port)).toBe(false);
    expect((await t.exec("true").catch((e: Error) => e)) as Error).toMatchObject({
      code: "host.unreachable",
    });

    await host.restart();
    expect(host.running).toBe(true);
    expect(host.pid).not.toBe(oldPid);
    expect(host.hostKeyBase64).toBe(key);
    // the same pins accept it: same key; the files are still there
    expect((await t.exec("cat ~/mark")).stdout).toBe("mine\n");
    expect(host.log().split("Server listening on").length - 1).toBe(2);
  });

  it("pause freezes a host until resume", async () => {
    const host = fleet.hosts[2] as FakeHost;
    host.pause();
    try {
      const state = (pid: number) => readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "")[0];
      await waitFor("every process of the host to stop", () =>
        host.processes().every((pid) => state(pid) === "T"),
      );
      const err = await ssh(host, 500)
        .exec("true")
        .catch((e: Error) => e);
      expect(err).toMatchObject({ code: "host.unreachable" });
    } finally {
      host.resume();
    }
    expect((await ssh(host).exec("echo awake")).stdout).toBe("awake\n");
  });

  it("gives fleets started at the same time different addresses, and stop leaves nothing behind", async () => {
    const keys = publicKeyLine(identity);
    const [one, two] = await Promise.all([
      startFakeHosts(2, { authorizedKeys: keys }),
      startFakeHosts(2, { authorizedKeys: keys }),
    ]);
    const all = [...one.hosts, ...two.hosts, ...fleet.hosts];
    expect(new Set(all.map((h) => h.ip)).size).toBe(all.length);
    for (const h of all) expect(readFileSync(addressLockPath(h.ip), "utf8")).toBe(String(process.pid));
    for (const h of two.hosts) expect((await ssh(h).exec("echo up")).stdout).toBe("up\n");
    await Promise.all(opened.splice(0).map((t) => t.close()));

    const hosts = [...one.hosts, ...two.hosts];
    expect(hosts.every((h) => h.running && alive(h.pid) && h.processes().length >= 2)).toBe(true);
    const pids = hosts.flatMap((h) => [h.pid, ...h.processes()]);
    await Promise.all([one.stop(), two.stop()]);
    expect(pids.filter(alive)).toEqual([]);
    for (const h of hosts) {
      expect(existsSync(h.root)).toBe(false);
      expect(existsSync(addressLockPath(h.ip))).toBe(false);
      expect(await listening(h.ip, h.port)).toBe(false);
    }
    for (const f of [one, two]) expect(existsSync(join(f.hosts[0]?.root ?? "/", ".."))).toBe(false);
  });
});

function readCmdline(pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    return "";
  }
}
