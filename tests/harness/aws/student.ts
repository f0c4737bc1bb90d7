import { cookieHeader, storeCookies } from "../cookies.ts";
import type { FakeAwsAccount } from "./account.ts";

/**
 * A student's browser without a browser, on the deployed portal: a cookie jar and the last form's CSRF field.
 * Requests go to the portal HTTP API's local endpoint (never the public name, which does not resolve here);
 * forms carry the Origin a browser on the portal's public https address sends.
 */
export function portalStudent(account: FakeAwsAccount) {
  const jar = new Map<string, string>();
  let csrf = "";
  const base = account.portalEndpoint;
  const origin = new URL(account.portalUrl).origin;
  const take = async (res: Response) => {
    const cookies = storeCookies(jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) csrf = m[1];
    return { status: res.status, text, location: res.headers.get("location") ?? "", cookies };
  };
  return {
    get: async (path: string) =>
      take(await fetch(`${base}${path}`, { headers: cookieHeader(jar), redirect: "manual" })),
    post: async (path: string, fields: Record<string, string> = {}, headers: Record<string, string> = {}) =>
      take(
        await fetch(`${base}${path}`, {
          method: "POST",
          redirect: "manual",
          headers: {
            ...cookieHeader(jar),
            origin,
            "content-type": "application/x-www-form-urlencoded",
            ...headers,
          },
          body: new URLSearchParams({ _csrf: csrf, ...fields }),
        }),
      ),
  };
}
