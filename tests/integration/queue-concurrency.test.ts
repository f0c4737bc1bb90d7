import { performance } from "node:perf_hooks";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { labForLink } from "../../shared/portal/claims.ts";
import { emailHash } from "../../shared/portal/codes.ts";
import { listClaims, openPortal, releaseLab } from "../../shared/portal/portal.ts";
import { serveQueue, waitingCount } from "../../shared/portal/queue.ts";
import { forgetStudentReads } from "../../shared/portal/reads.ts";
import { claimOrWait, waitingForLink } from "../../shared/portal/waiting.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { pause } from "../../shared/runtime/concurrency.ts";
import { removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * 300 students for 50 labs and a line, while the instructor releases labs and new hosts become ready: no lab
 * to two, no email twice, everyone in a lab or in line, and nobody served after someone who joined later.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

const W = "crowd";
const STUDENTS = 300;
const READY = 50;
const ADDED = 10;
const RELEASED = 10;
const WAVE = 50;
const hostId = (i: number) => `student-${String(i).padStart(2, "0")}`;

beforeAll(async () => {
  rt = await testRuntime();
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

async function putHost(i: number, state: "ready" | "deploying") {
  const now = new Date().toISOString();
  await rt.store.host
    .put({ workshop: W, hostId: hostId(i), provider: "local", state, createdAt: now, updatedAt: now })
    .go();
}

interface Arrival {
  email: string;
  start: number;
  end: number;
  token: string;
}

describe("a room bigger than the fleet", () => {
  it("300 students, 50 labs, labs released and added meanwhile: nobody skipped, nothing twice", async () => {
    await asInstructor(() =>
      submitWorkshop(`${workshopYaml({ name: W, count: READY + ADDED })}portal:\n  enabled: true\n`),
    );
    for (let i = 1; i <= READY + ADDED; i++) await putHost(i, i <= READY ? "ready" : "deploying");
    await asInstructor(() => openPortal(W));

    const arrivals: Arrival[] = [];
    const released: { email: string; claimedAt: string; how: string }[] = [];
    let done = 0;
    const students = Promise.all(
      Array.from({ length: STUDENTS }, async (_, i) => {
        // The room arrives in waves of WAVE students at once; each wave comes while the one before is still
        // being answered (once half of it has its answer), so arrivals overlap with each other, with the
        // releases and the new hosts, and early students are in line before later ones arrive.
        const wave = Math.floor(i / WAVE);
        const deadline = Date.now() + 120_000;
        while (done < wave * (WAVE / 2) && Date.now() < deadline) await pause(10);
        const email = `s${i}@example.test`;
        const start = performance.now();
        const r = await claimOrWait(
          W,
          { name: `Student ${i}`, email, pin: "503917" },
          `10.4.${Math.floor(i / 200)}.${i % 200}`,
        );
        arrivals.push({ email, start, end: performance.now(), token: r.token });
        done++;
      }),
    );
    // While they arrive: the instructor releases labs, and hosts that were building become ready (what
    // pollFleet does when a host passes its health check: the host record, then a serving pass).
    const churn = (async () => {
      for (let k = 0; k < Math.max(RELEASED, ADDED); k++) {
        const target = ((k + 1) * STUDENTS) / (Math.max(RELEASED, ADDED) + 2);
        const deadline = Date.now() + 60_000;
        while (done < target && Date.now() < deadline) await pause(20);
        if (k < RELEASED) {
          const claims = await asInstructor(() => listClaims(W));
          const c = claims[(k * 7) % claims.length];
          if (c) {
            await asInstructor(() => releaseLab(W, c.lab));
            released.push({ email: c.email, claimedAt: c.claimedAt, how: c.how });
          }
        }
        if (k < ADDED) {
          await putHost(READY + k + 1, "ready");
          forgetStudentReads(W);
          await serveQueue(W);
        }
      }
    })();
    await Promise.all([students, churn]);
    forgetStudentReads(W);
    await serveQueue(W);

    // No lab to two and no email twice, in every record that says who holds what.
    const claims = await asInstructor(() => listClaims(W));
    const [emails, qEmails, qEntries] = await Promise.all([
      rt.store.claimEmail.query.byWorkshop({ workshop: W }).go({ pages: "all" }),
      rt.store.queueEmail.query.byWorkshop({ workshop: W }).go({ pages: "all" }),
      rt.store.queueEntry.query.byWorkshop({ workshop: W }).go({ pages: "all" }),
    ]);
    expect(claims).toHaveLength(READY + ADDED);
    expect(new Set(claims.map((c) => c.lab)).size).toBe(claims.length);
    expect(new Set(claims.map((c) => c.email)).size).toBe(claims.length);
    expect(emails.data).toHaveLength(claims.length);
    const holding = new Set(claims.map((c) => emailHash(W, c.email)));
    expect(qEmails.data.filter((q) => holding.has(q.emailHash))).toEqual([]);
    expect(new Set(qEntries.data.map((e) => e.emailHash)).size).toBe(qEntries.data.length);

    // Everyone holds a lab or is in line (but the students whose lab the instructor released).
    expect(released).toHaveLength(RELEASED);
    const gone = new Set(released.map((r) => r.email));
    const claimedAt = new Map<string, string>(claims.map((c) => [c.email, c.claimedAt]));
    for (const r of released) claimedAt.set(r.email, r.claimedAt);
    const how = new Map<string, string>(claims.map((c) => [c.email, c.how]));
    for (const r of released) how.set(r.email, r.how);
    let inLab = 0;
    let inLine = 0;
    for (const a of arrivals) {
      if (gone.has(a.email)) continue;
      const lab = await labForLink(a.token);
      const place = lab ? undefined : await waitingForLink(a.token);
      expect(lab ?? place, `${a.email} holds nothing`).toBeDefined();
      if (lab) inLab++;
      else inLine++;
    }
    expect(inLab + inLine + RELEASED).toBe(STUDENTS);
    expect(inLine).toBe(await waitingCount(W));
    expect(inLine).toBe(STUDENTS - RELEASED - (READY + ADDED));
    expect(claims.filter((c) => c.how === "queue").length).toBeGreaterThan(0);

    // Nobody skipped: a student who was in line before another arrived is served no later than them.
    const served = (email: string) => claimedAt.get(email) ?? "~"; // "~" sorts after every ISO time: never
    // Who joined the line: everyone but the direct claims (served from it, or still in it).
    const joined = arrivals.filter((a) => how.get(a.email) !== "open");
    const skipped: string[] = [];
    for (const b of joined) {
      for (const x of arrivals) {
        if (x.start > b.end && served(b.email) > served(x.email))
          skipped.push(`${b.email} (in line first) served after ${x.email}`);
      }
    }
    expect(skipped.slice(0, 5)).toEqual([]);
  }, 240_000);
});
