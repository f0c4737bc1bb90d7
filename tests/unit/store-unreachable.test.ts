import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { Hono } from "hono";
import { beforeAll, describe, expect, it } from "vitest";
import { setLogSink } from "../../shared/runtime/logger.ts";
import { createStore } from "../../shared/store/entities.ts";
import { isStoreUnreachable, untilStoreAnswers } from "../../shared/store/unreachable.ts";
import { onError } from "../../web/api/errors.ts";

/**
 * Telling "the store is unreachable" from every other error: through ElectroDB's wrapping (the cause chain), for
 * the store's own client only. The client's transport is a stub that fails as Node fails a connection, so nothing
 * leaves the process.
 */

type RequestHandler = NonNullable<ConstructorParameters<typeof DynamoDBClient>[0]>["requestHandler"];

/** A transport that fails every request the way `make` says, before anything is sent. */
function failingHandler(make: () => unknown): RequestHandler {
  return {
    handle: async () => {
      throw make();
    },
    updateHttpClientConfig() {},
    httpHandlerConfigs: () => ({}),
  } as unknown as RequestHandler;
}

const netError = (code: string, message = `connect ${code} 127.0.0.1:1`) =>
  Object.assign(new Error(message), { code, syscall: "connect" });

function storeFailingWith(make: () => unknown) {
  const client = new DynamoDBClient({
    region: "local",
    endpoint: "http://127.0.0.1:1",
    credentials: { accessKeyId: "x", secretAccessKey: "x" },
    maxAttempts: 1,
    requestHandler: failingHandler(make),
  });
  return createStore(client, "t");
}

async function errorOf(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error("expected a failure");
}

const logs: string[] = [];
beforeAll(() => setLogSink((line) => logs.push(line)));

describe("isStoreUnreachable", () => {
  it.each(["ECONNREFUSED", "ECONNRESET", "ETIMEDOUT", "EPIPE", "EHOSTUNREACH"])(
    "is true for %s from the store, wrapped by ElectroDB",
    async (code) => {
      const store = storeFailingWith(() => netError(code));
      const err = await errorOf(store.workshop.get({ name: "w" }).go());
      expect((err as Error).name).toBe("ElectroError");
      expect(isStoreUnreachable(err)).toBe(true);
    },
  );

  it("is true for the SDK's request timeout and for the document client's own calls", async () => {
    const timeout = storeFailingWith(() =>
      Object.assign(new Error("Connection timed out after 30000 ms"), { name: "TimeoutError" }),
    );
    expect(isStoreUnreachable(await errorOf(timeout.run.query.byWorkshop({ workshop: "w" }).go()))).toBe(
      true,
    );
    const refused = storeFailingWith(() => netError("ECONNREFUSED"));
    const { GetCommand } = await import("@aws-sdk/lib-dynamodb");
    const raw = await errorOf(
      refused.doc.send(new GetCommand({ TableName: "t", Key: { pk: "a", sk: "b" } })),
    );
    expect((raw as Error).name).not.toBe("ElectroError");
    expect(isStoreUnreachable(raw)).toBe(true);
  });

  it("is false for a store that answered, and for another service's network error", async () => {
    const denied = storeFailingWith(() =>
      Object.assign(new Error("The conditional request failed"), {
        name: "ConditionalCheckFailedException",
        $metadata: { httpStatusCode: 400 },
      }),
    );
    expect(isStoreUnreachable(await errorOf(denied.workshop.get({ name: "w" }).go()))).toBe(false);
    // The same ECONNREFUSED from EC2, an SSH host or a git server is not the store's.
    expect(isStoreUnreachable(netError("ECONNREFUSED"))).toBe(false);
    expect(isStoreUnreachable(new Error("wrapped", { cause: netError("ECONNREFUSED") }))).toBe(false);
    expect(isStoreUnreachable(undefined)).toBe(false);
    expect(isStoreUnreachable("ECONNREFUSED")).toBe(false);
  });

  it("becomes 503 store.unavailable with Retry-After and nothing of the network in the answer", async () => {
    const store = storeFailingWith(() => netError("ECONNREFUSED"));
    const app = new Hono();
    app.onError(onError);
    app.get("/x", async () => {
      await store.workshop.get({ name: "w" }).go();
      return new Response("never");
    });
    const res = await app.request("/x");
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("5");
    const body = await res.text();
    expect(JSON.parse(body).error).toMatchObject({ kind: "unavailable", code: "store.unavailable" });
    expect(body).toContain("the store is unreachable");
    expect(body).not.toMatch(/ECONNREFUSED|127\.0\.0\.1|ElectroError/);
    expect(logs.filter((l) => l.includes('"the store is unreachable"'))).toHaveLength(1); // a warning, no stack
    expect(logs.join("\n")).not.toContain("unhandled error");
  });

  it("untilStoreAnswers tries again while the store is unreachable, and throws anything else at once", async () => {
    let calls = 0;
    const store = storeFailingWith(() => netError("ECONNREFUSED"));
    const unreachable = await errorOf(store.workshop.get({ name: "w" }).go());
    const value = await untilStoreAnswers(
      async () => {
        calls++;
        if (calls < 3) throw unreachable;
        return "answered";
      },
      { delayMs: 1 },
    );
    expect([value, calls]).toEqual(["answered", 3]);
    calls = 0;
    const other = new Error("not the store");
    await expect(
      untilStoreAnswers(async () => {
        calls++;
        throw other;
      }),
    ).rejects.toBe(other);
    expect(calls).toBe(1);
    const stop = new AbortController();
    stop.abort();
    await expect(
      untilStoreAnswers(async () => Promise.reject(unreachable), { signal: stop.signal }),
    ).rejects.toBe(unreachable);
  });
});
