import type { MiddlewareHandler } from "hono";

/**
 * Answers only for the names this runtime is served at, before any route runs. A page on another site can
 * point its own name at 127.0.0.1 (DNS rebinding) and then reach the local runtime from the browser as
 * "same origin"; its requests still carry that name in `Host`, so they are refused here with 421 Misdirected
 * Request.
 *
 * The names: 127.0.0.1, localhost and [::1] (any port: the local runtime listens on 127.0.0.1 only), the
 * host of LABFLEET_PUBLIC_URL (the name a reverse proxy serves it at; the proxy passes the browser's Host on),
 * and, on Lambda, the domain the request came in on (`requestContext.domainName`: the Function URL's, which
 * is the only name AWS routes to the function).
 */

export const PUBLIC_URL_ENV = "LABFLEET_PUBLIC_URL";

const LOOPBACK = ["127.0.0.1", "localhost", "[::1]"];

interface LambdaBindings {
  requestContext?: { domainName?: string };
  event?: { requestContext?: { domainName?: string } };
}

/** The hostname of a Host header (lowercase, brackets kept for IPv6), or undefined when it is not one. */
export function hostnameOf(host: string): string | undefined {
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::(\d{1,5}))?$/i.exec(host.trim());
  return m?.[1]?.toLowerCase();
}

/** The names served: the loopback names and the host of the public URL, when one is set. */
export function servedNames(env: Record<string, string | undefined> = process.env): string[] {
  const names = [...LOOPBACK];
  const value = env[PUBLIC_URL_ENV]?.trim();
  if (value) {
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      throw new Error(`${PUBLIC_URL_ENV} is not a URL`);
    }
    names.push(url.hostname.toLowerCase());
  }
  return names;
}

export function hostGuard(names: string[] = servedNames()): MiddlewareHandler {
  const allowed = new Set(names);
  const list = names.length > LOOPBACK.length ? names.join(", ") : "127.0.0.1, localhost and [::1]";
  return async (c, next) => {
    const host = c.req.header("host") ?? new URL(c.req.url).host;
    const name = hostnameOf(host);
    const env = (c.env ?? {}) as LambdaBindings;
    const domain = env.requestContext?.domainName ?? env.event?.requestContext?.domainName;
    const own = domain ? hostnameOf(domain) : undefined;
    if (name && (allowed.has(name) || name === own)) return next();
    // Plain text, and nothing of what was sent: this answer goes to whatever page made the request.
    return c.text(
      `421 Misdirected Request: this labfleet runtime answers only for ${list}. ` +
        `To serve it under another name, set ${PUBLIC_URL_ENV} to that URL.\n`,
      421,
    );
  };
}
