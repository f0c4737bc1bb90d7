import { hostAddress } from "../fleet/hosts.ts";
import { mapLimit } from "../runtime/concurrency.ts";
import { useDeps } from "../runtime/deps.ts";
import type { Workshop } from "../workshop/schema.ts";
import {
  answering,
  type DeprovisionResult,
  type PlanItem,
  type Provider,
  type ProvisionedHost,
} from "./types.ts";

/**
 * Bring-your-own hosts, listed in hosts[] and reached over SSH. Provisioning only checks that each one
 * answers; deprovisioning never touches them (they are the instructor's machines).
 */
export class StaticProvider implements Provider {
  readonly name = "static" as const;
  readonly transport = "ssh" as const;

  validate(spec: Workshop) {
    return spec.provider.type === "static"
      ? []
      : [
          {
            path: "provider.type",
            message: `expected static for bring-your-own hosts, got ${spec.provider.type}`,
          },
        ];
  }

  async plan(spec: Workshop): Promise<PlanItem[]> {
    return spec.hosts.map((h) => ({
      hostId: h.id,
      action: "reuse" as const,
      detail: `bring-your-own host ${h.ssh}`,
    }));
  }

  async provision(spec: Workshop, hostIds?: string[]): Promise<ProvisionedHost[]> {
    const { transport } = useDeps();
    const wanted = hostIds ? new Set(hostIds) : undefined;
    return mapLimit(
      spec.hosts.filter((h) => !wanted || wanted.has(h.id)),
      16,
      async (h) => {
        const base = {
          hostId: h.id,
          address: h.ssh,
          labels: h.labels,
          ...(h.public_ip ? { publicIp: h.public_ip } : {}),
        };
        return answering(
          transport(hostAddress(spec, this, { hostId: h.id, address: h.ssh })),
          base,
          "provision: check the host answers",
        );
      },
    );
  }

  async deprovision(_spec: Workshop, hostIds: string[]): Promise<DeprovisionResult[]> {
    return hostIds.map((hostId) => ({
      hostId,
      result: "skipped" as const,
      detail: "bring-your-own host: left as it is",
    }));
  }
}
