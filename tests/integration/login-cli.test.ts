import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { serve } from "@hono/node-server";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { localClient } from "../../cli/local/dynamodb.ts";
import { createToken, instructorAuth, verifyToken } from "../../shared/auth/tokens.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { configure } from "../../shared/runtime/deps.ts";
import { createStore } from "../../shared/store/entities.ts";
import { ensureTable } from "../../shared/store/table.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { clearProviderCache } from "../../web/auth/oidc.ts";
import { type CliResult, cliBin, runCli, startCli } from "../harness/cli.ts";
import { authTestApp, Browser, type FakeOidc, pathOf, signIn, startFakeOidc } from "../harness/fake-oidc.ts";
import { removeDir, tempDir, uniqueTable, waitFor } from "../harness/runtime.ts";

/**
 * `labfleet login` end to end: the CLI (a separate process) against the sign-in routes served on 127.0.0.1,
 * an instructor approving it through HTTP with a console session from the fake OIDC provider.
 */

let oidc: FakeOidc;
let url = "";
let server: ReturnType<typeof serve> | undefined;
const dirs: string[] = [];
const BOOT = randomBytes(24).toString("base64url");

function dir(): string {
  const d = tempDir("labfleet-login-");
  dirs.push(d);
  return d;
}

/** The CLI's environment: its own LABFLEET_HOME, no target from the outside, and never a browser. */
const cliEnv = (home: string, extra: Record<string, string | undefined> = {}) => ({
  LABFLEET_HOME: home,
  LABFLEET_URL: undefined,
  LABFLEET_TOKEN: undefined,
  LABFLEET_DATA_DIR: undefined,
  DISPLAY: undefined,
  WAYLAND_DISPLAY: undefined,
  ...extra,
});

/** runCli with text on stdin (the harness's runCli closes stdin). */
function runCliWithInput(
  args: string[],
  input: string,
  opts: { cwd: string; env: Record<string, string | undefined> },
) {
  return new Promise<CliResult>((resolve, reject) => {
    const child = spawn(process.execPath, [cliBin, ...args], {
      cwd: opts.cwd,
      env: { ...process.env, NO_COLOR: "1", ...opts.env } as NodeJS.ProcessEnv,
      stdio: ["pipe", "pipe", "pipe"],
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d) => (stdout += d));
    child.stderr.on("data", (d) => (stderr += d));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
    child.stdin.end(input);
  });
}

const credentialsOf = (home: string) => join(home, "credentials");

beforeAll(async () => {
  const client = localClient(inject("dynamoEndpoint"));
  const table = uniqueTable();
  await ensureTable(client, table);
  configure({
    store: createStore(client, table),
    clock: { now: () => new Date() },
    providers: {},
    transport: () => {
      throw new Error("no hosts in the login tests");
    },
    workflows: { start: async () => {}, stop: async () => {} },
    secrets: { get: async (keys: string[]) => ({ values: {}, missing: keys }) },
    accessKey: randomBytes(32),
  });
  oidc = await startFakeOidc({ user: { sub: "ada-sub", email: "ada@example.org", email_verified: true } });
  const auth = instructorAuth(bootstrapAuth(BOOT));
  const app = authTestApp(
    {
      oidc: {
        issuer: oidc.issuer,
        clientId: oidc.clientId,
        clientSecret: oidc.clientSecret,
        name: "Fake SSO",
      },
      allow: { emails: ["ada@example.org"] },
      device: { ttlSeconds: 600, intervalSeconds: 0.2, tokenDays: 30 },
    },
    auth,
    createApp({ auth }),
  );
  const port = await new Promise<number>((resolve) => {
    server = serve({ fetch: app.fetch, hostname: "127.0.0.1", port: 0 }, (info: AddressInfo) =>
      resolve(info.port),
    );
  });
  url = `http://127.0.0.1:${port}`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await oidc?.close();
  clearProviderCache();
  for (const d of dirs) removeDir(d);
});

/** Starts `labfleet login --url`, and returns the page and code it prints once it is waiting. */
async function startLogin(home: string, cwd: string) {
  const cli = startCli(["login", "--url", url], { cwd, env: cliEnv(home) });
  const printed = await waitFor(
    "the verify URL and code",
    () => {
      const m =
        /(http:\/\/\S+\/auth\/device\/verify\?code=([A-Z]{4}-[A-Z]{4}))\s[\s\S]*code\s+([A-Z]{4}-[A-Z]{4})/.exec(
          cli.out.stdout,
        );
      return m?.[1] && m[2] && m[3] ? { page: m[1], urlCode: m[2], shownCode: m[3] } : undefined;
    },
    30_000,
  );
  return { cli, ...printed };
}

/** The instructor's browser: signs in through the fake provider and lands on the confirmation page. */
async function confirm(page: string, decision: "approve" | "deny") {
  const browser = new Browser((path, init) => fetch(`${url}${path}`, init));
  const signedIn = await signIn(browser, "oidc", { next: pathOf(page) });
  expect(signedIn.res.status).toBe(302);
  expect(signedIn.location).toBe(pathOf(page));
  const shown = await browser.get(signedIn.location);
  expect(shown.res.status).toBe(200);
  const csrf = /name="_csrf" value="([^"]+)"/.exec(shown.text)?.[1] ?? "";
  const code = new URL(page).searchParams.get("code") ?? "";
  const done = await browser.postForm(
    "/auth/device/verify",
    { _csrf: csrf, code, decision },
    { origin: url },
  );
  expect(done.res.status).toBe(200);
  return shown.text;
}

describe("labfleet login (device flow)", () => {
  it("signs the CLI in once an instructor approves in the browser; the token is stored 0600 and used", async () => {
    const home = join(dir(), "home");
    const cwd = dir();
    const { cli, page, urlCode, shownCode } = await startLogin(home, cwd);
    expect(urlCode).toBe(shownCode);
    expect(existsSync(credentialsOf(home))).toBe(false);

    const pageText = await confirm(page, "approve");
    expect(pageText).toContain(shownCode);
    expect(await cli.exited).toBe(0);
    expect(cli.out.stdout).toContain(`Signed in to ${url} as oidc:ada-sub`);

    const file = credentialsOf(home);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    expect(statSync(home).mode & 0o777).toBe(0o700);
    const stored = JSON.parse(readFileSync(file, "utf8"));
    expect(Object.keys(stored).sort()).toEqual(["token", "url"]);
    expect(stored.url).toBe(url);
    expect(stored.token).toMatch(/^lf_[A-Za-z0-9_-]{43}$/);
    // Never on the screen.
    expect(cli.out.stdout + cli.out.stderr).not.toContain(stored.token);
    expect((await verifyToken(stored.token))?.id).toBe("oidc:ada-sub");

    // Commands now find the API through the credentials file.
    const listed = await runCli(["tokens", "list", "--output", "json"], { cwd, env: cliEnv(home) });
    expect(listed.code).toBe(0);
    const tokens = JSON.parse(listed.stdout).tokens as { name: string; owner: string; mine: boolean }[];
    expect(tokens).toContainEqual(
      expect.objectContaining({
        owner: "oidc:ada-sub",
        mine: true,
        name: expect.stringMatching(/^labfleet login \(labfleet CLI/),
      }),
    );
    const status = await runCli(["status", "no-such-workshop"], { cwd, env: cliEnv(home) });
    expect(status.code).toBe(1); // the API answered (not 3: unreachable or refused)
    expect(status.stderr).toContain("no workshop named no-such-workshop");

    // LABFLEET_URL + LABFLEET_TOKEN come before the credentials file.
    const overridden = await runCli(["tokens", "list"], {
      cwd,
      env: cliEnv(home, { LABFLEET_URL: "http://127.0.0.1:9", LABFLEET_TOKEN: "x" }),
    });
    expect(overridden.code).toBe(3);
    expect(overridden.stderr).toContain("http://127.0.0.1:9");

    // logout revokes the token on the server and removes the file.
    const out = await runCli(["logout"], { cwd, env: cliEnv(home) });
    expect(out.code).toBe(0);
    expect(out.stdout).toContain("the token is revoked");
    expect(existsSync(file)).toBe(false);
    expect(await verifyToken(stored.token)).toBeUndefined();
    const after = await runCli(["tokens", "list"], { cwd, env: cliEnv(home) });
    expect(after.code).toBe(3);
    expect(after.stderr).toContain("labfleet login");
    expect((await runCli(["logout"], { cwd, env: cliEnv(home) })).stdout).toContain("Not signed in");
  });

  it("stops with a clear message when the instructor refuses", async () => {
    const home = join(dir(), "home");
    const { cli, page } = await startLogin(home, dir());
    await confirm(page, "deny");
    expect(await cli.exited).toBe(1);
    expect(cli.out.stderr).toContain("refused in the browser");
    expect(existsSync(credentialsOf(home))).toBe(false);
  });
});

describe("labfleet login --token", () => {
  it("stores a pasted token after checking it with the server, and refuses one the server does not know", async () => {
    const { token } = await withActor({ type: "instructor", id: "oidc:ada-sub" }, () =>
      createToken({ name: "pasted" }),
    );
    const home = join(dir(), "home");
    const cwd = dir();
    const ok = await runCliWithInput(["login", "--url", `${url}/`, "--token"], `${token}\n`, {
      cwd,
      env: cliEnv(home),
    });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("as oidc:ada-sub");
    expect(ok.stdout + ok.stderr).not.toContain(token);
    expect(JSON.parse(readFileSync(credentialsOf(home), "utf8"))).toEqual({ url, token });
    expect(statSync(credentialsOf(home)).mode & 0o777).toBe(0o600);

    // The credentials file comes before the local runtime's file.
    mkdirSync(join(cwd, ".labfleet"));
    writeFileSync(
      join(cwd, ".labfleet", "runtime.json"),
      JSON.stringify({ url: "http://127.0.0.1:9", token: "x" }),
    );
    expect((await runCli(["tokens", "list"], { cwd, env: cliEnv(home) })).code).toBe(0);

    const otherHome = join(dir(), "home");
    const bad = await runCliWithInput(["login", "--url", url, "--token"], `lf_${"A".repeat(43)}\n`, {
      cwd,
      env: cliEnv(otherHome),
    });
    expect(bad.code).toBe(3);
    expect(bad.stderr).toContain("not valid");
    expect(existsSync(credentialsOf(otherHome))).toBe(false);
  });
});
