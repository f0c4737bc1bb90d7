import type { Provider } from "../providers/types.ts";
import { currentDeadline, outOfTime } from "../runtime/deadline.ts";
import { type HostAddress, useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import type { HostItem } from "../store/entities.ts";
import type { Transport } from "../transports/types.ts";
import { hostKeysOf, type Workshop } from "../workshop/schema.ts";

/** How to reach one host of a workshop: its provider's transport, with the SSH defaults of workshop.yaml. */
export function hostAddress(
  spec: Workshop,
  provider: Pick<Provider, "transport">,
  host: { hostId: string; address?: string | undefined },
): HostAddress {
  if (!host.address)
    throw new VisibleError("host", "host.no_address", `host ${host.hostId} has no address yet`);
  const entry = spec.hosts.find((h) => h.id === host.hostId);
  const via = entry?.via ?? spec.defaults.ssh_options?.proxy_jump;
  const hostKeys = hostKeysOf(entry).map((k) => k.key);
  return {
    workshop: spec.name,
    hostId: host.hostId,
    address: host.address,
    transport: provider.transport,
    ...(provider.transport === "ssh"
      ? {
          ssh: {
            ...(spec.defaults.ssh_user ? { defaultUser: spec.defaults.ssh_user } : {}),
            ...(spec.defaults.identity_file ? { identityFile: spec.defaults.identity_file } : {}),
            ...(via ? { via } : {}),
            connectTimeoutMs: (spec.defaults.ssh_options?.connect_timeout_seconds ?? 10) * 1000,
            ...(hostKeys.length ? { hostKeys } : {}),
            ...(spec.ssh?.require_known_host_keys ? { requireKnownHostKeys: true } : {}),
          },
        }
      : {}),
  };
}

export function transportFor(spec: Workshop, provider: Provider, host: HostItem): Transport {
  return withinDeadline(useDeps().transport(hostAddress(spec, provider, host)));
}

/** Below this much time left, no new command starts on a host: it could not finish before the deadline. */
export const MIN_STEP_MS = 5_000;

/**
 * A transport whose commands end by the caller's deadline (shared/runtime/deadline.ts): each command's timeout
 * is cut to the time left, the transport is told the deadline, and a command is not started at all when less
 * than MIN_STEP_MS is left. Without a deadline (the local runtime), the transport itself.
 */
export function withinDeadline(t: Transport): Transport {
  // The transport itself, seen through an object whose exec checks the deadline first.
  const bounded: Transport = Object.create(t);
  bounded.exec = (command, options = {}) => {
    const deadline = currentDeadline();
    if (deadline === undefined) return t.exec(command, options);
    const left = deadline - Date.now();
    if (left < MIN_STEP_MS) return Promise.reject(outOfTime(options.step ?? "a command on the host"));
    return t.exec(command, {
      ...options,
      timeoutMs: Math.min(options.timeoutMs ?? left, left),
      deadline: Math.min(options.deadline ?? deadline, deadline),
    });
  };
  const reach = t.reach?.bind(t);
  if (reach) {
    bounded.reach = (step) => {
      const deadline = currentDeadline();
      if (deadline !== undefined && deadline - Date.now() < MIN_STEP_MS)
        return Promise.reject(outOfTime(step));
      return reach(step);
    };
  }
  return bounded;
}

/**
 * Runs `fn` with a transport for the host and always closes it: its connection ends, or, where the runtime pools
 * connections (Deps.connections), goes back to the pool for the next operation.
 */
export async function withTransport<T>(
  spec: Workshop,
  provider: Provider,
  host: HostItem,
  fn: (t: Transport) => Promise<T>,
): Promise<T> {
  const t = transportFor(spec, provider, host);
  try {
    return await fn(t);
  } finally {
    await t.close?.();
  }
}

export interface Selection {
  /** `--host ID`, repeatable: only these hosts. */
  hosts?: string[];
  /** `--label k=v`, repeatable: hosts carrying every one of these labels. */
  labels?: Record<string, string>;
}

/** The hosts a command acts on. An unknown `--host` is an error, never silently nothing. */
export function selectHosts<H extends { hostId: string; labels?: Record<string, unknown> }>(
  hosts: H[],
  sel: Selection = {},
): H[] {
  const ids = new Set(hosts.map((h) => h.hostId));
  const unknown = (sel.hosts ?? []).filter((id) => !ids.has(id));
  if (unknown.length > 0) {
    throw new VisibleError(
      "input",
      "selection.unknown_host",
      `no such host in this workshop: ${unknown.join(", ")}`,
      [{ path: "hosts", message: `expected host ids of this workshop; unknown: ${unknown.join(", ")}` }],
    );
  }
  const wanted = sel.hosts?.length ? new Set(sel.hosts) : undefined;
  const labels = Object.entries(sel.labels ?? {});
  return hosts.filter(
    (h) =>
      (!wanted || wanted.has(h.hostId)) &&
      labels.every(([k, v]) => String(h.labels?.[k] ?? "") === v && h.labels?.[k] !== undefined),
  );
}

/** `k=v` strings from the command line into a label map. */
export function parseLabels(pairs: string[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const p of pairs) {
    const i = p.indexOf("=");
    if (i <= 0)
      throw new VisibleError("input", "selection.bad_label", `expected a label as key=value, got "${p}"`);
    out[p.slice(0, i)] = p.slice(i + 1);
  }
  return out;
}
