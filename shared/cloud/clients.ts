/**
 * How every AWS client of the control plane retries: AWS's standard mode (exponential backoff with jitter,
 * a longer base for throttling errors, and the retry quota) with more attempts than the SDK's default 3, so a
 * throttled call is waited out instead of failing a host. At a 20 % throttled share, ten attempts all
 * throttled happen about once in ten million calls.
 *
 * Not adaptive mode: its client-side rate limiter is meant for a single resource and callers that tolerate
 * latency (https://docs.aws.amazon.com/sdkref/latest/guide/feature-retry-behavior.html). Once a client has
 * been throttled it holds back every later first attempt to about twice the rate it measured, never below
 * half a call a second, and the client lives on across a warm function's invocations: a request that makes a
 * dozen calls one after another (extend, open-access) then takes two seconds a call and runs out of API
 * Gateway's 30 s. Where labfleet sends many calls to a tight bucket (RunInstances) it paces itself
 * (shared/providers/aws-rates.ts).
 */
export const CLOUD_RETRY = { retryMode: "standard", maxAttempts: 10 } as const;

/** The options every cloud client is made with: the region (when known) and CLOUD_RETRY. */
export function clientOptions(region: string | undefined) {
  return { ...(region ? { region } : {}), ...CLOUD_RETRY };
}
