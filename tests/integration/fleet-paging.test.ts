import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { recordEvent } from "../../shared/fleet/events.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { MAX_WORKSHOP_HOSTS } from "../../shared/workshop/limits.ts";
import { FleetViewSchema } from "../../web/api/fleet-view.ts";
import { runCli } from "../harness/cli.ts";
import { ConsoleClient, pageText } from "../harness/console-client.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * A conference-sized workshop through the instructor API and the CLI, on the real local runtime: 500 labs'
 * records (as a run leaves them: ready, building, failed) and more events than one page holds. The fleet view
 * answers a bounded page at a time with a cursor, every lab exactly once in host order, the counts the whole
 * fleet's; bad paging input is a 400 naming the field; `labfleet events` follows the pages.
 */

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
const WS = "paging";
const HOSTS = MAX_WORKSHOP_HOSTS;
const EVENTS = 1_100;
const id = (n: number) => `student-${String(n).padStart(3, "0")}`;
const stateOf = (n: number) => (n % 10 === 0 ? "failed" : n % 3 === 0 ? "deploying" : "ready");

async function api(path: string): Promise<{ status: number; json: unknown; bytes: number }> {
  const res = await fetch(`${rt.url}/api/workshops${path}`, {
    headers: { authorization: `Bearer ${rt.token}` },
  });
  const text = await res.text();
  return { status: res.status, json: JSON.parse(text), bytes: Buffer.byteLength(text) };
}

beforeAll(async () => {
  work = tempDir("labfleet-paging-");
  const home = join(work, "operator-home");
  mkdirSync(home, { recursive: true });
  rt = await testRuntime({ dataDir: join(work, ".labfleet"), labfleetHome: home });
  const res = await fetch(`${rt.url}/api/workshops`, {
    method: "POST",
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    body: JSON.stringify({ yaml: workshopYaml({ name: WS, count: HOSTS }) }),
  });
  expect(res.status).toBe(201);
  const { store } = useDeps();
  const at = new Date().toISOString();
  const hosts = Array.from({ length: HOSTS }, (_, i) => ({
    workshop: WS,
    hostId: id(i + 1),
    state: stateOf(i + 1),
    provider: "local",
    createdAt: at,
    updatedAt: at,
    ...(stateOf(i + 1) === "failed" ? { error: "setup exited 1" } : {}),
  })) as Parameters<typeof store.host.put>[0] & unknown[];
  await store.host.put(hosts).go({ concurrency: 4 });
  await withActor({ type: "system", id: "test" }, async () => {
    for (let i = 0; i < EVENTS; i++)
      await recordEvent({ workshop: WS, type: "host.ready", hostId: id((i % HOSTS) + 1) });
  });
}, 180_000);

afterAll(async () => {
  await rt?.close();
  if (work) removeDir(work);
});

describe("paging at 500 labs", { timeout: 120_000 }, () => {
  it("the fleet view answers 100 labs a page with a cursor, every lab once and in order, the counts whole", async () => {
    const seen: string[] = [];
    let cursor: string | null = null;
    let pages = 0;
    do {
      const r = await api(`/${WS}/fleet${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ""}`);
      expect(r.status, JSON.stringify(r.json)).toBe(200);
      const page = FleetViewSchema.parse(r.json);
      pages++;
      expect(page.page.limit).toBe(100);
      expect(page.labs.length).toBeLessThanOrEqual(100);
      // Bounded: a page of 100 labs stays small, whatever the fleet's size.
      expect(r.bytes).toBeLessThan(64 * 1024);
      expect(page.counts).toMatchObject({ total: HOSTS, failed: 50, building: 150, ready: 300 });
      expect(page.page.start).toBe(seen.length);
      // The previous page's cursor leads back to it ("" is the first page).
      if (seen.length === 0) expect(page.page.prev).toBeNull();
      else {
        const back = FleetViewSchema.parse(
          (await api(`/${WS}/fleet${page.page.prev ? `?cursor=${encodeURIComponent(page.page.prev)}` : ""}`))
            .json,
        );
        expect(back.labs[0]?.id).toBe(seen[seen.length - 100]);
      }
      seen.push(...page.labs.map((l) => l.id));
      cursor = page.page.next;
    } while (cursor !== null);
    expect(pages).toBe(5);
    expect(seen).toEqual(Array.from({ length: HOSTS }, (_, i) => id(i + 1)));
  });

  it("takes up to 500 labs in one page, and two pages of 250 split the fleet at the cursor", async () => {
    const all = await api(`/${WS}/fleet?limit=500`);
    expect(all.status).toBe(200);
    const page = FleetViewSchema.parse(all.json);
    expect(page.labs).toHaveLength(HOSTS);
    expect(page.page).toEqual({ limit: 500, start: 0, next: null, prev: null });
    expect(page.labs[9]).toMatchObject({ id: "student-010", state: "failed", error: "setup exited 1" });

    const tail = FleetViewSchema.parse((await api(`/${WS}/fleet?limit=250`)).json);
    expect(tail.labs.at(-1)?.id).toBe("student-250");
    const rest = FleetViewSchema.parse(
      (await api(`/${WS}/fleet?limit=250&cursor=${encodeURIComponent(tail.page.next ?? "")}`)).json,
    );
    expect(rest.labs.map((l) => l.id)).toEqual(Array.from({ length: 250 }, (_, i) => id(i + 251)));
    expect(rest.page).toMatchObject({ start: 250, next: null, prev: "" });
  });

  it("refuses a limit out of range and a cursor it did not make with a 400 naming the field", async () => {
    for (const [query, field, message] of [
      ["limit=0", "limit", "expected 1 to 500"],
      ["limit=501", "limit", "expected 1 to 500"],
      ["limit=ten", "limit", "expected a number of labs, 1 to 500"],
      ["cursor=not-a-cursor!", "cursor", "expected the page.next of an earlier page"],
    ] as const) {
      const r = await api(`/${WS}/fleet?${query}`);
      expect(r.status, query).toBe(400);
      const body = r.json as { error: { kind: string; details: { path: string; message: string }[] } };
      expect(body.error.kind).toBe("input");
      expect(body.error.details).toContainEqual(expect.objectContaining({ path: field, message }));
    }
  });

  it("the console's fleet table shows 100 labs a page with links to the others, live updates of the same page", async () => {
    const web = new ConsoleClient(rt.url);
    await web.signIn(rt.token);
    const rows = (html: string) => [...html.matchAll(/<tr id="host-([^"]+)"/g)].map((m) => m[1]);
    const first = await web.get(`/console/w/${WS}`);
    expect(first.status).toBe(200);
    expect(rows(first.text)).toEqual(Array.from({ length: 100 }, (_, i) => id(i + 1)));
    expect(pageText(first.text)).toContain("Labs 1 to 100 of 500.");
    const next = /<a href="([^"]+)" rel="next">/.exec(first.text)?.[1]?.replace(/&amp;/g, "&");
    expect(next).toMatch(/^\/console\/w\/paging\?labs=/);
    const second = await web.get(next as string);
    expect(rows(second.text)).toEqual(Array.from({ length: 100 }, (_, i) => id(i + 101)));
    expect(pageText(second.text)).toContain("Labs 101 to 200 of 500.");
    expect(second.text).toMatch(/<a href="\/console\/w\/paging" rel="prev">/);
    // The page's live updates ask for its own labs.
    const liveUrl = /data-live="([^"]+)"/.exec(second.text)?.[1]?.replace(/&amp;/g, "&") as string;
    expect(liveUrl).toContain("labs=");
    const live = JSON.parse((await web.get(liveUrl)).text) as { regions: Record<string, string> };
    expect(rows(live.regions["live-hosts"] ?? "")).toEqual(
      Array.from({ length: 100 }, (_, i) => id(i + 101)),
    );
    expect(pageText(live.regions["live-pager"] ?? "")).toContain("Labs 101 to 200 of 500.");
  });

  it("the workshop's status (what labfleet status reads) lists every host in a bounded answer", async () => {
    const r = await api(`/${WS}`);
    expect(r.status).toBe(200);
    const body = r.json as { hostList: { id: string }[]; hosts: Record<string, number> };
    expect(body.hostList).toHaveLength(HOSTS);
    expect(body.hosts).toMatchObject({ total: HOSTS, ready: 300, failed: 50 });
    // 500 hosts' rows, far inside Lambda's 6 MB response limit.
    expect(r.bytes).toBeLessThan(512 * 1024);
  });

  it("labfleet events follows the pages: every event, oldest first, none twice", async () => {
    const r = await runCli(["events", WS, "--output", "json"], {
      env: { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token },
    });
    expect(r.code, r.stderr).toBe(0);
    const out = JSON.parse(r.stdout) as { events: { id: string; type: string }[]; last: string };
    const ready = out.events.filter((e) => e.type === "host.ready");
    expect(ready).toHaveLength(EVENTS);
    const ids = out.events.map((e) => e.id);
    expect(new Set(ids).size).toBe(ids.length);
    expect([...ids].sort()).toEqual(ids);
    expect(out.last).toBe(ids.at(-1));
  });
});
