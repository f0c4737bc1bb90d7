import { chmodSync, existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Readable } from "node:stream";
import { utils } from "ssh2";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { fingerprint, memoryPins } from "../../shared/transports/host-keys.ts";
import { parseSshAddress, SshTransport, type SshTransportOptions } from "../../shared/transports/ssh.ts";
import {
  generateEd25519KeyPair,
  keyAgent,
  loadSshIdentity,
  managedKeyPath,
  publicKeyLine,
  type SshIdentity,
} from "../../shared/transports/ssh-identity.ts";
import { OUTPUT_CAP_BYTES } from "../../shared/transports/types.ts";
import { removeDir, tempDir, waitFor } from "../harness/runtime.ts";
import { type FakeHost, type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

let work: string;
let identity: SshIdentity;
let fleet: FakeHosts;
let main: FakeHost; // commands, reuse, timeouts, sudo
let pinning: FakeHost; // gets a new host key
let paused: FakeHost; // paused and killed
let bastion: FakeHost;
let behind: FakeHost;
let sudoPassword: FakeHost;
const opened: SshTransport[] = [];

beforeAll(async () => {
  work = tempDir("labfleet-ssh-");
  identity = await loadSshIdentity({ labfleetHome: join(work, ".labfleet") });
  fleet = await startFakeHosts(6, {
    authorizedKeys: publicKeyLine(identity),
    sudo: ["nopasswd", "nopasswd", "nopasswd", "nopasswd", "nopasswd", "password"],
  });
  [main, pinning, paused, bastion, behind, sudoPassword] = fleet.hosts as [
    FakeHost,
    FakeHost,
    FakeHost,
    FakeHost,
    FakeHost,
    FakeHost,
  ];
});

afterEach(async () => {
  await Promise.all(opened.splice(0).map((t) => t.close()));
});

afterAll(async () => {
  await fleet?.stop();
  if (work) removeDir(work);
});

function transport(host: FakeHost, options: Partial<SshTransportOptions> = {}): SshTransport {
  const t = new SshTransport({
    workshop: "ssh-test",
    hostId: host.id,
    address: host.address,
    identity,
    pins: memoryPins(),
    ...options,
  });
  opened.push(t);
  return t;
}

async function failure(promise: Promise<unknown>): Promise<VisibleError> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(VisibleError);
    return err as VisibleError;
  }
  throw new Error("expected the call to fail");
}

const accepted = (host: FakeHost) => host.log().split("Accepted publickey for lab").length - 1;

/** Whether a process with exactly these arguments runs on the host. */
function commandLine(pid: number): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    return undefined;
  }
}

function runs(host: FakeHost, ...argv: string[]): boolean {
  const wanted = `${argv.join("\u0000")}\u0000`;
  return host.processes().some((pid) => commandLine(pid) === wanted);
}

describe("parseSshAddress", () => {
  it("reads user@host[:port], bracketed IPv6 and the default user", () => {
    expect(parseSshAddress("lab@127.10.0.9:2222")).toEqual({ user: "lab", host: "127.10.0.9", port: 2222 });
    expect(parseSshAddress("box.example.com", "ubuntu")).toEqual({
      user: "ubuntu",
      host: "box.example.com",
      port: 22,
    });
    expect(parseSshAddress("admin@[::1]:2200", "ubuntu")).toEqual({ user: "admin", host: "::1", port: 2200 });
    expect(parseSshAddress("[fe80::1]", "ops")).toEqual({ user: "ops", host: "fe80::1", port: 22 });
  });

  it("refuses an address without a user when there is no default, naming the host", () => {
    let err: unknown;
    try {
      parseSshAddress("box.example.com:2222");
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(VisibleError);
    expect((err as VisibleError).kind).toBe("input");
    expect((err as VisibleError).message).toContain("box.example.com");
    expect(() => parseSshAddress("lab@box:99999")).toThrow(/port/);
  });
});

describe("SSH identity", () => {
  it("creates the managed key once, mode 0600, with its OpenSSH public key beside it", async () => {
    const path = managedKeyPath(join(work, ".labfleet"));
    expect(identity.keyLabel).toBe(path);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(readFileSync(path, "utf8")).toContain("BEGIN OPENSSH PRIVATE KEY");
    const pub = readFileSync(`${path}.pub`, "utf8").trim();
    expect(pub).toMatch(/^ssh-ed25519 AAAA\S+ labfleet$/);
    expect(publicKeyLine(identity)).toBe(pub);
    const again = await loadSshIdentity({
      labfleetHome: join(work, ".labfleet"),
      agentSocket: "/run/agent.sock",
    });
    expect(again.privateKey?.equals(identity.privateKey ?? Buffer.alloc(0))).toBe(true);
    expect(again.agent).toBe("/run/agent.sock");
  });

  it("uses identity_file (with ~/ expanded) and refuses one that other users can read", async () => {
    const file = join(work, "id_test");
    writeFileSync(file, identity.privateKey ?? "", { mode: 0o644 });
    chmodSync(file, 0o644);
    const open = await failure(loadSshIdentity({ identityFile: file, labfleetHome: work }));
    expect(open.code).toBe("ssh.identity_too_open");
    expect(open.message).toContain(file);
    expect(open.message).toContain(`chmod 600 ${file}`);

    chmodSync(file, 0o600);
    const home = process.env.HOME;
    process.env.HOME = work;
    try {
      const loaded = await loadSshIdentity({ identityFile: "~/id_test", labfleetHome: work });
      expect(loaded.keyLabel).toBe(file);
      expect(publicKeyLine(loaded)).toBe(publicKeyLine(identity));
    } finally {
      process.env.HOME = home;
    }
    const missing = await failure(loadSshIdentity({ identityFile: join(work, "nope"), labfleetHome: work }));
    expect(missing.code).toBe("ssh.identity_missing");
  });

  it("logs in with an identity_file of each key type, signed in this process (RSA with the SHA-2 signatures sshd asks for)", async () => {
    const kinds = [
      ["ecdsa", 256, "ECDSA"],
      ["ecdsa", 384, "ECDSA"],
      ["ecdsa", 521, "ECDSA"],
      ["rsa", 2048, "RSA"],
    ] as const;
    for (const [type, bits, logged] of kinds) {
      const pair = utils.generateKeyPairSync(type, { bits });
      const file = join(work, `id_${type}_${bits}`);
      writeFileSync(file, pair.private, { mode: 0o600 });
      writeFileSync(join(main.root, "authorized_keys"), `${pair.public}\n`, { flag: "a" });
      const loaded = await loadSshIdentity({ identityFile: file, labfleetHome: work });
      // One agent per key, made at its first login and kept for the next ones.
      const agent = keyAgent(loaded.privateKey ?? Buffer.alloc(0));
      expect(agent, `${type} ${bits}`).toBeDefined();
      expect(keyAgent(loaded.privateKey ?? Buffer.alloc(0))).toBe(agent);
      const logins = () =>
        main
          .log()
          .split("\n")
          .filter((l) => l.includes("Accepted publickey for lab"));
      const before = logins().length;
      const r = await transport(main, { identity: loaded }).exec("echo signed");
      expect(r.stdout, `${type} ${bits}`).toBe("signed\n");
      expect(logins().length, `${type} ${bits}`).toBe(before + 1);
      expect(logins().at(-1), `${type} ${bits}`).toContain(`: ${logged} SHA256:`);
    }
    // (OpenSSH 9 accepts no SHA-1 RSA signature by default: the RSA login signed with SHA-2.)
  });
});

describe("SshTransport commands", () => {
  it("runs bash in the login user's home with exit codes, stdout, stderr, stdin and env", async () => {
    const t = transport(main);
    const r = await t.exec('pwd; whoami; echo "$0" "$BASH_VERSINFO"; echo oops >&2; exit 7');
    expect(r.exitCode).toBe(7);
    expect(r.stdout).toMatch(/^\/home\/lab\nlab\nbash \d+\n$/);
    expect(r.stderr).toBe("oops\n");
    expect(r.timedOut).toBeUndefined();

    expect((await t.exec("kill -TERM $$")).exitCode).toBe(143);

    const tricky = 'it\'s "quoted" $HOME `x`\nsecond line';
    const env = await t.exec('printf "%s|%s" "$GREETING" "$EMPTY"', { env: { GREETING: tricky, EMPTY: "" } });
    expect(env.stdout).toBe(`${tricky}|`);
    await expect(t.exec("true", { env: { "BAD-NAME": "x" } })).rejects.toThrow(/BAD-NAME/);

    expect((await t.exec("cat", { stdin: "hello\nworld" })).stdout).toBe("hello\nworld");
    const bytes = Buffer.from([0, 1, 2, 255, 254, 10]);
    expect((await t.exec("od -An -tu1 | tr -s ' '", { stdin: bytes })).stdout.trim()).toBe(
      "0 1 2 255 254 10",
    );
    const stream = Readable.from([Buffer.from("from "), Buffer.from("a stream")]);
    expect((await t.exec("cat; echo", { stdin: stream })).stdout).toBe("from a stream\n");
    expect((await t.exec("cat | wc -c")).stdout.trim()).toBe("0"); // no stdin: ended at once
  });

  it("reuses one connection for every exec until close, then connects again", async () => {
    const t = transport(main);
    const before = accepted(main);
    const first = await t.exec("echo $SSH_CONNECTION");
    const sources = new Set<string>([first.stdout]);
    for (let i = 0; i < 5; i++) sources.add((await t.exec("echo $SSH_CONNECTION")).stdout);
    // more at once than sshd's MaxSessions (10): they queue on the one connection
    const many = await Promise.all(
      Array.from({ length: 14 }, (_, i) => t.exec(`echo $SSH_CONNECTION; exit ${i}`)),
    );
    for (const [i, r] of many.entries()) {
      expect(r.exitCode).toBe(i);
      sources.add(r.stdout);
    }
    expect(sources.size).toBe(1);
    await waitFor("sshd to log the login", () => accepted(main) === before + 1, 5000);

    await t.close();
    const after = await t.exec("echo $SSH_CONNECTION");
    expect(after.exitCode).toBe(0);
    expect(after.stdout).not.toBe(first.stdout); // a new source port: a new connection
    await waitFor("sshd to log the second login", () => accepted(main) === before + 2, 5000);
  });

  it("kills a command that runs past its timeout: exit code 124, timedOut, nothing left running", async () => {
    const t = transport(main);
    const started = Date.now();
    const pending = t.exec("echo begun; sleep 37; echo never", { timeoutMs: 700 });
    await waitFor("the command to run on the host", () => runs(main, "sleep", "37"), 5000);
    const r = await pending;
    expect(Date.now() - started).toBeLessThan(3000);
    expect(r).toMatchObject({ exitCode: 124, timedOut: true, stdout: "begun\n" });
    await waitFor("the timed-out command to be gone from the host", () => !runs(main, "sleep", "37"), 5000);
    expect((await t.exec("echo still usable")).stdout).toBe("still usable\n");
  });

  it("starts a brief command without the host-side timeout process, and its timeout still ends it", async () => {
    const t = transport(main);
    // bash's parent: the host-side backstop for a command with a timeout, sshd's session for a brief one
    const parent = "read -r p < /proc/$PPID/comm; echo $p";
    expect((await t.exec(parent, { timeoutMs: 5000 })).stdout).toBe("timeout\n");
    expect((await t.exec(parent, { timeoutMs: 5000, brief: true })).stdout).toBe("sshd\n");

    const pending = t.exec("echo begun; sleep 38; echo never", { timeoutMs: 700, brief: true });
    await waitFor("the command to run on the host", () => runs(main, "sleep", "38"), 5000);
    expect(await pending).toMatchObject({ exitCode: 124, timedOut: true, stdout: "begun\n" });
    await waitFor("the timed-out command to be gone from the host", () => !runs(main, "sleep", "38"), 5000);
  });

  it("runs brief commands one after another in one resident shell, each in a subshell of its own", async () => {
    const t = transport(main);
    const sessions = () => main.log().split("Starting session:").length - 1;
    const brief = (command: string, env?: Record<string, string>) =>
      t.exec(command, { brief: true, timeoutMs: 5000, ...(env ? { env } : {}) });
    const first = await brief("echo $$ $BASHPID");
    await waitFor("sshd to log the resident shell's session", () => sessions() > 0, 5000);
    const before = sessions();
    const [shell, sub] = first.stdout.trim().split(" ");
    expect(shell).not.toBe(sub);

    // what one command sets (variables, options, traps, the working folder) is gone for the next
    const changed = await brief("x=1; set -e; cd /tmp; trap 'echo bye' EXIT; echo oops >&2; exit 3");
    expect(changed).toEqual({ exitCode: 3, stdout: "bye\n", stderr: "oops\n" });
    const fresh = await brief('[ -v x ] || echo "unset $PWD $-" $$');
    expect(fresh.stdout).toBe(`unset /home/lab hBc ${shell}\n`); // the options of `bash -c`
    // output as written, without a final newline, lines that look like an end mark, NUL bytes, env
    expect(await brief("printf 'no newline'; printf 'err' >&2")).toMatchObject({
      stdout: "no newline",
      stderr: "err",
    });
    const markLike = await brief(`printf '\\n%032x 0\\nafter\\n' 0; printf '\\n%032x\\n' 0 >&2`);
    expect(markLike).toMatchObject({
      exitCode: 0,
      stdout: `\n${"0".repeat(32)} 0\nafter\n`,
      stderr: `\n${"0".repeat(32)}\n`,
    });
    expect((await brief("printf 'a\\0b'")).stdout).toBe("a\0b");
    expect((await brief("printf '%s' 'héllo ✓'; echo ' ü' >&2")).stdout).toBe("héllo ✓"); // lengths in bytes
    const tricky = 'it\'s "quoted" $HOME\nsecond line';
    expect((await brief('printf "%s" "$GREETING"', { GREETING: tricky })).stdout).toBe(tricky);
    expect((await brief("kill -TERM $BASHPID")).exitCode).toBe(143);
    expect((await brief("cat | wc -c")).stdout).toBe("0\n"); // stdin: nothing, not the shell's requests
    // a runaway output is capped and read to its end: the shell serves the next command
    const big = await brief("yes | head -c 3M; echo small >&2");
    expect(big).toMatchObject({ exitCode: 0, truncated: true, stderr: "small\n" });
    expect(big.stdout.length).toBe(OUTPUT_CAP_BYTES);

    expect((await brief("echo $$")).stdout).toBe(`${shell}\n`);
    expect(sessions()).toBe(before);
    // commands with stdin, under a host-side timeout or sudo run in a session of their own
    expect((await t.exec("echo $$", { stdin: "x" })).stdout).not.toBe(`${shell}\n`);
    expect((await t.exec("echo $$", { timeoutMs: 5000 })).stdout).not.toBe(`${shell}\n`);
    await waitFor("sshd to log the two sessions", () => sessions() === before + 2, 5000);
  });

  it("answers brief commands sent at once (the others in sessions of their own) and outlives a killed shell", async () => {
    const t = transport(main);
    const brief = (command: string) => t.exec(command, { brief: true, timeoutMs: 5000 });
    const shell = (await brief("echo $$")).stdout.trim();
    const many = await Promise.all(Array.from({ length: 9 }, (_, i) => brief(`echo $$; exit ${i}`)));
    expect(many.map((r) => r.exitCode)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
    const shells = new Set(many.map((r) => r.stdout.trim()));
    expect(shells.has(shell)).toBe(true);
    expect(shells.size).toBeGreaterThan(1);

    // the resident shell killed on the host: the next brief command is answered all the same, then another
    // shell serves the ones after it
    expect((await t.exec(`kill -KILL ${shell}`)).exitCode).toBe(0);
    expect((await brief("echo answered")).stdout).toBe("answered\n");
    const next = (await brief("echo $$")).stdout.trim();
    expect(next).not.toBe(shell);
    expect((await brief("echo $$")).stdout.trim()).toBe(next);

    // past its timeout, a brief command ends the shell it ran in (and what it started); the next one is served
    const pending = t.exec("echo begun; sleep 39; echo never", { timeoutMs: 700, brief: true });
    await waitFor("the command to run on the host", () => runs(main, "sleep", "39"), 5000);
    expect(await pending).toMatchObject({ exitCode: 124, timedOut: true, stdout: "begun\n" });
    await waitFor("the timed-out command to be gone from the host", () => !runs(main, "sleep", "39"), 5000);
    const after = await brief("echo $$");
    expect(after.exitCode).toBe(0);
    expect(after.stdout.trim()).not.toBe(next);
  });

  it("ends the resident shell on a host that allows fewer sessions: every command is still answered", async () => {
    const scarce = await startFakeHosts(1, {
      authorizedKeys: publicKeyLine(identity),
      sshdConfig: "MaxSessions 1\n",
    });
    try {
      const t = transport(scarce.hosts[0] as FakeHost);
      const brief = (command: string) => t.exec(command, { brief: true, timeoutMs: 5000 });
      const shell = (await brief("echo $$")).stdout;
      // the one session sshd allows is the resident shell's: a command with stdin needs one
      expect((await t.exec("cat", { stdin: "in", timeoutMs: 10_000 })).stdout).toBe("in");
      const after = await Promise.all([brief("echo $$"), brief("echo $$")]);
      expect(after.map((r) => r.exitCode)).toEqual([0, 0]);
      expect(new Set([shell, ...after.map((r) => r.stdout)]).size).toBe(3); // each in a session of its own
    } finally {
      await scarce.stop();
    }
  });

  it("starts the resident shell at the next brief command when the host refused it once, whoever waited on it", async () => {
    const scarce = await startFakeHosts(1, {
      authorizedKeys: publicKeyLine(identity),
      sshdConfig: "MaxSessions 1\n",
    });
    try {
      const host = scarce.hosts[0] as FakeHost;
      const t = transport(host);
      const brief = (command: string) => t.exec(command, { brief: true, timeoutMs: 10_000 });
      const refusals = () => host.log().split("no more sessions").length - 1;
      // the one session sshd allows is held by a command: the shell's session is refused, and the brief command
      // waits for a session of its own, which it gets once that command is gone
      const holding = t.exec("sleep 37", { timeoutMs: 20_000 });
      await waitFor("the command to hold the session", () => runs(host, "sleep", "37"), 5000);
      const before = refusals();
      // two brief commands wait on the one shell being started: one refusal, not two
      const first = Promise.all([brief("echo $$"), brief("echo $$")]);
      await waitFor("sshd to refuse the shell its session", () => refusals() > before, 5000);
      for (const pid of host.processes().filter((p) => commandLine(p) === "sleep\u000037\u0000"))
        process.kill(pid, "SIGKILL");
      expect((await holding).exitCode).not.toBe(0);
      const alone = (await first).map((r) => r.stdout.trim());
      expect(new Set(alone).size).toBe(2); // each in a session of its own
      const count = (line: string) => host.log().split(line).length - 1;
      await waitFor(
        "sshd to close the sessions",
        () => count("Close session:") === count("Starting session:"),
        5000,
      );
      // refused once, not twice: the shell is started at the next brief command and serves the ones after it
      const shell = (await brief("echo $$")).stdout.trim();
      expect(alone).not.toContain(shell);
      expect((await brief("echo $$")).stdout.trim()).toBe(shell);
    } finally {
      await scarce.stop();
    }
  });

  it("reach logs in and starts nothing on the host; the next command uses that connection", async () => {
    const t = transport(main);
    const logins = accepted(main);
    const sessions = () => main.log().split("Starting session:").length - 1;
    const before = sessions();
    await t.reach("provision: check the host answers");
    await waitFor("sshd to log the login", () => accepted(main) === logins + 1, 5000);
    expect(sessions()).toBe(before);

    expect((await t.exec("echo hi")).stdout).toBe("hi\n");
    await t.reach("provision: check the host answers");
    expect(accepted(main)).toBe(logins + 1);
    await waitFor("sshd to log the one session", () => sessions() === before + 1, 5000);
  });

  it("caps runaway output per stream and says so", async () => {
    const t = transport(main);
    const r = await t.exec("yes | head -c 50M; echo small >&2");
    expect(r.exitCode).toBe(0);
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBe(OUTPUT_CAP_BYTES);
    expect(r.stdout.startsWith("y\ny\n")).toBe(true);
    expect(r.stderr).toBe("small\n");
  });

  it("runs as root through sudo -n when allowed without a password, with env and stdin", async () => {
    const t = transport(main);
    expect((await t.exec("id -u", { sudo: true })).stdout).toBe("0\n");
    const r = await t.exec('echo "$WHO $(cat)"; id -un', { sudo: true, env: { WHO: "me" }, stdin: "in" });
    expect(r.stdout).toBe("me in\nroot\n");
    expect((await t.exec("id -u")).stdout).toBe(`${statSync(join(main.root, "home")).uid}\n`);
  });

  it("refuses clearly when sudo would ask for a password", async () => {
    const t = transport(sudoPassword);
    const err = await failure(t.exec("apt-get update", { sudo: true, step: "install packages" }));
    expect(err.kind).toBe("host");
    expect(err.code).toBe("host.sudo_needs_password");
    expect(err.message).toBe(
      `${sudoPassword.id}: install packages needs root, and sudo would ask for a password for lab: allow it without one (NOPASSWD) or log in as root`,
    );
    expect((await t.exec("echo fine without sudo")).exitCode).toBe(0);
  });
});

describe("SshTransport host keys", () => {
  it("pins at first contact, accepts the same key, and refuses a changed key with the remedy", async () => {
    const pins = memoryPins();
    const first = transport(pinning, { pins });
    expect((await first.exec("true")).exitCode).toBe(0);
    const old = pinning.hostKeyBase64;
    expect(pins.all.get(pinning.id)).toBe(old);

    expect((await transport(pinning, { pins }).exec("echo same")).stdout).toBe("same\n");

    await pinning.restart({ newHostKey: true });
    expect(pinning.hostKeyBase64).not.toBe(old);
    const err = await failure(transport(pinning, { pins }).exec("true", { step: "doctor" }));
    expect(err.kind).toBe("host");
    expect(err.code).toBe("host.key_changed");
    expect(err.message).toContain(`${pinning.id} (${pinning.address})`);
    expect(err.message).toContain("refused to connect for doctor");
    expect(err.message).toContain(fingerprint(old));
    expect(err.message).toContain(fingerprint(pinning.hostKeyBase64));
    expect(err.message).toContain(`labfleet hosts forget-key ssh-test --host ${pinning.id}`);
    expect(pins.all.get(pinning.id)).toBe(old); // never replaced

    // the transport that connected before the change reconnects, and is refused the same way
    const again = await failure(first.exec("true"));
    expect(again.code).toBe("host.key_changed");

    // once the pin is forgotten, the new key is pinned at the next contact
    pins.all.delete(pinning.id);
    expect((await transport(pinning, { pins }).exec("echo new")).stdout).toBe("new\n");
    expect(pins.all.get(pinning.id)).toBe(pinning.hostKeyBase64);
  });

  it("checks a key that is not the pin read before connecting against the pin as it is now", async () => {
    // Pins answered from an earlier read (as the store's are, for a moment) unless asked for the pin now.
    const now = memoryPins({ [main.id]: main.hostKeyBase64 }, { [main.id]: "pinned" });
    const earlier = { keys: [pinning.hostKeyBase64], origin: "pinned" as const };
    const asked: string[] = [];
    const pins = {
      get: (hostId: string, opts?: { fresh?: boolean }) => {
        asked.push(opts?.fresh ? "now" : "earlier");
        return opts?.fresh ? now.get(hostId) : Promise.resolve(earlier);
      },
      pin: now.pin,
    };
    // Pinned since the earlier read with the key the host shows: it connects.
    expect((await transport(main, { pins }).exec("echo ok")).stdout).toBe("ok\n");
    expect(asked).toEqual(["earlier", "now"]);

    // The pin now still another key than the host's: refused, naming the pin read now.
    now.all.set(main.id, pinning.hostKeyBase64);
    const err = await failure(transport(main, { pins }).exec("true", { step: "doctor" }));
    expect(err.code).toBe("host.key_changed");
    expect(err.message).toContain(fingerprint(pinning.hostKeyBase64));
    expect(err.message).toContain(fingerprint(main.hostKeyBase64));

    // With requireKnownHostKey, a pin gone since, or trusted on first use since, does not let the key in.
    now.all.delete(main.id);
    const strict = await failure(transport(main, { pins, requireKnownHostKey: true }).exec("true"));
    expect(strict.code).toBe("host.key_unknown");
    expect(now.all.has(main.id)).toBe(false); // nothing pinned
    const tofu = memoryPins({ [main.id]: main.hostKeyBase64 }, { [main.id]: "tofu" });
    const since = {
      get: (id: string, o?: { fresh?: boolean }) => (o?.fresh ? tofu.get(id) : pins.get(id)),
      pin: tofu.pin,
    };
    expect(
      (await failure(transport(main, { pins: since, requireKnownHostKey: true }).exec("true"))).code,
    ).toBe("host.key_unknown");

    // Forgotten since the earlier read: the key shown is pinned, as at a first contact.
    expect((await transport(main, { pins }).exec("echo pinned")).stdout).toBe("pinned\n");
    expect(now.all.get(main.id)).toBe(main.hostKeyBase64);
  });

  it("reports a key not in authorized_keys as auth_refused, naming the user and the key file", async () => {
    const other = await loadSshIdentity({ labfleetHome: join(work, "other") });
    const err = await failure(transport(main, { identity: other }).exec("true", { step: "sync lab source" }));
    expect(err.kind).toBe("host");
    expect(err.code).toBe("host.auth_refused");
    expect(err.message).toContain(main.id);
    expect(err.message).toContain("sync lab source");
    expect(err.message).toContain("lab");
    expect(err.message).toContain(other.keyLabel);
    expect(err.message).not.toContain(publicKeyLine(other).split(" ")[1]);
    expect(err.message).not.toMatch(/PRIVATE KEY/);
  });
});

describe("SshTransport with keys obtained out of band", () => {
  // ed25519 from labfleet's own generator: ssh2's makes a malformed key about once in 128.
  const otherKey = (type: "ed25519" | "ecdsa") =>
    (type === "ecdsa"
      ? utils.generateKeyPairSync(type, { bits: 256 })
      : generateEd25519KeyPair()
    ).public.split(" ")[1] as string;
  const connections = (host: FakeHost) => host.log().split("Connection from").length - 1;
  const marker = (host: FakeHost, name: string) => existsSync(join(host.root, "home", name));

  it("trusts only the keys workshop.yaml gives: the right one connects and pins nothing", async () => {
    const pins = memoryPins();
    const t = transport(main, { pins, hostKeys: [otherKey("ecdsa"), main.hostKeyBase64] });
    expect((await t.exec("echo given")).stdout).toBe("given\n");
    expect(pins.all.size).toBe(0);
  });

  it("refuses a host that shows another key than the given one at the handshake: nothing runs there", async () => {
    const pins = memoryPins({ [main.id]: main.hostKeyBase64 }); // a pin the given key takes the place of
    const given = otherKey("ed25519");
    const before = accepted(main);
    const err = await failure(
      transport(main, { pins, hostKeys: [given] }).exec("touch given-wrong", {
        step: "push operator secrets",
      }),
    );
    expect(err.code).toBe("host.key_changed");
    expect(err.message).toContain(`${main.id} (${main.address})`);
    expect(err.message).toContain("is not the one workshop.yaml gives");
    expect(err.message).toContain(`hosts[].host_key has ${fingerprint(given)}`);
    expect(err.message).toContain(`the host now offers ${fingerprint(main.hostKeyBase64)}`);
    expect(err.message).toContain("refused to connect for push operator secrets and sent nothing");
    expect(err.message).toContain("put it in hosts[].host_key");
    expect(marker(main, "given-wrong")).toBe(false);
    expect(accepted(main)).toBe(before); // not even logged in
  });

  it("asks only for the given keys' types: a host without one is refused, naming the type", async () => {
    const err = await failure(transport(main, { hostKeys: [otherKey("ecdsa")] }).exec("touch no-type"));
    expect(err.code).toBe("host.key_changed");
    expect(err.message).toContain("the host offers no key of the type ecdsa-sha2-nistp256");
    expect(marker(main, "no-type")).toBe(false);
  });

  it("with requireKnownHostKey, refuses a host known only on first use, or not at all, without contacting it", async () => {
    const before = connections(main);
    const none = await failure(
      transport(main, { requireKnownHostKey: true }).exec("touch unknown-host", { step: "deploy" }),
    );
    expect(none.code).toBe("host.key_unknown");
    expect(none.message).toBe(
      `${main.id} (${main.address}): labfleet sent nothing and did not connect (deploy): workshop ssh-test sets ssh.require_known_host_keys, and no key of it was given out of band. Read the host's public key on the host itself (its console: cat /etc/ssh/ssh_host_ed25519_key.pub), or with ssh-keyscan over a network you trust, and pin it: labfleet hosts pin ssh-test --host ${main.id} --key "ssh-ed25519 AAAA..." (or give it in hosts[].host_key in workshop.yaml)`,
    );
    const tofu = memoryPins({ [main.id]: main.hostKeyBase64 });
    const first = await failure(
      transport(main, { pins: tofu, requireKnownHostKey: true, workshopFile: "workshop.yaml" }).exec("true"),
    );
    expect(first.code).toBe("host.key_unknown");
    expect(first.message).toContain(
      `the only key labfleet has for it (${fingerprint(main.hostKeyBase64)}) was trusted on first use, which does not count`,
    );
    expect(first.message).toContain(`labfleet hosts pin -f workshop.yaml --host ${main.id} --key`);
    expect(marker(main, "unknown-host")).toBe(false);
    expect(connections(main)).toBe(before);

    // A key pinned by hand (or read through SSM) or given in workshop.yaml is known: those connect.
    const pinned = memoryPins({ [main.id]: main.hostKeyBase64 }, { [main.id]: "pinned" });
    expect(
      (await transport(main, { pins: pinned, requireKnownHostKey: true }).exec("echo pinned")).stdout,
    ).toBe("pinned\n");
    const given = transport(main, { requireKnownHostKey: true, hostKeys: [main.hostKeyBase64] });
    expect((await given.exec("echo given")).stdout).toBe("given\n");
  });

  it("refuses a host whose key is not the one pinned by hand, with the pin command and --replace", async () => {
    const pins = memoryPins({ [main.id]: otherKey("ed25519") }, { [main.id]: "pinned" });
    const err = await failure(transport(main, { pins }).exec("touch pinned-wrong"));
    expect(err.code).toBe("host.key_changed");
    expect(err.message).toContain("is not the one pinned with labfleet hosts pin");
    expect(err.message).toContain(
      `labfleet hosts pin ssh-test --host ${main.id} --key "ssh-ed25519 AAAA..." --replace`,
    );
    expect(marker(main, "pinned-wrong")).toBe(false);
  });
});

describe("SshTransport unreachable hosts", () => {
  it("reports nothing listening as host.unreachable, naming host and step", async () => {
    const t = new SshTransport({
      workshop: "ssh-test",
      hostId: "byo-99",
      address: "lab@127.10.0.1:2222", // the fake hosts never use .1
      identity,
      pins: memoryPins(),
      connectTimeoutMs: 2000,
    });
    opened.push(t);
    const err = await failure(t.exec("true", { step: "doctor" }));
    expect(err.code).toBe("host.unreachable");
    expect(err.message).toMatch(
      /^byo-99 \(lab@127\.10\.0\.1:2222\): unreachable during doctor: connection refused/,
    );
    const check = await failure(t.reach("provision: check the host answers"));
    expect(check.code).toBe("host.unreachable");
    expect(check.message).toContain("unreachable during provision: check the host answers");
  });

  it("times out on a paused host without holding up other hosts used at the same time", async () => {
    const healthy = transport(main);
    await healthy.exec("true");
    paused.pause();
    try {
      const stuck = transport(paused, { connectTimeoutMs: 600 });
      const started = Date.now();
      const attempt = failure(stuck.exec("true", { step: "poll" }));
      const others: number[] = [];
      while (Date.now() - started < 400) others.push((await healthy.exec("echo ok")).exitCode);
      const err = await attempt;
      expect(Date.now() - started).toBeLessThan(3000);
      expect(err.code).toBe("host.unreachable");
      expect(err.message).toContain(`${paused.id} (${paused.address}): unreachable during poll`);
      expect(others.length).toBeGreaterThanOrEqual(2);
      expect(others.every((c) => c === 0)).toBe(true);
    } finally {
      paused.resume();
    }
    expect((await transport(paused).exec("echo back")).stdout).toBe("back\n");
  });

  it("reports a host that dies mid-command, and reconnects once it is back", async () => {
    const t = transport(paused);
    expect((await t.exec("true")).exitCode).toBe(0);
    const outcome = failure(t.exec("sleep 31; true", { step: "deploy" }));
    await waitFor("the command to start", () => runs(paused, "sleep", "31"), 5000);
    await paused.kill();
    const err = await outcome;
    expect(err.code).toBe("host.unreachable");
    expect(err.message).toContain(`${paused.id} (${paused.address}): unreachable during deploy`);
    await paused.restart();
    expect((await t.exec("echo again")).stdout).toBe("again\n");
  });
});

describe("SshTransport through a bastion", () => {
  it("reaches a host via another, pinning each key under its own id", async () => {
    const pins = memoryPins();
    const t = transport(behind, { pins, via: bastion.address });
    const before = accepted(bastion);
    const r = await t.exec("echo $SSH_CONNECTION");
    expect(r.stdout).toContain(`${behind.ip} 2222`);
    expect(pins.all.get(behind.id)).toBe(behind.hostKeyBase64);
    expect(pins.all.get(`bastion:${bastion.address}`)).toBe(bastion.hostKeyBase64);
    expect(pins.all.size).toBe(2);
    await waitFor("the bastion to log the login", () => accepted(bastion) === before + 1, 5000);

    // the hop really goes through the bastion: without it, the host is out of reach (directly it is fine)
    await bastion.kill();
    try {
      const err = await failure(t.exec("true", { step: "doctor" }));
      expect(err.code).toBe("host.unreachable");
      expect(err.message).toContain(`${behind.id} (${behind.address} via ${bastion.address})`);
      expect(err.message).toContain(`the bastion ${bastion.address}`);
      expect((await transport(behind).exec("echo direct")).stdout).toBe("direct\n");
    } finally {
      await bastion.restart();
    }
    expect((await t.exec("echo via again")).stdout).toBe("via again\n");
  });

  it("refuses a bastion whose key changed, naming its pin", async () => {
    const pins = memoryPins({ [`bastion:${bastion.address}`]: behind.hostKeyBase64 });
    const t = transport(behind, { pins, via: bastion.address, workshopFile: "labs/k8s.yaml" });
    const err = await failure(t.exec("true"));
    expect(err.code).toBe("host.key_changed");
    expect(err.message).toContain(`${behind.id} (${behind.address} via ${bastion.address})`);
    expect(err.message).toContain(fingerprint(behind.hostKeyBase64)); // what was pinned for the bastion
    expect(err.message).toContain(fingerprint(bastion.hostKeyBase64));
    expect(err.message).toContain(
      `labfleet hosts forget-key -f labs/k8s.yaml --host bastion:${bastion.address}`,
    );
    expect(pins.all.has(behind.id)).toBe(false);
  });
});
