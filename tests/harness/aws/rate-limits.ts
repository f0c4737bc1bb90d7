import { AwsError } from "./core.ts";

/**
 * The request rates AWS publishes for the APIs the double serves, always enforced (not a fault to turn on):
 * a call past them is refused before it runs, with the error AWS answers. Each figure is taken from the page
 * cited beside it, never from what labfleet's code happens to do. Throttled calls take no token (AWS refills a
 * bucket whether or not it is tried); calls that fail for another reason took theirs.
 *
 * Calls of the `operator` principal (the test acting as the account's administrator, to set things up or look
 * at them) are not counted, so a test's own look never throttles the code under test.
 */

/** A token bucket: `capacity` tokens at most, refilled continuously at `refill` tokens a second. */
export class TokenBucket {
  private tokens: number;
  private at: number;

  constructor(
    readonly capacity: number,
    readonly refill: number,
    private readonly now: () => number,
  ) {
    this.tokens = capacity;
    this.at = now();
  }

  /** The tokens available now. */
  available(): number {
    const t = this.now();
    this.tokens = Math.min(this.capacity, this.tokens + ((t - this.at) / 1000) * this.refill);
    this.at = t;
    return this.tokens;
  }

  /** Whether `n` tokens are there (without taking them). */
  has(n = 1): boolean {
    return this.available() >= n;
  }

  take(n = 1): void {
    this.available();
    this.tokens -= n;
  }
}

export interface BucketSpec {
  capacity: number;
  refill: number;
}

// ------------------------------------------------------------------------------------------------------ EC2

/**
 * EC2 throttles each API's requests per account and Region with a token bucket of its category
 * (https://docs.aws.amazon.com/ec2/latest/devguide/ec2-api-throttling.html, "Request token bucket sizes and
 * refill rates"); past it the call fails with `RequestLimitExceeded`.
 */
export const EC2_REQUEST_BUCKETS = {
  /** Non-mutating actions (Describe*, List*, Search*, Get*): 100 tokens, 20 a second. */
  nonMutating: { capacity: 100, refill: 20 },
  /**
   * Unfiltered and unpaginated non-mutating actions (DescribeInstances, DescribeInstanceStatus,
   * DescribeNetworkInterfaces, DescribeSecurityGroups, DescribeSnapshots, DescribeSpotInstanceRequests,
   * DescribeVolumes) requested with neither a filter nor pagination: 50 tokens, 10 a second.
   */
  unfiltered: { capacity: 50, refill: 10 },
  /** Mutating actions (CreateSecurityGroup, DeleteSecurityGroup...): 50 tokens, 5 a second. */
  mutating: { capacity: 50, refill: 5 },
  /** Resource-intensive actions (AuthorizeSecurityGroupIngress, RevokeSecurityGroupIngress...): 50, 5 a second. */
  resourceIntensive: { capacity: 50, refill: 5 },
  /** Uncategorized: CreateTags, 100 tokens, 10 a second. */
  CreateTags: { capacity: 100, refill: 10 },
  /** Uncategorized: RunInstances, 5 tokens, 2 a second. */
  RunInstances: { capacity: 5, refill: 2 },
  /** Uncategorized: TerminateInstances, 100 tokens, 5 a second. */
  TerminateInstances: { capacity: 100, refill: 5 },
} satisfies Record<string, BucketSpec>;

/**
 * RunInstances and TerminateInstances also draw on a resource token bucket, one token per instance the request
 * launches or terminates (same page, "Resource token bucket sizes and refill rates"): RunInstances 1,000
 * tokens refilled at 2 instances a second, TerminateInstances 1,000 at 20 a second.
 */
export const EC2_RESOURCE_BUCKETS = {
  RunInstances: { capacity: 1000, refill: 2 },
  TerminateInstances: { capacity: 1000, refill: 20 },
} satisfies Record<string, BucketSpec>;

/** The actions of the "unfiltered and unpaginated" subset the double serves. */
const UNFILTERED_SUBSET = new Set(["DescribeInstances", "DescribeSecurityGroups", "DescribeVolumes"]);
const RESOURCE_INTENSIVE = new Set(["AuthorizeSecurityGroupIngress", "RevokeSecurityGroupIngress"]);

/** The request bucket an EC2 call draws on: its own API's bucket, of its category's size. */
export function ec2RequestBucket(
  operation: string,
  input: Record<string, unknown>,
): { key: string; spec: BucketSpec } {
  if (operation === "CreateTags" || operation === "RunInstances" || operation === "TerminateInstances")
    return { key: operation, spec: EC2_REQUEST_BUCKETS[operation] };
  if (/^(Describe|List|Search|Get)/.test(operation)) {
    const filtered = Array.isArray(input.Filters) && input.Filters.length > 0;
    const paginated = input.MaxResults !== undefined || input.NextToken !== undefined;
    if (UNFILTERED_SUBSET.has(operation) && !filtered && !paginated)
      return { key: `${operation}:unfiltered`, spec: EC2_REQUEST_BUCKETS.unfiltered };
    return { key: operation, spec: EC2_REQUEST_BUCKETS.nonMutating };
  }
  if (RESOURCE_INTENSIVE.has(operation))
    return { key: operation, spec: EC2_REQUEST_BUCKETS.resourceIntensive };
  return { key: operation, spec: EC2_REQUEST_BUCKETS.mutating };
}

/** The instances an EC2 call launches or terminates (what its resource bucket is drawn by). */
function ec2Resources(operation: string, input: Record<string, unknown>): number {
  if (operation === "RunInstances") return Number(input.MaxCount ?? 1) || 1;
  if (operation === "TerminateInstances")
    return Array.isArray(input.InstanceIds) ? input.InstanceIds.length : 0;
  return 0;
}

// ------------------------------------------------------------------------------------------------------ SSM

/**
 * Parameter Store's standard throughput: 40 transactions a second, shared by GetParameter, GetParameters and
 * GetParametersByPath (https://docs.aws.amazon.com/general/latest/gr/ssm.html, "Max throughput (transactions
 * per second)"; https://docs.aws.amazon.com/systems-manager/latest/APIReference/API_GetParameter.html: past it,
 * `ThrottlingException: Rate exceeded`). Enforced as a bucket of one second's worth.
 *
 * Run Command's APIs (SendCommand, GetCommandInvocation, ListCommandInvocations) have no published
 * per-API rate: the double does not invent one.
 */
export const SSM_PARAMETER_THROUGHPUT: BucketSpec = { capacity: 40, refill: 40 };
const PARAMETER_READS = new Set(["GetParameter", "GetParameters", "GetParametersByPath"]);

// ------------------------------------------------------------------------------------------------- the limits

/** One refused call, per API: what the account's calls spent and what was refused. */
export interface RateLimitStats {
  refused: Record<string, number>;
}

export class RateLimits {
  private readonly buckets = new Map<string, TokenBucket>();
  readonly stats: RateLimitStats = { refused: {} };

  constructor(private readonly now: () => number = Date.now) {}

  private bucket(key: string, spec: BucketSpec): TokenBucket {
    let b = this.buckets.get(key);
    if (!b) {
      b = new TokenBucket(spec.capacity, spec.refill, this.now);
      this.buckets.set(key, b);
    }
    return b;
  }

  /**
   * Takes the tokens a call needs, or returns the error AWS answers when its bucket lacks them (taking none).
   * Services without published rates pass.
   */
  admit(service: string, operation: string, input: unknown): AwsError | undefined {
    const i = (input ?? {}) as Record<string, unknown>;
    if (service === "ec2") {
      const req = ec2RequestBucket(operation, i);
      const requestBucket = this.bucket(`ec2:${req.key}`, req.spec);
      const n = ec2Resources(operation, i);
      const resourceSpec = EC2_RESOURCE_BUCKETS[operation as keyof typeof EC2_RESOURCE_BUCKETS];
      const resourceBucket = resourceSpec
        ? this.bucket(`ec2:${operation}:resources`, resourceSpec)
        : undefined;
      if (!requestBucket.has(1) || (resourceBucket && n > 0 && !resourceBucket.has(n))) {
        return this.refuse(
          `ec2:${operation}`,
          new AwsError("RequestLimitExceeded", "Request limit exceeded.", 503),
        );
      }
      requestBucket.take(1);
      if (resourceBucket && n > 0) resourceBucket.take(n);
      return undefined;
    }
    if (service === "ssm" && PARAMETER_READS.has(operation)) {
      const b = this.bucket("ssm:parameter-reads", SSM_PARAMETER_THROUGHPUT);
      if (!b.has(1))
        return this.refuse(`ssm:${operation}`, new AwsError("ThrottlingException", "Rate exceeded", 400));
      b.take(1);
    }
    return undefined;
  }

  private refuse(api: string, e: AwsError): AwsError {
    this.stats.refused[api] = (this.stats.refused[api] ?? 0) + 1;
    return e;
  }
}
