import { Readable } from "node:stream";
import { DynamoDBClient, GetItemCommand } from "@aws-sdk/client-dynamodb";
import { GetCommandInvocationCommand, SSMClient } from "@aws-sdk/client-ssm";
import { afterEach, describe, expect, it, vi } from "vitest";
import { CLOUD_RETRY, clientOptions } from "../../shared/cloud/clients.ts";

/**
 * How the control plane's AWS clients behave when AWS throttles them: a throttled attempt is retried after a
 * backoff, and nothing else waits. A client that was throttled once does not hold back the first attempts of the
 * calls after it (a request making a dozen calls one after another would otherwise run out of its 30 s).
 * The transport is a stub that answers in the JSON protocols' form, so nothing leaves the process.
 */

const realSetTimeout = globalThis.setTimeout;

type Handler = NonNullable<ConstructorParameters<typeof DynamoDBClient>[0]>["requestHandler"];

interface Attempt {
  attempt: number;
  /** Timers the client set since the previous answer (a backoff, or a client-side rate limit). */
  timersBefore: number;
}

/**
 * A stub transport: `throttle(n)` says whether the n-th attempt (from 0) is answered with ThrottlingException.
 * It records each attempt's number (from the SDK's amz-sdk-request header) and the timers set before it; the
 * timers fire at once (a backoff is up to 20 s), so what is counted is that the client waited, not how long.
 */
function stubTransport(throttle: (n: number) => boolean, okBody: string) {
  const attempts: Attempt[] = [];
  let timers = 0;
  vi.spyOn(globalThis, "setTimeout").mockImplementation(((fn: () => void, ms?: number) => {
    if ((ms ?? 0) > 0) timers++;
    return realSetTimeout(fn, 0);
  }) as typeof setTimeout);
  const handler = {
    handle: async (request: { headers: Record<string, string> }) => {
      const n = attempts.length;
      const attempt = Number(/attempt=(\d+)/.exec(request.headers["amz-sdk-request"] ?? "")?.[1] ?? 0);
      attempts.push({ attempt, timersBefore: timers });
      timers = 0;
      const throttled = throttle(n);
      return {
        response: {
          statusCode: throttled ? 400 : 200,
          headers: { "content-type": "application/x-amz-json-1.0" },
          body: Readable.from([
            Buffer.from(
              throttled
                ? JSON.stringify({ __type: "ThrottlingException", message: "Rate exceeded" })
                : okBody,
            ),
          ]),
        },
      };
    },
    updateHttpClientConfig() {},
    httpHandlerConfigs: () => ({}),
  } as unknown as Handler;
  return { handler, attempts };
}

afterEach(() => {
  vi.restoreAllMocks();
});

const common = {
  endpoint: "http://127.0.0.1:1",
  credentials: { accessKeyId: "x", secretAccessKey: "x" },
};

describe("the control plane's AWS clients when AWS throttles", () => {
  it("retry a throttled call up to the configured attempts, after a backoff each time", async () => {
    const { handler, attempts } = stubTransport((n) => n < 3, "{}");
    const client = new DynamoDBClient({ ...clientOptions("eu-west-1"), ...common, requestHandler: handler });
    await client.send(new GetItemCommand({ TableName: "t", Key: { pk: { S: "a" } } }));
    expect(attempts.map((a) => a.attempt)).toEqual([1, 2, 3, 4]);
    // Each retry waited once; the first attempt did not wait.
    expect(attempts.map((a) => a.timersBefore)).toEqual([0, 1, 1, 1]);
  });

  it("give up after the configured attempts, with AWS's error", async () => {
    const { handler, attempts } = stubTransport(() => true, "{}");
    const client = new DynamoDBClient({ ...clientOptions("eu-west-1"), ...common, requestHandler: handler });
    await expect(
      client.send(new GetItemCommand({ TableName: "t", Key: { pk: { S: "a" } } })),
    ).rejects.toMatchObject({ name: "ThrottlingException" });
    expect(attempts).toHaveLength(CLOUD_RETRY.maxAttempts);
  });

  it.each([
    ["DynamoDB", "dynamodb"],
    ["SSM", "ssm"],
  ])("%s: after throttled calls, the next calls' first attempts go at once", async (_name, kind) => {
    // The first call is throttled once; then every fifth attempt is.
    const { handler, attempts } = stubTransport((n) => n === 0 || n % 5 === 4, "{}");
    const options = { ...clientOptions("eu-west-1"), ...common, requestHandler: handler };
    const dynamodb = new DynamoDBClient(options);
    const ssm = new SSMClient(options);
    const send = () =>
      kind === "dynamodb"
        ? dynamodb.send(new GetItemCommand({ TableName: "t", Key: { pk: { S: "a" } } }))
        : ssm.send(new GetCommandInvocationCommand({ CommandId: "c", InstanceId: "i-1" }));
    for (let i = 0; i < 24; i++) await send();
    const firsts = attempts.filter((a) => a.attempt === 1);
    const retries = attempts.filter((a) => a.attempt > 1);
    expect(firsts).toHaveLength(24);
    expect(retries.length).toBeGreaterThanOrEqual(5);
    // No first attempt waited for anything; each retry waited for its backoff only.
    expect(firsts.filter((a) => a.timersBefore > 0)).toEqual([]);
    expect(retries.every((a) => a.timersBefore === 1)).toBe(true);
  });
});
