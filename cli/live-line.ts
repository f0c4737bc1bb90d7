import type { ApiClient } from "./client.ts";
import { clean, type Output, timeLeftText } from "./render.ts";

/** What the `labfleet dev` terminal keeps showing once the labs are up. */
export interface LiveFacts {
  /** The workshop's state: once torn down, the line says so and nothing else. */
  state?: string;
  ready: number;
  total: number;
  claimed?: number;
  free?: number;
  waiting?: number;
  expiry?: string;
  code?: string;
  claiming?: string;
}

/** One line: "live · 3/3 ready · 1 claimed · 2 free · 5 h 58 min left, torn down at 12:43 · code LAB-...". */
export function liveText(f: LiveFacts, now = Date.now()): string {
  if (f.state === "torn_down") return "live · torn down";
  return [
    "live",
    `${f.ready}/${f.total} ready`,
    ...(f.claimed !== undefined ? [`${f.claimed} claimed`, `${f.free ?? 0} free`] : []),
    ...(f.waiting ? [`${f.waiting} waiting`] : []),
    ...(f.expiry ? [timeLeftText(f.expiry, now)] : []),
    ...(f.code
      ? [
          `code ${clean(f.code)}${f.claiming && f.claiming !== "open" ? ` (claiming ${clean(f.claiming)})` : ""}`,
        ]
      : []),
  ].join(" · ");
}

/** The facts, read from the API: the workshop's status, the portal's board and its code (when it has one). */
export async function readLive(client: ApiClient, name: string): Promise<LiveFacts> {
  const path = `/workshops/${encodeURIComponent(name)}`;
  const [s, portal, info] = await Promise.all([
    client.status(name),
    client
      .call<{ labs: { status: string }[]; waiting: unknown[] }>("GET", `${path}/portal/status`)
      .catch(() => undefined),
    client.call<{ code: string; state: string }>("GET", `${path}/portal/info`).catch(() => undefined),
  ]);
  const live = s.hostList.filter((h) => h.state !== "torn_down");
  return {
    state: s.state,
    ready: live.filter((h) => h.state === "ready").length,
    total: live.length,
    ...(portal
      ? {
          // Both from the board, which judges each lab against one read of the claims: the response's claim
          // list is read apart from it, and a claim landing between the two reads would count twice.
          claimed: portal.labs.filter((l) => l.status === "claimed").length,
          free: portal.labs.filter((l) => l.status === "free").length,
          waiting: portal.waiting.length,
        }
      : {}),
    ...(s.expiry ? { expiry: s.expiry } : {}),
    ...(info ? { code: info.code, claiming: info.state } : {}),
  };
}

/**
 * Keeps the live line current until `stop` resolves: on a terminal it is redrawn in place every interval;
 * off a terminal a line is printed when something other than the passing of time changed (labs ready,
 * claims, free labs, the code, the teardown time after an extend). A read that fails (the runtime is
 * stopping, the store is away) keeps the last line.
 */
export async function runLiveLine(
  client: ApiClient,
  name: string,
  out: Output,
  stop: Promise<void>,
  intervalMs = 2000,
): Promise<void> {
  let stopped = false;
  void stop.then(() => {
    stopped = true;
  });
  let lastKey = "";
  while (!stopped) {
    const facts = await readLive(client, name).catch(() => undefined);
    if (stopped) break;
    if (facts) {
      const text = liveText(facts);
      if (out.isTTY) {
        out.write(`\r\u001b[2K${text}`); // the stopping note starts on a new line
      } else {
        const key = JSON.stringify(facts); // the expiry itself moves only with extend
        if (key !== lastKey) out.write(`${text}\n`);
        lastKey = key;
      }
    }
    await Promise.race([new Promise((r) => setTimeout(r, intervalMs)), stop]);
  }
}
