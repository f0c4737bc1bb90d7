import { mkdir, readdir, rm, stat } from "node:fs/promises";
import { join, relative, resolve } from "node:path";
import type { Workshop } from "../workshop/schema.ts";
import {
  type DeprovisionResult,
  hostIdsOf,
  type PlanItem,
  type Provider,
  type ProvisionedHost,
} from "./types.ts";

/**
 * Local sandbox hosts: one folder per host under `<root>/<workshop>/<host>`, which is that host's HOME.
 * Used by the embedded runtime so the whole flow runs with no cloud account and no machines.
 */
export class LocalProvider implements Provider {
  readonly name = "local" as const;
  readonly transport = "local" as const;

  constructor(readonly root: string) {}

  hostDir(workshop: string, hostId: string): string {
    return join(resolve(this.root), workshop, hostId);
  }

  validate(spec: Workshop) {
    return spec.provider.type === "local"
      ? []
      : [
          {
            path: "provider.type",
            message: `expected local for the local provider, got ${spec.provider.type}`,
          },
        ];
  }

  async plan(spec: Workshop): Promise<PlanItem[]> {
    return Promise.all(
      hostIdsOf(spec).map(async (hostId) => {
        const exists = await isDir(this.hostDir(spec.name, hostId));
        return { hostId, action: exists ? ("reuse" as const) : ("create" as const) };
      }),
    );
  }

  async provision(spec: Workshop, hostIds = hostIdsOf(spec)): Promise<ProvisionedHost[]> {
    return Promise.all(
      hostIds.map(async (hostId) => {
        const dir = this.hostDir(spec.name, hostId);
        await mkdir(dir, { recursive: true, mode: 0o700 });
        return { hostId, address: dir, providerId: `local:${spec.name}/${hostId}`, labels: {} };
      }),
    );
  }

  async deprovision(spec: Workshop, hostIds: string[]): Promise<DeprovisionResult[]> {
    const results: DeprovisionResult[] = [];
    for (const hostId of hostIds) {
      const dir = this.hostDir(spec.name, hostId);
      const rel = relative(resolve(this.root), dir);
      if (rel.startsWith("..") || rel.split("/").length !== 2) {
        results.push({
          hostId,
          result: "error",
          detail: "refusing to remove a folder outside the sandbox root",
        });
        continue;
      }
      if (!(await isDir(dir))) {
        results.push({ hostId, result: "skipped", detail: "already gone" });
        continue;
      }
      await rm(dir, { recursive: true, force: true });
      results.push({ hostId, result: "destroyed" });
    }
    const wsDir = join(resolve(this.root), spec.name);
    if ((await isDir(wsDir)) && (await readdir(wsDir)).length === 0) await rm(wsDir, { recursive: true });
    return results;
  }
}

async function isDir(p: string): Promise<boolean> {
  try {
    return (await stat(p)).isDirectory();
  } catch {
    return false;
  }
}
