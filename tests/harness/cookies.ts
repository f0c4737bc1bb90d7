/** A cookie jar for tests that drive the app without a browser (app.request or fetch). */

/** The Cookie header for what the jar holds (none when it is empty). */
export function cookieHeader(jar: Map<string, string>): Record<string, string> {
  const c = [...jar].map(([k, v]) => `${k}=${v}`).join("; ");
  return c ? { cookie: c } : {};
}

/** Keeps the response's cookies in the jar (an empty value or Max-Age=0 removes one); returns the raw lines. */
export function storeCookies(jar: Map<string, string>, res: Response): string[] {
  const lines = res.headers.getSetCookie();
  for (const line of lines) {
    const [pair] = line.split(";");
    const i = pair?.indexOf("=") ?? -1;
    if (!pair || i < 0) continue;
    const name = pair.slice(0, i);
    const value = pair.slice(i + 1);
    if (!value || /Max-Age=0(;|$)/i.test(line)) jar.delete(name);
    else jar.set(name, value);
  }
  return lines;
}
