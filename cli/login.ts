import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { hostname } from "node:os";
import {
  ApiClient,
  CliError,
  credentialsFile,
  findRuntimeFile,
  readCredentials,
  removeCredentials,
  resolveTarget,
  type Target,
  writeCredentials,
} from "./client.ts";
import { type Args, jsonOutput } from "./main.ts";
import { clean, clock, jsonText, type Output, relative, writeTable } from "./render.ts";

/**
 * `labfleet login`, `logout` and `tokens`: the CLI's credentials. `login` asks the server for a device login,
 * shows the page and the code to confirm in a signed-in browser, and polls until an instructor approves; the
 * API token it receives goes to ~/.labfleet/credentials (0600) and never to the screen.
 */

export const TOKENS_USAGE = `usage: labfleet tokens list | create NAME [--expires-days N] | revoke ID  [--output json]`;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function normalizeUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new CliError(`--url must be a URL such as https://labfleet.example.org, got ${text}`, 2);
  }
  if (url.protocol !== "https:" && url.protocol !== "http:")
    throw new CliError("--url must be an http(s) URL", 2);
  return `${url.origin}${url.pathname}`.replace(/\/+$/, "");
}

/** --url, else LABFLEET_URL, else the local runtime this folder belongs to. */
function loginUrl(args: Args): string {
  const given = args.values.url ?? process.env.LABFLEET_URL;
  if (given) return normalizeUrl(given);
  const file = findRuntimeFile();
  if (file) return normalizeUrl((JSON.parse(readFileSync(file, "utf8")) as { url: string }).url);
  throw new CliError("labfleet login needs the control plane's address: labfleet login --url https://...", 2);
}

interface Answer {
  status: number;
  // biome-ignore lint/suspicious/noExplicitAny: each caller reads the fields it expects and checks them
  body: any;
}

async function post(url: string, path: string, body: unknown): Promise<Answer> {
  let res: Response;
  try {
    res = await fetch(`${url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000),
    });
  } catch (err) {
    throw new CliError(`cannot reach labfleet at ${url}: ${(err as Error).message}`, 3);
  }
  const text = await res.text();
  let json: unknown = {};
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    throw new CliError(`${url} did not answer like a labfleet control plane (HTTP ${res.status})`, 3);
  }
  return { status: res.status, body: json };
}

/** Only a desktop session gets a browser; a server, a CI job or a test never does. */
function openBrowser(url: string): void {
  if (!process.env.DISPLAY && !process.env.WAYLAND_DISPLAY) return;
  try {
    const child = spawn("xdg-open", [url], { stdio: "ignore", detached: true });
    child.on("error", () => undefined); // no xdg-open: the printed URL is enough
    child.unref();
  } catch {
    // the same
  }
}

function clientName(): string {
  const host = hostname()
    .replace(/[^\w.-]/g, "")
    .slice(0, 40);
  return host ? `labfleet CLI on ${host}` : "labfleet CLI";
}

/** The sign-in prompts go to `say`: stdout, or stderr with --output json so stdout holds one document. */
async function deviceLogin(url: string, say: (text: string) => void): Promise<string> {
  const started = await post(url, "/auth/device", { clientName: clientName() });
  const d = started.body as {
    deviceCode?: unknown;
    userCode?: unknown;
    verifyUrl?: unknown;
    verifyUrlComplete?: unknown;
    expiresIn?: unknown;
    interval?: unknown;
  };
  if (
    started.status !== 200 ||
    typeof d.deviceCode !== "string" ||
    typeof d.userCode !== "string" ||
    typeof d.verifyUrl !== "string" ||
    typeof d.expiresIn !== "number" ||
    typeof d.interval !== "number"
  ) {
    if (started.status === 404)
      throw new CliError(`${url} does not offer browser sign-in (labfleet login --token)`, 3);
    throw new CliError(`${url} refused the sign-in request (HTTP ${started.status})`, 1);
  }
  const page = typeof d.verifyUrlComplete === "string" ? d.verifyUrlComplete : d.verifyUrl;
  say(
    `To sign in the CLI, open this page in a browser where you are signed in to the labfleet console:\n\n  ${clean(page)}\n\nand check that it shows the code  ${clean(d.userCode)}\n\nWaiting for you to approve it (the code expires in ${Math.round(d.expiresIn / 60)} minutes)...\n`,
  );
  openBrowser(page);

  let intervalMs = Math.max(100, d.interval * 1000);
  const deadline = Date.now() + d.expiresIn * 1000;
  while (Date.now() < deadline) {
    await sleep(intervalMs);
    const polled = await post(url, "/auth/device/token", { deviceCode: d.deviceCode });
    const b = polled.body as {
      status?: unknown;
      token?: unknown;
      error?: { code?: string; message?: string };
    };
    if (polled.status === 200 && b.status === "approved" && typeof b.token === "string") return b.token;
    if (polled.status === 200 && b.status === "pending") continue;
    if (polled.status === 429) {
      intervalMs += 1000; // the server asked to slow down
      continue;
    }
    if (b.error?.code === "device.denied") throw new CliError("the sign-in was refused in the browser", 1);
    if (b.error?.code === "device.expired")
      throw new CliError("the sign-in request expired: run labfleet login again", 1);
    throw new CliError(`the sign-in failed: ${b.error?.message ?? `HTTP ${polled.status}`}`, 1);
  }
  throw new CliError("the sign-in request expired before anyone approved it: run labfleet login again", 1);
}

async function readPastedToken(): Promise<string> {
  if (process.stdin.isTTY) process.stderr.write("Paste the API token, then press Enter: ");
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) {
    chunks.push(Buffer.from(chunk as Buffer));
    if (process.stdin.isTTY && Buffer.concat(chunks).includes(10)) break;
  }
  const token = Buffer.concat(chunks).toString("utf8").split(/\r?\n/)[0]?.trim() ?? "";
  if (!token) throw new CliError('no token on stdin: echo "$TOKEN" | labfleet login --url URL --token', 2);
  if (/\s/.test(token)) throw new CliError("the token must be one line without spaces", 2);
  return token;
}

/** Who the token is for, which also proves that it works before it is stored. */
async function whoAmI(target: Target): Promise<string> {
  try {
    const me = await new ApiClient(target).call<{ owner: string }>("GET", "/tokens/current");
    return me.owner;
  } catch (err) {
    if (err instanceof CliError && err.exitCode === 3 && !/cannot reach/.test(err.message)) {
      throw new CliError(`that token is not valid at ${target.url}`, 3);
    }
    throw err;
  }
}

async function cmdLogin(args: Args, out: Output): Promise<number> {
  const json = jsonOutput(args);
  const url = loginUrl(args);
  const say = json ? (t: string) => void process.stderr.write(t) : (t: string) => out.write(t);
  const token = args.values.token ? await readPastedToken() : await deviceLogin(url, say);
  const owner = await whoAmI({ url, token });
  const file = writeCredentials({ url, token });
  // Never the token itself, in either form.
  if (json) out.write(jsonText({ url, owner, credentialsFile: file }));
  else
    out.write(`Signed in to ${clean(url)} as ${clean(owner)}. The token is in ${clean(file)} (mode 0600).\n`);
  return 0;
}

/** What became of the stored token on the server: revoked now, unknown to it, refused, or not asked. */
type Revocation = "revoked" | "not_found" | "rejected" | "unreachable";

async function cmdLogout(args: Args, out: Output): Promise<number> {
  const json = jsonOutput(args);
  const file = credentialsFile();
  const stored = readCredentials();
  if (!stored) {
    if (json)
      out.write(
        jsonText({
          wasSignedIn: false,
          url: null,
          revocation: null,
          note: "not signed in",
          credentialsFile: file,
        }),
      );
    else out.write(`Not signed in (no ${clean(file)}).\n`);
    return 0;
  }
  let revocation: Revocation;
  let note: string;
  try {
    const r = await new ApiClient(stored).call<{ revoked: boolean }>("DELETE", "/tokens/current");
    revocation = r.revoked ? "revoked" : "not_found";
    note = r.revoked ? "the token is revoked" : "the server holds no such API token";
  } catch (err) {
    const unreachable = err instanceof CliError && /cannot reach/.test(err.message);
    revocation = unreachable ? "unreachable" : "rejected";
    note = unreachable
      ? `${stored.url} was not reachable, so the token still works until it is revoked (labfleet tokens revoke, or the console)`
      : "the server no longer accepted the token";
  }
  removeCredentials();
  if (json)
    out.write(jsonText({ wasSignedIn: true, url: stored.url, revocation, note, credentialsFile: file }));
  else out.write(`Signed out of ${clean(stored.url)}: ${clean(note)}; removed ${clean(file)}.\n`);
  return 0;
}

interface TokenRow {
  id: string;
  name: string;
  owner: string;
  createdAt: string;
  lastUsedAt?: string;
  expiresAt?: string;
  mine?: boolean;
}

async function cmdTokens(args: Args, out: Output): Promise<number> {
  const sub = args.positionals[1];
  const json = jsonOutput(args);
  const client = new ApiClient(resolveTarget());
  switch (sub) {
    case "list": {
      const { tokens } = await client.call<{ tokens: TokenRow[] }>("GET", "/tokens");
      if (json) out.write(jsonText({ tokens }));
      else if (!tokens.length) out.write("No API tokens.\n");
      else {
        writeTable(
          [
            ["ID", "NAME", "OWNER", "CREATED", "LAST USED", "EXPIRES"],
            ...tokens.map((t) => [
              t.id,
              t.name,
              `${t.owner}${t.mine ? " (you)" : ""}`,
              clock(t.createdAt),
              t.lastUsedAt ? relative(t.lastUsedAt) : "-",
              t.expiresAt ? clock(t.expiresAt) : "never",
            ]),
          ],
          out,
        );
      }
      return 0;
    }
    case "create": {
      const name = args.positionals[2];
      if (!name || args.positionals.length > 3)
        throw new CliError(`${TOKENS_USAGE}\n(quote a NAME with spaces)`, 2);
      let expiresInDays: number | undefined;
      const days = args.values["expires-days"];
      if (days !== undefined) {
        expiresInDays = Number(days);
        if (!Number.isInteger(expiresInDays) || expiresInDays < 1 || expiresInDays > 3650)
          throw new CliError(`--expires-days must be a whole number from 1 to 3650, got ${days}`, 2);
      }
      const r = await client.call<{ token: string; info: TokenRow }>("POST", "/tokens", {
        name,
        ...(expiresInDays ? { expiresInDays } : {}),
      });
      if (json) out.write(jsonText(r));
      else
        out.write(
          `Created ${clean(r.info.id)} (${clean(r.info.name)}${r.info.expiresAt ? `, expires ${clock(r.info.expiresAt)}` : ""}).\nThe token is shown this once; store it now:\n\n${clean(r.token)}\n`,
        );
      return 0;
    }
    case "revoke": {
      const id = args.positionals[2];
      if (!id || args.positionals.length > 3) throw new CliError(TOKENS_USAGE, 2);
      const r = await client.call<{ revoked: TokenRow }>("DELETE", `/tokens/${encodeURIComponent(id)}`);
      if (json) out.write(jsonText(r));
      else out.write(`Revoked ${clean(r.revoked.id)} (${clean(r.revoked.name)}).\n`);
      return 0;
    }
    default:
      throw new CliError(TOKENS_USAGE, 2);
  }
}

export async function run(command: "login" | "logout" | "tokens", args: Args, out: Output): Promise<number> {
  if (command === "login") return cmdLogin(args, out);
  if (command === "logout") return cmdLogout(args, out);
  return cmdTokens(args, out);
}
