/**
 * Everything the portal keeps and for how long. The cookies are set from these values and /privacy reads
 * the same values, so the page cannot drift from what the portal does (a test checks both).
 */
export const HOUR_S = 3600;

export const COOKIES = {
  /** Set by a valid workshop code; bound to the code's version, so rotate-code ends it. */
  access: {
    name: "lf_access",
    maxAgeSeconds: 24 * HOUR_S,
    purpose: "lets this browser see the board after you entered the workshop code",
  },
  /** Set by a claim or a recovery; holds your personal link so this browser can take you back to your lab. */
  lab: { name: "lf_lab", maxAgeSeconds: 3 * 24 * HOUR_S, purpose: "remembers your lab on this device" },
  /** A random value that proves a form was sent from this site (CSRF protection); ends with the browser session. */
  csrf: { name: "lf_csrf", maxAgeSeconds: 0, purpose: "protects the forms against cross-site requests" },
} as const;

export const RATE = {
  windowSeconds: 10 * 60,
  /** Failed guesses (wrong workshop codes, wrong PINs) per address per window. */
  perAddressFailures: 30,
  /** Wrong workshop codes for the whole portal per window... */
  globalWrongCodes: 200,
  /** ...past which only addresses that already sent this many wrong codes must wait. */
  wrongCodesBeforeGlobalLimit: 3,
} as const;

export const MAX_PIN_FAILURES = 5;

/** PIN hashing: scrypt N=2^14, r=8, p=1 (about 34 ms of CPU here). Never lower to win a benchmark. */
export const SCRYPT = { N: 2 ** 14, r: 8, p: 1, keyLen: 32 } as const;

/** What the portal keeps, for /privacy. */
export const RETENTION = {
  claims: "until the workshop is torn down",
  // A counter lives through its 10-minute window and one more, then the table's TTL removes it.
  rateCounters: `up to ${(2 * RATE.windowSeconds) / 60} minutes`,
} as const;

/**
 * How old the student pages' shared reads may be (the portal record, the code, the board's labs and claims,
 * failure counts). A classroom of thirty then reads each once a second, not thirty times; instructor changes
 * made through another process reach the pages within this time. Claims themselves decide by transaction.
 */
export const STUDENT_READ_TTL_MS = 1000;
