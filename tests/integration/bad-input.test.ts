import { spawn } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  realpathSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { request as httpRequest } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab, enterCode, recoverLab } from "../../shared/portal/claims.ts";
import { emailHash } from "../../shared/portal/codes.ts";
import { open, seal } from "../../shared/runtime/crypto.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { BODY_LIMITS } from "../../web/limits.ts";
import { cliBin, runCli } from "../harness/cli.ts";
import { CONTROL_CLASSES, RAW_CONTROL } from "../harness/control-chars.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * Bad input from students, instructors' files and anyone on the network: control characters in student text
 * and in what the CLI prints, YAML bombs, path ids and bodies of any size, and a closed pipe under the CLI.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const TOKEN = "bad-input-suite-token";
const WS = "badin";
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}` };
let code = "";
// biome-ignore lint/suspicious/noExplicitAny: response bodies are checked field by field below
const j = async (res: Response): Promise<any> => res.json();
const api = (method: string, path: string, body?: unknown) =>
  app.request(`/api${path}`, {
    method,
    headers: { ...auth, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: typeof body === "string" ? body : JSON.stringify(body) }),
  });

/** A browser for app.request(): a cookie jar and the CSRF field of the last page it saw. */
class Browser {
  readonly jar = new Map<string, string>();
  csrf = "";
  private async take(res: Response) {
    storeCookies(this.jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { status: res.status, text, location: res.headers.get("location") ?? "" };
  }
  async get(path: string) {
    return this.take(await app.request(`http://localhost${path}`, { headers: cookieHeader(this.jar) }));
  }
  async post(path: string, fields: Record<string, string>) {
    return this.take(
      await app.request(`http://localhost${path}`, {
        method: "POST",
        headers: {
          ...cookieHeader(this.jar),
          "content-type": "application/x-www-form-urlencoded",
          origin: "http://localhost",
          "sec-fetch-site": "same-origin",
        },
        body: new URLSearchParams({ _csrf: this.csrf, ...fields }),
      }),
    );
  }
}

beforeAll(async () => {
  work = tempDir("labfleet-bad-input-");
  rt = await testRuntime({ token: TOKEN });
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: TOKEN };
  const file = join(work, "workshop.yaml");
  writeFileSync(file, `${workshopYaml({ name: WS, count: 3 })}portal:\n  mode: both\n`);
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stderr).toBe(0);
  code = (await j(await api("POST", `/workshops/${WS}/portal/open`, {}))).code;
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

const claims = async () => (await useDeps().store.claim.query.byWorkshop({ workshop: WS }).go()).data;

async function refusal(p: Promise<unknown>): Promise<VisibleError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(VisibleError);
  return err as VisibleError;
}

describe("student text with control characters", () => {
  it.each(CONTROL_CLASSES)(
    "a %s in a name, an email or a PIN is refused, naming the field",
    async (_, ch) => {
      for (const [field, input] of [
        ["name", { name: `Eve${ch}Mallory`, email: "eve@example.test", pin: "582913" }],
        ["email", { name: "Eve Mallory", email: `eve${ch}x@example.test`, pin: "582913" }],
        ["pin", { name: "Eve Mallory", email: "eve@example.test", pin: `58291${ch}` }],
      ] as const) {
        const err = await refusal(claimLab(WS, input, "192.0.2.1"));
        expect(err.kind, field).toBe("input");
        expect(err.details.map((d) => d.path)).toEqual([field]);
        expect(err.details[0]?.message).toMatch(/must not contain control characters/);
      }
      const recover = await refusal(recoverLab(WS, `eve${ch}@example.test`, "582913", "192.0.2.1"));
      expect(recover.details.map((d) => d.path)).toEqual(["email"]);
      expect((await refusal(enterCode(`${code}${ch}`, "192.0.2.1"))).details.map((d) => d.path)).toEqual([
        "code",
      ]);
      expect(await claims()).toEqual([]);
    },
  );

  it("the portal's forms answer 400 with the message beside the field, and nothing is claimed", async () => {
    const b = new Browser();
    await b.get("/");
    const badCode = await b.post("/code", { code: `${code}\u001b[2J` });
    expect(badCode.status).toBe(400);
    expect(badCode.text).toContain("the workshop code must not contain control characters");
    expect((await b.post("/code", { code })).status).toBe(303);
    await b.get("/board");
    const claim = await b.post("/claim", {
      name: "Eve\u001b]0;pwned\u0007",
      email: "eve@example.test",
      pin: "582913",
    });
    expect(claim.status).toBe(400);
    expect(claim.text).toContain("your name must not contain control characters");
    expect(claim.text).toContain("Please check the fields below.");
    const recover = await b.post("/recover", { email: "eve\r\n@example.test", pin: "582913" });
    expect(recover.status).toBe(400);
    expect(recover.text).toContain("your email must not contain control characters");
    expect(await claims()).toEqual([]);
  });

  it("the instructor API refuses them too: an email to revoke, a roster row to invite", async () => {
    const revoke = await api("POST", `/workshops/${WS}/portal/revoke`, { email: "a\u202e@example.test" });
    expect(revoke.status).toBe(400);
    expect((await j(revoke)).error.details.map((d: { path: string }) => d.path)).toEqual(["email"]);
    const invite = await api("POST", `/workshops/${WS}/portal/invite`, {
      csv: "name,email\nAda Lovelace,ada@example.test\nEve\u001b[31m Mallory,eve@example.test\n",
    });
    expect(invite.status).toBe(400);
    const body = await j(invite);
    expect(body.error.code).toBe("portal.roster_invalid");
    expect(body.error.details).toEqual([
      { path: "roster[2].name", message: expect.stringContaining("must not contain control characters") },
    ]);
    expect(await claims()).toEqual([]); // not even Ada: the roster is checked before anyone is reserved
  });
});

describe("values with control characters already in the store", () => {
  const NAME = "Eve\u001b[2J\u001b[31m\nstudent-09  free\r\u202eroot";
  const EMAIL = '=HYPERLINK("http://x")\u0007@example.test';

  beforeAll(async () => {
    // Written as an older labfleet (or a hand-edited table) would have: straight through the store.
    const { store, accessKey, clock } = useDeps();
    const eHash = emailHash(WS, EMAIL);
    await store.claim
      .create({
        workshop: WS,
        hostId: "student-02",
        name: NAME,
        emailHash: eHash,
        emailSealed: seal(accessKey, EMAIL),
        pinHash: "",
        linkHash: "old-data-link-hash",
        how: "open",
        claimedAt: clock.now().toISOString(),
      })
      .go();
    await store.claimEmail.create({ workshop: WS, emailHash: eHash, hostId: "student-02" }).go();
    expect(open(accessKey, (await claims())[0]?.emailSealed ?? "")).toBe(EMAIL);
  });

  it("labfleet portal status prints them escaped: no escape sequence reaches the terminal, no fake row", async () => {
    const r = await runCli(["portal", "status", WS], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toMatch(RAW_CONTROL);
    const lines = (r.stdout.split("\n\n")[0] ?? "").split("\n");
    expect(lines).toHaveLength(2 + 3); // the summary, the table's header, one row per lab
    expect(r.stdout).toContain("\n\nnobody is held back by the rate limits\n"); // and then who is held back
    const row = lines.find((l) => l.startsWith("student-02"));
    expect(row).toContain("Eve\\x1b[2J\\x1b[31m\\nstudent-09  free\\r\\u202eroot");
    expect(row).toContain('=HYPERLINK("http://x")\\x07@example.test');
    // JSON keeps the values as they are, escaped by JSON.
    const doc = JSON.parse((await runCli(["portal", "status", WS, "--output", "json"], { env })).stdout);
    expect(doc.claims[0]).toMatchObject({ lab: "student-02", name: NAME, email: EMAIL });
  });

  it("the CSV export escapes them and neutralises the formula", async () => {
    const r = await runCli(["portal", "export", WS], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).not.toMatch(RAW_CONTROL);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines).toHaveLength(2);
    expect(lines[1]).toMatch(
      /^student-02,Eve\\x1b\[2J\\x1b\[31m\\nstudent-09 {2}free\\r\\u202eroot,"'=HYPERLINK\(""http:\/\/x""\)\\x07@example\.test",open,/,
    );
    const viaApi = await app.request(`/api/workshops/${WS}/portal/export`, { headers: auth });
    expect(await viaApi.text()).toBe(r.stdout);
  });

  afterAll(async () => {
    await api("POST", `/workshops/${WS}/portal/release`, { lab: "student-02" });
  });
});

describe("path parameters", () => {
  const long = "a".repeat(3000);
  const runLike = `run_${"A".repeat(3000)}`;

  it.each([
    ["GET", `/api/workshops/${long}`, "name"],
    ["GET", `/api/workshops/${long}/events`, "name"],
    ["GET", `/api/workshops/${WS}/hosts/${long}/access`, "hostId"],
    ["GET", `/api/workshops/${WS}/runs/${long}`, "runId"],
    ["GET", `/api/workshops/${WS}/runs/${runLike}`, "runId"],
    ["DELETE", `/api/workshops/${WS}/host-keys/${long}`, "hostId"],
    ["DELETE", `/api/tokens/tok_${long}`, "id"],
    ["GET", `/api/workshops/${WS}/access?host=${long}`, "host[0]"],
  ])(
    "%s with a 3,000-character id is a 400 naming the parameter, never a 500",
    async (method, path, param) => {
      const res = await app.request(path, { method, headers: auth });
      expect(res.status, path.replaceAll(long, "<long>")).toBe(400);
      const body = await j(res);
      expect(body.error.kind).toBe("input");
      expect(body.error.details.map((d: { path: string }) => d.path)).toContain(param);
    },
  );

  it("a 3,000-character id in a body is a 400 too", async () => {
    for (const [path, body] of [
      ["portal/release", { lab: long }],
      ["doctor", { hosts: [long] }],
    ] as const) {
      const res = await api("POST", `/workshops/${WS}/${path}`, body);
      expect(res.status, path).toBe(400);
    }
  });

  it("well-formed ids that do not exist are 404s", async () => {
    for (const path of [
      `/api/workshops/${WS}/hosts/student-77/access`,
      `/api/workshops/${WS}/runs/run_01J9ZK3M4R7S8T9V0W1X2Y3Z4A`,
    ]) {
      expect((await app.request(path, { headers: auth })).status, path).toBe(404);
    }
  });

  it("pages answer 404 for a path that can name nothing", async () => {
    for (const path of [`/l/${long}`, `/admin/${long}/${long}`, `/admin/${WS}/${long}`]) {
      expect((await app.request(path)).status, path).toBe(404);
    }
  });
});

describe("request bodies", () => {
  it("a body over its route's limit is a 413 from its Content-Length", async () => {
    const over = (n: number) => JSON.stringify({ pad: "x".repeat(n) });
    const send = (path: string, body: string, headers: Record<string, string> = auth) =>
      app.request(path, {
        method: "POST",
        headers: { ...headers, "content-type": "application/json", "content-length": String(body.length) },
        body,
      });
    for (const [path, size] of [
      [`/api/workshops/${WS}/up`, BODY_LIMITS.json],
      [`/api/workshops/${WS}/portal/release`, BODY_LIMITS.json],
      ["/api/tokens", BODY_LIMITS.json],
      ["/api/workshops", BODY_LIMITS.workshop],
      [`/api/workshops/${WS}/portal/invite`, BODY_LIMITS.roster],
      ["/auth/device", BODY_LIMITS.public],
    ] as const) {
      const res = await send(path, over(size));
      expect(res.status, path).toBe(413);
      expect((await j(res)).error).toMatchObject({ kind: "too_large", code: "request.too_large" });
      // Just under the limit, the same route reads the body (and answers what it thinks of it).
      expect((await send(path, over(size - 64))).status, path).not.toBe(413);
    }
    // Before the token is even looked at.
    expect((await send("/api/workshops", over(BODY_LIMITS.workshop), {})).status).toBe(413);
  });

  it("workshop.yaml over 1 MiB in a body under the limit is a 400 that says so", async () => {
    const yaml = `${workshopYaml({ name: "big", count: 1 })}# ${"x".repeat(1024 * 1024)}\n`;
    const res = await api("POST", "/workshops", { yaml });
    expect(res.status).toBe(400);
    expect((await j(res)).error.details).toEqual([
      expect.objectContaining({ path: "yaml", message: "expected workshop.yaml of at most 1 MiB" }),
    ]);
    const bytes = `${workshopYaml({ name: "big", count: 1 })}# ${"é".repeat(600 * 1024)}\n`;
    const res2 = await api("POST", "/workshops", { yaml: bytes });
    expect(res2.status).toBe(400);
    expect((await j(res2)).error.details[0].message).toMatch(
      /^workshop\.yaml is [\d,]+ bytes; it may be at most 1 MiB/,
    );
  });

  /** Sends a body to the real server a chunk at a time until the server answers; how much was sent by then. */
  function stream(path: string, opts: { contentLength?: number }) {
    return new Promise<{ status: number; body: string; sent: number }>((resolve, reject) => {
      const url = new URL(path, rt.url);
      const req = httpRequest(url, {
        method: "POST",
        headers: {
          ...auth,
          "content-type": "application/json",
          ...(opts.contentLength ? { "content-length": String(opts.contentLength) } : {}),
        },
      });
      const chunk = Buffer.alloc(64 * 1024, "x");
      const total = 200 * 1024 * 1024;
      let sent = 0;
      let answered = false;
      req.on("response", (res) => {
        answered = true;
        let body = "";
        res.on("data", (d) => (body += d));
        res.on("end", () => {
          req.destroy(); // the rest is never sent
          resolve({ status: res.statusCode ?? 0, body, sent });
        });
      });
      req.on("error", (err) => {
        if (!answered) reject(err); // after the answer, the server may close the connection
      });
      const pump = () => {
        while (!answered && sent < total) {
          sent += chunk.length;
          if (!req.write(chunk)) return void req.once("drain", pump);
        }
        if (!answered) req.end();
      };
      pump();
    });
  }

  it("a chunked body (no Content-Length) is refused as it passes the limit, while the client still sends", async () => {
    const r = await stream(`/api/workshops/${WS}/up`, {});
    expect(r.status).toBe(413);
    expect(JSON.parse(r.body).error.code).toBe("request.too_large");
    // Answered long before the 200 MB were sent: the server read little more than the limit.
    expect(r.sent).toBeLessThan(32 * 1024 * 1024);
  });

  it("a declared 200 MB body is refused from its header, before it is sent", async () => {
    const r = await stream("/api/workshops", { contentLength: 200 * 1024 * 1024 });
    expect(r.status).toBe(413);
    expect(r.sent).toBeLessThan(32 * 1024 * 1024);
  });

  it("a chunked body under the limit is read as usual", async () => {
    const body = JSON.stringify({ yaml: workshopYaml({ name: WS, count: 3 }) });
    const res = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = httpRequest(new URL("/api/workshops/plan", rt.url), {
        method: "POST",
        headers: { ...auth, "content-type": "application/json" },
      });
      req.on("response", (r) => {
        let text = "";
        r.on("data", (d) => (text += d));
        r.on("end", () => resolve({ status: r.statusCode ?? 0, text }));
      });
      req.on("error", reject);
      req.write(body.slice(0, 10));
      req.end(body.slice(10));
    });
    expect(res.status, res.text).toBe(200);
    expect(JSON.parse(res.text).items).toHaveLength(3);
  });
});

describe("YAML bombs", () => {
  const bomb = `name: bomb\n${[
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ..."bcdefg".split("").map((x, i) => `${x}: &${x} [${Array(9).fill(`*${"abcdef"[i]}`).join(",")}]`),
  ].join("\n")}\n`;
  const deep = `name: deep\nlab: ${"[".repeat(100_000)}${"]".repeat(100_000)}\n`;
  let blockDeep = "name: deep\nlab:\n";
  for (let i = 0; i < 1000; i++) blockDeep += `${" ".repeat(i + 2)}k${i}:\n`;

  it.each([
    ["an alias bomb", bomb, 8, /aliases expand too far/],
    ["flow nesting 100,000 deep", deep, 2, /nested more than 64 levels deep/],
    ["block nesting 1,000 deep", blockDeep, 66, /nested more than 64 levels deep/],
  ])("%s is a 400 from the API with the line", async (_, yaml, line, message) => {
    for (const path of ["/workshops", "/workshops/plan"]) {
      const res = await api("POST", path, { yaml });
      expect(res.status, path).toBe(400);
      const body = await j(res);
      expect(body.error.code).toBe("workshop.invalid");
      expect(body.error.details).toEqual([
        { path: "(yaml)", message: expect.stringMatching(message), line, column: expect.any(Number) },
      ]);
    }
  });

  it.each([
    ["an alias bomb", bomb, "line 8"],
    ["flow nesting", deep, "line 2"],
    ["block nesting", blockDeep, "line 66"],
    ["an oversize file", `${workshopYaml({ name: "big" })}# ${"x".repeat(1024 * 1024)}\n`, "1 MiB"],
  ])("%s: labfleet validate and up exit 1 with a plain message, no stack trace", async (_, yaml, where) => {
    const file = join(work, "bomb.yaml");
    writeFileSync(file, yaml);
    const v = await runCli(["validate", "-f", file], { env });
    expect(v.code).toBe(1);
    expect(v.stdout).toContain(`${file}: 1 error\n(yaml): `);
    expect(v.stdout).toContain(where);
    expect(v.stderr).toBe("");
    const up = await runCli(["up", "-f", file], { env });
    expect(up.code).toBe(1);
    expect(up.stderr).toMatch(new RegExp(`^labfleet: ${file} is not valid\n\\(yaml\\): `));
    expect(up.stderr).toContain(where);
    for (const out of [v.stdout, v.stderr, up.stdout, up.stderr]) {
      expect(out).not.toMatch(/\n\s+at |Error:|Maximum call stack/);
    }
  });
});

describe("lab.dir on a local host", () => {
  const withDir = (name: string, dir: string) =>
    workshopYaml({ name, count: 1 }).replace("  setup:", `  dir: ${dir}\n  setup:`);

  it.each([
    ["/etc", "a relative path such as lab, not an absolute one"],
    ["../outside", "a relative path without .."],
    ["lab/../../outside", "a relative path without .."],
    [".", "not the host's folder itself"],
    [".labfleet/lab", "other than .labfleet"],
  ])("%s is refused at validate and by the API, at lab.dir, and nothing is stored", async (dir, why) => {
    const file = join(work, "dir.yaml");
    writeFileSync(file, withDir("dirs", dir));
    const v = await runCli(["validate", "-f", file], { env });
    expect(v.code, v.stdout).toBe(1);
    expect(v.stdout).toContain(
      `${file}: 1 error\nlab.dir: expected a folder inside the local host's own folder`,
    );
    expect(v.stdout).toContain(why);
    expect(v.stdout).toMatch(/ \(line 4, column 8\)\n$/);
    const up = await runCli(["up", "-f", file], { env });
    expect(up.code).toBe(1);
    expect(up.stderr).toContain("lab.dir: expected a folder inside the local host's own folder");

    const res = await api("POST", "/workshops", { yaml: withDir("dirs", dir) });
    expect(res.status).toBe(400);
    expect((await j(res)).error.details).toEqual([
      { path: "lab.dir", message: expect.stringContaining(why), line: 4, column: 8 },
    ]);
    expect((await api("GET", "/workshops/dirs")).status).toBe(404);
  });

  it("a folder inside the host's folder is accepted, and SSH hosts take an absolute one", async () => {
    const file = join(work, "dir.yaml");
    writeFileSync(file, withDir("dirs", "work/lab"));
    expect((await runCli(["validate", "-f", file], { env })).code).toBe(0);
    writeFileSync(
      file,
      `${withDir("byo", "/srv/lab").replace(/provider:[\s\S]*$/, "")}provider:\n  type: static\nhosts:\n  - id: h1\n    ssh: lab@127.10.0.9\n`,
    );
    const v = await runCli(["validate", "-f", file], { env });
    expect(v.code, v.stdout).toBe(0);
  });

  it("a link on the way out of the host's folder fails that host's deploy, and nothing outside is touched", async () => {
    const name = "dirlink";
    const file = join(work, `${name}.yaml`);
    writeFileSync(file, withDir(name, "work/lab"));
    const prov = await runCli(["provision", "-f", file], { env });
    expect(prov.code, prov.stderr).toBe(0);
    // What a lab's setup (it runs as you) could leave behind: a link from the host's folder to one of yours.
    const outside = join(work, "precious");
    mkdirSync(join(outside, "lab"), { recursive: true });
    writeFileSync(join(outside, "lab", "notes.txt"), "keep me");
    symlinkSync(outside, join(rt.dataDir, "hosts", name, "student-01", "work"));

    const up = await runCli(["up", "-f", file], { env });
    expect(up.code).toBe(1);
    expect(up.stdout).toContain(
      `student-01 failed: lab.dir "work/lab" is refused: it leads to ${realpathSync(join(outside, "lab"))}, outside the local host's folder`,
    );
    expect(readdirSync(join(outside, "lab"))).toEqual(["notes.txt"]);
    expect(readFileSync(join(outside, "lab", "notes.txt"), "utf8")).toBe("keep me");
    expect(existsSync(join(outside, "built"))).toBe(false); // the setup never ran there
    await runCli(["down", name, "--yes"], { env });
  });
});

describe("a closed pipe under the CLI", () => {
  /** Runs the CLI with its stdout a pipe whose reader has gone (`| head` that exited): exit code and stderr. */
  function closedStdout(args: string[]) {
    return new Promise<{ code: number | null; signal: string | null; stderr: string }>((resolve, reject) => {
      const child = spawn(process.execPath, [cliBin, ...args], {
        env: { ...process.env, NO_COLOR: "1", ...env },
        stdio: ["ignore", "pipe", "pipe"],
      });
      child.stdout.destroy(); // the reader closes its end before the CLI writes a line
      let stderr = "";
      child.stderr.on("data", (d) => (stderr += d));
      child.on("error", reject);
      child.on("close", (code, signal) => resolve({ code, signal, stderr }));
    });
  }

  it.each([[["status", WS]], [["portal", "status", WS]], [["help"]]])(
    "labfleet %j ends quietly: exit 0, nothing on stderr",
    async (args) => {
      const r = await closedStdout(args);
      expect(r).toEqual({ code: 0, signal: null, stderr: "" });
    },
  );

  it("a command that failed keeps its exit code: labfleet validate of an invalid file exits 1", async () => {
    const file = join(work, "invalid.yaml");
    writeFileSync(file, "name: x\nlab: [[[[\n");
    expect(await closedStdout(["validate", "-f", file])).toEqual({ code: 1, signal: null, stderr: "" });
  });

  /** `bash -o pipefail -c "labfleet ARGS | head -2"`: what head printed, stderr, and the pipeline's exit code. */
  async function headTwo(args: string) {
    const child = spawn(
      "bash",
      ["-o", "pipefail", "-c", `"${process.execPath}" "${cliBin}" ${args} | head -2`],
      {
        env: { ...process.env, NO_COLOR: "1", ...env },
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    const code = await new Promise<number | null>((res) => child.on("close", res));
    return { lines: stdout.split("\n").filter(Boolean).length, stderr, code };
  }

  it("the real pipeline: labfleet status | head -2 prints two lines and no error", async () => {
    expect(await headTwo(`status ${WS}`)).toEqual({ lines: 2, stderr: "", code: 0 });
  });

  it("the real pipeline, with more output than the pipe holds: head exits while the CLI still writes", async () => {
    // A claim whose name is 200,000 characters: `portal status` then writes far more than a pipe buffers
    // (64 KiB), so its writes go on after head has printed its two lines and closed the pipe.
    const { store, accessKey, clock } = useDeps();
    const email = "long-name@example.test";
    const eHash = emailHash(WS, email);
    await store.claim
      .create({
        workshop: WS,
        hostId: "student-03",
        name: `Long ${"n".repeat(200_000)}`,
        emailHash: eHash,
        emailSealed: seal(accessKey, email),
        pinHash: "",
        linkHash: "long-name-link-hash",
        how: "open",
        claimedAt: clock.now().toISOString(),
      })
      .go();
    await store.claimEmail.create({ workshop: WS, emailHash: eHash, hostId: "student-03" }).go();
    try {
      expect(await headTwo(`portal status ${WS}`)).toEqual({ lines: 2, stderr: "", code: 0 });
    } finally {
      await api("POST", `/workshops/${WS}/portal/release`, { lab: "student-03" });
    }
  });
});
