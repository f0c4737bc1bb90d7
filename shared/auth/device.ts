import { createHash, randomBytes, randomInt } from "node:crypto";
import { z } from "zod";
import { assertActor, withActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { assertInstructor, createToken, revokePresentedToken } from "./tokens.ts";

/**
 * Device-style sign-in for the CLI (the shape of RFC 8628): the CLI asks for a login and gets a device code
 * (a secret only it knows) and a short user code; a signed-in instructor confirms the user code in the
 * browser; the CLI's next poll receives a new API token, owned by that instructor. Both codes are stored as
 * SHA-256 only and the token is created at that poll, so no usable secret is ever at rest.
 */

export const DEVICE_DEFAULTS = {
  /** How long the user code stays valid. */
  ttlSeconds: 600,
  /** How often the CLI may poll (it uses what the server answers). */
  intervalSeconds: 5,
  /** Tokens handed out by `labfleet login` expire after this many days. */
  tokenDays: 90,
} as const;
export type DeviceOptions = { ttlSeconds: number; intervalSeconds: number; tokenDays: number };

// RFC 8628 §6.1: consonants only (no words, no 0/O 1/I confusion), 8 characters: 20^8 codes.
const USER_CODE_LETTERS = "BCDFGHJKLMNPQRSTVWXZ";

export const ClientName = z
  .string()
  .trim()
  .min(1)
  .max(60)
  .regex(/^[\w .@()-]+$/, { error: "letters, digits, spaces and . _ @ ( ) - only" });
export const StartDeviceInput = z.strictObject({ clientName: ClientName.default("labfleet CLI") });
export const DeviceCode = z.string().regex(/^[A-Za-z0-9_-]{43}$/, { error: "expected a device code" });

export function generateUserCode(): string {
  const letters = Array.from({ length: 8 }, () => USER_CODE_LETTERS[randomInt(USER_CODE_LETTERS.length)]);
  return `${letters.slice(0, 4).join("")}-${letters.slice(4).join("")}`;
}

/** `bcdf ghjk`, `BCDF-GHJK` and `BCDFGHJK` are the same code; anything else is no code at all. */
export function normalizeUserCode(input: string): string | undefined {
  const letters = input.toUpperCase().replace(/[\s-]+/g, "");
  if (letters.length !== 8 || [...letters].some((ch) => !USER_CODE_LETTERS.includes(ch))) return undefined;
  return `${letters.slice(0, 4)}-${letters.slice(4)}`;
}

const hashOf = (purpose: string, value: string) =>
  createHash("sha256").update(`${purpose}:${value}`).digest("hex");

export interface DeviceStart {
  deviceCode: string;
  userCode: string;
  /** Seconds until the user code expires. */
  expiresIn: number;
  /** Seconds the CLI waits between polls. */
  interval: number;
}

export async function startDeviceLogin(
  input: z.input<typeof StartDeviceInput>,
  opts: DeviceOptions = DEVICE_DEFAULTS,
): Promise<DeviceStart> {
  const { clientName } = StartDeviceInput.parse(input);
  const { store, clock } = useDeps();
  const deviceCode = randomBytes(32).toString("base64url");
  const userCode = generateUserCode();
  const now = clock.now();
  await store.deviceLogin
    .create({
      deviceHash: hashOf("device", deviceCode),
      userCodeHash: hashOf("user", userCode),
      clientName,
      state: "pending",
      createdAt: now.toISOString(),
      expiresAt: Math.floor(now.getTime() / 1000) + opts.ttlSeconds,
    })
    .go();
  return { deviceCode, userCode, expiresIn: opts.ttlSeconds, interval: opts.intervalSeconds };
}

const gone = () =>
  new VisibleError(
    "not_found",
    "device.expired",
    "this sign-in request has expired or was already used: run labfleet login again",
  );

export type DevicePoll = { status: "pending" } | { status: "approved"; token: string; tokenId: string };

/** The CLI's poll: pending until an instructor decides, then the token, exactly once. */
export async function pollDeviceLogin(
  deviceCode: string,
  opts: DeviceOptions = DEVICE_DEFAULTS,
): Promise<DevicePoll> {
  const { store, clock } = useDeps();
  const deviceHash = hashOf("device", DeviceCode.parse(deviceCode));
  const item = (await store.deviceLogin.get({ deviceHash }).go({ consistent: true })).data;
  const now = clock.now();
  if (!item || item.expiresAt * 1000 <= now.getTime() || item.state === "consumed") throw gone();
  if (item.state === "denied") {
    throw new VisibleError("forbidden", "device.denied", "the sign-in request was refused in the browser");
  }
  if (item.state === "pending") {
    // Half the interval of slack: timers and networks jitter, a tight loop does not.
    const last = item.lastPolledAt ? Date.parse(item.lastPolledAt) : 0;
    if (now.getTime() - last < (opts.intervalSeconds * 1000) / 2) {
      throw new VisibleError("rate_limited", "device.slow_down", "polling too fast: wait the interval");
    }
    await store.deviceLogin.patch({ deviceHash }).set({ lastPolledAt: now.toISOString() }).go();
    return { status: "pending" };
  }
  const owner = item.approvedBy;
  if (!owner) throw gone();
  // The token is made now, for the instructor who approved; the state moves approved -> consumed once only.
  const { token, info } = await withActor({ type: "instructor", id: owner }, () =>
    createToken({ name: `labfleet login (${item.clientName})`, expiresInDays: opts.tokenDays }),
  );
  try {
    await store.deviceLogin
      .patch({ deviceHash })
      .set({ state: "consumed" })
      .where((a, op) => op.eq(a.state, "approved"))
      .go();
  } catch {
    // Another poll took it first: this token is never handed out.
    await withActor({ type: "instructor", id: owner }, () => revokePresentedToken(token));
    throw gone();
  }
  log.info("device login completed", { tok: info.id, owner });
  return { status: "approved", token, tokenId: info.id };
}

export interface PendingDeviceLogin {
  userCode: string;
  clientName: string;
  createdAt: string;
}

async function findPending(userCode: string) {
  const code = normalizeUserCode(userCode);
  if (!code) return undefined;
  const { store, clock } = useDeps();
  const now = clock.now().getTime();
  const items = (await store.deviceLogin.query.byUserCode({ userCodeHash: hashOf("user", code) }).go()).data;
  const item = items.find((i) => i.state === "pending" && i.expiresAt * 1000 > now);
  return item ? { item, code } : undefined;
}

/** The pending login a user code names, for the confirmation page. */
export async function pendingDeviceLogin(userCode: string): Promise<PendingDeviceLogin | undefined> {
  assertActor("instructor");
  const found = await findPending(userCode);
  if (!found) return undefined;
  return { userCode: found.code, clientName: found.item.clientName, createdAt: found.item.createdAt };
}

/** The signed-in instructor approves (their token goes to the CLI) or refuses a pending login. */
export async function decideDeviceLogin(userCode: string, decision: "approve" | "deny"): Promise<void> {
  const actor = assertInstructor();
  const found = await findPending(userCode);
  if (!found) throw gone();
  const { store } = useDeps();
  try {
    await store.deviceLogin
      .patch({ deviceHash: found.item.deviceHash })
      .set(decision === "approve" ? { state: "approved", approvedBy: actor.id } : { state: "denied" })
      .where((a, op) => op.eq(a.state, "pending"))
      .go();
  } catch {
    throw gone();
  }
  log.info(decision === "approve" ? "device login approved" : "device login refused", { by: actor.id });
}
