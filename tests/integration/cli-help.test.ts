import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { COMMANDS } from "../../cli/help.ts";
import { main } from "../../cli/main.ts";
import { ProgressView } from "../../cli/progress.ts";
import { type Output, paint, stdoutOutput, writeTable } from "../../cli/render.ts";
import { cliBin, runCli } from "../harness/cli.ts";

// biome-ignore lint/suspicious/noControlCharactersInRegex: looking for colour codes
const COLOR = /\u001b\[\d+m/;

let dir: string;
let badYaml: string;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "labfleet-cli-help-"));
  badYaml = join(dir, "bad.yaml");
  writeFileSync(
    badYaml,
    "name: BAD\nlab:\n  source: ./lab\n  setup: ''\nprovider:\n  type: local\n  count: 0\n",
  );
});
afterAll(() => {
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Runs main() in this process, its output captured as if stdout were `stream`. */
async function inProcess(argv: string[], env: NodeJS.ProcessEnv = {}, isTTY = false) {
  let text = "";
  const out = stdoutOutput({ isTTY, write: (t: string) => (text += t) }, env);
  const code = await main(argv, out);
  return { code, text, out };
}

describe("labfleet --help and labfleet help COMMAND", () => {
  it("--help lists every command of the table with its usage, and exits 0", async () => {
    const r = await runCli(["--help"]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe("");
    for (const cmd of COMMANDS) for (const [syn] of cmd.usage) expect(r.stdout).toContain(`labfleet ${syn}`);
    expect(r.stdout).toContain("labfleet help COMMAND");
    expect(r.stdout).toContain("Exit codes: 0 success; 1 a lab, host or run failed");
    // `labfleet help` alone is the same page.
    expect((await inProcess(["help"])).text).toBe(r.stdout);
  });

  it("help CMD and CMD --help print its usage, options and examples, and exit 0", async () => {
    const help = await runCli(["help", "up"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^labfleet up: /);
    expect(help.stdout).toContain("Usage:\n  labfleet up -f workshop.yaml [--force]");
    expect(help.stdout).toMatch(/^ {2}--plan +print what would be created or reused per host/m);
    expect(help.stdout).toMatch(/^ {2}-o, --output FORMAT +text \(the default\) or json/m);
    expect(help.stdout).toContain("Examples:\n  npx labfleet up -f workshop.yaml\n");
    const flag = await runCli(["up", "--help"]);
    expect(flag.code).toBe(0);
    expect(flag.stdout).toBe(help.stdout);
    // Whatever else is on the line, --help only shows help: nothing runs, no runtime is needed.
    const portal = await runCli(["portal", "release", "my-workshop", "student-01", "-h"], { cwd: "/" });
    expect(portal.code).toBe(0);
    expect(portal.stdout).toContain("Subcommands:\n  open ");
    expect(portal.stdout).toMatch(/^ {2}--csv FILE +/m);
    expect(portal.stdout).toContain("npx labfleet portal export my-workshop --csv claims.csv");
  });

  it("has help with usage, options and an example for every command", async () => {
    for (const cmd of COMMANDS) {
      const r = await inProcess(["help", cmd.name]);
      expect(r.code, cmd.name).toBe(0);
      expect(r.text).toContain(`Usage:\n  labfleet ${cmd.name}`);
      expect(r.text).toMatch(/^Options:\n {2}-/m);
      expect(r.text).toMatch(new RegExp(`^Examples:\\n {2}.*labfleet ${cmd.name}`, "m"));
      expect((await inProcess([cmd.name, "--help"])).text).toBe(r.text);
    }
  });

  it("help --output json is the same table as data", async () => {
    const one = await runCli(["help", "portal", "--output", "json"]);
    expect(one.code).toBe(0);
    const doc = JSON.parse(one.stdout);
    expect(doc.name).toBe("portal");
    expect(doc.subcommands.map((s: { name: string }) => s.name)).toContain("rotate-code");
    expect(doc.options.map((o: { name: string }) => o.name)).toEqual([
      "--file",
      "--output",
      "--csv",
      "--address",
      "--all",
      "--help",
    ]);
    expect(doc.examples.length).toBeGreaterThan(0);
    const all = JSON.parse((await inProcess(["--help", "-o", "json"])).text);
    expect(all.commands.map((c: { name: string }) => c.name)).toEqual(COMMANDS.map((c) => c.name));
    const version = await inProcess(["--version", "--output", "json"]);
    expect(JSON.parse(version.text)).toEqual({ version: "0.1.0" });
  });

  it("an unknown command or subcommand is exit 2 with the closest one as a hint", async () => {
    const typo = await runCli(["stauts", "my-workshop"]);
    expect(typo.code).toBe(2);
    expect(typo.stdout).toBe("");
    expect(typo.stderr).toContain("unknown command stauts. Did you mean `labfleet status`?");
    const help = await runCli(["help", "portl"]);
    expect(help.code).toBe(2);
    expect(help.stderr).toContain("Did you mean `labfleet portal`?");
    const flag = await runCli(["deplyo", "--help"]);
    expect(flag.code).toBe(2);
    expect(flag.stderr).toContain("Did you mean `labfleet deploy`?");
    const sub = await runCli(["help", "portal", "relase"]);
    expect(sub.code).toBe(2);
    expect(sub.stderr).toContain("Did you mean `labfleet portal release`?");
    // Nothing close: where to look instead.
    const far = await runCli(["frobnicate"]);
    expect(far.code).toBe(2);
    expect(far.stderr).toBe("labfleet: unknown command frobnicate\n`labfleet --help` lists every command.\n");
    // An unknown option is bad usage too, with a pointer rather than pages of help.
    const option = await runCli(["up", "--frobnicate"]);
    expect(option.code).toBe(2);
    expect(option.stderr).toContain("'--frobnicate'");
    expect(option.stderr).toContain("labfleet help COMMAND");
    // No command at all: the overview, as a usage error.
    const none = await runCli([]);
    expect(none.code).toBe(2);
    expect(none.stdout).toContain("labfleet up -f workshop.yaml");
  });
});

describe("labfleet completion", () => {
  it("prints a bash script that a real bash sources and completes with", () => {
    const run = (words: string) =>
      spawnSync(
        "bash",
        [
          "-c",
          `source <("$0" "$1" completion bash) && COMP_WORDS=(${words}); COMP_CWORD=$(( \${#COMP_WORDS[@]} - 1 )); _labfleet; printf "%s\\n" "\${COMPREPLY[@]}"`,
          process.execPath,
          cliBin,
        ],
        { encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } },
      );
    const por = run("labfleet por");
    expect(por.stderr).toBe("");
    expect(por.stdout).toBe("portal\n");
    const sub = run("labfleet portal rot");
    expect(sub.stdout).toBe("rotate-code\n");
    const opts = run("labfleet up -").stdout.split("\n").filter(Boolean).sort();
    expect(opts).toEqual([
      "--check",
      "--file",
      "--force",
      "--help",
      "--only",
      "--output",
      "--plan",
      "--skip",
      "-f",
      "-h",
      "-o",
    ]);
  });

  it("prints a zsh script, refuses other shells with exit 2, and answers --output json", async () => {
    const zsh = await runCli(["completion", "zsh"]);
    expect(zsh.code).toBe(0);
    expect(zsh.stdout.startsWith("#compdef labfleet\n")).toBe(true);
    const fish = await runCli(["completion", "fish"]);
    expect(fish.code).toBe(2);
    expect(fish.stderr).toContain("no completion for fish: choose bash or zsh");
    expect((await runCli(["completion"])).code).toBe(2);
    const json = await inProcess(["completion", "bash", "--output", "json"]);
    const doc = JSON.parse(json.text);
    expect(doc.shell).toBe("bash");
    expect(doc.script).toContain("complete -F _labfleet labfleet");
  });
});

describe("colour and NO_COLOR", () => {
  it("colours only on a terminal without NO_COLOR or TERM=dumb", async () => {
    const tty = await inProcess(["validate", "-f", badYaml], { TERM: "xterm" }, true);
    expect(tty.code).toBe(1);
    expect(tty.text).toContain("\u001b[31m3 errors\u001b[0m");
    for (const env of [{ NO_COLOR: "1" }, { NO_COLOR: "true", TERM: "xterm" }, { TERM: "dumb" }]) {
      const plain = await inProcess(["validate", "-f", badYaml], env, true);
      expect(plain.code).toBe(1);
      expect(plain.text).not.toMatch(COLOR);
      expect(plain.text).toContain(": 3 errors\n");
    }
    // An empty NO_COLOR is unset (no-color.org), and a pipe is never coloured.
    expect((await inProcess(["validate", "-f", badYaml], { NO_COLOR: "" }, true)).text).toMatch(COLOR);
    expect((await inProcess(["validate", "-f", badYaml], {}, false)).text).not.toMatch(COLOR);
    // The real process: NO_COLOR set and no terminal.
    const r = await runCli(["validate", "-f", badYaml]);
    expect(r.code).toBe(1);
    expect(r.stdout).not.toMatch(COLOR);
  });

  it("redraws progress in place on a terminal, uncoloured with NO_COLOR; TERM=dumb gets plain lines", () => {
    const host = {
      id: "student-01",
      state: "failed",
      phase: "setup",
      error: "setup exited with code 7",
      phases: [{ name: "setup" }],
    } as unknown as Parameters<ProgressView["update"]>[0][number];
    const draw = (env: NodeJS.ProcessEnv) => {
      let text = "";
      const out: Output = stdoutOutput({ isTTY: true, write: (t: string) => (text += t) }, env);
      new ProgressView(out).update([host]);
      return text;
    };
    const noColor = draw({ NO_COLOR: "1" });
    expect(noColor).toContain("\u001b[2K"); // still live
    expect(noColor).not.toMatch(COLOR);
    expect(draw({})).toContain("\u001b[31mfailed");
    const dumb = draw({ TERM: "dumb" });
    expect(dumb).not.toContain("\u001b");
    expect(dumb).toMatch(/^student-01 +failed +setup \(phase 1\) +setup exited with code 7\n$/);
  });

  it("lines up table columns whether or not the cells are coloured", () => {
    const lines = (color: boolean) => {
      let text = "";
      const out: Output = { isTTY: true, color, write: (t) => (text += t) };
      // Colour comes only from paint(): a colour code inside a cell's own text is escaped like any other.
      writeTable(
        [
          ["host", "result", "note"],
          ["student-01", paint(out, "failed", "FAIL"), "x"],
        ],
        out,
      );
      if (color) expect(text).toContain("\u001b[31mFAIL\u001b[0m");
      // biome-ignore lint/suspicious/noControlCharactersInRegex: removing colour codes
      return text.replace(/\u001b\[\d+m/g, "");
    };
    expect(lines(true)).toBe(lines(false));
    expect(lines(false)).toBe("host        result  note\nstudent-01  FAIL    x\n");
  });
});
