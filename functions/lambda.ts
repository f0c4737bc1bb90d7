import { Resource } from "sst/resource";
import { cloudDeps } from "../shared/cloud/deps.ts";
import { linkedFrom } from "../shared/cloud/secrets.ts";
import { configure } from "../shared/runtime/deps.ts";
import type { InvocationContext } from "../shared/runtime/handler.ts";
import { handler as beginRollout } from "./begin-rollout.ts";
import { handler as beginUp } from "./begin-up.ts";
import { handler as deployHost } from "./deploy-host.ts";
import { handler as deprovision } from "./deprovision.ts";
import { handler as execFail } from "./exec-fail.ts";
import { handler as execStep } from "./exec-step.ts";
import { handler as failRollout } from "./fail-rollout.ts";
import { handler as failRun } from "./fail-run.ts";
import { handler as failTeardown } from "./fail-teardown.ts";
import { handler as failUnfinished } from "./fail-unfinished.ts";
import { handler as finishRollout } from "./finish-rollout.ts";
import { handler as finishTeardown } from "./finish-teardown.ts";
import { handler as finishUp } from "./finish-up.ts";
import { handler as forwardEvents } from "./forward-events.ts";
import { handler as nextRolloutBatch } from "./next-rollout-batch.ts";
import { handler as poll } from "./poll.ts";
import { handler as pollRollout } from "./poll-rollout.ts";
import { handler as provision } from "./provision.ts";
import { handler as reconcileRun } from "./reconcile-run.ts";
import { handler as recordHostFailure } from "./record-host-failure.ts";
import { handler as recordRolloutHostFailure } from "./record-rollout-host-failure.ts";
import { handler as runChecks } from "./run-checks.ts";
import { handler as startRolloutHost } from "./start-rollout-host.ts";
import { handler as sweep } from "./sweep.ts";

/**
 * The Lambda entries of the control plane: one export per function sst.config.ts deploys (infra/permissions.ts
 * lists them; `${XFunction}` in the ASL names export X). Each Lambda instance composes the cloud runtime once,
 * on its first invocation, from its environment and the secrets linked to it, then runs the same handler the
 * local executor calls in-process.
 */
let configured = false;

type Handler<R> = (event: unknown, context?: InvocationContext) => Promise<R>;

function cloud<R>(handler: Handler<R>): Handler<R> {
  return async (event, context) => {
    if (!configured) {
      configure(cloudDeps(process.env, { linked: linkedFrom(Resource) }));
      configured = true;
    }
    return handler(event, context);
  };
}

export const BeginUp = cloud(beginUp);
export const Provision = cloud(provision);
export const DeployHost = cloud(deployHost);
export const RecordHostFailure = cloud(recordHostFailure);
export const Poll = cloud(poll);
export const FailUnfinished = cloud(failUnfinished);
export const FinishUp = cloud(finishUp);
export const FailRun = cloud(failRun);
export const Deprovision = cloud(deprovision);
export const FinishTeardown = cloud(finishTeardown);
export const BeginRollout = cloud(beginRollout);
export const NextRolloutBatch = cloud(nextRolloutBatch);
export const StartRolloutHost = cloud(startRolloutHost);
export const RecordRolloutHostFailure = cloud(recordRolloutHostFailure);
export const PollRollout = cloud(pollRollout);
export const FinishRollout = cloud(finishRollout);
export const FailRollout = cloud(failRollout);
/** An exec job's step (check the running hosts, start more) and its failure path. */
export const ExecStep = cloud(execStep);
export const ExecFail = cloud(execFail);
/** The teardown's failure path: fail the run, with a receipt of what is left. */
export const FailTeardown = cloud(failTeardown);
/** Fails a run whose execution ended (failed, timed out, aborted) without recording it: the EventBridge rule's target. */
export const ReconcileRun = cloud(reconcileRun);
/** Runs a lab's checks on its host for the portal's "Check my work" (the portal invokes it by name). */
export const RunChecks = cloud(runChecks);
/** The rate(5 minutes) sweeper, and the target of each workshop's one-time TTL schedule. */
export const Sweep = cloud(sweep);
/** Needs no store and no Deps: it only turns stream records into EventBridge entries. */
export const ForwardEvents = forwardEvents;
