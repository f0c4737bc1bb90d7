import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";

/**
 * Rebuilding a lab a student holds takes their work away. deploy and retry (shared/fleet/ops.ts) ask
 * `claimedAmong` which of the labs they would rebuild are claimed, and refuse with `rebuildRefused` unless
 * the caller confirmed (`--force` in the CLI, `force: true` in the API, the confirmation page in the console).
 */

export interface ClaimedLab {
  lab: string;
  /** The student's display name as they gave it on the portal (never their email). */
  student: string;
}

/** The claimed labs among `hostIds`, in the order given; read from the store itself (no cache). */
export async function claimedAmong(workshop: string, hostIds: readonly string[]): Promise<ClaimedLab[]> {
  if (hostIds.length === 0) return [];
  const claims = (
    await useDeps()
      .store.claim.query.byWorkshop({ workshop })
      .go({ pages: "all", attributes: ["hostId", "name"] })
  ).data;
  const byLab = new Map(claims.map((c) => [c.hostId, c.name]));
  return hostIds.flatMap((lab) => {
    const student = byLab.get(lab);
    return student === undefined ? [] : [{ lab, student }];
  });
}

/** "student-01 (Ada Lovelace), student-03 (Grace)". */
export function claimedList(claimed: readonly ClaimedLab[]): string {
  return claimed.map((c) => `${c.lab} (${c.student})`).join(", ");
}

/** The refusal, with the claimed labs for a page that asks (the console) to list. */
export class ClaimedRebuildError extends VisibleError {
  constructor(
    message: string,
    readonly claimed: readonly ClaimedLab[],
  ) {
    super(
      "conflict",
      "rebuild.claimed",
      message,
      claimed.map((c) => ({ path: `hosts.${c.lab}`, message: `claimed by ${c.student}` })),
    );
  }
}

/** 409 `rebuild.claimed`: what would be rebuilt, whose it is, and how to go on. */
export function rebuildRefused(
  verb: "deploy" | "retry",
  claimed: readonly ClaimedLab[],
): ClaimedRebuildError {
  const n = claimed.length;
  return new ClaimedRebuildError(
    `${verb} would rebuild ${n === 1 ? "a lab a student has" : `${n} labs students have`} claimed: ${claimedList(claimed)}. ` +
      `Rebuilding takes away their work. Add --force (API: "force": true) to rebuild ${n === 1 ? "it" : "them"} anyway, or select other hosts with --host.`,
    claimed,
  );
}
