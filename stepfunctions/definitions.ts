import { readFileSync } from "node:fs";
import type { DefinitionName } from "../shared/fleet/workflows.ts";

export { type DefinitionName, definitionOf } from "../shared/fleet/workflows.ts";

/** The ASL definitions, as the JSON files in this folder; sst.config.ts reads the same files. */
export const definitionFiles: Record<DefinitionName, string> = {
  up: new URL("./up.asl.json", import.meta.url).pathname,
  teardown: new URL("./teardown.asl.json", import.meta.url).pathname,
  rollout: new URL("./rollout.asl.json", import.meta.url).pathname,
  exec: new URL("./exec.asl.json", import.meta.url).pathname,
};

export type AslDefinition = { StartAt: string; States: Record<string, AslState>; Comment?: string };
export type AslState = {
  Type: string;
  Resource?: string;
  Parameters?: Record<string, unknown>;
  ItemProcessor?: AslDefinition;
  Iterator?: AslDefinition;
  Branches?: AslDefinition[];
  [key: string]: unknown;
};

export function loadDefinition(kind: DefinitionName): AslDefinition {
  return JSON.parse(readFileSync(definitionFiles[kind], "utf8")) as AslDefinition;
}

/** Every state of a definition, nested ones (Map, Parallel) included, with its name. */
export function allStates(def: AslDefinition): [string, AslState][] {
  return Object.entries(def.States).flatMap(([name, state]) => [
    [name, state] as [string, AslState],
    ...[state.ItemProcessor, state.Iterator, ...(state.Branches ?? [])].flatMap((d) =>
      d ? allStates(d) : [],
    ),
  ]);
}

/** `${ProvisionFunction}` -> `Provision`: the handler a Task invokes. */
export function functionKeyOf(state: AslState): string | undefined {
  const name = state.Parameters?.FunctionName;
  if (typeof name !== "string") return undefined;
  return /^\$\{(\w+)Function\}$/.exec(name)?.[1];
}
