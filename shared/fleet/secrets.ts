import { useDeps } from "../runtime/deps.ts";
import { shq, type Transport } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";
import { LabStepError, stateDir } from "./lab.ts";

/**
 * Operator secrets: the keys `lab.operator_secrets` names, with values from the operator's secret store,
 * copied to each host over stdin into `~/.labfleet/<workshop>/secrets.env` (0600) before setup runs.
 * Setup reads them with `. "$LABFLEET_SECRETS"`.
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

export async function pushSecrets(t: Transport, spec: Workshop): Promise<void> {
  const d = stateDir(spec.name);
  if (spec.lab.operator_secrets.length === 0) return; // startLab removes a stale secrets.env
  const { values, missing } = await secretValues(spec);
  if (missing.length > 0)
    throw new LabStepError(`operator secrets missing from the secret store: ${missing.join(", ")}`);
  const r = await t.exec(
    `set -e; umask 077; d=${d}; mkdir -p "$d"; chmod 700 "$d"; cat > "$d/secrets.env.tmp"; chmod 600 "$d/secrets.env.tmp"; mv "$d/secrets.env.tmp" "$d/secrets.env"`,
    { stdin: secretsFile(values), step: "push operator secrets", timeoutMs: 60_000 },
  );
  // The error carries the exit code only: the command's output could echo what it was given.
  if (r.exitCode !== 0)
    throw new LabStepError(`pushing operator secrets failed with exit code ${r.exitCode}`);
}
