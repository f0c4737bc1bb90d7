import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../../cli/help.ts";

const root = new URL("../../", import.meta.url);
const read = (p: string) => readFileSync(new URL(p, root), "utf8");

/** The commands `main()` dispatches: every `case "x":` of its switch, and the ones it answers before it. */
function dispatched(): string[] {
  const main = read("cli/main.ts");
  const body = main.slice(main.indexOf("export async function main("));
  const cases = [...body.matchAll(/case "([a-z-]+)":/g)].map((m) => m[1] as string);
  const early = [...body.matchAll(/command === "([a-z-]+)"/g)].map((m) => m[1] as string);
  return [...new Set([...early, ...cases])];
}

/**
 * What each row of the README's command table documents: the words after `labfleet` up to the first
 * argument, with `a\|b` naming several (`portal release\|revoke` -> "portal release", "portal revoke").
 */
function documented(): Set<string> {
  const readme = read("README.md");
  const table = readme.slice(
    readme.indexOf("| command"),
    readme.indexOf("\n\n", readme.indexOf("| command")),
  );
  const found = new Set<string>();
  for (const line of table.split("\n").slice(2)) {
    const cell = /^\| `labfleet ([^`]*)`/.exec(line)?.[1];
    if (!cell) continue;
    const words: string[] = [];
    for (const w of cell.split(" ")) {
      if (!/^[a-z]/.test(w)) break;
      words.push(w);
    }
    const [first, second] = words;
    if (!first) continue;
    for (const a of first.split("\\|")) {
      found.add(a);
      for (const b of second?.split("\\|") ?? []) found.add(`${a} ${b}`);
    }
  }
  return found;
}

describe("the README's command table", () => {
  it("lists every command the CLI dispatches", () => {
    const commands = dispatched();
    expect(commands).toEqual(expect.arrayContaining(["dev", "status", "extend", "tokens", "portal"]));
    const missing = commands.filter((c) => !documented().has(c));
    expect(missing, `README.md's command table lacks ${missing.join(", ")}`).toEqual([]);
  });

  it("lists every subcommand of portal, hosts and tokens", () => {
    const subs = COMMANDS.flatMap((c) => (c.subcommands ?? []).map((s) => `${c.name} ${s.name}`));
    expect(subs.length).toBeGreaterThan(20);
    const missing = subs.filter((s) => !documented().has(s));
    expect(missing, `README.md's command table lacks ${missing.join(", ")}`).toEqual([]);
  });

  it("says how to choose the port of npm start", () => {
    expect(read("README.md")).toContain("npm start -- --port N");
  });
});
