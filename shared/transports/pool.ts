import { type ExecOptions, reachHost, type Transport } from "./types.ts";

export interface TransportPoolOptions {
  /** At most this many hosts' connections stay open; past it the least recently used idle one is closed. */
  maxOpen?: number;
  /** A connection nothing has used for this long is closed. */
  idleMs?: number;
}

/** What one pooled connection is for; a host whose address or SSH options change gets a new one. */
export interface PoolKey {
  workshop: string;
  hostId: string;
  /** Everything else that shapes the connection (address, user, bastion, host keys, timeouts), as one string. */
  shape: string;
}

export const POOL_DEFAULTS = { maxOpen: 512, idleMs: 60_000 } as const;

interface Entry {
  key: PoolKey;
  transport: Promise<Transport>;
  /** Commands running through it now. */
  busy: number;
  lastUsed: number;
  idleTimer: NodeJS.Timeout | undefined;
}

/**
 * Keeps each host's transport (for SSH, its one ssh2 connection) open between the operations of a workshop, as
 * OpenSSH's ControlPersist does: status polls, doctor, exec and health checks of a host share one connection
 * instead of paying the handshake each time. Bounded: at most `maxOpen` hosts (the least recently used idle one
 * is closed first), each closed after `idleMs` unused, and all of a workshop's (or some hosts') on `release`.
 *
 * What `lease` hands out is a Transport whose `close()` only gives it back: callers keep closing their
 * transports when an operation ends, and the pool decides when the connection really ends. The transport
 * itself reconnects after a dropped connection (checking the host key again on every new connection) and
 * queues commands beyond the sessions sshd allows on one connection.
 */
export class TransportPool {
  readonly maxOpen: number;
  readonly idleMs: number;
  private readonly entries = new Map<string, Entry>();
  private closed = false;

  constructor(options: TransportPoolOptions = {}) {
    this.maxOpen = Math.max(1, options.maxOpen ?? POOL_DEFAULTS.maxOpen);
    this.idleMs = options.idleMs ?? POOL_DEFAULTS.idleMs;
  }

  /** How many hosts have a pooled transport now (each holds at most one connection, plus its bastion's). */
  get size(): number {
    return this.entries.size;
  }

  /**
   * The transport for `key`, made with `make` the first time (or after it was closed). `outputBytes` is the
   * output bound of the transport `make` builds.
   */
  lease(key: PoolKey, make: () => Promise<Transport>, outputBytes?: number): Transport {
    const id = entryId(key);
    const entry = (): Entry => {
      let e = this.entries.get(id);
      if (!e) {
        if (this.closed) throw new Error("the connection pool is closed");
        this.retireOtherShapes(key);
        const transport = make();
        transport.catch(() => this.entries.get(id) === e && this.entries.delete(id));
        e = { key, transport, busy: 0, lastUsed: performance.now(), idleTimer: undefined };
        this.entries.set(id, e);
        this.trim(e);
      } else {
        // Most recently used last: Map keeps insertion order, so the first entries are the least recently used.
        this.entries.delete(id);
        this.entries.set(id, e);
      }
      return e;
    };
    const use = async <T>(fn: (t: Transport) => Promise<T>): Promise<T> => {
      const e = entry();
      e.busy++;
      if (e.idleTimer) clearTimeout(e.idleTimer);
      e.idleTimer = undefined;
      try {
        return await fn(await e.transport);
      } finally {
        e.busy--;
        e.lastUsed = performance.now();
        if (e.busy === 0) this.idle(id, e);
      }
    };
    return {
      ...(outputBytes ? { outputBytes } : {}),
      exec: (command: string, options?: ExecOptions) => use((t) => t.exec(command, options)),
      reach: (step: string) => use((t) => reachHost(t, step)),
      /** Gives the transport back; the connection stays open for the next operation. */
      async close() {},
    };
  }

  /** Closes the pooled connections of a workshop's hosts (all of them when `hostIds` is not given). */
  async release(workshop: string, hostIds?: readonly string[]): Promise<void> {
    const only = hostIds ? new Set(hostIds) : undefined;
    const gone: Entry[] = [];
    for (const [id, e] of this.entries) {
      if (e.key.workshop !== workshop || (only && !only.has(e.key.hostId))) continue;
      this.entries.delete(id);
      gone.push(e);
    }
    await Promise.all(gone.map(end));
  }

  /** Closes every connection; a later lease fails. */
  async close(): Promise<void> {
    this.closed = true;
    const gone = [...this.entries.values()];
    this.entries.clear();
    await Promise.all(gone.map(end));
  }

  /** Starts the idle timer of an entry nothing uses now, and closes idle ones above the cap. */
  private idle(id: string, e: Entry): void {
    if (this.entries.get(id) !== e) {
      // released or retired while a command ran: end it now that the command is done
      void end(e);
      return;
    }
    e.idleTimer = setTimeout(() => {
      if (this.entries.get(id) !== e || e.busy > 0) return;
      this.entries.delete(id);
      void end(e);
    }, this.idleMs);
    e.idleTimer.unref();
    this.trim(e);
  }

  /** Above the cap, closes the least recently used entries that run nothing (never `keep`). */
  private trim(keep: Entry): void {
    if (this.entries.size <= this.maxOpen) return;
    for (const [id, e] of this.entries) {
      if (this.entries.size <= this.maxOpen) return;
      if (e === keep || e.busy > 0) continue;
      this.entries.delete(id);
      void end(e);
    }
  }

  /** A host whose address or options changed: its connection made for the old ones is closed. */
  private retireOtherShapes(key: PoolKey): void {
    for (const [id, e] of this.entries) {
      if (e.key.workshop !== key.workshop || e.key.hostId !== key.hostId) continue;
      this.entries.delete(id);
      if (e.busy === 0) void end(e);
    }
  }
}

function entryId(key: PoolKey): string {
  return JSON.stringify([key.workshop, key.hostId, key.shape]);
}

async function end(e: Entry): Promise<void> {
  if (e.idleTimer) clearTimeout(e.idleTimer);
  e.idleTimer = undefined;
  if (e.busy > 0) return; // ended by idle() once its last command is done
  const t = await e.transport.catch(() => undefined);
  await t?.close?.();
}
