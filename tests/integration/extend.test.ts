import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  ConflictException,
  CreateScheduleCommand,
  DeleteScheduleCommand,
  SchedulerClient,
  UpdateScheduleCommand,
} from "@aws-sdk/client-scheduler";
import { mockClient } from "aws-sdk-client-mock";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EventBridgeScheduleMirror } from "../../shared/cloud/scheduler.ts";
import { extendWorkshop } from "../../shared/fleet/extend.ts";
import { dueSchedules, ensureTeardownSchedule, fireSchedule } from "../../shared/fleet/schedules.ts";
import { finishTeardown } from "../../shared/fleet/teardown.ts";
import { listHosts } from "../../shared/fleet/workshops.ts";
import { powerOffUserData } from "../../shared/providers/aws-launch.ts";
import type { Provider } from "../../shared/providers/types.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { configure, type Deps, useDeps } from "../../shared/runtime/deps.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { formatClock } from "../../shared/runtime/time-format.ts";
import { LocalTransport } from "../../shared/transports/local.ts";
import { parseWorkshopYaml } from "../../shared/workshop/load.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { runCli } from "../harness/cli.ts";
import { movableClock, removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const clock = movableClock();
const TOKEN = "extend-suite-token";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };
const HOUR = 3_600_000;
const lines: string[] = [];
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();
const post = (path: string, body: unknown = {}) =>
  app.request(`/api/workshops${path}`, { method: "POST", headers: auth, body: JSON.stringify(body) });
const get = (path: string) => app.request(`/api/workshops${path}`, { headers: auth });
const schedule = async (workshop: string) =>
  (await rt.store.schedule.get({ workshop, kind: "teardown" }).go()).data;

beforeAll(async () => {
  work = tempDir("labfleet-extend-");
  // The scheduler ticks only when a test says so (rt.tick()), never behind its back.
  rt = await testRuntime({
    dataDir: join(work, ".labfleet"),
    token: TOKEN,
    clock,
    schedulerIntervalMs: 24 * HOUR,
  });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: TOKEN };
  setLogSink((line) => lines.push(line), "info");
});
afterAll(async () => {
  setLogSink((line) => process.stderr.write(`${line}\n`), "warn");
  await rt?.close();
  if (work) removeDir(work);
});

describe("extend on the local runtime", () => {
  let firstExpiry: string;

  it("moves the pending teardown, the recorded expiries, and skips hosts without a power-off", async () => {
    expect((await post("", { yaml: workshopYaml({ name: "ext", count: 2, ttlHours: 2 }) })).status).toBe(201);
    expect((await post("/ext/up")).status).toBe(202);
    await rt.executor.idle();
    const before = await j(await get("/ext"));
    expect(before.state).toBe("ready");
    firstExpiry = before.expiry;
    expect((await schedule("ext"))?.at).toBe(firstExpiry);

    const res = await post("/ext/extend", { hours: 1.5 });
    expect(res.status).toBe(200);
    const r = await j(res);
    const want = new Date(Math.floor((Date.parse(firstExpiry) + 1.5 * HOUR) / 1000) * 1000).toISOString();
    expect(r).toEqual({
      workshop: "ext",
      hours: 1.5,
      previousExpiry: firstExpiry,
      expiry: want,
      schedule: { result: "none" },
      provider: { result: "none" },
      hosts: [
        { hostId: "student-01", result: "skipped", detail: "no in-instance power-off on this kind of host" },
        { hostId: "student-02", result: "skipped", detail: "no in-instance power-off on this kind of host" },
      ],
      ok: true,
    });
    expect(await schedule("ext")).toMatchObject({ state: "pending", at: want });
    const after = await j(await get("/ext"));
    expect(after.expiry).toBe(want);
    expect(after.hostList.map((h: { expiry: string }) => h.expiry)).toEqual([want, want]);
    expect(lines.some((l) => l.includes('"msg":"workshop extended"') && l.includes(want))).toBe(true);
  });

  it("refuses bad hours with 400 and the field, and unknown workshops with 404", async () => {
    for (const body of [
      { hours: 0 },
      { hours: -1 },
      { hours: 169 },
      { hours: "2" },
      {},
      { hours: 2, x: 1 },
    ]) {
      const res = await post("/ext/extend", body);
      expect(res.status, JSON.stringify(body)).toBe(400);
      const e = (await j(res)).error;
      expect(e.code).toBe("input.invalid");
    }
    const zero = (await j(await post("/ext/extend", { hours: 0 }))).error;
    expect(zero.details).toEqual([{ path: "hours", message: "expected hours greater than 0" }]);
    expect((await post("/ext/extend", { hours: 169 })).status).toBe(400);
    const bad = await app.request("/api/workshops/ext/extend", {
      method: "POST",
      headers: auth,
      body: "{not json",
    });
    expect(bad.status).toBe(400);
    const missing = await post("/nope/extend", { hours: 1 });
    expect(missing.status).toBe(404);
    expect((await j(missing)).error.code).toBe("workshop.not_found");
    // Nothing moved.
    expect((await schedule("ext"))?.at).toBe(
      new Date(Math.floor((Date.parse(firstExpiry) + 1.5 * HOUR) / 1000) * 1000).toISOString(),
    );
  });

  it("labfleet extend prints the new teardown time and each host's result", async () => {
    const at = (await schedule("ext"))?.at as string;
    const r = await runCli(["extend", "ext", "--hours", "2"], { env });
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const want = new Date(Date.parse(at) + 2 * HOUR).toISOString();
    // Local clock times (the CLI runs in this process's zone), the new one with how far off it is.
    expect(r.stdout).toContain(`ext: teardown moved from ${formatClock(at)} to ${formatClock(want)} (+2 h)`);
    expect(r.stdout).toMatch(
      new RegExp(`^teardown at: ${formatClock(want)} \\(in \\d+ h \\d\\d min\\)$`, "m"),
    );
    expect(r.stdout).toContain("schedule mirror: none (this runtime's scheduler reads the record)");
    expect(r.stdout).toMatch(/^student-01\s+skipped\s+no in-instance power-off on this kind of host$/m);
    expect(r.stdout).toMatch(/^student-02\s+skipped\s+no in-instance power-off on this kind of host$/m);

    const json = await runCli(["extend", "ext", "--hours", "0.5", "--output", "json"], { env });
    expect(json.code).toBe(0);
    const doc = JSON.parse(json.stdout);
    expect(doc.previousExpiry).toBe(want);
    expect(doc.expiry).toBe(new Date(Date.parse(want) + 0.5 * HOUR).toISOString());
    expect((await schedule("ext"))?.at).toBe(doc.expiry);
  });

  it("labfleet extend refuses a missing or bad --hours with usage, exit 2", async () => {
    for (const args of [
      ["extend", "ext"],
      ["extend", "ext", "--hours", "abc"],
      ["extend", "ext", "--hours", "0"],
      ["extend", "ext", "--hours", "200"],
    ]) {
      const r = await runCli(args, { env });
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr).toContain("usage: labfleet extend (-f workshop.yaml | NAME) --hours N");
    }
    const help = await runCli(["--help"]);
    expect(help.stdout).toContain("labfleet extend (-f workshop.yaml | NAME) --hours N");
    expect(help.stdout).toContain("npx labfleet extend my-workshop --hours 2");
  });

  it("the old time passes without a teardown; the new one tears down and removes hosts and pins", async () => {
    const at = (await schedule("ext"))?.at as string;
    // A pin, as an SSH-reached provider-made host would have: it must go with the host.
    await rt.store.hostKey
      .put({ workshop: "ext", hostId: "student-01", key: "AAAAC3Nz", fingerprint: "SHA256:x", pinnedAt: at })
      .go();
    clock.advance(Date.parse(firstExpiry) - clock.now().getTime() + 60_000);
    expect(await rt.tick()).toBe(0);
    expect((await j(await get("/ext"))).state).toBe("ready");

    clock.advance(Date.parse(at) - clock.now().getTime() + 1000);
    expect(await rt.tick()).toBe(1);
    await rt.executor.idle();
    const s = await j(await get("/ext"));
    expect(s.state).toBe("torn_down");
    expect(s.runs[0]).toMatchObject({
      kind: "teardown",
      state: "succeeded",
      hosts: { "student-01": { state: "destroyed" }, "student-02": { state: "destroyed" } },
    });
    expect(await listHosts("ext")).toEqual([]);
    expect(s.hostList).toEqual([]);
    expect((await rt.store.hostKey.query.byWorkshop({ workshop: "ext" }).go()).data).toEqual([]);
    expect(existsSync(join(rt.dataDir, "hosts", "ext"))).toBe(false);
    expect((await schedule("ext"))?.state).toBe("fired");

    const late = await post("/ext/extend", { hours: 1 });
    expect(late.status).toBe(409);
    expect((await j(late)).error).toMatchObject({
      code: "extend.no_pending_teardown",
      message: "workshop ext has no pending teardown to extend (it was never brought up, or it is torn down)",
    });
    const cli = await runCli(["extend", "ext", "--hours", "1"], { env });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain("has no pending teardown to extend");
  });

  it("a workshop never brought up has nothing to extend", async () => {
    expect((await post("", { yaml: workshopYaml({ name: "ext-draft", count: 1 }) })).status).toBe(201);
    const res = await post("/ext-draft/extend", { hours: 1 });
    expect(res.status).toBe(409);
    expect((await j(res)).error.code).toBe("extend.no_pending_teardown");
  });
});

describe("extend on EC2-like hosts, with the EventBridge mirror", () => {
  const scheduler = mockClient(SchedulerClient);
  let saved: Deps;
  let hostsDir: string;
  let calls: string;
  const extended: { hostIds: string[]; expiry: string }[] = [];
  let extendFails = false;
  const yaml = `name: ec2
lab:
  source: /srv/lab
  setup: bash setup.sh
provider:
  type: aws
  count: 3
  ttl_hours: 4
`;

  const fakeAws: Provider = {
    name: "aws",
    transport: "ssm",
    validate: () => [],
    plan: async () => [],
    provision: async () => [],
    deprovision: async () => [],
    extendExpiry: async (_spec, hostIds, expiry) => {
      if (extendFails) throw new Error("CreateTags: UnauthorizedOperation");
      extended.push({ hostIds, expiry: expiry.toISOString() });
    },
  };

  beforeAll(async () => {
    saved = useDeps();
    hostsDir = join(work, "ec2");
    const bin = join(hostsDir, "bin");
    mkdirSync(bin, { recursive: true });
    calls = join(hostsDir, "calls.log");
    for (const cmd of ["shutdown", "systemctl"]) {
      writeFileSync(join(bin, cmd), `#!/bin/sh\necho "$LABFLEET_ROOT ${cmd} $*" >> "${calls}"\n`);
      chmodSync(join(bin, cmd), 0o755);
    }
    const envOf = (hostId: string) => ({
      PATH: `${bin}:${process.env.PATH}`,
      LABFLEET_ROOT: join(hostsDir, hostId),
    });
    configure({
      ...saved,
      providers: { ...saved.providers, aws: fakeAws },
      // Each "instance" is a folder; the script runs there under a fake shutdown, as in the user data test.
      transport: (h) => ({
        exec: async (command, options) => {
          if (h.hostId === "student-03") throw new Error("SSM SendCommand: InvalidInstanceId");
          mkdirSync(join(hostsDir, h.hostId), { recursive: true });
          return new LocalTransport(join(hostsDir, h.hostId)).exec(command, {
            ...options,
            env: envOf(h.hostId),
          });
        },
      }),
      scheduleMirror: new EventBridgeScheduleMirror({
        client: new SchedulerClient({ region: "eu-west-1" }),
        group: "labfleet-test",
        targetArn: "arn:aws:lambda:eu-west-1:123456789012:function:sweep",
        roleArn: "arn:aws:iam::123456789012:role/scheduler",
        clock,
      }),
    });

    // A workshop of three instances: 01 with its dead-man switch armed at launch, 02 without one.
    const spec = parseWorkshopYaml(yaml);
    const now = clock.now();
    const expiry = new Date(Math.floor((now.getTime() + 4 * HOUR) / 1000) * 1000).toISOString();
    execFileSync("bash", ["-c", powerOffUserData(new Date(expiry))], { env: envOf("student-01") });
    writeFileSync(calls, "");
    await rt.store.workshop
      .put({
        name: "ec2",
        spec,
        yaml,
        state: "ready",
        expiry,
        createdAt: now.toISOString(),
        updatedAt: now.toISOString(),
      })
      .go();
    for (const [i, hostId] of ["student-01", "student-02", "student-03"].entries()) {
      await rt.store.host
        .put({
          workshop: "ec2",
          hostId,
          provider: "aws",
          providerId: `i-0abc00000000000${i}`,
          address: `i-0abc00000000000${i}`,
          state: "ready",
          expiry,
          createdAt: now.toISOString(),
          updatedAt: now.toISOString(),
        })
        .go();
    }
    scheduler.on(CreateScheduleCommand).resolves({ $metadata: {}, ScheduleArn: "arn:s" });
    await ensureTeardownSchedule("ec2", expiry);
  });
  afterAll(() => {
    scheduler.restore();
    configure(saved);
  });

  it("creates the EventBridge schedule with the record", async () => {
    const at = (await schedule("ec2"))?.at as string;
    const create = scheduler.commandCalls(CreateScheduleCommand);
    expect(create).toHaveLength(1);
    expect(create[0]?.args[0].input).toMatchObject({
      Name: "labfleet-teardown-ec2",
      GroupName: "labfleet-test",
      ScheduleExpression: `at(${at.slice(0, 19)})`,
      Target: { Input: JSON.stringify({ source: "labfleet.schedule", kind: "teardown", workshop: "ec2" }) },
    });
  });

  it("moves the schedule, the provider's expiry and each instance's power-off; reports the host it could not reach", async () => {
    const at = (await schedule("ec2"))?.at as string;
    scheduler.reset();
    scheduler
      .on(CreateScheduleCommand)
      .rejects(new ConflictException({ message: "exists", Message: "exists", $metadata: {} }));
    scheduler.on(UpdateScheduleCommand).resolves({ $metadata: {}, ScheduleArn: "arn:s" });

    const r = await withActor({ type: "instructor", id: "t" }, () => extendWorkshop("ec2", 2));
    const to = new Date(Date.parse(at) + 2 * HOUR);
    const epoch = to.getTime() / 1000;

    expect(r.expiry).toBe(to.toISOString());
    expect(r.schedule).toEqual({ result: "moved" });
    expect(r.provider).toEqual({ result: "moved" });
    expect(extended).toEqual([
      { hostIds: ["student-01", "student-02", "student-03"], expiry: to.toISOString() },
    ]);
    const update = scheduler.commandCalls(UpdateScheduleCommand);
    expect(update).toHaveLength(1);
    expect(update[0]?.args[0].input).toMatchObject({
      Name: "labfleet-teardown-ec2",
      ScheduleExpression: `at(${to.toISOString().slice(0, 19)})`,
      ActionAfterCompletion: "DELETE",
      FlexibleTimeWindow: { Mode: "OFF" },
    });

    const [one, two, three] = r.hosts;
    expect(one?.hostId).toBe("student-01");
    expect(one?.result).toBe("moved");
    expect(one?.detail).toMatch(new RegExp(`^powers off at ${to.toISOString()} \\(shutdown in \\d+ min\\)$`));
    expect(two).toEqual({
      hostId: "student-02",
      result: "skipped",
      detail: "no dead-man switch on this host: /etc/labfleet/deadline is missing",
    });
    expect(three).toEqual({
      hostId: "student-03",
      result: "error",
      detail: "power-off not moved: SSM SendCommand: InvalidInstanceId",
    });
    expect(r.ok).toBe(false);

    // On the instance: the deadline the timer reads, its baked-in fallback, and the pending shutdown all moved.
    const root = join(hostsDir, "student-01");
    expect(readFileSync(join(root, "etc/labfleet/deadline"), "utf8")).toBe(`${epoch}\n`);
    const deadman = readFileSync(join(root, "usr/local/sbin/labfleet-deadman"), "utf8");
    expect(deadman).toContain(`d=${epoch} ;;`);
    expect(deadman.match(/d=\d+ ;;/g)).toHaveLength(1);
    const log = readFileSync(calls, "utf8").trim().split("\n");
    expect(log[0]).toBe(`${root} shutdown -c labfleet: the workshop was extended`);
    // Whole minutes from the host's own clock (real time), never later than the deadline.
    const minutes = Number(/shutdown -P \+(\d+) /.exec(log[1] ?? "")?.[1]);
    const latest = Math.floor((epoch * 1000 - Date.now()) / 60_000);
    expect(minutes).toBeLessThanOrEqual(latest + 1);
    expect(minutes).toBeGreaterThanOrEqual(latest - 1);
    expect(log[1]).toBe(`${root} shutdown -P +${minutes} labfleet: the workshop's time is up`);
    expect(log).toHaveLength(2);
    // The timer's check still powers off once the (new) deadline has passed.
    writeFileSync(join(root, "etc/labfleet/deadline"), `${Math.floor(Date.now() / 1000) - 60}\n`);
    execFileSync("sh", [join(root, "usr/local/sbin/labfleet-deadman")], {
      env: { PATH: `${join(hostsDir, "bin")}:${process.env.PATH}`, LABFLEET_ROOT: root },
    });
    expect(readFileSync(calls, "utf8").trim().split("\n").at(-1)).toBe(`${root} systemctl poweroff`);
  });

  it("a mirror or provider that fails is reported, while the record moves", async () => {
    const at = (await schedule("ec2"))?.at as string;
    scheduler.reset();
    scheduler
      .on(CreateScheduleCommand)
      .rejects(new ConflictException({ message: "exists", Message: "exists", $metadata: {} }));
    scheduler.on(UpdateScheduleCommand).rejects(new Error("Scheduler: throttled"));
    extendFails = true;
    const r = await withActor({ type: "instructor", id: "t" }, () => extendWorkshop("ec2", 1));
    extendFails = false;
    expect(r.schedule).toEqual({ result: "error", detail: "EventBridge schedule: Scheduler: throttled" });
    expect(r.provider).toEqual({ result: "error", detail: "CreateTags: UnauthorizedOperation" });
    expect(r.ok).toBe(false);
    expect((await schedule("ec2"))?.at).toBe(new Date(Date.parse(at) + HOUR).toISOString());
  });

  it("a scheduler that read the old time cannot fire a moved schedule", async () => {
    const record = await schedule("ec2");
    if (!record) throw new Error("expected the schedule");
    clock.advance(Date.parse(record.at) - clock.now().getTime() + 1000);
    const [due] = await dueSchedules();
    expect(due?.workshop).toBe("ec2");
    await withActor({ type: "instructor", id: "t" }, () => extendWorkshop("ec2", 1));
    expect(
      await withActor({ type: "system", id: "t" }, () => fireSchedule(due as NonNullable<typeof due>)),
    ).toBe(false);
    expect(await schedule("ec2")).toMatchObject({
      state: "pending",
      at: new Date(Date.parse(record.at) + HOUR).toISOString(),
    });
  });

  it("teardown of provider-made hosts deletes the EventBridge schedule, the host records and their pins", async () => {
    scheduler.reset();
    scheduler.on(DeleteScheduleCommand).resolves({ $metadata: {} });
    const now = clock.now().toISOString();
    await rt.store.hostKey
      .put({
        workshop: "ec2",
        hostId: "bastion:ops@jump:22",
        key: "AAAA",
        fingerprint: "SHA256:b",
        pinnedAt: now,
      })
      .go();
    await rt.store.run
      .create({
        workshop: "ec2",
        runId: "run_01J9Z3Q8V6K1M2N3P4R5S6T7V8",
        kind: "teardown",
        state: "running",
        startedAt: now,
      })
      .go();
    const r = await withActor({ type: "system", id: "t" }, () =>
      finishTeardown("ec2", "run_01J9Z3Q8V6K1M2N3P4R5S6T7V8", [
        { hostId: "student-01", result: "destroyed", detail: "terminated i-0abc000000000000" },
        { hostId: "student-02", result: "skipped", detail: "no instance found" },
        { hostId: "student-03", result: "error", detail: "TerminateInstances: throttled" },
      ]),
    );
    expect(r.state).toBe("failed");
    const left = await listHosts("ec2");
    expect(left.map((h) => [h.hostId, h.error])).toEqual([
      ["student-03", "teardown: TerminateInstances: throttled"],
    ]);
    // Not every host is gone: the bastion's pin stays until they are.
    expect(
      (await rt.store.hostKey.query.byWorkshop({ workshop: "ec2" }).go()).data.map((k) => k.hostId),
    ).toEqual(["bastion:ops@jump:22"]);
    expect((await schedule("ec2"))?.state).toBe("cancelled");
    expect(scheduler.commandCalls(DeleteScheduleCommand).map((c) => c.args[0].input)).toEqual([
      { Name: "labfleet-teardown-ec2", GroupName: "labfleet-test" },
    ]);
  });
});

describe("teardown of bring-your-own hosts", () => {
  it("keeps their records (torn down) and their pinned keys", async () => {
    const spec: Workshop = parseWorkshopYaml(`name: byo-keep
lab:
  source: /srv/lab
  setup: bash setup.sh
provider:
  type: static
hosts:
  - { id: byo-01, ssh: lab@10.0.0.1 }
  - { id: byo-02, ssh: lab@10.0.0.2 }
`);
    const now = clock.now().toISOString();
    const runId = "run_01J9Z3Q8V6K1M2N3P4R5S6T7V9";
    await rt.store.workshop
      .put({
        name: "byo-keep",
        spec,
        yaml: "",
        state: "tearing_down",
        activeRunId: runId,
        createdAt: now,
        updatedAt: now,
      })
      .go();
    await rt.store.run
      .create({ workshop: "byo-keep", runId, kind: "teardown", state: "running", startedAt: now })
      .go();
    for (const hostId of ["byo-01", "byo-02"]) {
      await rt.store.host
        .put({
          workshop: "byo-keep",
          hostId,
          provider: "static",
          address: `lab@${hostId}`,
          state: "ready",
          access: "sealed",
          createdAt: now,
          updatedAt: now,
        })
        .go();
      await rt.store.hostKey
        .put({ workshop: "byo-keep", hostId, key: "AAAA", fingerprint: `SHA256:${hostId}`, pinnedAt: now })
        .go();
    }
    const r = await withActor({ type: "system", id: "t" }, () =>
      finishTeardown("byo-keep", runId, [
        { hostId: "byo-01", result: "skipped", detail: "bring-your-own host: left as it is" },
        { hostId: "byo-02", result: "skipped", detail: "bring-your-own host: left as it is" },
      ]),
    );
    expect(r.state).toBe("succeeded");
    const hosts = await listHosts("byo-keep");
    expect(hosts.map((h) => [h.hostId, h.state, h.address, h.access])).toEqual([
      ["byo-01", "torn_down", undefined, undefined],
      ["byo-02", "torn_down", undefined, undefined],
    ]);
    expect(
      (await rt.store.hostKey.query.byWorkshop({ workshop: "byo-keep" }).go()).data.map((k) => k.hostId),
    ).toEqual(["byo-01", "byo-02"]);
  });
});
