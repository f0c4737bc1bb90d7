/**
 * Who may sign in as an instructor: verified emails on the allow-list (an entry `@example.com` admits a whole
 * domain) and/or the members of one GitHub organisation. Nobody else, and nobody at all when neither is set.
 */
export interface AllowList {
  emails: string[];
  githubOrg?: string | undefined;
}

export function normalizeEmail(email: string): string {
  return email.trim().toLowerCase();
}

/** `a@x.org, b@y.org @z.org` (commas, spaces or newlines between entries). */
export function parseAllowEmails(text: string | undefined): string[] {
  if (!text) return [];
  const entries = text
    .split(/[\s,;]+/)
    .map(normalizeEmail)
    .filter(Boolean);
  entries.forEach((e, i) => {
    // By position, not by value: error messages never carry an email.
    if (!/^[^@\s]*@[^@\s]+\.[^@\s]+$/.test(e)) {
      throw new Error(`LABFLEET_ALLOW_EMAILS: entry ${i + 1} is neither an email nor an @domain`);
    }
  });
  return [...new Set(entries)];
}

export function hasAllowRules(allow: AllowList): boolean {
  return allow.emails.length > 0 || Boolean(allow.githubOrg);
}

/** The first of these verified emails the allow-list admits. Unverified emails must never be passed in. */
export function allowedEmail(allow: AllowList, verifiedEmails: readonly string[]): string | undefined {
  const list = new Set(allow.emails.map(normalizeEmail));
  for (const raw of verifiedEmails) {
    const email = normalizeEmail(raw);
    const at = email.lastIndexOf("@");
    if (at <= 0) continue;
    if (list.has(email) || list.has(email.slice(at))) return email;
  }
  return undefined;
}
