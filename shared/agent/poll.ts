import { z } from "zod";
import { timeLeft } from "../runtime/deadline.ts";
import { useDeps } from "../runtime/deps.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem } from "../store/entities.ts";
import { CHECK_IN_SECONDS, checkIn, LONG_POLL_SECONDS } from "./check-in.ts";
import { dropCommands, type TakenCommand, waitForCommands } from "./commands.ts";
import { dropHostSecret, rotateHostSecret } from "./host-secrets.ts";

/** A host's secret is rotated when it is this old (the agent is told at its next poll), and when asked. */
export const ROTATE_EVERY_SECONDS = 86_400;
/** A long poll ends this long before the entry point's deadline (a Lambda's remaining time), whatever it asked. */
const POLL_HEADROOM_MS = 5_000;

export const PollBody = z.strictObject({
  /** Seconds the agent may be held when there is no work (at most LONG_POLL_SECONDS). */
  wait: z.number().int().min(0).max(300).default(LONG_POLL_SECONDS),
  agentVersion: z.string().max(40).optional(),
});

export interface PollAnswer {
  /** The workshop removed this host: the agent forgets it and stops. */
  forget: boolean;
  /** The agent asks POST /agent/v1/rotate for a new secret before anything else. */
  rotate: boolean;
  /** The agent calls again at least this often. */
  checkInSeconds: number;
  commands: TakenCommand[];
}

/** Whether the host may be given work now: approved, not disabled, not removed. */
export function mayGetWork(h: HostItem | undefined): boolean {
  return !!h && h.enrollment === "approved" && !h.disabled && h.state !== "torn_down";
}

async function hostOf(workshop: string, hostId: string): Promise<HostItem | undefined> {
  return (await useDeps().store.host.get({ workshop, hostId }).go()).data ?? undefined;
}

/** The host left the workshop (removed, deprovisioned, or its record is gone): its secret and commands go. */
async function forget(workshop: string, hostId: string): Promise<PollAnswer> {
  await dropCommands(workshop, hostId);
  await dropHostSecret(workshop, hostId);
  log.info("enrolled host told to forget its workshop", { workshop, hostId });
  return { forget: true, rotate: false, checkInSeconds: CHECK_IN_SECONDS, commands: [] };
}

async function rotationDue(workshop: string, hostId: string): Promise<boolean> {
  const { store, clock } = useDeps();
  const s = (await store.hostSecret.get({ workshop, hostId }).go()).data;
  if (!s) return false;
  if (s.rotateRequested) return true;
  return clock.now().getTime() - Date.parse(s.rotatedAt) > ROTATE_EVERY_SECONDS * 1000;
}

/**
 * An agent's signed long poll (a check-in): answers at once with `forget` for a host the workshop removed and
 * with `rotate` when its secret is due, else with the commands queued for it, waiting up to `wait` seconds
 * (at most LONG_POLL_SECONDS, and ending POLL_HEADROOM_MS before the entry point's deadline) for some. A host
 * that is pending approval or disabled is held and gets nothing.
 */
export async function agentPoll(workshop: string, hostId: string, body: z.input<typeof PollBody>) {
  const { wait } = PollBody.parse(body);
  const host = await hostOf(workshop, hostId);
  if (!host || host.state === "torn_down") return forget(workshop, hostId);
  await checkIn(host);
  const rotate = await rotationDue(workshop, hostId);
  const holdMs = rotate
    ? 0
    : Math.max(0, Math.min(Math.min(wait, LONG_POLL_SECONDS) * 1000, timeLeft() - POLL_HEADROOM_MS));
  const commands = await waitForCommands(workshop, hostId, holdMs, {
    mayTake: async () => mayGetWork(await hostOf(workshop, hostId)),
  });
  return { forget: false, rotate, checkInSeconds: CHECK_IN_SECONDS, commands } satisfies PollAnswer;
}

/** The agent's rotation: a new secret for the host (the old one stays valid ROTATION_GRACE_SECONDS). */
export async function agentRotate(workshop: string, hostId: string): Promise<{ secret: string }> {
  const host = await hostOf(workshop, hostId);
  if (host) await checkIn(host);
  return { secret: await rotateHostSecret(workshop, hostId) };
}

/** `labfleet hosts rotate-secret`: the host's agent rotates at its next poll. */
export async function requestRotation(workshop: string, hostId: string): Promise<void> {
  await useDeps().store.hostSecret.patch({ workshop, hostId }).set({ rotateRequested: true }).go();
}
