import { linkSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * One runtime per data folder. A runtime holds `<dataDir>/runtime.lock`, a file created atomically (written
 * under another name, then hard-linked into place: the link fails if the lock exists, and a reader never sees
 * a half-written lock) that names its pid, the process's start time and, once it serves, its URL. A lock whose
 * process is gone, or whose pid now belongs to another process (a different start time), was left by a runtime
 * that was killed: the next start takes it over. Everything the folder holds (DynamoDB Local and its pid file,
 * runtime.json, the sandbox hosts) is touched only by the lock's holder.
 */

export const LOCK_FILE = "runtime.lock";

export interface LockOwner {
  pid: number;
  /** The process's start time, in clock ticks after boot (/proc/PID/stat field 22); absent off Linux. */
  startTime?: string;
  /** Where it serves, once it does. */
  url?: string;
}

/** Thrown when the folder's lock is held by a runtime that is still running. */
export class DataDirInUseError extends Error {
  override name = "DataDirInUseError";
  constructor(
    readonly dataDir: string,
    readonly owner: LockOwner,
  ) {
    super(
      `labfleet dev is already running on ${dataDir} (pid ${owner.pid}, ${owner.url ?? "still starting"}): use that one, stop it first, or choose another folder with --data-dir`,
    );
  }
}

export interface RuntimeLock {
  /** Records the URL the runtime serves at, for the message a second start prints. */
  setUrl(url: string): void;
  /** Gives the folder up (only if the lock is still this process's). */
  release(): void;
}

/** The start time of a process, from /proc; undefined when it is gone or /proc is not there. */
export function processStartTime(pid: number): string | undefined {
  try {
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ")".
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/** Whether the lock's process is the one that wrote it and still runs. */
function ownerAlive(owner: LockOwner): boolean {
  if (!Number.isInteger(owner.pid) || owner.pid <= 0) return false;
  if (owner.startTime !== undefined) {
    const now = processStartTime(owner.pid);
    // No /proc entry: gone (or /proc is not there, and then signal 0 decides).
    if (now !== undefined) return now === owner.startTime;
  }
  return processAlive(owner.pid);
}

function parseOwner(text: string): LockOwner | undefined {
  try {
    const o = JSON.parse(text) as Partial<LockOwner>;
    if (typeof o.pid !== "number") return undefined;
    return {
      pid: o.pid,
      ...(typeof o.startTime === "string" ? { startTime: o.startTime } : {}),
      ...(typeof o.url === "string" ? { url: o.url } : {}),
    };
  } catch {
    return undefined;
  }
}

function readLock(file: string): string | undefined {
  try {
    return readFileSync(file, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

/** The live runtime holding `dataDir`, if there is one (a look only: nothing is taken or removed). */
export function lockOwner(dataDir: string): LockOwner | undefined {
  const text = readLock(join(dataDir, LOCK_FILE));
  if (text === undefined) return undefined;
  const owner = parseOwner(text);
  return owner && ownerAlive(owner) ? owner : undefined;
}

/**
 * Takes the folder for this process, or throws DataDirInUseError naming the runtime that holds it. A lock left
 * by a dead runtime is moved aside and checked to be the very one judged stale before it is removed, so two
 * starts racing for a stale lock never both win.
 */
export function acquireRuntimeLock(dataDir: string): RuntimeLock {
  const file = join(dataDir, LOCK_FILE);
  const self: LockOwner = { pid: process.pid };
  const startTime = processStartTime(process.pid);
  if (startTime !== undefined) self.startTime = startTime;
  const mine = () => JSON.stringify(self);
  const tmp = `${file}.${process.pid}.tmp`;

  for (let attempt = 0; ; attempt++) {
    writeFileSync(tmp, mine(), { mode: 0o600 });
    try {
      linkSync(tmp, file);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    } finally {
      rmSync(tmp, { force: true });
    }
    const text = readLock(file);
    if (text === undefined) continue; // released meanwhile: try again
    const owner = parseOwner(text);
    if (owner && ownerAlive(owner)) throw new DataDirInUseError(dataDir, owner);
    if (attempt >= 5) throw new Error(`cannot take ${file}: other starts keep changing it`);
    // Stale (or unreadable: never written by a live runtime, whose lock is complete from its first byte).
    const aside = `${file}.${process.pid}.stale`;
    try {
      renameSync(file, aside);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") continue;
      throw err;
    }
    if (readLock(aside) !== text) {
      // Another start replaced the stale lock with its own before this rename: put it back.
      try {
        linkSync(aside, file);
      } catch {
        // a third start took the folder meanwhile; it keeps it
      }
    }
    rmSync(aside, { force: true });
  }

  const held = () => {
    const owner = parseOwner(readLock(file) ?? "");
    return owner?.pid === self.pid && owner.startTime === self.startTime;
  };
  return {
    setUrl(url) {
      if (!held()) return;
      self.url = url;
      // Replaced in one rename: the lock never disappears, and a reader sees the old or the new one whole.
      const next = `${file}.${process.pid}.next`;
      writeFileSync(next, mine(), { mode: 0o600 });
      renameSync(next, file);
    },
    release() {
      if (held()) rmSync(file, { force: true });
    },
  };
}
