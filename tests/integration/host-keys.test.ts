import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { doctor } from "../../shared/fleet/ops.ts";
import { listHosts } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { fingerprint } from "../../shared/transports/host-keys.ts";
import {
  generateEd25519KeyPair,
  loadSshIdentity,
  publicKeyLine,
} from "../../shared/transports/ssh-identity.ts";
import { runCli } from "../harness/cli.ts";
import { fixturesDir, removeDir, tempDir, testRuntime } from "../harness/runtime.ts";
import { type FakeHost, type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/**
 * Host keys obtained out of band, on real OpenSSH hosts and the real CLI: keys given in workshop.yaml, keys
 * pinned with `labfleet hosts pin`, and ssh.require_known_host_keys, which sends an operator secret only to hosts
 * whose key did not come from the network.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: FakeHosts;
let work: string;
let env: Record<string, string>;
let right: FakeHost; // its key is given in workshop.yaml
let wrong: FakeHost; // workshop.yaml gives another key than its own
let tofu: FakeHost; // known only on first use until it is pinned
const SECRET = "hostkey-secret-3f9a1c";
const TOKEN = "hostkeys-suite-token";

const keyLine = (h: FakeHost) => readFileSync(join(h.root, "hostkey.pub"), "utf8").trim();
const secretsFile = (h: FakeHost, workshop: string) =>
  join(h.root, "home", ".labfleet", workshop, "secrets.env");
/** Whether the secret landed anywhere in the host's files (its home, /srv and /tmp). */
function secretOnHost(h: FakeHost): boolean {
  return spawnSync("grep", ["-rqF", SECRET, h.root]).status === 0;
}

function yaml(name: string, hosts: { host: FakeHost; hostKey?: string }[], requireKnown: boolean): string {
  const entries = hosts
    .map(
      ({ host, hostKey }) =>
        `  - id: ${host.id}\n    ssh: ${host.address}\n${hostKey ? `    host_key: ${JSON.stringify(hostKey)}\n` : ""}`,
    )
    .join("");
  return `name: ${name}
lab:
  source: ${join(fixturesDir, "labs", "secret-ok")}
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 2
  operator_secrets: [API_TOKEN]
provider:
  type: static
${requireKnown ? "ssh:\n  require_known_host_keys: true\n" : ""}hosts:
${entries}`;
}

const cli = (...args: string[]) => runCli(args, { env, cwd: work });

beforeAll(async () => {
  work = tempDir("labfleet-hostkeys-");
  const home = join(work, "operator-home");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "secrets.yaml"), `API_TOKEN: "${SECRET}"\n`);
  chmodSync(join(home, "secrets.yaml"), 0o600);
  const identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(3, { authorizedKeys: `${publicKeyLine(identity)}\n`, firstIndex: 21 });
  [right, wrong, tofu] = fleet.hosts as [FakeHost, FakeHost, FakeHost];
  rt = await testRuntime({ token: TOKEN, labfleetHome: home });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: TOKEN };
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await fleet?.stop();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("keys given in workshop.yaml", () => {
  it("a host given its own key is trusted and gets the secret; one given another key is refused at the handshake", async () => {
    const other = generateEd25519KeyPair().public;
    writeFileSync(
      join(work, "given.yaml"),
      yaml(
        "given",
        [
          { host: right, hostKey: `${right.ip} ${keyLine(right)}` }, // the form ssh-keyscan prints
          { host: wrong, hostKey: other },
        ],
        true,
      ),
    );
    const up = await cli("up", "-f", "given.yaml");
    expect(up.code, up.stdout + up.stderr).toBe(1);
    const hosts = Object.fromEntries((await listHosts("given")).map((h) => [h.hostId, h]));
    expect(hosts[right.id]?.state, hosts[right.id]?.error).toBe("ready");
    expect(readFileSync(secretsFile(right, "given"), "utf8")).toBe(`API_TOKEN='${SECRET}'\n`);

    expect(hosts[wrong.id]?.state).toBe("failed");
    const error = hosts[wrong.id]?.error ?? "";
    expect(error).toContain(`The SSH host key of ${wrong.id} (${wrong.address}) in workshop given`);
    expect(error).toContain(`hosts[].host_key has ${fingerprint(other.split(" ")[1] as string)}`);
    expect(error).toContain(`the host now offers ${fingerprint(wrong.hostKeyBase64)}`);
    expect(error).toContain("put it in hosts[].host_key");
    expect(up.stdout).toContain(`${wrong.id} failed: The SSH host key of ${wrong.id}`);
    expect(secretOnHost(wrong)).toBe(false);

    // `hosts keys` says where each key came from; nothing was pinned at first contact for either host.
    const keys = await cli("hosts", "keys", "given");
    expect(keys.code).toBe(0);
    expect(keys.stdout.split("\n")[0]).toMatch(/^host\s+origin\s+type\s+fingerprint\s+pinned at$/);
    expect(keys.stdout).toMatch(
      new RegExp(
        `^${right.id}\\s+workshop\\s+ssh-ed25519\\s+${fingerprint(right.hostKeyBase64).replace(/\+/g, "\\+")}\\s`,
        "m",
      ),
    );
    expect((await rt.store.hostKey.query.byWorkshop({ workshop: "given" }).go()).data).toEqual([]);
    // ...and status shows the key of each host it lists.
    const status = JSON.parse((await cli("status", "given", "--output", "json")).stdout);
    const shown = Object.fromEntries(
      status.hosts.map((h: { id: string; hostKey: unknown }) => [h.id, h.hostKey]),
    );
    expect(shown[right.id]).toEqual({ origin: "workshop", fingerprints: [fingerprint(right.hostKeyBase64)] });

    // A host whose keys the file gives cannot be pinned by hand: the file decides.
    const pin = await cli("hosts", "pin", "given", "--host", right.id, "--key", keyLine(right));
    expect(pin.code).toBe(1);
    expect(pin.stderr).toContain(`the keys of ${right.id} are given by hosts[0].host_key in workshop.yaml`);
  });
});

describe("ssh.require_known_host_keys with a key trusted only on first use", () => {
  it("sends nothing to the host and names the pin command; hosts pin fixes it and the next up succeeds", async () => {
    // First contact without the setting (doctor sends no secret): the host's key is pinned on first use.
    writeFileSync(join(work, "loose.yaml"), yaml("strict", [{ host: tofu }], false));
    expect((await cli("doctor", "-f", "loose.yaml")).code).toBe(0);
    const tofuPin = await cli("hosts", "keys", "strict", "--output", "json");
    expect(JSON.parse(tofuPin.stdout).keys).toMatchObject([{ hostId: tofu.id, origin: "tofu" }]);

    writeFileSync(join(work, "strict.yaml"), yaml("strict", [{ host: tofu }], true));
    const refused = await cli("up", "-f", "strict.yaml");
    expect(refused.code).toBe(1);
    expect(refused.stdout).toContain(
      `${tofu.id} failed: ${tofu.id} (${tofu.address}): labfleet sent nothing and did not connect (provision: check the host answers): workshop strict sets ssh.require_known_host_keys, and the only key labfleet has for it (${fingerprint(tofu.hostKeyBase64)}) was trusted on first use`,
    );
    expect(refused.stdout).toContain(
      `labfleet hosts pin strict --host ${tofu.id} --key "ssh-ed25519 AAAA..."`,
    );
    expect(existsSync(secretsFile(tofu, "strict"))).toBe(false);
    expect(secretOnHost(tofu)).toBe(false);

    // A key that is not the pinned one replaces it only with --replace; a bad line is refused with its path.
    const stranger = generateEd25519KeyPair().public;
    const conflict = await cli("hosts", "pin", "strict", "--host", tofu.id, "--key", stranger);
    expect(conflict.code).toBe(1);
    expect(conflict.stderr).toContain(
      `${tofu.id} already has another key (${fingerprint(tofu.hostKeyBase64)}, trusted on first use): to replace it with the key given, add --replace`,
    );
    const bad = await cli("hosts", "pin", "strict", "--host", tofu.id, "--key", "ssh-ed25519 AAAA");
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(/keys\[0\].*the key data after ssh-ed25519 is not an SSH public key/);
    expect((await cli("hosts", "pin", "strict", "--key", stranger)).code).toBe(2); // no --host

    // The key read on the host itself (here: its .pub file, as ssh-keyscan's output would be) confirms the pin.
    writeFileSync(join(work, "tofu.pub"), `# ${tofu.ip}:2222 SSH-2.0-OpenSSH\n${tofu.ip} ${keyLine(tofu)}\n`);
    const pin = await cli("hosts", "pin", "-f", "strict.yaml", "--host", tofu.id, "--key-file", "tofu.pub");
    expect(pin.code, pin.stderr).toBe(0);
    expect(pin.stdout).toBe(
      `pinned ${fingerprint(tofu.hostKeyBase64)} (ssh-ed25519) for ${tofu.id}; labfleet now connects to it only when it shows this key\n`,
    );
    const keys = JSON.parse((await cli("hosts", "keys", "strict", "--output", "json")).stdout).keys;
    expect(keys).toMatchObject([
      {
        hostId: tofu.id,
        origin: "pinned",
        keys: [{ type: "ssh-ed25519", fingerprint: fingerprint(tofu.hostKeyBase64) }],
      },
    ]);

    const up = await cli("up", "-f", "strict.yaml");
    expect(up.code, up.stdout + up.stderr).toBe(0);
    expect(readFileSync(secretsFile(tofu, "strict"), "utf8")).toBe(`API_TOKEN='${SECRET}'\n`);
  });

  it("a host rebuilt with a new key is refused at the handshake, and pinning its new key with --replace lets it back", async () => {
    await tofu.restart({ newHostKey: true });
    const doctor = await cli("doctor", "strict");
    expect(doctor.code).toBe(1);
    expect(doctor.stdout).toContain("is not the one pinned with labfleet hosts pin");
    expect(doctor.stdout).toContain(
      `labfleet hosts pin strict --host ${tofu.id} --key "ssh-ed25519 AAAA..." --replace`,
    );
    const pin = await cli("hosts", "pin", "strict", "--host", tofu.id, "--key", keyLine(tofu), "--replace");
    expect(pin.code, pin.stderr).toBe(0);
    expect(pin.stdout).toContain(`replacing`);
    expect((await cli("doctor", "strict")).code).toBe(0);
  });
});

describe("the pins a fleet operation reads", () => {
  it("reads the workshop's pins once for every host it connects to, and a pin replaced here counts at once", async () => {
    writeFileSync(
      join(work, "fleet.yaml"),
      yaml("fleet", [{ host: right }, { host: wrong }, { host: tofu }], false),
    );
    const first = await cli("doctor", "-f", "fleet.yaml"); // first contact: each host's key is pinned
    expect(first.code, first.stdout + first.stderr).toBe(0);
    expect((await rt.store.hostKey.query.byWorkshop({ workshop: "fleet" }).go()).data).toHaveLength(3);

    await rt.connections.release("fleet");
    const gets = vi.spyOn(rt.store.hostKey, "get");
    try {
      const doctor = await cli("doctor", "fleet");
      expect(doctor.code, doctor.stdout).toBe(0);
      // three new connections, and no pin read one host at a time
      expect(gets.mock.calls.filter(([key]) => (key as { workshop?: string }).workshop === "fleet")).toEqual(
        [],
      );
    } finally {
      gets.mockRestore();
    }

    // Another host's key pinned for `right` by hand: its next connection is refused, however recent the read.
    await withActor({ type: "instructor", id: "test" }, () => doctor("fleet"));
    const pin = await cli("hosts", "pin", "fleet", "--host", right.id, "--key", keyLine(wrong), "--replace");
    expect(pin.code, pin.stderr).toBe(0);
    const [report] = await withActor({ type: "instructor", id: "test" }, () =>
      doctor("fleet", { hosts: [right.id] }),
    );
    expect(report?.ok).toBe(false);
    expect(report?.checks[0]?.detail).toContain(fingerprint(wrong.hostKeyBase64));
  });
});
