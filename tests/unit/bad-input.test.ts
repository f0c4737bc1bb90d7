import { describe, expect, it } from "vitest";
import { block, clean, jsonText, type Output, paint, writeTable } from "../../cli/render.ts";
import { csvCell, csvLine } from "../../shared/portal/csv.ts";
import { parseRoster } from "../../shared/portal/portal.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { escapeControlChars, hasControlChars } from "../../shared/runtime/text.ts";
import { validateWorkshopYaml, WORKSHOP_YAML_LIMITS } from "../../shared/workshop/load.ts";
import { CONTROL_CLASSES, RAW_CONTROL as RAW } from "../harness/control-chars.ts";

function capture(color = false): Output & { text: () => string } {
  const parts: string[] = [];
  return { write: (t) => void parts.push(t), isTTY: false, color, text: () => parts.join("") };
}

describe("control characters in text", () => {
  it.each(CONTROL_CLASSES)("%s is found and shown as an escape", (_, ch, shown) => {
    expect(hasControlChars(`Ada${ch}Lovelace`)).toBe(true);
    expect(escapeControlChars(`Ada${ch}Lovelace`)).toBe(`Ada${shown}Lovelace`);
    expect(clean(`Ada${ch}Lovelace`)).toBe(`Ada${shown}Lovelace`);
  });

  it("leaves ordinary text alone, accents and scripts included", () => {
    for (const s of ["Ada Lovelace", "Zoë Ørsted-Łukasz", "山田 太郎", "José \\x1b literal"]) {
      expect(hasControlChars(s)).toBe(false);
      expect(clean(s)).toBe(s);
    }
  });

  it("block() keeps line breaks of text of several lines and escapes the rest", () => {
    expect(block("line one\nline\u001b[2J two\r\n")).toBe("line one\nline\\x1b[2J two\\r\n");
  });

  it("a table cell cannot start a fake row or reach the terminal as a sequence", () => {
    const out = capture(true);
    writeTable(
      [
        ["lab", "state", "name"],
        ["student-01", paint(out, "ready"), "Eve\u001b[2J\nstudent-99  free"],
      ],
      out,
    );
    const lines = out.text().split("\n").filter(Boolean);
    expect(lines).toHaveLength(2);
    expect(lines[1]).toContain("Eve\\x1b[2J\\nstudent-99  free");
    // The only escape sequences left are the colour paint() wrote itself, around escaped text.
    expect(lines[1]?.replaceAll("\u001b[32m", "").replaceAll("\u001b[0m", "")).not.toMatch(RAW);
    expect(lines[1]).toContain("\u001b[32mready\u001b[0m");
  });

  it("paint() escapes the text it colours", () => {
    expect(String(paint(capture(true), "failed", "x\u001b]0;owned\u0007"))).toBe(
      "\u001b[31mx\\x1b]0;owned\\x07\u001b[0m",
    );
    expect(String(paint(capture(false), "failed", "x\ny"))).toBe("x\\ny");
  });

  it("--output json escapes what JSON.stringify leaves (DEL, C1, direction marks) and reads back the same", () => {
    const doc = { name: "a\u001b\u007f\u009b\u202eb", n: 1 };
    const text = jsonText(doc);
    expect(text).not.toMatch(RAW);
    expect(text).toContain("\\u009b");
    expect(JSON.parse(text)).toEqual(doc);
  });
});

describe("CSV cells", () => {
  it.each(["=1+1", "+1", "-2", "@SUM(A1)", "\tx", "\rx"])("%j is read as text, not a formula", (v) => {
    expect(csvCell(v).replace(/^"/, "")).toMatch(/^'/);
  });

  it("escapes control characters and quotes commas, quotes and edge spaces", () => {
    expect(csvCell("Eve\u001b[2J\r\nlab-99,x")).toBe('"Eve\\x1b[2J\\r\\nlab-99,x"');
    expect(csvCell('say "hi"')).toBe('"say ""hi"""');
    expect(csvCell(" padded")).toBe('" padded"');
    expect(csvCell(null)).toBe("");
    expect(csvLine(["a", "b,c", "=x"])).toBe(`a,"b,c",'=x`);
  });
});

describe("roster rows", () => {
  it.each(CONTROL_CLASSES.filter(([name]) => name !== "LF" && name !== "CR"))(
    "a %s inside a cell is refused with the row and the field",
    (_, ch) => {
      const csv = `name,email\nAda Lovelace,ada@example.com\nEve Mallory${ch}x,eve@example.com\n`;
      let err: unknown;
      try {
        parseRoster(csv);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(VisibleError);
      expect((err as VisibleError).details).toEqual([
        { path: "roster[2].name", message: expect.stringContaining("control characters") },
      ]);
      expect((err as VisibleError).message).toMatch(/^roster line 3: /);
    },
  );

  it("refuses a control character in an email or host id, and reads a spreadsheet's byte order mark", () => {
    expect(() => parseRoster("Ada,ada@example.com,student-0\u001b1\n")).toThrow(/host_id must not contain/);
    expect(() => parseRoster("Ada,a\u0007da@example.com\n")).toThrow(/email must not contain/);
    expect(parseRoster("\uFEFFname,email\nAda,ada@example.com\n")).toEqual([
      { name: "Ada", email: "ada@example.com" },
    ]);
  });
});

function yamlErrors(text: string) {
  const r = validateWorkshopYaml(text);
  if (r.ok) throw new Error("expected the file to be refused");
  return r.errors;
}

const lab = "lab:\n  source: ./lab\n  setup: bash setup.sh\nprovider:\n  type: local\n  count: 1\n";

describe("workshop.yaml limits", () => {
  it("refuses an alias bomb (billion laughs) with the line of the alias, not an exception", () => {
    const levels = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"];
    const names = "abcdefg";
    for (let i = 1; i < names.length; i++)
      levels.push(
        `${names[i]}: &${names[i]} [${Array(9)
          .fill(`*${names[i - 1]}`)
          .join(", ")}]`,
      );
    const errors = yamlErrors(`name: bomb\n${levels.join("\n")}\n`);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ path: "(yaml)", line: 8 });
    expect(errors[0]?.message).toMatch(
      /^not valid here: aliases expand too far .*; \*f expands to [\d,]+ nodes$/,
    );
  });

  it("refuses an alias inside its own anchor", () => {
    const errors = yamlErrors(
      `name: x\na: &a [1, *a]\nb: &b [${Array(12).fill("*a").join(", ")}]\nc: [${Array(12).fill("*b").join(", ")}]\n`,
    );
    expect(errors[0]).toMatchObject({ path: "(yaml)", line: 2 });
    expect(errors[0]?.message).toMatch(/\*a refers to the node that holds it/);
  });

  it("keeps ordinary anchors: one used for each of 64 hosts, or through 99 aliases", () => {
    const hosts = Array.from({ length: 64 }, (_, i) => `  - { id: h${i}, ssh: *addr, labels: *room }`);
    const r = validateWorkshopYaml(
      `name: x\nlab:\n  source: ./lab\n  setup: bash setup.sh\nprovider:\n  type: static\nx-addr: &addr lab@127.0.0.1\nx-room: &room { room: a }\nhosts:\n${hosts.join("\n")}\n`,
    );
    // Refused for the two anchors' own unknown keys only: the aliases themselves pass.
    expect(r.ok ? [] : r.errors.map((e) => e.path).sort()).toEqual(["x-addr", "x-room"]);
    const uses = Array.from({ length: WORKSHOP_YAML_LIMITS.maxAliasCount - 1 }, () => "*d").join(", ");
    expect(yamlErrors(`name: x\n${lab}x-d: &d { a: 1 }\nx-list: [${uses}]\n`).map((e) => e.path)).toEqual([
      "x-d",
      "x-list",
    ]);
  });

  it("refuses flow nesting 100,000 deep at once, with the line and column", () => {
    const n = 100_000;
    const errors = yamlErrors(`name: x\nlab: ${"[".repeat(n)}${"]".repeat(n)}\n`);
    expect(errors).toEqual([
      {
        path: "(yaml)",
        message: `not valid here: mappings and lists nested more than ${WORKSHOP_YAML_LIMITS.maxDepth} levels deep`,
        line: 2,
        column: 6 + WORKSHOP_YAML_LIMITS.maxDepth,
      },
    ]);
  });

  it("refuses block nesting deeper than the limit, and flow and block mixed", () => {
    let block = "name: x\nlab:\n";
    for (let i = 0; i < 1000; i++) block += `${" ".repeat(i + 2)}k${i}:\n`;
    const errors = yamlErrors(block);
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ path: "(yaml)", line: 66, column: 66 });
    expect(errors[0]?.message).toMatch(/nested more than 64 levels deep/);

    let mixed = "name: x\nlab:\n";
    for (let i = 0; i < 40; i++) mixed += `${" ".repeat(i + 2)}k${i}:\n`;
    mixed += `${" ".repeat(42)}v: ${"[".repeat(30)}${"]".repeat(30)}\n`;
    expect(yamlErrors(mixed)[0]?.message).toMatch(/nested more than 64 levels deep/);
  });

  it("counts brackets only where YAML reads them: not in scalars, block scalars or comments", () => {
    const b = "[".repeat(200);
    const r = validateWorkshopYaml(
      `name: x\nlab:\n  source: ./lab\n  setup: |\n    [[ -f x ]] && echo '${b}'\n    ${b}\n  health: "${b}"\n  ref: echo ${b}\nprovider:\n  type: local\n  count: 1\n# ${b}\n`,
    );
    expect(r.ok ? [] : r.errors.map((e) => e.path)).toEqual(["lab.ref"]); // a ref needs a git source
  });

  it("refuses a file over 1 MiB before parsing it", () => {
    const errors = yamlErrors(`name: x\n${lab}# ${"x".repeat(WORKSHOP_YAML_LIMITS.maxBytes)}\n`);
    expect(errors).toEqual([
      {
        path: "(yaml)",
        message: expect.stringMatching(/^workshop\.yaml is [\d,]+ bytes; it may be at most 1 MiB/),
      },
    ]);
    // Bytes, not characters: multi-byte text counts as what it weighs.
    expect(yamlErrors(`name: x\n# ${"é".repeat(WORKSHOP_YAML_LIMITS.maxBytes / 2)}\n`)[0]?.message).toMatch(
      /^workshop\.yaml is/,
    );
  });
});

describe("lab.dir on local hosts", () => {
  const local = (dir: string, type = "local") =>
    `name: x\nlab:\n  source: ./lab\n  setup: bash setup.sh\n  dir: ${JSON.stringify(dir)}\nprovider:\n  type: ${type}\n  count: 1\n${type === "static" ? "hosts:\n  - id: h1\n    ssh: lab@127.0.0.1\n" : ""}`;

  it.each([
    ["/etc", "not an absolute one"],
    ["../x", "without .."],
    ["a/../../x", "without .."],
    ["a/../b", "without .."],
    [".", "not the host's folder itself"],
    ["./", "not the host's folder itself"],
    [".labfleet/x", "other than .labfleet"],
  ])("refuses %j with the field's path and line", (dir, why) => {
    const errors = yamlErrors(local(dir));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ path: "lab.dir", line: 5 });
    expect(errors[0]?.message).toContain("expected a folder inside the local host's own folder");
    expect(errors[0]?.message).toContain(why);
  });

  it("accepts folders inside the host's folder", () => {
    for (const dir of ["lab", "labs/week-1", "./lab", "lab.d/.x"])
      expect(validateWorkshopYaml(local(dir)).ok).toBe(true);
  });

  it("leaves SSH and EC2 hosts their absolute folders", () => {
    expect(validateWorkshopYaml(local("/opt/lab", "static")).ok).toBe(true);
    expect(validateWorkshopYaml(local("/opt/lab", "aws")).ok).toBe(true);
  });
});
