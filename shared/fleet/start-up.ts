import { hostIdsOf } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import type { RunItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { startRun } from "./runs.ts";
import { assertProvisioned, STAGES, type Stage } from "./stages.ts";
import { getWorkshop, listHosts } from "./workshops.ts";

/**
 * `labfleet up` with its stages (`--only`/`--skip`, resolved by shared/fleet/stages.ts): every stage by default;
 * `provision` alone is a provision run, as `labfleet provision` starts; a selection without provision acts on
 * the hosts recorded and is refused (409 `stages.missing`) when one of the workshop's hosts is not.
 */
export async function startUp(
  name: string,
  opts: { force?: boolean; stages?: Stage[] } = {},
): Promise<RunItem> {
  assertActor("instructor", "system");
  const stages = opts.stages ?? [...STAGES];
  if (stages.length === 1 && stages[0] === "provision") return startRun(name, "provision");
  const w = await getWorkshop(name);
  const removed = new Set(w.removedHosts ?? []);
  assertProvisioned(
    stages,
    hostIdsOf(w.spec as Workshop).filter((id) => !removed.has(id)),
    await listHosts(name),
  );
  return startRun(name, "up", { force: opts.force ?? false, stages });
}
