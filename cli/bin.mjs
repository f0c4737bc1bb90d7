#!/usr/bin/env node
// The `labfleet` command. The project ships TypeScript; tsx loads it without a build step.
// The AWS SDK warns on every start that Node 20 will lose support in 2027; the local CLI keeps quiet
// about it (the Lambdas run on a newer runtime). Set the variable to "false" to see it.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= "true";
const { register } = await import("tsx/esm/api");
register();
const { main } = await import("./main.ts");
process.exitCode = await main(process.argv.slice(2));
