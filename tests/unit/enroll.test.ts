import { describe, expect, it } from "vitest";
import { parseExpires } from "../../cli/enroll-commands.ts";
import { unmetRequirements } from "../../shared/agent/join-requirements.ts";
import { JOIN_TOKEN_PATTERN, joinCommand } from "../../shared/agent/join-tokens.ts";

describe("lab.requires at join", () => {
  it("passes a machine that reports enough, with the kernel's share of memory allowed", () => {
    const req = {
      cpus: 2,
      memory_gib: 16,
      disk_gib: 20,
      kvm: true,
      nested_virtualization: true,
      commands: ["git"],
    };
    const facts = {
      cpus: 2,
      memoryMb: 15.5 * 1024,
      diskGb: 20,
      kvm: true,
      nested: true,
      commands: ["git", "bash"],
    };
    expect(unmetRequirements(req, facts)).toEqual([]);
    expect(unmetRequirements({}, {})).toEqual([]);
  });

  it("lists every requirement missed, at the fact's path, with what the machine has", () => {
    const req = {
      cpus: 4,
      memory_gib: 8,
      disk_gib: 50,
      kvm: true,
      nested_virtualization: true,
      commands: ["git", "make"],
    };
    expect(
      unmetRequirements(req, { cpus: 2, memoryMb: 4096, diskGb: 10.25, kvm: false, commands: ["git"] }),
    ).toEqual([
      { path: "facts.cpus", message: "expected at least 4 CPUs; the machine has 2" },
      { path: "facts.memoryMb", message: "expected at least 8 GiB of memory; the machine has 4 GiB" },
      { path: "facts.diskGb", message: "expected at least 50 GiB of free disk; the machine has 10.3 GiB" },
      { path: "facts.kvm", message: "expected /dev/kvm; the machine has none" },
      { path: "facts.nested", message: "expected nested virtualization; not reported" },
      {
        path: "facts.commands",
        message: "expected the commands make on the PATH; the machine did not report them",
      },
    ]);
  });
});

describe("the join line and token", () => {
  it("keeps the token in bash's environment, and quotes what a shell would read", () => {
    const token = `lfj_room-1_${"a".repeat(43)}`;
    expect(JOIN_TOKEN_PATTERN.exec(token)?.[1]).toBe("room-1");
    expect(joinCommand("http://127.0.0.1:8787/", token)).toBe(
      `curl -fsSL http://127.0.0.1:8787/agent/v1/agent.sh | LABFLEET_JOIN_TOKEN=${token} bash -s -- join http://127.0.0.1:8787`,
    );
    expect(joinCommand("https://x.test/a b", token)).toContain("'https://x.test/a b/agent/v1/agent.sh'");
    expect(JOIN_TOKEN_PATTERN.test("lfj_Room_x")).toBe(false);
  });

  it("reads --expires as a number and a unit", () => {
    expect(parseExpires("24h")).toBe(86_400);
    expect(parseExpires("90m")).toBe(5400);
    expect(parseExpires("7d")).toBe(604_800);
    expect(() => parseExpires("30s")).toThrow("--expires takes a time from 1m to 30d");
    expect(() => parseExpires("31d")).toThrow("got 31d");
    expect(() => parseExpires("1.5h")).toThrow();
  });
});
