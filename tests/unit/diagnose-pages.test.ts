import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AGENT_STDOUT_MAX } from "../../shared/agent/commands.ts";
import { HOST_PAGE_MAX_BYTES, pageBytesFor, WRAPPER } from "../../shared/fleet/lab.ts";
import {
  DIAGNOSE_LOG_CAP_BYTES,
  DIAGNOSE_PAGE_BYTES,
  type DiagnoseFile,
  diagnoseHost,
} from "../../shared/fleet/ops.ts";
import { redactor } from "../../shared/fleet/secrets.ts";
import type { HostItem } from "../../shared/store/entities.ts";
import { LocalTransport } from "../../shared/transports/local.ts";
import { SSM_STDOUT_TAIL } from "../../shared/transports/ssm.ts";
import {
  type ExecOptions,
  type ExecResult,
  OUTPUT_CAP_BYTES,
  type Transport,
} from "../../shared/transports/types.ts";

const SSM_STDOUT_CHARS = 24_000;
const SECRET = "tok-5b1e0c9a77d2";
const SETUP = `set -e\necho "building"\n${"# a long setup line\n".repeat(50)}exit 3\n`;

/** Runs commands in a real folder like the local transport, returning stdout the way SSM does: its last 24,000 characters. */
class SsmLikeTransport implements Transport {
  execs = 0;
  private readonly local: LocalTransport;
  constructor(
    home: string,
    private readonly maxChars = SSM_STDOUT_CHARS,
  ) {
    this.local = new LocalTransport(home);
  }
  async exec(command: string, options?: ExecOptions): Promise<ExecResult> {
    this.execs++;
    const r = await this.local.exec(command, options);
    if (r.stdout.length <= this.maxChars) return r;
    return { ...r, stdout: r.stdout.slice(-this.maxChars), truncated: true };
  }
}

function host(hostId: string): HostItem {
  return {
    workshop: "w",
    hostId,
    provider: "aws",
    state: "failed",
    attempt: 1,
    error: "setup exited with code 3",
    createdAt: "2026-01-01T00:00:00.000Z",
    updatedAt: "2026-01-01T00:00:00.000Z",
  } as HostItem;
}

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "labfleet-diag-pages-"));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

/** A host folder with the lab's state dir as the wrapper leaves it after a failed setup. */
function hostFolder(name: string, log: Buffer, status: string): string {
  const home = join(root, name);
  const d = join(home, ".labfleet", "w");
  mkdirSync(d, { recursive: true });
  writeFileSync(join(d, "log"), log);
  writeFileSync(join(d, "status.jsonl"), status);
  writeFileSync(join(d, "wrapper.sh"), WRAPPER);
  writeFileSync(join(d, "setup.sh"), SETUP);
  writeFileSync(join(d, "rc"), "3\n");
  writeFileSync(join(d, "started"), "1700000000\n");
  writeFileSync(join(d, "pid"), "999999\n");
  return home;
}

/** ~`bytes` of log lines with multibyte characters, then the secret across the last page boundary. */
function bigLog(bytes: number): Buffer {
  const lines: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const line = `${String(i).padStart(6, "0")} étape ✓ compiling module ${i % 97} 🚀 ${"é".repeat(i % 50)}\n`;
    lines.push(line);
    size += Buffer.byteLength(line);
  }
  // The last page starts DIAGNOSE_PAGE_BYTES before the end: 5 bytes before the secret ends.
  const tail = `${"y".repeat(DIAGNOSE_PAGE_BYTES - 6)}\nEND\n`.slice(-(DIAGNOSE_PAGE_BYTES - 5));
  return Buffer.from(`${lines.join("")}registry refused token ${SECRET}${tail}`);
}

function statusLines(n: number): string {
  let out = "";
  for (let i = 0; i < n; i++) out += `${JSON.stringify({ phase: `phase-${i % 40}`, state: "done", i })}\n`;
  return `${out}{"phase":"configure","state":"failed"}\n`;
}

const byName = (files: DiagnoseFile[], hostId: string) =>
  Object.fromEntries(files.map((f) => [f.path.slice(hostId.length + 1), f.content]));

async function collect(
  hostId: string,
  t: Transport,
  extra: { budgetMs?: number; clock?: () => number } = {},
) {
  const out = await diagnoseHost(host(hostId), (fn) => fn(t), {
    workshop: "w",
    redact: redactor([SECRET]),
    now: new Date("2026-01-01T01:00:00.000Z"),
    ...extra,
  });
  const files = byName(out.files, hostId);
  return { ...out, files, summary: JSON.parse(files["summary.json"] ?? "{}") };
}

describe("diagnose reads host files in pages", () => {
  it("a page, as base64, fits what SSM returns whole", () => {
    const encoded = Buffer.alloc(DIAGNOSE_PAGE_BYTES, 0xff).toString("base64");
    // base64 wraps lines at 76 characters
    expect(encoded.length + Math.ceil(encoded.length / 76)).toBeLessThan(SSM_STDOUT_TAIL);
  });

  it("collects a 300 KB log whole through a transport that returns 24,000 characters", async () => {
    const log = bigLog(300 * 1024);
    const status = statusLines(2000);
    expect(status.length).toBeGreaterThan(SSM_STDOUT_CHARS);
    const t = new SsmLikeTransport(hostFolder("h300", log, status));
    // The fake does what SSM does to one large output.
    const whole = await t.exec('cat "$HOME/.labfleet/w/log"');
    expect(whole).toMatchObject({ truncated: true });
    expect(whole.stdout.length).toBe(SSM_STDOUT_CHARS);
    // Page boundaries (counted from the end) do fall inside multibyte characters.
    const boundaries = Array.from({ length: 20 }, (_, k) => log.length - (k + 1) * DIAGNOSE_PAGE_BYTES);
    expect(boundaries.some((b) => ((log[b] ?? 0) & 0xc0) === 0x80)).toBe(true);
    t.execs = 0;

    const { files, summary, error } = await collect("h300", t);
    expect(error).toBeUndefined();
    const hostLog = log.toString("utf8");
    expect(files["lab.log.tail"]).toBe(hostLog.split(SECRET).join("[redacted]"));
    expect(files["lab.log.tail"]).not.toContain("\ufffd");
    expect(files["lab.log.tail"]).toContain("registry refused token [redacted]");
    expect(files["status.jsonl"]).toBe(status);
    expect(files["setup.sh"]).toBe(SETUP);
    expect(files["wrapper.txt"]).toBe(
      `pid=999999\nalive=0\nrc=3\nrc_age=\nstarted=1\nheartbeat=\nnow=${files["wrapper.txt"]?.match(/now=(\d+)/)?.[1]}\n\n# wrapper.sh\n${WRAPPER}`,
    );
    expect(JSON.stringify(files)).not.toContain(SECRET);

    const pages = Math.ceil(log.length / DIAGNOSE_PAGE_BYTES);
    expect(summary).toMatchObject({
      host: "h300",
      verdict: "failed",
      exitCode: 3,
      wrapperAlive: false,
      lastLogLines: hostLog.split(SECRET).join("[redacted]").trimEnd().split("\n").slice(-10),
    });
    expect(summary.phases).toHaveLength(41);
    expect(summary.phases.at(-1)).toEqual({ name: "configure", state: "failed" });
    expect(summary.collected["lab.log.tail"]).toEqual({
      file: "log",
      hostBytes: log.length,
      fromByte: 0,
      bytesRead: log.length,
      capBytes: DIAGNOSE_LOG_CAP_BYTES,
      cutByCap: false,
      complete: true,
      pages,
    });
    for (const f of ["status.jsonl", "wrapper.txt", "setup.sh"]) {
      expect(summary.collected[f]).toMatchObject({ complete: true, cutByCap: false, fromByte: 0 });
      expect(summary.collected[f].bytesRead).toBe(summary.collected[f].hostBytes);
    }
    // one probe, then wrapper, setup and status (one page each but status), then the log's pages
    const statusPages = Math.ceil(Buffer.byteLength(status) / DIAGNOSE_PAGE_BYTES);
    expect(t.execs).toBe(1 + 2 + statusPages + pages);
  });

  it("reads a small host in five commands", async () => {
    const t = new SsmLikeTransport(hostFolder("small", Buffer.from("one\ntwo\n"), statusLines(3)));
    const { files, summary } = await collect("small", t);
    expect(files["lab.log.tail"]).toBe("one\ntwo\n");
    expect(summary.collected["lab.log.tail"]).toMatchObject({ pages: 1, complete: true });
    expect(t.execs).toBe(5);
  });

  it("cuts a 5 MB log to the last 2 MiB and says so", async () => {
    const line = "0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ build output\n";
    const log = Buffer.from(line.repeat(Math.ceil((5 * 1024 * 1024) / line.length)));
    const t = new SsmLikeTransport(hostFolder("h5m", log, statusLines(3)));
    const { files, summary } = await collect("h5m", t);
    expect(files["lab.log.tail"]).toBe(log.subarray(log.length - DIAGNOSE_LOG_CAP_BYTES).toString("utf8"));
    expect(summary.collected["lab.log.tail"]).toEqual({
      file: "log",
      hostBytes: log.length,
      fromByte: log.length - DIAGNOSE_LOG_CAP_BYTES,
      bytesRead: DIAGNOSE_LOG_CAP_BYTES,
      capBytes: DIAGNOSE_LOG_CAP_BYTES,
      cutByCap: true,
      complete: true,
      pages: Math.ceil(DIAGNOSE_LOG_CAP_BYTES / DIAGNOSE_PAGE_BYTES),
    });
  });

  it("reports a page that comes back cut, keeping what was read before", async () => {
    const log = bigLog(100 * 1024);
    // 10,000 characters: wrapper, setup and a small status fit, a log page does not
    const t = new SsmLikeTransport(hostFolder("cut", log, statusLines(3)), 10_000);
    const { files, summary, error } = await collect("cut", t);
    expect(error).toBeUndefined();
    expect(files["lab.log.tail"]).toBe("");
    expect(summary.collected["lab.log.tail"]).toMatchObject({
      hostBytes: log.length,
      bytesRead: 0,
      complete: false,
      pages: 0,
    });
    expect(summary.collected["lab.log.tail"].error).toContain("truncated");
    expect(summary.collected["lab.log.tail"].error).toContain(
      `bytes ${log.length - DIAGNOSE_PAGE_BYTES} to ${log.length}`,
    );
    expect(summary.collected["wrapper.txt"]).toMatchObject({ complete: true });
    expect(files["wrapper.txt"]).toContain(WRAPPER);
  });

  it("stops when the host's time runs out, keeping the end of the log", async () => {
    const log = bigLog(200 * 1024);
    const t = new SsmLikeTransport(hostFolder("slow", log, statusLines(3)));
    let ms = 0;
    const { files, summary } = await collect("slow", t, { budgetMs: 10_000, clock: () => (ms += 1000) });
    const read = summary.collected["lab.log.tail"];
    expect(read.complete).toBe(false);
    expect(read.error).toMatch(/at most 10 s on a host/);
    expect(read.pages).toBeGreaterThan(0);
    expect(read.fromByte + read.bytesRead).toBe(log.length);
    expect(files["lab.log.tail"]).toBe(
      log.subarray(read.fromByte).toString("utf8").split(SECRET).join("[redacted]"),
    );
    expect(summary.collected["wrapper.txt"]).toMatchObject({ complete: true });
  });

  it("sizes pages to each transport's output bound: 12 KiB over SSM, far larger where more comes back whole", () => {
    const bounds = [
      { name: "ssm", bytes: SSM_STDOUT_TAIL },
      { name: "agent", bytes: AGENT_STDOUT_MAX },
      { name: "local and ssh", bytes: OUTPUT_CAP_BYTES },
    ];
    const sizes = bounds.map(({ name, bytes }) => {
      const page = pageBytesFor({
        exec: async () => ({ exitCode: 0, stdout: "", stderr: "" }),
        outputBytes: bytes,
      });
      // What `base64` prints for a page: 4 characters per 3 bytes, a newline every 76.
      const encoded = Buffer.alloc(page, 0xff).toString("base64");
      expect(encoded.length + Math.ceil(encoded.length / 76), name).toBeLessThanOrEqual(bytes);
      return page;
    });
    expect(sizes[0]).toBe(DIAGNOSE_PAGE_BYTES);
    expect(sizes[1]).toBeGreaterThan(4 * DIAGNOSE_PAGE_BYTES);
    expect(sizes[2]).toBe(HOST_PAGE_MAX_BYTES);
    expect(pageBytesFor(new SsmLikeTransport(root))).toBe(DIAGNOSE_PAGE_BYTES);
  });

  it("reads the last 2 MiB of a local host's log whole, in four pages", async () => {
    const log = bigLog(3 * 1024 * 1024);
    const home = hostFolder("local3m", log, statusLines(3));
    let execs = 0;
    const local = new LocalTransport(home);
    const t: Transport = {
      outputBytes: local.outputBytes,
      exec: (command, options) => {
        execs++;
        return local.exec(command, options);
      },
    };
    const { files, summary } = await collect("local3m", t);
    expect(files["lab.log.tail"]).toBe(
      log
        .subarray(log.length - DIAGNOSE_LOG_CAP_BYTES)
        .toString("utf8")
        .split(SECRET)
        .join("[redacted]"),
    );
    expect(summary.collected["lab.log.tail"]).toMatchObject({
      complete: true,
      cutByCap: true,
      pages: DIAGNOSE_LOG_CAP_BYTES / HOST_PAGE_MAX_BYTES,
    });
    // one probe, wrapper, setup and status, then the log's pages
    expect(execs).toBe(1 + 3 + DIAGNOSE_LOG_CAP_BYTES / HOST_PAGE_MAX_BYTES);
  });

  it("collects empty and missing files without a command", async () => {
    const home = hostFolder("empty", Buffer.alloc(0), "");
    rmSync(join(home, ".labfleet", "w", "status.jsonl"));
    const t = new SsmLikeTransport(home);
    const { files, summary } = await collect("empty", t);
    expect(files["lab.log.tail"]).toBe("");
    expect(files["status.jsonl"]).toBe("");
    expect(summary.collected["status.jsonl"]).toMatchObject({
      hostBytes: null,
      bytesRead: 0,
      complete: true,
    });
    expect(summary.collected["lab.log.tail"]).toMatchObject({ hostBytes: 0, pages: 0, complete: true });
    expect(t.execs).toBe(3);
    expect(readFileSync(join(home, ".labfleet", "w", "log")).length).toBe(0);
  });

  it("a host that cannot be reached gets a summary that says so", async () => {
    const out = await diagnoseHost(
      host("gone"),
      async () => {
        throw new Error(`gone: unreachable (${SECRET})`);
      },
      { workshop: "w", redact: redactor([SECRET]), now: new Date() },
    );
    expect(out.error).toBe("gone: unreachable ([redacted])");
    expect(out.files.map((f) => f.path)).toEqual(["gone/status.json", "gone/summary.json"]);
    expect(JSON.parse(out.files[1]?.content ?? "{}").unreachable).toBe("gone: unreachable ([redacted])");
  });
});
