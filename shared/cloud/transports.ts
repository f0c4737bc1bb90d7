import type { SSMClient } from "@aws-sdk/client-ssm";
import { sshTransport } from "../fleet/transports.ts";
import type { HostAddress } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { AgentTransport } from "../transports/agent.ts";
import { lazyTransport } from "../transports/lazy.ts";
import { publicKeyLine, type SshIdentity } from "../transports/ssh-identity.ts";
import { SsmTransport } from "../transports/ssm.ts";
import { SsmSendBatcher } from "../transports/ssm-batch.ts";
import { OUTPUT_CAP_BYTES, type Transport } from "../transports/types.ts";

/** What messages call the managed key in the cloud: the secret's name, never its content. */
export const MANAGED_KEY_LABEL = "the managed key (secret SshPrivateKey)";

/**
 * labfleet's managed SSH key in the cloud: the `SshPrivateKey` secret (an unencrypted OpenSSH or PEM private
 * key), read when first needed, so a function that never reaches an SSH host never needs the secret.
 */
export function secretSshIdentity(read: () => string | undefined): () => SshIdentity {
  let identity: SshIdentity | undefined;
  return () => {
    if (identity) return identity;
    const value = read();
    if (!value) {
      throw new VisibleError(
        "input",
        "ssh.identity_missing",
        "SSH hosts need labfleet's managed key: set it with `npx sst secret set SshPrivateKey < KEYFILE --stage STAGE` and deploy again",
      );
    }
    const candidate: SshIdentity = { privateKey: Buffer.from(value, "utf8"), keyLabel: MANAGED_KEY_LABEL };
    publicKeyLine(candidate); // throws ssh.identity_invalid, naming the label only, for anything unreadable
    identity = candidate;
    return identity;
  };
}

/**
 * The cloud's transports: EC2 hosts (provider aws) over SSM Run Command, bring-your-own hosts (provider
 * static) over SSH with the managed key from the secret and host keys pinned in the table, enrolled hosts
 * through their agents' command queue (in the table). There are no
 * local sandboxes in the cloud, and no key files: `identity_file` is refused with the remedy. The SSM transports
 * share one batcher: a command a fan-out sends to many instances at once goes as one SendCommand per 50.
 */
export function cloudTransportFactory(opts: {
  ssm: SSMClient;
  sshIdentity: () => SshIdentity;
}): (host: HostAddress) => Transport {
  const batcher = new SsmSendBatcher(opts.ssm);
  return (host) => {
    if (host.transport === "ssm") {
      return new SsmTransport({
        workshop: host.workshop,
        hostId: host.hostId,
        instanceId: host.address,
        client: opts.ssm,
        batcher,
      });
    }
    if (host.transport === "agent")
      return new AgentTransport({ workshop: host.workshop, hostId: host.hostId });
    if (host.transport === "ssh") {
      if (host.ssh?.identityFile !== undefined) {
        throw new VisibleError(
          "input",
          "ssh.identity_file_cloud",
          `${host.hostId}: identity_file names a file on your machine, which the cloud deployment cannot read: remove it and authorize labfleet's managed key on the host (labfleet hosts pubkey)`,
        );
      }
      return lazyTransport(async () => sshTransport(host, opts.sshIdentity()), OUTPUT_CAP_BYTES);
    }
    throw new VisibleError(
      "input",
      "transport.unavailable",
      `${host.hostId}: ${host.transport} hosts exist only in the local runtime (labfleet dev)`,
    );
  };
}
