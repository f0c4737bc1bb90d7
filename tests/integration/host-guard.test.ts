import { existsSync, readFileSync } from "node:fs";
import { request } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import { startCli } from "../harness/cli.ts";
import { removeDir, tempDir, uniqueTable, waitFor } from "../harness/runtime.ts";

/**
 * DNS rebinding: a page on another site points its own name at 127.0.0.1 and talks to the local runtime
 * as if it were its own origin. Its requests carry that name in Host; `labfleet dev` (a real process) must
 * refuse them before any route runs, on the API, the console and the portal, and still answer its own names.
 */

const PUBLIC = "labs.example.test";
const dataDir = tempDir("labfleet-hostguard-");
let dev: ReturnType<typeof startCli>;
let port = 0;
let token = "";

interface Answer {
  status: number;
  type: string;
  body: string;
}

/** One request to the runtime on 127.0.0.1 with the Host header a browser would send for `host`. */
function send(
  host: string,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  body?: string,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, method, path, headers: { ...headers, host } }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d) => (text += d));
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, type: String(res.headers["content-type"] ?? ""), body: text }),
      );
    });
    req.on("error", reject);
    req.end(body);
  });
}

beforeAll(async () => {
  dev = startCli(["dev", "--data-dir", dataDir, "--port", "0"], {
    env: {
      LABFLEET_DYNAMODB_ENDPOINT: inject("dynamoEndpoint"),
      LABFLEET_TABLE: uniqueTable(),
      LABFLEET_PUBLIC_URL: `https://${PUBLIC}`,
    },
  });
  const info = await waitFor(
    "the runtime",
    () => {
      const file = join(dataDir, "runtime.json");
      return existsSync(file)
        ? (JSON.parse(readFileSync(file, "utf8")) as { url: string; token: string })
        : undefined;
    },
    60_000,
  );
  port = Number(new URL(info.url).port);
  token = info.token;
});

afterAll(async () => {
  if (dev?.child.exitCode === null) {
    dev.child.kill("SIGTERM");
    await dev.exited;
  }
  removeDir(dataDir);
});

/** Names a rebinding page could send: its own, and look-alikes of the runtime's. */
const rebinding = () => [
  `rebind.attacker.example:${port}`,
  "127.0.0.1.attacker.example",
  `localhost.attacker.example:${port}`,
  "lab.example.test",
  `${PUBLIC}.attacker.example`,
];

describe("the Host header", () => {
  it("refuses another name with 421 on the API, the console and the portal, before any route runs", async () => {
    for (const host of rebinding()) {
      const calls: [string, string, Record<string, string>?, string?][] = [
        ["GET", "/api/health"],
        ["GET", "/api/workshops", { authorization: `Bearer ${token}` }],
        ["GET", "/console/login"],
        ["POST", "/console/login", { "content-type": "application/x-www-form-urlencoded" }, `token=${token}`],
        ["GET", "/"],
        [
          "POST",
          "/code",
          { "content-type": "application/x-www-form-urlencoded" },
          "code=LAB-AAAAAA-20261130",
        ],
        ["GET", "/no-such-page"],
      ];
      for (const [method, path, headers, body] of calls) {
        const r = await send(host, method, path, headers, body);
        expect(r.status, `${host} ${method} ${path}`).toBe(421);
        expect(r.type).toMatch(/^text\/plain/);
        expect(r.body).toContain("421 Misdirected Request: this labfleet runtime answers only for");
        expect(r.body).toContain(PUBLIC);
        // Nothing of the instructor's side leaks into the answer (no token, no workshop, no cookie).
        expect(r.body).not.toContain(token);
      }
    }
  });

  it("answers its own names: 127.0.0.1, localhost, [::1] (any port) and LABFLEET_PUBLIC_URL's host", async () => {
    for (const host of [
      `127.0.0.1:${port}`,
      `localhost:${port}`,
      `[::1]:${port}`,
      "127.0.0.1",
      PUBLIC,
      `${PUBLIC}:443`,
    ]) {
      const health = await send(host, "GET", "/api/health");
      expect(health.status, host).toBe(200);
      expect(JSON.parse(health.body).ok, host).toBe(true);
      const api = await send(host, "GET", "/api/workshops", { authorization: `Bearer ${token}` });
      expect(api.status, host).toBe(200);
      const login = await send(host, "GET", "/console/login");
      expect(login.status, host).toBe(200);
      expect(login.body).toContain('name="token"');
      const front = await send(host, "GET", "/");
      expect(front.status, host).toBe(200);
      expect(front.body).toContain('name="code"');
    }
  });
});
