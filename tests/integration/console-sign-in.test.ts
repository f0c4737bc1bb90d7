import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SIGN_IN_LIMITS } from "../../shared/auth/sign-in-limit.ts";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { SESSION_COOKIE } from "../../web/console/session.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import { movableClock, removeDir, testRuntime } from "../harness/runtime.ts";

/**
 * The console's token sign-in is throttled: failures are counted per address and overall in the store, a
 * refusal is a 429 with Retry-After, and a right token from an address without failures always signs in.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const TOKEN = "sign-in-suite-token-4b1d9c0e7f2a";
const clock = movableClock();
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const logs: string[] = [];

/** A browser at an address: a cookie jar and the sign-in form's CSRF value. */
class Browser {
  readonly jar = new Map<string, string>();
  csrf = "";
  constructor(readonly address: string) {}
  private env() {
    return { incoming: { socket: { remoteAddress: this.address } } };
  }
  private async take(res: Response) {
    storeCookies(this.jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { res, status: res.status, text };
  }
  async signIn(token: string) {
    if (!this.csrf)
      await this.take(
        await app.request("http://localhost/console/login", { headers: cookieHeader(this.jar) }, this.env()),
      );
    return this.take(
      await app.request(
        "http://localhost/console/login",
        {
          method: "POST",
          headers: {
            ...cookieHeader(this.jar),
            "content-type": "application/x-www-form-urlencoded",
            origin: "http://localhost",
          },
          body: new URLSearchParams({ _csrf: this.csrf, token }),
        },
        this.env(),
      ),
    );
  }
}

/** Keeps the test inside one window and the next, so counts cannot fall out mid-test. */
function roomInWindow() {
  const windowMs = SIGN_IN_LIMITS.windowSeconds * 1000;
  const left = windowMs - (clock.now().getTime() % windowMs);
  if (left < 120_000) clock.advance(left + 1000);
}

beforeAll(async () => {
  setLogSink((line) => logs.push(line), "debug");
  rt = await testRuntime({ token: TOKEN, clock });
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("console sign-in throttling", () => {
  it("answers 429 with Retry-After after 10 wrong tokens from an address; the right token works from another", async () => {
    roomInWindow();
    const guesser = new Browser("203.0.113.66");
    for (let i = 0; i < SIGN_IN_LIMITS.perAddress; i++) {
      const r = await guesser.signIn(`wrong-token-${i}-0123456789abcdef`);
      expect(r.status, `attempt ${i + 1}`).toBe(401);
      expect(r.text).toContain("That is not a valid instructor token");
    }
    const held = await guesser.signIn(`wrong-token-x-0123456789abcdef`);
    expect(held.status).toBe(429);
    expect(held.text).toContain("Too many failed sign-ins from your address. Try again in");
    const retry = Number(held.res.headers.get("retry-after"));
    expect(retry).toBeGreaterThan(0);
    expect(retry).toBeLessThanOrEqual(2 * SIGN_IN_LIMITS.windowSeconds);
    // Refused before the token is looked at: even the right one, from this address.
    const right = await guesser.signIn(TOKEN);
    expect(right.status).toBe(429);
    expect(guesser.jar.has(SESSION_COOKIE)).toBe(false);

    // The instructor, from another address, signs in at once.
    const instructor = new Browser("198.51.100.20");
    const ok = await instructor.signIn(TOKEN);
    expect(ok.status).toBe(303);
    expect(ok.res.headers.get("location")).toBe("/console");
    expect(instructor.jar.has(SESSION_COOKIE)).toBe(true);

    // The hold lifts by itself once the failures fall out of both windows.
    clock.advance(2 * SIGN_IN_LIMITS.windowSeconds * 1000);
    const later = await new Browser("203.0.113.66").signIn(TOKEN);
    expect(later.status).toBe(303);
  });

  it("past 100 failures overall, holds back addresses with 3 failures; an address without failures signs in", async () => {
    roomInWindow();
    // A guesser spread over many addresses, two failures each: none is held back by its own count.
    const spread = Array.from({ length: SIGN_IN_LIMITS.overall / 2 }, (_, i) => `10.66.${i >> 8}.${i & 255}`);
    for (const address of spread) {
      const b = new Browser(address);
      expect((await b.signIn("wrong-token-aaaaaaaaaaaaaaaa")).status).toBe(401);
      expect((await b.signIn("wrong-token-bbbbbbbbbbbbbbbb")).status).toBe(401);
    }
    // Past the overall limit, each may fail once more (its third), then waits: even with the right token.
    const one = new Browser(spread[0] as string);
    expect((await one.signIn("wrong-token-cccccccccccccccc")).status).toBe(401);
    expect((await one.signIn("wrong-token-dddddddddddddddd")).status).toBe(429);
    expect((await one.signIn(TOKEN)).status).toBe(429);
    // The instructor's address has no failures: it signs in.
    expect((await new Browser("198.51.100.21").signIn(TOKEN)).status).toBe(303);
    // One who mistyped once or twice also still gets in.
    const typo = new Browser("198.51.100.22");
    expect((await typo.signIn("wrong-token-eeeeeeeeeeeeeeee")).status).toBe(401);
    expect((await typo.signIn(TOKEN)).status).toBe(303);
  });

  it("never writes a token to a log line", () => {
    expect(logs.some((l) => l.includes("console sign-in refused"))).toBe(true);
    expect(logs.some((l) => l.includes("console sign-in held back"))).toBe(true);
    for (const line of logs) {
      expect(line).not.toContain(TOKEN);
      expect(line).not.toMatch(/wrong-token-/);
    }
  });
});
