import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { build } from "esbuild";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkRef, findGit, listRemoteRefs } from "../../shared/fleet/git.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { parseWorkshopYaml } from "../../shared/workshop/load.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import {
  type FixtureRepo,
  type GitHttpServer,
  git,
  gitAsync,
  makeFixtureRepo,
  startGitHttp,
} from "../harness/git-http.ts";
import { processesUnder, testRuntime } from "../harness/runtime.ts";

const root = new URL("../../", import.meta.url).pathname;
const TOKEN = "s3cr3t-t0ken-value";
const creds = { username: "bot", password: TOKEN };

function spec(source: string) {
  return parseWorkshopYaml(
    `name: t\nlab:\n  source: ${JSON.stringify(source)}\n  setup: "true"\nprovider:\n  type: local\n  count: 1\n`,
  );
}

async function rejection(p: Promise<unknown>): Promise<VisibleError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(VisibleError);
  return err as VisibleError;
}

let repo: FixtureRepo;
let bare: FixtureRepo;
let smart: GitHttpServer;
let authed: GitHttpServer;
let dumb: GitHttpServer;
let missing: GitHttpServer;
let v2: GitHttpServer;
let work: string;

beforeAll(async () => {
  repo = makeFixtureRepo({ files: { "README.md": "fixture lab\n", "setup.sh": "touch built\n" } });
  bare = makeFixtureRepo({ bare: true });
  const repos = { "lab.git": repo.dir, "bare.git": bare.dir };
  smart = await startGitHttp({ repos });
  authed = await startGitHttp({ repos, auth: creds });
  dumb = await startGitHttp({ repos, mode: "dumb" });
  missing = await startGitHttp({ repos, status: 404 });
  v2 = await startGitHttp({ repos, protocol: "v2" });
  work = mkdtempSync(join(tmpdir(), "labfleet-git-refs-"));
});

afterAll(async () => {
  for (const s of [smart, authed, dumb, missing, v2]) await s?.close();
  // Closing a server ends the upload-pack processes it started.
  if (repo) expect(processesUnder(repo.dir)).toEqual([]);
  repo?.remove();
  bare?.remove();
  if (work) rmSync(work, { recursive: true, force: true });
});

describe("checkRef over smart HTTP", () => {
  it("accepts a branch of a repository with a work tree and of a bare one", async () => {
    for (const name of ["lab.git", "bare.git"]) {
      await checkRef(spec(`git:${smart.url(name)}`), "main", { git: null });
      await checkRef(spec(`git:${smart.url(name)}`), "feature", { git: null });
    }
    const gets = smart.requests.filter((r) => r.path.endsWith("/info/refs"));
    expect(gets.length).toBe(4);
    for (const r of gets) {
      expect(r.query).toBe("service=git-upload-pack");
      // No Git-Protocol header: the server answers v0 with its refs.
      expect(r.headers["git-protocol"]).toBeUndefined();
      expect(r.status).toBe(200);
    }
  });

  it("accepts a lightweight and an annotated tag, and reads the annotated tag's peeled commit", async () => {
    await checkRef(spec(`git:${smart.url("lab.git")}`), "v1", { git: null });
    await checkRef(spec(`git:${smart.url("lab.git")}`), "v1.0", { git: null });
    const refs = await listRemoteRefs(smart.url("lab.git"));
    expect(refs.find((r) => r.name === "refs/tags/v1")).toEqual({
      name: "refs/tags/v1",
      oid: repo.commits.main,
    });
    expect(refs.find((r) => r.name === "refs/tags/v1.0")).toEqual({
      name: "refs/tags/v1.0",
      oid: repo.annotatedTagObject,
      peeled: repo.commits.main,
    });
    expect(refs.find((r) => r.name === "refs/heads/feature")?.oid).toBe(repo.commits.feature);
    expect(refs.find((r) => r.name === "HEAD")?.oid).toBe(repo.commits.main);
  });

  it("refuses a ref that is neither a branch nor a tag, on the path ref", async () => {
    const err = await rejection(
      checkRef(spec(`git:${smart.url("lab.git")}`), "no-such-branch", { git: null }),
    );
    expect(err.code).toBe("deploy.unknown_ref");
    expect(err.kind).toBe("input");
    expect(err.message).toBe("ref no-such-branch is neither a branch nor a tag of the lab source");
    expect(err.details).toEqual([
      { path: "ref", message: `expected a branch, tag or commit of ${smart.url("lab.git")}` },
    ]);
  });

  it("takes a commit id without asking the server", async () => {
    const before = missing.requests.length;
    await checkRef(spec(`git:${missing.url("lab.git")}`), repo.commits.feature, { git: null });
    await checkRef(spec(`git:${missing.url("lab.git")}`), repo.commits.feature.slice(0, 7), { git: null });
    expect(missing.requests.length).toBe(before);
  });

  it("answers 404 as a repository that does not exist or is private", async () => {
    const err = await rejection(checkRef(spec(`git:${missing.url("lab.git")}`), "main", { git: null }));
    expect(err.code).toBe("deploy.source_unreachable");
    expect(err.message).toBe(
      `cannot read the lab's git source to check ref main: ${missing.url("lab.git")} answered HTTP 404: ` +
        "the repository does not exist, or it is private and the URL has no credentials (give them as USER:TOKEN@HOST in the URL)",
    );
    // An unknown path on a working server is 404 too.
    const other = await rejection(checkRef(spec(`git:${smart.url("nope.git")}`), "main", { git: null }));
    expect(other.message).toContain("answered HTTP 404");
  });

  it("asks a server that answers protocol v2 unasked with ls-refs", async () => {
    await checkRef(spec(`git:${v2.url("lab.git")}`), "feature", { git: null });
    await checkRef(spec(`git:${v2.url("lab.git")}`), "v1.0", { git: null });
    const err = await rejection(checkRef(spec(`git:${v2.url("lab.git")}`), "gone", { git: null }));
    expect(err.code).toBe("deploy.unknown_ref");
    const posts = v2.requests.filter((r) => r.method === "POST");
    expect(
      posts.map((r) => [r.path, r.headers["git-protocol"], r.headers["content-type"], r.status]),
    ).toEqual(
      Array(3).fill(["/lab.git/git-upload-pack", "version=2", "application/x-git-upload-pack-request", 200]),
    );
    const peeled = await listRemoteRefs(v2.url("lab.git"), { ref: "v1.0" });
    expect(peeled).toEqual([
      { name: "refs/tags/v1.0", oid: repo.annotatedTagObject, peeled: repo.commits.main },
    ]);
  });
});

describe("credentials", () => {
  it("is refused with 401 without credentials and passes with them in the URL", async () => {
    const err = await rejection(checkRef(spec(`git:${authed.url("lab.git")}`), "main", { git: null }));
    expect(err.code).toBe("deploy.source_unreachable");
    expect(err.message).toContain(`${authed.url("lab.git")} answered HTTP 401`);
    expect(err.message).toContain("the URL has no credentials");

    await checkRef(spec(`git:${authed.url("lab.git", creds)}`), "feature", { git: null });
    const last = authed.requests.at(-1);
    expect(last?.status).toBe(200);
    expect(last?.headers.authorization).toBe(`Basic ${Buffer.from(`bot:${TOKEN}`).toString("base64")}`);
  });

  it("never shows the token, neither when it is refused nor when the ref is missing", async () => {
    const wrong = await rejection(
      checkRef(spec(`git:${authed.url("lab.git", { username: "bot", password: `${TOKEN}-old` })}`), "main", {
        git: null,
      }),
    );
    expect(wrong.code).toBe("deploy.source_unreachable");
    expect(wrong.message).toBe(
      `cannot read the lab's git source to check ref main: ${authed.url("lab.git")} answered HTTP 401: ` +
        "the repository does not exist, or the credentials in the URL were refused",
    );
    const unknown = await rejection(
      checkRef(spec(`git:${authed.url("lab.git", creds)}`), "nope", { git: null }),
    );
    expect(unknown.code).toBe("deploy.unknown_ref");
    for (const e of [wrong, unknown]) {
      expect(JSON.stringify({ message: e.message, details: e.details, stack: e.stack })).not.toContain(TOKEN);
    }
  });
});

describe("credentials from git's credential helper", () => {
  it("retries a refused http source with git ls-remote where git is installed", async () => {
    const hostGit = findGit() as string;
    const helper = {
      GIT_CONFIG_COUNT: "1",
      GIT_CONFIG_KEY_0: "credential.helper",
      GIT_CONFIG_VALUE_0: `!f() { echo username=bot; echo password=${TOKEN}; }; f`,
    };
    const saved = Object.fromEntries(Object.keys(helper).map((k) => [k, process.env[k]]));
    Object.assign(process.env, helper);
    try {
      const before = authed.requests.length;
      await checkRef(spec(`git:${authed.url("lab.git")}`), "feature", { git: hostGit });
      const byGit = authed.requests.slice(before).filter((r) => r.headers["user-agent"]?.startsWith("git/2"));
      expect(byGit.some((r) => r.status === 200 && r.headers.authorization !== undefined)).toBe(true);
      const err = await rejection(checkRef(spec(`git:${authed.url("lab.git")}`), "nope", { git: hostGit }));
      expect(err.code).toBe("deploy.unknown_ref");
    } finally {
      for (const [k, v] of Object.entries(saved)) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    }
    // Without a helper git is refused too, and the HTTP answer is the reason given.
    const err = await rejection(checkRef(spec(`git:${authed.url("lab.git")}`), "main", { git: hostGit }));
    expect(err.code).toBe("deploy.source_unreachable");
    expect(err.message).toContain(`${authed.url("lab.git")} answered HTTP 401`);
  });
});

describe("redirects", () => {
  it("follows them, sends ls-refs where info/refs went, and keeps credentials to the first origin", async () => {
    const toSmart = await startGitHttp({ repos: {}, redirectTo: `http://127.0.0.1:${smart.port}` });
    const toV2 = await startGitHttp({ repos: {}, redirectTo: `http://127.0.0.1:${v2.port}` });
    const toAuthed = await startGitHttp({ repos: {}, redirectTo: `http://127.0.0.1:${authed.port}` });
    try {
      await checkRef(spec(`git:${toSmart.url("lab.git")}`), "feature", { git: null });
      expect(toSmart.requests.map((r) => r.status)).toEqual([301]);

      const postsBefore = v2.requests.filter((r) => r.method === "POST").length;
      await checkRef(spec(`git:${toV2.url("lab.git")}`), "v1", { git: null });
      expect(toV2.requests.map((r) => [r.method, r.status])).toEqual([["GET", 301]]);
      expect(v2.requests.filter((r) => r.method === "POST").length).toBe(postsBefore + 1);

      // fetch drops Authorization on a redirect to another origin: the credentials never leave the first one.
      const err = await rejection(
        checkRef(spec(`git:${toAuthed.url("lab.git", creds)}`), "main", { git: null }),
      );
      expect(err.code).toBe("deploy.source_unreachable");
      expect(err.message).toContain(`${authed.url("lab.git")} answered HTTP 401`);
      expect(err.message).not.toContain(TOKEN);
      expect(toAuthed.requests[0]?.headers.authorization).toBeDefined();
      expect(authed.requests.at(-1)?.headers.authorization).toBeUndefined();
    } finally {
      for (const s of [toSmart, toV2, toAuthed]) await s.close();
    }
  });
});

describe("dumb HTTP", () => {
  it("reads the plain info/refs of a server without the smart protocol", async () => {
    await checkRef(spec(`git:${dumb.url("lab.git")}`), "feature", { git: null });
    await checkRef(spec(`git:${dumb.url("lab.git")}`), "v1", { git: null });
    await checkRef(spec(`git:${dumb.url("lab.git")}`), "v1.0", { git: null });
    const err = await rejection(checkRef(spec(`git:${dumb.url("lab.git")}`), "nope", { git: null }));
    expect(err.code).toBe("deploy.unknown_ref");
    const refs = await listRemoteRefs(dumb.url("lab.git"));
    expect(refs.find((r) => r.name === "refs/tags/v1.0")?.peeled).toBe(repo.commits.main);
    expect(refs.some((r) => r.name === "HEAD")).toBe(false);
    // One request each: the answer in hand is used, not a second GET without the query.
    expect(dumb.requests.every((r) => r.query === "service=git-upload-pack")).toBe(true);
  });
});

describe("a server that does not answer", () => {
  for (const hang of ["headers", "body"] as const) {
    it(`fails within the deadline when it stalls before the ${hang}`, async () => {
      const server = await startGitHttp({ repos: { "lab.git": repo.dir }, hang });
      try {
        const started = Date.now();
        const err = await rejection(
          checkRef(spec(`git:${server.url("lab.git")}`), "main", { git: null, timeoutMs: 300 }),
        );
        expect(Date.now() - started).toBeLessThan(5_000);
        expect(err.code).toBe("deploy.source_unreachable");
        expect(err.message).toBe(
          `cannot read the lab's git source to check ref main: ${server.url("lab.git")} did not answer within 0.3 s`,
        );
        expect(server.requests.length).toBe(1);
      } finally {
        await server.close();
      }
    });
  }

  it("reports a refused connection", async () => {
    const server = await startGitHttp({ repos: {} });
    const url = server.url("lab.git");
    await server.close();
    const err = await rejection(checkRef(spec(`git:${url}`), "main", { git: null }));
    expect(err.code).toBe("deploy.source_unreachable");
    expect(err.message).toBe(
      `cannot read the lab's git source to check ref main: cannot reach ${url}: ECONNREFUSED`,
    );
  });
});

describe("sources that are not http(s)", () => {
  it("uses git ls-remote when git is on PATH", async () => {
    expect(findGit()).not.toBeNull();
    await checkRef(spec(`git:file://${repo.dir}`), "feature");
    await checkRef(spec(`git:${repo.dir}`), "v1.0");
    const err = await rejection(checkRef(spec(`git:file://${repo.dir}`), "nope"));
    expect(err.code).toBe("deploy.unknown_ref");
    const gone = await rejection(checkRef(spec(`git:file://${join(work, "absent")}`), "main"));
    expect(gone.code).toBe("deploy.source_unreachable");
    expect(gone.message).toMatch(/^cannot read the lab's git source to check ref main: .+/);
  });
});

describe("without a git binary", () => {
  it("checks http sources and skips the others in a process whose PATH holds only node", async () => {
    const bin = join(work, "bin");
    mkdirSync(bin);
    symlinkSync(process.execPath, join(bin, "node"));
    const driver = join(work, "driver.mjs");
    // The module bundled as a Lambda bundle is; every child_process call it makes is counted.
    await build({
      stdin: {
        resolveDir: root,
        loader: "js",
        contents: `
import cp from "node:child_process";
import { syncBuiltinESMExports } from "node:module";
import { checkRef, findGit } from "./shared/fleet/git.ts";
import { setLogSink } from "./shared/runtime/logger.ts";
const spawned = [];
for (const k of ["spawn", "spawnSync", "exec", "execSync", "execFile", "execFileSync", "fork"]) {
  const original = cp[k];
  cp[k] = (...args) => { spawned.push(String(args[0])); return original(...args); };
}
syncBuiltinESMExports();
const logs = [];
setLogSink((line) => logs.push(JSON.parse(line)), "debug");
const cases = JSON.parse(process.env.CASES);
const results = [];
for (const c of cases) {
  const before = spawned.length;
  try {
    await checkRef({ lab: { source: c.source } }, c.ref, c.git === undefined ? {} : { git: c.git });
    results.push({ ok: true, spawned: spawned.length - before });
  } catch (e) {
    results.push({ ok: false, code: e.code, message: e.message, spawned: spawned.length - before });
  }
}
process.stdout.write(JSON.stringify({ git: findGit(), path: process.env.PATH, results, logs }));
`,
      },
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      outfile: driver,
      logLevel: "silent",
    });
    const hostGit = findGit() as string;
    const cases = [
      { source: `git:${smart.url("lab.git")}`, ref: "feature" },
      { source: `git:${dumb.url("lab.git")}`, ref: "v1.0" },
      { source: `git:${authed.url("lab.git", creds)}`, ref: "main" },
      { source: `git:${smart.url("lab.git")}`, ref: "nope" },
      { source: `git:${authed.url("lab.git")}`, ref: "main" },
      { source: `git:ssh://deploy:${TOKEN}@127.0.0.1:1/lab.git`, ref: "main" },
      { source: `git:file://${repo.dir}`, ref: "main" },
      // The control: with a git binary named, the counter sees its ls-remote.
      { source: `git:file://${repo.dir}`, ref: "nope", git: hostGit },
    ];
    const out = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        [driver],
        { env: { PATH: bin, CASES: JSON.stringify(cases), LABFLEET_LOG_LEVEL: "debug" }, timeout: 30_000 },
        (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
      );
    });
    const got = JSON.parse(out) as {
      git: string | null;
      path: string;
      results: { ok: boolean; code?: string; spawned: number }[];
      logs: { level: string; msg: string; ref?: string; source?: string }[];
    };
    expect(got.path).toBe(bin);
    expect(got.git).toBeNull();
    expect(existsSync(join(bin, "git"))).toBe(false);
    expect(got.results.map((r) => [r.ok, r.code, r.spawned])).toEqual([
      [true, undefined, 0],
      [true, undefined, 0],
      [true, undefined, 0],
      [false, "deploy.unknown_ref", 0],
      [false, "deploy.source_unreachable", 0],
      [true, undefined, 0],
      [true, undefined, 0],
      [false, "deploy.unknown_ref", 1],
    ]);
    const skipped = got.logs.filter((l) => l.msg.startsWith("lab ref not checked"));
    expect(skipped.map((l) => [l.level, l.ref, l.source])).toEqual([
      ["info", "main", "ssh://127.0.0.1:1/lab.git"],
      ["info", "main", `file://${repo.dir}`],
    ]);
    expect(out).not.toContain(TOKEN);
  });
});

describe("git clone through startGitHttp", () => {
  it("clones over smart HTTP (protocol v2, as git asks), with credentials, and over dumb HTTP", async () => {
    const targets = [
      { url: smart.url("lab.git"), dir: join(work, "clone-smart") },
      { url: authed.url("lab.git", creds), dir: join(work, "clone-auth") },
      { url: dumb.url("bare.git"), dir: join(work, "clone-dumb") },
    ];
    for (const t of targets) await gitAsync(work, ["clone", "-q", t.url, t.dir]);
    const [s, a, d] = targets.map((t) => t.dir) as [string, string, string];
    expect(readFileSync(join(s, "setup.sh"), "utf8")).toBe("touch built\n");
    expect(git(s, "rev-parse", "HEAD")).toBe(repo.commits.main);
    expect(git(s, "rev-parse", "origin/feature")).toBe(repo.commits.feature);
    expect(git(s, "rev-parse", "v1.0^{commit}")).toBe(repo.commits.main);
    expect(git(a, "rev-parse", "origin/feature")).toBe(repo.commits.feature);
    expect(git(d, "rev-parse", "origin/feature")).toBe(bare.commits.feature);
    expect(readFileSync(join(d, "README.md"), "utf8")).toBe("fixture lab\n");

    const cloneRequests = smart.requests.filter((r) => r.headers["user-agent"]?.startsWith("git/2"));
    expect(cloneRequests[0]?.headers["git-protocol"]).toBe("version=2");
    expect(
      cloneRequests.filter((r) => r.method === "POST" && r.status === 200).length,
    ).toBeGreaterThanOrEqual(2);
    // fetch in an existing clone, as a host's redeploy does
    await gitAsync(s, ["fetch", "-q", "--tags", "origin"]);
    expect(git(s, "tag", "--list")).toBe("v1\nv1.0");
  });
});

describe("a run with an http(s) lab source", () => {
  it("checks the ref over HTTP before any host is touched, then the hosts clone through the same server", async () => {
    const API = "git-refs-suite-token";
    const rt = await testRuntime({ token: API });
    const app = createApp({ auth: bootstrapAuth(API) });
    const headers = { authorization: `Bearer ${API}`, "content-type": "application/json" };
    const post = (path: string, body: unknown = {}) =>
      app.request(`/api/workshops${path}`, { method: "POST", headers, body: JSON.stringify(body) });
    const run = async (res: Response) => {
      expect(res.status).toBe(202);
      await rt.executor.idle();
    };
    try {
      const yaml = `name: gitweb
lab:
  source: git:${authed.url("lab.git", creds)}
  ref: feature
  setup: bash setup.sh
  health: test -f built
provider:
  type: local
  count: 1
`;
      expect([200, 201]).toContain((await post("", { yaml })).status);
      const bad = await post("/gitweb/deploy", { ref: "no-such-branch" });
      expect(bad.status).toBe(400);
      const body = await bad.text();
      expect((JSON.parse(body) as { error: { code: string } }).error.code).toBe("deploy.unknown_ref");
      expect(body).not.toContain(TOKEN);
      expect(existsSync(join(rt.dataDir, "hosts", "gitweb"))).toBe(false);

      await run(await post("/gitweb/up"));
      const labDir = join(rt.dataDir, "hosts", "gitweb", "student-01", "lab");
      expect(readFileSync(join(labDir, "FEATURE"), "utf8")).toBe("feature\n");
      await run(await post("/gitweb/deploy", { ref: "v1.0", force: true }));
      expect(existsSync(join(labDir, "FEATURE"))).toBe(false);
      expect(git(labDir, "rev-parse", "HEAD")).toBe(repo.commits.main);
    } finally {
      await rt.close();
      rmSync(rt.dataDir, { recursive: true, force: true });
    }
  });
});
