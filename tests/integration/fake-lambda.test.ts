import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FUNCTIONS, type FunctionName } from "../../infra/permissions.ts";
import { buildBundle, buildLambdas, type LambdaBundle } from "../../scripts/build-lambdas.ts";
import { AwsError, arn, credentialsFor } from "../harness/aws/core.ts";
import {
  FakeLambda,
  type FakeLambdaOptions,
  type LambdaFunctionConfig,
  LambdaThrottle,
  lambdaFunctionsFromInfra,
  SYNC_REQUEST_LIMIT,
  SYNC_RESPONSE_LIMIT,
} from "../harness/aws/lambda.ts";

const ENDPOINT = "http://127.0.0.1:9/";
const work = mkdtempSync(join(tmpdir(), "labfleet-fake-lambda-test-"));
let fixture: LambdaBundle;

beforeAll(async () => {
  fixture = await buildBundle({ entry: "tests/fixtures/lambda/handlers.ts", dir: join(work, "fixture") });
});
afterAll(() => rmSync(work, { recursive: true, force: true }));

function fn(name: string, over: Partial<LambdaFunctionConfig> = {}): LambdaFunctionConfig {
  return {
    name,
    arn: arn.lambda(name),
    handler: { dir: fixture.dir, file: fixture.file, exportName: name },
    timeoutMs: 10_000,
    memoryMb: 256,
    env: {},
    ...over,
  };
}

async function poll<T>(what: string, check: () => T | undefined | false, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Runs `body` with a FakeLambda, then closes it and checks that none of its sandboxes outlived it. */
async function withLambda(
  opts: Omit<FakeLambdaOptions, "endpoint">,
  body: (lambda: FakeLambda) => Promise<void>,
): Promise<void> {
  const lambda = new FakeLambda({ endpoint: ENDPOINT, ...opts });
  try {
    await body(lambda);
  } finally {
    await lambda.close();
  }
  for (const r of lambda.invocations) if (r.pid !== undefined) expect(alive(r.pid)).toBe(false);
}

const json = (r: { payload: Buffer }) => JSON.parse(r.payload.toString("utf8"));
const invokeJson = (lambda: FakeLambda, name: string, event: unknown) =>
  lambda.invoke(name, JSON.stringify(event));

describe("FakeLambda", () => {
  it("runs a function in a sandbox that later invocations reuse, with Lambda's context", async () => {
    await withLambda({ functions: [fn("echo"), fn("callback")] }, async (lambda) => {
      const first = await invokeJson(lambda, "echo", { n: 1 });
      const second = await lambda.invoke(arn.lambda("echo"), undefined);
      expect(first.statusCode).toBe(200);
      expect(first.functionError).toBeUndefined();
      expect(first.executedVersion).toBe("$LATEST");
      const a = json(first);
      const b = json(second);
      expect(a.pid).toBe(b.pid);
      expect(a.event).toEqual({ n: 1 });
      // An empty payload arrives as {}.
      expect(b.event).toEqual({});
      expect(a.context).toMatchObject({
        awsRequestId: first.requestId,
        functionName: "echo",
        functionVersion: "$LATEST",
        invokedFunctionArn: arn.lambda("echo"),
        memoryLimitInMB: "256",
        logGroupName: "/aws/lambda/echo",
        callbackWaitsForEmptyEventLoop: true,
      });
      expect(a.context.logStreamName).toMatch(/^\d{4}\/\d\d\/\d\d\/\[\$LATEST\][0-9a-f]{32}$/);
      expect(a.context.remaining).toBeGreaterThan(9000);
      expect(a.context.remaining).toBeLessThanOrEqual(10_000);
      // The nodejs22.x bootstrap's memory flags for 256 MB.
      expect(a.execArgv).toEqual(
        expect.arrayContaining(["--max-semi-space-size=12", "--max-old-space-size=231"]),
      );

      const [cold, warm] = lambda.invocations;
      expect(cold).toMatchObject({
        functionName: "echo",
        coldStart: true,
        outcome: "ok",
        memoryMb: 256,
        pid: a.pid,
      });
      expect(cold?.initDurationMs).toBeGreaterThan(0);
      expect(cold?.billedDurationMs).toBe(Math.ceil((cold?.durationMs ?? 0) + (cold?.initDurationMs ?? 0)));
      expect(warm).toMatchObject({ coldStart: false, outcome: "ok" });
      expect(warm?.initDurationMs).toBeUndefined();
      expect(warm?.billedDurationMs).toBe(Math.ceil(warm?.durationMs ?? 0));
      expect(warm?.maxMemoryUsedMb).toBeGreaterThan(10);

      expect(json(await lambda.invoke("echo:$LATEST", "{}")).pid).toBe(a.pid);
      expect(json(await lambda.invoke("callback", "{}"))).toEqual({ via: "callback" });
      for (const name of ["nope", "echo:7", "arn:aws:lambda:us-east-1:123456789012:function:echo"]) {
        const e = await lambda.invoke(name, "{}").catch((err: unknown) => err);
        expect(e).toBeInstanceOf(AwsError);
        expect(e).toMatchObject({ code: "ResourceNotFoundException", status: 404 });
      }
      expect((await lambda.invoke("echo", "{}", { invocationType: "DryRun" })).statusCode).toBe(204);
    });
  });

  it("starts a sandbox per concurrent invocation, up to the account's concurrency limit", async () => {
    await withLambda({ functions: [fn("hold")], concurrencyLimit: 2 }, async (lambda) => {
      const release = join(work, "release");
      const a = invokeJson(lambda, "hold", { release });
      const b = invokeJson(lambda, "hold", { release });
      await poll("two invocations in flight", () => lambda.inFlight === 2);
      const throttled = await invokeJson(lambda, "hold", { release }).catch((e: unknown) => e);
      expect(throttled).toBeInstanceOf(LambdaThrottle);
      expect(throttled).toMatchObject({
        code: "TooManyRequestsException",
        status: 429,
        reason: "ConcurrentInvocationLimitExceeded",
        message: "Rate Exceeded.",
      });
      writeFileSync(release, "");
      const pids = (await Promise.all([a, b])).map((r) => json(r).pid as number);
      expect(new Set(pids).size).toBe(2);
      expect(lambda.sandboxes("hold").sort()).toEqual([...pids].sort());
      expect(pids).toContain(json(await invokeJson(lambda, "hold", { release })).pid);
      expect(lambda.invocations).toHaveLength(3);
    });
  });

  it("answers a thrown error as Lambda does, and keeps the sandbox; an exiting runtime is replaced", async () => {
    await withLambda({ functions: [fn("fail")] }, async (lambda) => {
      const boom = await invokeJson(lambda, "fail", { kind: "error" });
      expect(boom.statusCode).toBe(200);
      expect(boom.functionError).toBe("Unhandled");
      const body = json(boom);
      expect(Object.keys(body).sort()).toEqual(["errorMessage", "errorType", "trace"]);
      expect(body).toMatchObject({ errorType: "Error", errorMessage: "boom" });
      expect(body.trace[0]).toBe("Error: boom");
      expect(body.trace.length).toBeGreaterThan(1);
      const pid = lambda.sandboxes("fail")[0];

      expect(json(await invokeJson(lambda, "fail", { kind: "visible" }))).toMatchObject({
        errorType: "VisibleError",
        errorMessage: "workshop.not_found",
      });
      expect(json(await invokeJson(lambda, "fail", { kind: "zod" })).errorType).toBe("ZodError");
      expect(json(await invokeJson(lambda, "fail", { kind: "type" })).errorType).toBe("TypeError");
      expect(json(await invokeJson(lambda, "fail", { kind: "string" }))).toEqual({
        errorType: "string",
        errorMessage: "plain string",
        trace: [],
      });
      expect(lambda.sandboxes("fail")).toEqual([pid]);

      const rejected = await invokeJson(lambda, "fail", { kind: "rejection" });
      expect(json(rejected)).toMatchObject({
        errorType: "Runtime.UnhandledPromiseRejection",
        errorMessage: "Error: nobody waits for this",
      });
      await poll("the sandbox to end after an unhandled rejection", () => !alive(pid as number));

      const exited = await invokeJson(lambda, "fail", { kind: "exit" });
      expect(exited.functionError).toBe("Unhandled");
      expect(json(exited)).toEqual({
        errorType: "Runtime.ExitError",
        errorMessage: `RequestId: ${exited.requestId} Error: Runtime exited with error: exit status 3`,
      });
      const next = await invokeJson(lambda, "fail", { kind: "type" });
      expect(json(next).errorType).toBe("TypeError");
      expect(lambda.invocations.map((r) => r.outcome)).toEqual([
        "Error",
        "VisibleError",
        "ZodError",
        "TypeError",
        "string",
        "Runtime.UnhandledPromiseRejection",
        "Runtime.ExitError",
        "TypeError",
      ]);
      expect(lambda.invocations.at(-1)?.coldStart).toBe(true);
    });
  });

  it("times out after the function's timeout, discards the sandbox, and starts a new one", async () => {
    await withLambda({ functions: [fn("sleep")], timeoutMs: { sleep: 1000 } }, async (lambda) => {
      const started = Date.now();
      const r = await invokeJson(lambda, "sleep", { ms: 30_000 });
      expect(Date.now() - started).toBeLessThan(5000);
      expect(r.functionError).toBe("Unhandled");
      expect(json(r)).toEqual({
        errorType: "Sandbox.Timedout",
        errorMessage: `RequestId: ${r.requestId} Error: Task timed out after 1.00 seconds`,
      });
      const timedOut = lambda.invocations[0];
      expect(timedOut).toMatchObject({ outcome: "Sandbox.Timedout", durationMs: 1000 });
      await poll("the timed-out sandbox to end", () => !alive(timedOut?.pid as number));
      const next = await invokeJson(lambda, "sleep", { ms: 1 });
      expect(next.functionError).toBeUndefined();
      expect(json(next).pid).not.toBe(timedOut?.pid);
      expect(lambda.invocations[1]?.coldStart).toBe(true);
    });
  });

  it("counts getRemainingTimeInMillis down from the effective timeout", async () => {
    await withLambda({ functions: [fn("remaining")], timeoutMs: { remaining: 2000 } }, async (lambda) => {
      const { first, second } = json(await invokeJson(lambda, "remaining", {}));
      expect(first).toBeLessThanOrEqual(2000);
      expect(first).toBeGreaterThan(1500);
      expect(second).toBeLessThanOrEqual(first - 290);
    });
  });

  it("stops a sandbox that uses more memory than the function has", async () => {
    await withLambda({ functions: [fn("hog", { memoryMb: 128 })] }, async (lambda) => {
      const r = await invokeJson(lambda, "hog", { mb: 2048 });
      expect(r.functionError).toBe("Unhandled");
      expect(json(r)).toEqual({
        errorType: "Runtime.OutOfMemory",
        errorMessage: `RequestId: ${r.requestId} Error: Runtime exited with error: signal: killed`,
      });
      expect(lambda.invocations[0]?.maxMemoryUsedMb).toBeGreaterThanOrEqual(128);
      expect(json(await invokeJson(lambda, "hog", { mb: 16 }))).toEqual({ survived: 16 });
      expect(lambda.invocations[1]?.coldStart).toBe(true);
    });
  });

  it("keeps the 6 MB limits of a synchronous invocation", async () => {
    await withLambda({ functions: [fn("sized")] }, async (lambda) => {
      const wrapper = JSON.stringify({ text: "" }).length;
      const atLimit = JSON.stringify({ text: "x".repeat(SYNC_REQUEST_LIMIT - wrapper) });
      expect(Buffer.byteLength(atLimit)).toBe(6_291_456);
      expect(json(await lambda.invoke("sized", atLimit))).toEqual({ received: SYNC_REQUEST_LIMIT - wrapper });
      const tooBig = await lambda.invoke("sized", `${atLimit} `).catch((e: unknown) => e);
      expect(tooBig).toMatchObject({
        code: "RequestEntityTooLargeException",
        status: 413,
        message: "Request must be smaller than 6291456 bytes for the InvokeFunction operation",
      });
      const notJson = await lambda.invoke("sized", "{nope").catch((e: unknown) => e);
      expect(notJson).toMatchObject({ code: "InvalidRequestContentException", status: 400 });

      const largest = await invokeJson(lambda, "sized", { bytes: SYNC_RESPONSE_LIMIT });
      expect(largest.functionError).toBeUndefined();
      expect(largest.payload.length).toBe(6_291_556);
      const over = await invokeJson(lambda, "sized", { bytes: SYNC_RESPONSE_LIMIT + 1 });
      expect(over.functionError).toBe("Unhandled");
      expect(json(over)).toEqual({
        errorType: "Function.ResponseSizeTooLarge",
        errorMessage: "Response payload size exceeded maximum allowed payload size (6291556 bytes).",
      });
      expect(lambda.invocations.map((r) => r.outcome)).toEqual(["ok", "ok", "Function.ResponseSizeTooLarge"]);
    });
  });

  it("gives a function only Lambda's environment, with no git on its PATH", async () => {
    process.env.LABFLEET_PARENT_ONLY = "must not leak";
    const config = fn("environment", { env: { LABFLEET_STAGE: "test" }, principal: "Poll" });
    await withLambda({ functions: [config] }, async (lambda) => {
      const { env, path, git, shell, cwd } = json(await invokeJson(lambda, "environment", {}));
      expect(Object.keys(env).sort()).toEqual(
        [
          "_HANDLER",
          "AWS_ACCESS_KEY_ID",
          "AWS_DEFAULT_REGION",
          "AWS_EC2_METADATA_DISABLED",
          "AWS_ENDPOINT_URL",
          "AWS_EXECUTION_ENV",
          "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
          "AWS_LAMBDA_FUNCTION_NAME",
          "AWS_LAMBDA_FUNCTION_VERSION",
          "AWS_LAMBDA_INITIALIZATION_TYPE",
          "AWS_LAMBDA_LOG_GROUP_NAME",
          "AWS_LAMBDA_LOG_STREAM_NAME",
          "AWS_REGION",
          "AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED",
          "AWS_SECRET_ACCESS_KEY",
          "AWS_SESSION_TOKEN",
          "LABFLEET_STAGE",
          "LAMBDA_RUNTIME_DIR",
          "LAMBDA_TASK_ROOT",
          "LANG",
          "LD_LIBRARY_PATH",
          "NODE_PATH",
          "PATH",
          "TZ",
        ].sort(),
      );
      const creds = credentialsFor("Poll");
      expect(env).toMatchObject({
        _HANDLER: "tests/fixtures/lambda/handlers.environment",
        AWS_ACCESS_KEY_ID: creds.accessKeyId,
        AWS_SECRET_ACCESS_KEY: creds.secretAccessKey,
        AWS_SESSION_TOKEN: creds.sessionToken,
        AWS_REGION: "eu-west-1",
        AWS_DEFAULT_REGION: "eu-west-1",
        AWS_ENDPOINT_URL: ENDPOINT,
        AWS_EC2_METADATA_DISABLED: "true",
        AWS_EXECUTION_ENV: "AWS_Lambda_nodejs22.x",
        AWS_LAMBDA_FUNCTION_NAME: "environment",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE: "256",
        AWS_LAMBDA_FUNCTION_VERSION: "$LATEST",
        LAMBDA_TASK_ROOT: fixture.dir,
        LABFLEET_STAGE: "test",
        TZ: ":UTC",
        LANG: "en_US.UTF-8",
      });
      expect(path.sort()).toEqual(["node", "sh"]);
      expect(git).toBe("ENOENT");
      expect(shell).toBe("ok");
      expect(cwd).toBe(fixture.dir);
    });
    delete process.env.LABFLEET_PARENT_ONLY;
    expect(
      () => new FakeLambda({ endpoint: ENDPOINT, functions: [fn("echo", { env: { AWS_REGION: "x" } })] }),
    ).toThrow(/reserved keys .*AWS_REGION/);
  });

  it("serves a Function URL: payload format 2.0 events in, HTTP responses out", async () => {
    await withLambda({ functions: [fn("web")] }, async (lambda) => {
      const url = await lambda.functionUrl("web");
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
      expect(await lambda.functionUrl("web")).toBe(url);

      const bytes = Uint8Array.from([0, 1, 2, 255]);
      const res = await fetch(`${url}echo/path?a=1&a=2&b=x%20y`, {
        method: "POST",
        headers: {
          "content-type": "application/octet-stream",
          cookie: "c1=v1; c2=v2",
          "user-agent": "fake-test",
        },
        body: bytes,
      });
      expect(res.status).toBe(201);
      expect(res.headers.get("x-custom")).toBe("yes");
      expect(res.headers.get("content-type")).toBe("application/json");
      expect(res.headers.getSetCookie()).toEqual(["a=1; Path=/", "b=2; HttpOnly"]);
      const event = (await res.json()) as {
        headers: Record<string, string | undefined>;
        requestContext: { domainName: string; apiId: string; time: string; timeEpoch: unknown };
      };
      expect(event).toMatchObject({
        version: "2.0",
        routeKey: "$default",
        rawPath: "/echo/path",
        rawQueryString: "a=1&a=2&b=x%20y",
        queryStringParameters: { a: "1,2", b: "x y" },
        cookies: ["c1=v1", "c2=v2"],
        isBase64Encoded: true,
        body: Buffer.from(bytes).toString("base64"),
        requestContext: {
          accountId: "123456789012",
          routeKey: "$default",
          stage: "$default",
          requestId: res.headers.get("x-amzn-requestid"),
          http: {
            method: "POST",
            path: "/echo/path",
            protocol: "HTTP/1.1",
            sourceIp: "127.0.0.1",
            userAgent: "fake-test",
          },
        },
      });
      expect(event.headers.cookie).toBeUndefined();
      expect(event.headers["content-type"]).toBe("application/octet-stream");
      expect(event.requestContext.domainName).toBe(new URL(url).host);
      expect(event.requestContext.apiId).toMatch(/^[a-z0-9]{32}$/);
      expect(event.requestContext.time).toMatch(/^\d\d\/[A-Z][a-z]{2}\/\d{4}:\d\d:\d\d:\d\d \+0000$/);
      expect(typeof event.requestContext.timeEpoch).toBe("number");

      // Text bodies arrive as text; repeated headers joined with commas; no query, no cookies.
      const text = await new Promise<Record<string, unknown>>((resolve, reject) => {
        const req = request(
          `${url}t`,
          { method: "PUT", headers: { "content-type": "application/json", "x-multi": ["1", "2"] } },
          (r) => {
            let data = "";
            r.on("data", (c) => {
              data += c;
            });
            r.on("end", () => resolve(JSON.parse(data)));
          },
        );
        req.on("error", reject);
        req.end('{"k":"v"}');
      });
      expect(text).toMatchObject({ body: '{"k":"v"}', isBase64Encoded: false, rawQueryString: "" });
      expect((text.headers as Record<string, string>)["x-multi"]).toBe("1,2");
      expect(text.queryStringParameters).toBeUndefined();
      expect(text.cookies).toBeUndefined();

      const plain = await fetch(`${url}plain`);
      expect(plain.status).toBe(200);
      expect(plain.headers.get("content-type")).toBe("application/json");
      expect(await plain.text()).toBe('"just a string"');
      expect(await (await fetch(`${url}object`)).json()).toEqual({ hello: "world" });
      const binary = await fetch(`${url}binary`);
      expect(binary.headers.get("content-type")).toBe("image/png");
      expect([...new Uint8Array(await binary.arrayBuffer())]).toEqual([0, 1, 2, 3, 4, 255]);

      for (const path of ["fail", "big"]) {
        const failed = await fetch(`${url}${path}`);
        expect(failed.status).toBe(502);
        expect(await failed.text()).toBe("Internal Server Error");
      }
      expect(lambda.invocations.map((r) => r.outcome).slice(-2)).toEqual([
        "Error",
        "Function.ResponseSizeTooLarge",
      ]);
    });
  });

  it("builds the real bundles as SST does; every function's export loads on this Node, with ssh2 beside it", async () => {
    const build = await buildLambdas({ outDir: join(work, "real") });
    expect(build.target).toBe("node22");
    expect(build.bundles.map((b) => b.source).sort()).toEqual([
      "functions/lambda.ts",
      "web/lambda.ts",
      "web/portal-lambda.ts",
    ]);
    // The students' function bundles none of the instructor's side: no EC2, SSM, Step Functions or SSH code.
    const portal = build.bundles.find((b) => b.source === "web/portal-lambda.ts");
    const inputs = Object.keys(portal?.metafile?.inputs ?? {});
    expect(inputs.length).toBeGreaterThan(100);
    for (const forbidden of [
      "@aws-sdk/client-ec2",
      "@aws-sdk/client-ssm",
      "@aws-sdk/client-sfn",
      "ssh2",
      "shared/fleet/ops.ts",
      "web/console/",
    ]) {
      expect(
        inputs.filter((i) => i.includes(forbidden)),
        forbidden,
      ).toEqual([]);
    }
    for (const bundle of build.bundles) {
      expect(bundle.inputs).toContain(bundle.source);
      expect(bundle.inputs.filter((i) => i.includes("@cloud-copilot"))).toEqual([]);
      expect(bundle.inputs.some((i) => i.includes("node_modules/ssh2/"))).toBe(false);
      // ssh2 is installed beside every bundle that reaches hosts; the portal's has no SSH code and gets nothing.
      if (bundle.source === "web/portal-lambda.ts") expect(bundle.installed).toEqual([]);
      else expect(bundle.installed[0]).toBe("ssh2@1.17.0");
    }
    await expect(
      buildBundle({ entry: "tests/fixtures/lambda/agpl.ts", dir: join(work, "agpl") }),
    ).rejects.toThrow(/bundles AGPL @cloud-copilot code/);
    expect(existsSync(join(work, "agpl"))).toBe(false);
    const names = Object.keys(FUNCTIONS) as FunctionName[];
    const functions = lambdaFunctionsFromInfra(build, { env: () => ({}) });
    expect(functions.map((f) => f.name)).toEqual(names);
    expect(functions.find((f) => f.name === "Provision")).toMatchObject({
      timeoutMs: 900_000,
      memoryMb: 512,
    });
    expect(functions.find((f) => f.name === "Portal")).toMatchObject({ timeoutMs: 30_000, memoryMb: 1024 });
    await withLambda({ functions }, async (lambda) => {
      // Functions sharing a bundle share its exports: one sandbox per bundle, as the first of its functions.
      const first = build.bundles.map(
        (b) => names.find((n) => build.functions[n].dir === b.dir) as FunctionName,
      );
      const seen = new Map(
        await Promise.all(
          first.map(
            async (name) => [build.functions[name].dir, await lambda.inspect(name, ["ssh2"])] as const,
          ),
        ),
      );
      for (const name of names) {
        const handler = build.functions[name];
        const found = seen.get(handler.dir);
        expect(`${handler.file.replace(/\.mjs$/, "")}.${handler.exportName}`).toBe(FUNCTIONS[name].handler);
        expect(found?.exports[handler.exportName]).toBe("function");
        if (name === "Portal") continue;
        expect(found?.modules.ssh2).toMatchObject({ loaded: true });
        expect(found?.modules.ssh2?.resolved?.startsWith(join(handler.dir, "node_modules", "ssh2"))).toBe(
          true,
        );
      }
    });
  });
});
