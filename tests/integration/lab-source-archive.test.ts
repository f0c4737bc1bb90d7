import { execFileSync } from "node:child_process";
import { chmodSync, mkdirSync, readFileSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LabStepError, sourceArchive } from "../../shared/fleet/lab.ts";
import { removeDir, tempDir } from "../harness/runtime.ts";

/**
 * A deploy sends the same local lab folder to every host: it is archived once, and again only when something in
 * it changed. A `tar` on the PATH that logs each start counts the archives made.
 */
let work: string;
let lab: string;
let starts: string;
const path = process.env.PATH;

const tarStarts = () => readFileSync(starts, "utf8").split("\n").filter(Boolean).length;
const filesIn = (archive: Buffer, file: string) =>
  execFileSync("/usr/bin/tar", ["-x", "-O", "-f", "-", `./${file}`], { input: archive }).toString();

beforeAll(() => {
  work = tempDir("labfleet-archive-");
  lab = join(work, "lab");
  mkdirSync(join(lab, "sub"), { recursive: true });
  writeFileSync(join(lab, "setup.sh"), "echo one\n");
  writeFileSync(join(lab, "sub", "data.txt"), "first\n");
  const bin = join(work, "bin");
  mkdirSync(bin);
  starts = join(work, "tar-starts");
  writeFileSync(starts, "");
  writeFileSync(join(bin, "tar"), `#!/bin/sh\necho start >> ${starts}\nexec /usr/bin/tar "$@"\n`);
  chmodSync(join(bin, "tar"), 0o755);
  process.env.PATH = `${bin}:${path}`;
});

afterAll(() => {
  process.env.PATH = path;
  if (work) removeDir(work);
});

describe("sourceArchive", () => {
  it("archives a folder once for many hosts, at once or one after another", async () => {
    const at = tarStarts();
    const all = await Promise.all(Array.from({ length: 20 }, () => sourceArchive(lab)));
    for (let i = 0; i < 5; i++) all.push(await sourceArchive(lab));
    expect(tarStarts()).toBe(at + 1);
    expect(new Set(all).size).toBe(1);
    expect(filesIn(all[0] as Buffer, "sub/data.txt")).toBe("first\n");
  });

  it("archives it again when a file changes, even to the same size, or a file is added", async () => {
    await sourceArchive(lab);
    const at = tarStarts();
    writeFileSync(join(lab, "sub", "data.txt"), "secon\n"); // same size
    const later = new Date(Date.now() + 5000);
    utimesSync(join(lab, "sub", "data.txt"), later, later);
    const changed = await sourceArchive(lab);
    expect(tarStarts()).toBe(at + 1);
    expect(filesIn(changed, "sub/data.txt")).toBe("secon\n");

    writeFileSync(join(lab, "sub", "new.txt"), "new\n");
    const added = await sourceArchive(lab);
    expect(tarStarts()).toBe(at + 2);
    expect(filesIn(added, "sub/new.txt")).toBe("new\n");
    expect(await sourceArchive(lab)).toBe(added);
    expect(tarStarts()).toBe(at + 2);
  });

  it("refuses a folder that is not there with tar's message, and keeps nothing of it", async () => {
    const missing = join(work, "missing");
    await expect(sourceArchive(missing)).rejects.toBeInstanceOf(LabStepError);
    await expect(sourceArchive(missing)).rejects.toThrow(`reading the lab source ${missing} failed`);
    mkdirSync(missing);
    writeFileSync(join(missing, "setup.sh"), "true\n");
    expect(filesIn(await sourceArchive(missing), "setup.sh")).toBe("true\n");
  });
});
