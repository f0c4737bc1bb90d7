import { describe, expect, it } from "vitest";
import { parseLabels, selectHosts } from "../../shared/fleet/hosts.ts";
import { judgeDoctor } from "../../shared/fleet/ops.ts";
import { redactor, secretsFile } from "../../shared/fleet/secrets.ts";
import { validateWorkshopYaml } from "../../shared/workshop/load.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";

function spec(requires: string, source = "./lab"): Workshop {
  const r = validateWorkshopYaml(
    `name: w\nlab:\n  source: ${source}\n  setup: s\n  requires: ${requires}\nprovider: { type: local, count: 1 }\n`,
  );
  if (!r.ok) throw new Error(JSON.stringify(r.errors));
  return r.workshop;
}

const facts = {
  user: "lab",
  sudo: "no",
  os: "Debian GNU/Linux 12",
  kernel: "6.1",
  cpus: "4",
  mem_kib: String(16 * 1024 * 1024 - 300_000), // a "16 GiB" machine reports a little less
  disk_free_kib: String(40 * 1024 * 1024),
  kvm: "yes",
  nested: "Y",
  "cmd:bash": "yes",
  "cmd:tar": "yes",
  "cmd:setsid": "yes",
  "cmd:git": "no",
  "cmd:virsh": "yes",
};

const failing = (checks: ReturnType<typeof judgeDoctor>) => checks.filter((c) => !c.ok).map((c) => c.name);

describe("doctor rules", () => {
  it("passes a host that meets every requirement, allowing 5% memory for the kernel", () => {
    const checks = judgeDoctor(
      spec(
        "{ cpus: 4, memory_gib: 16, disk_gib: 40, kvm: true, nested_virtualization: true, commands: [virsh] }",
      ),
      facts,
    );
    expect(failing(checks)).toEqual([]);
    expect(checks.map((c) => c.name)).toEqual([
      "reachable",
      "sudo",
      "os",
      "cpus",
      "memory",
      "disk",
      "kvm",
      "nested_virtualization",
      "command:bash",
      "command:tar",
      "command:setsid",
      "command:virsh",
    ]);
  });

  it("fails each requirement that is not met, saying what was expected", () => {
    const checks = judgeDoctor(
      spec("{ cpus: 8, memory_gib: 32, disk_gib: 100, kvm: true, nested_virtualization: true, root: true }"),
      {
        ...facts,
        kvm: "no-access",
        nested: "N",
      },
    );
    expect(failing(checks)).toEqual(["sudo", "cpus", "memory", "disk", "kvm", "nested_virtualization"]);
    expect(checks.find((c) => c.name === "kvm")?.detail).toBe(
      "/dev/kvm exists but is not readable and writable",
    );
    expect(checks.find((c) => c.name === "cpus")).toMatchObject({ detail: "4 CPUs", expected: "at least 8" });
  });

  it("requires root only when the lab says so, and git only for git sources", () => {
    expect(failing(judgeDoctor(spec("{}"), facts))).toEqual([]);
    expect(failing(judgeDoctor(spec("{ root: true }"), { ...facts, sudo: "yes" }))).toEqual([]);
    // sudo is not asked when the lab does not require root
    const unasked = judgeDoctor(spec("{}"), { ...facts, sudo: "unchecked" }).find((c) => c.name === "sudo");
    expect(unasked).toEqual({ name: "sudo", ok: true, detail: "not checked: the lab does not require root" });
    expect(failing(judgeDoctor(spec("{}", "'git:https://git.example.test/lab.git'"), facts))).toEqual([
      "command:git",
    ]);
  });

  it("refuses command names with paths or spaces in workshop.yaml", () => {
    const r = validateWorkshopYaml(
      "name: w\nlab: { source: x, setup: s, requires: { commands: [/usr/bin/virsh] } }\nprovider: { type: local, count: 1 }\n",
    );
    expect(r.ok ? [] : r.errors.map((e) => e.path)).toEqual(["lab.requires.commands[0]"]);
  });
});

describe("selection", () => {
  const hosts = [
    { hostId: "a", labels: { room: "1", gpu: "yes" } },
    { hostId: "b", labels: { room: "1" } },
    { hostId: "c", labels: { room: "2" } },
  ];
  it("selects by id, by every label, or everything", () => {
    expect(selectHosts(hosts).map((h) => h.hostId)).toEqual(["a", "b", "c"]);
    expect(selectHosts(hosts, { hosts: ["c", "a"] }).map((h) => h.hostId)).toEqual(["a", "c"]);
    expect(selectHosts(hosts, { labels: { room: "1" } }).map((h) => h.hostId)).toEqual(["a", "b"]);
    expect(selectHosts(hosts, { labels: { room: "1", gpu: "yes" } }).map((h) => h.hostId)).toEqual(["a"]);
    expect(selectHosts(hosts, { hosts: ["b"], labels: { gpu: "yes" } })).toEqual([]);
  });
  it("names unknown hosts and malformed labels", () => {
    expect(() => selectHosts(hosts, { hosts: ["a", "zz"] })).toThrow("no such host in this workshop: zz");
    expect(parseLabels(["room=1", "k=a=b"])).toEqual({ room: "1", k: "a=b" });
    expect(() => parseLabels(["room"])).toThrow('expected a label as key=value, got "room"');
  });
});

describe("secrets", () => {
  it("writes shell-quoted KEY='value' lines", () => {
    expect(secretsFile({ A: "x'y", B: "$(rm -rf /)" })).toBe(`A='x'\\''y'\nB='$(rm -rf /)'\n`);
  });
  it("redacts every known value, longest first, and ignores very short ones", () => {
    const redact = redactor(["abcd1234", "abcd", "xy"]);
    expect(redact("token abcd1234 and abcd and xy")).toBe("token [redacted] and [redacted] and xy");
  });
});
