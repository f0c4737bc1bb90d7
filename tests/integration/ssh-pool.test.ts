import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { forgetHostKey } from "../../shared/fleet/host-keys.ts";
import { hostAddress } from "../../shared/fleet/hosts.ts";
import { doctor, refreshHosts } from "../../shared/fleet/ops.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { getWorkshop, listHosts, submitWorkshop } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { memoryPins } from "../../shared/transports/host-keys.ts";
import { TransportPool } from "../../shared/transports/pool.ts";
import { SshTransport } from "../../shared/transports/ssh.ts";
import { loadSshIdentity, publicKeyLine, type SshIdentity } from "../../shared/transports/ssh-identity.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { fixturesDir, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";
import { type FakeHost, type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/**
 * The local runtime keeps each SSH host's connection open between operations (shared/transports/pool.ts): counted
 * with sshd's own log (one "Accepted publickey" per login) and the TCP connections established to each host.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime | undefined;
let fleet: FakeHosts;
let home: string;
let identity: SshIdentity;
let reused: FakeHost; // doctor, status, exec, many at once
let dropped: FakeHost; // its connection killed, restarted, then killed for good
let rekeyed: FakeHost; // comes back with a new host key
let removed: FakeHost; // taken out of the workshop
const NAME = "pool";

const accepted = (host: FakeHost) => host.log().split("Accepted publickey for lab").length - 1;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "pool-test" }, fn);

function yaml(hosts: FakeHost[]): string {
  return `name: ${NAME}
lab:
  source: ${join(fixturesDir, "labs", "quick")}
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 2
provider:
  type: static
hosts:
${hosts.map((h) => `  - { id: ${h.id}, ssh: "${h.address}" }`).join("\n")}
`;
}

async function up(): Promise<void> {
  await asInstructor(() => startRun(NAME, "up", { concurrency: 8 }));
  await rt?.executor.idle();
}

async function doctorOf(host: FakeHost) {
  const [report] = await asInstructor(() => doctor(NAME, { hosts: [host.id] }));
  if (!report) throw new Error(`doctor reported nothing for ${host.id}`);
  return report;
}

/** The pooled transport the runtime gives for a host of the workshop (what every operation uses). */
async function transportOf(host: FakeHost) {
  const spec = (await getWorkshop(NAME)).spec as Workshop;
  return useDeps().transport(
    hostAddress(spec, { transport: "ssh" }, { hostId: host.id, address: host.address }),
  );
}

/** The processes sshd runs for one connection (`sshd: lab [priv]`, `sshd: lab`): killing them drops it. */
function connectionProcesses(host: FakeHost): number[] {
  return host.processes().filter((pid) => {
    try {
      return /^sshd: lab/.test(readFileSync(`/proc/${pid}/cmdline`, "utf8"));
    } catch {
      return false;
    }
  });
}

beforeAll(async () => {
  const data = tempDir();
  home = join(data, "operator-home");
  identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(4, { authorizedKeys: `${publicKeyLine(identity)}\n` });
  [reused, dropped, rekeyed, removed] = fleet.hosts as [FakeHost, FakeHost, FakeHost, FakeHost];
  rt = await testRuntime({ dataDir: data, labfleetHome: home });
  await asInstructor(() => submitWorkshop(yaml(fleet.hosts)));
  await up();
  expect((await listHosts(NAME)).map((h) => h.state)).toEqual(["ready", "ready", "ready", "ready"]);
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await fleet?.stop();
  if (rt) removeDir(rt.dataDir);
});

describe("pooled SSH connections in the local runtime", () => {
  it("reuses one connection per host for doctor, status refreshes and exec", async () => {
    const before = accepted(reused);
    expect(reused.connections()).toBe(1); // kept open since up
    for (let i = 0; i < 3; i++) expect((await doctorOf(reused)).ok).toBe(true);
    await asInstructor(() => refreshHosts(NAME, { hosts: [reused.id] }));
    await asInstructor(() => refreshHosts(NAME, { hosts: [reused.id] }));
    const t = await transportOf(reused);
    expect((await t.exec("echo hi")).stdout).toBe("hi\n");
    await t.close?.();
    expect(accepted(reused)).toBe(before);
    expect(reused.connections()).toBe(1);
  });

  it("runs more operations at once than sshd's MaxSessions on one host, all on one connection", async () => {
    const before = accepted(reused);
    const leases = await Promise.all(Array.from({ length: 5 }, () => transportOf(reused)));
    const [doctors, results] = await Promise.all([
      Promise.all(Array.from({ length: 3 }, () => doctorOf(reused))),
      Promise.all(
        Array.from({ length: 25 }, (_, i) =>
          (leases[i % leases.length] as (typeof leases)[number]).exec(`sleep 0.2; echo ${i}; exit ${i % 7}`),
        ),
      ),
    ]);
    expect(doctors.every((d) => d.ok)).toBe(true);
    for (const [i, r] of results.entries()) {
      expect(r.exitCode).toBe(i % 7);
      expect(r.stdout).toBe(`${i}\n`);
    }
    expect(accepted(reused)).toBe(before);
    expect(reused.connections()).toBe(1);
  });

  it("reconnects once after the connection drops or the host restarts, then fails clearly when it is gone", async () => {
    let logins = accepted(dropped);
    expect(dropped.connections()).toBe(1);
    const sessions = connectionProcesses(dropped);
    expect(sessions.length).toBeGreaterThan(0);
    for (const pid of sessions) process.kill(pid, "SIGKILL");
    await waitFor("the connection to drop", () => dropped.connections() === 0 || undefined, 10_000);
    expect((await doctorOf(dropped)).ok).toBe(true);
    expect(accepted(dropped)).toBe(++logins);

    // A restart without a word to labfleet: the pooled connection is dead, the next operation finds out.
    await dropped.restart();
    expect((await doctorOf(dropped)).ok).toBe(true);
    await waitFor("the login after the restart", () => accepted(dropped) === logins + 1 || undefined, 5000);
    logins++;
    expect((await doctorOf(dropped)).ok).toBe(true);
    expect(accepted(dropped)).toBe(logins);

    await dropped.kill();
    const gone = await doctorOf(dropped);
    expect(gone.ok).toBe(false);
    expect(gone.checks[0]?.detail).toMatch(new RegExp(`${dropped.id} .*unreachable during doctor`));
    await dropped.restart();
  });

  it("checks the host key again when it reconnects: a host back with another key is refused", async () => {
    expect((await doctorOf(rekeyed)).ok).toBe(true);
    const logins = accepted(rekeyed);
    await rekeyed.restart({ newHostKey: true });
    const report = await doctorOf(rekeyed);
    expect(report.ok).toBe(false);
    expect(report.checks[0]?.detail).toContain(`The SSH host key of ${rekeyed.id}`);
    expect(report.checks[0]?.detail).toContain("has changed");
    expect(accepted(rekeyed)).toBe(logins); // refused at the handshake: never logged in
    expect(rekeyed.connections()).toBe(0);
  });

  it("ends a host's connection when its pinned key is forgotten, and pins the key of the next one", async () => {
    expect(reused.connections()).toBe(1);
    const logins = accepted(reused);
    await asInstructor(() => forgetHostKey(NAME, reused.id));
    await waitFor("the connection to end", () => reused.connections() === 0 || undefined, 5000);
    expect((await doctorOf(reused)).ok).toBe(true);
    expect(accepted(reused)).toBe(logins + 1);
  });

  it("ends the connections of hosts taken out of the workshop, and of all its hosts at teardown", async () => {
    expect((await doctorOf(removed)).ok).toBe(true);
    expect(removed.connections()).toBe(1);
    await asInstructor(() => submitWorkshop(yaml([reused, dropped])));
    await up();
    expect(removed.connections()).toBe(0);
    expect(reused.connections()).toBe(1);

    await asInstructor(() => startRun(NAME, "teardown"));
    await rt?.executor.idle();
    for (const h of fleet.hosts) expect(h.connections(), h.id).toBe(0);
  });

  it("leaves no connection open once the runtime stops", async () => {
    const t = await transportOf(reused);
    expect((await t.exec("true")).exitCode).toBe(0);
    expect(reused.connections()).toBe(1);
    await rt?.close();
    rt = undefined;
    for (const h of fleet.hosts) expect(h.connections(), h.id).toBe(0);
  });
});

describe("TransportPool over real sshd", () => {
  const transport = (host: FakeHost) =>
    new SshTransport({ workshop: "w", hostId: host.id, address: host.address, identity, pins: memoryPins() });
  const key = (host: FakeHost) => ({ workshop: "w", hostId: host.id, shape: host.address });

  it("closes a connection left idle, and opens a new one on the next use", async () => {
    const pool = new TransportPool({ idleMs: 300 });
    try {
      const host = fleet.hosts[0] as FakeHost;
      const base = host.connections();
      const logins = accepted(host);
      const t = pool.lease(key(host), async () => transport(host));
      await t.exec("true");
      await t.exec("true");
      expect(host.connections()).toBe(base + 1);
      await waitFor("the idle connection to close", () => host.connections() === base || undefined, 5000);
      expect(pool.size).toBe(0);
      await t.exec("true");
      expect(accepted(host)).toBe(logins + 2);
    } finally {
      await pool.close();
    }
  });

  it("gives up on a kept connection to a host that froze, within the connect timeout, and tries a new one", async () => {
    const pool = new TransportPool();
    const host = removed;
    try {
      const t = pool.lease(
        key(host),
        async () =>
          new SshTransport({
            workshop: "w",
            hostId: host.id,
            address: host.address,
            identity,
            pins: memoryPins(),
            connectTimeoutMs: 1500,
          }),
      );
      expect((await t.exec("true")).exitCode).toBe(0);
      host.pause();
      const started = performance.now();
      const outcome = await Promise.race([
        t.exec("true", { step: "check" }).then(
          () => "ran",
          (err: Error) => err.message,
        ),
        new Promise<string>((r) => setTimeout(() => r("still waiting after 15 s"), 15_000).unref()),
      ]);
      expect(outcome).toMatch(new RegExp(`${host.id} .*unreachable during check`));
      // one wait for the session on the kept connection, one for the handshake of a new one
      expect(performance.now() - started).toBeLessThan(3 * 1500 + 2000);
      host.resume();
      expect((await t.exec("echo back")).stdout).toBe("back\n");
    } finally {
      host.resume();
      await pool.close();
    }
  });

  it("keeps at most maxOpen hosts connected, closing the least recently used first", async () => {
    const pool = new TransportPool({ maxOpen: 2 });
    try {
      const [a, b, c] = fleet.hosts as [FakeHost, FakeHost, FakeHost];
      const base = [a, b, c].map((h) => h.connections());
      const lease = (h: FakeHost) => pool.lease(key(h), async () => transport(h));
      await lease(a).exec("true");
      await lease(b).exec("true");
      await lease(a).exec("true"); // a is now more recent than b
      await lease(c).exec("true");
      expect(pool.size).toBe(2);
      await waitFor("b's connection to close", () => b.connections() === base[1] || undefined, 5000);
      expect(a.connections()).toBe((base[0] ?? 0) + 1);
      expect(c.connections()).toBe((base[2] ?? 0) + 1);
    } finally {
      await pool.close();
    }
  });
});
