import {
  CancelCommandCommand,
  GetCommandInvocationCommand,
  type GetCommandInvocationCommandOutput,
  type SSMClient,
  SSMServiceException,
} from "@aws-sdk/client-ssm";
import { VisibleError } from "../runtime/errors.ts";
import { NoCommandIdError, type SsmSend, type SsmSendBatcher, sendRunShellScript } from "./ssm-batch.ts";
import {
  type ExecOptions,
  type ExecResult,
  envExports,
  readBoundedInput,
  shq,
  type Transport,
} from "./types.ts";

export interface SsmTransportOptions {
  workshop: string;
  hostId: string;
  /** The EC2 instance (a managed node, SSM agent online). */
  instanceId: string;
  client: SSMClient;
  /**
   * Shared by the transports of a fleet (one per SSM client): the same command sent to many instances at once
   * goes as one SendCommand per 50 of them (ssm-batch.ts). Without it, each exec is a SendCommand of its own.
   */
  batcher?: SsmSendBatcher;
  /** The home commands run in and see as `$HOME` (the lab contract's login user's home). Default `/root`. */
  home?: string;
  /** The first wait between polls of GetCommandInvocation; it doubles up to `maxPollIntervalMs`. Default 500. */
  pollIntervalMs?: number;
  /** Default 5000. */
  maxPollIntervalMs?: number;
  /** The timeout of a command without `timeoutMs`. Default one hour (what AWS-RunShellScript applies anyway). */
  defaultTimeoutMs?: number;
  /** Injectable for tests. */
  sleep?: (ms: number) => Promise<void>;
  /** Injectable for tests: the clock the local deadline is measured with. */
  now?: () => number;
}

/**
 * SendCommand carries its parameters in a request of limited size (tens of KB), and everything sent is
 * kept in the SSM command history: stdin above this much base64 is refused before anything is sent.
 */
export const SSM_MAX_STDIN_BASE64 = 48 * 1024;
/** Bytes of the host-side output that come back inline (SSM returns at most 24,000 / 8,000 characters). */
export const SSM_STDOUT_TAIL = 20_000;
export const SSM_STDERR_TAIL = 7_000;
/** The wrapper's last line on stderr: `__LABFLEET_SSM__ rc=.. out=<bytes> err=<bytes> timedout=0|1 dir=..`. */
const MARKER = "__LABFLEET_SSM__";
const MARKER_LINE = /\n__LABFLEET_SSM__ rc=(-?\d+) out=(\d+) err=(\d+) timedout=([01]) dir=([^\n]*)(?:\n|$)/g;
/** SSM's AWS-RunShellScript accepts an executionTimeout of 1 s to 48 h. */
const MAX_EXECUTION_TIMEOUT_S = 172_800;
/** SSM kills the script this long after the wrapper's own `timeout` should have ended the command. */
const EXECUTION_GRACE_S = 30;
/**
 * labfleet gives up (and cancels) this long after the command's timeout, for delivery and polling latency: as
 * long as the command's own timeout, between MIN_LOCAL_GRACE_MS and LOCAL_GRACE_MS (and never past the
 * caller's deadline).
 */
const LOCAL_GRACE_MS = 60_000;
const MIN_LOCAL_GRACE_MS = 15_000;
/** A command SSM has not delivered within this long fails with "Delivery Timed Out" (SendCommand's minimum is 30). */
const DELIVERY_TIMEOUT_S = 120;
/** InvocationDoesNotExist right after SendCommand is normal (eventual consistency), for a while. */
const INVOCATION_APPEAR_MS = 60_000;
/** What SSM answers when it throttles (the SDK has retried already; the poll loop asks again later). */
const THROTTLED = new Set(["ThrottlingException", "TooManyRequestsException", "RequestLimitExceeded"]);
const TERMINAL = new Set(["Success", "Failed", "Cancelled", "TimedOut"]);
/** StatusDetails (spaces removed) of an invocation the agent never ran: terminal whatever Status says. */
const UNDELIVERED = new Set(["Undeliverable", "Terminated", "DeliveryTimedOut"]);

/**
 * An EC2 instance reached through AWS Systems Manager Run Command (no SSH): each exec is one SendCommand of
 * `AWS-RunShellScript`, polled with GetCommandInvocation (backoff from `pollIntervalMs` to `maxPollIntervalMs`).
 *
 * - Commands run as root (the SSM agent's user): `sudo: true` changes nothing. `$HOME` is set to `home` and
 *   the command runs there, with bash (no profile, no rc), like the ssh transport.
 * - Output: SSM returns only the first 24,000 characters of stdout and 8,000 of stderr. The wrapper (see
 *   `wrapScript`) writes the command's full output to private files on the host, prints their tails
 *   (SSM_STDOUT_TAIL / SSM_STDERR_TAIL bytes) and a marker line with the full byte counts at the end of
 *   stderr; a result shorter than those counts is `truncated`, and its stderr starts with a note naming
 *   the host-side folder that keeps the full output (`~/.labfleet/ssm/`, pruned after 3 days). Outputs that
 *   fit are deleted at once.
 * - Timeouts: the wrapper runs the command under `timeout` (exit 124, `timedOut`), SSM's executionTimeout is
 *   the backstop 30 s later (status TimedOut -> 124), and labfleet itself gives up 60 s after the timeout,
 *   cancelling the command (124 when it was running, host.unreachable when it was never delivered).
 * - stdin: SSM has none. The input travels base64-encoded inside the script, is decoded into a file created
 *   under umask 077 in `$HOME/.labfleet/ssm/`, opened as the command's stdin and unlinked before the command
 *   starts (a trap removes it on any early exit). At most SSM_MAX_STDIN_BASE64 characters of base64.
 * - Beware: SSM keeps every command's parameters (the script, so env values and stdin) in its command
 *   history, readable with ssm:ListCommands in the account, for 30 days. The Comment carries only
 *   labfleet, the workshop, the host and the step.
 */
export class SsmTransport implements Transport {
  readonly outputBytes = SSM_STDOUT_TAIL;
  readonly home: string;
  private readonly pollIntervalMs: number;
  private readonly maxPollIntervalMs: number;
  private readonly defaultTimeoutMs: number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly now: () => number;

  constructor(private readonly options: SsmTransportOptions) {
    this.home = options.home ?? "/root";
    this.pollIntervalMs = Math.max(1, options.pollIntervalMs ?? 500);
    this.maxPollIntervalMs = Math.max(this.pollIntervalMs, options.maxPollIntervalMs ?? 5000);
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? 3_600_000;
    this.sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.now = options.now ?? Date.now;
  }

  get hostId(): string {
    return this.options.hostId;
  }

  async exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    const step = options.step ?? "command";
    const timeoutMs = Math.min(
      Math.max(1, options.timeoutMs ?? this.defaultTimeoutMs),
      (MAX_EXECUTION_TIMEOUT_S - EXECUTION_GRACE_S) * 1000,
    );
    const stdin = options.stdin === undefined ? undefined : await this.readStdin(options.stdin, step);
    const script = wrapScript({
      home: this.home,
      command: this.exports(options.env) + command,
      stdin,
      timeoutMs,
    });
    const started = this.now();
    const commandId = await this.send(script, timeoutMs, step);
    const grace = Math.min(LOCAL_GRACE_MS, Math.max(MIN_LOCAL_GRACE_MS, timeoutMs));
    const giveUpAt = Math.min(started + timeoutMs + grace, options.deadline ?? Number.POSITIVE_INFINITY);
    return this.wait(commandId, giveUpAt, step);
  }

  /** Nothing to close: every exec is a stateless API call. */
  async close(): Promise<void> {}

  private async send(script: string, timeoutMs: number, step: string): Promise<string> {
    const { workshop, hostId, instanceId, client, batcher } = this.options;
    const s: SsmSend = {
      instanceId,
      script,
      executionTimeoutS: Math.ceil(timeoutMs / 1000) + EXECUTION_GRACE_S,
      deliveryTimeoutS: DELIVERY_TIMEOUT_S,
      comment: `labfleet ${workshop} ${hostId}: ${step}`,
      sharedComment: `labfleet ${workshop}: ${step}`,
    };
    try {
      return batcher ? await batcher.send(s) : await sendRunShellScript(client, s, [instanceId], s.comment);
    } catch (err) {
      if (err instanceof NoCommandIdError) throw this.unreachable(step, err.message);
      throw this.awsError(err, step);
    }
  }

  private async wait(commandId: string, deadline: number, step: string) {
    const { instanceId, client } = this.options;
    const sent = this.now();
    let interval = this.pollIntervalMs;
    let last: string | undefined;
    for (;;) {
      const left = deadline - this.now();
      if (left <= 0) return this.giveUp(commandId, last, this.now() - sent, step);
      await this.sleep(Math.min(interval, left));
      interval = Math.min(interval * 2, this.maxPollIntervalMs);
      let inv: GetCommandInvocationCommandOutput;
      try {
        inv = await client.send(
          new GetCommandInvocationCommand({ CommandId: commandId, InstanceId: instanceId }),
        );
      } catch (err) {
        if (errorName(err) === "InvocationDoesNotExist" && this.now() - sent < INVOCATION_APPEAR_MS) continue;
        // The command runs whatever happens to its polls: a throttled poll is asked again, until the deadline.
        if (THROTTLED.has(errorName(err) ?? "")) continue;
        throw this.awsError(err, step);
      }
      last = inv.Status;
      const details = (inv.StatusDetails ?? "").replace(/ /g, "");
      if ((inv.Status && TERMINAL.has(inv.Status)) || UNDELIVERED.has(details)) return this.finish(inv, step);
    }
  }

  private finish(inv: GetCommandInvocationCommandOutput, step: string): ExecResult {
    const details = inv.StatusDetails ?? inv.Status ?? "unknown";
    if (UNDELIVERED.has(details.replace(/ /g, ""))) {
      throw this.unreachable(step, `SSM could not deliver the command (${details})`);
    }
    const output = parseOutput(inv.StandardOutputContent ?? "", inv.StandardErrorContent ?? "");
    if (inv.Status === "TimedOut") {
      return { ...output, exitCode: 124, timedOut: true };
    }
    if (inv.Status === "Cancelled") {
      throw new VisibleError(
        "host",
        "host.ssm_failed",
        `${this.label}: ${step} was cancelled in Systems Manager (${details})`,
      );
    }
    const code = inv.ResponseCode ?? (inv.Status === "Success" ? 0 : -1);
    if (code < 0) {
      throw new VisibleError(
        "host",
        "host.ssm_failed",
        `${this.label}: SSM reports ${step} as ${details} without an exit code (the agent could not run it, or it was killed)`,
      );
    }
    return output.timedOut ? { ...output, exitCode: 124 } : { ...output, exitCode: code };
  }

  /** The local deadline passed: cancel, then 124 if the command was running, unreachable if never delivered. */
  private async giveUp(
    commandId: string,
    last: string | undefined,
    waitedMs: number,
    step: string,
  ): Promise<ExecResult> {
    const { instanceId, client } = this.options;
    try {
      await client.send(new CancelCommandCommand({ CommandId: commandId, InstanceIds: [instanceId] }));
    } catch {
      // it may have finished meanwhile; the host-side timeout ends it anyway
    }
    if (last === undefined || last === "Pending" || last === "Delayed") {
      throw this.unreachable(
        step,
        `SSM did not deliver the command within ${Math.round(waitedMs / 1000)} s (${last ?? "no invocation yet"})`,
      );
    }
    return { exitCode: 124, stdout: "", stderr: "", timedOut: true };
  }

  private async readStdin(input: NonNullable<ExecOptions["stdin"]>, step: string): Promise<Buffer> {
    const maxBytes = (SSM_MAX_STDIN_BASE64 / 4) * 3;
    const tooLarge = () =>
      new VisibleError(
        "input",
        "host.stdin_too_large",
        `${this.label}: the input of ${step} is larger than SSM can carry (${Math.round(maxBytes / 1024)} KiB at most through SendCommand): let the host fetch it instead (e.g. lab.source as a git URL)`,
      );
    return readBoundedInput(input, maxBytes, tooLarge);
  }

  private exports(env: Record<string, string> | undefined): string {
    return envExports(env, this.options.hostId);
  }

  private get label(): string {
    return `${this.options.hostId} (${this.options.instanceId})`;
  }

  private unreachable(step: string, reason: string): VisibleError {
    return new VisibleError(
      "host",
      "host.unreachable",
      `${this.label}: unreachable through SSM during ${step}: ${reason}`,
    );
  }

  /**
   * An AWS error as host.unreachable. Service messages are repeated only for errors known not to echo
   * request parameters (the script holds env values and stdin); others are named by their error name.
   */
  private awsError(err: unknown, step: string): VisibleError {
    if (err instanceof VisibleError) return err;
    const name = errorName(err) ?? "error";
    const message = err instanceof Error ? err.message : String(err);
    if (name === "InvalidInstanceId") {
      return this.unreachable(
        step,
        `the instance is not a managed node online with SSM (stopped, terminated, no instance profile, or the agent is not running): ${name}: ${message}`,
      );
    }
    const safe = !(err instanceof SSMServiceException) || SAFE_MESSAGES.has(name);
    return this.unreachable(step, safe ? `${name}: ${message}` : name);
  }
}

const SAFE_MESSAGES = new Set([
  "AccessDeniedException",
  "UnsupportedPlatformType",
  "InvalidDocument",
  "InvalidCommandId",
  "InternalServerError",
  "ThrottlingException",
]);

function errorName(err: unknown): string | undefined {
  return err instanceof Error ? err.name : undefined;
}

/**
 * The script SendCommand runs. The SSM agent runs it with `sh` (dash on Ubuntu), so it is POSIX sh; the
 * command itself runs with bash. Full output stays in `$d/out` and `$d/err` (mode 600 in a 700 folder);
 * only their tails come back, followed by the marker line on stderr.
 */
export function wrapScript(o: { home: string; command: string; stdin?: Buffer; timeoutMs: number }): string {
  const seconds = (o.timeoutMs / 1000).toFixed(3);
  // `timeout` exits 124 (137 after KILL): it is a timeout only when the time is really up (to the second)
  const atLeast = Math.max(0, Math.floor(o.timeoutMs / 1000) - 1);
  const input =
    o.stdin === undefined
      ? ["exec 3</dev/null"]
      : [
          `base64 -d >"$d/in" <<'LABFLEET_STDIN' || exit 1`,
          ...(o.stdin.toString("base64").match(/.{1,76}/g) ?? []),
          "LABFLEET_STDIN",
          `exec 3<"$d/in" || exit 1`,
          `rm -f "$d/in"`,
        ];
  return [
    "umask 077",
    `export HOME=${shq(o.home)}`,
    `cd "$HOME" || exit 1`,
    `mkdir -p "$HOME/.labfleet/ssm" || exit 1`,
    `find "$HOME/.labfleet/ssm" -mindepth 1 -maxdepth 1 -mtime +2 -exec rm -rf {} + 2>/dev/null`,
    `d=$(mktemp -d "$HOME/.labfleet/ssm/run.XXXXXXXX") || exit 1`,
    `trap 'rm -f "$d/in"' EXIT`,
    ...input,
    "start=$(date +%s)",
    `timeout -k 5 ${seconds} bash --noprofile --norc -c ${shq(o.command)} <&3 >"$d/out" 2>"$d/err" 3<&-`,
    "rc=$?",
    "exec 3<&-",
    "timed=0",
    `if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then [ $(( $(date +%s) - start )) -ge ${atLeast} ] && timed=1; fi`,
    `o=$(($(wc -c <"$d/out"))); e=$(($(wc -c <"$d/err")))`,
    `tail -c ${SSM_STDOUT_TAIL} "$d/out"`,
    `tail -c ${SSM_STDERR_TAIL} "$d/err" >&2`,
    `printf '\\n${MARKER} rc=%d out=%d err=%d timedout=%d dir=%s\\n' "$rc" "$o" "$e" "$timed" "$d" >&2`,
    `if [ "$o" -le ${SSM_STDOUT_TAIL} ] && [ "$e" -le ${SSM_STDERR_TAIL} ]; then rm -rf "$d"; fi`,
    `exit "$rc"`,
    "",
  ].join("\n");
}

/** Strips the wrapper's marker line (and what the agent appends after it) and reads the byte counts. */
export function parseOutput(stdout: string, stderr: string): Omit<ExecResult, "exitCode"> {
  let m: RegExpExecArray | undefined;
  for (const found of stderr.matchAll(MARKER_LINE)) m = found;
  if (!m) return { stdout, stderr };
  const outBytes = Number(m[2]);
  const errBytes = Number(m[3]);
  let err = stderr.slice(0, m.index);
  const cut = outBytes > Buffer.byteLength(stdout) || errBytes > Buffer.byteLength(err);
  if (cut) {
    err = `[labfleet: the output was cut to its end (${outBytes} bytes of stdout, ${errBytes} of stderr); the full output is on the host in ${m[5]}/out and ${m[5]}/err]\n${err}`;
  }
  return {
    stdout,
    stderr: err,
    ...(m[4] === "1" ? { timedOut: true } : {}),
    ...(cut ? { truncated: true } : {}),
  };
}
