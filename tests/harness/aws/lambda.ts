import { type ChildProcess, fork } from "node:child_process";
import { createHash, randomBytes, randomUUID } from "node:crypto";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { FUNCTIONS, type FunctionName, type FunctionSpec } from "../../../infra/permissions.ts";
import type { LambdaBuild } from "../../../scripts/build-lambdas.ts";
import { AwsError, arn, credentialsFor, FAKE_ACCOUNT_ID, FAKE_REGION, type FakeCredentials } from "./core.ts";

/**
 * The Lambda service of the AWS double: it runs functions from their bundles (scripts/build-lambdas.ts) as
 * Lambda runs them. One execution environment (a sandbox) is one child process of lambda-runtime.mjs, started
 * with the memory flags of the nodejs22.x bootstrap and only the environment Lambda gives a function. It imports
 * the bundle once (Init) and then serves one invocation at a time; an idle sandbox is reused (warm), another is
 * started when all are busy, up to the account's concurrency limit. Function errors, timeouts, running out of
 * memory and the payload limits answer a synchronous caller as Invoke (RequestResponse) does; Function URLs turn
 * HTTP requests into payload format 2.0 events and the results back into HTTP.
 *
 * Not modelled: asynchronous invocation (InvocationType Event, its queue and retries), versions and aliases
 * (every invocation runs $LATEST), reserved and provisioned concurrency, freezing an idle sandbox (its timers
 * keep running between invocations) and reclaiming idle sandboxes.
 */

/** Invoke (RequestResponse): the request payload may be at most 6 MB (6 MiB; larger is refused with 413). */
export const SYNC_REQUEST_LIMIT = 6_291_456;
/** The function's response, as its JSON text, may be at most 6,291,556 bytes (Lambda's error message says so). */
export const SYNC_RESPONSE_LIMIT = 6_291_556;
/**
 * The Init phase of an on-demand function may take 10 seconds; one that takes longer is retried by Lambda at the
 * first invocation, under the function's timeout ("Lambda execution environment lifecycle"). The double lets the
 * first init go on for the longer of the two, which is when a retried init would end too.
 */
const INIT_TIMEOUT_MS = 10_000;
/** The total size of a function's environment variables may be at most 4 KB. */
const ENV_LIMIT = 4096;

/** Variables Lambda sets itself; a function's configuration cannot set them. */
const RESERVED_ENV = new Set([
  "_HANDLER",
  "_X_AMZN_TRACE_ID",
  "AWS_DEFAULT_REGION",
  "AWS_REGION",
  "AWS_EXECUTION_ENV",
  "AWS_LAMBDA_FUNCTION_NAME",
  "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
  "AWS_LAMBDA_FUNCTION_VERSION",
  "AWS_LAMBDA_INITIALIZATION_TYPE",
  "AWS_LAMBDA_LOG_GROUP_NAME",
  "AWS_LAMBDA_LOG_STREAM_NAME",
  "AWS_ACCESS_KEY_ID",
  "AWS_SECRET_ACCESS_KEY",
  "AWS_SESSION_TOKEN",
  "AWS_LAMBDA_RUNTIME_API",
  "LAMBDA_TASK_ROOT",
  "LAMBDA_RUNTIME_DIR",
]);

const RUNTIME_SOURCE = fileURLToPath(new URL("./lambda-runtime.mjs", import.meta.url));

export interface LambdaFunctionConfig {
  /** The function's name, as callers name it (also the last part of its ARN). */
  name: string;
  arn: string;
  /** Where its code is: the bundle directory (LAMBDA_TASK_ROOT), the bundle file in it, the export. */
  handler: { dir: string; file: string; exportName: string };
  timeoutMs: number;
  memoryMb: number;
  /** The function's own environment variables (its configuration's). */
  env: Record<string, string>;
  /** Whose role session credentials it runs with (`credentialsFor(principal)`); its name by default. */
  principal?: string;
}

export interface FakeLambdaOptions {
  functions: LambdaFunctionConfig[];
  /** The AWS double's endpoint, given to every function as AWS_ENDPOINT_URL. */
  endpoint: string;
  region?: string;
  /** The account's concurrent executions quota: 1,000 by default; new accounts may have 10. */
  concurrencyLimit?: number;
  /** Shorter timeouts than the configured ones, per function name (so a test sees a timeout in seconds). */
  timeoutMs?: Record<string, number>;
  credentials?: (principal: string) => FakeCredentials;
}

export interface InvokeOptions {
  invocationType?: "RequestResponse" | "DryRun";
  /** The request id (a Function URL passes its event's); a new UUID by default. */
  requestId?: string;
  /** The ClientContext, as the function's context.clientContext. */
  clientContext?: unknown;
}

export interface InvokeResult {
  /** 200 for RequestResponse (also when the function failed), 204 for DryRun. */
  statusCode: number;
  /** The function's JSON response, or the error object when it failed. */
  payload: Buffer;
  /** X-Amz-Function-Error: set when the function failed. */
  functionError?: "Unhandled";
  /** X-Amz-Executed-Version. */
  executedVersion: string;
  requestId: string;
}

export interface InvocationRecord {
  functionName: string;
  requestId: string;
  /** Epoch ms when the invocation was accepted. */
  start: number;
  /** Epoch ms when its answer was ready, on the same clock as `start`: overlap in time is measured by these two
   * (Init and Invoke are timed on another clock and leave out the waits between the phases). */
  end: number;
  /** The Invoke phase, ms. */
  durationMs: number;
  /** The Init phase of a cold start, ms. */
  initDurationMs?: number;
  /** What Lambda bills: Init (of on-demand functions too, since August 2025) plus Invoke, rounded up to 1 ms. */
  billedDurationMs: number;
  memoryMb: number;
  /** The sandbox's peak resident memory, MB (Lambda's "Max Memory Used"). */
  maxMemoryUsedMb: number;
  coldStart: boolean;
  /** `ok`, or the error type the caller got (Error, Sandbox.Timedout, Runtime.OutOfMemory, ...). */
  outcome: string;
  pid: number | undefined;
}

export interface LogLine {
  functionName: string;
  pid: number | undefined;
  stream: "stdout" | "stderr";
  line: string;
}

interface RuntimeError {
  errorType: string;
  errorMessage: string;
  trace?: string[];
}

type ChildMessage =
  | { type: "ready" }
  | { type: "initError"; error: RuntimeError }
  | { type: "result"; requestId: string; payload: string }
  | { type: "error"; requestId: string; error: RuntimeError; fatal?: boolean }
  | {
      type: "inspected";
      exports: Record<string, string>;
      modules: Record<string, { resolved?: string; error?: string; loaded: boolean }>;
      pid: number;
    };

type Outcome =
  | { kind: "result"; payload: string }
  | { kind: "error"; error: RuntimeError; fatal: boolean }
  | { kind: "timeout" }
  | { kind: "exit"; code: number | null; signal: NodeJS.Signals | null; oom: boolean };

/** The nodejs22.x bootstrap's node flags: a tenth of the memory for the young generation, the rest old. */
export function nodeArgsFor(memoryMb: number): string[] {
  const newSpace = Math.floor(memoryMb / 10);
  return [
    "--expose-gc",
    "--max-http-header-size",
    "81920",
    `--max-semi-space-size=${Math.floor(newSpace / 2)}`,
    `--max-old-space-size=${memoryMb - newSpace}`,
  ];
}

/** How Lambda's runtime API describes a runtime process that ended (Go's exec.ExitError text). */
function exitText(code: number | null, signal: NodeJS.Signals | null): string {
  const names: Partial<Record<NodeJS.Signals, string>> = {
    SIGKILL: "killed",
    SIGABRT: "aborted",
    SIGSEGV: "segmentation fault",
    SIGTERM: "terminated",
    SIGBUS: "bus error",
  };
  if (signal) return `signal: ${names[signal] ?? signal}`;
  return `exit status ${code ?? 0}`;
}

class Sandbox {
  state: "init" | "idle" | "busy" | "dead" = "busy";
  readonly child: ChildProcess;
  readonly ready: Promise<{ ok: true } | { ok: false; error: RuntimeError }>;
  readonly exited: Promise<void>;
  initDurationMs = 0;
  peakRss = 0;
  oomKilled = false;
  private listener: ((m: ChildMessage) => void) | undefined;
  private exitListener: ((code: number | null, signal: NodeJS.Signals | null) => void) | undefined;
  private readonly watchdog: NodeJS.Timeout;

  constructor(
    readonly fn: LambdaFunctionConfig,
    runtime: string,
    env: Record<string, string>,
    args: string[],
    onLog: (line: LogLine) => void,
    initLimitMs = INIT_TIMEOUT_MS,
  ) {
    const started = performance.now();
    this.child = fork(runtime, args, {
      cwd: fn.handler.dir,
      env,
      execArgv: nodeArgsFor(fn.memoryMb),
      stdio: ["ignore", "pipe", "pipe", "ipc"],
      serialization: "json",
    });
    const pid = this.child.pid;
    for (const stream of ["stdout", "stderr"] as const) {
      let rest = "";
      this.child[stream]?.setEncoding("utf8");
      this.child[stream]?.on("data", (chunk: string) => {
        const lines = (rest + chunk).split("\n");
        rest = lines.pop() ?? "";
        for (const line of lines) onLog({ functionName: fn.name, pid, stream, line });
      });
    }
    this.exited = new Promise((resolve) => {
      const ended = (code: number | null, signal: NodeJS.Signals | null) => {
        if (this.state === "dead") return;
        this.state = "dead";
        clearInterval(this.watchdog);
        this.exitListener?.(code, signal);
        resolve();
      };
      this.child.once("exit", ended);
      // A process that could not start, or a message to one that has ended, ends the sandbox.
      this.child.on("error", () => {
        if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
        if (this.child.pid === undefined) ended(null, null);
      });
    });
    this.child.on("message", (m: ChildMessage) => this.listener?.(m));
    // Lambda stops an execution environment that uses more than its memory: here, the process's resident set.
    const limit = fn.memoryMb * 1024 * 1024;
    this.watchdog = setInterval(() => {
      const rss = residentBytes(pid);
      if (rss === undefined) return;
      this.peakRss = Math.max(this.peakRss, rss);
      if (rss > limit && !this.oomKilled) {
        this.oomKilled = true;
        this.child.kill("SIGKILL");
      }
    }, 20);
    this.watchdog.unref();
    this.ready = new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.kill();
        resolve({
          ok: false,
          error: {
            errorType: "Sandbox.Timedout",
            errorMessage: `Init phase timed out after ${(initLimitMs / 1000).toFixed(2)} seconds`,
          },
        });
      }, initLimitMs);
      this.listener = (m) => {
        if (m.type !== "ready" && m.type !== "initError") return;
        clearTimeout(timer);
        this.initDurationMs = performance.now() - started;
        if (m.type === "ready") resolve({ ok: true });
        else resolve({ ok: false, error: m.error });
      };
      this.exitListener = (code, signal) => {
        clearTimeout(timer);
        resolve({
          ok: false,
          error: this.oomKilled
            ? {
                errorType: "Runtime.OutOfMemory",
                errorMessage: `Runtime exited with error: ${exitText(code, signal)}`,
              }
            : {
                errorType: "Runtime.ExitError",
                errorMessage: `Runtime exited with error: ${exitText(code, signal)}`,
              },
        });
      };
    });
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Sends one invocation and waits for its result, the timeout, or the process's end. */
  run(message: Record<string, unknown> & { requestId: string }, timeoutMs: number): Promise<Outcome> {
    return new Promise((resolve) => {
      const done = (o: Outcome) => {
        clearTimeout(timer);
        this.listener = undefined;
        this.exitListener = undefined;
        resolve(o);
      };
      const timer = setTimeout(() => done({ kind: "timeout" }), timeoutMs);
      this.listener = (m) => {
        if (m.type === "result" && m.requestId === message.requestId)
          done({ kind: "result", payload: m.payload });
        if (m.type === "error" && m.requestId === message.requestId)
          done({ kind: "error", error: m.error, fatal: m.fatal === true });
      };
      this.exitListener = (code, signal) => done({ kind: "exit", code, signal, oom: this.oomKilled });
      if (this.state === "dead")
        done({ kind: "exit", code: this.child.exitCode, signal: null, oom: this.oomKilled });
      else this.child.send({ type: "invoke", ...message });
    });
  }

  /** For --inspect sandboxes: asks for the exports' types and how `modules` resolve. */
  inspect(modules: string[]): Promise<Extract<ChildMessage, { type: "inspected" }>> {
    return new Promise((resolve, reject) => {
      this.listener = (m) => {
        if (m.type === "inspected") resolve(m);
      };
      this.exitListener = (code, signal) => reject(new Error(`sandbox ended (${exitText(code, signal)})`));
      this.child.send({ type: "inspect", modules });
    });
  }

  kill(): void {
    if (this.state !== "dead") this.child.kill("SIGKILL");
  }
}

function residentBytes(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const pages = Number(readFileSync(`/proc/${pid}/statm`, "utf8").split(" ")[1]);
    return pages * 4096;
  } catch {
    return undefined;
  }
}

function logStreamName(): string {
  const d = new Date();
  const day = `${d.getUTCFullYear()}/${String(d.getUTCMonth() + 1).padStart(2, "0")}/${String(d.getUTCDate()).padStart(2, "0")}`;
  return `${day}/[$LATEST]${randomBytes(16).toString("hex")}`;
}

export class FakeLambda {
  /** Every invocation that ran (throttled and refused requests are not invocations), in order of ending. */
  readonly invocations: InvocationRecord[] = [];
  /** What the functions wrote to stdout and stderr (the runtime's console writes `time\trequestId\tLEVEL\t...`). */
  readonly logs: LogLine[] = [];
  private readonly functions = new Map<string, LambdaFunctionConfig>();
  private readonly pools = new Map<string, Sandbox[]>();
  private readonly urls = new Map<string, Promise<{ server: Server; url: string }>>();
  private readonly region: string;
  private readonly limit: number;
  private readonly root: string;
  private readonly bin: string;
  private readonly runtimeDir: string;
  private readonly runtime: string;
  private running = 0;
  private closed = false;

  private endpoint: string;

  constructor(private readonly opts: FakeLambdaOptions) {
    this.endpoint = opts.endpoint;
    this.region = opts.region ?? FAKE_REGION;
    this.limit = opts.concurrencyLimit ?? 1000;
    for (const fn of opts.functions) {
      const reserved = Object.keys(fn.env).filter((k) => RESERVED_ENV.has(k));
      if (reserved.length > 0) {
        throw new AwsError(
          "InvalidParameterValueException",
          "Lambda was unable to configure your environment variables because the environment variables you have " +
            "provided contains reserved keys that are currently not supported for modification. Reserved keys used " +
            `in this request: ${reserved.join(", ")}`,
        );
      }
      const measured = JSON.stringify(fn.env);
      if (Buffer.byteLength(measured) > ENV_LIMIT) {
        throw new AwsError(
          "InvalidParameterValueException",
          "Lambda was unable to configure your environment variables because the environment variables you have " +
            `provided exceeded the 4KB limit. String measured: ${measured}`,
        );
      }
      this.functions.set(fn.name, fn);
      this.pools.set(fn.name, []);
    }
    // The execution environment's own folders: the runtime's (LAMBDA_RUNTIME_DIR), and a PATH holding only
    // `node` and `sh`: the nodejs22.x image (Amazon Linux 2023 minimal) has no git, ssh or tar.
    this.root = mkdtempSync(join(tmpdir(), "labfleet-fake-lambda-"));
    this.bin = join(this.root, "bin");
    this.runtimeDir = join(this.root, "runtime");
    mkdirSync(this.bin);
    mkdirSync(this.runtimeDir);
    symlinkSync(process.execPath, join(this.bin, "node"));
    symlinkSync("/bin/sh", join(this.bin, "sh"));
    this.runtime = join(this.runtimeDir, "index.mjs");
    copyFileSync(RUNTIME_SOURCE, this.runtime);
  }

  /** Invocations running now, account-wide (what the concurrency quota counts). */
  get inFlight(): number {
    return this.running;
  }

  /** The pids of a function's live sandboxes. */
  sandboxes(name: string): number[] {
    return (this.pools.get(name) ?? []).filter((s) => s.state !== "dead").map((s) => s.pid as number);
  }

  config(name: string): LambdaFunctionConfig | undefined {
    return this.functions.get(name);
  }

  /** The timeout an invocation gets: the test's override, else the configured one. */
  timeoutOf(fn: LambdaFunctionConfig): number {
    return this.opts.timeoutMs?.[fn.name] ?? fn.timeoutMs;
  }

  /** A function by name, ARN or partial ARN (`123456789012:function:name`), with an optional qualifier. */
  private find(nameOrArn: string): { fn: LambdaFunctionConfig; invokedArn: string } {
    const m =
      /^(?:arn:[^:]+:lambda:([^:]+):)?(?:(\d{12}):)?(?:function:)?([A-Za-z0-9_.-]+)(?::([^:]+))?$/.exec(
        nameOrArn,
      );
    const name = m?.[3];
    const qualifier = m?.[4];
    const fn = name ? this.functions.get(name) : undefined;
    const region = m?.[1] ?? this.region;
    const account = m?.[2] ?? FAKE_ACCOUNT_ID;
    const wanted = `arn:aws:lambda:${region}:${account}:function:${name ?? nameOrArn}${qualifier ? `:${qualifier}` : ""}`;
    if (
      !fn ||
      region !== this.region ||
      account !== FAKE_ACCOUNT_ID ||
      (qualifier && qualifier !== "$LATEST")
    ) {
      throw new AwsError("ResourceNotFoundException", `Function not found: ${wanted}`, 404);
    }
    return { fn, invokedArn: qualifier ? `${fn.arn}:${qualifier}` : fn.arn };
  }

  private environment(fn: LambdaFunctionConfig): Record<string, string> {
    const creds = (this.opts.credentials ?? credentialsFor)(fn.principal ?? fn.name);
    const file = fn.handler.file.replace(/\.[cm]?js$/, "");
    const taskRoot = fn.handler.dir;
    return {
      // Lambda's defaults a function may change.
      LANG: "en_US.UTF-8",
      PATH: this.bin,
      LD_LIBRARY_PATH: `/lib64:/usr/lib64:${this.runtimeDir}:${this.runtimeDir}/lib:${taskRoot}:${taskRoot}/lib:/opt/lib`,
      NODE_PATH: `${this.runtimeDir}/node_modules:${this.runtimeDir}:${taskRoot}`,
      ...fn.env,
      // Lambda's own.
      _HANDLER: `${file}.${fn.handler.exportName}`,
      AWS_REGION: this.region,
      AWS_DEFAULT_REGION: this.region,
      AWS_EXECUTION_ENV: "AWS_Lambda_nodejs22.x",
      AWS_LAMBDA_FUNCTION_NAME: fn.name,
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(fn.memoryMb),
      AWS_LAMBDA_FUNCTION_VERSION: "$LATEST",
      AWS_LAMBDA_INITIALIZATION_TYPE: "on-demand",
      AWS_LAMBDA_LOG_GROUP_NAME: `/aws/lambda/${fn.name}`,
      AWS_LAMBDA_LOG_STREAM_NAME: logStreamName(),
      LAMBDA_TASK_ROOT: taskRoot,
      LAMBDA_RUNTIME_DIR: this.runtimeDir,
      TZ: ":UTC",
      AWS_ACCESS_KEY_ID: creds.accessKeyId,
      AWS_SECRET_ACCESS_KEY: creds.secretAccessKey,
      AWS_SESSION_TOKEN: creds.sessionToken,
      // The double's: every SDK client goes to its endpoint, never to the instance metadata service.
      AWS_ENDPOINT_URL: this.endpoint,
      AWS_EC2_METADATA_DISABLED: "true",
      // The sandboxes run this machine's Node 20 where Lambda runs Node 22: the SDK's warning about Node 20 is
      // this double's, not the function's.
      AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: "true",
    };
  }

  private spawn(fn: LambdaFunctionConfig, inspect = false): Sandbox {
    const args = [
      join(fn.handler.dir, fn.handler.file),
      fn.handler.exportName,
      ...(inspect ? ["--inspect"] : []),
    ];
    const onLog = (line: LogLine) => {
      this.logs.push(line);
      if (this.logs.length > 10_000) this.logs.splice(0, this.logs.length - 10_000);
    };
    return new Sandbox(
      fn,
      this.runtime,
      this.environment(fn),
      args,
      onLog,
      Math.max(INIT_TIMEOUT_MS, this.timeoutOf(fn)),
    );
  }

  /** An idle sandbox of the function (the most recently used), or a new one, within the concurrency quota. */
  private acquire(fn: LambdaFunctionConfig): { sandbox: Sandbox; cold: boolean } {
    if (this.running >= this.limit) {
      throw new LambdaThrottle("Rate Exceeded.", "ConcurrentInvocationLimitExceeded");
    }
    const pool = this.pools.get(fn.name) as Sandbox[];
    for (let i = pool.length - 1; i >= 0; i--) {
      const s = pool[i] as Sandbox;
      if (s.state === "idle") {
        s.state = "busy";
        this.running++;
        return { sandbox: s, cold: false };
      }
    }
    const sandbox = this.spawn(fn);
    sandbox.state = "init";
    pool.push(sandbox);
    void sandbox.exited.then(() => {
      const i = pool.indexOf(sandbox);
      if (i >= 0) pool.splice(i, 1);
    });
    this.running++;
    return { sandbox, cold: true };
  }

  /**
   * Invoke. The payload is the request's bytes (JSON text; empty means `{}`). Service errors throw AwsError:
   * ResourceNotFoundException (404), RequestEntityTooLargeException (413), InvalidRequestContentException
   * (400), TooManyRequestsException (429). A function's own failure is a 200 with `functionError: "Unhandled"`
   * and the error object as the payload.
   */
  async invoke(
    functionNameOrArn: string,
    payload?: Uint8Array | string,
    opts: InvokeOptions = {},
  ): Promise<InvokeResult> {
    if (this.closed) throw new Error("FakeLambda is closed");
    const { fn, invokedArn } = this.find(functionNameOrArn);
    const bytes = payload === undefined ? Buffer.alloc(0) : Buffer.from(payload);
    if (bytes.length > SYNC_REQUEST_LIMIT) {
      throw new AwsError(
        "RequestEntityTooLargeException",
        `Request must be smaller than ${SYNC_REQUEST_LIMIT} bytes for the InvokeFunction operation`,
        413,
      );
    }
    const event = bytes.length === 0 ? "{}" : bytes.toString("utf8");
    try {
      JSON.parse(event);
    } catch (e) {
      throw new AwsError(
        "InvalidRequestContentException",
        `Could not parse request body into json: ${(e as Error).message}`,
        400,
      );
    }
    const requestId = opts.requestId ?? randomUUID();
    if (opts.invocationType === "DryRun") {
      return { statusCode: 204, payload: Buffer.alloc(0), executedVersion: "$LATEST", requestId };
    }
    const start = Date.now();
    const { sandbox, cold } = this.acquire(fn);
    let initDurationMs: number | undefined;
    let durationMs = 0;
    let outcome: Outcome;
    try {
      if (cold) {
        const init = await sandbox.ready;
        initDurationMs = sandbox.initDurationMs;
        if (!init.ok) {
          sandbox.kill();
          return this.finish(fn, sandbox, { requestId, start, cold, initDurationMs, durationMs }, init.error);
        }
        if (sandbox.state === "init") sandbox.state = "busy";
      }
      const timeoutMs = this.timeoutOf(fn);
      const t0 = performance.now();
      outcome = await sandbox.run(
        {
          requestId,
          event,
          deadlineMs: Date.now() + timeoutMs,
          invokedFunctionArn: invokedArn,
          ...(opts.clientContext !== undefined ? { clientContext: opts.clientContext } : {}),
        },
        timeoutMs,
      );
      durationMs = outcome.kind === "timeout" ? timeoutMs : performance.now() - t0;
      const times = { requestId, start, cold, initDurationMs, durationMs };
      switch (outcome.kind) {
        case "result": {
          if (sandbox.state === "busy") sandbox.state = "idle";
          const size = Buffer.byteLength(outcome.payload);
          if (size > SYNC_RESPONSE_LIMIT) {
            return this.finish(fn, sandbox, times, {
              errorType: "Function.ResponseSizeTooLarge",
              errorMessage: `Response payload size exceeded maximum allowed payload size (${SYNC_RESPONSE_LIMIT} bytes).`,
            });
          }
          return this.finish(fn, sandbox, times, undefined, outcome.payload);
        }
        case "error":
          if (outcome.fatal) sandbox.kill();
          else if (sandbox.state === "busy") sandbox.state = "idle";
          return this.finish(fn, sandbox, times, outcome.error);
        case "timeout":
          // The sandbox is stopped; the next invocation gets a new one.
          sandbox.kill();
          return this.finish(fn, sandbox, times, {
            errorType: "Sandbox.Timedout",
            errorMessage: `RequestId: ${requestId} Error: Task timed out after ${(timeoutMs / 1000).toFixed(2)} seconds`,
          });
        case "exit":
          return this.finish(fn, sandbox, times, {
            errorType: outcome.oom ? "Runtime.OutOfMemory" : "Runtime.ExitError",
            errorMessage: `RequestId: ${requestId} Error: Runtime exited with error: ${exitText(outcome.code, outcome.signal)}`,
          });
      }
    } finally {
      this.running--;
    }
  }

  private finish(
    fn: LambdaFunctionConfig,
    sandbox: Sandbox,
    t: {
      requestId: string;
      start: number;
      cold: boolean;
      initDurationMs: number | undefined;
      durationMs: number;
    },
    error: RuntimeError | undefined,
    payload?: string,
  ): InvokeResult {
    this.invocations.push({
      functionName: fn.name,
      requestId: t.requestId,
      start: t.start,
      end: Date.now(),
      durationMs: t.durationMs,
      ...(t.cold ? { initDurationMs: t.initDurationMs } : {}),
      billedDurationMs: Math.ceil(t.durationMs + (t.cold ? (t.initDurationMs ?? 0) : 0)),
      memoryMb: fn.memoryMb,
      maxMemoryUsedMb: Math.ceil(Math.max(sandbox.peakRss, residentBytes(sandbox.pid) ?? 0) / 1024 / 1024),
      coldStart: t.cold,
      outcome: error ? error.errorType : "ok",
      pid: sandbox.pid,
    });
    if (error) {
      return {
        statusCode: 200,
        payload: Buffer.from(JSON.stringify(error)),
        functionError: "Unhandled",
        executedVersion: "$LATEST",
        requestId: t.requestId,
      };
    }
    return {
      statusCode: 200,
      payload: Buffer.from(payload ?? "null"),
      executedVersion: "$LATEST",
      requestId: t.requestId,
    };
  }

  /**
   * Imports a function's bundle in a sandbox of its own (its environment, memory flags and folder) and reports
   * the type of each export and where each of `modules` resolves from the bundle (and whether it loads). The
   * sandbox ends afterwards; it is no execution environment of the function's.
   */
  async inspect(
    name: string,
    modules: string[] = [],
  ): Promise<{
    exports: Record<string, string>;
    modules: Record<string, { resolved?: string; error?: string; loaded: boolean }>;
  }> {
    const { fn } = this.find(name);
    const sandbox = this.spawn(fn, true);
    try {
      const init = await sandbox.ready;
      if (!init.ok) throw new Error(`${name}: ${init.error.errorType}: ${init.error.errorMessage}`);
      const { exports, modules: resolved } = await sandbox.inspect(modules);
      return { exports, modules: resolved };
    } finally {
      sandbox.kill();
      await sandbox.exited;
    }
  }

  /**
   * The function's URL (auth type NONE, invoke mode BUFFERED): an HTTP server on 127.0.0.1 with a port of its
   * own, started on first use.
   */
  functionUrl(name: string): Promise<string> {
    const { fn } = this.find(name);
    let entry = this.urls.get(fn.name);
    if (!entry) {
      entry = new Promise((resolve, reject) => {
        const server = createServer((req, res) => {
          this.serveUrl(fn, req, res).catch((e) => {
            if (!res.headersSent) res.writeHead(500, { "content-type": "text/plain" });
            res.end(String(e));
          });
        });
        server.once("error", reject);
        server.listen(0, "127.0.0.1", () => {
          const { port } = server.address() as AddressInfo;
          resolve({ server, url: `http://127.0.0.1:${port}/` });
        });
      });
      this.urls.set(fn.name, entry);
    }
    return entry.then((e) => e.url);
  }

  private async serveUrl(fn: LambdaFunctionConfig, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = Buffer.concat(chunks);
    const requestId = randomUUID();
    const event = functionUrlEvent(req, body, { requestId, apiId: urlId(fn.name) });
    let result: InvokeResult;
    try {
      result = await this.invoke(fn.name, JSON.stringify(event), { requestId });
    } catch (e) {
      if (!(e instanceof AwsError)) throw e;
      res.writeHead(e.status, {
        "content-type": "application/json",
        "x-amzn-errortype": e.code,
        "x-amzn-requestid": requestId,
      });
      res.end(JSON.stringify({ Message: e.message }));
      return;
    }
    if (result.functionError) {
      // A function that fails (or whose response is too large) gives the client a 502.
      res.writeHead(502, { "content-type": "text/plain", "x-amzn-requestid": requestId });
      res.end("Internal Server Error");
      return;
    }
    const reply = functionUrlResponse(result.payload);
    res.statusCode = reply.statusCode;
    for (const [k, v] of Object.entries(reply.headers)) res.setHeader(k, v);
    if (reply.cookies.length > 0) res.setHeader("set-cookie", reply.cookies);
    res.setHeader("x-amzn-requestid", requestId);
    res.end(reply.body);
  }

  /** Kills every sandbox and closes every Function URL server. */
  /** Where sandboxes started from now on send their AWS calls (the double's endpoint, once it listens). */
  setEndpoint(url: string): void {
    this.endpoint = url;
  }

  /** Sets a function's environment variable for sandboxes started from now on (as a configuration update). */
  setEnv(name: string, key: string, value: string): void {
    const fn = this.functions.get(name);
    if (!fn) throw new Error(`no function ${name}`);
    fn.env = { ...fn.env, [key]: value };
  }

  async close(): Promise<void> {
    this.closed = true;
    const sandboxes = [...this.pools.values()].flat();
    for (const s of sandboxes) s.kill();
    await Promise.all(sandboxes.map((s) => s.exited));
    const servers = await Promise.all([...this.urls.values()].map((p) => p.catch(() => undefined)));
    await Promise.all(
      servers.map(
        (s) =>
          new Promise<void>((resolve) => {
            if (!s) return resolve();
            s.server.closeAllConnections();
            s.server.close(() => resolve());
          }),
      ),
    );
    rmSync(this.root, { recursive: true, force: true });
  }
}

/** TooManyRequestsException: Lambda's throttling error carries a reason. */
export class LambdaThrottle extends AwsError {
  constructor(
    message: string,
    readonly reason:
      | "ConcurrentInvocationLimitExceeded"
      | "ReservedFunctionConcurrentInvocationLimitExceeded"
      | "FunctionInvocationRateLimitExceeded",
  ) {
    super("TooManyRequestsException", message, 429);
  }
}

/** A Function URL's id: 32 lower-case letters and digits, stable per function. */
function urlId(name: string): string {
  const digest = createHash("sha256").update(`labfleet-fake-lambda-url:${name}`).digest();
  const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
  let id = "";
  for (let i = 0; i < 32; i++) id += alphabet[(digest[i] as number) % alphabet.length];
  return id;
}

/** Request bodies Lambda passes as text; any other (or no) content type arrives base64-encoded. */
function isTextContent(contentType: string | undefined): boolean {
  const type = (contentType ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
  return (
    type.startsWith("text/") ||
    ["application/json", "application/xml", "application/javascript"].includes(type) ||
    type.endsWith("+json") ||
    type.endsWith("+xml")
  );
}

/** `12/Mar/2020:19:03:58 +0000`, as requestContext.time has it. */
function clfTime(d: Date): string {
  const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
  const p = (n: number) => String(n).padStart(2, "0");
  return `${p(d.getUTCDate())}/${months[d.getUTCMonth()]}/${d.getUTCFullYear()}:${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())} +0000`;
}

/**
 * A Function URL request as its event (payload format version 2.0): header names lower-cased, repeated
 * headers joined with commas, the Cookie header as the `cookies` array, repeated query parameters joined with
 * commas, and the body as text or base64.
 */
export function functionUrlEvent(
  req: IncomingMessage,
  body: Buffer,
  ids: { requestId: string; apiId: string },
): Record<string, unknown> {
  const headers: Record<string, string> = {};
  const cookies: string[] = [];
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = (req.rawHeaders[i] as string).toLowerCase();
    const value = req.rawHeaders[i + 1] as string;
    if (name === "cookie") {
      cookies.push(...value.split(/;\s*/).filter((c) => c.length > 0));
      continue;
    }
    headers[name] = headers[name] === undefined ? value : `${headers[name]},${value}`;
  }
  const url = req.url ?? "/";
  const q = url.indexOf("?");
  const rawPath = q < 0 ? url : url.slice(0, q);
  const rawQueryString = q < 0 ? "" : url.slice(q + 1);
  const query: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(rawQueryString))
    query[k] = query[k] === undefined ? v : `${query[k]},${v}`;
  const sourceIp = (req.socket.remoteAddress ?? "").replace(/^::ffff:/, "");
  headers["x-forwarded-for"] = headers["x-forwarded-for"]
    ? `${headers["x-forwarded-for"]},${sourceIp}`
    : sourceIp;
  headers["x-forwarded-proto"] = "http";
  headers["x-forwarded-port"] = String(req.socket.localPort ?? "");
  headers["x-amzn-trace-id"] =
    `Root=1-${Math.floor(Date.now() / 1000).toString(16)}-${randomBytes(12).toString("hex")}`;
  const now = new Date();
  const text = isTextContent(headers["content-type"]);
  const event: Record<string, unknown> = {
    version: "2.0",
    routeKey: "$default",
    rawPath,
    rawQueryString,
    ...(cookies.length > 0 ? { cookies } : {}),
    headers,
    ...(Object.keys(query).length > 0 ? { queryStringParameters: query } : {}),
    requestContext: {
      accountId: FAKE_ACCOUNT_ID,
      apiId: ids.apiId,
      domainName: headers.host ?? "",
      domainPrefix: ids.apiId,
      http: {
        method: req.method ?? "GET",
        path: rawPath,
        protocol: `HTTP/${req.httpVersion}`,
        sourceIp,
        userAgent: headers["user-agent"] ?? "",
      },
      requestId: ids.requestId,
      routeKey: "$default",
      stage: "$default",
      time: clfTime(now),
      timeEpoch: now.getTime(),
    },
    ...(body.length > 0 ? { body: text ? body.toString("utf8") : body.toString("base64") } : {}),
    isBase64Encoded: body.length > 0 && !text,
  };
  return event;
}

/**
 * A function's result as the Function URL's HTTP response. An object with a `statusCode` is a response:
 * status, headers, cookies (each a Set-Cookie header), body (base64-decoded when isBase64Encoded); payload
 * format 2.0 has no multiValueHeaders. Anything else (a string, a number, an object without statusCode) is the
 * body of a 200 with content-type application/json, as the function returned it (its JSON text).
 */
export function functionUrlResponse(payload: Buffer): {
  statusCode: number;
  headers: Record<string, string>;
  cookies: string[];
  body: Buffer;
} {
  const value = JSON.parse(payload.toString("utf8")) as unknown;
  if (value && typeof value === "object" && !Array.isArray(value) && "statusCode" in value) {
    const r = value as {
      statusCode: unknown;
      headers?: Record<string, unknown>;
      cookies?: unknown[];
      body?: unknown;
      isBase64Encoded?: boolean;
    };
    const headers = Object.fromEntries(
      Object.entries(r.headers ?? {})
        .filter(([, v]) => v !== null && v !== undefined)
        .map(([k, v]) => [k.toLowerCase(), String(v)]),
    );
    const raw =
      r.body === undefined || r.body === null
        ? ""
        : typeof r.body === "string"
          ? r.body
          : JSON.stringify(r.body);
    return {
      statusCode: Number(r.statusCode),
      headers,
      cookies: (r.cookies ?? []).map(String),
      body: r.isBase64Encoded ? Buffer.from(raw, "base64") : Buffer.from(raw, "utf8"),
    };
  }
  return { statusCode: 200, headers: { "content-type": "application/json" }, cookies: [], body: payload };
}

/** "1 minute", "15 minutes", "30 seconds" -> ms. */
export function durationMs(text: string): number {
  const m = /^(\d+(?:\.\d+)?) (second|minute|hour)s?$/.exec(text);
  if (!m) throw new Error(`not a duration: ${text}`);
  const unit = { second: 1000, minute: 60_000, hour: 3_600_000 }[m[2] as "second" | "minute" | "hour"];
  return Number(m[1]) * unit;
}

/** "512 MB" -> 512. */
export function memoryMb(text: string): number {
  const m = /^(\d+) MB$/.exec(text);
  if (!m) throw new Error(`not a memory size: ${text}`);
  return Number(m[1]);
}

/**
 * The deployment's functions from the data sst.config.ts reads (infra/permissions.ts FUNCTIONS): each one's
 * bundle (from `buildLambdas`), timeout, memory and, from `opts.env`, its environment. `opts.name` gives a
 * function's deployed name (its FUNCTIONS key by default); its credentials are those of the principal named
 * after its key.
 */
export function lambdaFunctionsFromInfra(
  build: Pick<LambdaBuild, "functions">,
  opts: {
    env: (fn: FunctionName) => Record<string, string>;
    name?: (fn: FunctionName) => string;
    only?: FunctionName[];
    region?: string;
  },
): LambdaFunctionConfig[] {
  const keys = opts.only ?? (Object.keys(FUNCTIONS) as FunctionName[]);
  return keys.map((key) => {
    const spec = FUNCTIONS[key] as FunctionSpec;
    const handler = build.functions[key];
    const name = opts.name?.(key) ?? key;
    return {
      name,
      arn: arn.lambda(name, opts.region ?? FAKE_REGION),
      handler: { dir: handler.dir, file: handler.file, exportName: handler.exportName },
      timeoutMs: durationMs(spec.timeout),
      memoryMb: memoryMb(spec.memory),
      env: opts.env(key),
      principal: key,
    };
  });
}
