import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { secretsFile } from "../../shared/fleet/secrets.ts";
import { listHosts } from "../../shared/fleet/workshops.ts";
import type { OpenAccessResult } from "../../shared/providers/aws.ts";
import { accessPorts, byoAccessMessage } from "../../shared/providers/aws-security-groups.ts";
import { hostIdsOf, type Provider } from "../../shared/providers/types.ts";
import { configure, type Deps, type SecretParameters, useDeps } from "../../shared/runtime/deps.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { LocalTransport } from "../../shared/transports/local.ts";
import type { ExecOptions } from "../../shared/transports/types.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { runCli } from "../harness/cli.ts";
import { fixturesDir, removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * `labfleet open-access` and `provider.student_access: open` over the local runtime, with an EC2-like
 * provider whose "instances" are folders reached by the local transport (as SSM hosts), and whose
 * setOpenAccess records each call. Also: operator secrets reaching those SSM hosts through a parameter.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
let saved: Deps;
const TOKEN = "open-access-suite-token";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
const lines: string[] = [];
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();
const post = (path: string, body: unknown = {}) =>
  app.request(`/api/workshops${path}`, { method: "POST", headers: auth, body: JSON.stringify(body) });
const get = (path: string) => app.request(`/api/workshops${path}`, { headers: auth });

const SG = "sg-0123456789abcdef0";
const BYO = ["sg-0aaaaaaaaaaaaaaaa", "sg-0bbbbbbbbbbbbbbbb"];
const API_TOKEN = "tok-7c1d9e2f4a6b8c0d";

/** Every call of the fake setOpenAccess, with the host states the provider saw at that moment. */
const calls: { workshop: string; open: boolean; states: string[] }[] = [];
let openFails: Error | undefined;
/** Every command (and its stdin) sent to an "instance". */
const sent: { host: string; command: string; stdin: string }[] = [];
const parameters = { puts: [] as string[], removes: [] as string[] };

async function setOpenAccess(spec: Workshop, open: boolean): Promise<OpenAccessResult> {
  calls.push({ workshop: spec.name, open, states: (await listHosts(spec.name)).map((h) => h.state) });
  if (openFails) throw openFails;
  const ports = accessPorts(spec).world;
  const p = spec.provider;
  if (p.type === "aws" && p.security_group_ids?.length) {
    const groupIds = p.security_group_ids;
    return { mode: "byo", changed: false, groupIds, ports, message: byoAccessMessage(groupIds, ports, open) };
  }
  return {
    mode: "managed",
    changed: true,
    groupIds: [SG],
    ports,
    message: `${open ? "opened" : "closed"} TCP ${ports.join(", ")} ${open ? "to" : "from"} 0.0.0.0/0 and ::/0 in ${SG}`,
  };
}

const fakeAws: Provider & { setOpenAccess: typeof setOpenAccess } = {
  name: "aws",
  transport: "ssm",
  validate: () => [],
  plan: async (spec) =>
    hostIdsOf(spec).map((hostId) => ({ hostId, action: "create" as const, detail: "m7i.large" })),
  provision: async (spec, ids) =>
    (ids ?? hostIdsOf(spec)).map((hostId) => {
      const dir = join(work, "ec2", spec.name, hostId);
      mkdirSync(dir, { recursive: true });
      return { hostId, address: dir, providerId: `i-${spec.name}-${hostId}` };
    }),
  deprovision: async (_spec, ids) => ids.map((hostId) => ({ hostId, result: "destroyed" as const })),
  setOpenAccess,
};

const writer: SecretParameters = {
  nameOf: (workshop) => `/labfleet/test/workshops/${workshop}/secrets`,
  async put(workshop, values) {
    const name = writer.nameOf(workshop);
    parameters.puts.push(workshop);
    const file = join(work, "parameters.json");
    const all = existsSync(file) ? JSON.parse(readFileSync(file, "utf8")) : {};
    writeFileSync(file, JSON.stringify({ ...all, [name]: JSON.stringify(values) }));
    return name;
  },
  async remove(workshop) {
    parameters.removes.push(workshop);
  },
};

/** A fake AWS CLI on the instances: serves the parameters the writer wrote. */
const FAKE_AWS = `#!/usr/bin/python3
import json, os, sys
args = sys.argv[1:]
name = args[args.index("--name") + 1]
with open(os.environ["FAKE_SSM_STORE"]) as f:
    print(json.dumps(json.load(f)[name]))
`;

function awsYaml(o: { name: string; lab?: string; count?: number; provider?: string; extraLab?: string }) {
  return `name: ${o.name}
lab:
  source: ${join(fixturesDir, "labs", o.lab ?? "quick")}
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 5
  ui_ports:
    - { name: ide, port: 8443 }
${o.extraLab ?? ""}provider:
  type: aws
  region: eu-west-1
  count: ${o.count ?? 2}
  ttl_hours: 4
${o.provider ?? ""}`;
}

async function up(name: string): Promise<{ state: string; error?: string }> {
  expect((await post(`/${name}/up`)).status).toBe(202);
  await rt.executor.idle();
  return (await j(await get(`/${name}`))).runs[0];
}

async function submit(yaml: string): Promise<void> {
  expect((await post("", { yaml })).status).toBe(201);
}

beforeAll(async () => {
  work = tempDir("labfleet-open-access-");
  rt = await testRuntime({ dataDir: join(work, ".labfleet"), token: TOKEN });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: TOKEN };
  saved = useDeps();
  const bin = join(work, "bin");
  mkdirSync(bin, { recursive: true });
  writeFileSync(join(bin, "aws"), FAKE_AWS);
  chmodSync(join(bin, "aws"), 0o755);
  configure({
    ...saved,
    providers: { ...saved.providers, aws: fakeAws },
    transport: (h) => {
      if (h.transport !== "ssm") return saved.transport(h);
      const inner = new LocalTransport(h.address);
      return {
        exec: (command: string, options: ExecOptions = {}) => {
          const stdin = options.stdin;
          sent.push({
            host: `${h.workshop}/${h.hostId}`,
            command,
            stdin:
              typeof stdin === "string" || Buffer.isBuffer(stdin)
                ? Buffer.from(stdin).toString("latin1")
                : "",
          });
          return inner.exec(command, {
            ...options,
            env: {
              ...options.env,
              PATH: `${bin}:${process.env.PATH}`,
              FAKE_SSM_STORE: join(work, "parameters.json"),
            },
          });
        },
      };
    },
    secrets: {
      get: async (keys) => ({
        values: Object.fromEntries(keys.filter((k) => k === "API_TOKEN").map((k) => [k, API_TOKEN])),
        missing: keys.filter((k) => k !== "API_TOKEN"),
      }),
    },
    secretParameters: writer,
  });
  setLogSink((line) => lines.push(line), "info");
});
afterAll(async () => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  if (saved) configure(saved);
  await rt?.close();
  if (work) removeDir(work);
});
beforeEach(() => {
  openFails = undefined;
});

describe("labfleet open-access", () => {
  it("refuses a workshop with no hosts yet", async () => {
    await submit(awsYaml({ name: "oa" }));
    const res = await post("/oa/open-access");
    expect(res.status).toBe(409);
    expect((await j(res)).error).toMatchObject({
      code: "open_access.no_hosts",
      message: "not opening the lab UIs of oa: it has no hosts yet (run labfleet up first)",
    });
    expect(calls).toEqual([]);
  });

  it("up with student_access unset leaves the lab UIs closed", async () => {
    expect(await up("oa")).toMatchObject({ state: "succeeded" });
    expect((await j(await get("/oa"))).hostList.map((h: { state: string }) => h.state)).toEqual([
      "ready",
      "ready",
    ]);
    expect(calls).toEqual([]);
  });

  it("refuses to open while a host is not ready, naming it (API 409, CLI exit 1)", async () => {
    await rt.store.host
      .patch({ workshop: "oa", hostId: "student-02" })
      .set({ state: "deploying", phase: "build" })
      .go();
    const res = await post("/oa/open-access", { close: false });
    expect(res.status).toBe(409);
    expect((await j(res)).error).toEqual({
      kind: "conflict",
      code: "open_access.not_ready",
      message:
        "not opening the lab UIs of oa: 1 of 2 hosts are not ready (their health check has not passed): student-02 (deploying, phase build)",
      details: [{ path: "hosts.student-02", message: "expected ready, got deploying (phase build)" }],
    });
    const cli = await runCli(["open-access", "oa"], { env });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain("1 of 2 hosts are not ready");
    expect(cli.stderr).toContain("student-02 (deploying, phase build)");
    expect(cli.stdout).toBe("");
    expect(calls).toEqual([]);
  });

  it("closing is allowed whatever the hosts' state", async () => {
    const cli = await runCli(["open-access", "oa", "--close"], { env });
    expect(cli.stderr).toBe("");
    expect(cli.code).toBe(0);
    expect(cli.stdout).toBe(`oa: closed TCP 8443 from 0.0.0.0/0 and ::/0 in ${SG}\n`);
    expect(calls).toEqual([{ workshop: "oa", open: false, states: ["ready", "deploying"] }]);
  });

  it("opens once every host is ready and prints what the provider did", async () => {
    calls.length = 0;
    await rt.store.host.patch({ workshop: "oa", hostId: "student-02" }).set({ state: "ready" }).go();
    const res = await post("/oa/open-access");
    expect(res.status).toBe(200);
    expect(await j(res)).toEqual({
      workshop: "oa",
      open: true,
      mode: "managed",
      changed: true,
      groupIds: [SG],
      ports: [8443],
      message: `opened TCP 8443 to 0.0.0.0/0 and ::/0 in ${SG}`,
    });
    const cli = await runCli(["open-access", "oa"], { env });
    expect(cli.code).toBe(0);
    expect(cli.stdout).toBe(`oa: opened TCP 8443 to 0.0.0.0/0 and ::/0 in ${SG}\n`);
    const json = await runCli(["open-access", "oa", "--output", "json"], { env });
    expect(json.code).toBe(0);
    expect(JSON.parse(json.stdout)).toMatchObject({ workshop: "oa", open: true, mode: "managed" });
    expect(calls.map((c) => [c.open, c.states])).toEqual([
      [true, ["ready", "ready"]],
      [true, ["ready", "ready"]],
      [true, ["ready", "ready"]],
    ]);
    expect(
      lines.some((l) => l.includes('"msg":"student access opened"') && l.includes('"workshop":"oa"')),
    ).toBe(true);
  });

  it("validates the body and the workshop", async () => {
    for (const body of [{ close: "yes" }, { close: 1 }, { open: true }]) {
      const res = await post("/oa/open-access", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      expect((await j(res)).error.code).toBe("input.invalid");
    }
    expect((await j(await post("/oa/open-access", { close: "yes" }))).error.details).toEqual([
      { path: "close", message: "expected close: true or false" },
    ]);
    const bad = await app.request("/api/workshops/oa/open-access", {
      method: "POST",
      headers: auth,
      body: "{",
    });
    expect(bad.status).toBe(400);
    const missing = await post("/nope/open-access");
    expect(missing.status).toBe(404);
    expect((await j(missing)).error.code).toBe("workshop.not_found");
  });

  it("local and bring-your-own-host workshops have nothing to open (400, CLI exit 1)", async () => {
    await submit(workshopYaml({ name: "oa-local", count: 1 }));
    const res = await post("/oa-local/open-access");
    expect(res.status).toBe(400);
    expect((await j(res)).error).toMatchObject({
      code: "open_access.unsupported",
      message:
        "nothing to open: workshop oa-local uses the local provider, which manages no firewall; its hosts are reachable as their own network allows (open-access applies to the aws provider only)",
    });
    const cli = await runCli(["open-access", "oa-local", "--close"], { env });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain("nothing to close: workshop oa-local uses the local provider");
  });

  it("with bring-your-own security groups, prints what to open by hand", async () => {
    await submit(
      awsYaml({ name: "oa-byo", count: 1, provider: `  security_group_ids: [${BYO.join(", ")}]\n` }),
    );
    expect(await up("oa-byo")).toMatchObject({ state: "succeeded" });
    const cli = await runCli(["open-access", "oa-byo"], { env });
    expect(cli.code).toBe(0);
    expect(cli.stdout).toBe(`oa-byo: ${byoAccessMessage(BYO, [8443], true)}\n`);
    expect(cli.stdout).toContain(`allow inbound TCP 8443 from 0.0.0.0/0 and ::/0 in ${BYO.join(", ")}`);
    const close = await runCli(["open-access", "oa-byo", "--close"], { env });
    expect(close.stdout).toContain(`to close the lab UIs, remove the inbound rules for TCP 8443`);
  });

  it("labfleet open-access is in the help", async () => {
    const help = await runCli(["--help"]);
    expect(help.stdout).toContain("labfleet open-access (-f workshop.yaml | NAME) [--close]");
    const usage = await runCli(["open-access"], { env });
    expect(usage.code).toBe(2);
  });
});

describe("provider.student_access: open", () => {
  const file = (name: string, yaml: string) => {
    const path = join(work, `${name}.yaml`);
    writeFileSync(path, yaml);
    return path;
  };

  it("up opens the lab UIs by itself once every lab is ready, once", async () => {
    calls.length = 0;
    const path = file("auto", awsYaml({ name: "oa-auto", provider: "  student_access: open\n" }));
    const cli = await runCli(["up", "-f", path], { env });
    expect(cli.stderr).toBe("");
    expect(cli.code).toBe(0);
    expect(calls).toEqual([{ workshop: "oa-auto", open: true, states: ["ready", "ready"] }]);
    const run = (await j(await get("/oa-auto"))).runs[0];
    expect(run.state).toBe("succeeded");
    expect(run.error).toBeUndefined();
    expect(
      lines.some((l) => l.includes("student access opened (student_access: open)") && l.includes("oa-auto")),
    ).toBe(true);
  });

  it("an instructor's close sticks: a later up does not reopen it, an explicit open-access does", async () => {
    calls.length = 0;
    expect((await runCli(["open-access", "oa-auto", "--close"], { env })).code).toBe(0);
    const path = join(work, "auto.yaml");
    const again = await runCli(["up", "-f", path, "--force"], { env });
    expect(again.code, again.stderr).toBe(0);
    expect(calls).toEqual([{ workshop: "oa-auto", open: false, states: ["ready", "ready"] }]);
    expect((await runCli(["open-access", "oa-auto"], { env })).code).toBe(0);
    expect(calls.at(-1)).toEqual({ workshop: "oa-auto", open: true, states: ["ready", "ready"] });
  });

  it("an error opening access is logged and recorded on the run, which still succeeds", async () => {
    calls.length = 0;
    openFails = new Error("AuthorizeSecurityGroupIngress: UnauthorizedOperation");
    const path = file("auto-fail", awsYaml({ name: "oa-auto-fail", provider: "  student_access: open\n" }));
    const cli = await runCli(["up", "-f", path], { env });
    expect(cli.code).toBe(0);
    expect(cli.stdout).toContain(
      "student access was not opened: AuthorizeSecurityGroupIngress: UnauthorizedOperation",
    );
    expect(calls).toHaveLength(1);
    const s = await j(await get("/oa-auto-fail"));
    expect(s.state).toBe("ready");
    expect(s.runs[0]).toMatchObject({
      state: "succeeded",
      error: "student access was not opened: AuthorizeSecurityGroupIngress: UnauthorizedOperation",
    });
    expect(
      lines.some(
        (l) =>
          l.includes('"level":"warn"') &&
          l.includes("opening student access failed") &&
          l.includes("UnauthorizedOperation"),
      ),
    ).toBe(true);
  });

  it("with bring-your-own groups, the run says what to open", async () => {
    await submit(
      awsYaml({
        name: "oa-auto-byo",
        count: 1,
        provider: `  student_access: open\n  security_group_ids: [${BYO.join(", ")}]\n`,
      }),
    );
    const run = await up("oa-auto-byo");
    expect(run.state).toBe("succeeded");
    expect(run.error).toBe(`student access was not opened: ${byoAccessMessage(BYO, [8443], true)}`);
  });

  it("a lab that fails keeps the lab UIs closed", async () => {
    calls.length = 0;
    await submit(awsYaml({ name: "oa-auto-bad", lab: "fail", provider: "  student_access: open\n" }));
    const run = await up("oa-auto-bad");
    expect(run.state).toBe("failed");
    expect(calls).toEqual([]);
  });
});

describe("labfleet provision --plan", () => {
  it("prints the plan up --plan prints, changing nothing", async () => {
    const path = join(work, "plan.yaml");
    writeFileSync(path, awsYaml({ name: "oa-plan" }));
    const plan = await runCli(["provision", "-f", path, "--plan"], { env });
    expect(plan.stderr).toBe("");
    expect(plan.code).toBe(0);
    expect(plan.stdout).toContain(
      "plan oa-plan (aws): 2 to create, 0 to reuse, 0 unchanged · nothing was changed",
    );
    expect(plan.stdout).toMatch(/^student-01\s+create\s+m7i\.large$/m);
    expect(plan.stdout).toMatch(/^student-02\s+create\s+m7i\.large$/m);
    const upPlan = await runCli(["up", "-f", path, "--plan"], { env });
    expect(upPlan.stdout).toBe(plan.stdout);
    const json = await runCli(["provision", "-f", path, "--plan", "--output", "json"], { env });
    expect(JSON.parse(json.stdout)).toEqual({
      name: "oa-plan",
      provider: "aws",
      items: [
        { hostId: "student-01", action: "create", detail: "m7i.large" },
        { hostId: "student-02", action: "create", detail: "m7i.large" },
      ],
    });
    expect((await get("/oa-plan")).status).toBe(404);

    // provision without --plan provisions: tests/integration/provision.test.ts covers it.
    const noFile = await runCli(["provision", "--plan"], { env });
    expect(noFile.code).toBe(2);
    expect(noFile.stderr).toContain("provision needs -f workshop.yaml");
  });
});

describe("operator secrets to SSM hosts", () => {
  it("reach each host through the parameter, never in a command; the parameter goes at the run's end and at teardown", async () => {
    sent.length = 0;
    parameters.puts.length = 0;
    parameters.removes.length = 0;
    await submit(
      awsYaml({ name: "oa-sec", lab: "secret-ok", extraLab: "  operator_secrets: [API_TOKEN]\n" }),
    );
    expect(await up("oa-sec")).toMatchObject({ state: "succeeded" });
    for (const hostId of ["student-01", "student-02"]) {
      const env = join(work, "ec2", "oa-sec", hostId, ".labfleet", "oa-sec", "secrets.env");
      expect(readFileSync(env, "utf8")).toBe(secretsFile({ API_TOKEN }));
      expect(statSync(env).mode & 0o777).toBe(0o600);
    }
    // Written once for the run (BeginUp), not once per host.
    expect(parameters.puts).toEqual(["oa-sec"]);
    expect(parameters.removes).toEqual(["oa-sec"]);
    const mine = sent.filter((s) => s.host.startsWith("oa-sec/"));
    expect(mine.filter((s) => s.command.includes("ssm get-parameter"))).toHaveLength(2);
    for (const s of mine) {
      expect(s.command).not.toContain(API_TOKEN);
      expect(s.stdin).not.toContain(API_TOKEN);
    }

    expect((await post("/oa-sec/teardown")).status).toBe(202);
    await rt.executor.idle();
    expect((await j(await get("/oa-sec"))).state).toBe("torn_down");
    expect(parameters.removes).toEqual(["oa-sec", "oa-sec"]);
  });
});
