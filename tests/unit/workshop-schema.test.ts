import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { workshopJsonSchema } from "../../shared/workshop/json-schema.ts";
import {
  EVENTS_PER_HOST,
  EVENTS_PER_POLL,
  FIXED_EVENTS,
  HISTORY_EVENT_LIMIT,
  historyBudget,
  maxPolls,
  pollBudget,
  RETRY_EVENTS_PER_HOST,
  RETRY_MARGIN_EVENTS,
} from "../../shared/workshop/limits.ts";
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
  count: 501
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
    expect(byPath["lab.concurrency"]?.message).toMatch(/from 1 to 40/);
    expect(byPath["lab.concurrency"]?.line).toBe(5);
    expect(byPath["provider.count"]?.message).toMatch(/from 1 to 500/);
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

  it("caps lab.concurrency at 40, what an inline Map runs at once, and says why", () => {
    const withConcurrency = (n: number) =>
      minimal.replace("setup: bash setup.sh", `setup: bash setup.sh\n  concurrency: ${n}`);
    expect(validateWorkshopYaml(withConcurrency(40)).ok).toBe(true);
    const errors = errorsOf(withConcurrency(41));
    expect(errors.map((e) => e.path)).toEqual(["lab.concurrency"]);
    expect(errors[0]?.message).toBe(
      "expected how many hosts deploy at once: a whole number from 1 to 40 (Step Functions runs at most 40 iterations of the deploy step's inline Map at once)",
    );
    expect(errors[0]?.line).toBe(5);
  });

  describe("a run's polls fit one Step Functions execution (25,000 history events)", () => {
    const workshop = (poll: number | undefined, timeout: number, hosts: number, type = "local") => `name: long
lab:
  source: ./lab
  setup: bash setup.sh
  timeout_minutes: ${timeout}
${poll === undefined ? "" : `  poll_seconds: ${poll}\n`}provider:
  type: ${type}
  count: ${hosts}
`;

    it("refuses 10-second polls for 8 hours on 64 hosts, with the figures and what to change", () => {
      const errors = errorsOf(workshop(10, 480, 64));
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ path: "lab.poll_seconds", line: 6 });
      const b = historyBudget(10, 480, 64);
      expect(b).toMatchObject({ fits: false, polls: 2881 });
      expect(errors[0]?.message).toBe(
        `expected a poll interval that fits one Step Functions execution: polling every 10 s for 480 minutes is up to 2,881 polls, ${b.events.toLocaleString("en-US")} history events in the worst case with 64 hosts, and an execution holds at most 25,000; raise poll_seconds to at least ${b.minPollSeconds}, or lower timeout_minutes to at most ${b.maxTimeoutMinutes}`,
      );
      // Either change it proposes fits, and each is the nearest that does.
      const minPoll = b.minPollSeconds ?? 0;
      const maxTimeout = b.maxTimeoutMinutes ?? 0;
      expect(validateWorkshopYaml(workshop(minPoll, 480, 64)).ok).toBe(true);
      expect(errorsOf(workshop(minPoll - 1, 480, 64)).map((e) => e.path)).toEqual(["lab.poll_seconds"]);
      expect(validateWorkshopYaml(workshop(10, maxTimeout, 64)).ok).toBe(true);
      expect(errorsOf(workshop(10, maxTimeout + 1, 64)).map((e) => e.path)).toEqual(["lab.poll_seconds"]);
    });

    it("counts the worst case: every poll, every host failing after every retry, room for retries", () => {
      expect(FIXED_EVENTS).toBe(38);
      expect(EVENTS_PER_POLL).toBe(9);
      expect(EVENTS_PER_HOST + RETRY_EVENTS_PER_HOST).toBe(84);
      // A poll every 10 s for 8 hours (deadline included, and one for a deploy that returns at once).
      expect(maxPolls(10, 480)).toBe(2881);
      expect(historyBudget(10, 480, 64).events).toBe(38 + RETRY_MARGIN_EVENTS + 64 * 84 + 2881 * 9);
      // The budget is exact: the most polls that fit, and one more does not.
      const room = HISTORY_EVENT_LIMIT - FIXED_EVENTS - RETRY_MARGIN_EVENTS - 64 * 84;
      expect(pollBudget(64)).toBe(Math.floor(room / 9));
      expect(
        HISTORY_EVENT_LIMIT - (FIXED_EVENTS + RETRY_MARGIN_EVENTS + 64 * 84 + pollBudget(64) * 9),
      ).toBeLessThan(9);
    });

    it("accepts the defaults and a day at the shortest interval that fits, at the boundary", () => {
      expect(validateWorkshopYaml(workshop(undefined, 1440, 64)).ok).toBe(true);
      const shortest = historyBudget(5, 1440, 64).minPollSeconds ?? 0;
      expect(shortest).toBeGreaterThan(5);
      expect(validateWorkshopYaml(workshop(shortest, 1440, 64)).ok).toBe(true);
      expect(errorsOf(workshop(shortest - 1, 1440, 64)).map((e) => e.path)).toEqual(["lab.poll_seconds"]);
      // Fewer hosts leave room for more polls.
      expect(validateWorkshopYaml(workshop(shortest - 1, 1440, 1)).ok).toBe(true);
    });

    it("counts a static fleet's hosts[] when it has no count", () => {
      const statik = (n: number) => `name: byo
lab: { source: ./lab, setup: s, poll_seconds: 5, timeout_minutes: 200 }
provider: { type: static }
hosts:
${Array.from({ length: n }, (_, i) => `  - { id: h${i}, ssh: lab@10.0.0.${i + 1} }`).join("\n")}
`;
      // 5-second polls for 200 minutes: 2,401 polls, which fit beside a small fleet, not a large one.
      const fitsFor = (hosts: number) => historyBudget(5, 200, hosts).fits;
      const most =
        Array.from({ length: 64 }, (_, i) => i + 1)
          .filter(fitsFor)
          .at(-1) ?? 0;
      expect(most).toBeGreaterThan(0);
      expect(most).toBeLessThan(64);
      expect(validateWorkshopYaml(statik(most)).ok).toBe(true);
      const errors = errorsOf(statik(most + 1));
      expect(errors.map((e) => e.path)).toEqual(["lab.poll_seconds"]);
      expect(errors[0]?.message).toContain(`with ${most + 1} hosts`);
    });

    it("leaves a poll interval or timeout out of range to its own error", () => {
      expect(errorsOf(workshop(2, 1440, 64)).map((e) => e.path)).toEqual(["lab.poll_seconds"]);
      expect(errorsOf(workshop(2, 1440, 64))[0]?.message).toMatch(/from 5 to 3600/);
      expect(errorsOf(workshop(10, 2000, 64)).map((e) => e.path)).toEqual(["lab.timeout_minutes"]);
      expect(errorsOf(workshop(10, 480, 501)).map((e) => e.path)).toEqual(["provider.count"]);
    });

    it("takes 500 hosts on every provider, and refuses 501 at the field that says so", () => {
      for (const type of ["local", "aws"]) {
        expect(validateWorkshopYaml(workshop(undefined, 480, 500, type)).ok, type).toBe(true);
        const [e] = errorsOf(workshop(undefined, 480, 501, type));
        expect(e).toMatchObject({
          path: "provider.count",
          message: "expected a host count: a whole number from 1 to 500",
        });
      }
      const statik = (n: number) =>
        `name: byo\nlab: { source: ./lab, setup: s }\nprovider: { type: static }\nhosts:\n${Array.from(
          { length: n },
          (_, i) => `  - { id: h${i}, ssh: lab@10.0.${Math.floor(i / 250)}.${(i % 250) + 1} }`,
        ).join("\n")}\n`;
      expect(validateWorkshopYaml(statik(500)).ok).toBe(true);
      const errors = errorsOf(statik(501));
      expect(errors.map((e) => [e.path, e.message])).toEqual([["hosts", "expected at most 500 hosts"]]);
      // 500 hosts deploy in 100 batches: a day of minute polls fits one execution's history.
      expect(historyBudget(60, 1440, 500)).toMatchObject({ fits: true });
    });
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
