import { execFileSync } from "node:child_process";
import { appendFileSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  HOST_PAGE_BYTES,
  LabStepError,
  PROBE_LIMITS,
  probeLab,
  readAccess,
  syncAndStartLab,
} from "../../shared/fleet/lab.ts";
import { LocalTransport } from "../../shared/transports/local.ts";
import type { ExecOptions, Transport } from "../../shared/transports/types.ts";
import { parseWorkshopYaml } from "../../shared/workshop/load.ts";
import { removeDir, tempDir, waitFor } from "../harness/runtime.ts";

/**
 * A deploy's one command per host: the lab source synced and the setup started in one session, with the start's
 * files read from the head of stdin and the lab folder's archive from the rest. Run with real bash and tar on
 * a local host folder.
 */
let work: string;
let folder: string;
let repo: string;

// Multi-byte text, a quote and a `$(...)`: each part must arrive byte for byte.
const SETUP = `printf '%s\\n' "héllo wörld 'q' \\$(not run)" > made.txt`;
const SECRETS = "API_TOKEN='t0k€n'\nOTHER='x'\n\n";

/** A local transport that records each command it runs. */
function recorded(home: string): Transport & { sent: { command: string; options: ExecOptions }[] } {
  const inner = new LocalTransport(home);
  const sent: { command: string; options: ExecOptions }[] = [];
  return {
    sent,
    exec: (command: string, options: ExecOptions = {}) => {
      sent.push({ command, options });
      return inner.exec(command, options);
    },
  };
}

const specFor = (source: string, extra = "") =>
  parseWorkshopYaml(`name: one
lab:
  source: ${source}
  setup: ${JSON.stringify(SETUP)}
${extra}provider:
  type: local
  count: 1
  ttl_hours: 4
`);

const start = (t: Transport, source: string, via: "local" | "ssm" = "local", ref?: string) =>
  syncAndStartLab(t, specFor(source), via, {
    ref,
    stopFirst: false,
    hostId: "student-01",
    runId: "run-1",
    files: { secrets: SECRETS, push: "off" },
  });

const rejection = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (err) {
    return err as Error;
  }
  throw new Error("expected a failure");
};

beforeAll(() => {
  work = tempDir("labfleet-lab-start-");
  folder = join(work, "lab");
  mkdirSync(join(folder, "sub"), { recursive: true });
  writeFileSync(join(folder, "sub", "data.bin"), Buffer.from([0, 1, 2, 255, 10, 0]));
  writeFileSync(join(folder, "README"), "the lab\n");
  repo = join(work, "repo");
  mkdirSync(repo);
  const git = (...args: string[]) => execFileSync("git", ["-C", repo, ...args], { stdio: "pipe" });
  git("init", "-q", "-b", "main");
  writeFileSync(join(repo, "README"), "from git\n");
  git("add", "README");
  git("-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-q", "-m", "one");
});

afterAll(() => {
  if (work) removeDir(work);
});

describe("syncAndStartLab", () => {
  it("syncs a lab folder and starts its setup in one command, every part byte for byte", async () => {
    const home = join(work, "h1");
    mkdirSync(home);
    const t = recorded(home);
    await start(t, folder);
    expect(t.sent).toHaveLength(1);
    // The secrets travel on stdin, never on the command line.
    expect(t.sent[0]?.command).not.toContain("t0k");
    const state = join(home, ".labfleet", "one");
    expect(readFileSync(join(home, "lab", "sub", "data.bin"))).toEqual(Buffer.from([0, 1, 2, 255, 10, 0]));
    expect(readFileSync(join(state, "setup.sh"), "utf8")).toBe(`${SETUP}\n`);
    expect(readFileSync(join(state, "secrets.env"), "utf8")).toBe(SECRETS);
    expect(statSync(join(state, "secrets.env")).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(state, "run"), "utf8")).toBe("run-1\n");
    await waitFor("the setup to end", () => existsSync(join(state, "rc")) || undefined);
    // the exit code, then the time the wrapper wrote it (epoch seconds)
    const [rc, at] = readFileSync(join(state, "rc"), "utf8").trim().split("\n");
    expect(rc).toBe("0");
    expect(Math.abs(Number(at) - Date.now() / 1000)).toBeLessThan(60);
    expect(readFileSync(join(home, "lab", "made.txt"), "utf8")).toBe("héllo wörld 'q' $(not run)\n");
  });

  it("syncs a git source at its ref in the same command", async () => {
    const home = join(work, "h2");
    mkdirSync(home);
    const t = recorded(home);
    await start(t, `git:${repo}`, "local", "main");
    expect(t.sent).toHaveLength(1);
    expect(readFileSync(join(home, "lab", "README"), "utf8")).toBe("from git\n");
    expect(readFileSync(join(home, ".labfleet", "one", "setup.sh"), "utf8")).toBe(`${SETUP}\n`);
  });

  it("started again, over a lab folder or a git source: the old records are gone and the state folder is 0700", async () => {
    for (const [name, source] of [
      ["h8", folder],
      ["h9", `git:${repo}`],
    ] as const) {
      const home = join(work, name);
      mkdirSync(home);
      const state = join(home, ".labfleet", "one");
      await start(recorded(home), source, "local", source.startsWith("git:") ? "main" : undefined);
      await waitFor("the setup to end", () => existsSync(join(state, "rc")) || undefined);
      // What the first setup's life left (this setup writes none of them itself), and a folder opened up.
      for (const f of ["status.jsonl", "access.json", "heartbeat", "push.mark"])
        writeFileSync(join(state, f), "old\n");
      execFileSync("chmod", ["755", state]);
      await syncAndStartLab(recorded(home), specFor(source), "local", {
        ref: source.startsWith("git:") ? "main" : undefined,
        stopFirst: false,
        hostId: "student-01",
        runId: "run-2",
        files: { secrets: SECRETS, push: "off" },
      });
      expect(statSync(state).mode & 0o777, name).toBe(0o700);
      expect(readFileSync(join(state, "run"), "utf8"), name).toBe("run-2\n");
      for (const f of ["status.jsonl", "access.json", "push.mark"])
        expect(existsSync(join(state, f)), `${name} ${f}`).toBe(false);
      await waitFor("the second setup to end", () => existsSync(join(state, "rc")) || undefined);
      expect(readFileSync(join(home, "lab", "made.txt"), "utf8")).toBe("héllo wörld 'q' $(not run)\n");
    }
  });

  it("names a failed sync as the sync's, and starts nothing", async () => {
    const home = join(work, "h3");
    mkdirSync(home);
    const err = await rejection(start(recorded(home), `git:${repo}`, "local", "no-such-ref"));
    expect(err).toBeInstanceOf(LabStepError);
    expect(err.message).toMatch(/^syncing the lab source failed: exit code 3: ref no-such-ref not found$/);
    expect(existsSync(join(home, ".labfleet", "one", "pid"))).toBe(false);
  });

  it("names a start that fails after the sync as the start's", async () => {
    const home = join(work, "h4");
    mkdirSync(home);
    writeFileSync(join(home, ".labfleet"), "a file where the state folder goes\n");
    const err = await rejection(start(recorded(home), folder));
    expect(err).toBeInstanceOf(LabStepError);
    expect(err.message).toMatch(
      /^starting the lab setup failed: exit code 1: mkdir: cannot create directory .*\/h4\/\.labfleet.: Not a directory\n/,
    );
    expect(readFileSync(join(home, "lab", "README"), "utf8")).toBe("the lab\n");
  });

  it("refuses a part with a NUL byte before anything is sent", async () => {
    const t = recorded(join(work, "h5"));
    const spec = specFor(folder);
    const err = await rejection(
      syncAndStartLab(t, { ...spec, lab: { ...spec.lab, setup: "echo a\0b" } }, "local", {
        ref: undefined,
        stopFirst: false,
        hostId: "student-01",
        runId: "run-1",
        files: {},
      }),
    );
    expect(err.message).toBe(
      "starting the lab setup failed: lab.setup holds a NUL byte, which a shell script cannot",
    );
    expect(t.sent).toEqual([]);
  });

  it("keeps a lab folder's own command where stdin travels inside the request (SSM)", async () => {
    const home = join(work, "h6");
    mkdirSync(home);
    const t = recorded(home);
    await start(t, folder, "ssm");
    expect(t.sent.map((s) => s.options.step)).toEqual(["sync lab source", "start lab setup"]);
    expect(readFileSync(join(home, "lab", "README"), "utf8")).toBe("the lab\n");
    expect(readFileSync(join(home, ".labfleet", "one", "setup.sh"), "utf8")).toBe(`${SETUP}\n`);
  });
});

describe("probeLab", () => {
  it("reads the records alone for a deploy's decision, with bash alone: the same records as the full probe", async () => {
    const home = join(work, "probe");
    mkdirSync(home);
    const t = recorded(home);
    await start(t, folder);
    const state = join(home, ".labfleet", "one");
    await waitFor("the setup to end", () => existsSync(join(state, "rc")) || undefined);
    appendFileSync(join(state, "status.jsonl"), '{"phase":"install","state":"done"}\n');
    appendFileSync(join(state, "log"), "installed\n");

    const full = await probeLab(t, "one");
    // (a run id as the probe reads it: letters, digits and _)
    expect(full).toMatchObject({ rc: 0, started: true, runId: "run1", logTail: ["installed"] });
    expect(full.statusLines).toEqual(['{"phase":"install","state":"done"}']);
    expect(full.rcAgeSeconds).toBeGreaterThanOrEqual(0);

    const records = await probeLab(t, "one", { recordsOnly: true });
    expect(records).toEqual({ ...full, rcAgeSeconds: undefined, statusLines: [], logTail: [] });
    // no stat, awk, tail or cut: nothing started on the host but bash
    expect(t.sent.at(-1)?.command).not.toMatch(/\b(stat|awk|tail|head|cut|cat)\b/);

    // The age comes from the time in the rc file; an rc without it (an older wrapper's) is aged by its mtime.
    writeFileSync(join(state, "rc"), `0\n${Math.floor(Date.now() / 1000) - 1000}\n`);
    expect((await probeLab(t, "one")).rcAgeSeconds).toBeGreaterThanOrEqual(1000);
    writeFileSync(join(state, "rc"), "0\n");
    const aged = (await probeLab(t, "one")).rcAgeSeconds;
    expect(aged).toBeGreaterThanOrEqual(0);
    expect(aged).toBeLessThan(60);
  });
});

describe("probeLab's bounds", () => {
  const L = PROBE_LIMITS;
  /** The lines of `bytes` as the probe keeps them: split at newlines, those longer than statusLineMax bytes left out. */
  const kept = (bytes: Buffer) =>
    bytes
      .toString("latin1")
      .split("\n")
      .filter((l) => l !== "" && l.length <= L.statusLineMax)
      .map((l) => Buffer.from(l, "latin1").toString("utf8"));
  const line = (phase: string, pad: number) =>
    `{"phase":"${phase}","state":"done","note":"${"é".repeat(pad)}"}`;

  it("keeps the status lines within the line bound, in bytes, from a small file and from the two ends of a large one", async () => {
    const home = join(work, "bounds");
    const state = join(home, ".labfleet", "one");
    mkdirSync(state, { recursive: true });
    const t = recorded(home);
    // Small: a line of exactly the bound in bytes, one a byte over it, one of 150 two-byte characters (300
    // bytes), one of 250 (500 bytes: over the bound in bytes, not in characters), and a last line with no newline.
    const exact = `{"p":"${"x".repeat(L.statusLineMax - 8)}"}`;
    expect(Buffer.byteLength(exact)).toBe(L.statusLineMax);
    const small = [line("a", 0), exact, `${exact} `, line("b", 150), line("c", 250), line("d", 1)].join("\n");
    writeFileSync(join(state, "status.jsonl"), small);
    const probe = await probeLab(t, "one");
    expect(probe.statusLines).toEqual([line("a", 0), exact, line("b", 150), line("d", 1)]);
    expect(probe.statusLines).toEqual(kept(Buffer.from(small)));
    // nothing but bash reads a status file within the bounds
    expect(t.sent.at(-1)?.command).not.toMatch(/\b(awk|cut|cat|head)\b/);

    // Large: the first statusHeadBytes and the last statusTailBytes bytes, lines cut at either edge included as cut.
    const big = Buffer.from(
      `${Array.from({ length: 400 }, (_, i) => line(`p${i}`, i % 11 === 0 ? 250 : i % 7 === 0 ? 150 : 3)).join("\n")}\n`,
    );
    expect(big.length).toBeGreaterThan(L.statusHeadBytes + L.statusTailBytes);
    writeFileSync(join(state, "status.jsonl"), big);
    const large = await probeLab(t, "one");
    expect(large.statusLines).toEqual([
      ...kept(big.subarray(0, L.statusHeadBytes)),
      ...kept(big.subarray(big.length - L.statusTailBytes)),
    ]);
    expect(large.statusLines[0]).toBe(line("p1", 3));
    expect(large.statusLines.at(-1)).toBe(line("p399", 150));
    expect(large.statusLines).not.toContain(line("p200", 3));

    // A file of exactly the two bounds is read whole: every one of its lines.
    const whole = Buffer.from(
      Array.from({ length: 100 }, (_, i) => `${String(i).padStart(3, "0")}${"y".repeat(96)}\n`).join(""),
    );
    expect(whole.length).toBe(L.statusHeadBytes + L.statusTailBytes);
    writeFileSync(join(state, "status.jsonl"), whole);
    expect((await probeLab(t, "one")).statusLines).toEqual(kept(whole));
    expect(kept(whole)).toHaveLength(100);
  });

  it("keeps the log's last lines, each cut to the line bound in bytes", async () => {
    const home = join(work, "bounds-log");
    const state = join(home, ".labfleet", "one");
    mkdirSync(state, { recursive: true });
    const t = recorded(home);
    const lines = Array.from({ length: 50 }, (_, i) => `step ${i} ${"ü".repeat(i * 5)}`);
    writeFileSync(join(state, "log"), `${lines.join("\n")}\n`);
    const probe = await probeLab(t, "one");
    const expected = lines
      .slice(-L.logTailLines)
      .map((l) => Buffer.from(l).subarray(0, L.logLineMax).toString("latin1"))
      .map((l) => Buffer.from(l, "latin1").toString("utf8"));
    expect(probe.logTail).toEqual(expected);
    // "step 30 " and 150 two-byte characters: cut to 300 bytes, 146 of them
    expect(probe.logTail[0]).toBe(`step 30 ${"ü".repeat(146)}`);
    expect(probe.logTail[1]).toBe(`step 31 ${"ü".repeat(146)}`);
    expect(probe.logTail).toHaveLength(L.logTailLines);
    expect(t.sent.at(-1)?.command).not.toMatch(/\b(awk|cut|cat)\b/);
  });
});

describe("readAccess", () => {
  it("reads a one-page access file in one command, and a longer one page after page, byte for byte", async () => {
    const home = join(work, "access");
    const state = join(home, ".labfleet", "one");
    mkdirSync(state, { recursive: true });
    const t = recorded(home);
    expect(await readAccess(t, "one")).toBeUndefined(); // none written
    expect(t.sent).toHaveLength(1);

    const small = JSON.stringify({ urls: { ui: "https://lab.example.test/" }, notes: "héllo" });
    writeFileSync(join(state, "access.json"), small);
    expect(await readAccess(t, "one")).toBe(small);
    expect(t.sent).toHaveLength(2);

    const long = JSON.stringify({ notes: "ü".repeat(15_000) }); // 30 KB: three pages of HOST_PAGE_BYTES
    writeFileSync(join(state, "access.json"), long);
    expect(await readAccess(t, "one")).toBe(long);
    expect(t.sent).toHaveLength(2 + Math.ceil(Buffer.byteLength(long) / HOST_PAGE_BYTES));
  });
});
