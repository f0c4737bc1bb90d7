import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DIAGNOSE_ARCHIVE_MAX_BYTES } from "../../web/api/archive.ts";
import { runCli } from "../harness/cli.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * A diagnose of many failed hosts with long logs: each host's log is kept to its last 2 MiB, and the archive
 * comes in parts of at most 4 MB of files, so no answer comes near the 6 MB a Lambda Function URL returns. The
 * CLI asks for every part and writes one folder with one index.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const W = "biglogs";
/** What a Lambda Function URL returns at most (a buffered response). */
const FUNCTION_URL_LIMIT = 6 * 1024 * 1024;

beforeAll(async () => {
  work = tempDir("labfleet-diagparts-");
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  writeFileSync(join(work, "w.yaml"), workshopYaml({ name: W, lab: "biglog", count: 5 }));
  const up = await runCli(["up", "-f", join(work, "w.yaml")], { env });
  expect(up.code).toBe(1); // every host fails by design
}, 120_000);

afterAll(async () => {
  await runCli(["down", W, "--yes"], { env });
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("diagnose in parts", { timeout: 180_000 }, () => {
  it("answers in parts that each stay well under 6 MB, and every host's log is collected whole", async () => {
    const auth = { authorization: `Bearer ${rt.token}`, "content-type": "application/json" };
    const out = tempDir("labfleet-diagparts-api-");
    const sizes: number[] = [];
    let from: string | undefined;
    let name: string | undefined;
    const indexed: string[] = [];
    do {
      const res = await fetch(`${rt.url}/api/workshops/${W}/diagnose`, {
        method: "POST",
        headers: auth,
        body: JSON.stringify(from ? { from, name } : {}),
      });
      expect(res.status).toBe(200);
      const body = Buffer.from(await res.arrayBuffer());
      sizes.push(body.length);
      name ??= res.headers.get("x-labfleet-diagnose-name") ?? undefined;
      from = res.headers.get("x-labfleet-diagnose-next") ?? undefined;
      writeFileSync(join(out, "part.tar"), gunzipSync(body));
      execFileSync("tar", ["-xf", join(out, "part.tar"), "-C", out]);
      indexed.push(
        ...JSON.parse(readFileSync(join(out, name as string, "index.json"), "utf8")).hosts.map(
          (h: { id: string }) => h.id,
        ),
      );
    } while (from && sizes.length < 10);
    expect(from).toBeUndefined();
    // More than one part: the whole would be past what a Function URL returns.
    expect(sizes.length).toBeGreaterThan(1);
    expect(sizes.reduce((a, b) => a + b, 0)).toBeGreaterThan(FUNCTION_URL_LIMIT);
    for (const size of sizes) {
      expect(size).toBeLessThanOrEqual(DIAGNOSE_ARCHIVE_MAX_BYTES);
      expect(size).toBeLessThan(FUNCTION_URL_LIMIT);
    }
    expect(indexed.sort()).toEqual(["student-01", "student-02", "student-03", "student-04", "student-05"]);
    for (const h of indexed) {
      const summary = JSON.parse(readFileSync(join(out, name as string, h, "summary.json"), "utf8"));
      expect(summary.collected["lab.log.tail"]).toMatchObject({ complete: true, cutByCap: true });
      expect(statSync(join(out, name as string, h, "lab.log.tail")).size).toBe(2 * 1024 * 1024);
    }
    removeDir(out);
  });

  it("labfleet diagnose asks for every part and writes one folder with one index", async () => {
    const r = await runCli(["diagnose", W], { env, cwd: work });
    expect(r.code, r.stderr).toBe(0);
    const folder = readdirSync(work).find((f) => f.startsWith(`${W}.diagnose-`)) as string;
    expect(r.stdout).toContain(`wrote ${folder}/ (5 hosts)`);
    const index = JSON.parse(readFileSync(join(work, folder, "index.json"), "utf8"));
    expect(index.hosts.map((h: { id: string }) => h.id)).toEqual([
      "student-01",
      "student-02",
      "student-03",
      "student-04",
      "student-05",
    ]);
    expect(index.next).toBeUndefined();
    for (const h of index.hosts) {
      expect(statSync(join(work, folder, h.id, "lab.log.tail")).size).toBe(2 * 1024 * 1024);
    }
  });
});
