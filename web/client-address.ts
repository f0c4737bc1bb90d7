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
 * The address rate limits count against (the portal's, the console's sign-in). On Lambda it is the source IP API
 * Gateway reports in the event (`requestContext.http.sourceIp` of payload format 2.0): the address of the TCP
 * connection API Gateway accepted, which no header can change (API Gateway appends it to X-Forwarded-For after
 * whatever the client sent there, so that header is never read on Lambda). Under @hono/node-server it is the
 * socket's peer (what its `getConnInfo` reads), or the last X-Forwarded-For entry behind a trusted proxy; else
 * "local" (`app.request()` in tests, which may pass the same bindings to simulate addresses).
 */
export function clientAddress(c: Context): string {
  const env = (c.env ?? {}) as Bindings;
  const lambda = env.requestContext?.http?.sourceIp ?? env.requestContext?.identity?.sourceIp;
  if (lambda) return lambda;
  if (trustProxy()) {
    const forwarded = c.req.header("x-forwarded-for")?.split(",").at(-1)?.trim();
    if (forwarded) return forwarded;
  }
  return env.incoming?.socket?.remoteAddress ?? env.server?.incoming?.socket?.remoteAddress ?? "local";
}
