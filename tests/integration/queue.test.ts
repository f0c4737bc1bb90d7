import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { board, claimLab, labForLink } from "../../shared/portal/claims.ts";
import {
  listClaims,
  openPortal,
  purgePortal,
  reassign,
  releaseLab,
  unlockEmail,
} from "../../shared/portal/portal.ts";
import {
  listQueue,
  serveQueue,
  serveQueueAfter,
  unqueueEmail,
  waitingCount,
} from "../../shared/portal/queue.ts";
import { claimOrWait, leaveLine, recoverLabOrPlace, waitingForLink } from "../../shared/portal/waiting.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/** The waiting line against DynamoDB Local: order, one place or one lab per email, recovery, spares, purge. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

const portalYaml = (spares = 0) => `portal:\n  enabled: true\n  spares: ${spares}\n`;

async function workshopWithLabs(name: string, ready: number, spares = 0) {
  await asInstructor(() =>
    submitWorkshop(workshopYaml({ name, count: Math.max(1, ready) }) + portalYaml(spares)),
  );
  const now = new Date().toISOString();
  for (let i = 1; i <= ready; i++) {
    await rt.store.host
      .put({
        workshop: name,
        hostId: `student-${String(i).padStart(2, "0")}`,
        provider: "local",
        state: "ready",
        createdAt: now,
        updatedAt: now,
      })
      .go();
  }
  return asInstructor(() => openPortal(name));
}

const student = (i: number, pin = "503917") => ({ name: `Student ${i}`, email: `s${i}@example.test`, pin });
const arrive = (w: string, i: number, address = "10.3.0.1") => claimOrWait(w, student(i), address);

const code = async (fn: () => Promise<unknown>) => {
  try {
    await fn();
  } catch (err) {
    if (err instanceof VisibleError) return err.code;
    throw err;
  }
  return "ok";
};

beforeAll(async () => {
  rt = await testRuntime();
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("the waiting line", () => {
  it("keeps latecomers in order and hands a released lab to the first, under the same link", async () => {
    await workshopWithLabs("line", 2);
    const a = await arrive("line", 1);
    const b = await arrive("line", 2);
    expect([a.lab, b.lab]).toEqual(["student-01", "student-02"]);
    const late = [await arrive("line", 3), await arrive("line", 4), await arrive("line", 5)];
    expect(late.map((l) => l.lab)).toEqual([undefined, undefined, undefined]);
    expect((await Promise.all(late.map((l) => waitingForLink(l.token)))).map((p) => p?.number)).toEqual([
      1, 2, 3,
    ]);
    expect(await waitingCount("line")).toBe(3);
    // Nobody jumps the line: a direct claim is refused while anyone waits.
    expect(await code(() => claimLab("line", student(9), "10.3.0.1"))).toBe("portal.line_waiting");

    await asInstructor(() => releaseLab("line", "student-02"));
    const first = late[0] as { token: string };
    expect((await labForLink(first.token))?.lab).toBe("student-02");
    expect(await waitingForLink(first.token)).toBeUndefined();
    expect((await waitingForLink((late[1] as { token: string }).token))?.number).toBe(1);
    expect((await waitingForLink((late[2] as { token: string }).token))?.number).toBe(2);
    const claims = await asInstructor(() => listClaims("line"));
    expect(claims.find((c) => c.lab === "student-02")).toMatchObject({
      email: "s3@example.test",
      how: "queue",
    });

    // A newcomer joins behind them even when a lab is free for a moment (the release serves the line first).
    const d = await arrive("line", 6);
    expect(d.lab).toBeUndefined();
    expect((await waitingForLink(d.token))?.number).toBe(3);
    const line = await asInstructor(() => listQueue("line"));
    expect(line.map((r) => [r.number, r.name, r.email])).toEqual([
      [1, "Student 4", "s4@example.test"],
      [2, "Student 5", "s5@example.test"],
      [3, "Student 6", "s6@example.test"],
    ]);
    expect(line.every((r) => r.waitedSeconds >= 0 && r.joinedAt <= new Date().toISOString())).toBe(true);

    const events = (await rt.store.event.query.byWorkshop({ workshop: "line" }).go({ pages: "all" })).data;
    expect(events.filter((e) => e.type === "queue.joined")).toHaveLength(4);
    expect(
      events.filter((e) => e.type === "lab.claimed" && e.hostId === "student-02").map((e) => e.detail),
    ).toEqual([
      { how: "open", student: "Student 2", by: "student" },
      { how: "queue", student: "Student 3", by: "labfleet" },
    ]);
    expect(JSON.stringify(events)).not.toContain("example.test");
  });

  it("gives an email one lab or one place, never both", async () => {
    await workshopWithLabs("once", 1);
    await arrive("once", 1);
    const waiting = await arrive("once", 2);
    expect(waiting.lab).toBeUndefined();
    expect(await code(() => arrive("once", 2))).toBe("portal.email_in_line");
    expect(await code(() => arrive("once", 1))).toBe("portal.email_has_lab");
    expect(await waitingCount("once")).toBe(1);
  });

  it("gets a place back on another device with email and PIN; the old link stops; wrong PINs lock", async () => {
    await workshopWithLabs("back", 1);
    await arrive("back", 1);
    const w = await arrive("back", 2);
    const again = await recoverLabOrPlace("back", "S2@example.test", "503917", "10.3.1.1");
    expect(again.lab).toBeUndefined();
    expect(again.token).not.toBe(w.token);
    expect((await waitingForLink(again.token))?.number).toBe(1);
    expect(await waitingForLink(w.token)).toBeUndefined();

    const tries = [];
    for (let i = 0; i < 6; i++)
      tries.push(await code(() => recoverLabOrPlace("back", "s2@example.test", "111000", `10.3.2.${i}`)));
    expect(tries.slice(0, 5)).toEqual(Array(5).fill("portal.wrong_pin"));
    expect(tries[5]).toBe("portal.locked");
    expect(await code(() => recoverLabOrPlace("back", "s2@example.test", "503917", "10.3.2.9"))).toBe(
      "portal.locked",
    );
    await asInstructor(() => unlockEmail("back", "s2@example.test"));
    const unlocked = await recoverLabOrPlace("back", "s2@example.test", "503917", "10.3.2.9");
    // Served later, the same (latest) link opens the lab.
    await asInstructor(() => releaseLab("back", "student-01"));
    expect((await labForLink(unlocked.token))?.lab).toBe("student-01");
  });

  it("lets a student leave the line and the instructor remove one; both forget the email", async () => {
    await workshopWithLabs("leave", 1);
    await arrive("leave", 1);
    const [b, c, d] = [await arrive("leave", 2), await arrive("leave", 3), await arrive("leave", 4)];
    expect(await leaveLine(b.token)).toBe(true);
    expect(await leaveLine(b.token)).toBe(false);
    expect(await waitingForLink(b.token)).toBeUndefined();
    expect((await waitingForLink(c.token))?.number).toBe(1);
    await asInstructor(() => unqueueEmail("leave", "S3@example.test"));
    expect(await waitingForLink(c.token)).toBeUndefined();
    expect((await waitingForLink(d.token))?.number).toBe(1);
    expect(await code(() => asInstructor(() => unqueueEmail("leave", "s3@example.test")))).toBe(
      "portal.not_in_line",
    );
    // Forgotten: the email may join again, at the end.
    const again = await arrive("leave", 2);
    expect((await waitingForLink(again.token))?.number).toBe(2);
  });

  it("refuses bad input with the field path, before anything is written", async () => {
    await workshopWithLabs("bad", 1);
    await arrive("bad", 1);
    const err = await claimOrWait("bad", { name: "", email: "nope", pin: "12" }, "10.3.3.1").catch((e) => e);
    expect(err).toBeInstanceOf(VisibleError);
    expect(err.code).toBe("portal.claim_invalid");
    expect(err.details.map((d: { path: string }) => d.path)).toEqual(["name", "email", "pin"]);
    expect(await waitingCount("bad")).toBe(0);
  });

  it("keeps the highest-numbered free labs as spares, fills them first, and serves the rest", async () => {
    await workshopWithLabs("spare", 3, 1);
    const [a, b, c] = [await arrive("spare", 1), await arrive("spare", 2), await arrive("spare", 3)];
    expect([a.lab, b.lab, c.lab]).toEqual(["student-01", "student-02", undefined]);
    const shown = await board("spare");
    expect(shown.spares).toBe(1);
    expect(shown.labs.map((l) => l.lab)).toEqual(["student-01", "student-02"]);

    // The spare goes to a swap (student 1 moves to it): the lab left behind refills the spares, the line waits.
    await asInstructor(() => reassign("spare", "s1@example.test", "student-03"));
    expect(await waitingForLink(c.token)).toMatchObject({ number: 1 });
    expect((await board("spare")).labs.map((l) => l.lab)).toEqual(["student-02", "student-03"]);

    // Spares lowered (the workshop submitted again): the lab no longer kept goes to the line.
    await asInstructor(() => submitWorkshop(workshopYaml({ name: "spare", count: 3 }) + portalYaml(0)));
    expect((await labForLink(c.token))?.lab).toBe("student-01");
  });

  it("is forgotten at teardown, with its links", async () => {
    await workshopWithLabs("purge", 1);
    await arrive("purge", 1);
    const w = await arrive("purge", 2);
    await purgePortal("purge");
    expect(await waitingCount("purge")).toBe(0);
    expect(await waitingForLink(w.token)).toBeUndefined();
    const left = await Promise.all([
      rt.store.queueEmail.query.byWorkshop({ workshop: "purge" }).go({ pages: "all" }),
      rt.store.queueEntry.query.byWorkshop({ workshop: "purge" }).go({ pages: "all" }),
    ]);
    expect(left.map((r) => r.data.length)).toEqual([0, 0]);
  });

  it("serves nobody while claiming is closed, and the line when it opens again", async () => {
    await workshopWithLabs("shut", 1);
    await arrive("shut", 1);
    const w = await arrive("shut", 2);
    await asInstructor(() => openPortal("shut", "closed"));
    await asInstructor(() => releaseLab("shut", "student-01"));
    expect(await serveQueue("shut")).toBe(0);
    expect((await waitingForLink(w.token))?.number).toBe(1);
    // Opening claiming again serves the line at once.
    await asInstructor(() => openPortal("shut"));
    expect((await labForLink(w.token))?.lab).toBe("student-01");
    expect(await serveQueue("shut")).toBe(0);
  });

  it("after a lab is readied or freed, lists no labs while nobody waits, and serves the first who does", async () => {
    await workshopWithLabs("quiet", 2);
    // Queries of the workshop's host records, from here on (every lab being built pushes its readiness).
    let hostQueries = 0;
    rt.store.doc.middlewareStack.add(
      (next, context) => async (args) => {
        const values = Object.values(
          (args.input as { ExpressionAttributeValues?: object }).ExpressionAttributeValues ?? {},
        );
        if (context.commandName === "QueryCommand" && values.some((v) => String(v).startsWith("$host")))
          hostQueries++;
        return next(args);
      },
      { step: "initialize", name: "countHostQueries" },
    );
    try {
      await serveQueueAfter("quiet");
      expect(hostQueries).toBe(0);
      const a = await arrive("quiet", 1);
      const b = await arrive("quiet", 2);
      const c = await arrive("quiet", 3);
      expect([a.lab, b.lab, c.lab]).toEqual(["student-01", "student-02", undefined]);
      await asInstructor(() => releaseLab("quiet", "student-01"));
      expect((await labForLink(c.token))?.lab).toBe("student-01");
      expect(await waitingCount("quiet")).toBe(0);
    } finally {
      rt.store.doc.middlewareStack.remove("countHostQueries");
    }
  });
});
