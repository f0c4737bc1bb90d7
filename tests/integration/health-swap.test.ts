import { existsSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab, labForLink } from "../../shared/portal/claims.ts";
import { listClaims } from "../../shared/portal/portal.ts";
import { claimOrWait } from "../../shared/portal/waiting.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { runCli } from "../harness/cli.ts";
import {
  movableClock,
  removeDir,
  tempDir,
  testRuntime,
  waitFor,
  workshopsApi,
  workshopYaml,
} from "../harness/runtime.ts";

/**
 * Health while in use on the local runtime: the quick lab's health check looks for its `built` file, which the
 * test deletes on a host to break the lab and writes again to mend it. The clock is moved past
 * lab.health_interval_seconds between passes instead of waiting.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const clock = movableClock();
const WS = "hswap";
const AUTO = "hauto";
const INTERVAL = 60_000;
const ADA = { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" };

const built = (ws: string, hostId: string) => join(rt.dataDir, "hosts", ws, hostId, "lab", "built");
const host = async (ws: string, hostId: string) =>
  (await rt.store.host.get({ workshop: ws, hostId }).go()).data;
const events = async (ws: string) =>
  (await rt.store.event.query.byWorkshop({ workshop: ws }).go({ pages: "all" })).data;
/** One health pass after the interval has passed. */
const pass = async () => {
  clock.advance(INTERVAL + 1000);
  return rt.health();
};
const api = (path: string, body?: unknown) => workshopsApi(rt)(path, body);

async function upWorkshop(name: string, count: number, portal: string) {
  const file = join(work, `${name}.yaml`);
  writeFileSync(
    file,
    `${workshopYaml({ name, count, extraLab: "  health_interval_seconds: 60\n" })}portal:\n  enabled: true\n${portal}`,
  );
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stderr).toBe(0);
  const open = await runCli(["portal", "open", name], { env });
  expect(open.code, open.stderr).toBe(0);
}

beforeAll(async () => {
  work = tempDir("labfleet-health-");
  rt = await testRuntime({ clock });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  await upWorkshop(WS, 3, "");
  await upWorkshop(AUTO, 2, "  auto_swap: true\n");
}, 120_000);

afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("health while in use, and swaps that keep the link", { timeout: 120_000 }, () => {
  let token = "";
  let adaAuto = "";

  it("two failed checks in a row flag a claimed lab; a passing check clears the flag", async () => {
    const claim = await claimLab(WS, ADA, "127.0.0.1");
    expect(claim.lab).toBe("student-01");
    token = claim.token;

    // Healthy labs pass and are recorded as checked.
    const first = await pass();
    expect(first.checked).toBeGreaterThanOrEqual(5);
    expect(first.flagged).toEqual([]);
    expect((await host(WS, "student-01"))?.health).toBe("ok");

    rmSync(built(WS, "student-01"));
    const blip = await pass();
    expect(blip.flagged).toEqual([]); // one failure is a blip
    expect((await host(WS, "student-01"))?.health).toBe("ok");
    expect((await labForLink(token))?.failing).toBe(false);

    const second = await pass();
    expect(second.flagged).toEqual([`${WS}/student-01`]);
    const h = await host(WS, "student-01");
    expect(h).toMatchObject({ state: "ready", health: "failing", healthFailures: 2 });
    expect(h?.healthError).toContain("exit code 1");
    expect((await labForLink(token))?.failing).toBe(true);
    expect((await events(WS)).filter((e) => e.type === "lab.unhealthy").map((e) => e.hostId)).toEqual([
      "student-01",
    ]);

    // The instructor sees it: portal status, labfleet status.
    const portal = await runCli(["portal", "status", WS], { env });
    expect(portal.code, portal.stderr).toBe(0);
    expect(portal.stdout).toMatch(/^student-01\s+claimed\s+Ada Lovelace\s.*HEALTH FAILING$/m);
    expect(portal.stdout).toContain(`labfleet portal swap ${WS} student-01`);
    const doc = JSON.parse((await runCli(["portal", "status", WS, "--output", "json"], { env })).stdout);
    expect(doc.health).toContainEqual(expect.objectContaining({ lab: "student-01", health: "failing" }));
    const status = await runCli(["status", WS], { env });
    expect(status.stdout).toContain("student-01 is failing its health check");

    // The student sees it on their lab page.
    const page = await fetch(`${rt.url}/l/${token}`);
    const html = await page.text();
    expect(html).toContain("Your lab is not answering; your instructor has been told.");
    expect(html).toMatch(/http-equiv="refresh" content="20"/);

    writeFileSync(built(WS, "student-01"), "");
    const mended = await pass();
    expect(mended.recovered).toEqual([`${WS}/student-01`]);
    expect(await host(WS, "student-01")).toMatchObject({ health: "ok", healthFailures: 0 });
    expect((await host(WS, "student-01"))?.healthError).toBeUndefined();
    expect((await labForLink(token))?.failing).toBe(false);
    expect((await events(WS)).map((e) => e.type)).toContain("lab.healthy");
  });

  it("portal swap moves the student to the highest free lab under the same link, and rebuilds the old one", async () => {
    rmSync(built(WS, "student-01"));
    await pass();
    await pass();
    expect((await host(WS, "student-01"))?.health).toBe("failing");

    const r = await runCli(["portal", "swap", WS, ADA.email], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain("moved Ada Lovelace from student-01 to student-03");
    // The same personal link (and so the lab cookie, which holds it) now opens the new lab.
    expect((await labForLink(token))?.lab).toBe("student-03");
    const page = await (await fetch(`${rt.url}/l/${token}`)).text();
    expect(page).toContain("Your lab: student-03");
    expect(page).not.toContain("not answering");
    const claims = await withActor({ type: "system", id: "test" }, () => listClaims(WS));
    expect(claims.map((c) => [c.lab, c.email])).toEqual([["student-03", ADA.email]]);

    // The old lab is rebuilt by a retry run and comes back ready, unclaimed and unflagged.
    await waitFor("the rebuild to start", async () => (await host(WS, "student-01"))?.state !== "ready");
    await rt.executor.idle();
    const old = await host(WS, "student-01");
    expect(old).toMatchObject({ state: "ready" });
    expect(old?.health).toBeUndefined();
    expect(existsSync(built(WS, "student-01"))).toBe(true);
    const runs = (await rt.store.run.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data;
    expect(runs.filter((x) => x.kind === "retry").map((x) => [x.selection, x.force, x.state])).toEqual([
      [["student-01"], true, "succeeded"],
    ]);
    const swapped = (await events(WS)).filter((e) => e.type === "lab.swapped");
    expect(swapped.map((e) => e.detail)).toEqual([
      { from: "student-01", to: "student-03", student: "Ada Lovelace", by: "bootstrap token" },
    ]);
    expect(JSON.stringify(await events(WS))).not.toContain(ADA.email);
  });

  it("with no free lab a swap is refused with 409 and nothing changes", async () => {
    const b = await claimLab(
      WS,
      { name: "Grace Hopper", email: "grace@example.test", pin: "193847" },
      "127.0.0.1",
    );
    const c = await claimLab(
      WS,
      { name: "Alan Turing", email: "alan@example.test", pin: "572910" },
      "127.0.0.1",
    );
    expect([b.lab, c.lab].sort()).toEqual(["student-01", "student-02"]);
    const before = await withActor({ type: "system", id: "test" }, () => listClaims(WS));
    const res = await api(`/${WS}/portal/swap`, { email: ADA.email });
    expect(res.status).toBe(409);
    expect(res.body.error.code).toBe("portal.no_lab_free");
    expect(res.body.error.message).toContain("labfleet scale");
    expect(JSON.stringify(res.body)).not.toContain(ADA.email);
    expect(await withActor({ type: "system", id: "test" }, () => listClaims(WS))).toEqual(before);
    expect((await host(WS, "student-03"))?.state).toBe("ready");
    expect((await labForLink(token))?.lab).toBe("student-03");
    const cli = await runCli(["portal", "swap", WS, "student-03"], { env });
    expect(cli.code).toBe(1);
    expect(cli.stderr).toContain("no free ready lab");
  });

  it("bad input is a 400 naming the field, and an unknown student a 404", async () => {
    const none = await api(`/${WS}/portal/swap`, {});
    expect(none.status).toBe(400);
    expect(none.body.error.details.map((d: { path: string }) => d.path)).toEqual(["email"]);
    const both = await api(`/${WS}/portal/swap`, { email: ADA.email, lab: "student-03" });
    expect(both.status).toBe(400);
    const lab = await api(`/${WS}/portal/swap`, { lab: "Not A Lab!" });
    expect(lab.status).toBe(400);
    expect(lab.body.error.details.map((d: { path: string }) => d.path)).toEqual(["lab"]);
    const email = await api(`/${WS}/portal/swap`, { email: "not-an-email" });
    expect(email.status).toBe(400);
    expect(email.body.error.details.map((d: { path: string }) => d.path)).toEqual(["email"]);
    const unknown = await api(`/${WS}/portal/swap`, { email: "nobody@example.test" });
    expect(unknown.status).toBe(404);
    expect((await api(`/nope/portal/swap`, { lab: "student-01" })).status).toBe(404);
    const usage = await runCli(["portal", "swap", WS], { env });
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain("labfleet portal swap takes EMAIL|LAB after the workshop");
  });

  it("portal.auto_swap moves the student of a flagged lab by itself", async () => {
    const claim = await claimLab(AUTO, ADA, "127.0.0.1");
    adaAuto = claim.token;
    expect(claim.lab).toBe("student-01");
    rmSync(built(AUTO, "student-01"));
    await pass();
    const flagged = await pass();
    expect(flagged.flagged).toContain(`${AUTO}/student-01`);
    expect(flagged.swapped).toEqual([`${AUTO}/student-01->student-02`]);
    expect((await labForLink(claim.token))?.lab).toBe("student-02");
    await rt.executor.idle();
    await waitFor("the old lab rebuilt", async () => (await host(AUTO, "student-01"))?.state === "ready");
    expect((await host(AUTO, "student-01"))?.health).toBeUndefined();
  });

  it("a free lab failing its check is given to nobody until it passes again", async () => {
    rmSync(built(AUTO, "student-01"));
    await pass();
    const flagged = await pass();
    expect(flagged.flagged).toEqual([`${AUTO}/student-01`]);
    expect(flagged.swapped).toEqual([]); // nobody to move
    const board = await api(`/${AUTO}/portal/status`);
    expect(board.body.labs.map((l: { lab: string; status: string }) => [l.lab, l.status])).toEqual([
      ["student-01", "failed"],
      ["student-02", "claimed"],
    ]);
    const grace = { name: "Grace Hopper", email: "grace@example.test", pin: "193847" };
    await expect(claimLab(AUTO, grace, "127.0.0.1")).rejects.toMatchObject({ code: "portal.no_lab_free" });
    // The portal's form puts her in line; the pass that finds the lab healthy again hands it to her.
    const graces = await claimOrWait(AUTO, grace, "127.0.0.1");
    expect(graces.lab).toBeUndefined();
    writeFileSync(built(AUTO, "student-01"), "");
    expect((await pass()).recovered).toEqual([`${AUTO}/student-01`]);
    const held = await rt.store.claim.get({ workshop: AUTO, hostId: "student-01" }).go();
    expect(held.data).toMatchObject({ name: grace.name, how: "queue" });

    // auto_swap with no lab free: Ada's lab stays flagged, her page says she is moved once one is free.
    rmSync(built(AUTO, "student-02"));
    await pass();
    const stuck = await pass();
    expect(stuck.flagged).toEqual([`${AUTO}/student-02`]);
    expect(stuck.swapped).toEqual([]);
    const page = await (await fetch(`${rt.url}/l/${adaAuto}`)).text();
    expect(page).toContain("Your lab: student-02");
    expect(page).toContain("Your lab is not answering: moving you to a new lab as soon as one is free.");
  });
});
