import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { afterAll, beforeAll, inject } from "vitest";
import { localClient } from "../../../cli/local/dynamodb.ts";
import { FUNCTIONS, type FunctionName } from "../../../infra/permissions.ts";
import type { LambdaBuild } from "../../../scripts/build-lambdas.ts";
import { ensureTable } from "../../../shared/store/table.ts";
import { type FixtureRepo, type GitHttpServer, makeFixtureRepo, startGitHttp } from "../git-http.ts";
import { fixturesDir, removeDir, tempDir, uniqueTable, waitFor } from "../runtime.ts";
import { FakeAwsAccount, type FakeAwsAccountOptions } from "./account.ts";
import { FAKE_SUBNET } from "./ec2.ts";

/**
 * A labfleet deployment on the AWS double, for the tests of the cloud path: the run's Lambda bundles
 * (built once by the global setup), a table of its own in the shared DynamoDB Local, the fixture labs served
 * as git repositories over HTTP on 127.0.0.1 (the cloud takes git sources only), and helpers that talk to the
 * instructor API through the Api's HTTP API (API Gateway in front of the function), as the CLI does.
 */

// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field by the tests
type Json = any;

export interface Cloud {
  account: FakeAwsAccount;
  token: string;
  /** `git:http://127.0.0.1:PORT/<lab>.git` for a fixture lab of tests/fixtures/labs/. */
  lab(name: string): string;
  git: GitHttpServer;
  /** The instructor API through the Api's HTTP API, as the CLI calls it: `/api/workshops<path>`. */
  api(
    path: string,
    body?: unknown,
    method?: string,
  ): Promise<{ status: number; body: Json; headers: Headers }>;
  /** Polls a run until it has ended. */
  runToEnd(workshop: string, runId: string, timeoutMs?: number): Promise<Json>;
  close(): Promise<void>;
}

export const OPERATOR_CIDR = "198.51.100.0/24";

/** An aws workshop of `count` hosts for a fixture lab's git source. */
export function awsWorkshopYaml(o: {
  name: string;
  source: string;
  count?: number;
  setup?: string;
  health?: string;
  extraLab?: string;
  extraProvider?: string;
  pollSeconds?: number;
  timeoutMinutes?: number;
}): string {
  const indent = (block: string | undefined) =>
    block
      ? `${block
          .trim()
          .split("\n")
          .map((l) => `  ${l}`)
          .join("\n")}\n`
      : "";
  return `name: ${o.name}
lab:
  source: ${o.source}
  setup: ${JSON.stringify(o.setup ?? "bash setup.sh")}
  health: ${JSON.stringify(o.health ?? "test -f built")}
  poll_seconds: ${o.pollSeconds ?? 5}
  timeout_minutes: ${o.timeoutMinutes ?? 5}
${indent(o.extraLab)}provider:
  type: aws
  count: ${o.count ?? 2}
  region: eu-west-1
  subnet_id: ${FAKE_SUBNET}
  instance_type: m7i.large
  operator_cidrs: [${OPERATOR_CIDR}]
  ttl_hours: 4
${indent(o.extraProvider)}`;
}

export async function startCloud(
  opts: Partial<Omit<FakeAwsAccountOptions, "dir" | "dynamoEndpoint" | "table" | "build" | "secrets">> & {
    labs?: string[];
    secrets?: FakeAwsAccountOptions["secrets"];
  } = {},
): Promise<Cloud> {
  const dir = tempDir("labfleet-cloud-");
  const table = uniqueTable();
  const ddb = localClient(inject("dynamoEndpoint"));
  await ensureTable(ddb, table);
  ddb.destroy();
  const repos: Record<string, FixtureRepo> = {};
  for (const lab of opts.labs ?? ["quick"])
    repos[`${lab}.git`] = makeFixtureRepo({ from: join(fixturesDir, "labs", lab) });
  const git = await startGitHttp({
    repos: Object.fromEntries(Object.entries(repos).map(([name, r]) => [name, r.dir])),
  });
  const token = `cloud-test-${randomBytes(16).toString("hex")}`;
  const build = JSON.parse(inject("lambdaBuild")) as Pick<LambdaBuild, "functions">;
  const account = await FakeAwsAccount.start({
    timing: { waitMs: 200, retryMs: 100 },
    ...opts,
    dir,
    dynamoEndpoint: inject("dynamoEndpoint"),
    table,
    build,
    secrets: {
      AccessKey: randomBytes(32).toString("base64"),
      InstructorToken: token,
      ...(opts.secrets ?? {}),
    },
  });
  const api: Cloud["api"] = async (path, body, method) => {
    const res = await fetch(`${account.apiEndpoint}/api/workshops${path}`, {
      method: method ?? (body === undefined ? "GET" : "POST"),
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    const type = res.headers.get("content-type") ?? "";
    const parsed = type.includes("json") ? await res.json() : Buffer.from(await res.arrayBuffer());
    return { status: res.status, body: parsed, headers: res.headers };
  };
  return {
    account,
    token,
    git,
    lab: (name) => `git:${git.url(`${name}.git`)}`,
    api,
    // The run's record is final a few steps before its execution ends: both are waited for.
    runToEnd: (workshop, runId, timeoutMs = 60_000) =>
      waitFor(
        `run ${runId} to end`,
        async () => {
          const running = [...account.sfn.executions.values()].some(
            (e) => e.name === runId && e.status === "RUNNING",
          );
          if (running) return undefined;
          const { body } = await api(`/${workshop}/runs/${runId}`);
          return body?.run && body.run.state !== "running" ? body.run : undefined;
        },
        timeoutMs,
      ),
    close: async () => {
      await account.close();
      await git.close();
      for (const r of Object.values(repos)) r.remove();
      removeDir(dir);
    },
  };
}

/**
 * The deployment a test file's tests share: started on the AWS double before them (`setup` runs once it is up,
 * within `timeoutMs` in all), closed after them. What it returns stands for that deployment from then on, so a
 * file writes `const cloud = cloudForTests()` and uses `cloud` in its tests and helpers as it would the
 * deployment itself.
 */
export function cloudForTests(
  opts: Parameters<typeof startCloud>[0] = {},
  setup?: (cloud: Cloud) => Promise<void>,
  timeoutMs = 120_000,
): Cloud {
  let started: Cloud | undefined;
  beforeAll(async () => {
    started = await startCloud(opts);
    await setup?.(started);
  }, timeoutMs);
  afterAll(async () => {
    await started?.close();
  });
  return new Proxy({} as Cloud, {
    get(_, key) {
      if (!started) throw new Error("the AWS double is not up yet: use the deployment in a test or a hook");
      return started[key as keyof Cloud];
    },
  });
}

/**
 * Each function's longest invocation since `since` (epoch ms), by its name in infra/permissions.ts, with its
 * timeout; and the invocations that did not end ok (`function requestId outcome`).
 */
export function invocationsSince(
  account: FakeAwsAccount,
  since: number,
): { longest: Map<string, { ms: number; timeoutMs: number }>; notOk: string[] } {
  const byDeployed = new Map(
    (Object.keys(FUNCTIONS) as FunctionName[]).map((fn) => [account.deployed.functionName(fn), fn]),
  );
  const longest = new Map<string, { ms: number; timeoutMs: number }>();
  const notOk: string[] = [];
  for (const inv of account.lambda.invocations.filter((i) => i.start >= since)) {
    if (inv.outcome !== "ok") notOk.push(`${inv.functionName} ${inv.requestId} ${inv.outcome}`);
    const config = account.lambda.config(inv.functionName);
    if (!config) continue;
    const name = byDeployed.get(inv.functionName) ?? inv.functionName;
    const seen = longest.get(name);
    if (!seen || inv.durationMs > seen.ms)
      longest.set(name, { ms: inv.durationMs, timeoutMs: account.lambda.timeoutOf(config) });
  }
  return { longest, notOk };
}
