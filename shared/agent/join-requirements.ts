import type { ErrorDetail } from "../runtime/errors.ts";
import type { Workshop } from "../workshop/schema.ts";
import type { HostFacts } from "./enrolled-hosts.ts";

/** Kernels reserve a little memory: a "16 GiB" machine reports a bit less, so 5% is allowed (as doctor does). */
const MEMORY_SLACK = 0.95;

const gib = (n: number) => `${Number.isInteger(n) ? n : n.toFixed(1)} GiB`;

/**
 * What `lab.requires` asks for that a joining machine's facts do not show, one entry per requirement, at the
 * path of the fact that falls short (`facts.memoryMb`), saying what was expected and what the machine reported.
 * A requirement the machine did not report on is unmet: it cannot be checked. `root` is left to doctor (a
 * machine cannot show it at join); `commands` must list the required commands found on the machine's PATH.
 */
export function unmetRequirements(requires: Workshop["lab"]["requires"], facts: HostFacts): ErrorDetail[] {
  const out: ErrorDetail[] = [];
  const miss = (path: string, message: string) => out.push({ path: `facts.${path}`, message });
  if (requires.cpus !== undefined) {
    if (facts.cpus === undefined) miss("cpus", `expected at least ${requires.cpus} CPUs; none reported`);
    else if (facts.cpus < requires.cpus)
      miss("cpus", `expected at least ${requires.cpus} CPUs; the machine has ${facts.cpus}`);
  }
  if (requires.memory_gib !== undefined) {
    const want = `expected at least ${gib(requires.memory_gib)} of memory`;
    if (facts.memoryMb === undefined) miss("memoryMb", `${want}; none reported`);
    else if (facts.memoryMb / 1024 < requires.memory_gib * MEMORY_SLACK)
      miss("memoryMb", `${want}; the machine has ${gib(facts.memoryMb / 1024)}`);
  }
  if (requires.disk_gib !== undefined) {
    const want = `expected at least ${gib(requires.disk_gib)} of free disk`;
    if (facts.diskGb === undefined) miss("diskGb", `${want}; none reported`);
    else if (facts.diskGb < requires.disk_gib)
      miss("diskGb", `${want}; the machine has ${gib(facts.diskGb)}`);
  }
  if (requires.kvm && facts.kvm !== true)
    miss("kvm", `expected /dev/kvm; ${facts.kvm === false ? "the machine has none" : "not reported"}`);
  if (requires.nested_virtualization && facts.nested !== true)
    miss(
      "nested",
      `expected nested virtualization; ${facts.nested === false ? "the machine has it off" : "not reported"}`,
    );
  const present = new Set(facts.commands ?? []);
  const missing = (requires.commands ?? []).filter((c) => !present.has(c));
  if (missing.length > 0)
    miss(
      "commands",
      `expected the commands ${missing.join(", ")} on the PATH; the machine did not report them`,
    );
  return out;
}
