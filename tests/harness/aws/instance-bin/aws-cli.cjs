"use strict";
/**
 * labfleet test harness: the AWS CLI v2 of a fake EC2 instance, for what labfleet's hosts ask it:
 * `aws ssm get-parameter --name N [--with-decryption] [--region R] [--query Parameter.Value|Parameter]
 * [--output json|text]`. The `aws` command `snap install aws-cli --classic` puts on the instance's PATH is a
 * two-line wrapper that names its config (LABFLEET_FAKE_AWS_CLI_CONFIG: where @aws-sdk/client-ssm is, where the
 * double's endpoint is written) and requires this file.
 *
 * It calls the AWS double over HTTP with the real SSM client, signed with the instance profile's role
 * credentials (what IMDS would give; the EC2 double writes them to run/labfleet-fake/imds.json under the
 * instance's root), so the call is authorized and throttled like any other. As the AWS CLI v2 does:
 * - credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN first, then the instance profile;
 *   none: `Unable to locate credentials. ...`, exit 253;
 * - region: --region, AWS_REGION, AWS_DEFAULT_REGION, then the instance's region (IMDS);
 * - endpoint: AWS_ENDPOINT_URL_SSM, AWS_ENDPOINT_URL, else the double's;
 * - retries: the `standard` mode with 3 attempts by default; AWS_RETRY_MODE and AWS_MAX_ATTEMPTS (the SDK
 *   reads both itself);
 * - a service error: `An error occurred (Code) when calling the GetParameter operation: message` on stderr,
 *   with `(reached max retries: N)` when the retries ran out, exit 254; no connection: exit 255; a command
 *   line it cannot parse: exit 252 (the CLI's return codes).
 */
const { readFileSync } = require("node:fs");
const { join } = require("node:path");

/** The error codes the SDK's standard retry strategy treats as throttling (and so retries). */
const RETRYABLE = new Set([
  "ThrottlingException",
  "Throttling",
  "ThrottledException",
  "RequestThrottledException",
  "TooManyRequestsException",
  "RequestLimitExceeded",
  "BandwidthLimitExceeded",
  "LimitExceededException",
  "RequestThrottled",
  "SlowDown",
  "PriorRequestNotComplete",
  "EC2ThrottledException",
  "TransactionInProgressException",
]);
const FLAGS = new Set([
  "--with-decryption",
  "--no-with-decryption",
  "--debug",
  "--no-cli-pager",
  "--no-paginate",
]);

function fail(code, text) {
  process.stderr.write(text);
  process.exit(code);
}

function readJson(file) {
  try {
    return JSON.parse(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
}

function parse(argv) {
  const positional = [];
  const opts = new Map();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (!a.startsWith("--")) {
      positional.push(a);
      continue;
    }
    const eq = a.indexOf("=");
    if (eq > 0) {
      opts.set(a.slice(0, eq), a.slice(eq + 1));
    } else if (FLAGS.has(a)) {
      opts.set(a, true);
    } else {
      const v = argv[i + 1];
      if (v === undefined) fail(252, `\naws: error: argument ${a}: expected one argument\n`);
      opts.set(a, v);
      i++;
    }
  }
  return { positional, opts };
}

/** Dates as the CLI prints them (ISO 8601), the rest as they are. */
function plain(value) {
  return JSON.parse(JSON.stringify(value));
}

function render(value, output) {
  if (output === "text") {
    if (value === null || value === undefined) return "None\n";
    if (typeof value !== "object") return `${value}\n`;
    return `${Object.values(value)
      .map((v) => (typeof v === "object" ? JSON.stringify(v) : String(v)))
      .join("\t")}\n`;
  }
  return `${JSON.stringify(value === undefined ? null : value, null, 4)}\n`;
}

async function main() {
  const config = readJson(process.env.LABFLEET_FAKE_AWS_CLI_CONFIG || "");
  if (!config) fail(255, "\nfake aws: no LABFLEET_FAKE_AWS_CLI_CONFIG\n");
  const root = process.env.LABFLEET_ROOT || "";
  const imds = readJson(join(root, "run/labfleet-fake/imds.json")) || {};
  const { positional, opts } = parse(process.argv.slice(2));
  const [service, operation] = positional;
  if (service !== "ssm" || operation !== "get-parameter") {
    fail(
      252,
      `\nusage: aws [options] <command> <subcommand> [<subcommand> ...] [parameters]\naws: error: the fake AWS CLI implements "aws ssm get-parameter" only, not "${positional.join(" ")}"\n`,
    );
  }
  const name = opts.get("--name");
  if (typeof name !== "string") fail(252, "\naws: error: the following arguments are required: --name\n");
  const output = opts.get("--output") || process.env.AWS_DEFAULT_OUTPUT || "json";
  if (!["json", "text"].includes(output)) {
    fail(252, `\naws: error: argument --output: Invalid choice, valid choices are:\n\njson | text\n`);
  }
  const query = opts.get("--query");
  if (query !== undefined && query !== "Parameter.Value" && query !== "Parameter") {
    fail(252, `\nfake aws: the fake AWS CLI does not evaluate --query ${query}\n`);
  }
  const region =
    opts.get("--region") || process.env.AWS_REGION || process.env.AWS_DEFAULT_REGION || imds.region;
  if (!region)
    fail(
      253,
      '\nYou must specify a region. You can also configure your region by running "aws configure".\n',
    );
  const env = process.env;
  const credentials = env.AWS_ACCESS_KEY_ID
    ? {
        accessKeyId: env.AWS_ACCESS_KEY_ID,
        secretAccessKey: env.AWS_SECRET_ACCESS_KEY || "",
        ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}),
      }
    : imds.credentials;
  if (!credentials) {
    fail(253, '\nUnable to locate credentials. You can configure credentials by running "aws configure".\n');
  }
  const endpoint =
    env.AWS_ENDPOINT_URL_SSM || env.AWS_ENDPOINT_URL || readJson(config.endpointFile)?.endpoint;
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";
  const { SSMClient, GetParameterCommand } = require(config.clientSsm);
  const client = new SSMClient({ region, credentials, ...(endpoint ? { endpoint } : {}) });
  let out;
  try {
    out = await client.send(
      new GetParameterCommand({ Name: name, WithDecryption: opts.get("--with-decryption") === true }),
    );
  } catch (err) {
    const meta = err?.$metadata;
    if (!meta || meta.httpStatusCode === undefined) {
      fail(
        255,
        `\nCould not connect to the endpoint URL: "${endpoint || `https://ssm.${region}.amazonaws.com`}/"\n`,
      );
    }
    // The CLI says the retries ran out when the last error was one it retries (throttling, a 5xx) and the
    // attempts reached the maximum.
    const maxAttempts = await client.config.maxAttempts();
    const attempts = meta.attempts || 1;
    const retryable = RETRYABLE.has(err.name) || meta.httpStatusCode >= 500 || Boolean(err.$retryable);
    const retries = retryable && attempts >= maxAttempts ? ` (reached max retries: ${attempts - 1})` : "";
    // The SDK fills an empty message with "UnknownError"; the CLI prints what the service said.
    const message = err.message === "UnknownError" ? "" : err.message;
    fail(
      254,
      `\nAn error occurred (${err.name}) when calling the GetParameter operation${retries}: ${message}\n`,
    );
  }
  const parameter = plain(out.Parameter);
  const value =
    query === "Parameter.Value"
      ? parameter.Value
      : query === "Parameter"
        ? parameter
        : { Parameter: parameter };
  process.stdout.write(render(value, output));
}

main().catch((err) => fail(255, `\n${String(err?.stack ? err.stack : err)}\n`));
