import type { Context } from "hono";
import { useDeps } from "../shared/runtime/deps.ts";
import { STORE_RETRY_AFTER_SECONDS, storeHealth } from "../shared/store/unreachable.ts";

/**
 * GET /api/health, without a token: `{ok: true, store: "ok"}` (200) while the store answers; `{ok: false, store:
 * "unreachable"}` (503, with Retry-After) while it does not, and `{ok: false, store: "error"}` (503) when it
 * answers with an error of its own (a missing table, a denied read). The store is probed at most every few hundred
 * milliseconds, however often health is polled.
 */
export async function health(c: Context) {
  const store = await storeHealth(useDeps().store);
  if (store === "ok") return c.json({ ok: true, store });
  c.header("Retry-After", String(STORE_RETRY_AFTER_SECONDS));
  return c.json({ ok: false, store }, 503);
}
