// Benchmark: a classroom claiming labs over HTTP. Starts `labfleet dev` (its own DynamoDB Local) as a process,
// brings up N labs (an instant lab on local sandbox hosts), opens the portal, then drives the real pages
// like students do: front page, workshop code, board, claim. First 200 students arriving evenly within
// 10 seconds, then (on a fresh set of labs) all 200 at once. Prints claims per second and claim-request
// latency (p50/p95/p99) and checks the invariants afterwards. `npm run bench:claims`; the last line is the
// summary of the 10-second arrival.
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startCli } from "../tests/harness/cli.ts";
import { waitFor } from "../tests/harness/runtime.ts";

const students = Number(process.env.BENCH_STUDENTS ?? 200);
// A workshop has at most 64 labs: the other students must get a clear "no lab free".
const labs = Number(process.env.BENCH_LABS ?? Math.min(64, students));
const lab = new URL("./lab", import.meta.url).pathname;

/** One student's browser: a cookie jar and the CSRF field of the last page. */
class Browser {
  private jar = new Map<string, string>();
  private csrf = "";
  constructor(private readonly base: string) {}

  async request(
    path: string,
    form?: Record<string, string>,
  ): Promise<{ status: number; body: string; location: string | null }> {
    const headers: Record<string, string> = { cookie: [...this.jar].map(([k, v]) => `${k}=${v}`).join("; ") };
    let body: string | undefined;
    if (form) {
      headers["content-type"] = "application/x-www-form-urlencoded";
      headers.origin = this.base;
      body = new URLSearchParams({ ...form, _csrf: this.csrf }).toString();
    }
    const res = await fetch(`${this.base}${path}`, {
      method: form ? "POST" : "GET",
      headers,
      body,
      redirect: "manual",
    });
    for (const c of res.headers.getSetCookie()) {
      const [pair = ""] = c.split(";");
      const i = pair.indexOf("=");
      const value = pair.slice(i + 1);
      if (/max-age=0/i.test(c) || value === "") this.jar.delete(pair.slice(0, i));
      else this.jar.set(pair.slice(0, i), value);
    }
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { status: res.status, body: text, location: res.headers.get("location") };
  }
}

interface Outcome {
  email: string;
  lab?: string;
  noLabFree?: boolean;
  error?: string;
  claimMs: number;
}

async function student(base: string, code: string, i: number, tag: string): Promise<Outcome> {
  const b = new Browser(base);
  const email = `student${i}.${tag}@example.test`;
  await b.request("/");
  const entered = await b.request("/code", { code });
  if (entered.status !== 303) return { email, error: `code: HTTP ${entered.status}`, claimMs: 0 };
  await b.request("/board");
  const t = performance.now();
  const claimed = await b.request("/claim", { name: `Student ${i}`, email, pin: "503917" });
  const claimMs = performance.now() - t;
  if (claimed.status === 303 && claimed.location?.startsWith("/l/")) {
    const page = await b.request(claimed.location);
    const lab = /student-\d+/.exec(page.body)?.[0];
    return { email, ...(lab ? { lab } : { error: "lab page without a lab" }), claimMs };
  }
  if (/No lab is free/.test(claimed.body)) return { email, noLabFree: true, claimMs };
  return { email, error: `claim: HTTP ${claimed.status}`, claimMs };
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? 0;
};

interface Api {
  url: string;
  token: string;
}

async function api<T>(rt: Api, method: string, path: string, body?: unknown): Promise<T> {
  const res = await fetch(`${rt.url}/api${path}`, {
    method,
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  if (!res.ok) throw new Error(`${method} ${path}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

async function round(rt: Api, workshop: string, spreadMs: number, tag: string) {
  const info = await api<{ code: string }>(rt, "POST", `/workshops/${workshop}/portal/open`);
  const t0 = performance.now();
  const outcomes = await Promise.all(
    Array.from({ length: students }, async (_, i) => {
      const delay = spreadMs ? (i * spreadMs) / students : 0;
      if (delay) await new Promise((r) => setTimeout(r, delay));
      return student(rt.url, info.code, i, tag);
    }),
  );
  const wallS = (performance.now() - t0) / 1000;
  const { claims } = await api<{ claims: { lab: string; email: string }[] }>(
    rt,
    "GET",
    `/workshops/${workshop}/portal/status`,
  );
  const got = outcomes.filter((o) => o.lab);
  const violations =
    claims.length -
    new Set(claims.map((c) => c.lab)).size +
    (claims.length - new Set(claims.map((c) => c.email)).size) +
    outcomes.filter((o) => !o.lab && !o.noLabFree).length +
    (got.length !== claims.length ? 1 : 0);
  const ms = outcomes.map((o) => o.claimMs).filter((x) => x > 0);
  return {
    wallS,
    got: got.length,
    perS: got.length / wallS,
    p50: pct(ms, 50),
    p95: pct(ms, 95),
    p99: pct(ms, 99),
    violations,
    errors: outcomes.filter((o) => o.error).slice(0, 3),
  };
}

// The runtime runs as its own process, as `labfleet dev` does: the students' browsers are not on the server.
const dataDir = mkdtempSync(join(tmpdir(), "labfleet-claims-"));
// LABFLEET_URL and LABFLEET_TOKEN aim it at a runtime already running (to profile that runtime, say).
const external = process.env.LABFLEET_URL && process.env.LABFLEET_TOKEN;
const runtime = external
  ? undefined
  : startCli(["dev", "--data-dir", join(dataDir, ".labfleet"), "--port", "0"], {
      cwd: dataDir,
      env: { LABFLEET_WAIT_MS: "200", LABFLEET_HOME: join(dataDir, "home") },
    });
try {
  const info = external
    ? { url: process.env.LABFLEET_URL as string, token: process.env.LABFLEET_TOKEN as string }
    : await waitFor(
        "the runtime",
        () => {
          const f = join(dataDir, ".labfleet", "runtime.json");
          return existsSync(f) ? (JSON.parse(readFileSync(f, "utf8")) as Api) : undefined;
        },
        60_000,
      );
  const results: Record<string, Awaited<ReturnType<typeof round>>> = {};
  for (const [name, spread] of [
    ["arrival-10s", 10_000],
    ["all-at-once", 0],
  ] as const) {
    await api(info, "POST", "/workshops", {
      yaml: `name: ${name}\nlab: { source: ${lab}, setup: bash setup.sh, health: test -f built, concurrency: 32 }\nprovider: { type: local, count: ${labs} }\n`,
    });
    const { run } = await api<{ run: { id: string } }>(info, "POST", `/workshops/${name}/up`, {});
    await waitFor(
      `${name} to be ready`,
      async () => {
        const s = await api<{ runs: { id: string; state: string }[] }>(info, "GET", `/workshops/${name}`);
        const r = s.runs.find((x) => x.id === run.id);
        if (r && r.state !== "running" && r.state !== "succeeded") throw new Error(`up ${r.state}`);
        return r?.state === "succeeded" ? true : undefined;
      },
      120_000,
    );
    const r = await round(info, name, spread, name);
    results[name] = r;
    console.log(
      `${name.padEnd(12)} students=${students} labs=${labs} claimed=${r.got} in ${r.wallS.toFixed(1)} s  per_s=${r.perS.toFixed(1)}  claim p50=${r.p50.toFixed(0)} ms p95=${r.p95.toFixed(0)} ms p99=${r.p99.toFixed(0)} ms  violations=${r.violations}`,
    );
    if (r.errors.length) console.log("  errors:", JSON.stringify(r.errors));
  }
  const a = results["arrival-10s"];
  if (a) {
    console.log(
      `\nclaims students=${students} labs=${labs} per_s=${a.perS.toFixed(1)} p50_ms=${a.p50.toFixed(0)} p95_ms=${a.p95.toFixed(0)} p99_ms=${a.p99.toFixed(0)} violations=${a.violations}`,
    );
  }
} finally {
  if (runtime) {
    runtime.child.kill("SIGINT");
    await runtime.exited;
  }
  rmSync(dataDir, { recursive: true, force: true });
}
