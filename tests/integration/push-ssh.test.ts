import { chmodSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getRun, startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { board, claimLab } from "../../shared/portal/claims.ts";
import { openPortal } from "../../shared/portal/portal.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { loadSshIdentity, publicKeyLine } from "../../shared/transports/ssh-identity.ts";
import { fixturesDir, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";
import { type FakeHost, type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/**
 * Progress pushed from bring-your-own hosts over SSH (real sshd hosts, tests/harness/ssh-hosts.ts): deploy gives
 * each host `push.env` with the local runtime's 127.0.0.1 address, and the lab's wrapper on the host posts its
 * phases, its exit and its health there, so a lab is claimable within 2 s of its health passing though the next
 * poll is far off. With the API unreachable from the hosts, polling still brings the labs to ready and no push
 * holds a wrapper up. (tests/integration/push-progress.test.ts does the same for local hosts.)
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
const runtimes: Runtime[] = [];
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);
let fleet: FakeHosts;
let home: string;

beforeAll(async () => {
  home = tempDir("labfleet-push-ssh-");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "secrets.yaml"), "{}\n");
  chmodSync(join(home, "secrets.yaml"), 0o600);
  const identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(3, { authorizedKeys: `${publicKeyLine(identity)}\n`, firstIndex: 41 });
}, 120_000);

afterAll(async () => {
  for (const rt of runtimes) {
    await rt.close();
    removeDir(rt.dataDir);
  }
  await fleet?.stop();
  if (home) removeDir(home);
});

async function runtime(opts: Parameters<typeof testRuntime>[0]): Promise<Runtime> {
  const rt = await testRuntime({ labfleetHome: home, ...opts });
  runtimes.push(rt);
  return rt;
}

function yaml(name: string, hosts: FakeHost[]): string {
  return `name: ${name}
lab:
  source: ${join(fixturesDir, "labs", "pushed")}
  setup: bash setup.sh
  health: test -f built && { [ -f healthy_at ] || date +%s%3N > healthy_at; }
  timeout_minutes: 5
provider:
  type: static
hosts:
${hosts.map((h) => `  - id: ${h.id}\n    ssh: ${h.address}\n`).join("")}portal:
  enabled: true
`;
}

/** The lab's folder on an SSH host (the login user's home is the host's `home/`). */
const labDir = (h: FakeHost) => join(h.root, "home", "lab");
const stateDir = (h: FakeHost, workshop: string) => join(h.root, "home", ".labfleet", workshop);

/** The processes on the host that belong to the lab's wrapper or its setup (not sshd). */
function labProcesses(h: FakeHost, workshop: string): number[] {
  return h.processes().filter((pid) => {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      return cmd.includes(`.labfleet/${workshop}`) || cmd.includes("setup.sh");
    } catch {
      return false;
    }
  });
}

describe("pushed progress on SSH hosts", { timeout: 180_000 }, () => {
  it("makes each lab claimable within 2 s of its health passing, long before the next poll", async () => {
    const [a, b] = fleet.hosts as [FakeHost, FakeHost];
    // Each Wait state lasts 20 s: the first poll comes about 20 s after the deploy.
    const rt = await runtime({ waitMs: 20_000 });
    await asInstructor(() => submitWorkshop(yaml("pushssh", [a, b])));
    await asInstructor(() => openPortal("pushssh"));
    const run = await asInstructor(() => startRun("pushssh", "up"));
    const freeAt = new Map<string, number>();
    await waitFor(
      "both labs claimable",
      async () => {
        const bd = await board("pushssh");
        const now = Date.now();
        if (!bd.open) return undefined;
        for (const l of bd.labs) if (l.status === "free" && !freeAt.has(l.lab)) freeAt.set(l.lab, now);
        return freeAt.size === 2 ? true : undefined;
      },
      60_000,
    );
    for (const h of [a, b]) {
      const healthyAt = Number(readFileSync(join(labDir(h), "healthy_at"), "utf8"));
      expect((freeAt.get(h.id) as number) - healthyAt, h.id).toBeLessThan(2_000);
      // The host was told where to push: the runtime's own 127.0.0.1 address, in a file only its user reads.
      const env = join(stateDir(h, "pushssh"), "push.env");
      expect(readFileSync(env, "utf8")).toContain(`LABFLEET_API='${rt.url}'`);
      expect(statSync(env).mode & 0o777).toBe(0o600);
    }
    // Ready came from the pushes: the run still waits for its first poll.
    expect((await getRun("pushssh", run.runId)).state).toBe("running");
    const claim = await claimLab(
      "pushssh",
      { name: "Ada Lovelace", email: "ada@example.test", pin: "503917" },
      "10.0.0.1",
    );
    expect([a.id, b.id]).toContain(claim.lab);
    const host = (await rt.store.host.get({ workshop: "pushssh", hostId: a.id }).go()).data;
    expect(host?.phases?.map((p) => p.name)).toEqual(["fetch", "build"]);
    expect(host?.access).toBeTruthy();
    await rt.executor.idle();
    expect((await getRun("pushssh", run.runId)).state).toBe("succeeded");
  });
});

describe("SSH hosts with the API unreachable", { timeout: 180_000 }, () => {
  let blackhole: Server | undefined;
  const sockets: Socket[] = [];
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((r) => blackhole?.close(r));
  });

  it("polling still brings the lab to ready, and no push holds the wrapper up", async () => {
    const h = fleet.hosts[2] as FakeHost;
    // A server that accepts connections and never answers: every push waits until its own timeout.
    blackhole = createServer((s) => sockets.push(s));
    await new Promise<void>((r) => blackhole?.listen(0, "127.0.0.1", r));
    const port = (blackhole.address() as { port: number }).port;
    const rt = await runtime({ waitMs: 200, hostApiUrl: `http://127.0.0.1:${port}` });
    await asInstructor(() => submitWorkshop(yaml("pushsshdown", [h])));
    const run = await asInstructor(() => startRun("pushsshdown", "up"));
    await rt.executor.idle();
    expect((await getRun("pushsshdown", run.runId)).state).toBe("succeeded");
    const host = (await rt.store.host.get({ workshop: "pushsshdown", hostId: h.id }).go()).data;
    expect(host?.state).toBe("ready");
    expect(host?.access).toBeTruthy();
    // The wrapper did try to push (on a busy machine the poll may see the lab ready before its push connects).
    await waitFor("the wrapper's push to connect", () => sockets.length > 0 || undefined, 30_000);
    // Each push gives up by itself: the wrapper ends (health passed, pushed or not) well within a minute.
    await waitFor(
      "the wrapper to end",
      () => labProcesses(h, "pushsshdown").length === 0 || undefined,
      60_000,
    );
  });
});
