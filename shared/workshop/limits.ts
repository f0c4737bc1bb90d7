/**
 * What AWS Step Functions (Standard workflows) allows one execution, and what labfleet's `up` workflow
 * (stepfunctions/up.asl.json) spends of it, so `labfleet validate` refuses a workshop whose run cannot fit.
 * The Step Functions figures are from the Step Functions Developer Guide ("Step Functions service quotas";
 * "Using Map state in Inline mode"; "Avoid reaching the history quota"). The event counts are what Step
 * Functions writes to an execution's history for each state (the HistoryEventType list of the API
 * reference): the AWS double's engine (stepfunctions/engine.ts) counts them the same way, and
 * tests/unit/asl-engine.test.ts runs up.asl.json to check these figures.
 */

/**
 * An execution's history holds at most 25,000 events (a hard quota). When it reaches 24,999, Step Functions
 * waits for the next event: if event 25,000 is ExecutionSucceeded the execution succeeds, otherwise
 * ExecutionFailed is logged and the execution fails (States.Runtime, "The execution reached the maximum
 * number of history events (25000).").
 */
export const HISTORY_EVENT_LIMIT = 25_000;

/**
 * The most hosts one workshop may have, on every provider (provider.count, hosts[]): what one `up` and one
 * teardown are built and tested to carry within the quotas below (docs/operations.md, "How large a workshop
 * can be").
 */
export const MAX_WORKSHOP_HOSTS = 500;

/** An inline Map state runs at most 40 iterations at once, whatever its MaxConcurrency says. */
export const INLINE_MAP_MAX_CONCURRENCY = 40;

/**
 * The largest input or output of a task, state or execution: 262,144 bytes of data as a UTF-8 string
 * (256 KiB). Beyond it a state fails with States.DataLimitExceeded.
 */
export const PAYLOAD_LIMIT_BYTES = 262_144;

/**
 * One readiness poll of `up`: WaitBeforePoll (WaitStateEntered, WaitStateExited), Poll (TaskStateEntered,
 * TaskScheduled, TaskStarted, TaskSucceeded, TaskStateExited) and CheckReady (ChoiceStateEntered,
 * ChoiceStateExited).
 */
export const EVENTS_PER_POLL = 9;

/**
 * One item of the Deploy Map (one host, or one batch of hosts: deployBatchSize), at most without retries:
 * MapIterationStarted; DeployHost failing (TaskStateEntered, TaskScheduled, TaskStarted, TaskFailed,
 * TaskStateExited, as its Catch moves on); RecordHostFailure (TaskStateEntered, TaskScheduled, TaskStarted,
 * TaskSucceeded, TaskStateExited); MapIterationSucceeded. An item that deploys costs 7 of these 12.
 */
export const EVENTS_PER_HOST = 12;

/**
 * Lambda errors one Task of `up` may retry: its retriers allow 4 retries on Lambda service errors
 * (Lambda.ServiceException, Lambda.AWSLambdaException, Lambda.SdkClientException) and 8 on throttling
 * (Lambda.TooManyRequestsException). tests/unit/asl-engine.test.ts checks this against up.asl.json.
 */
export const LAMBDA_RETRIES_PER_TASK = 4 + 8;

/**
 * The most items the Deploy Map is given. A larger fleet goes in batches: each item deploys up to
 * deployBatchSize hosts in one DeployHost invocation (the hosts of a batch side by side), so a 500-host run's
 * history holds 100 items, not 500, and its worst case stays far inside the 25,000 events.
 */
export const MAX_DEPLOY_ITEMS = 100;

/** The hosts one Deploy Map item deploys, for a workshop of `hosts` hosts: 1 up to 100 hosts, 5 at 500. */
export function deployBatchSize(hosts: number): number {
  return Math.max(1, Math.ceil(hosts / MAX_DEPLOY_ITEMS));
}

/** The Deploy Map's items for these hosts, in order, in batches of `size`. */
export function deployBatches(hostIds: string[], size: number): string[][] {
  const out: string[][] = [];
  for (let i = 0; i < hostIds.length; i += size) out.push(hostIds.slice(i, i + size));
  return out;
}

/** The Deploy Map's item count for a workshop of `hosts` hosts. */
export function deployItems(hosts: number): number {
  return Math.ceil(hosts / deployBatchSize(hosts));
}

/**
 * Room for Lambda errors on every Map item: DeployHost and RecordHostFailure each retried as far as their
 * retriers allow (the Deploy Map invokes up to 40 functions at once, where Lambda throttles first), each retry
 * adding TaskScheduled, TaskStarted and TaskFailed.
 */
export const RETRY_EVENTS_PER_HOST = 2 * LAMBDA_RETRIES_PER_TASK * 3;

/**
 * Once per run, on the longest path: ExecutionStarted; BeginUp and Provision (5 each: TaskStateEntered,
 * TaskScheduled, TaskStarted, TaskSucceeded, TaskStateExited); the stage Choices ProvisionStage,
 * AfterProvision and AfterDeploy (2 each: ChoiceStateEntered, ChoiceStateExited); the Deploy Map's
 * MapStateEntered, MapStateStarted, MapStateSucceeded, MapStateExited (4); at the deadline FailUnfinished,
 * then FinishUp failing into FailRun (5 each); the Fail state's FailStateEntered and ExecutionFailed.
 */
export const FIXED_EVENTS = 1 + 5 + 5 + 2 * 3 + 4 + 5 + 5 + 5 + 1 + 1;

/**
 * Room for retries of the run's own tasks and polls (BeginUp, Provision, Poll, FailUnfinished, FinishUp,
 * FailRun), one invocation at a time: 250 retries of 3 events each (TaskScheduled, TaskStarted, TaskFailed),
 * enough for each of those tasks to spend all its retries and for 190 retried polls.
 */
export const RETRY_MARGIN_EVENTS = 250 * 3;

/**
 * The most polls a run makes: it polls every `pollSeconds` until the deadline, `timeoutMinutes` after its
 * start (a poll at or after the deadline times the run out), so at most ceil(timeout / poll) polls, and one
 * more for a deploy that returns within the first interval.
 */
export function maxPolls(pollSeconds: number, timeoutMinutes: number): number {
  return Math.ceil((timeoutMinutes * 60) / pollSeconds) + 1;
}

/** The history events a run of `up` writes in the worst case: every poll, every host failing, retries. */
export function worstCaseHistoryEvents(pollSeconds: number, timeoutMinutes: number, hosts: number): number {
  return (
    FIXED_EVENTS +
    RETRY_MARGIN_EVENTS +
    deployItems(hosts) * (EVENTS_PER_HOST + RETRY_EVENTS_PER_HOST) +
    maxPolls(pollSeconds, timeoutMinutes) * EVENTS_PER_POLL
  );
}

/** How many polls fit in one execution's history with `hosts` in the Deploy Map. */
export function pollBudget(hosts: number): number {
  const room =
    HISTORY_EVENT_LIMIT -
    FIXED_EVENTS -
    RETRY_MARGIN_EVENTS -
    deployItems(hosts) * (EVENTS_PER_HOST + RETRY_EVENTS_PER_HOST);
  return Math.max(0, Math.floor(room / EVENTS_PER_POLL));
}

export interface HistoryBudget {
  polls: number;
  events: number;
  fits: boolean;
  /** The smallest whole poll_seconds that fits with this timeout (undefined: none up to `maxPollSeconds`). */
  minPollSeconds?: number;
  /** The largest whole timeout_minutes that fits with this poll interval (undefined: none). */
  maxTimeoutMinutes?: number;
}

/**
 * Whether a run of `up` with these settings fits in one Step Functions execution, and if not, the nearest
 * poll_seconds and timeout_minutes that do.
 */
export function historyBudget(
  pollSeconds: number,
  timeoutMinutes: number,
  hosts: number,
  maxPollSeconds = 3600,
): HistoryBudget {
  const polls = maxPolls(pollSeconds, timeoutMinutes);
  const events = worstCaseHistoryEvents(pollSeconds, timeoutMinutes, hosts);
  const budget = pollBudget(hosts);
  const fits = polls <= budget;
  if (fits) return { polls, events, fits };
  // ceil(T * 60 / P) + 1 <= budget  <=>  T * 60 / P <= budget - 1  <=>  P >= T * 60 / (budget - 1).
  const usable = budget - 1;
  let minPollSeconds: number | undefined;
  if (usable > 0) {
    let p = Math.max(1, Math.ceil((timeoutMinutes * 60) / usable));
    while (p <= maxPollSeconds && maxPolls(p, timeoutMinutes) > budget) p++;
    if (p <= maxPollSeconds) minPollSeconds = p;
  }
  let maxTimeoutMinutes: number | undefined;
  if (usable > 0) {
    let t = Math.floor((usable * pollSeconds) / 60);
    while (t > 0 && maxPolls(pollSeconds, t) > budget) t--;
    if (t > 0) maxTimeoutMinutes = t;
  }
  return {
    polls,
    events,
    fits,
    ...(minPollSeconds !== undefined ? { minPollSeconds } : {}),
    ...(maxTimeoutMinutes !== undefined ? { maxTimeoutMinutes } : {}),
  };
}
