import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop, workshopStatus } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { processesUnder, removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * A 500-host workshop (the most a workshop may have) on the local runtime, with a lab that does no work: `up`
 * brings every lab to ready in one run whose Deploy Map holds 100 items of 5 hosts, the instructor's fleet view
 * answers all 500 in bounded pages and status with bounded JSON, and the teardown removes every host and every
 * process.
 */

const W = "conference";
const HOSTS = 500;
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);
const api = async (path: string) => {
  const res = await fetch(`${rt.url}/api/workshops${path}`, {
    headers: { authorization: `Bearer ${rt.token}` },
  });
  return { status: res.status, text: await res.text() };
};

beforeAll(async () => {
  rt = await testRuntime();
});
afterAll(async () => {
  await rt?.close();
  if (rt) {
    expect(processesUnder(rt.dataDir)).toEqual([]);
    removeDir(rt.dataDir);
  }
});

describe("a 500-host workshop on the local runtime", { timeout: 900_000 }, () => {
  it("comes up: every lab ready in one run of 100 deploy items", async () => {
    await asInstructor(() =>
      submitWorkshop(
        workshopYaml({
          name: W,
          lab: "instant",
          count: HOSTS,
          timeoutMinutes: 30,
          concurrency: 40,
        }),
      ),
    );
    const run = await asInstructor(() => startRun(W, "up"));
    await rt.executor.idle();
    const s = await asInstructor(() => workshopStatus(W));
    const r = s.runs.find((x) => x.id === run.runId);
    expect(r?.state, r?.error ?? "").toBe("succeeded");
    expect(s.hosts).toMatchObject({ total: HOSTS, ready: HOSTS, failed: 0 });
    // BeginUp, ProvisionStage, Provision, AfterProvision, Deploy, 100 items (not 500), AfterDeploy, then
    // (Wait, Poll, CheckReady) per poll, FinishUp.
    const transitions = r?.transitions ?? 0;
    expect((transitions - 6 - 100 - 1) % 3).toBe(0);
    expect(transitions).toBeLessThan(6 + HOSTS);
  });

  it("the fleet view answers all 500 in pages, status all at once, a bounded size per lab", async () => {
    type Page = {
      labs: { id: string; state: string }[];
      counts: { total: number; ready: number };
      page: { next: string | null };
    };
    // The fleet view's pages (100 labs each by default), followed to the end, hold every lab once.
    const seen: string[] = [];
    let cursor: string | null = "";
    let pages = 0;
    while (cursor !== null) {
      const res = await api(`/${W}/fleet${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ""}`);
      expect(res.status).toBe(200);
      expect(res.text.length).toBeLessThan(100 * 1024);
      const page = JSON.parse(res.text) as Page;
      expect(page.counts).toMatchObject({ total: HOSTS, ready: HOSTS });
      expect(page.labs.length).toBeLessThanOrEqual(100);
      seen.push(...page.labs.filter((l) => l.state === "ready").map((l) => l.id));
      cursor = page.page.next;
      pages++;
    }
    expect(pages).toBe(5);
    expect(new Set(seen).size).toBe(HOSTS);
    // The largest page there is: every lab at once, still a bounded size per lab.
    const fleet = await api(`/${W}/fleet?limit=${HOSTS}`);
    expect((JSON.parse(fleet.text) as Page).labs).toHaveLength(HOSTS);
    expect(fleet.text.length).toBeLessThan(HOSTS * 1024);
    const status = await api(`/${W}`);
    expect(status.status).toBe(200);
    const body = JSON.parse(status.text) as { hostList: { id: string }[] };
    // In the order people count them, as the fleet view's pages are: student-99, then student-100.
    const counted = Array.from({ length: HOSTS }, (_, i) => `student-${String(i + 1).padStart(2, "0")}`);
    expect(body.hostList.map((h) => h.id)).toEqual(counted);
    expect(seen).toEqual(counted);
    expect(status.text.length).toBeLessThan(HOSTS * 1024);
  });

  it("tears down: every host folder gone, no process left", async () => {
    const run = await asInstructor(() => startRun(W, "teardown"));
    await rt.executor.idle();
    const s = await asInstructor(() => workshopStatus(W));
    expect(s.runs.find((x) => x.id === run.runId)?.state).toBe("succeeded");
    expect(s.state).toBe("torn_down");
    expect(existsSync(join(rt.dataDir, "hosts", W))).toBe(false);
    expect(processesUnder(join(rt.dataDir, "hosts"))).toEqual([]);
  });
});
