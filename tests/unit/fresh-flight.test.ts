import { describe, expect, it } from "vitest";
import { freshFlight } from "../../shared/runtime/concurrency.ts";

/** A store whose reads the test finishes by hand: each read answers the value written when it started. */
function slowStore() {
  let value = 0;
  const reads: { saw: number; finish: () => void; fail: (e: Error) => void }[] = [];
  const read = (_key: string) =>
    new Promise<number>((resolve, reject) => {
      const saw = value;
      reads.push({ saw, finish: () => resolve(saw), fail: reject });
    });
  return {
    reads,
    read,
    write: () => {
      value++;
    },
  };
}

const settle = () => new Promise((r) => setImmediate(r));

describe("reads shared by calls that must see their own writes", () => {
  it("a call never gets a read that started before it; calls during a read share the next one", async () => {
    const store = slowStore();
    const read = freshFlight((k: string) => k, store.read);
    store.write(); // value 1
    const first = read("w");
    store.write(); // value 2: written after the first read started
    const second = read("w");
    const third = read("w");
    expect(store.reads).toHaveLength(1);
    store.reads[0]?.finish();
    expect(await first).toBe(1);
    await settle();
    // The calls made while it ran share one read, started after they were made.
    expect(store.reads).toHaveLength(2);
    store.reads[1]?.finish();
    expect(await second).toBe(2);
    expect(await third).toBe(2);
    // Nothing is kept: a later call reads again.
    store.write();
    const later = read("w");
    expect(store.reads).toHaveLength(3);
    store.reads[2]?.finish();
    expect(await later).toBe(3);
  });

  it("keys do not share, and a failed read fails only the calls that shared it", async () => {
    const store = slowStore();
    const read = freshFlight((k: string) => k, store.read);
    const a = read("a");
    const b = read("b");
    expect(store.reads).toHaveLength(2);
    store.reads[0]?.fail(new Error("store unreachable"));
    await expect(a).rejects.toThrow("store unreachable");
    store.reads[1]?.finish();
    expect(await b).toBe(0);
    const again = read("a");
    await settle();
    store.reads[2]?.finish();
    expect(await again).toBe(0);
  });

  it("a call made while a failed read runs still gets a read of its own", async () => {
    const store = slowStore();
    const read = freshFlight((k: string) => k, store.read);
    const first = read("w");
    const second = read("w");
    store.reads[0]?.fail(new Error("throttled"));
    await expect(first).rejects.toThrow("throttled");
    await settle();
    store.reads[1]?.finish();
    expect(await second).toBe(0);
  });
});
