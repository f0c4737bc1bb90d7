import type { ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type {
  CancelCommandCommandInput,
  CommandInvocationStatus,
  DeleteParameterCommandInput,
  DescribeInstanceInformationCommandInput,
  DescribeParametersCommandInput,
  GetCommandInvocationCommandInput,
  GetParameterCommandInput,
  GetParametersCommandInput,
  InstanceInformation,
  Parameter,
  ParameterMetadata,
  ParameterTier,
  ParameterType,
  PutParameterCommandInput,
  SendCommandCommandInput,
  Tag,
} from "@aws-sdk/client-ssm";
import {
  type AuthRequest,
  AwsError,
  arn,
  type Call,
  FAKE_ACCOUNT_ID,
  FAKE_REGION,
  type Operations,
} from "./core.ts";
import type { FakeEc2, FakeInstance } from "./ec2.ts";

/**
 * Systems Manager in the AWS double: Run Command (AWS-RunShellScript, on the EC2 double's instances) and
 * Parameter Store.
 *
 * Run Command, as "Understanding command statuses" and the GetCommandInvocation reference describe it. Each
 * instance of a SendCommand (at most 50 InstanceIds) is an invocation with its own status:
 * - `Pending` until the instance's SSM agent picks it up: at once when the agent is online; when it is not
 *   (`setAgentOnline(id, false)`: PingStatus ConnectionLost), when it is back, if that is before TimeoutSeconds
 *   (the delivery timeout: "if this time is reached and the command hasn't already started running, it won't
 *   run"). A Pending invocation whose instance stops is `Delayed` ("the node was stopped"); whose instance
 *   terminates, Status `Failed` with StatusDetails `Undeliverable` ("the node might not exist").
 * - `InProgress` while the agent runs the script: `sh -c _script.sh`, as root, in the agent's orchestration
 *   folder, its output in stdout/stderr files there. The agent kills it at executionTimeout (a document parameter,
 *   default 3600 s): `TimedOut`, StatusDetails `ExecutionTimedOut`; CancelCommand kills it: `Cancelling`, then
 *   `Cancelled`. The agent reports 137 (128 + SIGKILL) as the response code of a script it killed, and maps a
 *   script's own exit code 137 to TimedOut, as its source does.
 * - `Success` (exit 0) or `Failed` (the exit code; the agent appends `failed to run commands: exit status N` to
 *   stderr).
 * - An invocation the agent never answers ends when the command expires (TimeoutSeconds + executionTimeout after
 *   it was sent, "total timeout"): `TimedOut`, StatusDetails `DeliveryTimedOut`, for every invocation still
 *   Pending, Delayed or InProgress. So a command running when its agent goes offline stays `InProgress` (the
 *   script goes on on the instance; the agent keeps its result) and reports when the agent is back, or ends
 *   DeliveryTimedOut at expiry if it never is ("if the agent isn't running or available on the instance, the
 *   command status remains at In Progress until the agent is available again, or until the execution timeout
 *   limit is reached"; "If Run Command doesn't receive a document terminal response from SSM Agent, the command
 *   invocation is marked as deliveryTimeout"). A command whose instance stops or terminates dies with it and is
 *   never answered.
 * - ResponseCode is -1 for an invocation that never ran. StandardOutputContent is the first 24,000 characters of
 *   stdout and StandardErrorContent the first 8,000 of stderr, characters (code points) not bytes, cut without
 *   splitting one; both are empty until the invocation has finished, and stdout is empty unless it ended Success
 *   or Failed (the API reference's words).
 * The service's own timers (delivery timeout, expiry) run on the injectable clock `now`; the agent's
 * executionTimeout is real time, on the instance.
 *
 * Parameter Store: String, StringList and SecureString; Put (Overwrite, ParameterAlreadyExists, tiers: a standard
 * parameter holds 4 KB, an advanced one 8 KB, Intelligent-Tiering picks the smallest that fits), Get (a
 * SecureString's value is ciphertext unless WithDecryption), GetParameters (at most 10 names, InvalidParameters,
 * results in alphabetical order), Delete (ParameterNotFound). A value's size is counted in UTF-8 bytes. A
 * parameter's ARN is `parameter/` and its name without the leading slash (iam-data's ARN pattern for parameters).
 * GetParameter and GetParameters share a throughput quota (default 40 transactions per second, "Parameter Store
 * throughput"), measured over a sliding second of `now`; above it they answer ThrottlingException "Rate
 * exceeded". PutParameter is throttled only when `putParameterTps` is given. Decryption with the default
 * `aws/ssm` key needs no KMS grant; customer keys are not modelled (no kms:Decrypt is asked).
 */

/** GetCommandInvocation returns at most this many characters of stdout and stderr (the first ones). */
export const SSM_STDOUT_LIMIT = 24_000;
export const SSM_STDERR_LIMIT = 8_000;
/** SendCommand takes at most 50 instance ids. */
export const SSM_MAX_INSTANCE_IDS = 50;
/** AWS-RunShellScript's executionTimeout: 1 to 172,800 seconds, 3,600 by default. */
export const DEFAULT_EXECUTION_TIMEOUT_S = 3600;
const MAX_EXECUTION_TIMEOUT_S = 172_800;
/** SendCommand's TimeoutSeconds (the delivery timeout): 30 to 2,592,000 seconds; 3,600 by default. */
const DEFAULT_DELIVERY_TIMEOUT_S = 3600;
/** The agent's code for a script it killed (timeout or cancel): 128 + SIGKILL. */
const KILLED_CODE = 137;
/** Parameter Store's default throughput quota, shared by GetParameter and GetParameters. */
export const DEFAULT_PARAMETER_TPS = 40;
/** A standard parameter's value holds 4 KB, an advanced one's 8 KB (Managing parameter tiers). */
const STANDARD_VALUE_BYTES = 4096;
const ADVANCED_VALUE_BYTES = 8192;
const STANDARD_PARAMETER_LIMIT = 10_000;
const ADVANCED_PARAMETER_LIMIT = 100_000;
const MAX_HIERARCHY_DEPTH = 15;
const MAX_VERSIONS = 100;
const DOCUMENT = "AWS-RunShellScript";
const PLUGIN = "aws:runShellScript";

const TERMINAL = new Set<string>(["Success", "Failed", "TimedOut", "Cancelled"]);

export interface InvocationResult {
  status: CommandInvocationStatus;
  details: string;
  code: number;
  stdout: string;
  stderr: string;
  endedAt: Date;
}

export interface FakeInvocation {
  commandId: string;
  instanceId: string;
  status: CommandInvocationStatus;
  statusDetails: string;
  responseCode: number;
  /** The whole output the script wrote (GetCommandInvocation shows the first characters, once finished). */
  stdout: string;
  stderr: string;
  executionTimeoutS: number;
  /** On the service's clock: when it was sent, when it may no longer start, when it expires. */
  requestedAt: number;
  deliverBy: number;
  expiresAt: number;
  startedAt?: Date;
  endedAt?: Date;
  /** The agent's orchestration folder of this invocation. */
  work?: string;
  child?: ChildProcess;
  /** What the agent has to report once it is online. */
  result?: InvocationResult;
  cancelRequested: boolean;
  /** Resolves once the invocation is terminal. */
  done: Promise<void>;
}

export interface FakeCommand {
  commandId: string;
  input: SendCommandCommandInput;
  /** The script exactly as SendCommand carried it (the commands joined by newlines). */
  script: string;
  instanceIds: string[];
  invocations: Map<string, FakeInvocation>;
  requestedAt: Date;
}

export interface FakeParameter {
  Name: string;
  Value: string;
  Type: ParameterType;
  Version: number;
  Tier: ParameterTier;
  DataType: string;
  LastModifiedDate: Date;
  KeyId?: string;
  Description?: string;
  Tags: Tag[];
  /** Earlier versions (Name:version selectors). */
  history: { Version: number; Value: string; Type: ParameterType; LastModifiedDate: Date }[];
}

export interface FakeSsmOptions {
  ec2: FakeEc2;
  region?: string;
  /** The service's clock (ms): delivery timeouts, command expiry, the throughput window. Default Date.now. */
  now?: () => number;
  /** GetParameter + GetParameters transactions per second (default 40). */
  parameterTps?: number;
  /** PutParameter transactions per second; unlimited unless given. */
  putParameterTps?: number;
  /** The account's default parameter tier (Standard unless set). */
  defaultTier?: ParameterTier;
}

function validation(message: string): AwsError {
  return new AwsError("ValidationException", message, 400);
}

function lengthError(value: unknown, member: string, max: number): AwsError {
  return validation(
    `1 validation error detected: Value '${JSON.stringify(value)}' at '${member}' failed to satisfy constraint: Member must have length less than or equal to ${max}`,
  );
}

/** The first `n` characters (code points) of a string, never half of one. */
export function firstChars(s: string, n: number): string {
  let out = "";
  let count = 0;
  for (const ch of s) {
    if (count === n) break;
    out += ch;
    count++;
  }
  return out;
}

function duration(ms: number): string {
  return `PT${(ms / 1000).toFixed(3).replace(/\.?0+$/, "")}S`;
}

export class FakeSsm {
  readonly region: string;
  readonly commands = new Map<string, FakeCommand>();
  readonly parameters = new Map<string, FakeParameter>();
  readonly operations: Operations;
  /** GetParameter/GetParameters throughput quota (TPS); a test may change it. */
  parameterTps: number;
  putParameterTps: number | undefined;
  private readonly ec2: FakeEc2;
  private readonly now: () => number;
  private readonly defaultTier: ParameterTier;
  private readonly windows = new Map<string, number[]>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly resolvers = new Map<FakeInvocation, () => void>();

  constructor(opts: FakeSsmOptions) {
    this.ec2 = opts.ec2;
    this.region = opts.region ?? opts.ec2.region ?? FAKE_REGION;
    this.now = opts.now ?? Date.now;
    this.parameterTps = opts.parameterTps ?? DEFAULT_PARAMETER_TPS;
    this.putParameterTps = opts.putParameterTps;
    this.defaultTier = opts.defaultTier ?? "Standard";
    this.ec2.onInstanceEvent((inst, event) => this.onInstance(inst, event));
    this.operations = {
      SendCommand: (input: SendCommandCommandInput, call: Call) => this.sendCommand(input, call),
      GetCommandInvocation: (input: GetCommandInvocationCommandInput, call: Call) =>
        this.getCommandInvocation(input, call),
      CancelCommand: (input: CancelCommandCommandInput, call: Call) => this.cancelCommand(input, call),
      DescribeInstanceInformation: (input: DescribeInstanceInformationCommandInput, call: Call) =>
        this.describeInstanceInformation(input, call),
      PutParameter: (input: PutParameterCommandInput, call: Call) => this.putParameterOp(input, call),
      GetParameter: (input: GetParameterCommandInput, call: Call) => this.getParameter(input, call),
      GetParameters: (input: GetParametersCommandInput, call: Call) => this.getParameters(input, call),
      DeleteParameter: (input: DeleteParameterCommandInput, call: Call) => this.deleteParameter(input, call),
      DescribeParameters: (input: DescribeParametersCommandInput, call: Call) =>
        this.describeParameters(input, call),
    };
  }

  // ------------------------------------------------------------------------------------- test helpers

  /** A parameter as the operator stores it (`aws ssm put-parameter --overwrite`), without a call. */
  putParameter(name: string, value: string, type: ParameterType = "SecureString"): FakeParameter {
    return this.store({ Name: name, Value: value, Type: type, Overwrite: true });
  }

  /** Takes an instance's SSM agent offline (PingStatus ConnectionLost) or brings it back. */
  setAgentOnline(instanceId: string, online: boolean): void {
    this.ec2.setAgent(this.ec2.get(instanceId), online);
  }

  /** One invocation, its status brought up to date with the clock. */
  invocation(commandId: string, instanceId: string): FakeInvocation {
    const inv = this.commands.get(commandId)?.invocations.get(instanceId);
    if (!inv) throw new Error(`no invocation of ${commandId} on ${instanceId}`);
    this.settle(inv);
    return inv;
  }

  /** Kills every script still running and waits for them. */
  async close(): Promise<void> {
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    const running: Promise<void>[] = [];
    for (const c of this.commands.values()) {
      for (const inv of c.invocations.values()) {
        if (inv.child) {
          this.ec2.killGroup(inv.child);
          const child = inv.child;
          running.push(
            new Promise<void>((resolve) => {
              if (child.exitCode !== null || child.signalCode !== null) resolve();
              else child.once("close", () => resolve());
            }),
          );
        }
      }
    }
    await Promise.all(running);
  }

  // ------------------------------------------------------------------------------------- Run Command

  private async sendCommand(input: SendCommandCommandInput, call: Call) {
    const ids = input.InstanceIds ?? [];
    if (input.Targets?.length) throw validation("the AWS double supports InstanceIds only, not Targets");
    if (ids.length === 0) throw validation("InstanceIds or Targets must be specified");
    if (ids.length > SSM_MAX_INSTANCE_IDS) throw lengthError(ids, "instanceIds", SSM_MAX_INSTANCE_IDS);
    if ((input.Comment?.length ?? 0) > 100) throw lengthError(input.Comment, "comment", 100);
    const timeoutS = input.TimeoutSeconds ?? DEFAULT_DELIVERY_TIMEOUT_S;
    if (timeoutS < 30 || timeoutS > 2_592_000) {
      throw validation(
        `1 validation error detected: Value '${timeoutS}' at 'timeoutSeconds' failed to satisfy constraint: Member must have value ${timeoutS < 30 ? "greater than or equal to 30" : "less than or equal to 2592000"}`,
      );
    }
    const docName = input.DocumentName ?? "";
    const docArn = arn.ssmDocument(DOCUMENT, this.region);
    if (docName !== DOCUMENT && docName !== docArn) {
      throw new AwsError("InvalidDocument", `the AWS double runs ${DOCUMENT} only, not ${docName}`);
    }
    const version = input.DocumentVersion;
    if (version !== undefined && !["$DEFAULT", "$LATEST", "1"].includes(version)) {
      throw new AwsError("InvalidDocumentVersion", `Document ${DOCUMENT} has no version ${version}`);
    }
    const params = input.Parameters ?? {};
    for (const k of Object.keys(params)) {
      if (!["commands", "executionTimeout", "workingDirectory"].includes(k)) {
        throw new AwsError("InvalidParameters", `Parameter "${k}" is not defined in document ${DOCUMENT}.`);
      }
    }
    const commands = params.commands ?? [];
    if (commands.length === 0) throw new AwsError("InvalidParameters", 'Parameter "commands" is required.');
    const timeoutParam = params.executionTimeout?.[0] ?? String(DEFAULT_EXECUTION_TIMEOUT_S);
    const executionTimeoutS = Number(timeoutParam);
    if (!/^\d+$/.test(timeoutParam) || executionTimeoutS < 1 || executionTimeoutS > MAX_EXECUTION_TIMEOUT_S) {
      throw new AwsError(
        "InvalidParameters",
        `Parameter "executionTimeout" "${timeoutParam}" failed to satisfy constraint: it must be between 1 and ${MAX_EXECUTION_TIMEOUT_S}.`,
      );
    }
    if (new Set(ids).size !== ids.length) throw new AwsError("DuplicateInstanceId", "");
    // The caller needs ssm:SendCommand on every instance (with its tags, as ssm:resourceTag and aws:ResourceTag)
    // and on the document.
    const auth: AuthRequest[] = ids.map((id) => {
      const tags = this.ec2.instances.get(id)?.instance.Tags ?? [];
      const context: Record<string, string> = {};
      for (const t of tags) {
        context[`ssm:resourceTag/${t.Key}`] = t.Value ?? "";
        context[`aws:ResourceTag/${t.Key}`] = t.Value ?? "";
      }
      return { action: "ssm:SendCommand", resource: arn.ec2("instance", id, this.region), context };
    });
    auth.push({ action: "ssm:SendCommand", resource: docArn });
    await call.authorize(auth);
    const invalid = ids.filter((id) => {
      const inst = this.ec2.instances.get(id);
      return (
        !inst || this.ec2.stateOf(inst) !== "running" || (inst.agent !== "online" && inst.agent !== "offline")
      );
    });
    if (invalid.length) {
      throw new AwsError(
        "InvalidInstanceId",
        `Instances [[${invalid.join(", ")}]] not in a valid state for account ${FAKE_ACCOUNT_ID}`,
      );
    }
    const commandId = randomUUID();
    const now = this.now();
    const command: FakeCommand = {
      commandId,
      input: structuredClone(input),
      script: commands.join("\n"),
      instanceIds: [...ids],
      invocations: new Map(),
      requestedAt: new Date(now),
    };
    this.commands.set(commandId, command);
    for (const id of ids) {
      let resolve = () => {};
      const done = new Promise<void>((r) => {
        resolve = r;
      });
      const inv: FakeInvocation = {
        commandId,
        instanceId: id,
        status: "Pending",
        statusDetails: "Pending",
        responseCode: -1,
        stdout: "",
        stderr: "",
        executionTimeoutS,
        requestedAt: now,
        deliverBy: now + timeoutS * 1000,
        expiresAt: now + (timeoutS + executionTimeoutS) * 1000,
        cancelRequested: false,
        done,
      };
      this.resolvers.set(inv, resolve);
      command.invocations.set(id, inv);
      const inst = this.ec2.get(id);
      if (inst.agent === "online") this.deliver(command, inv, inst);
    }
    return {
      Command: {
        CommandId: commandId,
        DocumentName: input.DocumentName,
        DocumentVersion: version ?? "$DEFAULT",
        Comment: input.Comment ?? "",
        ExpiresAfter: new Date(now + (timeoutS + executionTimeoutS) * 1000),
        Parameters: structuredClone(params),
        InstanceIds: [...ids],
        Targets: [],
        RequestedDateTime: new Date(now),
        Status: "Pending",
        StatusDetails: "Pending",
        OutputS3Region: this.region,
        OutputS3BucketName: input.OutputS3BucketName ?? "",
        OutputS3KeyPrefix: input.OutputS3KeyPrefix ?? "",
        MaxConcurrency: input.MaxConcurrency ?? "50",
        MaxErrors: input.MaxErrors ?? "0",
        TargetCount: ids.length,
        CompletedCount: 0,
        ErrorCount: 0,
        DeliveryTimedOutCount: 0,
        TimeoutSeconds: timeoutS,
        CloudWatchOutputConfig: { CloudWatchLogGroupName: "", CloudWatchOutputEnabled: false },
      },
    };
  }

  /** The agent picks the invocation up and runs its script. */
  private deliver(command: FakeCommand, inv: FakeInvocation, inst: FakeInstance): void {
    if (inv.status !== "Pending" && inv.status !== "Delayed") return;
    if (this.now() >= inv.deliverBy) return;
    inv.status = "InProgress";
    inv.statusDetails = "InProgress";
    inv.startedAt = new Date(this.now());
    // The agent's orchestration folder (outside the instance's home), as /var/lib/amazon/ssm/.../<command id>.
    const work = join(
      inst.root,
      "var/lib/amazon/ssm",
      inst.id,
      "document/orchestration",
      command.commandId,
      "awsrunShellScript/0.awsrunShellScript",
    );
    mkdirSync(work, { recursive: true });
    inv.work = work;
    // The one rewrite: the home a script exports (`export HOME='/root'`) is that path inside the instance's folder.
    const localized = command.script.replace(/^export HOME='(\/[^']*)'$/m, (_all, home: string) => {
      mkdirSync(join(inst.root, home), { recursive: true });
      return `export HOME='${join(inst.root, home)}'`;
    });
    const scriptPath = join(work, "_script.sh");
    writeFileSync(scriptPath, localized, { mode: 0o700 });
    const wd = command.input.Parameters?.workingDirectory?.[0];
    const cwd = wd ? join(inst.root, wd) : work;
    let stdout = Buffer.alloc(0);
    let stderr = Buffer.alloc(0);
    let timedOut = false;
    let ended = false;
    if (!existsSync(cwd)) {
      this.finishRun(inv, inst, {
        status: "Failed",
        details: "Failed",
        code: 1,
        stdout: "",
        stderr: `failed to run commands: chdir ${wd}: no such file or directory`,
        endedAt: new Date(this.now()),
      });
      return;
    }
    // The agent runs the script with sh (dash on Ubuntu), in its own process group, and waits for its output
    // streams to close (a background job that keeps them open keeps the command running).
    const child = this.ec2.spawnOn(inst, "sh", ["-c", scriptPath], { cwd });
    inv.child = child;
    child.stdout?.on("data", (c: Buffer) => {
      stdout = Buffer.concat([stdout, c]);
    });
    child.stderr?.on("data", (c: Buffer) => {
      stderr = Buffer.concat([stderr, c]);
    });
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      timedOut = true;
      this.ec2.killGroup(child);
    }, inv.executionTimeoutS * 1000);
    timer.unref();
    this.timers.add(timer);
    const finish = (code: number | null, signal: NodeJS.Signals | null) => {
      if (ended) return;
      ended = true;
      clearTimeout(timer);
      this.timers.delete(timer);
      delete inv.child;
      writeFileSync(join(work, "stdout"), stdout);
      writeFileSync(join(work, "stderr"), stderr);
      const out = stdout.toString("utf8");
      const err = stderr.toString("utf8");
      const endedAt = new Date(this.now());
      let result: InvocationResult;
      if (inv.cancelRequested && (code === null || code === KILLED_CODE)) {
        result = {
          status: "Cancelled",
          details: "Cancelled",
          code: KILLED_CODE,
          stdout: out,
          stderr: err,
          endedAt,
        };
      } else if (timedOut || code === KILLED_CODE) {
        result = {
          status: "TimedOut",
          details: "ExecutionTimedOut",
          code: KILLED_CODE,
          stdout: out,
          stderr: err,
          endedAt,
        };
      } else if (code === 0) {
        result = { status: "Success", details: "Success", code: 0, stdout: out, stderr: err, endedAt };
      } else {
        const why =
          code === null
            ? `signal: ${signal === "SIGKILL" ? "killed" : (signal ?? "unknown")}`
            : `exit status ${code}`;
        result = {
          status: "Failed",
          details: "Failed",
          code: code ?? -1,
          stdout: out,
          stderr: `${err}failed to run commands: ${why}`,
          endedAt,
        };
      }
      this.finishRun(inv, inst, result);
    };
    child.on("error", (e) => {
      stderr = Buffer.concat([stderr, Buffer.from(String(e))]);
      finish(null, null);
    });
    // A script the agent killed ends at its exit; one that ended by itself once its output is closed.
    child.on("exit", (code, signal) => {
      if (timedOut || inv.cancelRequested) finish(code, signal);
    });
    child.on("close", (code, signal) => finish(code, signal));
  }

  /** The agent has a result: it reports it now if online, when it is back otherwise; a dead agent never does. */
  private finishRun(inv: FakeInvocation, inst: FakeInstance, result: InvocationResult): void {
    if (this.ec2.stateOf(inst) !== "running") return;
    inv.result = result;
    if (inst.agent === "online") this.report(inv);
  }

  private report(inv: FakeInvocation): void {
    this.settle(inv);
    const r = inv.result;
    if (!r || TERMINAL.has(inv.status)) return;
    this.end(inv, r.status, r.details, r.code, r.endedAt, r.stdout, r.stderr);
  }

  private end(
    inv: FakeInvocation,
    status: CommandInvocationStatus,
    details: string,
    code: number,
    endedAt: Date,
    stdout = "",
    stderr = "",
  ): void {
    inv.status = status;
    inv.statusDetails = details;
    inv.responseCode = code;
    inv.endedAt = endedAt;
    inv.stdout = stdout;
    inv.stderr = stderr;
    this.resolvers.get(inv)?.();
    this.resolvers.delete(inv);
  }

  /** The service's clock: an invocation not answered by the time its command expires is DeliveryTimedOut. */
  private settle(inv: FakeInvocation): void {
    if (TERMINAL.has(inv.status)) return;
    if (this.now() >= inv.expiresAt) {
      this.end(inv, "TimedOut", "DeliveryTimedOut", -1, new Date(inv.expiresAt));
    }
  }

  private onInstance(inst: FakeInstance, event: string): void {
    for (const c of this.commands.values()) {
      const inv = c.invocations.get(inst.id);
      if (!inv) continue;
      this.settle(inv);
      if (TERMINAL.has(inv.status)) continue;
      if (event === "agent-online") {
        // What the agent has for the service: a cancel to carry out, a result to report, a command to run.
        if (inv.cancelRequested && inv.child) this.ec2.killGroup(inv.child);
        else if (inv.result) this.report(inv);
        else this.deliver(c, inv, inst);
      } else if (event === "stopping" || event === "stopped") {
        if (inv.status === "Pending") {
          inv.status = "Delayed";
          inv.statusDetails = "Delayed";
        }
      } else if (event === "shutting-down" || event === "terminated") {
        if (inv.status === "Pending" || inv.status === "Delayed") {
          this.end(inv, "Failed", "Undeliverable", -1, new Date(this.now()));
        }
      }
    }
  }

  private async getCommandInvocation(input: GetCommandInvocationCommandInput, call: Call) {
    await call.authorize([{ action: "ssm:GetCommandInvocation", resource: "*" }]);
    if (input.CommandId?.length !== 36) throw new AwsError("InvalidCommandId", "");
    if (input.PluginName !== undefined && input.PluginName !== PLUGIN) {
      throw new AwsError("InvalidPluginName", "");
    }
    const c = this.commands.get(input.CommandId);
    const inv = input.InstanceId ? c?.invocations.get(input.InstanceId) : undefined;
    if (!c || !inv) throw new AwsError("InvocationDoesNotExist", "");
    this.settle(inv);
    const finished = TERMINAL.has(inv.status);
    const ran = inv.startedAt !== undefined;
    const showStdout = inv.status === "Success" || inv.status === "Failed";
    return {
      CommandId: c.commandId,
      InstanceId: inv.instanceId,
      Comment: c.input.Comment ?? "",
      DocumentName: c.input.DocumentName,
      DocumentVersion: "1",
      PluginName: PLUGIN,
      ResponseCode: inv.responseCode,
      ExecutionStartDateTime: inv.startedAt?.toISOString() ?? "",
      ExecutionElapsedTime:
        inv.startedAt && inv.endedAt && ran ? duration(inv.endedAt.getTime() - inv.startedAt.getTime()) : "",
      ExecutionEndDateTime: ran && inv.endedAt ? inv.endedAt.toISOString() : "",
      Status: inv.status,
      StatusDetails: inv.statusDetails,
      StandardOutputContent: finished && showStdout ? firstChars(inv.stdout, SSM_STDOUT_LIMIT) : "",
      StandardOutputUrl: "",
      StandardErrorContent: finished ? firstChars(inv.stderr, SSM_STDERR_LIMIT) : "",
      StandardErrorUrl: "",
      CloudWatchOutputConfig: { CloudWatchLogGroupName: "", CloudWatchOutputEnabled: false },
    };
  }

  /**
   * Cancels the command on its instances (or on those named): an invocation not delivered yet is Cancelled at
   * once; a running one is Cancelling until the agent has killed its script (when it is online), then Cancelled.
   */
  private async cancelCommand(input: CancelCommandCommandInput, call: Call) {
    await call.authorize([{ action: "ssm:CancelCommand", resource: "*" }]);
    const c = input.CommandId ? this.commands.get(input.CommandId) : undefined;
    if (!c) throw new AwsError("InvalidCommandId", "");
    const ids = input.InstanceIds?.length ? input.InstanceIds : c.instanceIds;
    if (new Set(ids).size !== ids.length) throw new AwsError("DuplicateInstanceId", "");
    const unknown = ids.find((id) => !c.invocations.has(id));
    if (unknown)
      throw new AwsError("InvalidInstanceId", `Instance ${unknown} is not a target of ${c.commandId}`);
    for (const id of ids) {
      const inv = c.invocations.get(id) as FakeInvocation;
      this.settle(inv);
      if (TERMINAL.has(inv.status)) continue;
      inv.cancelRequested = true;
      if (inv.status === "Pending" || inv.status === "Delayed") {
        this.end(inv, "Cancelled", "Cancelled", -1, new Date(this.now()));
        continue;
      }
      inv.status = "Cancelling";
      inv.statusDetails = "Cancelling";
      // The agent carries the cancel out when it gets it: now, or when it is back online.
      const inst = this.ec2.get(id);
      if (inst.agent === "online" && inv.child) this.ec2.killGroup(inv.child);
    }
    return {};
  }

  /**
   * The instances whose agent has registered (an instance profile, the instance not terminated): PingStatus
   * Online, or ConnectionLost when the agent is offline or the instance stopped. Pages of 10 unless MaxResults
   * (5 to 50) says otherwise.
   */
  private async describeInstanceInformation(input: DescribeInstanceInformationCommandInput, call: Call) {
    await call.authorize([{ action: "ssm:DescribeInstanceInformation", resource: "*" }]);
    if (input.Filters?.length && input.InstanceInformationFilterList?.length) {
      throw validation("Filters and InstanceInformationFilterList cannot be used together");
    }
    const max = input.MaxResults ?? 10;
    if (max < 5 || max > 50) {
      throw validation(
        `1 validation error detected: Value '${max}' at 'maxResults' failed to satisfy constraint: Member must have value ${max < 5 ? "greater than or equal to 5" : "less than or equal to 50"}`,
      );
    }
    const managed = [...this.ec2.instances.values()].filter(
      (i) => (i.agent === "online" || i.agent === "offline") && this.ec2.stateOf(i) !== "terminated",
    );
    const info = (i: FakeInstance): InstanceInformation => ({
      InstanceId: i.id,
      PingStatus: i.agent === "online" && this.ec2.stateOf(i) === "running" ? "Online" : "ConnectionLost",
      LastPingDateTime: new Date(this.now()),
      AgentVersion: "3.3.1957.0",
      IsLatestVersion: true,
      PlatformType: "Linux",
      PlatformName: "Ubuntu",
      PlatformVersion: "24.04",
      ResourceType: "EC2Instance",
      IPAddress: i.instance.PrivateIpAddress,
      ComputerName: `ip-${(i.instance.PrivateIpAddress ?? "").replace(/\./g, "-")}.${this.region}.compute.internal`,
      ...(i.role ? { IamRole: i.role } : {}),
      AssociationStatus: "Success",
      SourceId: i.id,
      SourceType: "AWS::EC2::Instance",
    });
    let found = managed.map(info);
    const fields: Record<string, (x: InstanceInformation) => string | undefined> = {
      instanceids: (x) => x.InstanceId,
      pingstatus: (x) => x.PingStatus,
      platformtypes: (x) => x.PlatformType,
      resourcetype: (x) => x.ResourceType,
      agentversion: (x) => x.AgentVersion,
      iamrole: (x) => x.IamRole,
      associationstatus: (x) => x.AssociationStatus,
    };
    const filters = [
      ...(input.Filters ?? []).map((f) => ({ key: f.Key ?? "", values: f.Values ?? [] })),
      ...(input.InstanceInformationFilterList ?? []).map((f) => ({
        key: f.key ?? "",
        values: f.valueSet ?? [],
      })),
    ];
    for (const f of filters) {
      if (f.key.startsWith("tag:") || f.key === "tag-key") {
        const tagsOf = (x: InstanceInformation) =>
          this.ec2.instances.get(x.InstanceId ?? "")?.instance.Tags ?? [];
        found = found.filter((x) =>
          f.key === "tag-key"
            ? tagsOf(x).some((t) => f.values.includes(t.Key ?? ""))
            : f.values.includes(tagsOf(x).find((t) => t.Key === f.key.slice(4))?.Value ?? "\0"),
        );
        continue;
      }
      const get = fields[f.key.toLowerCase()];
      if (!get) throw new AwsError("InvalidFilterKey", "");
      found = found.filter((x) => f.values.includes(get(x) ?? ""));
    }
    const start = input.NextToken ? Number(Buffer.from(input.NextToken, "base64").toString("utf8")) : 0;
    if (!Number.isInteger(start) || start < 0)
      throw new AwsError("InvalidNextToken", "The specified token is invalid.");
    const page = found.slice(start, start + max);
    const next = start + max < found.length ? Buffer.from(String(start + max)).toString("base64") : undefined;
    return { InstanceInformationList: page, ...(next ? { NextToken: next } : {}) };
  }

  // ---------------------------------------------------------------------------------- Parameter Store

  /** The ARN of a parameter: `parameter/` and the name without its leading slash. */
  private parameterArn(name: string): string {
    return arn.ssmParameter(name, this.region);
  }

  /** A name as GetParameter takes it: a name, an ARN, either with `:version`. */
  private resolveName(raw: string): { name: string; version?: number; label?: string } {
    let s = raw;
    const prefix = `arn:aws:ssm:${this.region}:`;
    if (s.startsWith("arn:")) {
      if (!s.startsWith(prefix)) return { name: s };
      const rest = s.slice(s.indexOf(":parameter/") + ":parameter/".length);
      s = rest.includes("/") ? `/${rest}` : this.parameters.has(rest) ? rest : `/${rest}`;
    }
    const m = /^(.*):([^:/]+)$/.exec(s);
    if (m) {
      const sel = m[2] as string;
      return /^\d+$/.test(sel)
        ? { name: m[1] as string, version: Number(sel) }
        : { name: m[1] as string, label: sel };
    }
    return { name: s };
  }

  /** Throughput: a sliding second of `now`; a request above the quota is refused. */
  private throttle(bucket: string, tps: number | undefined): void {
    if (tps === undefined) return;
    const now = this.now();
    const recent = (this.windows.get(bucket) ?? []).filter((t) => t > now - 1000);
    if (recent.length >= tps) {
      this.windows.set(bucket, recent);
      throw new AwsError("ThrottlingException", "Rate exceeded", 400);
    }
    recent.push(now);
    this.windows.set(bucket, recent);
  }

  private checkName(name: string): void {
    if (!name || name.length > 2048) throw lengthError(name, "name", 2048);
    const first = name.replace(/^\//, "").split("/")[0]?.toLowerCase() ?? "";
    const bad =
      !/^[a-zA-Z0-9_.\-/]+$/.test(name) ||
      first.startsWith("aws") ||
      first.startsWith("ssm") ||
      (name.includes("/") && !name.startsWith("/")) ||
      name.includes("//") ||
      name.endsWith("/");
    if (bad) {
      throw validation(
        'Parameter name: can\'t be prefixed with "aws" or "ssm" (case-insensitive). If formed as a path, it can consist of sub-paths divided by slash symbol; each sub-path can be formed as a mix of letters, numbers and the following 3 symbols .-_',
      );
    }
    if (name.split("/").filter(Boolean).length > MAX_HIERARCHY_DEPTH) {
      throw new AwsError(
        "HierarchyLevelLimitExceededException",
        `A hierarchy can have a maximum of ${MAX_HIERARCHY_DEPTH} levels.`,
      );
    }
  }

  /** Put, as the service does it (also the operator's `putParameter`): validation, tiers, versions. */
  private store(input: PutParameterCommandInput): FakeParameter {
    const name = input.Name ?? "";
    this.checkName(name);
    const existing = this.parameters.get(name);
    if (input.Value === undefined) throw validation("Value is required");
    if (input.Tags?.length && input.Overwrite) {
      throw validation(
        "Invalid request: tags and overwrite can't be used together. To create a parameter with tags, please remove overwrite flag. To update tags on an existing parameter, please use AddTagsToResource or RemoveTagsFromResource.",
      );
    }
    if (existing && !input.Overwrite) {
      throw new AwsError(
        "ParameterAlreadyExists",
        "The parameter already exists. To overwrite this value, set the overwrite option in the request to true.",
      );
    }
    const type = input.Type ?? existing?.Type;
    if (!type) throw validation("A parameter type is required when you create a parameter.");
    if (!["String", "StringList", "SecureString"].includes(type)) {
      throw new AwsError("UnsupportedParameterType", `${type} is not a valid parameter type.`);
    }
    if (input.KeyId && type !== "SecureString") {
      throw validation("KeyId is required for SecureString type parameter only.");
    }
    const bytes = Buffer.byteLength(input.Value, "utf8");
    const requested = input.Tier ?? (existing ? existing.Tier : this.defaultTier);
    let tier: ParameterTier;
    if (requested === "Intelligent-Tiering") {
      tier =
        existing?.Tier === "Advanced" || bytes > STANDARD_VALUE_BYTES || input.Policies
          ? "Advanced"
          : "Standard";
    } else {
      tier = requested;
    }
    if (existing?.Tier === "Advanced" && tier === "Standard") {
      throw validation(
        "This parameter uses the advanced-parameter tier. You can't downgrade a parameter from the advanced-parameter tier to the standard-parameter tier. If necessary, you can delete the advanced parameter and recreate it as a standard parameter.",
      );
    }
    if (tier === "Standard" && bytes > STANDARD_VALUE_BYTES) {
      throw validation(
        `Standard tier parameters support a maximum parameter value of ${STANDARD_VALUE_BYTES} characters. To create a larger parameter value, upgrade the parameter to use the advanced-parameter tier. For more information, see https://docs.aws.amazon.com/systems-manager/latest/userguide/parameter-store-advanced-parameters.html`,
      );
    }
    if (bytes > ADVANCED_VALUE_BYTES) {
      throw validation(
        `Advanced tier parameters support a maximum parameter value of ${ADVANCED_VALUE_BYTES} characters.`,
      );
    }
    if (tier === "Standard" && input.Policies) {
      throw validation("Parameter policies are supported by the advanced-parameter tier only.");
    }
    if (!existing) {
      const count = [...this.parameters.values()].filter((p) => p.Tier === tier).length;
      const limit = tier === "Standard" ? STANDARD_PARAMETER_LIMIT : ADVANCED_PARAMETER_LIMIT;
      if (count >= limit) {
        throw new AwsError(
          "ParameterLimitExceeded",
          `You have exceeded the limit of ${limit} ${tier.toLowerCase()} parameters in this Region.`,
        );
      }
    }
    const history = existing ? [...existing.history] : [];
    if (existing) {
      history.push({
        Version: existing.Version,
        Value: existing.Value,
        Type: existing.Type,
        LastModifiedDate: existing.LastModifiedDate,
      });
      while (history.length >= MAX_VERSIONS) history.shift();
    }
    const p: FakeParameter = {
      Name: name,
      Value: input.Value,
      Type: type,
      Version: (existing?.Version ?? 0) + 1,
      Tier: tier,
      DataType: input.DataType ?? existing?.DataType ?? "text",
      LastModifiedDate: new Date(this.now()),
      Tags: structuredClone(input.Tags ?? existing?.Tags ?? []),
      history,
      ...(type === "SecureString" ? { KeyId: input.KeyId ?? existing?.KeyId ?? "alias/aws/ssm" } : {}),
      ...(input.Description !== undefined
        ? { Description: input.Description }
        : existing?.Description !== undefined
          ? { Description: existing.Description }
          : {}),
    };
    this.parameters.set(name, p);
    return p;
  }

  /** PutParameter authorizes the parameter's ARN, with its tags (aws:RequestTag, aws:TagKeys) and ssm:Overwrite. */
  private async putParameterOp(input: PutParameterCommandInput, call: Call) {
    this.throttle("PutParameter", this.putParameterTps);
    const name = input.Name ?? "";
    const context: Record<string, string | string[]> = {};
    for (const t of input.Tags ?? []) context[`aws:RequestTag/${t.Key}`] = t.Value ?? "";
    if (input.Tags?.length) context["aws:TagKeys"] = input.Tags.map((t) => t.Key ?? "");
    if (input.Overwrite !== undefined) context["ssm:Overwrite"] = String(input.Overwrite);
    await call.authorize([{ action: "ssm:PutParameter", resource: this.parameterArn(name), context }]);
    const p = this.store(input);
    return { Version: p.Version, Tier: p.Tier };
  }

  private resourceContext(p: FakeParameter | undefined): Record<string, string> {
    const ctx: Record<string, string> = {};
    for (const t of p?.Tags ?? []) ctx[`aws:ResourceTag/${t.Key}`] = t.Value ?? "";
    return ctx;
  }

  /** The parameter as Get* answer it: a SecureString's value stays ciphertext unless decrypted. */
  private reveal(
    p: FakeParameter,
    decrypt: boolean,
    selector?: { version?: number; label?: string },
    asked?: string,
  ): Parameter {
    let version = p.Version;
    let value = p.Value;
    let type = p.Type;
    let modified = p.LastModifiedDate;
    if (selector?.version !== undefined && selector.version !== p.Version) {
      const old = p.history.find((h) => h.Version === selector.version);
      if (!old)
        throw new AwsError(
          "ParameterVersionNotFound",
          `Systems Manager could not find version ${selector.version} of ${p.Name}. Verify the version and try again.`,
        );
      version = old.Version;
      value = old.Value;
      type = old.Type;
      modified = old.LastModifiedDate;
    }
    // SecureString decryption with the default aws/ssm key needs no KMS grant; other keys are not modelled.
    const shown =
      type === "SecureString" && !decrypt
        ? `AQICAH${Buffer.from(`${p.Name}:${version}:${value}`).toString("base64").slice(0, 64)}`
        : value;
    return {
      Name: p.Name,
      Type: type,
      Value: shown,
      Version: version,
      LastModifiedDate: modified,
      ARN: this.parameterArn(p.Name),
      DataType: p.DataType,
      ...(asked && asked !== p.Name ? { Selector: asked.slice(asked.lastIndexOf(":")) } : {}),
    };
  }

  private async getParameter(input: GetParameterCommandInput, call: Call) {
    this.throttle("GetParameters", this.parameterTps);
    const sel = this.resolveName(input.Name ?? "");
    const p = this.parameters.get(sel.name);
    await call.authorize([
      { action: "ssm:GetParameter", resource: this.parameterArn(sel.name), context: this.resourceContext(p) },
    ]);
    if (!p) throw new AwsError("ParameterNotFound", "");
    if (sel.label)
      throw new AwsError("ParameterVersionNotFound", "parameter labels are not modelled by the AWS double");
    return {
      Parameter: this.reveal(p, input.WithDecryption === true, sel, sel.version ? input.Name : undefined),
    };
  }

  /** GetParameters authorizes every name; one denied fails the whole request. */
  private async getParameters(input: GetParametersCommandInput, call: Call) {
    this.throttle("GetParameters", this.parameterTps);
    const names = input.Names ?? [];
    if (names.length === 0)
      throw validation(
        "1 validation error detected: Value null at 'names' failed to satisfy constraint: Member must not be null",
      );
    if (names.length > 10) throw lengthError(names, "names", 10);
    const resolved = [...new Set(names)].map((raw) => ({ raw, ...this.resolveName(raw) }));
    await call.authorize(
      resolved.map((r) => ({
        action: "ssm:GetParameters",
        resource: this.parameterArn(r.name),
        context: this.resourceContext(this.parameters.get(r.name)),
      })),
    );
    const found: Parameter[] = [];
    const invalid: string[] = [];
    for (const r of resolved) {
      const p = this.parameters.get(r.name);
      if (!p || r.label) {
        invalid.push(r.raw);
        continue;
      }
      try {
        found.push(this.reveal(p, input.WithDecryption === true, r, r.version ? r.raw : undefined));
      } catch {
        invalid.push(r.raw);
      }
    }
    found.sort((a, b) => (a.Name ?? "").localeCompare(b.Name ?? ""));
    return { Parameters: found, InvalidParameters: invalid };
  }

  /**
   * DescribeParameters: metadata only, never a value; `ssm:DescribeParameters` takes no resource (`*`).
   * ParameterFilters Name (Equals, BeginsWith), Type, Tier, Path (OneLevel, Recursive) and tag:KEY; MaxResults
   * 1 to 50 (default 10). As the service does, a page is a slice of every parameter filtered afterwards, so a
   * page may hold fewer than MaxResults, even none, and still carry a NextToken.
   */
  private async describeParameters(input: DescribeParametersCommandInput, call: Call) {
    await call.authorize([{ action: "ssm:DescribeParameters", resource: "*" }]);
    if (input.Filters?.length && input.ParameterFilters?.length) {
      throw validation("You can use either Filters or ParameterFilters in a single request.");
    }
    const size = input.MaxResults ?? 10;
    if (size < 1 || size > 50) {
      throw validation(
        `1 validation error detected: Value '${size}' at 'maxResults' failed to satisfy constraint: Member must have value less than or equal to 50`,
      );
    }
    const tests = (input.ParameterFilters ?? []).map((f) => {
      const key = f.Key ?? "";
      const values = f.Values ?? [];
      const option = f.Option ?? (key === "Path" ? "OneLevel" : "Equals");
      if (key === "Name") {
        if (option !== "Equals" && option !== "BeginsWith")
          throw validation(`The option ${option} is not valid for Name`);
        return (p: FakeParameter) =>
          values.some((v) => (option === "Equals" ? p.Name === v : p.Name.startsWith(v)));
      }
      if (key === "Type" || key === "Tier") return (p: FakeParameter) => values.includes(p[key]);
      if (key === "Path") {
        return (p: FakeParameter) =>
          values.some((v) => {
            const prefix = `${v.replace(/\/$/, "")}/`;
            if (!p.Name.startsWith(prefix)) return false;
            return option === "Recursive" || !p.Name.slice(prefix.length).includes("/");
          });
      }
      if (key.startsWith("tag:")) {
        const tag = key.slice(4);
        return (p: FakeParameter) =>
          p.Tags.some((t) => t.Key === tag && (values.length === 0 || values.includes(t.Value ?? "")));
      }
      throw validation(`The filter key ${key} is not valid.`);
    });
    const all = [...this.parameters.values()].sort((a, b) => a.Name.localeCompare(b.Name));
    const start = input.NextToken ? Number(Buffer.from(input.NextToken, "base64").toString()) : 0;
    if (!Number.isInteger(start) || start < 0)
      throw new AwsError("InvalidNextToken", "The specified token isn't valid.");
    const page = all
      .slice(start, start + size)
      .filter((p) => tests.every((t) => t(p)))
      .map(
        (p): ParameterMetadata => ({
          Name: p.Name,
          ARN: this.parameterArn(p.Name),
          Type: p.Type,
          Version: p.Version,
          Tier: p.Tier,
          DataType: p.DataType,
          LastModifiedDate: p.LastModifiedDate,
          ...(p.KeyId ? { KeyId: p.KeyId } : {}),
          ...(p.Description !== undefined ? { Description: p.Description } : {}),
        }),
      );
    const next = start + size < all.length ? Buffer.from(String(start + size)).toString("base64") : undefined;
    return { Parameters: page, ...(next ? { NextToken: next } : {}) };
  }

  private async deleteParameter(input: DeleteParameterCommandInput, call: Call) {
    const name = input.Name ?? "";
    const p = this.parameters.get(name);
    await call.authorize([
      { action: "ssm:DeleteParameter", resource: this.parameterArn(name), context: this.resourceContext(p) },
    ]);
    if (!p) throw new AwsError("ParameterNotFound", "");
    this.parameters.delete(name);
    return {};
  }
}

/** The stdin blocks an SSM wrapper script carries (base64 between LABFLEET_STDIN markers), decoded. */
export function stdinOf(script: string): string[] {
  const out: string[] = [];
  for (const m of script.matchAll(/<<'LABFLEET_STDIN'[^\n]*\n([\s\S]*?)\nLABFLEET_STDIN\n/g)) {
    out.push(Buffer.from((m[1] ?? "").replace(/\s+/g, ""), "base64").toString("utf8"));
  }
  return out;
}
