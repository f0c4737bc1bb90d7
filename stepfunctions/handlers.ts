import { handler as BeginUp } from "../functions/begin-up.ts";
import { handler as DeployHost } from "../functions/deploy-host.ts";
import { handler as Deprovision } from "../functions/deprovision.ts";
import { handler as FailRun } from "../functions/fail-run.ts";
import { handler as FailTeardown } from "../functions/fail-teardown.ts";
import { handler as FailUnfinished } from "../functions/fail-unfinished.ts";
import { handler as FinishTeardown } from "../functions/finish-teardown.ts";
import { handler as FinishUp } from "../functions/finish-up.ts";
import { handler as Poll } from "../functions/poll.ts";
import { handler as Provision } from "../functions/provision.ts";
import { handler as RecordHostFailure } from "../functions/record-host-failure.ts";

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
  FailTeardown,
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
  FailTeardown: "functions/fail-teardown.handler",
};
