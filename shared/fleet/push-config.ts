import { issueHostSecret, validHostSecrets } from "../agent/host-secrets.ts";
import type { Provider } from "../providers/types.ts";
import { useDeps } from "../runtime/deps.ts";
import type { HostItem } from "../store/entities.ts";
import { shq, type Transport } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";
import { LabStepError, stateDir } from "./lab.ts";

/**
 * Whether a host's wrapper pushes its lab's progress (shared/agent/progress.ts), and to which URL: when the
 * runtime knows a URL hosts reach its API on (Deps.hostApiUrl: the local runtime's 127.0.0.1 address, the cloud's
 * API URL), `lab.push` is not false, and the host is not reached through SSM (SSM keeps a command's input in its
 * history for 30 days, so a host's secret never travels in one: EC2 hosts are followed by polling).
 */
export function pushUrlFor(spec: Workshop, provider: Pick<Provider, "transport">): string | undefined {
  if (!spec.lab.push || provider.transport === "ssm") return undefined;
  return useDeps().hostApiUrl?.() || undefined;
}

/** The lines of `push.env`: what the wrapper's signer reads (shared/agent/signing.ts, SHELL_SIGNER). */
export function pushEnv(url: string, workshop: string, hostId: string, secret: string): string {
  return [
    `LABFLEET_API=${shq(url.replace(/\/+$/, ""))}`,
    `LABFLEET_WORKSHOP=${shq(workshop)}`,
    `LABFLEET_HOST_ID=${shq(hostId)}`,
    `LABFLEET_HOST_SECRET=${shq(secret)}`,
    "",
  ].join("\n");
}

/**
 * Gives a host what its wrapper needs to push, before its setup starts: `push.env` (the API's URL, the workshop,
 * the host's id and its signing secret) and `health.sh` (`lab.health`, which the wrapper runs itself once setup
 * exits), both 0600 in the 0700 state folder, sent over stdin as operator secrets are (never on a command line).
 * Each deploy gives the host a new secret; an enrolled host keeps the one its agent signs with, and its agent
 * rewrites push.env with each new secret it rotates to (shared/agent/agent-script.ts), inside the previous one's
 * grace (ROTATION_GRACE_SECONDS), so pushes keep working across rotations. Without push (see
 * pushUrlFor), files an earlier deploy left are removed. Returns whether the host pushes.
 */
export async function givePushConfig(
  t: Transport,
  spec: Workshop,
  provider: Pick<Provider, "transport">,
  host: Pick<HostItem, "hostId" | "provider">,
): Promise<boolean> {
  const d = stateDir(spec.name);
  const url = pushUrlFor(spec, provider);
  if (!url) {
    const r = await t.exec(`rm -f ${d}/push.env ${d}/health.sh`, {
      step: "turn push off",
      timeoutMs: 30_000,
    });
    if (r.exitCode !== 0) throw new LabStepError(`turning push off failed with exit code ${r.exitCode}`);
    return false;
  }
  const kept = host.provider === "enrolled" ? (await validHostSecrets(spec.name, host.hostId))[0] : undefined;
  const secret = kept ?? (await issueHostSecret(spec.name, host.hostId));
  const files = `${pushEnv(url, spec.name, host.hostId, secret)}@@health\n${spec.lab.health ?? ""}\n`;
  const r = await t.exec(
    `set -e; umask 077; d=${d}; mkdir -p "$d"; chmod 700 "$d"
input=$(cat)
printf '%s\\n' "\${input%%@@health
*}" > "$d/push.env.tmp"
${
  spec.lab.health
    ? `printf '%s\\n' "\${input#*@@health
}" > "$d/health.sh"`
    : `rm -f "$d/health.sh"`
}
chmod 600 "$d/push.env.tmp"; mv "$d/push.env.tmp" "$d/push.env"`,
    { stdin: files, step: "give the host its push settings", timeoutMs: 60_000 },
  );
  // The exit code only: the command's output could echo what it was given.
  if (r.exitCode !== 0)
    throw new LabStepError(`giving the host its push settings failed with exit code ${r.exitCode}`);
  return true;
}
