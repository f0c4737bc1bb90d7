import { type AslDefinition, allStates } from "./definitions.ts";

export const LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke";

/**
 * What the local executor cannot run faithfully, so no definition may use it (asl-validator accepts
 * JSONata and Assign, so it will not warn): QueryLanguage, Assign, .sync, .waitForTaskToken, and any
 * Task resource other than lambda:invoke.
 */
export function aslViolations(def: AslDefinition): string[] {
  const problems: string[] = [];
  if ("QueryLanguage" in def)
    problems.push("top level: QueryLanguage (JSONata) is not allowed; use JSONPath");
  for (const [name, state] of allStates(def)) {
    if ("QueryLanguage" in state) problems.push(`${name}: QueryLanguage is not allowed`);
    if ("Assign" in state) problems.push(`${name}: Assign (variables) is not allowed`);
    if (state.Type === "Task") {
      const resource = String(state.Resource ?? "");
      if (resource.endsWith(".sync") || resource.includes(".sync:"))
        problems.push(`${name}: .sync integrations are not allowed`);
      if (resource.includes(".waitForTaskToken")) problems.push(`${name}: .waitForTaskToken is not allowed`);
      if (resource !== LAMBDA_INVOKE)
        problems.push(`${name}: Resource must be ${LAMBDA_INVOKE}, got ${resource}`);
    }
  }
  return problems;
}
