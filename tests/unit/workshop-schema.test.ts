import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { workshopJsonSchema } from "../../shared/workshop/json-schema.ts";
import { formatErrors, resolveLabSource, validateWorkshopYaml } from "../../shared/workshop/load.ts";

const root = new URL("../../", import.meta.url).pathname;

const minimal = `name: intro
lab:
  source: ./lab
  setup: bash setup.sh
provider:
  type: local
  count: 2
`;

function errorsOf(yaml: string) {
  const r = validateWorkshopYaml(yaml);
  if (r.ok) throw new Error("expected the file to be invalid");
  return r.errors;
}

describe("workshop.yaml schema", () => {
  it("fills the documented defaults", () => {
    const r = validateWorkshopYaml(minimal);
    expect(r.ok).toBe(true);
    if (!r.ok) return;
    expect(r.workshop.lab).toMatchObject({
      dir: "lab",
      concurrency: 4,
      timeout_minutes: 180,
      poll_seconds: 60,
      operator_secrets: [],
    });
    expect(r.workshop.provider).toEqual({
      type: "local",
      count: 2,
      host_id_prefix: "student-",
      ttl_hours: 6,
    });
    expect(r.workshop.portal).toMatchObject({ enabled: false, code_letters: 6, open_at_percent: 100 });
    expect(r.workshop.hosts).toEqual([]);
  });

  it("reports every error at once, each with its YAML path, expectation and line", () => {
    const errors = errorsOf(`name: Not_Valid
lab:
  source: ./lab
  setup: ""
  concurrency: 100
  colour: blue
provider:
  type: local
  count: 65
  ttl_hours: 200
portal:
  code_letters: 3
`);
    const byPath = Object.fromEntries(errors.map((e) => [e.path, e]));
    expect(Object.keys(byPath).sort()).toEqual(
      [
        "lab.colour",
        "lab.concurrency",
        "lab.setup",
        "name",
        "portal.code_letters",
        "provider.count",
        "provider.ttl_hours",
      ].sort(),
    );
    expect(byPath["lab.concurrency"]?.message).toMatch(/from 1 to 64/);
    expect(byPath["lab.concurrency"]?.line).toBe(5);
    expect(byPath["provider.count"]?.message).toMatch(/from 1 to 64/);
    expect(byPath["provider.ttl_hours"]?.message).toMatch(/greater than 0, at most 168/);
    expect(byPath["lab.colour"]?.message).toMatch(/unknown key/);
    expect(byPath["portal.code_letters"]?.message).toMatch(/from 4 to 8/);
    expect(formatErrors(errors)).toContain("lab.concurrency: expected how many hosts deploy at once");
  });

  it("rejects unknown keys at every level", () => {
    const errors = errorsOf(`${minimal}extra: 1\ndefaults:\n  ssh_usr: lab\n`);
    expect(errors.map((e) => e.path).sort()).toEqual(["defaults.ssh_usr", "extra"]);
  });

  it("names the required fields that are missing", () => {
    const errors = errorsOf("lab: {}\n");
    expect(errors.map((e) => e.path).sort()).toEqual(["lab.setup", "lab.source", "name", "provider"]);
    expect(errors.find((e) => e.path === "lab.setup")?.message).toMatch(/^required: /);
  });

  it("accepts ttl_hours just above 0 and at 168, refuses 0 and above 168", () => {
    const withTtl = (t: string) => minimal.replace("count: 2", `count: 2\n  ttl_hours: ${t}`);
    expect(validateWorkshopYaml(withTtl("0.5")).ok).toBe(true);
    expect(validateWorkshopYaml(withTtl("168")).ok).toBe(true);
    expect(errorsOf(withTtl("0")).map((e) => e.path)).toEqual(["provider.ttl_hours"]);
    expect(errorsOf(withTtl("168.5")).map((e) => e.path)).toEqual(["provider.ttl_hours"]);
  });

  it("requires unique host ids on a static fleet and a count that matches", () => {
    const errors = errorsOf(`name: byo
lab: { source: ./lab, setup: bash setup.sh }
provider: { type: static, count: 3 }
hosts:
  - { id: lab-a, ssh: lab@127.0.0.1 }
  - { id: lab-a, ssh: lab@127.0.0.2, public_ip: 10.0.0.300 }
`);
    expect(errors.map((e) => e.path).sort()).toEqual(["hosts[1].id", "hosts[1].public_ip", "provider.count"]);
    expect(errors.find((e) => e.path === "hosts[1].id")?.message).toMatch(
      /unique host id; "lab-a" is already used by hosts\[0\]/,
    );
    expect(errors.find((e) => e.path === "hosts[1].id")?.line).toBe(6);
  });

  it("keeps hosts[] for static fleets and ref for git sources", () => {
    const errors = errorsOf(`name: x
lab: { source: ./lab, setup: s, ref: main }
provider: { type: local, count: 1 }
hosts: [{ id: a, ssh: b }]
`);
    expect(errors.map((e) => e.path).sort()).toEqual(["hosts", "lab.ref"]);
    expect(
      validateWorkshopYaml(
        "name: x\nlab: { source: 'git:https://git.example.test/lab.git', ref: v1, setup: s }\nprovider: { type: aws, count: 2 }\n",
      ).ok,
    ).toBe(true);
  });

  it("rejects an unknown provider type and YAML that does not parse", () => {
    expect(errorsOf(minimal.replace("type: local", "type: gcp")).map((e) => e.path)).toEqual([
      "provider.type",
    ]);
    const bad = errorsOf("name: [unclosed\n");
    expect(bad[0]?.path).toBe("(yaml)");
    expect(bad[0]?.message).toMatch(/not valid YAML/);
    expect(errorsOf("- a list\n")[0]?.message).toMatch(/expected a mapping/);
  });

  it("makes a local lab source absolute against the file's folder", () => {
    const r = validateWorkshopYaml(minimal);
    if (!r.ok) throw new Error("valid");
    expect(resolveLabSource(r.workshop, "/srv/ws").lab.source).toBe("/srv/ws/lab");
    const git = { ...r.workshop, lab: { ...r.workshop.lab, source: "git:https://git.example.test/l.git" } };
    expect(resolveLabSource(git, "/srv/ws").lab.source).toBe("git:https://git.example.test/l.git");
  });

  it("ships a JSON Schema that matches the zod schema", () => {
    const onDisk = JSON.parse(readFileSync(join(root, "schema/workshop.schema.json"), "utf8"));
    expect(onDisk).toEqual(workshopJsonSchema());
    expect(onDisk.additionalProperties).toBe(false);
    expect(onDisk.required).toEqual(expect.arrayContaining(["name", "lab", "provider"]));
  });

  it("has examples that validate and point editors at the schema", () => {
    const files = readdirSync(join(root, "examples"), { recursive: true, encoding: "utf8" }).filter((f) =>
      f.endsWith("workshop.yaml"),
    );
    expect(files.length).toBeGreaterThan(0);
    for (const f of files) {
      const text = readFileSync(join(root, "examples", f), "utf8");
      expect(text.split("\n")[0], f).toMatch(
        /^# yaml-language-server: \$schema=(\.\.\/)+schema\/workshop\.schema\.json$/,
      );
      const r = validateWorkshopYaml(text);
      expect(r.ok ? [] : r.errors, f).toEqual([]);
    }
  });
});
