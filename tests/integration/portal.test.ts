import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startRun } from "../../shared/fleet/runs.ts";
import { submitWorkshop } from "../../shared/fleet/workshops.ts";
import { board, claimLab, enterCode, labForLink, recoverLab } from "../../shared/portal/claims.ts";
import { emailHash } from "../../shared/portal/codes.ts";
import { RATE } from "../../shared/portal/constants.ts";
import {
  closePortal,
  exportClaims,
  inviteRoster,
  listClaims,
  openPortal,
  parseRoster,
  portalInfo,
  publishPortal,
  reassign,
  releaseLab,
  revokeEmail,
  rotateCode,
  unlockEmail,
} from "../../shared/portal/portal.ts";
import { portalStatus } from "../../shared/portal/portal-status.ts";
import { recordWrongCode } from "../../shared/portal/rate-limit.ts";
import { scaleDownUnclaimed } from "../../shared/portal/scale-down.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { removeDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/** The portal's rules against DynamoDB Local: claims are transactions, so the invariants hold under load. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
const asInstructor = <T>(fn: () => Promise<T>) => withActor({ type: "instructor", id: "test" }, fn);

async function workshopWithLabs(name: string, ready: number, building = 0, portalYaml = "") {
  await asInstructor(() =>
    submitWorkshop(workshopYaml({ name, count: Math.max(1, ready + building) }) + portalYaml),
  );
  const now = new Date().toISOString();
  for (let i = 1; i <= ready + building; i++) {
    const hostId = `student-${String(i).padStart(2, "0")}`;
    // The claim rules read host records only: labs made ready here stand for labs that passed their health gate.
    await rt.store.host
      .put({
        workshop: name,
        hostId,
        provider: "local",
        state: i <= ready ? "ready" : "deploying",
        createdAt: now,
        updatedAt: now,
      })
      .go();
  }
  return asInstructor(() => openPortal(name));
}

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

describe("claims", () => {
  it("hand out ready labs lowest number first, never a lab still building", async () => {
    await workshopWithLabs("order", 3, 2);
    const got = [];
    for (let i = 0; i < 3; i++)
      got.push(
        (
          await claimLab(
            "order",
            { name: `Ada ${i}`, email: `a${i}@example.test`, pin: "503917" },
            "10.0.0.1",
          )
        ).lab,
      );
    expect(got).toEqual(["student-01", "student-02", "student-03"]);
    expect(
      await code(() =>
        claimLab("order", { name: "Late", email: "late@example.test", pin: "503917" }, "10.0.0.1"),
      ),
    ).toBe("portal.no_lab_free");
    const b = await board("order");
    expect(b.labs.map((l) => [l.lab, l.status, l.firstName ?? null])).toEqual([
      ["student-01", "claimed", "Ada"],
      ["student-02", "claimed", "Ada"],
      ["student-03", "claimed", "Ada"],
      ["student-04", "building", null],
      ["student-05", "building", null],
    ]);
    expect(JSON.stringify(b)).not.toContain("example.test");
  });

  it("give one lab to 50 of 500 simultaneous students: no lab twice, no email twice", async () => {
    await workshopWithLabs("rush", 50);
    const results = await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        claimLab(
          "rush",
          { name: `Student ${i}`, email: `s${i}@example.test`, pin: "503917" },
          `10.1.${Math.floor(i / 250)}.${i % 250}`,
        )
          .then((r): string => r.lab ?? `no lab in ${JSON.stringify(r)}`)
          .catch((err: unknown): string =>
            err instanceof VisibleError ? err.code : `not a refusal: ${String(err)}`,
          ),
      ),
    );
    // Anything but a lab or "no lab free" is named in the failure.
    expect(results.filter((r) => !r.startsWith("student-") && r !== "portal.no_lab_free")).toEqual([]);
    const labs = results.filter((r) => r.startsWith("student-"));
    expect(labs).toHaveLength(50);
    expect(new Set(labs).size).toBe(50);
    expect(results.filter((r) => !r.startsWith("student-")).every((r) => r === "portal.no_lab_free")).toBe(
      true,
    );
    const claims = await asInstructor(() => listClaims("rush"));
    expect(claims).toHaveLength(50);
    expect(new Set(claims.map((c) => c.lab)).size).toBe(50);
    expect(new Set(claims.map((c) => c.email)).size).toBe(50);
  }, 120_000);

  it("give one email one lab, however many times it presses the button at once", async () => {
    await workshopWithLabs("dup", 20);
    const results = await Promise.all(
      Array.from({ length: 20 }, () =>
        claimLab("dup", { name: "Grace Hopper", email: "Grace@Example.test", pin: "503917" }, "10.2.0.1")
          .then((r) => r.lab)
          .catch((err: VisibleError) => err.code),
      ),
    );
    expect(results.filter((r) => r.startsWith("student-"))).toHaveLength(1);
    expect(results.filter((r) => r === "portal.email_has_lab")).toHaveLength(19);
    expect((await asInstructor(() => listClaims("dup"))).map((c) => c.email)).toEqual(["grace@example.test"]);
  }, 60_000);

  it("refuse bad input with reasons, and a closed window", async () => {
    await workshopWithLabs("rules", 2);
    const err = await claimLab("rules", { name: "", email: "nope", pin: "123456" }, "10.3.0.1").catch(
      (e: VisibleError) => e,
    );
    expect(err).toBeInstanceOf(VisibleError);
    expect((err as VisibleError).details.map((d) => d.path)).toEqual(["name", "email", "pin"]);
    await asInstructor(() => closePortal("rules"));
    expect(
      await code(() => claimLab("rules", { name: "A", email: "a@example.test", pin: "503917" }, "10.3.0.1")),
    ).toBe("portal.closed");
  });
});

describe("codes, links and recovery", () => {
  it("a code opens its workshop in any spelling; rotate-code ends the old one", async () => {
    const info = await workshopWithLabs("codes", 2);
    expect(info.code).toMatch(/^LAB-[A-Z]{6}-\d{8}$/);
    const loose = info.code.toLowerCase().replace(/-/g, " ");
    expect(await enterCode(loose, "10.4.0.1")).toEqual({ workshop: "codes", codeVersion: 1 });
    const next = await asInstructor(() => rotateCode("codes"));
    expect(next.codeVersion).toBe(2);
    expect(next.code).not.toBe(info.code);
    expect(await code(() => enterCode(info.code, "10.4.0.1"))).toBe("portal.wrong_code");
    expect(await enterCode(next.code, "10.4.0.1")).toEqual({ workshop: "codes", codeVersion: 2 });
  });

  it("recovery gives the same lab under a new link; the old link stops; 5 wrong PINs lock until unlocked", async () => {
    await workshopWithLabs("back", 2);
    const first = await claimLab(
      "back",
      { name: "Alan Turing", email: "alan@example.test", pin: "503917" },
      "10.5.0.1",
    );
    expect((await labForLink(first.token))?.lab).toBe(first.lab);
    await asInstructor(() => closePortal("back")); // recovery works while claiming is closed
    const again = await recoverLab("back", "ALAN@example.test ", "503917", "10.5.0.2");
    expect(again.lab).toBe(first.lab);
    expect(again.token).not.toBe(first.token);
    expect(await labForLink(first.token)).toBeUndefined();
    expect((await labForLink(again.token))?.name).toBe("Alan Turing");

    for (let i = 0; i < 5; i++)
      expect(await code(() => recoverLab("back", "alan@example.test", "000001", "10.5.0.3"))).toBe(
        "portal.wrong_pin",
      );
    expect(await code(() => recoverLab("back", "alan@example.test", "503917", "10.5.0.3"))).toBe(
      "portal.locked",
    );
    await asInstructor(() => unlockEmail("back", "alan@example.test"));
    expect((await recoverLab("back", "alan@example.test", "503917", "10.5.0.3")).lab).toBe(first.lab);
    expect(await code(() => recoverLab("back", "nobody@example.test", "503917", "10.5.0.3"))).toBe(
      "portal.wrong_pin",
    );
  });
});

describe("PIN guesses at the same time", () => {
  it("never get past five: the sixth and later are refused as locked", async () => {
    await workshopWithLabs("guess", 1);
    await claimLab("guess", { name: "Eve", email: "eve@example.test", pin: "503917" }, "10.12.0.1");
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        code(() =>
          recoverLab("guess", "eve@example.test", `40${String(i).padStart(4, "0")}`, `10.12.1.${i}`),
        ),
      ),
    );
    expect(results.filter((r) => r === "portal.wrong_pin")).toHaveLength(5);
    expect(results.filter((r) => r === "portal.locked")).toHaveLength(7);
    expect(await code(() => recoverLab("guess", "eve@example.test", "503917", "10.12.2.1"))).toBe(
      "portal.locked",
    );
    const row = (await asInstructor(() => listClaims("guess")))[0];
    expect(row?.locked).toBe(true);
  });
});

describe("instructor operations", () => {
  it("release, revoke, reassign and export", async () => {
    await workshopWithLabs("ops", 3);
    const a = await claimLab("ops", { name: "Ann", email: "ann@example.test", pin: "503917" }, "10.6.0.1");
    await claimLab("ops", { name: "Bob", email: "bob@example.test", pin: "503917" }, "10.6.0.1");
    const moved = await asInstructor(() => reassign("ops", "ann@example.test", "student-03"));
    expect(moved.lab).toBe("student-03");
    expect(await labForLink(a.token)).toBeUndefined();
    expect((await labForLink(moved.token))?.lab).toBe("student-03");
    expect(await code(() => asInstructor(() => reassign("ops", "ann@example.test", "student-02")))).toBe(
      "portal.lab_taken",
    );

    const csv = await asInstructor(() => exportClaims("ops"));
    expect(csv.split("\n")[0]).toBe("lab,name,email,how,claimed at,first opened");
    expect(csv).toMatch(/^student-02,Bob,bob@example\.test,open,\d{4}-.+Z,$/m);
    expect(csv).toMatch(/^student-03,Ann,ann@example\.test,reassign,.+Z,.+Z$/m);

    await asInstructor(() => revokeEmail("ops", "bob@example.test"));
    await asInstructor(() => releaseLab("ops", "student-03"));
    expect(await asInstructor(() => listClaims("ops"))).toEqual([]);
    expect((await board("ops")).labs.every((l) => l.status === "free")).toBe(true);
    // The email can claim again once its lab was taken back.
    expect(
      (await claimLab("ops", { name: "Bob", email: "bob@example.test", pin: "503917" }, "10.6.0.1")).lab,
    ).toBe("student-01");
    expect(emailHash("ops", "Bob@Example.test ")).toBe(emailHash("ops", "bob@example.test"));
    expect((await asInstructor(() => portalInfo("ops"))).state).toBe("open");
  });
});

describe("the instructor's portal status", () => {
  it("reads the board and the claims once: a claim ended by another process is gone from both at once", async () => {
    await workshopWithLabs("agree", 2);
    await claimLab("agree", { name: "Ann Lee", email: "ann@example.test", pin: "503917" }, "10.6.0.1");
    // A student page in this process has just read the board, with Ann's claim in it.
    expect((await board("agree")).labs.map((l) => l.status)).toEqual(["claimed", "free"]);
    // Another process (a Lambda, another dev server) releases the lab: this process's student reads are not told.
    await rt.store.claim.delete({ workshop: "agree", hostId: "student-01" }).go();
    const s = await asInstructor(() => portalStatus("agree"));
    expect(s.claims).toEqual([]);
    expect(s.board.labs.map((l) => l.status)).toEqual(["free", "free"]);
    expect(s.hosts.map((h) => h.hostId).sort()).toEqual(["student-01", "student-02"]);
    // A new claim is in the board and the claim list of the same answer, with the claimant's first name.
    const bo = await claimLab(
      "agree",
      { name: "Bo Ek", email: "bo@example.test", pin: "503917" },
      "10.6.0.1",
    );
    const after = await asInstructor(() => portalStatus("agree"));
    expect(after.claims.map((c) => [c.lab, c.email])).toEqual([[bo.lab, "bo@example.test"]]);
    expect(after.board.labs.find((l) => l.lab === bo.lab)).toEqual({
      lab: bo.lab,
      status: "claimed",
      firstName: "Bo",
    });
    expect(after.board.labs.filter((l) => l.status === "claimed")).toHaveLength(1);
  });
});

describe("roster and the workflow", () => {
  it("invites a roster: reserved labs and personal links; invited students recover by their link only", async () => {
    await workshopWithLabs("open-only", 1);
    expect(await code(() => asInstructor(() => inviteRoster("open-only", "Ada,ada@example.test\n")))).toBe(
      "portal.not_roster",
    );
    await workshopWithLabs("roster", 3, 0, "portal:\n  mode: roster\n");
    expect((await board("roster")).open).toBe(false); // roster mode offers no claim form
    const { invites, skipped } = await asInstructor(() =>
      inviteRoster(
        "roster",
        'name,email,host_id\n"Lovelace, Ada",ada@example.test,student-03\nCharles Babbage,charles@example.test\n',
      ),
    );
    expect(invites.map((i) => [i.name, i.email, i.lab])).toEqual([
      ["Lovelace, Ada", "ada@example.test", "student-03"],
      ["Charles Babbage", "charles@example.test", "student-01"],
    ]);
    expect(skipped).toEqual([]);
    expect((await labForLink(invites[0]?.token ?? ""))?.lab).toBe("student-03");
    expect(await code(() => recoverLab("roster", "ada@example.test", "503917", "10.10.0.1"))).toBe(
      "portal.invited",
    );
    const again = await asInstructor(() =>
      inviteRoster("roster", "Ada,ada@example.test\nGrace,grace@example.test,student-03\n"),
    );
    expect(again.skipped).toEqual([
      { email: "ada@example.test", reason: "already holds a lab" },
      { email: "grace@example.test", reason: "lab student-03 is not available" },
    ]);
    expect(() => parseRoster("just-a-name\n")).toThrow("roster line 1: expected name,email[,host_id]");
    expect((await asInstructor(() => listClaims("roster"))).map((c) => c.how)).toEqual(["roster", "roster"]);
  });

  it("the up workflow opens the portal once enough labs are ready", async () => {
    await asInstructor(() =>
      submitWorkshop(
        `${workshopYaml({ name: "auto", count: 2 })}portal:\n  enabled: true\n  open_at_percent: 100\n`,
      ),
    );
    await asInstructor(() => startRun("auto", "up"));
    await rt.executor.idle();
    const info = await asInstructor(() => portalInfo("auto"));
    expect(info.state).toBe("open");
    expect((await board("auto")).labs.map((l) => l.status)).toEqual(["free", "free"]);
  });

  it("publish shows the board before claiming opens; the workflow then opens it; an open portal stays open", async () => {
    await asInstructor(() =>
      submitWorkshop(
        `${workshopYaml({ name: "pub", count: 2 })}portal:\n  enabled: true\n  open_at_percent: 100\n`,
      ),
    );
    const published = await asInstructor(() => publishPortal("pub"));
    expect(published.state).toBe("published");
    // The code works and the board is there, but nobody can claim yet.
    expect((await enterCode(published.code, "10.9.0.1")).workshop).toBe("pub");
    expect((await board("pub")).open).toBe(false);
    expect(
      await code(() => claimLab("pub", { name: "A", email: "a@example.test", pin: "503917" }, "10.9.0.1")),
    ).toBe("portal.closed");
    await asInstructor(() => startRun("pub", "up"));
    await rt.executor.idle();
    expect((await asInstructor(() => portalInfo("pub"))).state).toBe("open");
    expect((await asInstructor(() => publishPortal("pub"))).state).toBe("open");
    // The same code as published: students who entered it early stay on the board.
    expect((await asInstructor(() => portalInfo("pub"))).code).toBe(published.code);
    expect((await board("pub")).open).toBe(true);
  });
});

describe("scaling down no-shows", () => {
  it("takes unready labs first, then free labs from the highest number; claimed ones only with force", async () => {
    await workshopWithLabs("noshow", 4, 2);
    await claimLab("noshow", { name: "Ada", email: "ada@example.test", pin: "503917" }, "10.11.0.1");
    expect((await asInstructor(() => scaleDownUnclaimed("noshow", 2))).removed).toEqual([
      "student-06",
      "student-05",
    ]);
    expect(await code(() => asInstructor(() => scaleDownUnclaimed("noshow", 4)))).toBe(
      "portal.would_take_claimed",
    );
    expect((await asInstructor(() => scaleDownUnclaimed("noshow", "all"))).removed).toEqual([
      "student-04",
      "student-03",
      "student-02",
    ]);
    expect((await board("noshow")).labs.map((l) => [l.lab, l.status])).toEqual([["student-01", "claimed"]]);
    const forced = await asInstructor(() => scaleDownUnclaimed("noshow", 1, true));
    expect(forced).toEqual({ removed: ["student-01"], releasedClaims: ["student-01"] });
    expect(await asInstructor(() => listClaims("noshow"))).toEqual([]);
    expect((await asInstructor(() => portalInfo("noshow"))).state).toBe("open");
  });

  it("teardown forgets the portal: code, claims and links", async () => {
    await workshopWithLabs("gone", 1);
    const info = await asInstructor(() => portalInfo("gone"));
    const claim = await claimLab(
      "gone",
      { name: "Ada", email: "ada@example.test", pin: "503917" },
      "10.13.0.1",
    );
    await asInstructor(() => startRun("gone", "teardown"));
    await rt.executor.idle();
    expect(await labForLink(claim.token)).toBeUndefined();
    expect(await code(() => enterCode(info.code, "10.13.0.1"))).toBe("portal.wrong_code");
    expect(await code(() => asInstructor(() => portalInfo("gone")))).toBe("portal.not_found");
    expect((await rt.store.claimEmail.query.byWorkshop({ workshop: "gone" }).go()).data).toEqual([]);
  });

  it("a later up does not bring a removed lab back", async () => {
    expect((await asInstructor(() => scaleDownUnclaimed("auto", 1))).removed).toEqual(["student-02"]);
    await asInstructor(() => startRun("auto", "up"));
    await rt.executor.idle();
    const hosts = Object.fromEntries(
      (await rt.store.host.query.byWorkshop({ workshop: "auto" }).go()).data.map((h) => [h.hostId, h.state]),
    );
    expect(hosts).toEqual({ "student-01": "ready", "student-02": "torn_down" });
  });
});

describe("rate limits count failures only", () => {
  it("stop an address's new browsers at their limit, and past 200 wrong codes only clients that guessed 3 times", async () => {
    const info = await workshopWithLabs("rl", 1);
    // A client known by its address only is a new browser at every attempt.
    for (let i = 0; i < RATE.perAddressNewBrowsers; i++)
      expect(await code(() => enterCode("LAB-NOPE-1", "10.7.0.1"))).toBe("portal.wrong_code");
    expect(await code(() => enterCode(info.code, "10.7.0.1"))).toBe("portal.rate_limited");
    expect(
      await code(() => claimLab("rl", { name: "A", email: "a@example.test", pin: "503917" }, "10.7.0.1")),
    ).toBe("portal.rate_limited");
    // A browser from that address that entered a right code before is not held back by it.
    expect(
      await enterCode(info.code, { address: "10.7.0.1", browser: "b".repeat(22), vouched: true }),
    ).toEqual({ workshop: "rl", codeVersion: 1 });

    // Portal-wide: push the wrong-code counter past its limit from many addresses.
    await Promise.all(
      Array.from({ length: RATE.globalWrongCodes }, (_, i) =>
        recordWrongCode(`10.8.${Math.floor(i / 200)}.${i % 200}`),
      ),
    );
    for (let i = 0; i < RATE.wrongCodesBeforeGlobalLimit; i++)
      await code(() => enterCode("LAB-NOPE-2", "10.9.0.1"));
    expect(await code(() => enterCode(info.code, "10.9.0.1"))).toBe("portal.rate_limited");
    // A classroom address that has not guessed wrong still gets in.
    expect(await enterCode(info.code, "10.9.0.2")).toEqual({ workshop: "rl", codeVersion: 1 });
  });
});
