import { execFile } from "node:child_process";
import { createHmac, randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  AGENT_HEADERS,
  canonicalString,
  SHELL_SIGNER,
  signatureMatches,
  signCall,
  signedHeaders,
} from "../../shared/agent/signing.ts";
import { tempDir } from "../harness/runtime.ts";

/** Runs bash with SHELL_SIGNER loaded; the secret travels in the environment only. */
function bash(script: string, env: Record<string, string>, stdin = ""): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      "bash",
      ["-c", `${SHELL_SIGNER}\n${script}`],
      { env: { PATH: process.env.PATH ?? "", ...env } },
      (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
    );
    child.stdin?.end(stdin);
  });
}

const parts = {
  method: "POST",
  path: "/agent/v1/poll",
  body: '{"a":1}',
  timestamp: 1_800_000_000,
  nonce: "n".repeat(16),
};

describe("signed calls", () => {
  it("signs the canonical string with HMAC-SHA256 keyed by the secret", () => {
    const secret = randomBytes(32).toString("hex");
    expect(canonicalString(parts).split("\n")).toEqual([
      "POST",
      "/agent/v1/poll",
      "015abd7f5cc57a2dd94b7590f04ad8084273905ee33ec5cebeae62276a97f862",
      "1800000000",
      "nnnnnnnnnnnnnnnn",
    ]);
    expect(signCall(secret, parts)).toBe(
      createHmac("sha256", secret).update(canonicalString(parts)).digest("hex"),
    );
  });

  it("matches only the secret and the exact call that was signed", () => {
    const secret = randomBytes(32).toString("hex");
    const other = randomBytes(32).toString("hex");
    const sig = signCall(secret, parts);
    expect(signatureMatches([secret], parts, sig)).toBe(true);
    expect(signatureMatches([other, secret], parts, sig)).toBe(true);
    expect(signatureMatches([other], parts, sig)).toBe(false);
    expect(signatureMatches([secret], { ...parts, body: '{"a":2}' }, sig)).toBe(false);
    expect(signatureMatches([secret], { ...parts, path: "/agent/v1/result" }, sig)).toBe(false);
    expect(signatureMatches([secret], { ...parts, timestamp: parts.timestamp + 1 }, sig)).toBe(false);
    expect(signatureMatches([secret], { ...parts, nonce: "m".repeat(16) }, sig)).toBe(false);
    expect(signatureMatches([secret], parts, "not-hex")).toBe(false);
  });

  it("computes the same HMAC in bash as in Node, for a host secret and a short key", async () => {
    for (const secret of [randomBytes(32).toString("hex"), "abc"]) {
      const message = "POST\n/agent/v1/poll\nabc\n1\nnonce";
      const out = await bash('labfleet_hmac "$MESSAGE"', { LABFLEET_HOST_SECRET: secret, MESSAGE: message });
      expect(out.trim()).toBe(createHmac("sha256", secret).update(message).digest("hex"));
    }
  });

  describe("labfleet_signed_curl against a server that checks the signature", () => {
    const secret = randomBytes(32).toString("hex");
    let server: Server;
    let base: string;
    const seen: { headers: Record<string, string | string[] | undefined>; body: string; ok: boolean }[] = [];
    beforeAll(async () => {
      server = createServer((req, res) => {
        let body = "";
        req.on("data", (c) => (body += c));
        req.on("end", () => {
          const h = (n: string) => String(req.headers[n] ?? "");
          const ok = signatureMatches(
            [secret],
            {
              method: req.method ?? "",
              path: req.url ?? "",
              body,
              timestamp: Number(h(AGENT_HEADERS.timestamp)),
              nonce: h(AGENT_HEADERS.nonce),
            },
            h(AGENT_HEADERS.signature),
          );
          seen.push({ headers: req.headers, body, ok });
          res.writeHead(ok ? 200 : 401, { "content-type": "application/json" });
          res.end(JSON.stringify({ ok }));
        });
      });
      await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
      base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    afterAll(() => new Promise<void>((r) => server.close(() => r())));

    it("sends a call the server accepts, with the host named and a fresh nonce each time", async () => {
      const dir = tempDir();
      const file = join(dir, "body.json");
      writeFileSync(file, '{"phase":"install","state":"running"}\n');
      const env = {
        LABFLEET_API: base,
        LABFLEET_WORKSHOP: "ws",
        LABFLEET_HOST_ID: "student-01",
        LABFLEET_HOST_SECRET: secret,
      };
      const out1 = await bash(`labfleet_signed_curl POST /agent/v1/progress ${file}`, env);
      const out2 = await bash(`labfleet_signed_curl POST /agent/v1/progress?x=1 ${file}`, env);
      // a bash without $SRANDOM (before 5.1) takes its nonce from /dev/urandom with od
      const out3 = await bash(`unset SRANDOM; labfleet_signed_curl POST /agent/v1/progress ${file}`, env);
      expect(JSON.parse(out1)).toEqual({ ok: true });
      expect(JSON.parse(out2)).toEqual({ ok: true });
      expect(JSON.parse(out3)).toEqual({ ok: true });
      expect(seen.map((s) => s.headers[AGENT_HEADERS.host])).toEqual([
        "ws/student-01",
        "ws/student-01",
        "ws/student-01",
      ]);
      const nonces = seen.map((s) => s.headers[AGENT_HEADERS.nonce]);
      for (const n of nonces) expect(n).toMatch(/^[0-9a-f]{32}$/);
      expect(new Set(nonces).size).toBe(3);
      expect(seen[0]?.body).toBe('{"phase":"install","state":"running"}\n');
    });

    it("is refused by the server with a wrong secret, and curl then fails", async () => {
      const dir = tempDir();
      const file = join(dir, "body.json");
      writeFileSync(file, "{}");
      const env = {
        LABFLEET_API: base,
        LABFLEET_WORKSHOP: "ws",
        LABFLEET_HOST_ID: "student-01",
        LABFLEET_HOST_SECRET: "0".repeat(64),
      };
      await expect(bash(`labfleet_signed_curl POST /agent/v1/progress ${file}`, env)).rejects.toThrow();
      expect(seen.at(-1)?.ok).toBe(false);
    });
  });

  it("builds the four headers a host sends", () => {
    const h = signedHeaders("ws", "h1", "s".repeat(64), parts);
    expect(Object.keys(h).sort()).toEqual(Object.values(AGENT_HEADERS).sort());
    expect(h[AGENT_HEADERS.host]).toBe("ws/h1");
  });
});
