import { execFile } from "node:child_process";
import { accessSync, constants, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { Workshop } from "../workshop/schema.ts";

/**
 * Checking `lab.ref` / `--ref` from the control plane, before any host is touched.
 *
 * The cloud control plane is a Lambda function, and the Node.js 20 and later runtimes run on the Amazon
 * Linux 2023 minimal image, which has no `git` binary. So an http(s) source is read with
 * Git's own HTTP protocol (gitprotocol-http(5)): `GET $GIT_URL/info/refs?service=git-upload-pack` answers
 * with the repository's refs, as a pkt-line stream from a smart server or as a text file from a dumb one.
 * Other sources (ssh, scp-like, file, a path) use `git ls-remote` when a `git` binary is on PATH; without
 * one the check is left to each host, whose `git reset` reports a missing ref.
 */

const COMMIT = /^[0-9a-f]{7,40}$/i;
/** obj-id: 40 hex digits (SHA-1) or 64 (SHA-256, the `object-format=sha256` capability). */
const OID = /^(?:[0-9a-f]{40}|[0-9a-f]{64})$/;
const ZERO_OID = /^0+$/;
const SERVICE = "git-upload-pack";
const ADVERTISEMENT_TYPE = `application/x-${SERVICE}-advertisement`;
/** A pkt-line's pkt-len counts its own four bytes; git refuses lines longer than 65520 bytes. */
const MAX_PKT_LEN = 65520;
/** The largest ref advertisement read: hosts that advertise pull-request refs send megabytes. */
const MAX_ADVERTISEMENT_BYTES = 64 * 1024 * 1024;
export const GIT_CHECK_TIMEOUT_MS = 30_000;
const USER_AGENT = "git/labfleet";

/** A protocol or transport failure, with a message that is safe to show (no credentials). */
export class GitSourceError extends Error {
  override name = "GitSourceError";
  constructor(
    message: string,
    /** The HTTP status that refused access (401, 403, 404), when that is the failure. */
    readonly refusedStatus?: number,
  ) {
    super(message);
  }
}

// --- pkt-line (gitprotocol-common(5)) -----------------------------------------------------------------

export type PktLine =
  | { kind: "data"; data: Uint8Array }
  | { kind: "flush" } // 0000
  | { kind: "delim" } // 0001, protocol v2
  | { kind: "response-end" }; // 0002, protocol v2

const utf8 = new TextDecoder("utf-8");
const encoder = new TextEncoder();

/**
 * Splits a pkt-line stream. Each line starts with four hex digits giving its whole length, those four
 * bytes included; 0000, 0001 and 0002 are the special flush, delimiter and response-end packets.
 */
export function readPktLines(buf: Uint8Array): PktLine[] {
  const lines: PktLine[] = [];
  let at = 0;
  while (at < buf.length) {
    if (at + 4 > buf.length) throw new GitSourceError(`truncated pkt-line at byte ${at}`);
    const hex = String.fromCharCode(...buf.subarray(at, at + 4));
    if (!/^[0-9a-fA-F]{4}$/.test(hex)) {
      throw new GitSourceError(`not a pkt-line stream: bad length ${JSON.stringify(hex)} at byte ${at}`);
    }
    const len = Number.parseInt(hex, 16);
    if (len === 0) lines.push({ kind: "flush" });
    else if (len === 1) lines.push({ kind: "delim" });
    else if (len === 2) lines.push({ kind: "response-end" });
    else if (len < 4 || len > MAX_PKT_LEN) {
      throw new GitSourceError(`not a pkt-line stream: bad length ${hex} at byte ${at}`);
    } else {
      if (at + len > buf.length) throw new GitSourceError(`truncated pkt-line at byte ${at}`);
      lines.push({ kind: "data", data: buf.subarray(at + 4, at + len) });
    }
    at += Math.max(len, 4);
  }
  return lines;
}

/** One pkt-line holding `text` (callers end non-binary lines with LF). */
export function pktLine(text: string): Uint8Array {
  const data = encoder.encode(text);
  if (data.length + 4 > MAX_PKT_LEN) throw new GitSourceError("pkt-line too long");
  const out = new Uint8Array(data.length + 4);
  out.set(encoder.encode((data.length + 4).toString(16).padStart(4, "0")));
  out.set(data, 4);
  return out;
}

/** A data line as text; receivers treat lines the same with or without their trailing LF. */
function lineText(line: PktLine): string | undefined {
  if (line.kind !== "data") return undefined;
  const text = utf8.decode(line.data);
  return text.endsWith("\n") ? text.slice(0, -1) : text;
}

// --- ref advertisements ---------------------------------------------------------------------------

export interface AdvertisedRef {
  name: string;
  oid: string;
  /** For an annotated tag, the object it points to (the `name^{}` line). */
  peeled?: string;
}

export interface RefAdvertisement {
  /** `v0`/`v1`: refs in the first answer; `v2`: a capability list only (refs come from ls-refs); `dumb`. */
  protocol: "v0" | "v1" | "v2" | "dumb";
  refs: AdvertisedRef[];
  /** v0/v1: the capabilities after NUL on the first ref; v2: the `key[=value]` lines. */
  capabilities: string[];
}

function addRef(refs: AdvertisedRef[], oid: string, name: string): void {
  if (!OID.test(oid) || !name || /\s/.test(name))
    throw new GitSourceError(`malformed ref line: ${oid} ${name}`);
  if (name.endsWith("^{}")) {
    const base = name.slice(0, -3);
    const target = refs.findLast((r) => r.name === base);
    if (!target) throw new GitSourceError(`peeled ref ${name} follows no ref ${base}`);
    target.peeled = oid;
    return;
  }
  refs.push({ name, oid });
}

function errLine(text: string): never {
  // An ERR packet may replace any line of the answer (gitprotocol-pack(5)).
  throw new GitSourceError(`the server answered: ${text.slice(4).trim()}`);
}

/**
 * The answer of a smart server to `info/refs?service=git-upload-pack` (gitprotocol-http(5)):
 * `# service=git-upload-pack`, a flush, an optional `version 1`, then `obj-id SP refname` lines (the first
 * carries the capabilities after a NUL; `refname^{}` lines give peeled tags), then a flush. An empty
 * repository sends one `capabilities^{}` line with the zero id. A server speaking protocol v2 answers
 * `version 2` and a capability list instead (its http-backend drops the `# service` line then).
 */
export function parseAdvertisement(body: Uint8Array): RefAdvertisement {
  const lines = readPktLines(body);
  let i = 0;
  const first = lineText(lines[0] ?? { kind: "flush" });
  if (first?.startsWith("ERR ")) errLine(first);
  if (first?.startsWith("# service=")) {
    if (first !== `# service=${SERVICE}`) {
      throw new GitSourceError(`the server answered for another service: ${first.slice(2)}`);
    }
    if (lines[1]?.kind !== "flush") throw new GitSourceError("no flush-pkt after the # service line");
    i = 2;
  } else if (first !== "version 2") {
    throw new GitSourceError("the answer does not start with # service=git-upload-pack");
  }

  let protocol: RefAdvertisement["protocol"] = "v0";
  const head = lineText(lines[i] ?? { kind: "flush" });
  if (head === "version 2") {
    const capabilities: string[] = [];
    for (i++; i < lines.length; i++) {
      const line = lines[i] as PktLine;
      if (line.kind === "flush") return { protocol: "v2", refs: [], capabilities };
      const text = lineText(line);
      if (text === undefined) throw new GitSourceError(`unexpected ${line.kind} packet in the capabilities`);
      if (text.startsWith("ERR ")) errLine(text);
      capabilities.push(text);
    }
    throw new GitSourceError("the capability advertisement ends without a flush-pkt");
  }
  if (head === "version 1") {
    protocol = "v1";
    i++;
  }

  const refs: AdvertisedRef[] = [];
  let capabilities: string[] = [];
  for (let n = 0; i < lines.length; i++, n++) {
    const line = lines[i] as PktLine;
    if (line.kind === "flush") return { protocol, refs, capabilities };
    let text = lineText(line);
    if (text === undefined) throw new GitSourceError(`unexpected ${line.kind} packet in the ref list`);
    if (text.startsWith("ERR ")) errLine(text);
    if (text.startsWith("shallow ")) continue; // a shallow repository lists its boundary commits
    if (n === 0) {
      const nul = text.indexOf("\0");
      if (nul >= 0) {
        capabilities = text
          .slice(nul + 1)
          .split(" ")
          .filter((c) => c.length > 0);
        text = text.slice(0, nul);
      }
    }
    const sp = text.indexOf(" ");
    const oid = sp < 0 ? text : text.slice(0, sp);
    const name = sp < 0 ? "" : text.slice(sp + 1);
    if (n === 0 && name === "capabilities^{}" && ZERO_OID.test(oid)) continue; // an empty repository
    addRef(refs, oid, name);
  }
  // Servers end the list with a flush: without it the answer was cut short and the list is incomplete.
  throw new GitSourceError("the ref advertisement ends without a flush-pkt (truncated answer)");
}

/**
 * A dumb server's `info/refs` file (gitprotocol-http(5)): `obj-id HTAB refname LF` per ref, and
 * `refname^{}` lines for peeled tags. It has no HEAD and no capabilities.
 */
export function parseDumbInfoRefs(text: string): RefAdvertisement {
  const refs: AdvertisedRef[] = [];
  const lines = text.split("\n");
  for (const [n, raw] of lines.entries()) {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line === "") continue;
    const tab = line.indexOf("\t");
    const oid = tab < 0 ? "" : line.slice(0, tab);
    const name = tab < 0 ? "" : line.slice(tab + 1);
    if (!OID.test(oid) || !name || /\s/.test(name)) {
      throw new GitSourceError(`the answer is not a git info/refs file (line ${n + 1})`);
    }
    addRef(refs, oid, name);
  }
  return { protocol: "dumb", refs, capabilities: [] };
}

/**
 * The answer to `GET info/refs?service=git-upload-pack`, by its Content-Type: a smart server sends
 * `application/x-git-upload-pack-advertisement`; anything else is a dumb server's plain `info/refs`,
 * read from the answer already in hand (gitprotocol-http(5), "Smart Server Response").
 */
export function parseInfoRefs(body: Uint8Array, contentType: string | null): RefAdvertisement {
  const type = (contentType ?? "").split(";")[0]?.trim().toLowerCase() ?? "";
  if (type === ADVERTISEMENT_TYPE) return parseAdvertisement(body);
  // Dumb servers never send an application/x-git-* type; one that does speaks for another service.
  if (type.startsWith("application/x-git-")) throw new GitSourceError(`unexpected Content-Type ${type}`);
  return parseDumbInfoRefs(utf8.decode(body));
}

/** The v2 `ls-refs` request for `refs/heads/<ref>` and `refs/tags/<ref>` (gitprotocol-v2(5)). */
export function lsRefsRequest(ref: string, capabilities: string[]): Uint8Array {
  const parts = [pktLine("command=ls-refs\n")];
  if (capabilities.some((c) => c === "agent" || c.startsWith("agent=")))
    parts.push(pktLine(`agent=${USER_AGENT}\n`));
  // A SHA-256 repository needs the client to name the object format the server advertised.
  const format = capabilities.find((c) => c.startsWith("object-format="));
  if (format) parts.push(pktLine(`${format}\n`));
  parts.push(encoder.encode("0001"));
  parts.push(
    pktLine("peel\n"),
    pktLine(`ref-prefix refs/heads/${ref}\n`),
    pktLine(`ref-prefix refs/tags/${ref}\n`),
  );
  parts.push(encoder.encode("0000"));
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The v2 `ls-refs` answer: `obj-id SP refname *(SP attribute)` lines, `peeled:<oid>` among them. */
export function parseLsRefs(body: Uint8Array): AdvertisedRef[] {
  const refs: AdvertisedRef[] = [];
  for (const line of readPktLines(body)) {
    if (line.kind === "flush") return refs;
    const text = lineText(line);
    if (text === undefined) throw new GitSourceError(`unexpected ${line.kind} packet in the ls-refs answer`);
    if (text.startsWith("ERR ")) errLine(text);
    const [oid = "", name = "", ...attributes] = text.split(" ");
    if (oid === "unborn") continue; // HEAD of an empty repository
    const ref: AdvertisedRef = { name, oid };
    if (!OID.test(oid) || !name) throw new GitSourceError(`malformed ls-refs line: ${text}`);
    for (const a of attributes) if (a.startsWith("peeled:")) ref.peeled = a.slice(7);
    refs.push(ref);
  }
  throw new GitSourceError("the ls-refs answer ends without a flush-pkt (truncated answer)");
}

// --- URLs and credentials -------------------------------------------------------------------------

/** Text for messages and logs: the `user:password@` of every URL in it is removed. */
export function redactUrl(text: string): string {
  return text.replace(/\b([a-z][a-z0-9+.-]*:\/\/)[^@/?#\s]*@/gi, "$1");
}

export function isHttpSource(url: string): boolean {
  return /^https?:\/\//i.test(url);
}

export interface HttpRepo {
  /** `$GIT_URL` without credentials, fragment or trailing `/`. */
  base: string;
  /** A Basic Authorization header value for credentials given in the URL. */
  authorization?: string;
}

/**
 * Splits credentials out of an http(s) URL: fetch refuses a URL that holds them, and they must never
 * reach a message. Clients strip a trailing `/` from `$GIT_URL` before appending paths (gitprotocol-http(5)).
 */
export function httpRepo(url: string): HttpRepo {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new GitSourceError(`not a valid URL: ${redactUrl(url)}`);
  }
  let authorization: string | undefined;
  if (u.username || u.password) {
    const user = decodeURIComponent(u.username);
    const password = decodeURIComponent(u.password);
    authorization = `Basic ${Buffer.from(`${user}:${password}`, "utf8").toString("base64")}`;
  }
  u.username = "";
  u.password = "";
  u.hash = "";
  const base = u.toString().replace(/\/+$/, "");
  return authorization ? { base, authorization } : { base };
}

/** `$GIT_URL/info/refs?service=git-upload-pack`; a URL with a query gets `&service=` instead. */
export function infoRefsUrl(base: string): string {
  return `${base}/info/refs${base.includes("?") ? "&" : "?"}service=${SERVICE}`;
}

// --- reading refs over HTTP -----------------------------------------------------------------------

export interface ListRefsOptions {
  timeoutMs?: number;
  /** The v2 `ls-refs` fallback asks only for these two names (branch and tag). */
  ref?: string;
  fetch?: typeof fetch;
}

async function readBody(res: Response): Promise<Uint8Array> {
  if (!res.body) return new Uint8Array();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Uint8Array>) {
    size += chunk.length;
    if (size > MAX_ADVERTISEMENT_BYTES) {
      throw new GitSourceError(`the answer is larger than ${MAX_ADVERTISEMENT_BYTES / 1024 / 1024} MiB`);
    }
    chunks.push(chunk);
  }
  const out = new Uint8Array(size);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

function statusError(status: number, where: string, withCredentials: boolean): GitSourceError {
  if (status === 401 || status === 403 || status === 404) {
    const why = withCredentials
      ? "the repository does not exist, or the credentials in the URL were refused"
      : "the repository does not exist, or it is private and the URL has no credentials (give them as USER:TOKEN@HOST in the URL)";
    return new GitSourceError(
      `${where} answered HTTP ${status}: ${why}`,
      withCredentials ? undefined : status,
    );
  }
  return new GitSourceError(`${where} answered HTTP ${status}`);
}

function transportError(err: unknown, where: string, timeoutMs: number): GitSourceError {
  if (err instanceof GitSourceError) return err;
  const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e.name === "TimeoutError" || e.name === "AbortError") {
    return new GitSourceError(`${where} did not answer within ${timeoutMs / 1000} s`);
  }
  const cause = e.cause?.code ?? e.cause?.message ?? e.message ?? String(err);
  return new GitSourceError(`cannot reach ${where}: ${redactUrl(cause)}`);
}

/**
 * The refs of an http(s) repository, without a git binary. One deadline covers every request and body.
 * The request names no `Git-Protocol`, so servers answer with protocol v0 and its ref list; a server that
 * answers v2 anyway is asked with `ls-refs`. Redirects are followed.
 */
export async function listRemoteRefs(url: string, opts: ListRefsOptions = {}): Promise<AdvertisedRef[]> {
  const timeoutMs = opts.timeoutMs ?? GIT_CHECK_TIMEOUT_MS;
  const doFetch = opts.fetch ?? fetch;
  const repo = httpRepo(url);
  const where = repo.base;
  const signal = AbortSignal.timeout(timeoutMs);
  const headers: Record<string, string> = { "User-Agent": USER_AGENT, Pragma: "no-cache" };
  if (repo.authorization) headers.Authorization = repo.authorization;
  try {
    const res = await doFetch(infoRefsUrl(repo.base), { headers, redirect: "follow", signal });
    // Later requests go where info/refs was redirected to, as git's own client does. fetch drops the
    // Authorization header on a redirect to another origin.
    const base =
      res.redirected && res.url ? res.url.replace(/\/info\/refs[?&]service=git-upload-pack$/, "") : repo.base;
    const from = redactUrl(base);
    // 200 only: a 304 would need a cached copy, and no conditional request is made.
    if (res.status !== 200) {
      await res.body?.cancel().catch(() => {});
      throw statusError(res.status, from, !!repo.authorization);
    }
    const advertisement = parseInfoRefs(await readBody(res), res.headers.get("content-type"));
    if (advertisement.protocol !== "v2") return advertisement.refs;

    if (!advertisement.capabilities.some((c) => c === "ls-refs" || c.startsWith("ls-refs="))) {
      throw new GitSourceError(`${from} speaks protocol v2 without the ls-refs command`);
    }
    // The credentials go only to the origin they were given for.
    const postHeaders = { ...headers };
    if (new URL(base).origin !== new URL(repo.base).origin) delete postHeaders.Authorization;
    const post = await doFetch(`${base}/${SERVICE}`, {
      method: "POST",
      headers: {
        ...postHeaders,
        "Content-Type": `application/x-${SERVICE}-request`,
        Accept: `application/x-${SERVICE}-result`,
        "Git-Protocol": "version=2",
      },
      body: lsRefsRequest(opts.ref ?? "", advertisement.capabilities),
      redirect: "follow",
      signal,
    });
    if (post.status !== 200) {
      await post.body?.cancel().catch(() => {});
      throw statusError(post.status, `${from} (ls-refs)`, !!repo.authorization);
    }
    return parseLsRefs(await readBody(post));
  } catch (err) {
    throw transportError(err, where, timeoutMs);
  }
}

// --- git binary -----------------------------------------------------------------------------------

/** The `git` executable on PATH, or null when there is none (the Lambda runtime has none). */
export function findGit(path: string | undefined = process.env.PATH): string | null {
  for (const dir of (path ?? "").split(delimiter)) {
    if (!dir) continue;
    const file = join(dir, "git");
    try {
      accessSync(file, constants.X_OK);
      if (statSync(file).isFile()) return file;
    } catch {
      // not here
    }
  }
  return null;
}

type LsRemote = { found: true } | { found: false } | { error: string };

function lsRemote(git: string, url: string, ref: string, timeoutMs: number): Promise<LsRemote> {
  return new Promise((resolve) => {
    execFile(
      git,
      ["ls-remote", "--exit-code", "--", url, `refs/heads/${ref}`, `refs/tags/${ref}`],
      { timeout: timeoutMs, env: { ...process.env, GIT_TERMINAL_PROMPT: "0" } },
      (err, _stdout, stderr) => {
        if (!err) return resolve({ found: true });
        const code = (err as { code?: unknown }).code;
        if (code === 2) return resolve({ found: false }); // --exit-code: the repository answered, no such ref
        const last = String(stderr).trim().split("\n").pop()?.trim();
        const reason = (err as { killed?: boolean }).killed
          ? `git ls-remote did not answer within ${timeoutMs / 1000} s`
          : last || `git ls-remote failed (${String(code)})`;
        resolve({ error: redactUrl(reason) });
      },
    );
  });
}

// --- the check ------------------------------------------------------------------------------------

export interface CheckRefOptions {
  /** The deadline of the whole check, 30 s by default. */
  timeoutMs?: number;
  /** The git binary for non-http sources: a path, null for none, or looked up on PATH when absent. */
  git?: string | null;
  fetch?: typeof fetch;
}

/** A name git could never give a ref (git-check-ref-format(1)): it cannot be a branch or a tag. */
function impossibleRefName(ref: string): boolean {
  return (
    [...ref].some((c) => c <= " " || c === "\x7f") ||
    /[~^:?*[\\]/.test(ref) ||
    ref.includes("..") ||
    ref.includes("@{") ||
    ref.startsWith("/") ||
    ref.endsWith("/") ||
    ref.endsWith(".") ||
    ref.endsWith(".lock")
  );
}

/**
 * An invalid ref fails before any host is touched. A commit id (7 to 40 hex digits) cannot be checked
 * without fetching; each host's reset checks it. Branches and tags of an http(s) source are read from its
 * ref advertisement; other sources use `git ls-remote` when git is installed, else each host checks.
 */
export async function checkRef(
  spec: Workshop,
  ref: string | undefined,
  opts: CheckRefOptions = {},
): Promise<void> {
  if (!ref) return;
  if (!spec.lab.source.startsWith("git:")) {
    throw new VisibleError("input", "deploy.ref_without_git", 'a ref applies only to a "git:" lab source', [
      { path: "ref", message: 'expected no ref: lab.source is not "git:"' },
    ]);
  }
  if (COMMIT.test(ref)) return;
  const url = spec.lab.source.slice(4);
  const shown = redactUrl(url);
  const timeoutMs = opts.timeoutMs ?? GIT_CHECK_TIMEOUT_MS;
  const unknown = () =>
    new VisibleError(
      "input",
      "deploy.unknown_ref",
      `ref ${ref} is neither a branch nor a tag of the lab source`,
      [{ path: "ref", message: `expected a branch, tag or commit of ${shown}` }],
    );
  const unreachable = (reason: string) =>
    new VisibleError(
      "input",
      "deploy.source_unreachable",
      `cannot read the lab's git source to check ref ${ref}: ${reason}`,
    );
  if (impossibleRefName(ref)) throw unknown();

  const findBinary = () => (opts.git === undefined ? findGit() : opts.git);

  if (isHttpSource(url)) {
    let refs: AdvertisedRef[];
    try {
      refs = await listRemoteRefs(url, { timeoutMs, ref, ...(opts.fetch ? { fetch: opts.fetch } : {}) });
    } catch (err) {
      const reason = err instanceof GitSourceError ? err.message : "unexpected error";
      // A private repository refused without credentials in the URL may still open to git's credential
      // helpers where git is installed (the local runtime); the cloud has no git and stops here.
      const git = err instanceof GitSourceError && err.refusedStatus ? findBinary() : null;
      if (git) {
        const result = await lsRemote(git, url, ref, timeoutMs);
        if ("found" in result && result.found) return;
        if ("found" in result) throw unknown();
      }
      throw unreachable(redactUrl(reason));
    }
    const wanted = new Set([`refs/heads/${ref}`, `refs/tags/${ref}`]);
    if (!refs.some((r) => wanted.has(r.name))) throw unknown();
    return;
  }

  const git = findBinary();
  if (!git) {
    log.info("lab ref not checked before the run: no git here for this source; each host checks it", {
      ref,
      source: shown,
    });
    return;
  }
  const result = await lsRemote(git, url, ref, timeoutMs);
  if ("error" in result) throw unreachable(result.error);
  if (!result.found) throw unknown();
}
