// The bootstrap of one sandbox of the Lambda double (tests/harness/aws/lambda.ts): what the nodejs22.x runtime
// does inside an execution environment. It imports the bundle once (the Init phase), then serves invocations
// one at a time, sent by the parent over IPC instead of the Runtime API.
//
//   node lambda-runtime.mjs <bundle file> <export>             a sandbox
//   node lambda-runtime.mjs <bundle file> <export> --inspect   imports the bundle, reports its exports' types
//                                                               and how the given modules resolve, then exits
//
// Parent to child: { type: "invoke", requestId, event (the payload's JSON text), deadlineMs,
// invokedFunctionArn, clientContext? } and, for --inspect, { type: "inspect", modules }.
// Child to parent: { type: "ready" } | { type: "initError", error } | { type: "result", requestId, payload }
// | { type: "error", requestId, error } | { type: "inspected", ... }. An error is
// { errorType, errorMessage, trace }, as the runtime reports it.
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { format, types } from "node:util";

const [file, exportName, mode] = process.argv.slice(2);
const handlerName = process.env._HANDLER ?? `${file}.${exportName}`;

/** The runtime's error shape: the error's name, message and stack lines; a thrown non-error by its type. */
function toRuntimeError(error) {
  try {
    if (types.isNativeError(error) || (error && typeof error === "object" && "stack" in error)) {
      return {
        errorType: error.name,
        errorMessage: error.message,
        trace: String(error.stack ?? "").split("\n"),
      };
    }
    return { errorType: typeof error, errorMessage: String(error), trace: [] };
  } catch {
    return {
      errorType: "handled",
      errorMessage:
        "callback called with Error argument, but there was a problem while retrieving one or more of its message, name, and stack",
    };
  }
}

function send(message) {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send(message, () => resolve());
  });
}

// The runtime's console: one line per call, `time\trequestId\tLEVEL\tmessage`, newlines kept in one record.
let currentRequestId;
for (const [method, level] of [
  ["log", "INFO"],
  ["info", "INFO"],
  ["warn", "WARN"],
  ["error", "ERROR"],
  ["debug", "DEBUG"],
  ["trace", "TRACE"],
]) {
  console[method] = (...args) => {
    const text = format(...args).replaceAll("\n", "\r");
    process.stdout.write(
      `${new Date().toISOString()}\t${currentRequestId ?? "undefined"}\t${level}\t${text}\n`,
    );
  };
}

process.on("disconnect", () => process.exit(0));

/** The invocation running now, so an uncaught error is reported as its result. */
let current;

async function failCurrent(error) {
  const running = current;
  current = undefined;
  if (running) await send({ type: "error", requestId: running, error, fatal: true });
  // The runtime exits after an uncaught error; Lambda starts a new sandbox for the next invocation.
  process.exit(129);
}

process.on("uncaughtException", (error) => {
  console.error("Uncaught Exception", error);
  void failCurrent(toRuntimeError(error));
});
process.on("unhandledRejection", (reason) => {
  const message = reason instanceof Error ? `${reason.name}: ${reason.message}` : String(reason);
  console.error("Unhandled Promise Rejection", reason);
  void failCurrent({
    errorType: "Runtime.UnhandledPromiseRejection",
    errorMessage: message,
    trace: [`Runtime.UnhandledPromiseRejection: ${message}`],
  });
});

let mod;
try {
  mod = await import(pathToFileURL(file).href);
} catch (error) {
  const initError =
    error?.code === "ERR_MODULE_NOT_FOUND"
      ? {
          ...toRuntimeError(error),
          errorType: "Runtime.ImportModuleError",
          errorMessage: `Error: ${error.message}`,
        }
      : toRuntimeError(error);
  await send({ type: "initError", error: initError });
  process.exit(1);
}

if (mode === "--inspect") {
  process.on("message", async (message) => {
    if (message?.type !== "inspect") return;
    const require = createRequire(pathToFileURL(file).href);
    const modules = {};
    for (const name of message.modules ?? []) {
      try {
        const resolved = require.resolve(name);
        require(name);
        modules[name] = { resolved, loaded: true };
      } catch (error) {
        modules[name] = { error: String(error), loaded: false };
      }
    }
    const exportTypes = Object.fromEntries(Object.entries(mod).map(([k, v]) => [k, typeof v]));
    await send({ type: "inspected", exports: exportTypes, modules, pid: process.pid });
    process.exit(0);
  });
  await send({ type: "ready" });
} else {
  const handler = mod[exportName];
  if (handler === undefined) {
    await send({
      type: "initError",
      error: {
        errorType: "Runtime.HandlerNotFound",
        errorMessage: `${handlerName} is undefined or not exported`,
      },
    });
    process.exit(1);
  }
  if (typeof handler !== "function") {
    await send({
      type: "initError",
      error: { errorType: "Runtime.HandlerNotFound", errorMessage: `${handlerName} is not a function` },
    });
    process.exit(1);
  }

  /**
   * An async handler answers with its promise; a handler that returns no promise answers through its
   * callback (the nodejs22.x runtime still takes callback handlers). A non-async handler without a callback
   * parameter answers null, as the runtime ignores what it returns.
   */
  function run(event, context) {
    return new Promise((resolve, reject) => {
      let settled = false;
      const settle = (fn, value) => {
        if (settled) return;
        settled = true;
        fn(value);
      };
      const callback = (err, result) => (err ? settle(reject, err) : settle(resolve, result));
      let returned;
      try {
        returned = handler(event, context, callback);
      } catch (error) {
        settle(reject, error);
        return;
      }
      if (returned && typeof returned.then === "function") {
        returned.then(
          (v) => settle(resolve, v),
          (e) => settle(reject, e),
        );
      } else if (handler.length < 3) {
        settle(resolve, null);
      }
    });
  }

  const env = process.env;
  process.on("message", async (message) => {
    if (message?.type !== "invoke") return;
    const { requestId, deadlineMs } = message;
    current = requestId;
    currentRequestId = requestId;
    const context = {
      callbackWaitsForEmptyEventLoop: true,
      functionName: env.AWS_LAMBDA_FUNCTION_NAME,
      functionVersion: env.AWS_LAMBDA_FUNCTION_VERSION,
      invokedFunctionArn: message.invokedFunctionArn,
      memoryLimitInMB: env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE,
      awsRequestId: requestId,
      logGroupName: env.AWS_LAMBDA_LOG_GROUP_NAME,
      logStreamName: env.AWS_LAMBDA_LOG_STREAM_NAME,
      identity: undefined,
      clientContext: message.clientContext,
      getRemainingTimeInMillis: () => Math.max(0, deadlineMs - Date.now()),
    };
    let reply;
    try {
      const event = JSON.parse(message.event);
      const result = await run(event, context);
      reply = { type: "result", requestId, payload: JSON.stringify(result === undefined ? null : result) };
    } catch (error) {
      reply = { type: "error", requestId, error: toRuntimeError(error) };
    }
    if (current !== requestId) return;
    current = undefined;
    await send(reply);
  });
  await send({ type: "ready" });
}
