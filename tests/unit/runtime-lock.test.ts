import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import {
  acquireRuntimeLock,
  DataDirInUseError,
  LOCK_FILE,
  lockOwner,
  processStartTime,
} from "../../cli/local/lock.ts";
import { removeDir, tempDir } from "../harness/runtime.ts";

/** The data folder's lock: held by a live runtime it refuses; left by a dead one (or a reused pid) it is taken. */
const dirs: string[] = [];
const folder = () => {
  const d = tempDir("labfleet-lock-");
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) removeDir(d);
});
const lockOf = (dir: string) => JSON.parse(readFileSync(join(dir, LOCK_FILE), "utf8"));

describe("the runtime lock", () => {
  it("is taken, names this process, records the URL and is given back", () => {
    const dir = folder();
    const lock = acquireRuntimeLock(dir);
    expect(lockOf(dir)).toEqual({ pid: process.pid, startTime: processStartTime(process.pid) });
    lock.setUrl("http://127.0.0.1:8787");
    expect(lockOwner(dir)).toEqual({
      pid: process.pid,
      startTime: processStartTime(process.pid),
      url: "http://127.0.0.1:8787",
    });
    lock.release();
    expect(lockOwner(dir)).toBeUndefined();
    acquireRuntimeLock(dir).release(); // free again
  });

  it("refuses while a live process holds it, naming its pid and URL", () => {
    const dir = folder();
    const owner = {
      pid: process.ppid,
      startTime: processStartTime(process.ppid),
      url: "http://127.0.0.1:4000",
    };
    writeFileSync(join(dir, LOCK_FILE), JSON.stringify(owner));
    let thrown: unknown;
    try {
      acquireRuntimeLock(dir);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).toBeInstanceOf(DataDirInUseError);
    expect((thrown as Error).message).toBe(
      `labfleet dev is already running on ${dir} (pid ${process.ppid}, http://127.0.0.1:4000): use that one, stop it first, or choose another folder with --data-dir`,
    );
    expect(lockOf(dir)).toEqual(owner); // untouched
  });

  it.each([
    ["a process that is gone", { pid: 2 ** 22 + 12_345, startTime: "1" }],
    ["a pid now used by another process (another start time)", { pid: process.ppid, startTime: "1" }],
    ["an unreadable lock", "{not json"],
  ])("takes over a lock left by %s", (_what, stale) => {
    const dir = folder();
    writeFileSync(join(dir, LOCK_FILE), typeof stale === "string" ? stale : JSON.stringify(stale));
    expect(lockOwner(dir)).toBeUndefined();
    const lock = acquireRuntimeLock(dir);
    expect(lockOf(dir).pid).toBe(process.pid);
    lock.release();
  });

  it("release leaves a lock that is no longer this process's", () => {
    const dir = folder();
    const lock = acquireRuntimeLock(dir);
    const other = { pid: process.ppid, startTime: processStartTime(process.ppid) };
    writeFileSync(join(dir, LOCK_FILE), JSON.stringify(other));
    lock.setUrl("http://127.0.0.1:1");
    lock.release();
    expect(lockOf(dir)).toEqual(other);
  });
});
