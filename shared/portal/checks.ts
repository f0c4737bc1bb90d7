import { recordEvent } from "../fleet/events.ts";
import { isConditionalFailure } from "../fleet/runs.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { RateLimited } from "../runtime/failure-counters.ts";
import { log } from "../runtime/logger.ts";
import { byNumber } from "../runtime/text.ts";
import type { CheckResultItem, ClaimItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { linkHash } from "./codes.ts";
import { workshopRecord } from "./reads.ts";

/**
 * "Check my work": a student presses the button on their lab page, the lab's `lab.checks` run on their own
 * host (Deps.checks: in-process in the local runtime, the RunChecks function in the cloud, so the portal's own
 * function never reaches a host), and the result of each check is kept for their claim.
 *
 * - One press per claim per CHECK_PRESS_WINDOW_SECONDS, decided by one conditional write of the lab's
 *   `checkPress` item: presses sent at once, to any number of processes, run the checks once.
 * - Results belong to one claim of a lab (its `claimedAt`): a lab released, or a student moved to another lab
 *   (a new claim, a new claimedAt), starts with no results; release and teardown delete them.
 * - A result's output tail is shown to the lab's own student (their personal link) and to the instructor, never
 *   on the board or to another student.
 */

export const CHECK_PRESS_WINDOW_SECONDS = 30;

export interface CheckView {
  name: string;
  hint: string | null;
  /** null: not run yet for this claim. */
  passed: boolean | null;
  timedOut: boolean;
  ranAt: string | null;
  attempts: number;
  output: string;
}

export interface LabChecks {
  workshop: string;
  lab: string;
  checks: CheckView[];
}

interface LinkedClaim {
  workshop: string;
  claim: ClaimItem;
  spec: Workshop;
}

/** The claim a personal link leads to, or undefined (unknown or replaced link). */
async function linkedClaim(token: string): Promise<LinkedClaim | undefined> {
  if (!/^[\w-]{20,64}$/.test(token)) return undefined;
  const { store } = useDeps();
  const hash = linkHash(token);
  const link = (await store.claimLink.get({ linkHash: hash }).go()).data;
  if (!link) return undefined;
  const [c, w] = await Promise.all([
    store.claim.get({ workshop: link.workshop, hostId: link.hostId }).go(),
    workshopRecord(link.workshop),
  ]);
  if (!c.data || c.data.linkHash !== hash || !w) return undefined;
  return { workshop: link.workshop, claim: c.data, spec: w.spec as Workshop };
}

const checksOf = (spec: Workshop) => spec.lab.checks ?? [];

async function resultsOf(workshop: string, hostId?: string): Promise<CheckResultItem[]> {
  const q = useDeps().store.checkResult.query.byWorkshop(
    hostId === undefined ? { workshop } : { workshop, hostId },
  );
  return (await q.go({ pages: "all" })).data;
}

function views(spec: Workshop, claimedAt: string, results: CheckResultItem[]): CheckView[] {
  const mine = new Map(results.filter((r) => r.claimedAt === claimedAt).map((r) => [r.check, r]));
  return checksOf(spec).map((c) => {
    const r = mine.get(c.name);
    return {
      name: c.name,
      hint: c.hint ?? null,
      passed: r ? r.passed : null,
      timedOut: r?.timedOut ?? false,
      ranAt: r?.ranAt ?? null,
      attempts: r?.attempts ?? 0,
      output: r?.output ?? "",
    };
  });
}

/** The checks of the lab a personal link leads to, with this claim's results; undefined for a bad link. */
export async function checksForLink(token: string): Promise<LabChecks | undefined> {
  const found = await linkedClaim(token);
  if (!found) return undefined;
  const { workshop, claim, spec } = found;
  if (checksOf(spec).length === 0) return { workshop, lab: claim.hostId, checks: [] };
  return {
    workshop,
    lab: claim.hostId,
    checks: views(spec, claim.claimedAt, await resultsOf(workshop, claim.hostId)),
  };
}

/**
 * Takes the claim's one press of the window, or refuses with when to try again (a 429). One conditional write:
 * the lab's last press is older than the window, or was made for another claim, or there is none.
 */
async function takePress(workshop: string, claim: ClaimItem): Promise<void> {
  const { store, clock } = useDeps();
  const now = clock.now().getTime();
  const windowMs = CHECK_PRESS_WINDOW_SECONDS * 1000;
  try {
    await store.checkPress
      .put({ workshop, hostId: claim.hostId, claimedAt: claim.claimedAt, at: now })
      .where(
        (a, op) =>
          `${op.notExists(a.at)} OR ${op.lte(a.at, now - windowMs)} OR ${op.ne(a.claimedAt, claim.claimedAt)}`,
      )
      .go();
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    const last = (await store.checkPress.get({ workshop, hostId: claim.hostId }).go()).data;
    const seconds = Math.max(1, Math.ceil(((last?.at ?? now) + windowMs - now) / 1000));
    throw new RateLimited(
      "checks.rate_limited",
      `Your work was checked less than ${CHECK_PRESS_WINDOW_SECONDS} seconds ago. Try again in ${seconds} second${seconds === 1 ? "" : "s"}.`,
      seconds,
    );
  }
}

/** "Check my work" from a student's personal link: runs the checks on their lab and keeps the results. */
export async function checkMyWork(token: string): Promise<LabChecks> {
  const found = await linkedClaim(token);
  if (!found) throw new VisibleError("not_found", "portal.link_gone", "This link no longer works.");
  const { workshop, claim, spec } = found;
  if (checksOf(spec).length === 0)
    throw new VisibleError("not_found", "checks.none", "This lab has no checks.");
  const { store, clock, checks: runner } = useDeps();
  if (!runner) throw new VisibleError("unavailable", "checks.unavailable", "Checks cannot run here.");
  await takePress(workshop, claim);
  const outcomes = await runner.run(workshop, claim.hostId);
  const previous = await resultsOf(workshop, claim.hostId);
  const before = new Map(previous.filter((r) => r.claimedAt === claim.claimedAt).map((r) => [r.check, r]));
  const ranAt = isoNow(clock);
  const names = new Set(checksOf(spec).map((c) => c.name));
  await Promise.all(
    outcomes
      .filter((o) => names.has(o.name))
      .map((o) =>
        store.checkResult
          .put({
            workshop,
            hostId: claim.hostId,
            check: o.name,
            claimedAt: claim.claimedAt,
            passed: o.passed,
            timedOut: o.timedOut,
            ranAt,
            attempts: (before.get(o.name)?.attempts ?? 0) + 1,
            output: o.output,
          })
          .go(),
      ),
  );
  const passed = outcomes.filter((o) => o.passed).length;
  log.info("checks ran", { workshop, lab: claim.hostId, passed, failed: outcomes.length - passed });
  await recordEvent({
    workshop,
    type: "checks.run",
    hostId: claim.hostId,
    detail: { student: claim.name, passed, total: outcomes.length },
  });
  return {
    workshop,
    lab: claim.hostId,
    checks: views(spec, claim.claimedAt, await resultsOf(workshop, claim.hostId)),
  };
}

export interface ChecksMatrix {
  workshop: string;
  checks: { name: string; passed: number }[];
  students: {
    lab: string;
    name: string;
    /** Per check, in the order of `checks`: true passed, false failed, null not run. */
    results: (boolean | null)[];
    lastRanAt: string | null;
  }[];
}

/** The instructor's students x checks matrix: each claimed lab's latest result of each check. */
export async function checksMatrix(workshop: string): Promise<ChecksMatrix> {
  assertActor("instructor", "system");
  const { store } = useDeps();
  const w = (await store.workshop.get({ name: workshop }).go()).data;
  if (!w) throw new VisibleError("not_found", "workshop.not_found", `no workshop named ${workshop}`);
  const checks = checksOf(w.spec as Workshop);
  const [claims, results] = await Promise.all([
    store.claim.query.byWorkshop({ workshop }).go({ pages: "all" }),
    resultsOf(workshop),
  ]);
  const students = claims.data
    .map((c) => {
      const mine = results.filter((r) => r.hostId === c.hostId && r.claimedAt === c.claimedAt);
      const byName = new Map(mine.map((r) => [r.check, r]));
      const ran = mine.map((r) => r.ranAt).sort();
      return {
        lab: c.hostId,
        name: c.name,
        results: checks.map((k) => byName.get(k.name)?.passed ?? null),
        lastRanAt: ran.at(-1) ?? null,
      };
    })
    .sort((a, b) => byNumber(a.lab, b.lab));
  return {
    workshop,
    checks: checks.map((k, i) => ({
      name: k.name,
      passed: students.filter((s) => s.results[i] === true).length,
    })),
    students,
  };
}

/** Forgets the check results and presses of one lab (released), or of the whole workshop (teardown). */
export async function forgetChecks(workshop: string, hostId?: string): Promise<void> {
  const { store } = useDeps();
  const key = hostId === undefined ? { workshop } : { workshop, hostId };
  const [results, presses] = await Promise.all([
    store.checkResult.query.byWorkshop(key).go({ pages: "all" }),
    store.checkPress.query.byWorkshop(key).go({ pages: "all" }),
  ]);
  for (const r of results.data)
    await store.checkResult.delete({ workshop, hostId: r.hostId, check: r.check }).go();
  for (const p of presses.data) await store.checkPress.delete({ workshop, hostId: p.hostId }).go();
}
