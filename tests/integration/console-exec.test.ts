import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ExecJob } from "../../shared/fleet/exec-jobs.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { ConsoleClient, pageText } from "../harness/console-client.ts";
import { removeDir, testRuntime, waitFor, workshopsApi, workshopYaml } from "../harness/runtime.ts";

/**
 * Run a command from the console over real HTTP, as a browser without JavaScript (or one that skips the form's
 * own checks) uses it: hosts at once and the failures after which no further host starts reach the job; bad
 * input comes back as the form, as typed, each error at its field (400), and starts nothing; the confirmation
 * for a claimed lab carries every field to the job.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let web: ConsoleClient;
const WS = "cexec";
const FIELDS = { command: "true", hosts: "", timeout: "60", concurrency: "16", maxErrors: "" };

beforeAll(async () => {
  rt = await testRuntime();
  const api = workshopsApi(rt);
  expect((await api("", { yaml: workshopYaml({ name: WS, count: 3 }) })).status).toBe(201);
  expect((await api(`/${WS}/up`, {})).status).toBe(202);
  await waitFor(
    "3 ready labs",
    async () => {
      const s = (await api(`/${WS}`)).body;
      return s.hostList.length === 3 && s.hostList.every((h: { state: string }) => h.state === "ready")
        ? true
        : undefined;
    },
    90_000,
  );
  web = new ConsoleClient(rt.url);
  await web.signIn(rt.token);
}, 150_000);

afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

const jobs = async () =>
  (await useDeps().store.execJob.query.byWorkshop({ workshop: WS }).go({ pages: "all" })).data.length;

/** Follows the job the console started (its page's address) to its end, through the API. */
async function ended(location: string): Promise<ExecJob> {
  const jobId = location.split("/").at(-1) ?? "";
  expect(location).toBe(`/console/w/${WS}/exec/${jobId}`);
  return waitFor(
    "the job to end",
    async () => {
      const j = (await workshopsApi(rt)(`/${WS}/exec/${jobId}`)).body as ExecJob;
      return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
    },
    60_000,
  );
}

describe("Run a command from the console", () => {
  it("offers hosts at once and the failures to stop after, beside the command, hosts and timeout", async () => {
    const page = await web.get(`/console/w/${WS}`);
    expect(page.status).toBe(200);
    const form = page.text.slice(page.text.indexOf('action="/console/w/cexec/exec"'));
    for (const field of ["command", "hosts", "timeout", "concurrency", "maxErrors"])
      expect(form).toContain(`name="${field}"`);
    expect(form).toMatch(/<label for="exec-concurrency">Hosts at once<\/label>/);
    expect(form).toMatch(/id="exec-concurrency"[^>]*min="1" max="64"[^>]*value="16"/);
    expect(form).toMatch(/<label for="exec-max-errors">Stop after this many failures<\/label>/);
    expect(form).toMatch(/id="exec-max-errors"[^>]*min="1" max="10000"[^>]*value=""/);
  });

  it("runs one host at a time and starts no further host after the failures asked for", async () => {
    const r = await web.post(`/console/w/${WS}/exec`, {
      ...FIELDS,
      command: "exit 4",
      concurrency: "1",
      maxErrors: "2",
    });
    expect(r.status, pageText(r.text)).toBe(303);
    const job = await ended(r.location);
    expect(job).toMatchObject({ concurrency: 1, maxErrors: 2, state: "failed" });
    expect(job.hosts.map((h) => [h.host, h.status])).toEqual([
      ["student-01", "failed"],
      ["student-02", "failed"],
      ["student-03", "skipped"],
    ]);
    const shown = await web.get(r.location);
    expect(pageText(shown.text)).toContain(
      "3 hosts, 1 at once, timeout 60 s per host, no further host starts after 2 failures.",
    );
    expect(pageText(shown.text)).toContain("0 ok, 2 failed (exit 4): student-01, student-02; 1 skipped");

    // Blank: the defaults (16 at once, never stop).
    const all = await web.post(`/console/w/${WS}/exec`, { ...FIELDS, concurrency: "", command: "exit 4" });
    expect(all.status).toBe(303);
    const j = await ended(all.location);
    expect(j).toMatchObject({ concurrency: 3, maxErrors: null });
    expect(j.hosts.map((h) => h.status)).toEqual(["failed", "failed", "failed"]);
  });

  it("sends bad input back as the form, as typed, with each error at its field (400), starting nothing", async () => {
    const before = await jobs();
    const r = await web.post(`/console/w/${WS}/exec`, {
      command: "echo kept as typed",
      hosts: "student-02",
      timeout: "soon",
      concurrency: "65",
      maxErrors: "0",
    });
    expect(r.status).toBe(400);
    const text = pageText(r.text);
    expect(text).toContain("The command did not start: some fields are not right.");
    expect(text).toContain("Timeout per host (seconds) (timeout): expected a whole number from 1 to 3600");
    expect(text).toContain(
      "Hosts at once (concurrency): expected a whole number from 1 to 64, or blank for 16 at once",
    );
    expect(text).toContain(
      "Stop after this many failures (maxErrors): expected a whole number from 1 to 10000, or blank for never stop",
    );
    // Each wrong field is marked and described by its error; what was typed is kept.
    expect(r.text).toMatch(
      /id="exec-concurrency" aria-invalid="true" aria-describedby="exec-concurrency-error exec-concurrency-hint"[^>]*value="65"/,
    );
    expect(r.text).toMatch(/id="exec-max-errors" aria-invalid="true"[^>]*value="0"/);
    expect(r.text).toMatch(/id="exec-timeout" aria-invalid="true"[^>]*value="soon"/);
    expect(r.text).toMatch(/<p class="field-error" id="exec-concurrency-error">expected a whole number/);
    expect(r.text).toMatch(/id="exec-hosts"(?![^>]*aria-invalid)[^>]*value="student-02"/);
    expect(r.text).toContain(">echo kept as typed</textarea>");

    // A blank command, and a host the workshop does not have, come back the same way.
    const blank = await web.post(`/console/w/${WS}/exec`, { ...FIELDS, command: "  " });
    expect(blank.status).toBe(400);
    expect(pageText(blank.text)).toContain(
      "Command (bash, on each host) (command): expected a command to run",
    );
    const unknown = await web.post(`/console/w/${WS}/exec`, { ...FIELDS, hosts: "student-01 student-99" });
    expect(unknown.status).toBe(400);
    expect(pageText(unknown.text)).toMatch(/Hosts \(blank: all\) \(hosts\): .*student-99/);
    expect(unknown.text).toMatch(/id="exec-hosts" aria-invalid="true"/);

    expect(await jobs()).toBe(before);
  });

  it("carries hosts at once and the failures to stop after through the claimed lab's confirmation", async () => {
    await workshopsApi(rt)(`/${WS}/portal/open`, {});
    const { lab } = await claimLab(
      WS,
      { name: "Ada Lovelace", email: "ada@example.test", pin: "480271" },
      "127.0.0.1",
    );
    const fields = { ...FIELDS, command: "exit 7", concurrency: "1", maxErrors: "1" };
    const ask = await web.post(`/console/w/${WS}/exec`, fields);
    expect(ask.status).toBe(200);
    expect(pageText(ask.text)).toContain(`${lab}: Ada Lovelace`);
    expect(ask.text).toContain('name="concurrency" value="1"');
    expect(ask.text).toContain('name="maxErrors" value="1"');
    const go = await web.post(`/console/w/${WS}/exec`, { ...fields, confirm: "yes" });
    expect(go.status).toBe(303);
    const job = await ended(go.location);
    expect(job).toMatchObject({ concurrency: 1, maxErrors: 1 });
    expect(job.hosts.map((h) => h.status)).toEqual(["failed", "skipped", "skipped"]);
  });
});
