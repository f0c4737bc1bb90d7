import { type ExecOptions, type ExecResult, reachHost, type Transport } from "./types.ts";

/**
 * A transport built on first use (an SSH transport needs its identity loaded first). `outputBytes` is the
 * output bound of the transport `make` builds, known before it is built.
 */
export function lazyTransport(make: () => Promise<Transport>, outputBytes?: number): Transport {
  let inner: Promise<Transport> | undefined;
  return {
    ...(outputBytes ? { outputBytes } : {}),
    exec(command: string, options?: ExecOptions): Promise<ExecResult> {
      inner ??= make();
      return inner.then((t) => t.exec(command, options));
    },
    reach(step: string): Promise<void> {
      inner ??= make();
      return inner.then((t) => reachHost(t, step));
    },
    async close() {
      if (!inner) return;
      const t = await inner.catch(() => undefined);
      inner = undefined;
      await t?.close?.();
    },
  };
}
