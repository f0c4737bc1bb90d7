/**
 * EC2's request rates as the provider paces itself to them. EC2 throttles each API per account and Region
 * with a token bucket (https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html): RunInstances
 * holds 5 requests and refills 2 a second, the tightest of the calls a provision makes, so launching 500 hosts
 * one RunInstances each (each host keeps its own ClientToken and its own tags, applied atomically at launch)
 * takes about four minutes however it is driven. The provider starts its launches at that pace instead of
 * bursting and being refused; the SDK's retries (shared/cloud/clients.ts, backing off) absorb what other callers in
 * the account spend of the same bucket. TerminateInstances takes up to 1,000 instances per request and
 * refills 5 requests a second: a teardown terminates in batches.
 */

/** RunInstances' request bucket: 5 tokens, refilled at 2 a second. */
export const RUN_INSTANCES_RATE = { capacity: 5, perSecond: 2 } as const;

/**
 * How the provider paces its launches: RunInstances' refill rate, with one token of the burst kept as slack, so
 * a request that reaches EC2 later than the one after it (latency varies) still finds a token there.
 */
export const RUN_INSTANCES_PACE = {
  capacity: RUN_INSTANCES_RATE.capacity - 1,
  perSecond: RUN_INSTANCES_RATE.perSecond,
} as const;

/** The most instances labfleet terminates in one TerminateInstances request. */
export const TERMINATE_BATCH = 100;

/**
 * A client-side token bucket: `take()` resolves when a request may go. Requests queue in order; when the
 * bucket is empty the next one sleeps until a token is due. The time slept counts as refilled, so a test's
 * sleep that returns at once needs no clock.
 */
export class Pacer {
  private tokens: number;
  private at: number;
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly rate: { capacity: number; perSecond: number },
    private readonly sleep: (ms: number) => Promise<void>,
    private readonly now: () => number = () => performance.now(),
  ) {
    this.tokens = rate.capacity;
    this.at = now();
  }

  take(): Promise<void> {
    const turn = this.queue.then(async () => {
      const t = this.now();
      this.tokens = Math.min(this.rate.capacity, this.tokens + ((t - this.at) / 1000) * this.rate.perSecond);
      this.at = t;
      if (this.tokens >= 1) {
        this.tokens -= 1;
        return;
      }
      await this.sleep(Math.ceil(((1 - this.tokens) / this.rate.perSecond) * 1000));
      this.tokens = 0;
      this.at = this.now();
    });
    this.queue = turn;
    return turn;
  }
}

/** `items` in order, in batches whose weights (instances per host) add up to at most `max` (one item at least). */
export function batchesOf<T>(items: readonly T[], weight: (item: T) => number, max: number): T[][] {
  const out: T[][] = [];
  let current: T[] = [];
  let sum = 0;
  for (const item of items) {
    const w = weight(item);
    if (current.length > 0 && sum + w > max) {
      out.push(current);
      current = [];
      sum = 0;
    }
    current.push(item);
    sum += w;
  }
  if (current.length > 0) out.push(current);
  return out;
}
