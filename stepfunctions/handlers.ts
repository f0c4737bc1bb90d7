import { handler as BeginRollout } from "../functions/begin-rollout.ts";
import { handler as BeginUp } from "../functions/begin-up.ts";
import { handler as DeployHost } from "../functions/deploy-host.ts";
import { handler as Deprovision } from "../functions/deprovision.ts";
import { handler as ExecFail } from "../functions/exec-fail.ts";
import { handler as ExecStep } from "../functions/exec-step.ts";
import { handler as FailRollout } from "../functions/fail-rollout.ts";
import { handler as FailRun } from "../functions/fail-run.ts";
import { handler as FailTeardown } from "../functions/fail-teardown.ts";
import { handler as FailUnfinished } from "../functions/fail-unfinished.ts";
import { handler as FinishRollout } from "../functions/finish-rollout.ts";
import { handler as FinishTeardown } from "../functions/finish-teardown.ts";
import { handler as FinishUp } from "../functions/finish-up.ts";
import { handler as NextRolloutBatch } from "../functions/next-rollout-batch.ts";
import { handler as Poll } from "../functions/poll.ts";
import { handler as PollRollout } from "../functions/poll-rollout.ts";
import { handler as Provision } from "../functions/provision.ts";
import { handler as RecordHostFailure } from "../functions/record-host-failure.ts";
import { handler as RecordRolloutHostFailure } from "../functions/record-rollout-host-failure.ts";
import { handler as StartRolloutHost } from "../functions/start-rollout-host.ts";

/**
 * The function each `${NameFunction}` placeholder stands for. The local executor calls these in-process;
 * sst.config.ts deploys one Lambda per entry from `functionFiles` and substitutes their ARNs.
 */
export const taskFunctions = {
  BeginUp,
  Provision,
  DeployHost,
  RecordHostFailure,
  Poll,
  FailUnfinished,
  FinishUp,
  FailRun,
  Deprovision,
  FinishTeardown,
  BeginRollout,
  NextRolloutBatch,
  StartRolloutHost,
  RecordRolloutHostFailure,
  PollRollout,
  FinishRollout,
  FailRollout,
  FailTeardown,
  ExecStep,
  ExecFail,
} satisfies Record<string, (event: unknown) => Promise<unknown>>;

export const functionFiles: Record<keyof typeof taskFunctions, string> = {
  BeginUp: "functions/begin-up.handler",
  Provision: "functions/provision.handler",
  DeployHost: "functions/deploy-host.handler",
  RecordHostFailure: "functions/record-host-failure.handler",
  Poll: "functions/poll.handler",
  FailUnfinished: "functions/fail-unfinished.handler",
  FinishUp: "functions/finish-up.handler",
  FailRun: "functions/fail-run.handler",
  Deprovision: "functions/deprovision.handler",
  FinishTeardown: "functions/finish-teardown.handler",
  BeginRollout: "functions/begin-rollout.handler",
  NextRolloutBatch: "functions/next-rollout-batch.handler",
  StartRolloutHost: "functions/start-rollout-host.handler",
  RecordRolloutHostFailure: "functions/record-rollout-host-failure.handler",
  PollRollout: "functions/poll-rollout.handler",
  FinishRollout: "functions/finish-rollout.handler",
  FailRollout: "functions/fail-rollout.handler",
  FailTeardown: "functions/fail-teardown.handler",
  ExecStep: "functions/exec-step.handler",
  ExecFail: "functions/exec-fail.handler",
};
