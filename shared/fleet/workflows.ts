/** How the domain starts and stops workflow runs: Step Functions in the cloud, the local executor here. */
export type RunKind = "up" | "deploy" | "retry" | "provision" | "scale" | "teardown" | "rollout";

/** The state machines, as the ASL files in stepfunctions/ (`up.asl.json`, `teardown.asl.json`, `rollout.asl.json`). */
export type DefinitionName = "up" | "teardown" | "rollout";

/**
 * deploy and retry are runs of the `up` definition on the hosts they select, and so is scale (on the hosts
 * it adds); provision is a run of `up` that
 * stops after provisioning (BeginUp returns `deploy: false` for it, read from the run record, and the
 * AfterProvision Choice goes straight to FinishUp). Every kind is listed, so a new one must be mapped here.
 */
const DEFINITIONS: Record<RunKind, DefinitionName> = {
  up: "up",
  deploy: "up",
  retry: "up",
  provision: "up",
  scale: "up",
  teardown: "teardown",
  rollout: "rollout",
};

/** Which state machine runs a kind of run: the local executor and the Step Functions adapter both ask here. */
export function definitionOf(kind: RunKind): DefinitionName {
  return DEFINITIONS[kind];
}

export interface RunInput {
  workshop: string;
  runId: string;
  force?: boolean;
}

export interface Workflows {
  start(kind: RunKind, input: RunInput): Promise<void>;
  /** Stops a run; its handlers already running finish, the run does not go on. */
  stop(runId: string): Promise<void>;
  /**
   * The state transitions of a run's execution so far, for adapters that cannot count them as the run goes
   * (Step Functions: from its history, at the run's last step). Absent: the adapter records them itself.
   */
  transitionsOf?(kind: RunKind, runId: string): Promise<number>;
}
