import { lstatSync, readdirSync, readFileSync, readlinkSync, realpathSync } from "node:fs";
import { mkdir, readdir, readFile, readlink, rm, stat } from "node:fs/promises";
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
      // What the lab left running on the host (a service its setup started) ends with it.
      const ended = endProcessesIn(dir);
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
    for (const processInfo of await processesInside(wsDir)) {
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

/** Processes whose HOME or working folder lies inside `dir`, with the host folder they are in. */
async function processesInside(
  dir: string,
): Promise<{ pid: number; hostId?: string; dir: string; command: string }[]> {
  let entries: string[];
  try {
    entries = await readdir("/proc");
  } catch {
    return [];
  }
  const found: { pid: number; hostId?: string; dir: string; command: string }[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      const environ = await readFile(`/proc/${entry}/environ`, "utf8");
      const home = environ
        .split("\0")
        .find((v) => v.startsWith("HOME="))
        ?.slice(5);
      const cwd = await readlink(`/proc/${entry}/cwd`).catch(() => undefined);
      const where = [home, cwd].find((p) => p !== undefined && (p === dir || inside(dir, p)));
      if (!where) continue;
      const hostId = relative(dir, where).split("/")[0] || undefined;
      const command = (await readFile(`/proc/${entry}/cmdline`, "utf8")).split("\0").join(" ").trim();
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
 * Ends (SIGKILL) every process of a local host: its HOME is the host's folder, or it runs in that folder.
 * Linux (/proc); elsewhere nothing is found. Answers how many were ended.
 */
export function endProcessesIn(dir: string): number {
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((e) => /^\d+$/.test(e) && Number(e) !== process.pid);
  } catch {
    return 0;
  }
  let ended = 0;
  for (const pid of pids) {
    try {
      const cwd = readlinkSync(`/proc/${pid}/cwd`);
      const home = readFileSync(`/proc/${pid}/environ`, "utf8").split("\0").includes(`HOME=${dir}`);
      if (!home && cwd !== dir && !cwd.startsWith(`${dir}/`)) continue;
      process.kill(Number(pid), "SIGKILL");
      ended++;
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
  const root = realpathSync(home);
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
    real = realpathSync(existing);
  } catch {
    throw new Error(`lab.dir ${JSON.stringify(dir)} is refused: ${existing} is a link that leads nowhere`);
  }
  if (!inside(root, join(real, relative(existing, target))))
    throw new Error(
      `lab.dir ${JSON.stringify(dir)} is refused: it leads to ${real}, outside the local host's folder ${root}`,
    );
  return target;
}
