import { createWriteStream, mkdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { setLogSink } from "../shared/runtime/logger.ts";
import { validateWorkshopYaml } from "../shared/workshop/load.ts";
import { ApiClient, CliError } from "./client.ts";
import { runLiveLine } from "./live-line.ts";
import { DataDirInUseError, lockOwner } from "./local/lock.ts";
import { ensureNeeds, RUNTIME_NEEDS } from "./local/os-packages.ts";
import { startLocalRuntime } from "./local/runtime.ts";
import { follow } from "./main.ts";
import { countsLine, LINES_PER_LAB_MAX } from "./progress.ts";
import { block, clean, detailLines, type Output, paint, runLine } from "./render.ts";

export interface DevOptions {
  file?: string;
  port?: number;
  dataDir: string;
}

export const DEFAULT_PORT = 8787;

/**
 * `labfleet dev`: the embedded runtime in the foreground. With -f it submits the workshop, runs `up`
 * and draws per-host progress; then it stays up (API, console, scheduler) until Ctrl-C.
 */
export async function cmdDev(opts: DevOptions, out: Output): Promise<number> {
  let workshop: { yaml: string; baseDir: string; name: string } | undefined;
  if (opts.file) {
    let yaml: string;
    try {
      yaml = readFileSync(opts.file, "utf8");
    } catch (err) {
      throw new CliError(
        `cannot read ${opts.file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
        2,
      );
    }
    const result = validateWorkshopYaml(yaml);
    if (!result.ok) throw new CliError(`${opts.file} is not valid\n${detailLines(result.errors)}`, 1);
    workshop = { yaml, baseDir: dirname(resolve(opts.file)), name: result.workshop.name };
  }

  // What the local runtime needs from the OS (Java for DynamoDB Local, setsid, tar): installed as root with
  // apt-get, or the exact command for this platform, before anything starts or is written.
  const needs = process.env.LABFLEET_DYNAMODB_ENDPOINT
    ? RUNTIME_NEEDS.filter((n) => n.command !== "java")
    : RUNTIME_NEEDS;
  const ready = ensureNeeds(needs, { who: "labfleet dev", log: (line) => out.write(`${line}\n`) });
  if (!ready.ok) throw new CliError(ready.message, 1);

  const dataDir = resolve(opts.dataDir);
  // A folder in use is refused before anything starts or is written (its log included); startLocalRuntime
  // takes the lock itself, and refuses the same way if another start won the race meanwhile.
  const owner = lockOwner(dataDir);
  if (owner) throw new CliError(new DataDirInUseError(dataDir, owner).message, 2);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const logFile = join(dataDir, "runtime.log");
  const logStream = createWriteStream(logFile, { flags: "a", mode: 0o600 });
  setLogSink((line) => logStream.write(`${line}\n`));

  out.write(
    `labfleet dev: starting the local runtime (data in ${clean(opts.dataDir)}, logs in ${clean(join(opts.dataDir, "runtime.log"))})\n`,
  );
  const started = Date.now();
  // For tests and advanced use: an external DynamoDB endpoint and table, and a shorter poll wait.
  const env = process.env;
  const base = {
    dataDir,
    stopLabsOnClose: true,
    ...(env.LABFLEET_DYNAMODB_ENDPOINT ? { dynamoEndpoint: env.LABFLEET_DYNAMODB_ENDPOINT } : {}),
    ...(env.LABFLEET_TABLE ? { table: env.LABFLEET_TABLE } : {}),
    ...(env.LABFLEET_WAIT_MS ? { waitMs: Number(env.LABFLEET_WAIT_MS) } : {}),
    ...(env.LABFLEET_DYNAMODB_RESTART_MS
      ? { dynamoRestartDelayMs: Number(env.LABFLEET_DYNAMODB_RESTART_MS) }
      : {}),
  };
  const runtime = await startLocalRuntime({ ...base, port: opts.port ?? DEFAULT_PORT }).catch(async (err) => {
    if (err instanceof DataDirInUseError) throw new CliError(err.message, 2);
    if (!/EADDRINUSE/.test(String(err))) throw err;
    if (opts.port === undefined) return startLocalRuntime({ ...base, port: 0 });
    throw new CliError(
      `port ${opts.port} on 127.0.0.1 is in use: choose another with --port, or --port 0 for any`,
      2,
    );
  });
  const consoleUrl = `${runtime.url}/console#token=${runtime.token}`;
  // One write: whoever reads the banner also gets the resume line.
  out.write(
    `runtime up in ${((Date.now() - started) / 1000).toFixed(1)}s at ${runtime.url}\n` +
      (runtime.resumed.length ? `resumed ${runtime.resumed.length} unfinished run(s)\n` : ""),
  );

  let stopping = false;
  const stopped = new Promise<void>((res) => {
    const onSignal = () => {
      if (stopping) return;
      stopping = true;
      out.write(
        "\nstopping (labs still building on local hosts are stopped; their run resumes and rebuilds them at the next start)\n",
      );
      res();
    };
    process.once("SIGINT", onSignal);
    process.once("SIGTERM", onSignal);
  });

  let exitCode = 0;
  if (workshop) {
    const client = new ApiClient({ url: runtime.url, token: runtime.token });
    const upStarted = Date.now();
    const work = (async () => {
      await client.submit(workshop.yaml, workshop.baseDir);
      const { run } = await client.up(workshop.name);
      out.write(`up ${clean(workshop.name)}: run ${clean(run.id)}\n`);
      const s = await follow(client, workshop.name, run.id, out, 500);
      const final = s.runs.find((r) => r.id === run.id);
      if (final) out.write(`${runLine(final)}\n`);
      const ready = s.hostList.filter((h) => h.state === "ready").length;
      out.write(`\nInstructor console: ${clean(consoleUrl)}\n`);
      // Each lab, or past LINES_PER_LAB_MAX labs their counts and the failed ones (`labfleet status` lists all).
      const large = s.hostList.length > LINES_PER_LAB_MAX;
      if (large) out.write(`  ${countsLine(out, s.hostList)}\n`);
      for (const h of large ? s.hostList.filter((h) => h.state === "failed") : s.hostList) {
        out.write(
          `  ${clean(h.id)}  ${paint(out, h.state)}${h.state === "failed" && h.error ? `  ${clean(h.error.split("\n")[0])}` : ""}\n`,
        );
      }
      // With portal.enabled, the workflow has opened the claim portal: what goes on the slide.
      const portal = await client
        .call<{ code: string; state: string }>(
          "GET",
          `/workshops/${encodeURIComponent(workshop.name)}/portal/info`,
        )
        .catch(() => undefined);
      if (portal)
        out.write(
          `\nStudent portal: ${clean(runtime.url)}/  code ${clean(portal.code)}  (claiming ${clean(portal.state)})\n`,
        );
      out.write(
        `${ready}/${s.hostList.length} labs ready, ${((Date.now() - upStarted) / 1000).toFixed(1)}s after up started. ` +
          "Press Ctrl-C to stop (`labfleet down -f FILE` tears the workshop down).\n",
      );
      if (ready !== s.hostList.length) exitCode = 1;
      // Until Ctrl-C: claims, free labs, time left and the current code, kept current.
      const intervalMs = Number(env.LABFLEET_LIVE_MS) || 2000;
      await runLiveLine(client, workshop.name, out, stopped, intervalMs);
    })();
    await Promise.race([
      work.catch((err) => {
        if (stopping) return; // the follow loop loses its API when Ctrl-C closes the runtime
        out.write(`labfleet: ${block((err as Error).message)}\n`);
        exitCode = 1;
      }),
      stopped,
    ]);
  } else {
    out.write(`Instructor console: ${clean(consoleUrl)}\nPress Ctrl-C to stop.\n`);
  }
  await stopped;
  await runtime.close();
  await new Promise<void>((res) => logStream.end(res));
  out.write("stopped\n");
  return exitCode;
}
