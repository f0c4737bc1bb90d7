#!/usr/bin/env node
// The `labfleet` command. The project ships TypeScript; tsx loads it without a build step.
// The AWS SDK warns on every start that Node 20 will lose support in 2027; the local CLI keeps quiet
// about it (the Lambdas run on a newer runtime). Set the variable to "false" to see it.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
// A reader that stops early (`labfleet status demo | head -2`) closes the pipe. The CLI then ends quietly, as
// command-line tools do: nothing more is written (stderr may be the closed pipe too) and it exits 0, or with
// the exit code its command already chose; `labfleet dev` stops as on Ctrl-C, so its labs and DynamoDB Local
// stop with it. Any other error on a standard stream is left to Node.
let pipeClosed = false;
for (const stream of [process.stdout, process.stderr]) {
  stream.on("error", (err) => {
    if (pipeClosed) return; // what is still written after the pipe closed fails the same way
    if (err.code !== "EPIPE") throw err;
    pipeClosed = true;
    if (process.listenerCount("SIGTERM") > 0) process.emit("SIGTERM");
    else process.exit(process.exitCode ?? 0);
  });
}
const { register } = await import("tsx/esm/api");
register();
const { main } = await import("./main.ts");
process.exitCode = await main(process.argv.slice(2));
