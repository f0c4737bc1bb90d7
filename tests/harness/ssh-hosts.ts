/**
 * Fake SSH hosts for tests: real OpenSSH `sshd` processes, one per host, each listening on its own
 * loopback address (127.10.0.N:2222) with its own host key, and each in its own mount and pid namespace
 * where a per-host folder is bind-mounted over /home/lab, /srv and /tmp (and a per-host sudoers rule over
 * /etc/sudoers.d/labfleet-test). Everything a host runs dies with it: killing the namespace's first process
 * ends the host, and that process also exits when this test process goes away (its stdin closes).
 *
 * Needs root, `openssh-server` and `sudo` (installed here with apt-get when missing), `unshare` and `flock`.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  unlinkSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { generateEd25519KeyPair } from "../../shared/transports/ssh-identity.ts";

export type SudoRule = "nopasswd" | "password" | "none";

export interface FakeHostsOptions {
  /** authorized_keys lines for the login user `lab` on every host. */
  authorizedKeys: string;
  /** The number in the first host's id (`byo-01` for 1, the default). */
  firstIndex?: number;
  /** What `lab` may do with sudo: one rule for all hosts, or one per host. Default "nopasswd". */
  sudo?: SudoRule | SudoRule[];
  /** sshd_config lines added for every host (`MaxSessions 1`). */
  sshdConfig?: string;
}

export interface FakeHost {
  /** `byo-01`, `byo-02`, ... */
  readonly id: string;
  readonly index: number;
  /** Its own loopback address, 127.10.0.N. */
  readonly ip: string;
  readonly port: number;
  /** `lab@127.10.0.N:2222` */
  readonly address: string;
  /** The host's own folder: `home/` is its /home/lab, `srv/` its /srv, `tmp/` its /tmp. */
  readonly root: string;
  /** Its public host key blob, base64 (as pinned by the SSH transport). */
  readonly hostKeyBase64: string;
  /** The pid of the process that holds the host (`unshare`); changes on restart. */
  readonly pid: number;
  readonly running: boolean;
  /** What sshd logged (stderr) since the host first started, across restarts. */
  log(): string;
  /** The pids of every process on the host (none once it is killed). */
  processes(): number[];
  /** How many TCP connections to its sshd are established now (what a connection pool keeps open), from /proc/net/tcp. */
  connections(): number;
  /** SIGKILL the host: sshd and everything it started die. Its files stay. */
  kill(): Promise<void>;
  /** Start again with the same files and address: the same host key, or a new one. */
  restart(options?: { newHostKey?: boolean }): Promise<void>;
  /** SIGSTOP / SIGCONT every process of the host: connections hang as to a frozen machine. */
  pause(): void;
  resume(): void;
}

export interface FakeHosts {
  hosts: FakeHost[];
  /** Kills every host, removes their folders and frees their addresses. */
  stop(): Promise<void>;
}

const PORT = 2222;
const USER = "lab";
const SUDOERS_PLACEHOLDER = "/etc/sudoers.d/labfleet-test";
const BASE = "/var/tmp/labfleet-fake-hosts"; // not under /tmp, /srv or /home/lab: those are per host
const LOCKS = "/tmp/labfleet-fake-hosts.locks";
const READY_TIMEOUT_MS = 15_000;
/** 127.10.0.2 to 127.10.0.254 (127.0.1.1, the machine's own name, is never used). */
const FIRST_OCTET = 2;
const LAST_OCTET = 254;

export async function startFakeHosts(n: number, options: FakeHostsOptions): Promise<FakeHosts> {
  const account = prepareMachine();
  removeStaleFolders();
  const dir = join(BASE, `${process.pid}-${Date.now().toString(36)}`);
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  chmodSync(dir, 0o755);
  const first = options.firstIndex ?? 1;
  const hosts: Host[] = [];
  const started = Promise.allSettled(
    Array.from({ length: n }, async (_, i) => {
      const rule = Array.isArray(options.sudo) ? (options.sudo[i] ?? "none") : (options.sudo ?? "nopasswd");
      const host = new Host(first + i, dir, account, options.authorizedKeys, rule, options.sshdConfig ?? "");
      hosts.push(host);
      await host.startOnFreeAddress();
    }),
  );
  const stop = async () => {
    await Promise.all(hosts.map((h) => h.destroy()));
    rmSync(dir, { recursive: true, force: true });
  };
  const failed = (await started).find((r) => r.status === "rejected");
  if (failed) {
    await stop();
    throw (failed as PromiseRejectedResult).reason;
  }
  hosts.sort((a, b) => a.index - b.index);
  return { hosts, stop };
}

interface Account {
  uid: number;
  gid: number;
}

class Host implements FakeHost {
  readonly id: string;
  readonly root: string;
  readonly port = PORT;
  ip = "";
  hostKeyBase64 = "";
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();
  private namespace: string | undefined;
  private logText = "";
  private lockPath: string | undefined;

  constructor(
    readonly index: number,
    dir: string,
    account: Account,
    authorizedKeys: string,
    sudo: SudoRule,
    private readonly sshdConfig: string,
  ) {
    this.id = `byo-${String(index).padStart(2, "0")}`;
    this.root = join(dir, this.id);
    mkdirSync(this.root, { mode: 0o755 });
    chmodSync(this.root, 0o755);
    for (const sub of ["home", "srv", "tmp"]) {
      const path = join(this.root, sub);
      mkdirSync(path);
      chownSync(path, account.uid, account.gid);
      chmodSync(path, sub === "tmp" ? 0o1777 : 0o755);
    }
    writeFileSync(join(this.root, "authorized_keys"), ensureNewline(authorizedKeys), { mode: 0o644 });
    const rules: Record<SudoRule, string> = {
      nopasswd: `${USER} ALL=(ALL) NOPASSWD:ALL\n`,
      password: `${USER} ALL=(ALL) ALL\n`,
      none: "# no sudo for this host\n",
    };
    writeFileSync(join(this.root, "sudoers"), rules[sudo], { mode: 0o440 });
    this.newHostKey();
  }

  get address(): string {
    return `${USER}@${this.ip}:${this.port}`;
  }

  get pid(): number {
    return this.child?.pid ?? 0;
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  log(): string {
    return this.logText;
  }

  connections(): number {
    return establishedTo(this.ip, this.port);
  }

  processes(): number[] {
    const ns = this.namespace;
    if (!ns) return [];
    const pids: number[] = [];
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        if (readlinkSync(`/proc/${entry}/ns/pid`) === ns) pids.push(Number(entry));
      } catch {
        // gone meanwhile
      }
    }
    return pids;
  }

  async kill(): Promise<void> {
    const child = this.child;
    if (!child) return;
    const pids = this.processes();
    if (this.running) child.kill("SIGKILL"); // --kill-child: the namespace's init dies, and with it the host
    await this.exited;
    const deadline = Date.now() + 10_000;
    while (pids.some(alive)) {
      if (Date.now() > deadline)
        throw new Error(`${this.id}: processes ${pids.filter(alive)} outlived the host`);
      await new Promise((r) => setTimeout(r, 20));
    }
    this.child = undefined;
    this.namespace = undefined;
  }

  async restart(options: { newHostKey?: boolean } = {}): Promise<void> {
    await this.kill();
    if (options.newHostKey) this.newHostKey();
    const result = await this.start();
    if (result !== "ok") throw new Error(`${this.id} (${this.address}) could not start again: ${result}`);
  }

  pause(): void {
    for (const pid of this.processes()) signal(pid, "SIGSTOP");
  }

  resume(): void {
    for (const pid of this.processes()) signal(pid, "SIGCONT");
  }

  /** Takes the first free address (lock file, then a successful bind) and starts there. */
  async startOnFreeAddress(): Promise<void> {
    const offset = (process.pid * 31 + this.index * 7) % (LAST_OCTET - FIRST_OCTET + 1);
    let lastError = "";
    for (let i = 0; i <= LAST_OCTET - FIRST_OCTET; i++) {
      const octet = FIRST_OCTET + ((offset + i) % (LAST_OCTET - FIRST_OCTET + 1));
      const ip = `127.10.0.${octet}`;
      const lock = takeAddress(ip);
      if (!lock) continue;
      this.ip = ip;
      this.lockPath = lock;
      const result = await this.start();
      if (result === "ok") return;
      releaseAddress(lock);
      this.lockPath = undefined;
      lastError = result;
      if (result !== "address in use") break;
    }
    throw new Error(`${this.id}: sshd did not start: ${lastError || "no free address in 127.10.0.0/24"}`);
  }

  /** Removes everything: processes, files and the address lock. */
  async destroy(): Promise<void> {
    try {
      this.resume(); // a stopped process still dies of SIGKILL, but be tidy
      await this.kill();
    } finally {
      rmSync(this.root, { recursive: true, force: true });
      if (this.lockPath) releaseAddress(this.lockPath);
      this.lockPath = undefined;
    }
  }

  /** Runs sshd in fresh namespaces; "ok" once it listens, or why not. */
  private start(): Promise<"ok" | "address in use" | string> {
    writeFileSync(join(this.root, "sshd_config"), this.config());
    const child = spawn(
      "unshare",
      [
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--kill-child",
        "--mount-proc",
        "bash",
        "--noprofile",
        "--norc",
        "-c",
        HOST_INIT,
      ],
      {
        stdio: ["pipe", "ignore", "pipe"],
        env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", LANG: "C.UTF-8", HOST_ROOT: this.root },
      },
    );
    this.child = child;
    children.add(child);
    this.exited = new Promise((resolve) =>
      child.once("exit", () => {
        children.delete(child);
        resolve();
      }),
    );
    child.stdin?.on("error", () => {});
    return new Promise((resolve) => {
      let settled = false;
      const settle = (result: string) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        if (result !== "ok" && this.running) child.kill("SIGKILL");
        resolve(result);
      };
      const timer = setTimeout(() => {
        const said = this.logText.trim().slice(-500) || "nothing";
        settle(`no "Server listening on" within ${READY_TIMEOUT_MS} ms (sshd said: ${said})`);
      }, READY_TIMEOUT_MS);
      child.stderr?.setEncoding("utf8");
      child.stderr?.on("data", (text: string) => {
        if (this.logText.length < 4 * 1024 * 1024) this.logText += text;
        if (settled) return;
        if (/Address already in use|Cannot bind any address/.test(this.logText)) settle("address in use");
        else if (this.logText.includes("Server listening on")) {
          try {
            this.namespace = readlinkSync(`/proc/${child.pid}/ns/pid_for_children`);
          } catch {
            settle("the host died while starting");
            return;
          }
          settle("ok");
        }
      });
      child.once("error", (err) => settle(err.message));
      child.once("exit", (code, sig) =>
        settle(`exited (${sig ?? code}): ${this.logText.trim().slice(-500)}`),
      );
    });
  }

  private config(): string {
    return `ListenAddress ${this.ip}:${this.port}
HostKey ${join(this.root, "hostkey")}
PidFile none
AuthorizedKeysFile ${join(this.root, "authorized_keys")}
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
PermitRootLogin no
AllowUsers ${USER}
AllowTcpForwarding yes
MaxStartups 100
LogLevel VERBOSE
Subsystem sftp internal-sftp
${this.sshdConfig}`;
  }

  private newHostKey(): void {
    const pair = generateEd25519KeyPair(this.id);
    const path = join(this.root, "hostkey");
    rmSync(path, { force: true });
    writeFileSync(path, pair.private, { mode: 0o600 });
    writeFileSync(`${path}.pub`, `${pair.public}\n`, { mode: 0o644 });
    this.hostKeyBase64 = pair.public.split(" ")[1] ?? "";
  }
}

/**
 * The first process of a host's namespaces: mounts the host's folders and starts sshd. It exits (and with
 * it every process of the host) when sshd exits, or when labfleet's test process goes away: its stdin,
 * a pipe from that process, then closes.
 */
const HOST_INIT = `set -e
exec 3<&0
mount --bind "$HOST_ROOT/home" /home/${USER}
mount --bind "$HOST_ROOT/srv" /srv
mount --bind "$HOST_ROOT/tmp" /tmp
mount --bind "$HOST_ROOT/sudoers" ${SUDOERS_PLACEHOLDER}
/usr/sbin/sshd -D -e -f "$HOST_ROOT/sshd_config" </dev/null 3<&- &
(read -r _ <&3 || true) &
exec 3<&-
wait -n
`;

/** Once per machine (serialised across test processes with flock): packages, the `lab` user, folders. */
const MACHINE_SETUP = `set -e
export DEBIAN_FRONTEND=noninteractive
need=""
[ -x /usr/sbin/sshd ] || need="$need openssh-server"
command -v sudo >/dev/null 2>&1 || need="$need sudo"
if [ -n "$need" ]; then
  command -v apt-get >/dev/null 2>&1 || { echo "fake SSH hosts need:$need (no apt-get here)" >&2; exit 3; }
  apt-get install -y --no-install-recommends $need >&2 || { apt-get update >&2 && apt-get install -y --no-install-recommends $need >&2; }
fi
id -u ${USER} >/dev/null 2>&1 || useradd -M -d /home/${USER} -s /bin/bash ${USER}
[ "$(getent shadow ${USER} | cut -d: -f2)" = "*" ] || usermod -p '*' ${USER}
mkdir -p /home/${USER} /run/sshd /srv /etc/sudoers.d ${BASE}
chmod 0755 /run/sshd
if [ ! -f ${SUDOERS_PLACEHOLDER} ]; then
  printf '# labfleet tests: each fake SSH host bind-mounts its own sudo rule over this file\\n' > ${SUDOERS_PLACEHOLDER}
  chmod 0440 ${SUDOERS_PLACEHOLDER}
fi
echo "$(id -u ${USER}) $(id -g ${USER})"
`;

let account: Account | undefined;

function prepareMachine(): Account {
  if (account) return account;
  if (process.getuid?.() !== 0) throw new Error("fake SSH hosts need root (namespaces, sshd, a test user)");
  let out: string;
  try {
    out = execFileSync(
      "flock",
      ["/tmp/labfleet-fake-hosts.setup.lock", "bash", "--noprofile", "--norc", "-c", MACHINE_SETUP],
      {
        encoding: "utf8",
        stdio: ["ignore", "pipe", "pipe"],
        timeout: 300_000,
      },
    );
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`preparing the machine for fake SSH hosts failed: ${e.stderr?.trim() || e.message}`);
  }
  const [uid, gid] = out.trim().split(/\s+/).slice(-2).map(Number);
  if (uid === undefined || gid === undefined || Number.isNaN(uid) || Number.isNaN(gid)) {
    throw new Error(`preparing the machine for fake SSH hosts printed no uid: ${out}`);
  }
  account = { uid, gid };
  return account;
}

/** The lock file that reserves an address for one test process (it holds that process's pid). */
export function addressLockPath(ip: string): string {
  return join(LOCKS, ip);
}

/** A lock file per address holds the pid of the test process using it; a dead owner's lock is taken over. */
function takeAddress(ip: string): string | undefined {
  mkdirSync(LOCKS, { recursive: true, mode: 0o755 });
  const path = addressLockPath(ip);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fd = openSync(path, "wx");
      writeSync(fd, String(process.pid));
      closeSync(fd);
      return path;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
    let owner = Number.NaN;
    try {
      owner = Number(readFileSync(path, "utf8"));
    } catch {
      continue; // released meanwhile: try again
    }
    if (Number.isNaN(owner) || owner === 0 || alive(owner)) return undefined;
    // Stale: move it aside atomically, so that of two processes only one takes it over.
    try {
      const aside = `${path}.stale-${process.pid}`;
      renameSync(path, aside);
      unlinkSync(aside);
    } catch {
      return undefined;
    }
  }
  return undefined;
}

function releaseAddress(path: string): void {
  try {
    if (readFileSync(path, "utf8") === String(process.pid)) unlinkSync(path);
  } catch {
    // already gone
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
  // a zombie is dead for our purposes
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // gone meanwhile
  }
}

function ensureNewline(text: string): string {
  return text.endsWith("\n") || text === "" ? text : `${text}\n`;
}

/** Hosts still running. Should a test end without stop(), nothing is left running or on disk. */
const children = new Set<ChildProcess>();
process.once("exit", () => {
  for (const child of children) child.kill("SIGKILL");
  for (const dir of readdirSafe(BASE)) {
    if (dir.startsWith(`${process.pid}-`)) rmSync(join(BASE, dir), { recursive: true, force: true });
  }
  for (const lock of readdirSafe(LOCKS)) releaseAddress(join(LOCKS, lock));
});

/** Folders and address locks left by test processes that died without cleaning up (their hosts died with them). */
function removeStaleFolders(): void {
  for (const ip of readdirSafe(LOCKS)) {
    if (/^127\.10\.0\.\d+$/.test(ip) && takeAddress(ip)) releaseAddress(addressLockPath(ip));
  }
  for (const dir of readdirSafe(BASE)) {
    const owner = Number(dir.split("-")[0]);
    if (Number.isInteger(owner) && owner !== process.pid && !alive(owner)) {
      rmSync(join(BASE, dir), { recursive: true, force: true });
    }
  }
}

function readdirSafe(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir) : [];
}

/**
 * Established TCP connections whose remote end is ip:port, as /proc/net/tcp lists them (the hosts share this
 * machine's network namespace, so each connection shows once from the client's side, once from sshd's).
 */
function establishedTo(ip: string, port: number): number {
  const hex = `${ip
    .split(".")
    .map((o) => Number(o).toString(16).padStart(2, "0"))
    .reverse()
    .join("")
    .toUpperCase()}:${port.toString(16).toUpperCase().padStart(4, "0")}`;
  return readFileSync("/proc/net/tcp", "utf8")
    .split("\n")
    .slice(1)
    .filter((line) => {
      const f = line.trim().split(/\s+/);
      return f[2] === hex && f[3] === "01"; // rem_address, st (01: ESTABLISHED)
    }).length;
}
