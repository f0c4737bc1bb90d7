import { cookieHeader, storeCookies } from "./cookies.ts";

/**
 * The console over real HTTP, as a browser without JavaScript uses it: a cookie jar, the CSRF field of the last
 * page it saw, and its own Origin (the runtime's address). `signIn()` signs in with the instructor token.
 */
export class ConsoleClient {
  readonly jar = new Map<string, string>();
  csrf = "";
  constructor(readonly base: string) {}

  private async take(res: Response) {
    storeCookies(this.jar, res);
    const type = res.headers.get("content-type") ?? "";
    const text = type.startsWith("text/") || type.includes("json") ? await res.text() : "";
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) this.csrf = m[1];
    return { status: res.status, text, location: res.headers.get("location") ?? "" };
  }

  async get(path: string) {
    return this.take(
      await fetch(`${this.base}${path}`, { headers: cookieHeader(this.jar), redirect: "manual" }),
    );
  }

  async post(path: string, fields: Record<string, string> = {}) {
    const body = new URLSearchParams({ _csrf: this.csrf, ...fields });
    return this.take(
      await fetch(`${this.base}${path}`, {
        method: "POST",
        redirect: "manual",
        headers: {
          ...cookieHeader(this.jar),
          "content-type": "application/x-www-form-urlencoded",
          origin: this.base,
          "sec-fetch-site": "same-origin",
        },
        body,
      }),
    );
  }

  async signIn(token: string) {
    await this.get("/console/login");
    const r = await this.post("/console/login", { token });
    if (r.status !== 303) throw new Error(`console sign-in answered ${r.status}`);
    return r;
  }
}

/** The text of an HTML page without its tags (entities for quotes and ampersands decoded): what a reader sees. */
export function pageText(html: string): string {
  return html
    .replace(/<script[\s\S]*?<\/script>|<style[\s\S]*?<\/style>/g, " ")
    .replace(/<[^>]+>/g, " ")
    .replace(/&#39;|&#x27;/g, "'")
    .replace(/&quot;/g, '"')
    .replace(/&amp;/g, "&")
    .replace(/\s+/g, " ");
}
