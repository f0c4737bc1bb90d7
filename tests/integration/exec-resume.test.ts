import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import { execJob, startExecJob } from "../../shared/fleet/exec-jobs.ts";
import { startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import {
  processesUnder,
  removeDir,
  tempDir,
  testRuntime,
  uniqueTable,
  waitFor,
  workshopYaml,
} from "../harness/runtime.ts";

/**
 * An exec job outlives the local runtime that started it: its command runs detached on the host, and the next
 * start of the runtime resumes the job's workflow, which collects the result.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
const open: Runtime[] = [];
const dataDir = tempDir();
const table = uniqueTable();
const W = "exec-resume";
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

afterAll(async () => {
  for (const rt of open) await rt.close().catch(() => undefined);
  expect(processesUnder(dataDir)).toEqual([]);
  removeDir(dataDir);
});

const start = async () => {
  const rt = await testRuntime({ dataDir, table, stopLabsOnClose: false });
  open.push(rt);
  return rt;
};

it("resumes an exec job after a restart and collects the command that ran on meanwhile", async () => {
  let rt = await start();
  await asInstructor(() => submitWorkshop(workshopYaml({ name: W, count: 1 })));
  await asInstructor(() => startRun(W, "up"));
  await rt.executor.idle();
  const job = await asInstructor(() =>
    startExecJob(W, { command: "until [ -e go ]; do sleep 0.1; done; echo resumed", timeoutSeconds: 120 }),
  );
  await waitFor("the command to run", async () =>
    (await execJob(W, job.jobId)).running.includes("student-01") ? true : undefined,
  );
  await rt.close();
  open.splice(open.indexOf(rt), 1);
  const home = join(dataDir, "hosts", W, "student-01");
  // Detached on the host: the command goes on without the runtime.
  expect(processesUnder(home).length).toBeGreaterThan(0);
  expect((await execJob(W, job.jobId)).state).toBe("running");
  writeFileSync(join(home, "go"), "");
  rt = await start();
  const end = await waitFor("the resumed job to end", async () => {
    const j = await execJob(W, job.jobId);
    return j.state === "running" ? undefined : j;
  });
  expect(end).toMatchObject({ state: "succeeded", ok: true });
  expect(end.hosts.map((h) => [h.host, h.status, h.stdout])).toEqual([["student-01", "ok", "resumed\n"]]);
  // The local executor counted the workflow's transitions, before the restart and after it. It records the last
  // of them once the workflow has ended, which is after the job's record says so.
  await rt.executor.idle();
  expect((await execJob(W, job.jobId)).transitions).toBeGreaterThan(2);
}, 120_000);
