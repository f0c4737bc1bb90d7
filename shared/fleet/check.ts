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

/** The host id of the items about the whole workshop (the publish stage), not about one host. */
export const WORKSHOP_ITEM = "*";

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

export interface CheckSummary {
  /** Items that would change something on a host. */
  hostChanges: number;
  /** Distinct hosts with at least one change (the workshop-level item is not a host). */
  hosts: number;
  /** Items that would change something about the whole workshop (publish), and their stages. */
  workshopChanges: number;
  workshopStages: string[];
  /** In words: "4 changes on 2 hosts and 1 to the workshop (publish)", or "nothing would change". */
  text: string;
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** What a report would change, counted as a reader counts it: hosts are hosts, the workshop is the workshop. */
export function checkSummary(report: Pick<CheckReport, "items">): CheckSummary {
  const changing = report.items.filter((i) => changes(i.action));
  const onHosts = changing.filter((i) => i.hostId !== WORKSHOP_ITEM);
  const onWorkshop = changing.filter((i) => i.hostId === WORKSHOP_ITEM);
  const hosts = new Set(onHosts.map((i) => i.hostId)).size;
  const workshopStages = [...new Set(onWorkshop.map((i) => i.stage))];
  const parts: string[] = [];
  if (onHosts.length) parts.push(`${plural(onHosts.length, "change")} on ${plural(hosts, "host")}`);
  if (onWorkshop.length)
    parts.push(
      `${onHosts.length ? String(onWorkshop.length) : plural(onWorkshop.length, "change")} to the workshop (${workshopStages.join(", ")})`,
    );
  return {
    hostChanges: onHosts.length,
    hosts,
    workshopChanges: onWorkshop.length,
    workshopStages,
    text: parts.length ? parts.join(" and ") : "nothing would change",
  };
}
