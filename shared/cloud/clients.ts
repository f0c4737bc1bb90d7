/**
 * How every AWS client of the control plane retries: AWS's adaptive mode (standard retries with a client-side
 * rate limiter that slows down when the service throttles) and more attempts than the SDK's default 3, so a
 * throttled call is waited out instead of failing a host. At a 20 % throttled share, ten attempts all
 * throttled happen about once in ten million calls.
 */
export const CLOUD_RETRY = { retryMode: "adaptive", maxAttempts: 10 } as const;

/** The options every cloud client is made with: the region (when known) and CLOUD_RETRY. */
export function clientOptions(region: string | undefined) {
  return { ...(region ? { region } : {}), ...CLOUD_RETRY };
}
