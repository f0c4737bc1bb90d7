import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createGunzip } from "node:zlib";

/**
 * Real git repositories over HTTP on 127.0.0.1, as `git http-backend` serves them (gitprotocol-http(5)):
 * `GET <repo>/info/refs?service=git-upload-pack` runs `git upload-pack --stateless-rpc --advertise-refs`
 * and `POST <repo>/git-upload-pack` runs `git upload-pack --stateless-rpc`, with the request's
 * `Git-Protocol` header passed on as GIT_PROTOCOL. So `git clone http://127.0.0.1:PORT/name.git` works.
 * The dumb protocol's files (`info/refs`, `HEAD`, `objects/...`) are served too.
 */

export interface GitHttpOptions {
  /** URL name (`lab.git`) -> repository folder, bare or with a work tree. */
  repos: Record<string, string>;
  /** Require Basic auth with these credentials: 401 with `WWW-Authenticate: Basic` otherwise. */
  auth?: { username: string; password: string };
  /** `dumb`: no smart service; `info/refs` is the plain text file whatever the query says. */
  mode?: "smart" | "dumb";
  /** Answer every request with this status (404: no such repository). */
  status?: number;
  /** Never answer (`headers`), or send the headers and the first line and then stall (`body`). */
  hang?: "headers" | "body";
  /** `v2`: answer with protocol v2 even when the client does not ask for it. */
  protocol?: "v2";
  /** Answer every request with `301 Moved Permanently` to this base URL, the path and query kept. */
  redirectTo?: string;
}

export interface GitHttpRequest {
  method: string;
  /** The path, without the query. */
  path: string;
  query: string;
  headers: IncomingHttpHeaders;
  status?: number;
}

export interface GitHttpServer {
  port: number;
  /** `http://127.0.0.1:PORT/<name>` for a key of `repos`. */
  url(name: string, credentials?: { username: string; password: string }): string;
  requests: GitHttpRequest[];
  close(): Promise<void>;
}

const SERVICE = "git-upload-pack";

function gitDir(dir: string): string {
  return existsSync(join(dir, ".git")) ? join(dir, ".git") : dir;
}

function pkt(text: string): string {
  return `${(Buffer.byteLength(text) + 4).toString(16).padStart(4, "0")}${text}`;
}

/** The dumb protocol's `info/refs`: `obj-id TAB refname`, plus a `^{}` line for each annotated tag. */
function dumbInfoRefs(dir: string): string {
  const out = execFileSync(
    "git",
    ["--git-dir", gitDir(dir), "for-each-ref", "--format=%(objectname)%09%(refname)%09%(*objectname)"],
    { encoding: "utf8" },
  );
  let text = "";
  for (const line of out.split("\n")) {
    if (!line) continue;
    const [oid, name, peeled] = line.split("\t");
    text += `${oid}\t${name}\n`;
    if (peeled) text += `${peeled}\t${name}^{}\n`;
  }
  return text;
}

/** The files a dumb client reads; anything else is 404. */
const DUMB_FILE = /^(HEAD|objects\/[0-9a-f]{2}\/[0-9a-f]{38,62}|objects\/pack\/pack-[0-9a-f]+\.(pack|idx))$/;

export async function startGitHttp(opts: GitHttpOptions): Promise<GitHttpServer> {
  const requests: GitHttpRequest[] = [];
  const children = new Set<ChildProcess>();
  const sockets = new Set<Socket>();
  const names = Object.keys(opts.repos).sort((a, b) => b.length - a.length);
  const expectedAuth = opts.auth
    ? `Basic ${Buffer.from(`${opts.auth.username}:${opts.auth.password}`).toString("base64")}`
    : undefined;

  const send = (res: ServerResponse, status: number, body: string, headers: Record<string, string> = {}) => {
    res.writeHead(status, {
      "Content-Type": "text/plain; charset=utf-8",
      "Cache-Control": "no-cache",
      ...headers,
    });
    res.end(body);
  };

  const uploadPack = (dir: string, args: string[], protocol: string | undefined): ChildProcess => {
    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.GIT_PROTOCOL;
    if (protocol) env.GIT_PROTOCOL = protocol;
    const child = spawn("git", ["upload-pack", "--stateless-rpc", ...args, dir], {
      env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    children.add(child);
    child.on("close", () => children.delete(child));
    child.stderr?.resume();
    return child;
  };

  const handle = (req: IncomingMessage, res: ServerResponse, record: GitHttpRequest) => {
    if (opts.hang === "headers") return;
    if (opts.hang === "body") {
      res.writeHead(200, { "Content-Type": `application/x-${SERVICE}-advertisement` });
      res.write(pkt(`# service=${SERVICE}\n`));
      return;
    }
    if (opts.status) return send(res, opts.status, `HTTP ${opts.status}\n`);
    if (opts.redirectTo) {
      const location = `${opts.redirectTo.replace(/\/$/, "")}${req.url ?? "/"}`;
      return send(res, 301, "moved\n", { Location: location });
    }
    if (expectedAuth && req.headers.authorization !== expectedAuth) {
      return send(res, 401, "authentication required\n", { "WWW-Authenticate": 'Basic realm="git"' });
    }
    const name = names.find((n) => record.path.startsWith(`/${n}/`));
    const dir = name === undefined ? undefined : opts.repos[name];
    if (name === undefined || dir === undefined) return send(res, 404, "no such repository\n");
    const rest = record.path.slice(name.length + 2);
    const service = new URLSearchParams(record.query).get("service");
    const requested =
      typeof req.headers["git-protocol"] === "string" ? req.headers["git-protocol"] : undefined;
    const protocol = opts.protocol === "v2" ? "version=2" : requested;
    const smart = opts.mode !== "dumb";

    if (req.method === "GET" && rest === "info/refs") {
      if (smart && service !== null) {
        // An unknown or disabled service is 403 Forbidden.
        if (service !== SERVICE) return send(res, 403, "service not enabled\n");
        const child = uploadPack(dir, ["--advertise-refs"], protocol);
        res.writeHead(200, {
          "Content-Type": `application/x-${SERVICE}-advertisement`,
          "Cache-Control": "no-cache",
        });
        // http-backend writes the # service line only when it does not speak v2.
        if (!protocol?.split(":").includes("version=2")) res.write(`${pkt(`# service=${SERVICE}\n`)}0000`);
        child.stdout?.pipe(res);
        return;
      }
      return send(res, 200, dumbInfoRefs(dir));
    }
    if (req.method === "POST" && rest === SERVICE && smart) {
      const child = uploadPack(dir, [], protocol);
      const body = req.headers["content-encoding"] === "gzip" ? req.pipe(createGunzip()) : req;
      if (child.stdin) body.pipe(child.stdin);
      res.writeHead(200, { "Content-Type": `application/x-${SERVICE}-result`, "Cache-Control": "no-cache" });
      child.stdout?.pipe(res);
      return;
    }
    if (req.method === "GET" && rest === "objects/info/packs") {
      const packDir = join(gitDir(dir), "objects", "pack");
      const packs = existsSync(packDir) ? readdirSync(packDir).filter((f) => f.endsWith(".pack")) : [];
      return send(res, 200, `${packs.map((p) => `P ${p}\n`).join("")}\n`);
    }
    if (req.method === "GET" && DUMB_FILE.test(rest)) {
      const file = join(gitDir(dir), rest);
      if (!existsSync(file)) return send(res, 404, "not found\n");
      res.writeHead(200, { "Content-Type": "application/octet-stream" });
      res.end(readFileSync(file));
      return;
    }
    send(res, 404, "not found\n");
  };

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const record: GitHttpRequest = {
      method: req.method ?? "GET",
      path: decodeURIComponent(url.pathname),
      query: url.search.replace(/^\?/, ""),
      headers: req.headers,
    };
    requests.push(record);
    res.on("finish", () => {
      record.status = res.statusCode;
    });
    try {
      handle(req, res, record);
    } catch (err) {
      if (!res.headersSent) send(res, 500, `${(err as Error).message}\n`);
      else res.destroy();
    }
  });
  server.on("connection", (s) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const port = (server.address() as AddressInfo).port;

  return {
    port,
    requests,
    url(name, credentials) {
      const auth = credentials
        ? `${encodeURIComponent(credentials.username)}:${encodeURIComponent(credentials.password)}@`
        : "";
      return `http://${auth}127.0.0.1:${port}/${name}`;
    },
    async close() {
      for (const child of children) child.kill("SIGKILL");
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

// --- fixture repositories -------------------------------------------------------------------------

const GIT_ENV = {
  GIT_CONFIG_NOSYSTEM: "1",
  GIT_CONFIG_GLOBAL: "/dev/null",
  GIT_AUTHOR_NAME: "labfleet test",
  GIT_AUTHOR_EMAIL: "test@labfleet.invalid",
  GIT_COMMITTER_NAME: "labfleet test",
  GIT_COMMITTER_EMAIL: "test@labfleet.invalid",
  GIT_TERMINAL_PROMPT: "0",
};

/**
 * git with no system or global configuration and a fixed identity, so fixtures are the same anywhere.
 * It blocks: use `gitAsync` for anything that talks to a `startGitHttp` server in the same process.
 */
export function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", args, {
    cwd,
    encoding: "utf8",
    env: { ...process.env, ...GIT_ENV },
    stdio: ["ignore", "pipe", "pipe"],
  }).trim();
}

/** `git` without blocking the event loop (a clone from a server in this process), within `timeoutMs`. */
export function gitAsync(cwd: string, args: string[], timeoutMs = 30_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      "git",
      args,
      { cwd, encoding: "utf8", env: { ...process.env, ...GIT_ENV }, timeout: timeoutMs },
      (err, stdout, stderr) =>
        err ? reject(new Error(`git ${args[0]} failed: ${stderr || err.message}`)) : resolve(stdout.trim()),
    );
  });
}

export interface FixtureRepo {
  /** The repository folder: a work tree, or a bare repository with `bare: true`. */
  dir: string;
  /** Commit ids: `main` (tagged), and `feature` (one commit on top of it). */
  commits: { main: string; feature: string };
  /** The names made: the default branch, the other branch, a lightweight and an annotated tag. */
  refs: { main: "main"; branch: "feature"; tag: "v1"; annotatedTag: "v1.0" };
  /** The object id of the annotated tag itself (its `^{}` peels to `commits.main`). */
  annotatedTagObject: string;
  remove(): void;
}

/**
 * A repository in a temporary folder from `from` (a folder copied in) or `files`: one commit on `main`
 * tagged `v1` (lightweight) and `v1.0` (annotated), and a branch `feature` one commit ahead.
 */
export function makeFixtureRepo(
  opts: { from?: string; files?: Record<string, string>; bare?: boolean } = {},
): FixtureRepo {
  const root = mkdtempSync(join(tmpdir(), "labfleet-git-fixture-"));
  const work = join(root, "work");
  git(root, "init", "-q", "-b", "main", work);
  if (opts.from) cpSync(opts.from, work, { recursive: true });
  const files = opts.files ?? (opts.from ? {} : { "README.md": "fixture lab\n" });
  for (const [name, text] of Object.entries(files)) {
    const file = join(work, name);
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, text);
  }
  git(work, "add", "-A");
  git(work, "commit", "-q", "--no-gpg-sign", "-m", "v1");
  git(work, "tag", "v1");
  git(work, "tag", "-a", "-m", "release 1.0", "v1.0");
  const main = git(work, "rev-parse", "HEAD");
  const annotatedTagObject = git(work, "rev-parse", "refs/tags/v1.0");
  git(work, "checkout", "-q", "-b", "feature");
  writeFileSync(join(work, "FEATURE"), "feature\n");
  git(work, "add", "-A");
  git(work, "commit", "-q", "--no-gpg-sign", "-m", "feature");
  const feature = git(work, "rev-parse", "HEAD");
  git(work, "checkout", "-q", "main");
  let dir = work;
  if (opts.bare) {
    dir = join(root, "repo.git");
    git(root, "clone", "-q", "--bare", work, dir);
    rmSync(work, { recursive: true, force: true });
  }
  const repo: FixtureRepo = {
    dir,
    commits: { main, feature },
    refs: { main: "main", branch: "feature", tag: "v1", annotatedTag: "v1.0" },
    annotatedTagObject,
    remove: () => rmSync(root, { recursive: true, force: true }),
  };
  return repo;
}
