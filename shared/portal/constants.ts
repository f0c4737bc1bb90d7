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
  /**
   * A random id for this browser, signed; it also says whether the browser has entered a right workshop
   * code. Wrong codes are counted per browser, so one person's guesses do not hold back everyone on the
   * same network (RATE).
   */
  browser: {
    name: "lf_browser",
    maxAgeSeconds: 7 * 24 * HOUR_S,
    purpose:
      "tells this browser apart from others on the same network, so that wrong codes typed by others do not hold you back",
  },
  /** A random value that proves a form was sent from this site (CSRF protection); ends with the browser session. */
  csrf: { name: "lf_csrf", maxAgeSeconds: 0, purpose: "protects the forms against cross-site requests" },
} as const;

/**
 * The failure limits, worked out for the hard case: a room of ROOM students behind one address (a school's
 * NAT, a conference's Wi-Fi) of whom a quarter mistype the workshop code once, and an attacker at that same
 * address guessing codes, with or without cookies. Every limit counts the failures of the current 10-minute
 * window and the one before it (shared/runtime/failure-counters.ts), so it holds over any 10 minutes, and a
 * right code never counts.
 *
 * The portal tells browsers apart by the `lf_browser` cookie (COOKIES.browser). A browser that has entered a
 * right code is vouched for (its signed cookie says so); a browser without the cookie, or one that never got
 * a code right, is new. An attacker that drops its cookies is a new browser at every guess; a student keeps
 * theirs.
 */
const ROOM = 150;
/** A quarter of the room mistyping once: 38 wrong codes from new browsers at one address. */
const ROOM_TYPOS = Math.ceil(ROOM / 4);

export const RATE = {
  windowSeconds: 10 * 60,
  /**
   * Wrong attempts (codes, PINs) of one browser. A student who mistypes two or three times is far from it;
   * a guesser that keeps its cookie stops here and has to become a new browser, which the next limit counts.
   */
  perBrowser: 10,
  /**
   * Wrong attempts from new browsers per address: twice the room's typos (2 x 38 = 76), so the room gets in
   * with half of it to spare. A guesser that drops its cookies spends this at every guess: at most 76 per
   * 10 minutes from the address, a quarter of 300, and fewer when the room already used some. Then new
   * browsers from the address wait (even with the right code); vouched browsers go on.
   */
  perAddressNewBrowsers: 2 * ROOM_TYPOS,
  /**
   * Every wrong attempt from one address, vouched browsers too: as many as the room has students (150), so
   * only a guesser gets there, one that knows another workshop's code and so has vouched browsers. Half of
   * 300. Then the whole address waits, until the counts fall or the instructor lets it in.
   */
  perAddress: ROOM,
  /** Wrong workshop codes for the whole portal (all addresses, all workshops)... */
  globalWrongCodes: 200,
  /**
   * ...past which browsers that sent this many wrong attempts themselves wait, and new browsers from an
   * address whose new browsers did. The others go on.
   */
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

/**
 * How often the waiting page reloads itself (a meta refresh, no script): each load serves the line first, so
 * a student handed a lab sees it within this time.
 */
export const WAITING_REFRESH_SECONDS = 10;
