import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listHosts } from "../../shared/fleet/workshops.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { runCli } from "../harness/cli.ts";
import { processesLeftUnder, removeDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * Scaling down (`labfleet down NAME --unclaimed N`, `POST .../portal/scale-down`) while a run acts on the labs
 * it would remove is refused with a 409 that says what to do, and removes nothing; once the run ended it works.
 * The `counted` lab's build N of a host ends only once the test writes `$HOME/go.N`.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let env: Record<string, string>;
const WS = "busyscale";
const home = (h: string) => join(rt.dataDir, "hosts", WS, h);
const go = (h: string, n: number) => writeFileSync(join(home(h), `go.${n}`), "");

const api = (path: string, body?: unknown) =>
  fetch(`${rt.url}/api/workshops${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
const states = async () => Object.fromEntries((await listHosts(WS)).map((h) => [h.hostId, h.state]));
const runEnd = (runId: string) =>
  waitFor(
    `run ${runId} to end`,
    async () => {
      const state = (await rt.store.run.get({ workshop: WS, runId }).go()).data?.state;
      return state && state !== "running" ? state : undefined;
    },
    60_000,
  );

beforeAll(async () => {
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
});
afterAll(async () => {
  await rt?.close();
  if (rt) {
    const left = await processesLeftUnder(rt.dataDir);
    removeDir(rt.dataDir);
    expect(left).toEqual([]);
  }
});

describe("scale-down during a run", () => {
  it("is refused with the remedy while the run acts on the labs, and works once it ended", async () => {
    const submitted = await api("", { yaml: workshopYaml({ name: WS, lab: "counted", count: 3 }) });
    expect(submitted.status).toBe(201);
    const up = await api(`/${WS}/up`, {});
    expect(up.status).toBe(202);
    const runId = ((await up.json()) as { run: { id: string } }).run.id;
    await waitFor("every lab to be building", async () => {
      const hosts = await listHosts(WS);
      return hosts.length === 3 && hosts.every((h) => h.state === "deploying" && h.phase === "build-1")
        ? true
        : undefined;
    });

    const refused = await api(`/${WS}/portal/scale-down`, { unclaimed: 1 });
    expect(refused.status).toBe(409);
    const remedy = `a run is in progress on ${WS} (up, ${runId}): wait for it to end (labfleet status ${WS}), then scale down; nothing was removed`;
    expect(((await refused.json()) as { error: unknown }).error).toMatchObject({
      code: "workshop.busy",
      message: remedy,
    });
    const cli = await runCli(["down", WS, "--unclaimed", "all"], { env });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain(remedy);
    // Nothing was removed: every lab is still building in its folder, none is marked removed.
    expect(await states()).toEqual({
      "student-01": "deploying",
      "student-02": "deploying",
      "student-03": "deploying",
    });
    for (const h of ["student-01", "student-02", "student-03"]) expect(existsSync(home(h)), h).toBe(true);
    expect((await rt.store.workshop.get({ name: WS }).go()).data?.removedHosts ?? []).toEqual([]);

    for (const h of ["student-01", "student-02", "student-03"]) go(h, 1);
    expect(await runEnd(runId)).toBe("succeeded");
    const done = await runCli(["down", WS, "--unclaimed", "1"], { env });
    expect(done.code, done.stderr).toBe(0);
    expect(done.stdout).toBe("removed 1 lab: student-03\n");
    expect(await states()).toEqual({
      "student-01": "ready",
      "student-02": "ready",
      "student-03": "torn_down",
    });
    expect(existsSync(home("student-03"))).toBe(false);
  }, 90_000);

  it("goes ahead while the run acts only on other labs (a deploy of a claimed lab)", async () => {
    expect((await api(`/${WS}/portal/open`, {})).status).toBe(200);
    const claim = await claimLab(WS, { name: "Ada", email: "ada@example.test", pin: "503917" }, "127.0.0.1");
    expect(claim.lab).toBe("student-01");
    mkdirSync(home("student-01"), { recursive: true });
    const deploy = await api(`/${WS}/deploy`, { hosts: ["student-01"], force: true });
    expect(deploy.status).toBe(202);
    const runId = ((await deploy.json()) as { run: { id: string } }).run.id;
    await waitFor("the claimed lab to be rebuilding", async () =>
      (await states())["student-01"] === "deploying" ? true : undefined,
    );

    // The free lab is not the deploy's: it goes; the claimed one, which the deploy rebuilds, would not.
    const removed = await api(`/${WS}/portal/scale-down`, { unclaimed: 1 });
    expect(removed.status).toBe(200);
    expect(await removed.json()).toEqual({ removed: ["student-02"], releasedClaims: [], waiting: 0 });
    const forced = await api(`/${WS}/portal/scale-down`, { unclaimed: 1, force: true });
    expect(forced.status).toBe(409);
    expect(((await forced.json()) as { error: { message: string } }).error.message).toContain(
      `(deploy, ${runId})`,
    );

    go("student-01", 2);
    expect(await runEnd(runId)).toBe("succeeded");
    expect(await states()).toEqual({
      "student-01": "ready",
      "student-02": "torn_down",
      "student-03": "torn_down",
    });
  }, 90_000);
});
