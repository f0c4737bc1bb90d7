/** How the domain starts and stops workflow runs: Step Functions in the cloud, the local executor here. */
export type RunKind = "up" | "deploy" | "retry" | "provision" | "scale" | "teardown" | "rollout";
/**
 * What a workflow runs: a run, or `exec`, an exec job (shared/fleet/exec-jobs.ts), which is not a run: its id
 * (RunInput.runId) is the job's, its record the job's.
 */
export type WorkflowKind = RunKind | "exec";

/** The state machines, as the ASL files in stepfunctions/ (`up.asl.json`, `teardown.asl.json`, ...). */
export type DefinitionName = "up" | "teardown" | "rollout" | "exec";

/**
 * deploy and retry are runs of the `up` definition on the hosts they select, and so is scale (on the hosts
 * it adds); provision is a run of `up` that
 * stops after provisioning (BeginUp returns `deploy: false` for it, read from the run record, and the
 * AfterProvision Choice goes straight to FinishUp). Every kind is listed, so a new one must be mapped here.
 */
const DEFINITIONS: Record<WorkflowKind, DefinitionName> = {
  up: "up",
  deploy: "up",
  retry: "up",
  provision: "up",
  scale: "up",
  teardown: "teardown",
  rollout: "rollout",
  exec: "exec",
};

/** Which state machine runs a kind of run: the local executor and the Step Functions adapter both ask here. */
export function definitionOf(kind: WorkflowKind): DefinitionName {
  return DEFINITIONS[kind];
}

export interface RunInput {
  workshop: string;
  runId: string;
  force?: boolean;
}

export interface Workflows {
  start(kind: WorkflowKind, input: RunInput): Promise<void>;
  /** Stops a run; its handlers already running finish, the run does not go on. */
  stop(runId: string): Promise<void>;
  /**
   * The state transitions of a run's execution so far, for adapters that cannot count them as the run goes
   * (Step Functions: from its history, at the run's last step). Absent: the adapter records them itself.
   */
  transitionsOf?(kind: WorkflowKind, runId: string): Promise<number>;
}
