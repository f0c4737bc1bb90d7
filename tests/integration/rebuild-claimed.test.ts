import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab } from "../../shared/portal/claims.ts";
import { runCli } from "../harness/cli.ts";
import { ConsoleClient, pageText } from "../harness/console-client.ts";
import { removeDir, tempDir, testRuntime, waitFor, workshopYaml } from "../harness/runtime.ts";

/**
 * Rebuilding a lab a student has claimed takes their work away: deploy and retry refuse it (CLI exit 1, API
 * 409 `rebuild.claimed`) naming each lab and its student, and start nothing, unless forced; the console asks
 * on a page that names them, and starts nothing until it is confirmed.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const WS = "careful";
const ADA = { name: "Ada Lovelace", email: "ada@example.test", pin: "503917" };
const GRACE = { name: "Grace Hopper", email: "grace@example.test", pin: "480271" };

const runIds = async () =>
  (await rt.store.run.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data.map((r) => r.runId);
const claimOf = async (lab: string) =>
  (await rt.store.claim.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data.find(
    (c) => c.hostId === lab,
  );
/** A lab whose setup failed after it was claimed: the host's exit code and the host record both say so. */
const breakLab = async (hostId: string) => {
  writeFileSync(join(rt.dataDir, "hosts", WS, hostId, ".labfleet", WS, "rc"), "1\n");
  await rt.store.host.patch({ workshop: WS, hostId }).set({ state: "failed" }).go();
};
const api = (path: string, body: unknown) =>
  fetch(`${rt.url}/api/workshops/${WS}/${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
/** Waits for the workshop's run to end, so the next start is not refused as busy. */
const idle = async () => {
  await rt.executor.idle();
  await waitFor("the workshop to be idle", async () => {
    const w = (await rt.store.workshop.get({ name: WS }).go()).data;
    return w && !w.activeRunId ? true : undefined;
  });
};

beforeAll(async () => {
  work = tempDir("labfleet-careful-");
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  const file = join(work, "workshop.yaml");
  writeFileSync(file, workshopYaml({ name: WS, count: 3 }));
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stderr).toBe(0);
  const open = await runCli(["portal", "open", WS], { env });
  expect(open.code, open.stderr).toBe(0);
  expect((await claimLab(WS, ADA, "127.0.0.1")).lab).toBe("student-01");
  expect((await claimLab(WS, GRACE, "127.0.0.1")).lab).toBe("student-02");
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("the CLI", () => {
  it("retry --all-selected refuses to rebuild claimed labs, names them and their students, starts nothing", async () => {
    const before = await runIds();
    const r = await runCli(["retry", WS, "--all-selected"], { env });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain("student-01 (Ada Lovelace), student-02 (Grace Hopper)");
    expect(r.stderr).toContain("--force");
    expect(r.stderr).not.toContain(ADA.email);
    expect(r.stdout).toBe("");
    expect(await runIds()).toEqual(before);
  });

  it("retry of a failed claimed lab refuses too; a selection of free labs goes ahead", async () => {
    await breakLab("student-01");
    const before = await runIds();
    const refused = await runCli(["retry", WS], { env });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      "retry would rebuild a lab a student has claimed: student-01 (Ada Lovelace)",
    );
    expect(await runIds()).toEqual(before);

    const free = await runCli(["retry", WS, "--all-selected", "--host", "student-03"], { env });
    expect(free.code, free.stderr).toBe(0);
    expect(free.stdout).toContain("on student-03");
    await idle();
  });

  it("deploy refuses to rebuild a claimed lab that is not ready; --force rebuilds it and the claim stays", async () => {
    const before = await runIds();
    const refused = await runCli(["deploy", WS], { env });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(
      "deploy would rebuild a lab a student has claimed: student-01 (Ada Lovelace)",
    );
    expect(await runIds()).toEqual(before);

    const forced = await runCli(["deploy", WS, "--host", "student-01", "--force"], { env });
    expect(forced.code, forced.stderr).toBe(0);
    expect((await runIds()).length).toBe(before.length + 1);
    await idle();
    expect((await rt.store.host.get({ workshop: WS, hostId: "student-01" }).go()).data?.state).toBe("ready");
    expect((await claimOf("student-01"))?.name).toBe(ADA.name);
  });
});

describe("the API", () => {
  it("answers 409 rebuild.claimed with each claimed lab as a detail, and starts the run with force", async () => {
    const before = await runIds();
    const res = await api("retry", { allSelected: true, hosts: ["student-02", "student-03"] });
    expect(res.status).toBe(409);
    const body = (await res.json()) as { error: { code: string; message: string; details: unknown[] } };
    expect(body.error.code).toBe("rebuild.claimed");
    expect(body.error.message).toContain("student-02 (Grace Hopper)");
    expect(body.error.message).not.toContain("student-03");
    expect(body.error.details).toEqual([{ path: "hosts.student-02", message: "claimed by Grace Hopper" }]);
    expect(JSON.stringify(body)).not.toContain(GRACE.email);
    expect(await runIds()).toEqual(before);

    const forced = await api("retry", { allSelected: true, hosts: ["student-02"], force: true });
    expect(forced.status).toBe(202);
    expect(((await forced.json()) as { hosts: string[] }).hosts).toEqual(["student-02"]);
    await idle();
  });

  it("deploy with force: true rebuilds a ready claimed lab; without it, a ready lab is skipped, not rebuilt", async () => {
    const plain = await api("deploy", { hosts: ["student-02"] });
    expect(plain.status).toBe(202);
    await idle();
    const forced = await api("deploy", { hosts: ["student-02"], force: true });
    expect(forced.status).toBe(202);
    await idle();
  });
});

describe("the console", () => {
  let browser: ConsoleClient;
  beforeAll(async () => {
    browser = new ConsoleClient(rt.url);
    await browser.signIn(rt.token);
  });

  it("deploy with rebuild asks first, naming each claimed lab and its student; nothing starts until confirmed", async () => {
    await browser.get(`/console/w/${WS}`);
    const before = await runIds();
    const ask = await browser.post(`/console/w/${WS}/deploy`, { hosts: "", force: "yes" });
    expect(ask.status).toBe(200);
    const text = pageText(ask.text);
    expect(text).toContain(`Rebuild 2 claimed labs in ${WS}?`);
    expect(text).toMatch(/student-01 Ada Lovelace/);
    expect(text).toMatch(/student-02 Grace Hopper/);
    expect(text).not.toContain(ADA.email);
    expect(ask.text).toContain('name="force" value="yes"');
    expect(ask.text).toContain('name="confirm" value="yes"');
    expect(await runIds()).toEqual(before);

    const go = await browser.post(`/console/w/${WS}/deploy`, { hosts: "", force: "yes", confirm: "yes" });
    expect(go.status).toBe(303);
    expect(go.location).toBe(`/console/w/${WS}?notice=deploy`);
    expect((await runIds()).length).toBe(before.length + 1);
    await idle();
  });

  it("deploy of free labs only does not ask", async () => {
    await browser.get(`/console/w/${WS}`);
    const go = await browser.post(`/console/w/${WS}/deploy`, { hosts: "student-03", force: "yes" });
    expect(go.status).toBe(303);
    await idle();
  });

  it("retry of a failed claimed lab asks first, then retries it once confirmed", async () => {
    await breakLab("student-02");
    await browser.get(`/console/w/${WS}`);
    const before = await runIds();
    const ask = await browser.post(`/console/w/${WS}/retry`);
    expect(ask.status).toBe(200);
    expect(pageText(ask.text)).toContain(`Rebuild 1 claimed lab in ${WS}?`);
    expect(pageText(ask.text)).toMatch(/student-02 Grace Hopper/);
    expect(await runIds()).toEqual(before);
    const go = await browser.post(`/console/w/${WS}/retry`, { confirm: "yes" });
    expect(go.status).toBe(303);
    expect(go.location).toBe(`/console/w/${WS}?notice=retry`);
    await idle();
    expect((await rt.store.host.get({ workshop: WS, hostId: "student-02" }).go()).data?.state).toBe("ready");
  });
});
