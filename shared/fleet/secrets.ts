import { useDeps } from "../runtime/deps.ts";
import { errorMessage } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { shq, type Transport, type TransportName } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";
import { LabStepError, stateDir } from "./lab.ts";

/**
 * Operator secrets: the keys `lab.operator_secrets` names, with values from the operator's secret store,
 * written on each host into `~/.labfleet/<workshop>/secrets.env` (0600) before setup runs. Setup reads them
 * with `. "$LABFLEET_SECRETS"`.
 *
 * How they travel depends on the transport. Over SSH and to local sandboxes, over stdin. SSM keeps a command's
 * parameters (the script, and so any stdin sent with it) in its history for 30 days, so to hosts reached
 * through SSM the values never travel in a command: BeginUp writes them once per run as one SecureString
 * parameter (publishSecretParameter; `Deps.secretParameters`, see shared/cloud/secret-parameters.ts), and each host's
 * command only names it; the host fetches it with its own instance role and writes the same file.
 */
export async function secretValues(
  spec: Workshop,
): Promise<{ values: Record<string, string>; missing: string[] }> {
  if (spec.lab.operator_secrets.length === 0) return { values: {}, missing: [] };
  return useDeps().secrets.get(spec.lab.operator_secrets);
}

/**
 * Replaces every operator secret value in text that came from a host (log tails in failure reasons), so a
 * lab that prints a secret does not put it on records, screens or logs.
 */
export async function secretRedactor(spec: Workshop): Promise<(text: string) => string> {
  const { values } = await secretValues(spec).catch(() => ({ values: {} as Record<string, string> }));
  return redactor(Object.values(values));
}

export function redactor(secrets: string[]): (text: string) => string {
  const list = [...new Set(secrets.filter((s) => s.length >= 4))].sort((a, b) => b.length - a.length);
  if (list.length === 0) return (text) => text;
  return (text) => list.reduce((t, s) => t.split(s).join("[redacted]"), text);
}

export function secretsFile(values: Record<string, string>): string {
  return Object.entries(values)
    .map(([k, v]) => `${k}=${shq(v)}\n`)
    .join("");
}

/**
 * Writes the workshop's secrets parameter for a run that deploys to hosts reached through SSM: once per run,
 * by BeginUp before any host is touched, so a fleet of N hosts makes one PutParameter, not N in parallel
 * (Parameter Store throttles PutParameter). Does nothing for a lab without operator secrets, for a provider
 * whose hosts are not reached through SSM, or in a runtime without a parameter writer (secretsForStart then
 * refuses each SSM host clearly). The run's end and the teardown delete it (removeSecretParameter).
 */
export async function publishSecretParameter(spec: Workshop): Promise<void> {
  if (spec.lab.operator_secrets.length === 0) return;
  const { secretParameters: parameters, providers } = useDeps();
  if (!parameters || providers[spec.provider.type]?.transport !== "ssm") return;
  const { values, missing } = await secretValues(spec);
  if (missing.length > 0)
    throw new LabStepError(`operator secrets missing from the secret store: ${missing.join(", ")}`);
  await parameters.put(spec.name, values);
}

/**
 * The lab's operator secrets for a host, as the start command writes them (StartFiles.secrets, shared/fleet/lab.ts).
 * `transport` is how the host is reached (the provider's): `ssm` hosts fetch them here, from the parameter
 * publishSecretParameter wrote at the start of the run, and nothing is returned; the others get the file's text,
 * which the start command writes from its stdin. A lab without operator secrets gets none (the start command
 * removes a stale secrets.env).
 */
export async function secretsForStart(
  t: Transport,
  spec: Workshop,
  transport: TransportName,
): Promise<string | undefined> {
  if (spec.lab.operator_secrets.length === 0) return undefined;
  // BeginUp checked the values and wrote the run's parameter: SSM hosts only fetch it (no read per host).
  if (transport === "ssm") {
    await fetchSecretsOnHost(t, spec);
    return undefined;
  }
  const { values, missing } = await secretValues(spec);
  if (missing.length > 0)
    throw new LabStepError(`operator secrets missing from the secret store: ${missing.join(", ")}`);
  return secretsFile(values);
}

/** Exit codes of fetchSecretsScript, each with its own message (the script's output is never repeated). */
const FETCH_NO_AWS_CLI = 20;
const FETCH_NO_PYTHON = 21;
const FETCH_AWS_FAILED = 22;
const FETCH_BAD_VALUE = 23;

/**
 * Turns the parameter (GetParameter's `Parameter.Value` as JSON, a JSON object of name -> value) into the
 * lines secretsFile writes, byte for byte: `NAME='value'`, a `'` written as `'\''`.
 */
const TO_SECRETS_ENV = String.raw`import json, re, sys
v = json.loads(sys.stdin.buffer.read().decode("utf-8"))
if isinstance(v, str):
    v = json.loads(v)
if not isinstance(v, dict):
    sys.exit(3)
out = []
for k, x in v.items():
    if not isinstance(x, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
        sys.exit(3)
    out.append(k + "='" + x.replace("'", "'\\''") + "'\n")
sys.stdout.buffer.write("".join(out).encode("utf-8"))
`;

/**
 * The host side of the SSM path: fetches the parameter with the instance's role (the AWS CLI) and writes it
 * to `secrets.env` (0600, through a temporary file in the 0700 folder). The value goes from the CLI straight
 * into the converter and the file, never to the command's output; on failure the script prints only its own
 * words and the AWS error code, which holds no value. The CLI retries throttled calls in adaptive mode, up to
 * ten attempts (its default is three), since a fleet's hosts fetch at once against Parameter Store's throughput:
 * one resource, one call per process and nothing waiting on its latency, the case AWS's adaptive mode is made
 * for (the control plane's own clients retry in standard mode, shared/cloud/clients.ts).
 */
export function fetchSecretsScript(workshop: string, parameter: string, region?: string): string {
  const d = stateDir(workshop);
  return `set -u
umask 077
d=${d}
mkdir -p "$d" && chmod 700 "$d" || exit 1
aws_cli=$(command -v aws 2>/dev/null) || aws_cli=
if [ -z "$aws_cli" ]; then for c in /usr/local/bin/aws /usr/bin/aws /snap/bin/aws; do if [ -x "$c" ]; then aws_cli=$c; break; fi; done; fi
[ -n "$aws_cli" ] || exit ${FETCH_NO_AWS_CLI}
py=$(command -v python3 2>/dev/null) || exit ${FETCH_NO_PYTHON}
trap 'rm -f "$d/secrets.env.tmp" "$d/secrets.fetch.err"' EXIT
rm -f "$d/secrets.env.tmp"
AWS_RETRY_MODE=adaptive AWS_MAX_ATTEMPTS=10 "$aws_cli" ssm get-parameter --name ${shq(parameter)} --with-decryption${region ? ` --region ${shq(region)}` : ""} --query Parameter.Value --output json 2>"$d/secrets.fetch.err" | "$py" -c ${shq(TO_SECRETS_ENV)} >"$d/secrets.env.tmp" 2>/dev/null
set -- "\${PIPESTATUS[@]}"
if [ "$1" -ne 0 ]; then
  code=$(sed -n 's/.*An error occurred (\\([A-Za-z0-9.]*\\)).*/\\1/p' "$d/secrets.fetch.err" | head -n 1)
  if [ -z "$code" ] && grep -q "Unable to locate credentials" "$d/secrets.fetch.err"; then code=NoCredentials; fi
  echo "labfleet-secrets: aws=\${code:-unknown}" >&2
  exit ${FETCH_AWS_FAILED}
fi
[ "$2" -eq 0 ] || exit ${FETCH_BAD_VALUE}
chmod 600 "$d/secrets.env.tmp" && mv -f "$d/secrets.env.tmp" "$d/secrets.env"
`;
}

/** Names the run's parameter (written once by publishSecretParameter) in the host's fetch command. */
async function fetchSecretsOnHost(t: Transport, spec: Workshop): Promise<void> {
  const parameters = useDeps().secretParameters;
  if (!parameters) {
    throw new LabStepError(
      "operator secrets cannot reach hosts through SSM here: SSM keeps a command's input in its history, so labfleet sends them only through a Parameter Store parameter, and this runtime has no parameter writer (Deps.secretParameters) configured",
    );
  }
  const name = parameters.nameOf(spec.name);
  const region = spec.provider.type === "aws" ? spec.provider.region : undefined;
  const r = await t.exec(fetchSecretsScript(spec.name, name, region), {
    step: "fetch operator secrets",
    timeoutMs: 120_000,
  });
  if (r.exitCode === 0) return;
  const where = `Parameter Store (${name})`;
  if (r.exitCode === FETCH_NO_AWS_CLI) {
    throw new LabStepError(
      `the AWS CLI (aws) is not installed on this host: hosts reached through SSM fetch the operator secrets from ${where} with it. Install AWS CLI v2 on the image (Ubuntu: sudo snap install aws-cli --classic; others: https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html), or list it in lab.requires.commands so doctor checks it`,
    );
  }
  if (r.exitCode === FETCH_NO_PYTHON) {
    throw new LabStepError(
      `python3 is not installed on this host: it turns the operator secrets fetched from ${where} into secrets.env. Install python3 on the image`,
    );
  }
  if (r.exitCode === FETCH_AWS_FAILED) {
    const code = /labfleet-secrets: aws=([A-Za-z0-9.]+)/.exec(r.stderr)?.[1] ?? "unknown";
    throw new LabStepError(
      `fetching the operator secrets from ${where} failed on the host (${code}): its instance profile needs ssm:GetParameter on that parameter, and kms:Decrypt on its key when that is not the default aws/ssm key`,
    );
  }
  if (r.exitCode === FETCH_BAD_VALUE) {
    throw new LabStepError(`the operator secrets in ${where} are not a JSON object of names to text values`);
  }
  // The exit code only: nothing the host printed is repeated.
  throw new LabStepError(
    `fetching the operator secrets from ${where} failed with exit code ${r.exitCode}${r.timedOut ? " (timed out)" : ""}`,
  );
}

/**
 * Deletes the workshop's secrets parameter, if this runtime writes one and the workshop's hosts are reached
 * through SSM: at the end of each up/deploy/retry run (every host of the run has fetched it by then) and at
 * teardown. Never throws: a failure is logged, and the next run's end or the teardown tries again.
 */
export async function removeSecretParameter(
  spec: Workshop,
  transport: TransportName | undefined,
): Promise<void> {
  const parameters = useDeps().secretParameters;
  if (!parameters || transport !== "ssm") return;
  try {
    await parameters.remove(spec.name);
  } catch (err) {
    log.warn("deleting the operator secrets parameter failed", {
      workshop: spec.name,
      error: errorMessage(err),
    });
  }
}
