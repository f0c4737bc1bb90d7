import { constants } from "node:os";
import type { Readable } from "node:stream";
import {
  type AnyAuthMethod,
  Client,
  type ClientChannel,
  type ClientErrorExtensions,
  type ServerHostKeyAlgorithm,
} from "ssh2";
import { VisibleError } from "../runtime/errors.ts";
import {
  fingerprint,
  type HostKeyPins,
  hostKeyAlgorithms,
  type KnownHostKeys,
  keyTypeOf,
} from "./host-keys.ts";
import { keyAgent, type SshIdentity } from "./ssh-identity.ts";
import { RESIDENT_COMMAND, ResidentShell, residentFits } from "./ssh-resident.ts";
import {
  collectCapped,
  type ExecOptions,
  type ExecResult,
  envExports,
  OUTPUT_CAP_BYTES,
  shq,
  type Transport,
} from "./types.ts";

export interface SshTransportOptions {
  workshop: string;
  hostId: string;
  /** `user@host[:port]` or `host`; an IPv6 host goes in brackets (`lab@[::1]:2222`). */
  address: string;
  /** `defaults.ssh_user`, for an address (or bastion) without a user. */
  defaultUser?: string;
  identity: SshIdentity;
  /** A bastion (`user@host[:port]`) the connection hops through. */
  via?: string;
  /** Where host keys are pinned at first contact (the store, per workshop). */
  pins: HostKeyPins;
  /**
   * The keys the host may show, given out of band (workshop.yaml's `hosts[].host_key`, blobs in base64): when
   * given, they are the only ones trusted, whatever is pinned, and nothing is pinned at first contact.
   */
  hostKeys?: string[];
  /**
   * `ssh.require_known_host_keys`: connect only when the host's key was obtained another way than the network
   * (hostKeys, or a pin whose origin is not `tofu`); otherwise refuse before connecting, so nothing is sent.
   */
  requireKnownHostKey?: boolean;
  /** How long connecting (TCP, handshake and login) may take. Default 10 s. */
  connectTimeoutMs?: number;
  /** The workshop file named in remedies ("labfleet hosts pin -f <file>"); by default the workshop's name. */
  workshopFile?: string;
}

export interface SshAddress {
  user: string;
  host: string;
  port: number;
}

const ADDRESS = /^(?:([^@\s]+)@)?(\[[0-9A-Fa-f:.]+\]|[^@\s:[\]]+)(?::(\d{1,5}))?$/;

/** `user@host[:port]` or `host` (IPv6 in brackets) -> its parts; port 22 and `defaultUser` when left out. */
export function parseSshAddress(address: string, defaultUser?: string): SshAddress {
  const m = ADDRESS.exec(address.trim());
  if (!m?.[2]) {
    throw new VisibleError(
      "input",
      "host.bad_address",
      `"${address}" is not an SSH address: expected user@host[:port] or host`,
    );
  }
  const host = m[2].startsWith("[") ? m[2].slice(1, -1) : m[2];
  const port = m[3] === undefined ? 22 : Number(m[3]);
  if (port < 1 || port > 65535) {
    throw new VisibleError(
      "input",
      "host.bad_address",
      `"${address}": port ${m[3]} is not between 1 and 65535`,
    );
  }
  const user = m[1] ?? defaultUser;
  if (!user) {
    throw new VisibleError(
      "input",
      "host.no_ssh_user",
      `${host}: no SSH user: write user@${m[2]} or set defaults.ssh_user in workshop.yaml`,
    );
  }
  return { user, host, port };
}

/** The canonical `user@host:port` of an address (IPv6 hosts in brackets). */
export function formatSshAddress(a: SshAddress): string {
  return `${a.user}@${a.host.includes(":") ? `[${a.host}]` : a.host}:${a.port}`;
}

/** The pin id of a bastion's host key: `bastion:user@host:port`. */
export function bastionPinId(a: SshAddress): string {
  return `bastion:${formatSshAddress(a)}`;
}

/** OpenSSH's sshd allows 10 sessions per connection (MaxSessions); stay under it and queue the rest. */
const MAX_CHANNELS = 6;
/** How long a refused session is retried (see openChannel). */
const SESSION_RETRY_MS = 3000;
/** How long close() waits for a polite disconnect before dropping the socket. */
const CLOSE_GRACE_MS = 1000;

interface Connection {
  client: Client;
  bastion?: Client;
  closed: boolean;
  /** Why the connection ended, when it ended on its own. */
  lostReason?: string;
  active: number;
  waiting: (() => void)[];
  /** The resident shell for brief commands, once one was started (not counted in `active`). */
  resident?: Promise<ResidentShell>;
  /** The host refused a session while the resident shell held one: brief commands get sessions of their own. */
  sessionsScarce?: boolean;
  /** Refusals of the resident shell's own session since it was last opened (two in a row: sessions are scarce). */
  residentRefused?: number;
}

interface Hop {
  /** The host id keys are pinned under: the host's id, or `bastion:user@host:port`. */
  pinId: string;
  address: SshAddress;
  /** How messages name this hop. */
  label: string;
  /** The keys it may show, when known (pinned or given); undefined: first contact, pin what it shows. */
  known: KnownHostKeys | undefined;
}

/**
 * A BYO host over SSH (ssh2): key authentication only, never a prompt; the host key is the one given out of band
 * (workshop.yaml, `labfleet hosts pin`), or else pinned at first contact, and a different key is refused at the
 * handshake. With `requireKnownHostKey`, a host whose key is not known another way is not connected to at all.
 * One connection per transport, opened on the first exec and reused by every later exec until close().
 */
export class SshTransport implements Transport {
  readonly outputBytes = OUTPUT_CAP_BYTES;
  readonly target: SshAddress;
  readonly bastion?: SshAddress;
  private readonly connectTimeoutMs: number;
  private connection: Promise<Connection> | undefined;
  private readonly clients = new Set<Client>();

  constructor(private readonly options: SshTransportOptions) {
    this.target = parseSshAddress(options.address, options.defaultUser);
    if (options.via !== undefined) this.bastion = parseSshAddress(options.via, options.defaultUser);
    this.connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
  }

  get hostId(): string {
    return this.options.hostId;
  }

  /** How messages name the host: `user@host:port`, plus ` via <bastion>`. */
  get addressLabel(): string {
    const direct = formatSshAddress(this.target);
    return this.bastion ? `${direct} via ${formatSshAddress(this.bastion)}` : direct;
  }

  async exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    const step = options.step ?? "command";
    const remote = this.remoteCommand(command, options);
    const resident = residentFits(command, options);
    for (let attempt = 0; ; attempt++) {
      const fresh = this.connection === undefined;
      const conn = await this.connect(step);
      try {
        const r = resident ? await this.runResident(conn, command, options, step) : undefined;
        if (r) return r;
        await acquire(conn);
        try {
          return await this.run(conn, remote, options, step);
        } finally {
          release(conn);
        }
      } catch (err) {
        if (!(err instanceof NotStarted)) throw err;
        this.drop(conn);
        // A reused connection can turn out dead only when used (the host restarted meanwhile):
        // connect again, once, when the command never started.
        if (!fresh && attempt === 0) continue;
        throw err.visible;
      }
    }
  }

  /**
   * A brief command in the connection's resident shell (started on first use; shared/transports/ssh-resident.ts).
   * Undefined when the shell is busy with another command, could not be started, or ended before answering: the
   * command then runs in a session of its own. Throws NotStarted when the connection is gone.
   */
  private async runResident(
    conn: Connection,
    command: string,
    options: ExecOptions,
    step: string,
  ): Promise<ExecResult | undefined> {
    for (let again = false; !conn.sessionsScarce; again = true) {
      conn.resident ??= this.openResident(conn, step);
      const pending = conn.resident;
      let shell: ResidentShell;
      try {
        shell = await pending;
      } catch (err) {
        if (err instanceof NotStarted) throw err;
        return undefined; // the host refused the shell a session: the command runs in one of its own
      }
      // A brief command runs as it is; another (a health check) under the host-side backstop, as in a session.
      const body = options.brief
        ? envExports(options.env, this.options.hostId) + command
        : this.remoteCommand(command, options);
      if (!shell.closed) return shell.run(body, options.timeoutMs);
      // Ended since (killed on the host, or past a timeout): a new shell serves the command, tried once.
      if (conn.resident === pending) conn.resident = undefined;
      if (again) return undefined;
    }
    return undefined;
  }

  /**
   * Starts the connection's resident shell in a session of its own. A refused session, once, can be sshd still
   * counting a closed one: the next brief command tries again. Refused twice in a row, sessions are scarce on
   * this host, and brief commands get sessions of their own from then on.
   */
  private openResident(conn: Connection, step: string): Promise<ResidentShell> {
    const opening = this.openChannel(
      conn,
      RESIDENT_COMMAND,
      step,
      async (channel) => new ResidentShell(channel),
      0,
    );
    opening.then(
      () => {
        conn.residentRefused = 0;
      },
      (err) => {
        if (conn.resident === opening) conn.resident = undefined;
        if (err instanceof NotStarted) return;
        conn.residentRefused = (conn.residentRefused ?? 0) + 1;
        if (conn.residentRefused >= 2) conn.sessionsScarce = true;
      },
    );
    return opening;
  }

  /** Logs in (host key checked, as for a command), or finds the connection open; runs nothing on the host. */
  async reach(step: string): Promise<void> {
    const conn = await this.connect(step);
    if (!conn.closed) return;
    // lost since it was opened: log in again
    if (this.connection && (await this.connection) === conn) this.connection = undefined;
    await this.connect(step);
  }

  /** Ends the connection (and the bastion's); a later exec connects again. */
  async close(): Promise<void> {
    this.connection = undefined;
    await Promise.all([...this.clients].map((c) => endClient(c)));
  }

  private connect(step: string): Promise<Connection> {
    if (!this.connection) {
      const pending = this.open(step);
      this.connection = pending;
      pending.catch(() => {
        if (this.connection === pending) this.connection = undefined;
      });
    }
    return this.connection;
  }

  /** Forgets a connection that is gone or unusable, and ends what is left of it. */
  private drop(conn: Connection): void {
    void this.connection?.then((c) => {
      if (c === conn) this.connection = undefined;
    });
    conn.closed = true;
    void endClient(conn.client);
    if (conn.bastion) void endClient(conn.bastion);
  }

  /** The keys the host itself may show: those given out of band, else its pin. */
  private async targetKeys(): Promise<KnownHostKeys | undefined> {
    const given = this.options.hostKeys ?? [];
    if (given.length) return { keys: given, origin: "workshop" };
    return this.options.pins.get(this.options.hostId);
  }

  private async open(step: string): Promise<Connection> {
    // Checked before any connection (the bastion's too): a host refused here is sent nothing at all.
    const known = await this.targetKeys();
    if (this.options.requireKnownHostKey && (!known || known.origin === "tofu")) {
      throw this.keyNotKnown(step, known);
    }
    let bastion: Client | undefined;
    try {
      let sock: Readable | undefined;
      if (this.bastion) {
        const pinId = bastionPinId(this.bastion);
        const hop = {
          pinId,
          address: this.bastion,
          label: "the bastion",
          known: await this.options.pins.get(pinId),
        };
        bastion = await this.handshake(hop, step);
        sock = await this.forward(bastion, step);
      }
      const client = await this.handshake(
        { pinId: this.options.hostId, address: this.target, label: "", known },
        step,
        sock,
      );
      const conn: Connection = { client, closed: false, active: 0, waiting: [] };
      if (bastion) conn.bastion = bastion;
      const lost = (reason: string) => {
        if (conn.closed) return;
        conn.lostReason = reason;
        this.drop(conn);
      };
      client.on("error", (err) => lost(describe(err)));
      client.on("close", () => lost("the connection closed"));
      bastion?.on("error", (err) => lost(`the bastion: ${describe(err)}`));
      bastion?.on("close", () => lost("the connection to the bastion closed"));
      return conn;
    } catch (err) {
      if (bastion) void endClient(bastion);
      throw err;
    }
  }

  /** Opens a tunnel from the bastion to the target. */
  private forward(bastion: Client, step: string): Promise<Readable> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        reject(
          this.unreachable(step, `the bastion opened no tunnel within ${seconds(this.connectTimeoutMs)}`),
        );
      }, this.connectTimeoutMs);
      bastion.forwardOut("127.0.0.1", 0, this.target.host, this.target.port, (err, stream) => {
        clearTimeout(timer);
        if (err) reject(this.unreachable(step, `the bastion could not reach it (${err.message})`));
        else resolve(stream);
      });
    });
  }

  /** Connects one hop and logs in; resolves once authenticated, with the host key checked (and pinned if new). */
  private async handshake(hop: Hop, step: string, sock?: Readable): Promise<Client> {
    const { known } = hop;
    const { identity } = this.options;
    const username = hop.address.user;
    const auth: AnyAuthMethod[] = [];
    if (identity.privateKey) {
      // The key signs in this process, parsed once (ssh-identity.ts's KeyAgent), not at every login.
      const agent = keyAgent(identity.privateKey);
      auth.push(
        agent
          ? { type: "agent", username, agent }
          : { type: "publickey", username, key: identity.privateKey },
      );
    }
    if (identity.agent) auth.push({ type: "agent", username, agent: identity.agent });
    if (auth.length === 0) {
      throw new VisibleError(
        "input",
        "host.no_identity",
        `${identity.keyLabel}: no key and no agent to log in with`,
      );
    }

    const client = new Client();
    this.clients.add(client);
    client.once("close", () => {
      this.clients.delete(client);
      closedClients.add(client);
    });
    /** The host showed another key than the known ones (or, `offered` undefined, none of their types). */
    let changed: { known: KnownHostKeys; offered: string | undefined } | undefined;
    // With known keys, ask only for their types: a host with several keys then shows one that can be checked.
    const algorithms = known ? hostKeyAlgorithms(known.keys) : undefined;
    let pinFailure: unknown;

    return new Promise<Client>((resolve, reject) => {
      let settled = false;
      const fail = (err: unknown) => {
        if (settled) return;
        settled = true;
        client.destroy();
        reject(err);
      };
      client.on("error", (err: Error & ClientErrorExtensions) => {
        if (settled) return; // after login, the connection's own handlers take over
        if (changed) fail(this.keyChanged(hop, step, changed.known, changed.offered));
        else if (pinFailure) fail(pinFailure);
        else if (known && /no matching host key format/.test(err.message))
          fail(this.keyChanged(hop, step, known, undefined));
        else if (err.level === "client-authentication") fail(this.authRefused(hop, step));
        else fail(this.unreachable(step, this.hopReason(hop, describe(err))));
      });
      client.once("close", () => {
        fail(this.unreachable(step, this.hopReason(hop, "the connection closed during login")));
      });
      client.once("ready", () => {
        settled = true;
        resolve(client);
      });
      try {
        client.connect({
          host: hop.address.host,
          port: hop.address.port,
          ...(sock ? { sock } : {}),
          username,
          readyTimeout: this.connectTimeoutMs,
          keepaliveInterval: 15_000,
          keepaliveCountMax: 4,
          tryKeyboard: false,
          authHandler: auth,
          ...(algorithms ? { algorithms: { serverHostKey: algorithms as ServerHostKeyAlgorithm[] } } : {}),
          hostVerifier: (key: Buffer, verify: (ok: boolean) => void) => {
            const seen = key.toString("base64");
            if (known?.keys.includes(seen)) return verify(true);
            if (known?.origin === "workshop") {
              changed = { known, offered: seen };
              return verify(false);
            }
            this.checkPin(hop.pinId, seen, known !== undefined, step).then(
              (now) => {
                const ok = now === undefined || now.keys.includes(seen);
                if (now !== undefined && !ok) changed = { known: now, offered: seen };
                verify(ok);
              },
              (err) => {
                pinFailure = err;
                verify(false);
              },
            );
          },
        });
        // TCP_NODELAY (before the socket connects): SSH sends small packets that wait for the one before to be
        // acknowledged, and the host delays its ACK by 40 ms; without it every command, and every round trip of
        // the login, waits that long.
        client.setNoDelay(true);
      } catch (err) {
        fail(this.unreachable(step, this.hopReason(hop, describe(err))));
      }
    });
  }

  /**
   * A key that is not the pin read before connecting: the pin as it is now (another process may have pinned or
   * replaced it since), and on first contact (no pin now) this key pinned, then read back, so that of two racing
   * first contacts with different keys only the first one wins. The pin the key is judged against. With
   * requireKnownHostKey, the target's pin as it is now must still be one obtained out of band.
   */
  private async checkPin(
    pinId: string,
    seen: string,
    hadPin: boolean,
    step: string,
  ): Promise<KnownHostKeys | undefined> {
    const { pins } = this.options;
    const strict = this.options.requireKnownHostKey && pinId === this.options.hostId;
    if (hadPin) {
      const now = await pins.get(pinId, { fresh: true });
      if (strict && (!now || now.origin === "tofu")) throw this.keyNotKnown(step, now);
      if (now !== undefined) return now;
    }
    await pins.pin(pinId, seen);
    return pins.get(pinId, { fresh: true });
  }

  private run(conn: Connection, remote: string, options: ExecOptions, step: string): Promise<ExecResult> {
    // attach() runs inside ssh2's callback: a quick command's exit status may arrive in the same tick
    return this.openChannel(conn, remote, step, (channel) => this.attach(channel, conn, options, step));
  }

  /**
   * Opens a session and starts the command in it. sshd counts a session until it has seen the close of
   * the previous one, so a refused session is retried for a moment (`retryMs`) before it counts as a failure.
   * A host that refuses a session twice while the resident shell holds one allows fewer sessions than labfleet
   * opens (sshd's MaxSessions): the shell is ended to free its session, and brief commands get sessions of their own.
   */
  private async openChannel<T>(
    conn: Connection,
    remote: string,
    step: string,
    started: (channel: ClientChannel) => Promise<T>,
    retryMs = SESSION_RETRY_MS,
  ): Promise<T> {
    const deadline = Date.now() + retryMs;
    for (let delay = 20, refused = 0; ; delay = Math.min(delay * 2, 400)) {
      if (conn.closed) throw new NotStarted(this.lost(step, conn));
      const outcome = await new Promise<{ running: Promise<T> } | Error>((resolve) => {
        // A connection kept open can lead to a host that froze meanwhile: a session it does not confirm within
        // the connect timeout counts as a lost connection (the command never started; exec tries a new one).
        let waited = false;
        const timer = setTimeout(() => {
          waited = true;
          conn.lostReason ??= `no answer to a new session within ${seconds(this.connectTimeoutMs)}`;
          this.drop(conn);
          resolve(new NotStarted(this.lost(step, conn)));
        }, this.connectTimeoutMs);
        try {
          conn.client.exec(remote, (err, channel) => {
            clearTimeout(timer);
            if (waited) {
              if (!err) channel.close();
              return;
            }
            resolve(err ?? { running: started(channel) });
          });
        } catch (err) {
          clearTimeout(timer);
          // ssh2 throws "Not connected" once the socket is gone
          conn.lostReason ??= describe(err);
          this.drop(conn);
          resolve(new NotStarted(this.lost(step, conn)));
        }
      });
      if (outcome instanceof NotStarted) throw outcome;
      if (!(outcome instanceof Error)) return outcome.running;
      if (conn.closed) throw new NotStarted(this.lost(step, conn));
      // Refused again after a moment: not sshd still counting a closed session, but a host that allows fewer.
      if (++refused >= 2 && conn.resident && !conn.sessionsScarce) {
        conn.sessionsScarce = true;
        void conn.resident.then((shell) => shell.retire()).catch(() => {});
      }
      if (Date.now() + delay > deadline) {
        throw new VisibleError(
          "host",
          "host.ssh_failed",
          `${this.options.hostId} (${this.addressLabel}): the host refused to start ${step} (${outcome.message})`,
        );
      }
      await new Promise((r) => setTimeout(r, delay));
    }
  }

  /** Feeds stdin, collects capped output, and settles on exit, timeout or a lost connection. */
  private attach(
    channel: ClientChannel,
    conn: Connection,
    options: ExecOptions,
    step: string,
  ): Promise<ExecResult> {
    return new Promise<ExecResult>((resolve, reject) => {
      const out = collectCapped(channel);
      const err = collectCapped(channel.stderr);
      const truncated = () => (out.truncated || err.truncated ? { truncated: true } : {});
      let exit: { code: number | null; signal?: string } | undefined;
      let closed = false;
      let stderrEnded = false;
      let done = false;
      let timer: NodeJS.Timeout | undefined;
      const settle = (result: ExecResult | Error) => {
        if (done) return;
        done = true;
        if (timer) clearTimeout(timer);
        if (result instanceof Error) reject(result);
        else resolve(result);
      };
      const complete = () => {
        if (!closed || !stderrEnded) return;
        if (!exit) {
          settle(this.lost(step, conn));
          return;
        }
        const result: ExecResult = {
          exitCode: exit.code ?? 128 + (signalNumber(exit.signal) ?? 0),
          stdout: out.text(),
          stderr: err.text(),
          ...truncated(),
        };
        settle((options.sudo && this.sudoProblem(result, step)) || result);
      };
      channel.on("exit", (code: number | null, signal?: string) => {
        exit = signal === undefined ? { code } : { code, signal };
      });
      channel.on("close", () => {
        closed = true;
        complete();
      });
      channel.stderr.on("end", () => {
        stderrEnded = true;
        complete();
      });
      channel.on("error", () => {}); // shows as a close without exit status; the connection reports why

      if (options.timeoutMs !== undefined) {
        timer = setTimeout(() => {
          // sshd signals the command's whole process group; the host-side `timeout` is the backstop
          // (commands under sudo, a connection lost meanwhile).
          try {
            signalChannel(channel, "KILL");
            channel.close();
          } catch {
            // the channel is closing already
          }
          settle({ exitCode: 124, stdout: out.text(), stderr: err.text(), timedOut: true, ...truncated() });
        }, options.timeoutMs);
      }

      const input = options.stdin;
      if (input === undefined) channel.end();
      else if (typeof input === "string" || Buffer.isBuffer(input)) channel.end(input);
      else (input as Readable).pipe(channel);
    });
  }

  /** `exec bash` (no profile, no rc) with the env exported, under `timeout` (unless brief) and `sudo -n` when asked. */
  private remoteCommand(command: string, options: ExecOptions): string {
    let argv = `bash --noprofile --norc -c ${shq(envExports(options.env, this.options.hostId) + command)}`;
    if (options.timeoutMs !== undefined && !options.brief) {
      // the host kills the command a second after labfleet gives up on it, should the signal not reach it
      argv = `timeout -s KILL ${((options.timeoutMs + 1000) / 1000).toFixed(3)} ${argv}`;
    }
    if (options.sudo && this.target.user !== "root") argv = `sudo -n ${argv}`;
    return `exec ${argv}`;
  }

  private sudoProblem(result: ExecResult, step: string): VisibleError | undefined {
    const { hostId } = this.options;
    const user = this.target.user;
    if (user === "root") return undefined;
    if (
      result.exitCode !== 0 &&
      /sudo: (a password is required|a terminal is required)/.test(result.stderr)
    ) {
      return new VisibleError(
        "host",
        "host.sudo_needs_password",
        `${hostId}: ${step} needs root, and sudo would ask for a password for ${user}: allow it without one (NOPASSWD) or log in as root`,
      );
    }
    if (result.exitCode === 127 && /sudo: (command )?not found/.test(result.stderr)) {
      return new VisibleError(
        "host",
        "host.sudo_missing",
        `${hostId}: ${step} needs root, and sudo is not installed for ${user}: install sudo (with NOPASSWD for ${user}) or log in as root`,
      );
    }
    return undefined;
  }

  private hopReason(hop: Hop, reason: string): string {
    return hop.label ? `${hop.label} ${formatSshAddress(hop.address)}: ${reason}` : reason;
  }

  private unreachable(step: string, reason: string): VisibleError {
    return new VisibleError(
      "host",
      "host.unreachable",
      `${this.options.hostId} (${this.addressLabel}): unreachable during ${step}: ${reason}`,
    );
  }

  private lost(step: string, conn: Connection): VisibleError {
    return this.unreachable(step, `lost the connection (${conn.lostReason ?? "it closed"})`);
  }

  private authRefused(hop: Hop, step: string): VisibleError {
    const { identity } = this.options;
    const offered = [
      identity.privateKey ? `the key ${identity.keyLabel}` : undefined,
      identity.agent ? "the keys of the ssh-agent" : undefined,
    ]
      .filter(Boolean)
      .join(" and ");
    const pub = identity.privateKey ? ` (add ${identity.keyLabel}.pub to its ~/.ssh/authorized_keys)` : "";
    const who = hop.label ? `${hop.label} ${formatSshAddress(hop.address)}` : "the host";
    return new VisibleError(
      "host",
      "host.auth_refused",
      `${this.options.hostId} (${this.addressLabel}): ${who} refused the login of ${hop.address.user} during ${step}: it accepted none of ${offered}${pub}`,
    );
  }

  /** How remedies name the workshop: `-f <file>` when the caller knows it, else the workshop's name. */
  private get workshopArg(): string {
    return this.options.workshopFile ? `-f ${this.options.workshopFile}` : this.options.workshop;
  }

  private keyChanged(
    hop: Hop,
    step: string,
    known: KnownHostKeys,
    offered: string | undefined,
  ): VisibleError {
    const { hostId, workshop } = this.options;
    const target = this.workshopArg;
    const whose = hop.label
      ? `${hop.label} ${formatSshAddress(hop.address)} (pinned as ${hop.pinId}), used to reach ${hostId} (${this.addressLabel}),`
      : `${hostId} (${this.addressLabel})`;
    const fps = known.keys.map(fingerprint).join(", ");
    const shows = offered
      ? `the host now offers ${fingerprint(offered)}`
      : `the host offers no key of the type${known.keys.length === 1 ? "" : "s"} ${[...new Set(known.keys.map((k) => keyTypeOf(k) ?? "unknown"))].join(", ")}`;
    const refused = `labfleet refused to connect for ${step} and sent nothing: the host may have been rebuilt, or someone may be intercepting the connection.`;
    const read =
      "read its new key on the host itself (its console: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub shows the fingerprint), never from the network";
    const pin = `labfleet hosts pin ${target} --host ${hop.pinId} --key "ssh-ed25519 AAAA..." --replace`;
    switch (known.origin) {
      case "workshop":
        return new VisibleError(
          "host",
          "host.key_changed",
          `The SSH host key of ${whose} in workshop ${workshop} is not the one workshop.yaml gives: hosts[].host_key has ${fps}, and ${shows}. ${refused} If the host was rebuilt, ${read}, and put it in hosts[].host_key.`,
        );
      case "pinned":
        return new VisibleError(
          "host",
          "host.key_changed",
          `The SSH host key of ${whose} in workshop ${workshop} is not the one pinned with labfleet hosts pin: it is ${fps}, and ${shows}. ${refused} If the host was rebuilt, ${read}, and pin it: ${pin}`,
        );
      case "ssm":
        return new VisibleError(
          "host",
          "host.key_changed",
          `The SSH host key of ${whose} in workshop ${workshop} is not the one read from the instance through SSM: it is ${fps}, and ${shows}. ${refused} If the instance was replaced, forget the old key (the next deploy reads the new one through SSM): labfleet hosts forget-key ${target} --host ${hop.pinId}`,
        );
      default:
        return new VisibleError(
          "host",
          "host.key_changed",
          `The SSH host key of ${whose} in workshop ${workshop} has changed: labfleet pinned ${fps} at first contact, and ${shows}. ${refused} If the change is expected, forget the old key and try again: labfleet hosts forget-key ${target} --host ${hop.pinId} (or ${read}, and pin it: ${pin})`,
        );
    }
  }

  /** ssh.require_known_host_keys, and this host's key was not obtained out of band: nothing is sent to it. */
  private keyNotKnown(step: string, known: KnownHostKeys | undefined): VisibleError {
    const { hostId, workshop } = this.options;
    const why = known
      ? `the only key labfleet has for it (${known.keys.map(fingerprint).join(", ")}) was trusted on first use, which does not count`
      : "no key of it was given out of band";
    return new VisibleError(
      "host",
      "host.key_unknown",
      `${hostId} (${this.addressLabel}): labfleet sent nothing and did not connect (${step}): workshop ${workshop} sets ssh.require_known_host_keys, and ${why}. Read the host's public key on the host itself (its console: cat /etc/ssh/ssh_host_ed25519_key.pub), or with ssh-keyscan over a network you trust, and pin it: labfleet hosts pin ${this.workshopArg} --host ${hostId} --key "ssh-ed25519 AAAA..." (or give it in hosts[].host_key in workshop.yaml)`,
    );
  }
}

/** Thrown when a command never reached the host because the connection was gone. */
class NotStarted extends Error {
  constructor(readonly visible: VisibleError) {
    super(visible.message);
  }
}

function acquire(conn: Connection): Promise<void> {
  if (conn.active < MAX_CHANNELS) {
    conn.active++;
    return Promise.resolve();
  }
  return new Promise<void>((resolve) => conn.waiting.push(resolve));
}

/** Frees a channel slot, or hands it straight to the next waiting exec. */
function release(conn: Connection): void {
  const next = conn.waiting.shift();
  if (next) next();
  else conn.active--;
}

/** Clients whose connection has closed, so that ending them again waits for nothing. */
const closedClients = new WeakSet<Client>();

function endClient(client: Client): Promise<void> {
  if (closedClients.has(client)) return Promise.resolve();
  return new Promise((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    const done = () => {
      if (timer) clearTimeout(timer);
      resolve();
    };
    client.once("close", done);
    client.on("error", () => {}); // errors while closing change nothing
    timer = setTimeout(() => {
      client.destroy();
      resolve();
    }, CLOSE_GRACE_MS);
    try {
      client.end();
    } catch {
      client.destroy();
    }
  });
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const e = err as Error & ClientErrorExtensions & { code?: string | number };
  if (e.level === "client-timeout") return "no SSH handshake in time (connect timeout)";
  switch (e.code) {
    case "ECONNREFUSED":
      return "connection refused (nothing listening on that port)";
    case "EHOSTUNREACH":
    case "ENETUNREACH":
      return `no route to the host (${e.code})`;
    case "ETIMEDOUT":
      return "the connection timed out";
    case "ECONNRESET":
      return "the connection was reset";
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `the name does not resolve (${e.code})`;
    default:
      return e.message;
  }
}

/**
 * Sends a signal request. ssh2's `channel.signal()` sends nothing once stdin has ended (which every
 * exec does at once), so this speaks to the protocol directly while the channel is open.
 */
function signalChannel(channel: ClientChannel, name: string): void {
  const raw = channel as unknown as {
    outgoing?: { id: number; state: string };
    _client?: { _protocol?: { signal?: (id: number, signal: string) => void } };
  };
  const state = raw.outgoing?.state;
  const protocol = raw._client?._protocol;
  if (raw.outgoing && (state === "open" || state === "eof") && typeof protocol?.signal === "function") {
    protocol.signal(raw.outgoing.id, name);
  } else {
    channel.signal(name);
  }
}

function seconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

function signalNumber(name: string | undefined): number | undefined {
  if (!name) return undefined;
  const signals = constants.signals as Record<string, number | undefined>;
  return signals[name.startsWith("SIG") ? name : `SIG${name}`];
}
