import { issueHostSecret, validHostSecrets } from "../agent/host-secrets.ts";
import type { Provider } from "../providers/types.ts";
import { useDeps } from "../runtime/deps.ts";
import type { HostItem } from "../store/entities.ts";
import { shq } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";
import type { StartFiles } from "./lab.ts";

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
 * What a host's wrapper needs to push, written by the start command before its setup starts (StartFiles.push,
 * shared/fleet/lab.ts): `push.env` (the API's URL, the workshop, the host's id and its signing secret) and
 * `health.sh` (`lab.health`, which the wrapper runs itself once setup exits). Each deploy gives the host a new
 * secret; an enrolled host keeps the one its agent signs with, and its agent rewrites push.env with each new
 * secret it rotates to (shared/agent/agent-script.ts), inside the previous one's grace (ROTATION_GRACE_SECONDS),
 * so pushes keep working across rotations. Without push (see pushUrlFor), "off": the start command removes the
 * files an earlier deploy left.
 */
export async function pushFiles(
  spec: Workshop,
  provider: Pick<Provider, "transport">,
  host: Pick<HostItem, "hostId" | "provider">,
): Promise<StartFiles["push"]> {
  const url = pushUrlFor(spec, provider);
  if (!url) return "off";
  const kept = host.provider === "enrolled" ? (await validHostSecrets(spec.name, host.hostId))[0] : undefined;
  const secret = kept ?? (await issueHostSecret(spec.name, host.hostId));
  return {
    env: pushEnv(url, spec.name, host.hostId, secret),
    health: spec.lab.health ? `${spec.lab.health}\n` : undefined,
  };
}
