import { randomBytes } from "node:crypto";
import type { ClientChannel } from "ssh2";
import { type ExecResult, OUTPUT_CAP_BYTES, shq } from "./types.ts";

/**
 * The resident shell's loop: reads a request (a line `<bytes> <token>`, then the command's bytes), runs the command
 * in a subshell forked from it (its variables, options, traps and working folder are the subshell's own, its stdin
 * /dev/null), then writes `\n<token> <exit code>\n` on stdout and `\n<token>\n` on stderr: where the command's
 * output ends. The request is read in the C locale (lengths in bytes) inside a function, so that the command runs
 * in the login's own locale. Anything that is not a request ends the loop, and with it the shell.
 */
const LOOP = `labfleet_next() {
  local LC_ALL=C head
  IFS= read -r head || return 1
  [[ $head =~ ^([0-9]+)\\ ([0-9a-f]{32})$ ]] || return 1
  labfleet_token=\${BASH_REMATCH[2]} labfleet_command=
  [ "\${BASH_REMATCH[1]}" = 0 ] || IFS= read -r -d '' -N "\${BASH_REMATCH[1]}" labfleet_command || :
  [ "\${#labfleet_command}" = "\${BASH_REMATCH[1]}" ]
}
while labfleet_next; do
  ( eval "$labfleet_command" ) < /dev/null
  printf '\\n%s %s\\n' "$labfleet_token" "$?"
  printf '\\n%s\\n' "$labfleet_token" >&2
done`;

/** The session command that starts a resident shell (bash without profile or rc, as every command of labfleet's). */
export const RESIDENT_COMMAND = `exec bash --noprofile --norc -c ${shq(LOOP)}`;

/**
 * Whether a command can run in the resident shell: a brief command or one marked `resident` (ExecOptions: one of
 * labfleet's reads, the health check), with no stdin (the shell's stdin carries its requests), not under sudo,
 * and with no NUL byte (which bash cannot hold).
 */
export function residentFits(
  command: string,
  o: { brief?: boolean; resident?: boolean; stdin?: unknown; sudo?: boolean },
): boolean {
  return (
    (o.brief === true || o.resident === true) && o.stdin === undefined && !o.sudo && !command.includes("\0")
  );
}

/**
 * One output stream of a command in the resident shell: kept up to OUTPUT_CAP_BYTES (the rest counted as
 * truncated, as a session's output is), until the end mark `\n<token>` and the line it starts.
 */
class MarkedStream {
  private readonly chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  /** The bytes not yet kept: they may hold the start of the mark. */
  private pending: Buffer = Buffer.alloc(0);
  /** The rest of the mark's line once it is seen (" <exit code>" on stdout, "" on stderr). */
  trailer: string | undefined;

  constructor(private readonly mark: Buffer) {}

  push(chunk: Buffer): void {
    if (this.trailer !== undefined) return;
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const at = this.pending.indexOf(this.mark);
    if (at >= 0) {
      const eol = this.pending.indexOf(0x0a, at + this.mark.length);
      if (eol < 0) return; // the mark's line is still coming
      this.keep(this.pending.subarray(0, at));
      this.trailer = this.pending.subarray(at + this.mark.length, eol).toString("utf8");
      this.pending = Buffer.alloc(0);
      return;
    }
    // Everything but what could be the start of a mark cut across chunks is output.
    const safe = Math.max(0, this.pending.length - (this.mark.length - 1));
    this.keep(this.pending.subarray(0, safe));
    this.pending = this.pending.subarray(safe);
  }

  private keep(bytes: Buffer): void {
    if (!bytes.length) return;
    const room = OUTPUT_CAP_BYTES - this.size;
    if (bytes.length > room) this.truncated = true;
    if (room <= 0) return;
    const kept = bytes.length > room ? bytes.subarray(0, room) : bytes;
    this.chunks.push(Buffer.from(kept));
    this.size += kept.length;
  }

  /** What the command wrote so far, mark excluded (all of it once the mark is seen). */
  text(): string {
    return Buffer.concat([
      ...this.chunks,
      this.trailer === undefined ? this.pending : Buffer.alloc(0),
    ]).toString("utf8");
  }
}

/**
 * A bash kept running in one session of a pooled SSH connection, which runs labfleet's brief reads (doctor, the lab
 * probe, page reads) and health checks one after another, each in a subshell it forks: a command costs the host a
 * fork instead of a session (sshd's own fork, the login shell, and bash). It runs one command at a time; `run` resolves undefined
 * when the shell is busy, or ended before the command's end mark came (the caller then runs the command in a
 * session of its own, as every other command runs).
 */
export class ResidentShell {
  busy = false;
  closed = false;
  /** To end once its command is answered. */
  private retiring = false;
  private onData: ((chunk: Buffer, stderr: boolean) => void) | undefined;
  private onClose: (() => void) | undefined;

  constructor(private readonly channel: ClientChannel) {
    channel.on("data", (c: Buffer) => this.onData?.(c, false));
    channel.stderr.on("data", (c: Buffer) => this.onData?.(c, true));
    channel.on("error", () => {}); // shows as a close; the connection reports why
    channel.on("close", () => {
      this.closed = true;
      this.onClose?.();
    });
  }

  run(command: string, timeoutMs: number | undefined): Promise<ExecResult | undefined> {
    if (this.busy || this.closed) return Promise.resolve(undefined);
    this.busy = true;
    const token = randomBytes(16).toString("hex");
    const out = new MarkedStream(Buffer.from(`\n${token} `));
    const err = new MarkedStream(Buffer.from(`\n${token}`));
    return new Promise<ExecResult | undefined>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const truncated = () => (out.truncated || err.truncated ? { truncated: true } : {});
      const settle = (result: ExecResult | undefined) => {
        if (timer) clearTimeout(timer);
        this.onData = undefined;
        this.onClose = undefined;
        this.busy = false;
        if (this.retiring) this.end();
        resolve(result);
      };
      this.onData = (chunk, stderr) => {
        (stderr ? err : out).push(chunk);
        if (out.trailer === undefined || err.trailer === undefined) return;
        const code = Number(out.trailer.trim());
        if (!Number.isInteger(code) || err.trailer !== "") {
          this.end(); // not what the loop writes: the shell is not to be trusted with another command
          return settle(undefined);
        }
        settle({ exitCode: code, stdout: out.text(), stderr: err.text(), ...truncated() });
      };
      this.onClose = () => settle(undefined);
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          this.end();
          settle({ exitCode: 124, stdout: out.text(), stderr: err.text(), timedOut: true, ...truncated() });
        }, timeoutMs);
      }
      const body = Buffer.from(command, "utf8");
      try {
        this.channel.write(Buffer.concat([Buffer.from(`${body.length} ${token}\n`), body]));
      } catch {
        this.end();
        settle(undefined);
      }
    });
  }

  /** Ends the shell now, or once the command it runs is answered. */
  retire(): void {
    this.retiring = true;
    if (!this.busy) this.end();
  }

  /** Ends the shell and its session (what it runs is signalled to end with it). */
  end(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.channel.signal("KILL");
    } catch {
      // closing already
    }
    try {
      this.channel.close();
    } catch {
      // closed already
    }
  }
}
