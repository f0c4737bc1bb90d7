/** How the domain starts and stops workflow runs: Step Functions in the cloud, the local executor here. */
export type RunKind = "up" | "deploy" | "retry" | "provision" | "teardown";

export interface RunInput {
  workshop: string;
  runId: string;
  force?: boolean;
}

export interface Workflows {
  start(kind: RunKind, input: RunInput): Promise<void>;
  /** Stops a run; its handlers already running finish, the run does not go on. */
  stop(runId: string): Promise<void>;
}
