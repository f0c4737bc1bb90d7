import { z } from "zod";
import { VisibleError } from "../runtime/errors.ts";
import type { HostItem, RunItem } from "../store/entities.ts";
import { STAGES, type Stage } from "./check.ts";

/**
 * The stages of a run of the up workflow (up, deploy, retry, provision, scale), in order:
 *
 * - `provision`: the hosts are created or reused and recorded, the TTL teardown armed.
 * - `deploy`: the lab source is synced and `lab.setup` started on each host that needs it.
 * - `wait`: the hosts are polled until every lab passes `lab.health` or the deadline passes.
 * - `publish`: what happens when labs are ready: the portal opens once `portal.open_at_percent` of the labs are
 *   ready, students waiting in line get the labs that became ready, `provider.student_access: open` opens the
 *   lab UIs once every lab is, and the workshop's state becomes `ready`.
 *
 * `--only` picks stages and `--skip` leaves some out, as Ansible's `--tags` and `--skip-tags` do; both may be
 * given (only, then skip). A run records the stages it runs (`stages` on the run record; absent: all four,
 * or `provision` alone for a provision run) and its workflow reads them at BeginUp.
 */

export { STAGES, type Stage };

const allowed = STAGES.join(", ");

/** One stage name, as the API takes it: an unknown one is a 400 naming the field and the allowed names. */
export const StageName = z.enum(STAGES as [Stage, ...Stage[]], { error: `expected one of: ${allowed}` });

export const StageList = z
  .array(StageName)
  .min(1, { error: `expected at least one of: ${allowed}` })
  .max(STAGES.length);

export interface StageSelection {
  only?: readonly Stage[] | undefined;
  skip?: readonly Stage[] | undefined;
}

/**
 * `--only deploy,wait` as the CLI reads it: stage names separated by commas. An unknown name is an input error
 * on `field` (`only`, `skip`) naming the allowed stages.
 */
export function parseStageList(text: string, field: string): Stage[] {
  const names = text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  if (names.length === 0) {
    throw new VisibleError("input", "stages.invalid", `--${field} needs at least one stage`, [
      { path: field, message: `expected one of: ${allowed}` },
    ]);
  }
  const bad = names.filter((n) => !(STAGES as readonly string[]).includes(n));
  if (bad.length > 0) {
    throw new VisibleError(
      "input",
      "stages.invalid",
      `--${field}: unknown stage ${bad.map((b) => `"${b.replace(/[^\w-]/g, "?").slice(0, 40)}"`).join(", ")}`,
      [{ path: field, message: `expected one of: ${allowed}` }],
    );
  }
  return names as Stage[];
}

/**
 * The stages a selection runs, in workflow order. Nothing selected: all four. A selection that leaves no stage
 * (`--skip` of every one) is an input error.
 */
export function resolveStages(sel: StageSelection): Stage[] {
  const only = sel.only?.length ? new Set(sel.only) : undefined;
  const skip = new Set(sel.skip ?? []);
  const stages = STAGES.filter((s) => (!only || only.has(s)) && !skip.has(s));
  if (stages.length === 0) {
    throw new VisibleError("input", "stages.none", "the selection leaves no stage to run", [
      { path: sel.skip?.length ? "skip" : "only", message: `expected at least one of: ${allowed}` },
    ]);
  }
  return stages;
}

/** Whether a selection is every stage (the default, recorded as no selection at all). */
export function allStages(stages: readonly Stage[]): boolean {
  return STAGES.every((s) => stages.includes(s));
}

/** Which stages a run goes through: those it recorded, or its kind's (provision: provision alone). */
export function stagesOf(run: Pick<RunItem, "kind" | "stages">): Stage[] {
  if (run.stages?.length) return STAGES.filter((s) => run.stages?.includes(s));
  return run.kind === "provision" ? ["provision"] : [...STAGES];
}

/** The stages as the workflow's Choice states read them (BeginUp's `stages`). */
export type StageFlags = Record<Stage, boolean>;

export function stageFlags(stages: readonly Stage[]): StageFlags {
  return Object.fromEntries(STAGES.map((s) => [s, stages.includes(s)])) as StageFlags;
}

/**
 * A run that leaves out `provision` acts on the hosts already recorded: deploying or waiting for a host that was
 * never provisioned is refused (409 `stages.missing`), naming the missing stage and the hosts.
 */
export function assertProvisioned(
  stages: readonly Stage[],
  wanted: readonly string[],
  recorded: readonly HostItem[],
): void {
  if (stages.includes("provision") || !(stages.includes("deploy") || stages.includes("wait"))) return;
  const have = new Set(
    recorded.filter((h) => h.state !== "torn_down" && h.address !== undefined).map((h) => h.hostId),
  );
  const missing = wanted.filter((id) => !have.has(id));
  if (missing.length === 0) return;
  const shown =
    missing.slice(0, 10).join(", ") + (missing.length > 10 ? ` and ${missing.length - 10} more` : "");
  throw new VisibleError(
    "conflict",
    "stages.missing",
    `the provision stage has not run for ${shown}: add provision to --only (or drop --skip provision), or run \`labfleet provision\` first`,
    missing.slice(0, 50).map((id) => ({ path: `hosts.${id}`, message: "not provisioned" })),
  );
}
