/**
 * Check mode: what a command would change, per host and stage, with nothing changed. `up --check`,
 * `deploy --check`, `retry --check` and `rollout --check` all answer a CheckReport; the CLI exits as
 * `terraform plan -detailed-exitcode` does: 0 when nothing would change, 2 when something would, 1 on error.
 */

/** What one stage would do to one host. `skip` and `reuse` change nothing; the others do. */
export type CheckAction = "create" | "reuse" | "rebuild" | "skip" | "promote";

export const CHECK_ACTIONS: readonly CheckAction[] = ["create", "reuse", "rebuild", "skip", "promote"];

/** The stages a run can go through, in order. */
export type Stage = "provision" | "deploy" | "wait" | "publish";

export const STAGES: readonly Stage[] = ["provision", "deploy", "wait", "publish"];

export interface CheckItem {
  hostId: string;
  stage: Stage | "rollout";
  action: CheckAction;
  /** Why, in words: "not built yet", "built at ref main, asked for v2", "claimed by a student (--force rebuilds)". */
  detail?: string;
}

export interface CheckReport {
  workshop: string;
  /** The command checked: up, deploy, retry or rollout. */
  command: string;
  items: CheckItem[];
  /** True when any item would change something. */
  changes: boolean;
}

const UNCHANGED: ReadonlySet<CheckAction> = new Set(["skip", "reuse"]);

/** Whether an action changes anything. */
export function changes(action: CheckAction): boolean {
  return !UNCHANGED.has(action);
}

/** A report from its items, with `changes` worked out. */
export function checkReport(workshop: string, command: string, items: CheckItem[]): CheckReport {
  return { workshop, command, items, changes: items.some((i) => changes(i.action)) };
}

/** The exit code of a check: 0 nothing would change, 2 something would. (Errors exit 1 before a report exists.) */
export function checkExitCode(report: CheckReport): 0 | 2 {
  return report.changes ? 2 : 0;
}
