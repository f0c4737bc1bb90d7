import type { Context } from "hono";

/**
 * Set LABFLEET_TRUST_PROXY=1 only when the runtime sits behind exactly one reverse proxy that appends the
 * client's address to X-Forwarded-For and sets X-Forwarded-Proto. Otherwise these headers are the client's
 * to forge, and a forged address would dodge the per-address rate limits; they are ignored.
 */
export const trustProxy = () => process.env.LABFLEET_TRUST_PROXY === "1";

interface Bindings {
  incoming?: { socket?: { remoteAddress?: string } };
  server?: { incoming?: { socket?: { remoteAddress?: string } } };
  requestContext?: { http?: { sourceIp?: string }; identity?: { sourceIp?: string } };
}

/**
 * The address rate limits count against (the portal's, the console's sign-in): the socket's peer under
 * @hono/node-server (what its `getConnInfo` reads), the source IP Lambda reports, else "local"
 * (`app.request()` in tests, which may pass the same bindings to simulate addresses).
 */
export function clientAddress(c: Context): string {
  if (trustProxy()) {
    const forwarded = c.req.header("x-forwarded-for")?.split(",").at(-1)?.trim();
    if (forwarded) return forwarded;
  }
  const env = (c.env ?? {}) as Bindings;
  return (
    env.incoming?.socket?.remoteAddress ??
    env.server?.incoming?.socket?.remoteAddress ??
    env.requestContext?.http?.sourceIp ??
    env.requestContext?.identity?.sourceIp ??
    "local"
  );
}
