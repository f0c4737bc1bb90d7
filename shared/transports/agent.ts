import { CHECK_IN_SECONDS, MISSED_CHECK_INS, missedCheckIns } from "../agent/check-in.ts";
import {
  AGENT_SCRIPT_MAX,
  AGENT_STDIN_MAX,
  AGENT_STDOUT_MAX,
  cancelQueued,
  commandOutcome,
  deleteCommand,
  napForResult,
  queueCommand,
} from "../agent/commands.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { type ExecOptions, type ExecResult, envExports, readBoundedInput, type Transport } from "./types.ts";

export interface AgentTransportOptions {
  workshop: string;
  hostId: string;
  /** The timeout of a command without `timeoutMs`. Default one hour. */
  defaultTimeoutMs?: number;
  /** How long a command may wait for the agent to take it. Default MISSED_CHECK_INS check-ins. */
  takeWithinMs?: number;
  /** The longest wait between looks at the table for the result (woken at once in this process). Default 500. */
  pollIntervalMs?: number;
}

/**
 * An enrolled host, reached through its agent: each exec queues one command (shared/agent/commands.ts) that the
 * agent takes with its long poll, runs with bash in its user's home and answers. The semantics are the SSM
 * transport's:
 *
 * - Timeouts: the agent runs the command under `timeout` (exit 124, `timedOut`); labfleet gives up 15 to 60 s after
 *   the timeout (as long as the timeout itself, and never past the caller's deadline) with 124 and `timedOut`
 *   when the agent took the command, and `host.unreachable` when no agent took it in time (it is then cancelled,
 *   so it never runs late).
 * - sudo: `sudo -n` for an agent that does not run as root; a sudo that would ask for a password is
 *   `host.sudo_needs_password`, as over SSH.
 * - Output: at most AGENT_STDOUT_MAX / AGENT_STDERR_MAX bytes come back, cut to their start and `truncated`.
 * - stdin: at most AGENT_STDIN_MAX bytes (a larger input is refused before anything is queued); the script (env
 *   exports and the command) at most AGENT_SCRIPT_MAX.
 * - A host that is disabled, not approved, or that missed its check-ins is refused at once, nothing queued.
 * - In a Lambda (the cloud), as SSM's send-then-poll: the command is queued in the table, the agent takes it through
 *   whichever instance of the API function holds its long poll, and this transport looks at the item every
 *   `pollIntervalMs` (the in-process wake-up reaches only this process). The caller's deadline (`deadline`, set by
 *   shared/fleet/hosts.ts from the function's remaining time) bounds every wait: a command not taken by then is
 *   cancelled and `host.unreachable`, one still running is a timeout, so no function waits past its own timeout.
 *   A lab's setup is started detached and followed by the workflow's polls, never waited for.
 */
export class AgentTransport implements Transport {
  readonly outputBytes = AGENT_STDOUT_MAX;
  private readonly defaultTimeoutMs: number;
  private readonly takeWithinMs: number;
  private readonly pollIntervalMs: number;

  constructor(private readonly options: AgentTransportOptions) {
    this.defaultTimeoutMs = options.defaultTimeoutMs ?? 3_600_000;
    this.takeWithinMs = options.takeWithinMs ?? MISSED_CHECK_INS * CHECK_IN_SECONDS * 1000;
    this.pollIntervalMs = options.pollIntervalMs ?? 500;
  }

  get hostId(): string {
    return this.options.hostId;
  }

  async exec(command: string, options: ExecOptions = {}): Promise<ExecResult> {
    const { workshop, hostId } = this.options;
    const step = options.step ?? "command";
    await this.refuseUnlessReachable(step);
    const script = envExports(options.env, hostId) + command;
    if (Buffer.byteLength(script) > AGENT_SCRIPT_MAX) {
      throw new VisibleError(
        "input",
        "host.command_too_large",
        `${hostId}: ${step} is larger than an agent's command may be (${AGENT_SCRIPT_MAX / 1024} KiB at most): pass data on stdin`,
      );
    }
    const stdin = options.stdin === undefined ? undefined : await this.readStdin(options.stdin, step);
    const timeoutMs = Math.max(1, options.timeoutMs ?? this.defaultTimeoutMs);
    const started = Date.now();
    const commandId = await queueCommand({
      workshop,
      hostId,
      script,
      ...(stdin ? { stdin } : {}),
      timeoutMs,
      ...(options.sudo ? { sudo: true } : {}),
      step,
    });
    const grace = Math.min(60_000, Math.max(15_000, timeoutMs));
    const giveUpAt = Math.min(started + timeoutMs + grace, options.deadline ?? Number.POSITIVE_INFINITY);
    const takeBy = Math.min(giveUpAt, started + this.takeWithinMs);
    for (;;) {
      const o = await commandOutcome(workshop, hostId, commandId);
      if (!o) throw this.unreachable(step, "its command was dropped (the host left the workshop)");
      if (o.state === "done") {
        await deleteCommand(workshop, hostId, commandId);
        const result: ExecResult = {
          exitCode: o.timedOut ? 124 : (o.exitCode ?? 1),
          stdout: o.stdout ?? "",
          stderr: o.stderr ?? "",
          ...(o.timedOut ? { timedOut: true } : {}),
          ...(o.truncated ? { truncated: true } : {}),
        };
        const sudo = options.sudo ? sudoProblem(hostId, result, step) : undefined;
        if (sudo) throw sudo;
        return result;
      }
      const now = Date.now();
      if (o.state === "queued" && now >= takeBy) {
        if (await cancelQueued(workshop, hostId, commandId)) {
          await deleteCommand(workshop, hostId, commandId);
          throw this.unreachable(
            step,
            `its agent did not take the command within ${Math.round((now - started) / 1000)} s`,
          );
        }
        continue; // taken meanwhile
      }
      if (now >= giveUpAt) {
        // Taken and still running (the agent's own timeout ends it): the caller hears a timeout now.
        await deleteCommand(workshop, hostId, commandId);
        return { exitCode: 124, stdout: "", stderr: "", timedOut: true };
      }
      await napForResult(
        commandId,
        Math.min(this.pollIntervalMs, (o.state === "queued" ? takeBy : giveUpAt) - now),
      );
    }
  }

  /** Nothing to close: every exec is a queued command. */
  async close(): Promise<void> {}

  private async refuseUnlessReachable(step: string): Promise<void> {
    const { workshop, hostId } = this.options;
    const { store, clock } = useDeps();
    const h = (await store.host.get({ workshop, hostId }).go()).data;
    if (!h || h.state === "torn_down")
      throw this.unreachable(step, "it is not an enrolled host of the workshop (removed, or never joined)");
    if (h.disabled)
      throw new VisibleError(
        "host",
        "host.disabled",
        `${hostId}: disabled, so labfleet sends it nothing (labfleet hosts enable ${workshop} ${hostId})`,
      );
    if (h.enrollment !== "approved")
      throw new VisibleError(
        "host",
        "host.pending",
        `${hostId}: waiting for approval, so it gets no work (labfleet hosts approve ${workshop} ${hostId})`,
      );
    if (h.reachable === "unreachable" || missedCheckIns(h.lastSeenAt, clock.now()))
      throw this.unreachable(step, `its agent has not called in since ${h.lastSeenAt ?? "it joined"}`);
  }

  private async readStdin(input: NonNullable<ExecOptions["stdin"]>, step: string): Promise<Buffer> {
    const tooLarge = () =>
      new VisibleError(
        "input",
        "host.stdin_too_large",
        `${this.options.hostId}: the input of ${step} is larger than an agent's command may carry (${AGENT_STDIN_MAX / 1024} KiB at most): let the host fetch it instead (e.g. lab.source as a git URL)`,
      );
    return readBoundedInput(input, AGENT_STDIN_MAX, tooLarge);
  }

  private unreachable(step: string, reason: string): VisibleError {
    return new VisibleError(
      "host",
      "host.unreachable",
      `${this.options.hostId} (enrolled): unreachable during ${step}: ${reason}`,
    );
  }
}

/** A sudo that would prompt, or is missing, as the SSH transport reports it. */
function sudoProblem(hostId: string, result: ExecResult, step: string): VisibleError | undefined {
  if (result.exitCode !== 0 && /sudo: (a password is required|a terminal is required)/.test(result.stderr))
    return new VisibleError(
      "host",
      "host.sudo_needs_password",
      `${hostId}: ${step} needs root, and sudo would ask for a password for the agent's user: allow it without one (NOPASSWD) or run the agent as root`,
    );
  if (
    result.exitCode === 127 &&
    /sudo: (command )?not found|failed to run command .sudo.: No such file/.test(result.stderr)
  )
    return new VisibleError(
      "host",
      "host.sudo_missing",
      `${hostId}: ${step} needs root, and sudo is not installed: install sudo (with NOPASSWD for the agent's user) or run the agent as root`,
    );
  return undefined;
}
