import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import type { Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { homedir } from "node:os";
import { join, resolve } from "node:path";
import type { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { serve } from "@hono/node-server";
import { markAllSilentHosts } from "../../shared/agent/check-in.ts";
import { deployAllWaitingHosts } from "../../shared/agent/lifecycle.ts";
import { instructorAuth } from "../../shared/auth/tokens.ts";
import { unfinishedExecJobs } from "../../shared/fleet/exec-jobs.ts";
import { healthPass } from "../../shared/fleet/health.ts";
import { stopLab } from "../../shared/fleet/lab.ts";
import { runLabChecks } from "../../shared/fleet/lab-checks.ts";
import { recheckReceipts } from "../../shared/fleet/receipt.ts";
import { unfinishedRuns } from "../../shared/fleet/runs.ts";
import { runDueSchedules } from "../../shared/fleet/schedules.ts";
import { managedPublicKey, transportFactory } from "../../shared/fleet/transports.ts";
import { listHosts } from "../../shared/fleet/workshops.ts";
import { serveAllQueues } from "../../shared/portal/queue.ts";
import { EnrolledProvider } from "../../shared/providers/enrolled.ts";
import { LocalProvider } from "../../shared/providers/local.ts";
import { StaticProvider } from "../../shared/providers/static.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { type Clock, systemClock } from "../../shared/runtime/clock.ts";
import { configure } from "../../shared/runtime/deps.ts";
import { errorMessage } from "../../shared/runtime/errors.ts";
import { log } from "../../shared/runtime/logger.ts";
import { createStore, type Store } from "../../shared/store/entities.ts";
import { ensureTable } from "../../shared/store/table.ts";
import { isStoreUnreachable } from "../../shared/store/unreachable.ts";
import { LocalTransport } from "../../shared/transports/local.ts";
import { TransportPool, type TransportPoolOptions } from "../../shared/transports/pool.ts";
import { LocalExecutor } from "../../stepfunctions/local-executor.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { authConfigFromEnv } from "../../web/auth/config.ts";
import { localClient, superviseDynamoLocal } from "./dynamodb.ts";
import { acquireRuntimeLock } from "./lock.ts";
import { fileSecretStore } from "./secrets.ts";

export interface LocalRuntimeOptions {
  /** Where data, sandbox hosts, keys and the runtime file live (default `.labfleet`). */
  dataDir: string;
  port?: number;
  /** Use this DynamoDB endpoint instead of starting DynamoDB Local (tests share one instance). */
  dynamoEndpoint?: string;
  table?: string;
  /** Milliseconds for each Wait state (the cloud waits lab.poll_seconds). */
  waitMs?: number;
  schedulerIntervalMs?: number;
  clock?: Clock;
  token?: string;
  /** Stop the local labs still building on close (`labfleet dev` on Ctrl-C); a resumed run restarts them. */
  stopLabsOnClose?: boolean;
  /** The operator's own folder: secrets.yaml and the managed SSH key (default $LABFLEET_HOME or ~/.labfleet). */
  labfleetHome?: string;
  /**
   * The pause (ms) before DynamoDB Local is started again after it died (default 250; it doubles while
   * restarts fail). Tests make it long enough to see the outage.
   */
  dynamoRestartDelayMs?: number;
  /**
   * SSH connections kept open between operations: at most `maxOpen` hosts (default 512), each closed after
   * `idleMs` unused (default 60 s).
   */
  sshPool?: TransportPoolOptions;
  /**
   * The URL hosts push their labs' progress to (shared/fleet/push-config.ts), when they reach this runtime some
   * other way than its own 127.0.0.1 address (a tunnel); by default that address.
   */
  hostApiUrl?: string;
}

export function defaultLabfleetHome(): string {
  return process.env.LABFLEET_HOME ? resolve(process.env.LABFLEET_HOME) : join(homedir(), ".labfleet");
}

export interface LocalRuntime {
  url: string;
  token: string;
  store: Store;
  executor: LocalExecutor;
  provider: LocalProvider;
  /** The SSH connections kept open between operations (closed with the runtime). */
  connections: TransportPool;
  resumed: string[];
  /** Runs one scheduler pass now (the timer does the same every interval). */
  tick(): Promise<number>;
  /** Runs one in-use health pass now (the timer starts one every interval, when the last has ended). */
  health(): ReturnType<typeof healthPass>;
  close(): Promise<void>;
}

export const RUNTIME_FILE = "runtime.json";

function loadOrCreateKey(file: string): Buffer {
  if (existsSync(file)) {
    const key = Buffer.from(readFileSync(file, "utf8").trim(), "base64");
    if (key.length === 32) return key;
    throw new Error(`${file} does not hold a 32-byte key`);
  }
  const key = randomBytes(32);
  writeFileSync(file, key.toString("base64"), { mode: 0o600 });
  return key;
}

/**
 * The composition root of the embedded runtime: DynamoDB Local, the local provider and transport, the
 * in-process ASL executor, the scheduler and the Hono app on 127.0.0.1. Resumes unfinished runs at start
 * and fires schedules that fell due while it was down.
 */
export async function startLocalRuntime(opts: LocalRuntimeOptions): Promise<LocalRuntime> {
  const dataDir = resolve(opts.dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const clock = opts.clock ?? systemClock;
  // One runtime per folder, before anything in it is touched: a second start refuses here (DataDirInUseError).
  const lock = acquireRuntimeLock(dataDir);

  let client: DynamoDBClient;
  let stopDynamo = async () => {};
  if (opts.dynamoEndpoint) {
    client = localClient(opts.dynamoEndpoint);
    stopDynamo = async () => client.destroy();
  } else {
    try {
      const ddb = await superviseDynamoLocal({
        dbPath: join(dataDir, "dynamodb"),
        pidFile: join(dataDir, "dynamodb.pid"),
        ...(opts.dynamoRestartDelayMs !== undefined ? { restartDelayMs: opts.dynamoRestartDelayMs } : {}),
      });
      client = ddb.client;
      stopDynamo = ddb.stop;
    } catch (err) {
      lock.release();
      throw err;
    }
  }

  let server: ReturnType<typeof serve> | undefined;
  let timer: NodeJS.Timeout | undefined;
  const executor = new LocalExecutor({ waitMs: opts.waitMs ?? 1000 });
  const connections = new TransportPool(opts.sshPool);
  let hostApiUrl: string | undefined;
  try {
    const table = opts.table ?? "labfleet";
    await ensureTable(client, table);
    const store = createStore(client, table);
    const provider = new LocalProvider(join(dataDir, "hosts"));
    const labfleetHome = opts.labfleetHome ?? defaultLabfleetHome();
    configure({
      store,
      clock,
      providers: { local: provider, static: new StaticProvider(), enrolled: new EnrolledProvider() },
      secrets: fileSecretStore(labfleetHome),
      sshPublicKey: () => managedPublicKey(labfleetHome),
      transport: transportFactory({
        labfleetHome,
        ...(process.env.SSH_AUTH_SOCK ? { agentSocket: process.env.SSH_AUTH_SOCK } : {}),
        pool: connections,
      }),
      connections,
      workflows: executor,
      accessKey: loadOrCreateKey(join(dataDir, "access.key")),
      checks: { run: (workshop, hostId) => runLabChecks(workshop, hostId) },
      // Hosts push their labs' progress to this runtime's own address (local sandboxes and SSH hosts on this
      // machine reach 127.0.0.1), known once the server listens.
      hostApiUrl: () => hostApiUrl,
    });

    const token = opts.token ?? randomBytes(24).toString("base64url");
    const app = createApp({
      auth: instructorAuth(bootstrapAuth(token)),
      authConfig: authConfigFromEnv(process.env),
    });
    const port = await new Promise<number>((res, rej) => {
      server = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: opts.port ?? 0 }, (info: AddressInfo) =>
        res(info.port),
      );
      server.once("error", rej);
    });
    const url = `http://127.0.0.1:${port}`;
    hostApiUrl = opts.hostApiUrl ?? url;
    const runtimeFile = join(dataDir, RUNTIME_FILE);
    writeFileSync(runtimeFile, JSON.stringify({ url, token, pid: process.pid }), { mode: 0o600 });
    lock.setUrl(url);

    const resumed: string[] = [];
    await withActor({ type: "system", id: "runtime" }, async () => {
      for (const run of await unfinishedRuns()) {
        log.info("resuming run", { workshop: run.workshop, runId: run.runId, kind: run.kind });
        await executor.start(run.kind, {
          workshop: run.workshop,
          runId: run.runId,
          force: run.force ?? false,
        });
        resumed.push(run.runId);
      }
      for (const job of await unfinishedExecJobs()) {
        log.info("resuming exec job", job);
        await executor.start("exec", { workshop: job.workshop, runId: job.jobId });
      }
    });

    let ticking: Promise<number> | undefined;
    const tick = () => {
      // Due schedules, then every waiting line (the fallback for a lab freed where no serving pass followed), then
      // the leftovers of torn-down workshops.
      ticking ??= withActor({ type: "system", id: "scheduler" }, async () => {
        const fired = await runDueSchedules();
        await serveAllQueues();
        // Torn-down workshops: anything found left is added to their teardown receipts.
        await recheckReceipts();
        // Enrolled hosts whose agents stopped calling in are marked unreachable.
        await markAllSilentHosts();
        // Approved enrolled hosts that joined while the workshop was busy are deployed once it is free.
        await deployAllWaitingHosts();
        return fired;
      }).finally(() => {
        ticking = undefined;
      });
      return ticking;
    };
    // Health checks of ready labs (shared/fleet/health.ts) run beside the schedules, never holding them up: a
    // pass that takes long (labs timing out) is not started again until it ends.
    let checking: ReturnType<typeof healthPass> | undefined;
    const health = () => {
      checking ??= withActor({ type: "system", id: "health" }, () => healthPass()).finally(() => {
        checking = undefined;
      });
      return checking;
    };
    const passFailed = (what: string) => (err: unknown) =>
      // Due schedules stay pending and due checks due: the next pass after the store is back runs them.
      isStoreUnreachable(err)
        ? log.warn(`${what} pass skipped: the store is unreachable`, { error: errorMessage(err) })
        : log.error(`${what} pass failed`, { error: errorMessage(err) });
    await tick();
    timer = setInterval(() => {
      tick().catch(passFailed("scheduler"));
      health().catch(passFailed("health"));
    }, opts.schedulerIntervalMs ?? 5000);
    timer.unref();

    // Idle keep-alive connections close at once; one still answering gets a moment, then is cut.
    const closeServer = () =>
      new Promise<void>((res) => {
        if (!server) return res();
        const cut = setTimeout(() => (server as unknown as HttpServer).closeAllConnections?.(), 3000);
        server.close(() => {
          clearTimeout(cut);
          res();
        });
        (server as unknown as HttpServer).closeIdleConnections?.();
      });
    const close = async () => {
      if (timer) clearInterval(timer);
      await ticking?.catch(() => undefined);
      await checking?.catch(() => undefined);
      const running = executor.running;
      await executor.close();
      if (opts.stopLabsOnClose) {
        for (const runId of running) log.info("run paused; it resumes at the next start", { runId });
        await stopBuildingLabs(store).catch((err) =>
          log.warn("stopping labs failed", { error: errorMessage(err) }),
        );
      }
      await closeServer();
      // Last, once nothing can start an operation on a host: every pooled SSH connection ends.
      await connections.close();
      try {
        if (JSON.parse(readFileSync(runtimeFile, "utf8")).pid === process.pid)
          rmSync(runtimeFile, { force: true });
      } catch {
        // already gone
      }
      await stopDynamo();
      lock.release();
    };
    return { url, token, store, executor, provider, connections, resumed, tick, health, close };
  } catch (err) {
    if (timer) clearInterval(timer);
    await executor.close();
    await connections.close();
    server?.close();
    await stopDynamo();
    lock.release();
    throw err;
  }
}

async function stopBuildingLabs(store: Store): Promise<void> {
  const workshops = (await store.workshop.query.all({}).go({ pages: "all" })).data;
  for (const w of workshops) {
    for (const h of await listHosts(w.name)) {
      if (h.provider !== "local" || h.state !== "deploying" || !h.address) continue;
      await stopLab(new LocalTransport(h.address), w.name);
    }
  }
}
