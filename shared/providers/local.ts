import { lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync } from "node:fs";
import { mkdir, readdir, rm, stat } from "node:fs/promises";
import { dirname, isAbsolute, join, relative, resolve } from "node:path";
import { shq } from "../transports/types.ts";
import { localLabDirProblem, type Workshop } from "../workshop/schema.ts";
import {
  type DeprovisionResult,
  hostIdsOf,
  type Leftover,
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

  async plan(spec: Workshop, hostIds = hostIdsOf(spec)): Promise<PlanItem[]> {
    return Promise.all(
      hostIds.map(async (hostId) => {
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
    // What the labs left running (a service a setup started) ends with them: one look through /proc for
    // every host, not one per host, which a 500-host teardown would pay 500 times.
    const endedIn = endProcessesInHosts(hostIds.map((hostId) => this.hostDir(spec.name, hostId)));
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
      const ended = endedIn.get(dir) ?? 0;
      await rm(dir, { recursive: true, force: true });
      results.push({
        hostId,
        result: "destroyed",
        ...(ended ? { detail: `${ended} process${ended === 1 ? "" : "es"} ended` } : {}),
      });
    }
    const wsDir = join(resolve(this.root), spec.name);
    if ((await isDir(wsDir)) && (await readdir(wsDir)).length === 0) await rm(wsDir, { recursive: true });
    return results;
  }

  /**
   * What is left of the workshop's hosts: every folder still under `<root>/<workshop>/` (whether or not the
   * spec still names that host), and every process whose HOME or working folder is inside one, found in /proc
   * (where there is no /proc, processes are not looked for).
   */
  async leftovers(spec: Workshop): Promise<Leftover[]> {
    const wsDir = join(resolve(this.root), spec.name);
    const out: Leftover[] = [];
    const names = (await isDir(wsDir)) ? (await readdir(wsDir)).sort() : [];
    for (const processInfo of processesInside(wsDir)) {
      out.push({
        kind: "process",
        id: String(processInfo.pid),
        ...(processInfo.hostId ? { hostId: processInfo.hostId } : {}),
        why: `still running in ${processInfo.dir}: ${processInfo.command}`,
        command: `kill ${processInfo.pid}`,
      });
    }
    for (const name of names) {
      const dir = join(wsDir, name);
      out.push({
        kind: "host-folder",
        id: dir,
        hostId: name,
        why: (await isDir(dir))
          ? "the host's folder is still there"
          : "a file is left in the workshop's folder",
        command: `rm -rf ${shq(dir)}`,
      });
    }
    return out;
  }
}

/**
 * Processes whose HOME or working folder is `dir` or lies inside it, with the host folder they are in (the first
 * folder below `dir`). Linux (/proc); elsewhere nothing is found.
 */
function processesInside(dir: string): { pid: number; hostId?: string; dir: string; command: string }[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  const found: { pid: number; hostId?: string; dir: string; command: string }[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const home = readFileSync(`/proc/${entry}/environ`, "utf8")
        .split("\0")
        .find((v) => v.startsWith("HOME="))
        ?.slice(5);
      let cwd: string | undefined;
      try {
        cwd = readlinkSync(`/proc/${entry}/cwd`);
      } catch {
        cwd = undefined;
      }
      const where = [home, cwd].find((p) => p !== undefined && (p === dir || inside(dir, p)));
      if (!where) continue;
      const hostId = relative(dir, where).split("/")[0] || undefined;
      const command = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").join(" ").trim();
      found.push({
        pid: Number(entry),
        ...(hostId ? { hostId } : {}),
        dir: where,
        command: command.slice(0, 120),
      });
    } catch {
      // gone, or not ours to read
    }
  }
  return found.sort((a, b) => a.pid - b.pid);
}

/**
 * Ends (SIGKILL) every process of a local host: its HOME is the host's folder (or inside it), or it runs in that
 * folder. Answers how many were ended.
 */
export function endProcessesIn(dir: string): number {
  let ended = 0;
  for (const { pid } of processesInside(dir)) {
    try {
      process.kill(pid, "SIGKILL");
      ended++;
    } catch {
      // gone meanwhile
    }
  }
  return ended;
}

/**
 * Ends (SIGKILL) every process of these local hosts, as endProcessesIn does for one, in one pass over /proc.
 * Answers how many were ended in each host's folder (hosts with none are left out).
 */
export function endProcessesInHosts(dirs: string[]): Map<string, number> {
  const ended = new Map<string, number>();
  if (dirs.length === 0) return ended;
  const hosts = new Set(dirs);
  // The host folder a path lies in: itself, or its parent folder when that is one (`<root>/<ws>/<host>/...`).
  const hostOf = (path: string): string | undefined => {
    for (let p = path; p !== dirname(p); p = dirname(p)) if (hosts.has(p)) return p;
    return undefined;
  };
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((e) => /^\d+$/.test(e) && Number(e) !== process.pid);
  } catch {
    return ended;
  }
  for (const pid of pids) {
    try {
      const home = readFileSync(`/proc/${pid}/environ`, "utf8")
        .split("\0")
        .find((v) => v.startsWith("HOME="))
        ?.slice(5);
      const host =
        (home !== undefined && hosts.has(home) ? home : undefined) ??
        hostOf(readlinkSync(`/proc/${pid}/cwd`));
      if (!host) continue;
      process.kill(Number(pid), "SIGKILL");
      ended.set(host, (ended.get(host) ?? 0) + 1);
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return ended;
}

async function isDir(p: string): Promise<boolean> {
  try {
    return (await stat(p)).isDirectory();
  } catch {
    return false;
  }
}

const inside = (root: string, path: string) => {
  const rel = relative(root, path);
  return rel !== "" && !rel.startsWith("..") && !isAbsolute(rel);
};

/**
 * The absolute lab folder of a local host whose HOME is `home`, checked where it is used: `lab.dir` must name a
 * folder inside `home` (workshop.yaml's own rule, for a workshop stored before it), and so must the path once
 * its links are followed, as far as it exists, so a symlink cannot carry a sync (which replaces the folder)
 * outside. Throws with the reason otherwise.
 */
export function localLabDir(home: string, dir: string): string {
  const problem = localLabDirProblem(dir);
  if (problem) throw new Error(`lab.dir ${JSON.stringify(dir)} is refused on a local host: ${problem}`);
  const root = realpathSync.native(home);
  const target = resolve(root, dir);
  let existing = target;
  for (;;) {
    try {
      lstatSync(existing);
      break;
    } catch {
      existing = dirname(existing); // not there yet: the sync creates it
    }
  }
  let real: string;
  try {
    real = realpathSync.native(existing);
  } catch {
    throw new Error(`lab.dir ${JSON.stringify(dir)} is refused: ${existing} is a link that leads nowhere`);
  }
  if (!inside(root, join(real, relative(existing, target))))
    throw new Error(
      `lab.dir ${JSON.stringify(dir)} is refused: it leads to ${real}, outside the local host's folder ${root}`,
    );
  return target;
}
