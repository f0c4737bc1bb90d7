import { hostAddress } from "../fleet/hosts.ts";
import { mapLimit } from "../runtime/concurrency.ts";
import { useDeps } from "../runtime/deps.ts";
import type { HostItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import {
  answering,
  type DeprovisionResult,
  type PlanItem,
  type Provider,
  type ProvisionedHost,
} from "./types.ts";

/** The address an enrolled host is recorded with: it is reached through its agent, not at an address. */
export const AGENT_ADDRESS = "agent";

/**
 * Machines that dial in (`provider.type: enrolled`): each machine that joined the workshop with a join token
 * (shared/agent/enrolled-hosts.ts) is one of its hosts, reached through its agent (the `agent` transport).
 * Provisioning takes the joined machines that are approved and neither drained nor disabled, and checks that
 * each one's agent answers; `provider.expected` is only how many are expected. Deprovisioning creates nothing
 * to destroy: the host's record goes and its agent, at its next poll, is told to forget the workshop.
 */
export class EnrolledProvider implements Provider {
  readonly name = "enrolled" as const;
  readonly transport = "agent" as const;

  validate(spec: Workshop) {
    return spec.provider.type === "enrolled"
      ? []
      : [
          {
            path: "provider.type",
            message: `expected enrolled for machines that join with a join token, got ${spec.provider.type}`,
          },
        ];
  }

  private async joined(spec: Workshop): Promise<HostItem[]> {
    const hosts = (await useDeps().store.host.query.byWorkshop({ workshop: spec.name }).go({ pages: "all" }))
      .data;
    return hosts.filter((h) => h.provider === "enrolled" && h.state !== "torn_down");
  }

  async hostIds(spec: Workshop): Promise<string[]> {
    return (await this.joined(spec)).filter(usable).map((h) => h.hostId);
  }

  async plan(spec: Workshop): Promise<PlanItem[]> {
    return (await this.joined(spec)).map((h) => ({
      hostId: h.hostId,
      action: usable(h) ? ("reuse" as const) : ("noop" as const),
      detail: usable(h)
        ? `enrolled machine ${h.facts?.hostname ?? h.hostId}`
        : `enrolled machine, ${whyNot(h)}`,
    }));
  }

  async provision(spec: Workshop, hostIds?: string[]): Promise<ProvisionedHost[]> {
    const { transport } = useDeps();
    const byId = new Map((await this.joined(spec)).map((h) => [h.hostId, h]));
    const ids = hostIds ?? [...byId.keys()];
    return mapLimit(ids, 16, async (hostId) => {
      const h = byId.get(hostId);
      const base = { hostId, address: AGENT_ADDRESS, labels: (h?.labels as Record<string, string>) ?? {} };
      if (!h) return { ...base, error: `${hostId} has not joined the workshop (or was removed)` };
      if (!usable(h)) return { ...base, error: `${hostId}: ${whyNot(h)}` };
      return answering(
        transport(hostAddress(spec, this, { hostId, address: AGENT_ADDRESS })),
        base,
        "provision: check the agent answers",
      );
    });
  }

  async deprovision(_spec: Workshop, hostIds: string[]): Promise<DeprovisionResult[]> {
    return hostIds.map((hostId) => ({
      hostId,
      result: "destroyed" as const,
      detail: "enrolled machine: its agent forgets the workshop at its next check-in",
    }));
  }
}

/** A joined host that may be given work: approved, neither drained nor disabled. */
function usable(h: HostItem): boolean {
  return h.enrollment === "approved" && !h.drained && !h.disabled;
}

function whyNot(h: HostItem): string {
  if (h.enrollment !== "approved") return "waiting for approval";
  if (h.disabled) return "disabled";
  if (h.drained) return "drained";
  return "usable";
}
