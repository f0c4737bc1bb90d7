import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CHECK_IN_SECONDS, MISSED_CHECK_INS } from "../../shared/agent/check-in.ts";
import { recordEnrolledHost } from "../../shared/agent/enrolled-hosts.ts";
import { controlHost } from "../../shared/agent/host-controls.ts";
import { signedHeaders } from "../../shared/agent/signing.ts";
import { fleetView } from "../../shared/fleet/fleet-view.ts";
import { submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import { board, claimLab } from "../../shared/portal/claims.ts";
import { openPortal } from "../../shared/portal/portal.ts";
import { forgetStudentReads } from "../../shared/portal/reads.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { runCli } from "../harness/cli.ts";
import { ConsoleClient, pageText } from "../harness/console-client.ts";
import { movableClock, removeDir, testRuntime } from "../harness/runtime.ts";

/**
 * Enrolled hosts as the instructor and the portal see them: a host that stopped calling in is `unreachable` in
 * the status (API and CLI, text and JSON), the fleet view and the console the moment it has missed three
 * check-ins, judged against the clock where it is read, before any sweep marks it; its lab takes no claim until
 * it calls in again. Drained and disabled hosts are shown as such and take no claim either.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const clock = movableClock();
let nonces = 0;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);
const SILENT_MS = MISSED_CHECK_INS * CHECK_IN_SECONDS * 1000;

const yaml = (name: string) =>
  `name: ${name}\nlab:\n  source: git:https://example.test/lab.git\n  setup: bash setup.sh\n  health: test -f built\nprovider:\n  type: enrolled\nportal:\n  enabled: true\n`;

/** The agent's signed poll (a check-in), signed at the runtime's clock. */
async function poll(workshop: string, hostId: string, secret: string): Promise<number> {
  const body = '{"wait":0}';
  const parts = {
    method: "POST",
    path: "/agent/v1/poll",
    body,
    timestamp: Math.floor(clock.now().getTime() / 1000),
    nonce: `v-${process.pid}-${nonces++}-0123456789`,
  };
  const res = await fetch(`${rt.url}/agent/v1/poll`, {
    method: "POST",
    headers: { "content-type": "application/json", ...signedHeaders(workshop, hostId, secret, parts) },
    body,
  });
  await res.arrayBuffer();
  return res.status;
}

/** An approved enrolled host whose lab is ready (no deploy of its own: status reads it as it is). */
async function readyHost(workshop: string, name: string) {
  const h = await recordEnrolledHost({ workshop, name, facts: {}, enrollment: "approved" });
  await rt.store.host.patch({ workshop, hostId: h.hostId }).set({ state: "ready" }).go();
  return h;
}

async function api(path: string) {
  const res = await fetch(`${rt.url}/api${path}`, { headers: { authorization: `Bearer ${rt.token}` } });
  // biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field
  return { status: res.status, body: (await res.json()) as any };
}

async function claimError(workshop: string, email: string): Promise<string> {
  try {
    const c = await claimLab(workshop, { name: "Ada", email, pin: "503917" }, "10.9.0.7");
    return `claimed ${c.lab}`;
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
}

beforeAll(async () => {
  rt = await testRuntime({ clock });
  for (const name of ["live", "ctl", "cli"]) await asInstructor(() => submitWorkshop(yaml(name)));
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("a host that stops calling in", () => {
  it("is unreachable at once in status, the API, the fleet view and the console, and takes no claim until it calls again", async () => {
    const { hostId, secret } = await readyHost("live", "pc");
    await asInstructor(() => openPortal("live"));
    expect(await poll("live", hostId, secret)).toBe(200);
    const seen = (await rt.store.host.get({ workshop: "live", hostId }).go()).data?.lastSeenAt;
    expect((await asInstructor(() => workshopStatus("live"))).hostList[0]).toMatchObject({
      id: hostId,
      reachable: "online",
      lastSeenAt: seen,
      drained: false,
      disabled: false,
    });

    // Three check-ins missed, and no scheduler pass or sweep has run: the stored mark still says online.
    clock.advance(SILENT_MS + 1000);
    expect((await rt.store.host.get({ workshop: "live", hostId }).go()).data?.reachable).toBe("online");

    const status = await asInstructor(() => workshopStatus("live"));
    expect(status.hostList[0]).toMatchObject({ id: hostId, reachable: "unreachable", lastSeenAt: seen });
    const viaApi = await api("/workshops/live");
    expect(viaApi.status).toBe(200);
    expect(viaApi.body.hostList[0]).toMatchObject({ id: hostId, reachable: "unreachable", lastSeenAt: seen });
    const fleet = await api("/workshops/live/fleet");
    expect(fleet.body.labs[0]).toMatchObject({ id: hostId, reachable: "unreachable", lastSeenAt: seen });
    expect(fleet.body.counts).toMatchObject({ ready: 1, free: 0, unreachable: 1 });

    const browser = new ConsoleClient(rt.url);
    await browser.signIn(rt.token);
    const page = await browser.get("/console/w/live");
    expect(page.status).toBe(200);
    expect(page.text).toMatch(new RegExp(`<tr id="host-${hostId}"[^>]*data-reachable="unreachable"`));
    expect(page.text).toContain('data-agent="unreachable"');
    // The page's server-rendered time reads at the runtime's clock: 1 min 31 s after the last call.
    expect(pageText(page.text)).toContain("unreachable last seen 1 min ago");
    expect(pageText(page.text)).toContain("1 unreachable");

    expect(await claimError("live", "ada@example.test")).toBe("portal.no_lab_free");
    // The student board does not offer it as free either, and says why not.
    forgetStudentReads("live");
    expect((await board("live")).labs).toEqual([{ lab: hostId, status: "unavailable" }]);

    // It calls in again: online everywhere, and its lab is claimable.
    expect(await poll("live", hostId, secret)).toBe(200);
    expect((await asInstructor(() => fleetView("live"))).labs[0]).toMatchObject({ reachable: "online" });
    forgetStudentReads("live");
    expect((await board("live")).labs).toEqual([{ lab: hostId, status: "free" }]);
    const back = await browser.get("/console/w/live");
    expect(back.text).toMatch(new RegExp(`<tr id="host-${hostId}"[^>]*data-reachable="online"`));
    expect(back.text).not.toContain('data-agent="unreachable"');
    expect(await claimError("live", "ada@example.test")).toBe(`claimed ${hostId}`);
  });
});

describe("drained and disabled hosts", () => {
  it("are shown as such and take no claim through the portal", async () => {
    const a = await readyHost("ctl", "a");
    const b = await readyHost("ctl", "b");
    const c = await readyHost("ctl", "c");
    await asInstructor(() => controlHost("ctl", a.hostId, "drain"));
    await asInstructor(() => controlHost("ctl", b.hostId, "disable"));
    await asInstructor(() => openPortal("ctl"));

    const fleet = await asInstructor(() => fleetView("ctl"));
    expect(fleet.labs.map((l) => [l.id, l.reachable, l.drained, l.disabled])).toEqual([
      [a.hostId, "online", true, false],
      [b.hostId, "online", false, true],
      [c.hostId, "online", false, false],
    ]);
    expect(fleet.counts).toMatchObject({ ready: 3, free: 1, unreachable: 0 });
    const browser = new ConsoleClient(rt.url);
    await browser.signIn(rt.token);
    const page = await browser.get("/console/w/ctl");
    expect(page.text).toMatch(new RegExp(`id="host-${a.hostId}"[\\s\\S]*?data-agent="drained"`));
    expect(page.text).toMatch(new RegExp(`id="host-${b.hostId}"[\\s\\S]*?data-agent="disabled"`));
    expect(page.text).not.toMatch(new RegExp(`id="host-${c.hostId}"[^]*?data-agent=`));

    expect((await board("ctl")).labs.map((l) => [l.lab, l.status])).toEqual([
      [a.hostId, "unavailable"],
      [b.hostId, "unavailable"],
      [c.hostId, "free"],
    ]);
    // The lowest-numbered labs are drained and disabled: the claim goes past them, and then there is none.
    expect(await claimError("ctl", "one@example.test")).toBe(`claimed ${c.hostId}`);
    expect(await claimError("ctl", "two@example.test")).toBe("portal.no_lab_free");
  });
});

describe("labfleet status", () => {
  it("shows each enrolled host's agent in its text and its JSON", async () => {
    const on = await readyHost("cli", "on");
    const gone = await readyHost("cli", "gone");
    const dr = await readyHost("cli", "dr");
    const off = await readyHost("cli", "off");
    // Silent for 5 minutes by the wall clock (the CLI's own) and so by the runtime's, which is never behind it.
    const lastCall = new Date(Date.now() - 5 * 60_000).toISOString();
    await rt.store.host.patch({ workshop: "cli", hostId: gone.hostId }).set({ lastSeenAt: lastCall }).go();
    await asInstructor(() => controlHost("cli", dr.hostId, "drain"));
    await asInstructor(() => controlHost("cli", off.hostId, "disable"));
    const env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };

    const text = await runCli(["status", "cli"], { env });
    expect(text.code).toBe(0);
    const lines = text.stdout.split("\n");
    expect(lines[0]).toMatch(/^cli: draft · 4\/4 ready · 1 unreachable/);
    const row = (id: string) => lines.find((l) => l.startsWith(`${id} `)) ?? "";
    expect(row(on.hostId)).toMatch(new RegExp(`^${on.hostId} +ready +online +ready`));
    expect(row(gone.hostId)).toMatch(
      new RegExp(`^${gone.hostId} +ready +unreachable, last seen 5 min ago +ready`),
    );
    expect(row(dr.hostId)).toMatch(new RegExp(`^${dr.hostId} +ready +online, drained +ready`));
    expect(row(off.hostId)).toMatch(new RegExp(`^${off.hostId} +ready +online, disabled +ready`));
    expect(text.stdout).toContain(`${gone.hostId} is unreachable: its agent has not called in since `);
    expect(text.stdout).toContain("bash ~/.labfleet-agent/agent.sh run cli");

    const json = await runCli(["status", "cli", "--output", "json"], { env });
    expect(json.code).toBe(0);
    const hosts = JSON.parse(json.stdout).hosts as Record<string, unknown>[];
    const byId = new Map(hosts.map((h) => [h.id, h]));
    expect(byId.get(gone.hostId)).toMatchObject({
      reachable: "unreachable",
      lastSeenAt: lastCall,
      drained: false,
      disabled: false,
    });
    expect(byId.get(on.hostId)).toMatchObject({ reachable: "online", drained: false, disabled: false });
    expect(byId.get(dr.hostId)).toMatchObject({ reachable: "online", drained: true, disabled: false });
    expect(byId.get(off.hostId)).toMatchObject({ reachable: "online", drained: false, disabled: true });
  }, 60_000);
});
