import { readdirSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../../cli/help.ts";
import { installCommand, packagesFor, TEST_NEEDS } from "../../cli/local/os-packages.ts";

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

/** Whether Node `version` (x.y.z) satisfies an `engines.node` range of the forms packages use here. */
function satisfies(version: string, range: string): boolean {
  const [ma = 0, mi = 0, pa = 0] = version.split(".").map(Number);
  const cmp = (v: string) => {
    const [a = 0, b = 0, c = 0] = v.split(".").map(Number);
    return ma - a || mi - b || pa - c;
  };
  const one = (part: string): boolean => {
    const m = /^(\^|>=|<=|>|<)?\s*(\d+(?:\.\d+){0,2})$/.exec(part.trim());
    if (!m) throw new Error(`engines range not understood: ${part}`);
    const v = m[2] as string;
    switch (m[1]) {
      case "^":
        return cmp(v) >= 0 && ma === Number(v.split(".")[0]);
      case ">=":
        return cmp(v) >= 0;
      case ">":
        return cmp(v) > 0;
      case "<=":
        return cmp(v) <= 0;
      case "<":
        return cmp(v) < 0;
      default:
        return cmp(v) === 0;
    }
  };
  return range.split("||").some((alt) =>
    alt
      .trim()
      .replace(/(>=|<=|>|<)\s+/g, "$1")
      .split(/\s+/)
      .every(one),
  );
}

describe("the README's requirements and benchmarks", () => {
  const pkg = JSON.parse(read("package.json")) as {
    engines: { node: string };
    dependencies: Record<string, string>;
    devDependencies: Record<string, string>;
    scripts: Record<string, string>;
  };
  const quickStart = () => {
    const readme = read("README.md");
    return readme.slice(
      readme.indexOf("## Quick start"),
      readme.indexOf("```", readme.indexOf("## Quick start")),
    );
  };

  it("asks for the Node versions every direct dependency runs on, no more and no fewer", () => {
    const declared = [...Object.keys(pkg.dependencies), ...Object.keys(pkg.devDependencies)].flatMap((d) => {
      const node = JSON.parse(read(`node_modules/${d}/package.json`)).engines?.node as string | undefined;
      return node ? [{ d, node }] : [];
    });
    expect(declared.map((x) => x.d)).toContain("vitest");
    const versions = [18, 19, 20, 21, 22, 23, 24, 25, 26].flatMap((major) =>
      ["0.0", "12.0", "18.9", "19.0", "99.0"].map((rest) => `${major}.${rest}`),
    );
    const wrong = versions.filter((v) => {
      // On Node 20, aws-local-stepfunctions 3 (it declares Node 22) runs with its polyfill: stepfunctions/engine.ts.
      const runs = declared.every(
        (x) => satisfies(v, x.node) || (x.d === "aws-local-stepfunctions" && v.startsWith("20.")),
      );
      return runs !== satisfies(v, pkg.engines.node);
    });
    expect(wrong, `engines.node ${pkg.engines.node} is wrong for these Node versions`).toEqual([]);
    expect(satisfies("23.5.0", pkg.engines.node)).toBe(false);
    expect(quickStart()).toContain(`You need Node \`${pkg.engines.node}\``);
    expect(quickStart()).toContain("`Promise.withResolvers`, polyfilled in `stepfunctions/engine.ts`");
  });

  it("shows the install commands labfleet prints, and the packages npm test installs", () => {
    const text = quickStart().replace(/\s+/g, " ");
    expect(text).toContain(installCommand("apt", ["openjdk-17-jre-headless"]));
    expect(text).toContain(installCommand("dnf", ["java-17-openjdk-headless"]));
    expect(text).toContain(installCommand("brew", ["openjdk@17"]));
    const readme = read("README.md");
    const testing = readme
      .slice(readme.indexOf("### What `npm test` does"), readme.indexOf("## Using the CLI"))
      .replace(/\s+/g, " ");
    const listed = /installs the missing packages \(([^)]*)\)/.exec(testing)?.[1] ?? "";
    expect(listed.split(", ").map((p) => p.replace(/`/g, ""))).toEqual(packagesFor(TEST_NEEDS, "apt"));
    for (const need of TEST_NEEDS) expect(testing).toContain(`\`${need.command}\``);
  });

  it("lists every benchmark: their number, a row each, and each file in the layout", () => {
    const readme = read("README.md");
    const benches = Object.keys(pkg.scripts).filter((k) => k === "bench" || k.startsWith("bench:"));
    const words = ["Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight", "Nine", "Ten"];
    expect(readme).toContain(`${words[benches.length]} benchmarks print figures.`);
    for (const b of benches) expect(readme).toMatch(new RegExp(`^\\| \`npm run ${b}\` +\\|`, "m"));
    const layout = /^\| `bench\/` +\|(.*)\|$/m.exec(readme)?.[1] ?? "";
    const files = readdirSync(new URL("bench/", root)).filter((f) => f.endsWith(".ts"));
    expect(files.length).toBe(benches.length);
    for (const f of files) expect(layout).toContain(`\`${f}\``);
    expect(layout).not.toMatch(/\) `/); // each item is followed by a comma or "and"
  });
});
