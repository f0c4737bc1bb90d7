import type { HostAddress } from "../runtime/deps.ts";
import { AgentTransport } from "../transports/agent.ts";
import { lazyTransport } from "../transports/lazy.ts";
import { LocalTransport } from "../transports/local.ts";
import type { TransportPool } from "../transports/pool.ts";
import { SshTransport } from "../transports/ssh.ts";
import { loadSshIdentity, publicKeyLine, type SshIdentity } from "../transports/ssh-identity.ts";
import { OUTPUT_CAP_BYTES, type Transport } from "../transports/types.ts";
import { storePins } from "./host-key-records.ts";

/**
 * The transport for a host: local sandboxes run child processes, SSH hosts get an ssh2 connection with
 * the workshop's identity and host keys pinned in the store. The identity is loaded once per key file.
 */
/** The managed key's public line, for hosts' authorized_keys (`labfleet hosts pubkey`). */
export async function managedPublicKey(labfleetHome: string): Promise<string> {
  return publicKeyLine(await loadSshIdentity({ labfleetHome }));
}

export function transportFactory(opts: {
  labfleetHome: string;
  agentSocket?: string;
  /** Keeps SSH hosts' connections open between operations (the local runtime); without it, one per operation. */
  pool?: TransportPool;
}): (host: HostAddress) => Transport {
  const identities = new Map<string, Promise<SshIdentity>>();
  const identityFor = (file: string | undefined): Promise<SshIdentity> => {
    const key = file ?? "";
    let p = identities.get(key);
    if (!p) {
      p = loadSshIdentity({
        labfleetHome: opts.labfleetHome,
        ...(file ? { identityFile: file } : {}),
        ...(opts.agentSocket ? { agentSocket: opts.agentSocket } : {}),
      });
      identities.set(key, p);
      p.catch(() => identities.delete(key)); // a fixed key file is picked up on the next try
    }
    return p;
  };
  return (host) => {
    if (host.transport === "local") return new LocalTransport(host.address);
    if (host.transport === "agent")
      return new AgentTransport({ workshop: host.workshop, hostId: host.hostId });
    if (host.transport === "ssh") {
      const make = async () => sshTransport(host, await identityFor(host.ssh?.identityFile));
      if (!opts.pool) return lazyTransport(make, OUTPUT_CAP_BYTES);
      const { workshop, hostId, ...shape } = host;
      return opts.pool.lease({ workshop, hostId, shape: JSON.stringify(shape) }, make, OUTPUT_CAP_BYTES);
    }
    throw new Error(`no ${host.transport} transport in this runtime`);
  };
}

/**
 * An SSH host as workshop.yaml describes it (user, bastion, timeout, host keys), its key pinned in the store unless
 * workshop.yaml gives it.
 */
export function sshTransport(host: HostAddress, identity: SshIdentity): SshTransport {
  return new SshTransport({
    workshop: host.workshop,
    hostId: host.hostId,
    address: host.address,
    identity,
    pins: storePins(host.workshop),
    ...(host.ssh?.defaultUser ? { defaultUser: host.ssh.defaultUser } : {}),
    ...(host.ssh?.via ? { via: host.ssh.via } : {}),
    ...(host.ssh?.connectTimeoutMs ? { connectTimeoutMs: host.ssh.connectTimeoutMs } : {}),
    ...(host.ssh?.hostKeys?.length ? { hostKeys: host.ssh.hostKeys } : {}),
    ...(host.ssh?.requireKnownHostKeys ? { requireKnownHostKey: true } : {}),
  });
}
