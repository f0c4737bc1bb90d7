import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { completionScript } from "../../cli/completion.ts";
import { COMMANDS, closest, commandOptions, findCommand, OPTIONS, type OptionSpec } from "../../cli/help.ts";
import { options as parseOptions } from "../../cli/main.ts";

let dir: string;
let bashFile: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "labfleet-completion-"));
  bashFile = join(dir, "labfleet.bash");
  writeFileSync(bashFile, completionScript("bash"));
  // A folder to complete file names in.
  const files = join(dir, "files");
  mkdirSync(join(files, "labs"), { recursive: true });
  for (const f of ["workshop.yaml", "other.yml", "notes.txt", "roster.csv"])
    writeFileSync(join(files, f), "");
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** What bash offers for the last word, with the script sourced in a real bash. */
function complete(words: string[], cwd = dir): string[] {
  const r = spawnSync(
    "bash",
    [
      "-c",
      // biome-ignore lint/suspicious/noTemplateCurlyInString: bash parameters, not a template
      'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); _labfleet; printf "%s\\n" "${COMPREPLY[@]}"',
      "_",
      bashFile,
      "labfleet",
      ...words,
    ],
    { cwd, encoding: "utf8" },
  );
  expect(r.stderr).toBe("");
  expect(r.status).toBe(0);
  return r.stdout.split("\n").filter(Boolean).sort();
}

const flagsOf = (name: keyof typeof OPTIONS) => {
  const spec: OptionSpec = OPTIONS[name];
  return [...(spec.short ? [`-${spec.short}`] : []), `--${name}`];
};

describe("bash completion", () => {
  it("completes command names, and every command in the table", () => {
    expect(complete(["por"])).toEqual(["portal"]);
    expect(complete(["do"])).toEqual(["doctor", "down"]);
    expect(complete([""])).toEqual(COMMANDS.map((c) => c.name).sort());
  });

  it("completes the subcommands of portal, hosts and tokens", () => {
    expect(complete(["portal", ""])).toEqual(
      [
        "admin-link",
        "checks",
        "close",
        "export",
        "info",
        "invite",
        "open",
        "publish",
        "reassign",
        "release",
        "revoke",
        "rotate-code",
        "slide",
        "status",
        "swap",
        "unblock",
        "unlock",
        "unqueue",
      ].sort(),
    );
    expect(complete(["portal", "re"])).toEqual(["reassign", "release", "revoke"]);
    expect(complete(["hosts", ""])).toEqual(
      [
        "approve",
        "credentials",
        "disable",
        "drain",
        "enable",
        "forget-key",
        "join-token",
        "join-tokens",
        "keys",
        "pending",
        "pin",
        "pubkey",
        "reject",
        "remove",
        "revoke-token",
        "rotate-secret",
      ].sort(),
    );
    expect(complete(["tokens", ""])).toEqual(["create", "list", "revoke"]);
    // Options before the command do not confuse it.
    expect(complete(["-o", "json", "tokens", "l"])).toEqual(["list"]);
    expect(complete(["--output=json", "hosts", "p"])).toEqual(["pending", "pin", "pubkey"]);
  });

  it("completes each command's own options after -", () => {
    expect(complete(["up", "-"])).toEqual(
      [
        "-f",
        "--file",
        "--force",
        "--only",
        "--skip",
        "--check",
        "--plan",
        "-o",
        "--output",
        "-h",
        "--help",
      ].sort(),
    );
    expect(complete(["up", "--f"])).toEqual(["--file", "--force"]);
    expect(complete(["retry", "my-workshop", "--"])).toEqual(
      [
        "--file",
        "--host",
        "--label",
        "--jobs",
        "--failed-only",
        "--all-selected",
        "--force",
        "--only",
        "--skip",
        "--check",
        "--output",
        "--help",
      ].sort(),
    );
    expect(complete(["login", "--"])).toEqual(["--help", "--output", "--token", "--url"]);
    // A subcommand's own options come with it.
    expect(complete(["portal", "export", "ws", "--"])).toEqual(["--csv", "--file", "--help", "--output"]);
    expect(complete(["portal", "open", "ws", "--"])).toEqual(["--file", "--help", "--output"]);
    expect(complete(["portal", "unblock", "ws", "--"])).toEqual([
      "--address",
      "--all",
      "--file",
      "--help",
      "--output",
    ]);
    expect(complete(["tokens", "create", "ci", "--e"])).toEqual(["--expires-days"]);
    // Before a command: the global ones.
    expect(complete(["--"])).toEqual(["--help", "--version"]);
    // Every command's options are those of the table.
    for (const cmd of COMMANDS) {
      expect(complete([cmd.name, "-"])).toEqual(
        commandOptions(cmd)
          .flatMap((o) => flagsOf(o.name))
          .sort(),
      );
    }
  });

  it("completes -f to workshop files and folders, --output to json|text", () => {
    const files = join(dir, "files");
    expect(complete(["up", "-f", ""], files)).toEqual(["labs", "other.yml", "workshop.yaml"]);
    expect(complete(["status", "--file", "w"], files)).toEqual(["workshop.yaml"]);
    expect(complete(["status", "--output", ""])).toEqual(["json", "text"]);
    expect(complete(["status", "-o", "j"])).toEqual(["json"]);
    // bash splits --output=j at the "=".
    expect(complete(["status", "--output", "=", "t"])).toEqual(["text"]);
    expect(complete(["portal", "export", "ws", "--csv", "r"], files)).toEqual(["roster.csv"]);
    expect(complete(["dev", "--data-dir", ""], files)).toEqual(["labs"]);
    // A free-form value offers nothing rather than something wrong.
    expect(complete(["extend", "ws", "--hours", ""])).toEqual([]);
  });

  it("completes the arguments of help, completion and portal invite", () => {
    expect(complete(["help", "st"])).toEqual(["status"]);
    expect(complete(["completion", ""])).toEqual(["bash", "zsh"]);
    const files = join(dir, "files");
    // invite WORKSHOP ROSTER.csv: the workshop is a name, the roster a file; -f stands for the workshop.
    expect(complete(["portal", "invite", ""], files)).toEqual([]);
    expect(complete(["portal", "invite", "ws", "ro"], files)).toEqual(["roster.csv"]);
    expect(complete(["portal", "invite", "-f", "workshop.yaml", "ro"], files)).toEqual(["roster.csv"]);
  });
});

describe("zsh completion", () => {
  const script = completionScript("zsh");

  it("is a #compdef function that names every command, subcommand and option of the table", () => {
    expect(script.startsWith("#compdef labfleet\n")).toBe(true);
    expect(script).toContain("compdef _labfleet labfleet");
    for (const cmd of COMMANDS) {
      expect(script).toContain(`'${cmd.name}:`); // in _labfleet_commands, with its summary
      expect(script).toMatch(new RegExp(`^    ${cmd.name}\\)$`, "m")); // its own _arguments
      for (const s of cmd.subcommands ?? []) expect(script).toContain(`'${s.name}:`);
    }
    for (const name of Object.keys(OPTIONS)) expect(script).toContain(`--${name}`);
    expect(script).toContain(":FILE:_files -g '\\''*.(yaml|yml)'\\''");
    expect(script).toContain(":FORMAT:(json text)");
  });

  it("is valid zsh that registers itself with compinit (checked when zsh is installed)", () => {
    const zsh = spawnSync("sh", ["-c", "command -v zsh"], { encoding: "utf8" }).stdout.trim();
    if (!zsh) {
      // Without zsh, the structure the previous test checks is what can be checked: balanced blocks at least.
      const count = (re: RegExp) => script.match(re)?.length ?? 0;
      expect(count(/\{\s*$/gm)).toBe(count(/^\s*\}\s*$/gm));
      expect(count(/^\s*case .* in$/gm)).toBe(count(/^\s*esac$/gm));
      return;
    }
    const file = join(dir, "_labfleet");
    writeFileSync(file, script);
    const syntax = spawnSync(zsh, ["-n", file], { encoding: "utf8" });
    expect(syntax.stderr).toBe("");
    expect(syntax.status).toBe(0);
    const loaded = spawnSync(
      zsh,
      [
        "-f",
        "-c",
        `autoload -U compinit; compinit -u -d "$1/zcompdump"; source "$2"; print -r -- $_comps[labfleet]`,
        "_",
        dir,
        file,
      ],
      { encoding: "utf8" },
    );
    expect(loaded.stderr).toBe("");
    expect(loaded.stdout.trim()).toBe("_labfleet");
  });
});

describe("the command table", () => {
  it("describes exactly the options main.ts parses", () => {
    expect(Object.keys(parseOptions).sort()).toEqual(Object.keys(OPTIONS).sort());
    for (const [name, p] of Object.entries(parseOptions)) {
      const spec: OptionSpec = OPTIONS[name as keyof typeof OPTIONS];
      expect({
        name,
        short: spec.short,
        value: Boolean(spec.value),
        multiple: Boolean(spec.multiple),
      }).toEqual({
        name,
        short: "short" in p ? p.short : undefined,
        value: p.type === "string",
        multiple: "multiple" in p && p.multiple,
      });
    }
  });

  it("lists exactly the commands main.ts runs", () => {
    // main.ts's dispatch: the cases of its `switch (command)`, plus help and completion it answers first.
    const source = readFileSync(new URL("../../cli/main.ts", import.meta.url), "utf8");
    const dispatch = source.slice(source.indexOf("switch (command) {"));
    const cases = [...dispatch.slice(0, dispatch.indexOf("default:")).matchAll(/case "([a-z-]+)":/g)].map(
      (m) => m[1],
    );
    expect([...cases, "help", "completion"].sort()).toEqual(COMMANDS.map((c) => c.name).sort());
  });

  it("gives every command a usage line, an example and only known options", () => {
    for (const cmd of COMMANDS) {
      expect(cmd.usage.length, cmd.name).toBeGreaterThan(0);
      for (const [syn] of cmd.usage) expect(syn.startsWith(cmd.name), syn).toBe(true);
      expect(cmd.examples.length, cmd.name).toBeGreaterThan(0);
      for (const e of cmd.examples) expect(e.command, cmd.name).toContain(`labfleet ${cmd.name}`);
      for (const o of commandOptions(cmd, "all")) expect(OPTIONS).toHaveProperty([o.name]);
      // --output is listed where, and only where, the command prints JSON with it.
      expect(
        commandOptions(cmd).some((o) => o.name === "output"),
        cmd.name,
      ).toBe(cmd.json);
    }
    expect(findCommand("nope")).toBeUndefined();
  });

  it("suggests the closest command for a typo, and nothing for a word unlike any", () => {
    const names = COMMANDS.map((c) => c.name);
    expect(closest("stauts", names)).toBe("status");
    expect(closest("portl", names)).toBe("portal");
    expect(closest("tokn", names)).toBe("tokens");
    expect(closest("open", names)).toBe("open-access");
    expect(closest("DEPLOY", names)).toBe("deploy");
    expect(closest("frobnicate", names)).toBeUndefined();
  });
});
