import { z } from "zod";
import { claimedAmong } from "../fleet/claimed.ts";
import { recordEvent } from "../fleet/events.ts";
import { getWorkshop } from "../fleet/workshops.ts";
import { releaseLab } from "../portal/portal.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { dropCommands } from "./commands.ts";
import { requestRotation } from "./poll.ts";

/**
 * An instructor's controls of an enrolled host (`labfleet hosts drain|disable|enable|remove|rotate-secret`):
 * - drain: no new work (runs leave it out) and no new claims; what runs on it and its claim stay;
 * - disable: labfleet sends it nothing at all (its queued commands are dropped, its polls get nothing);
 * - enable: undoes drain and disable;
 * - remove: the host leaves the workshop (its student's claim is released); at its next poll its agent is told
 *   to forget the workshop;
 * - rotate-secret: its agent gets a new signing secret at its next poll.
 */
export const HOST_CONTROLS = ["drain", "disable", "enable", "remove", "rotate-secret"] as const;
export const HostControlInput = z.strictObject({
  action: z.enum(HOST_CONTROLS, { error: `expected one of ${HOST_CONTROLS.join(", ")}` }),
});
export type HostControl = (typeof HOST_CONTROLS)[number];

export interface HostControlResult {
  hostId: string;
  action: HostControl;
  drained: boolean;
  disabled: boolean;
  state: string;
}

export async function controlHost(
  workshop: string,
  hostId: string,
  action: HostControl,
): Promise<HostControlResult> {
  assertActor("instructor", "system");
  const { store, clock } = useDeps();
  await getWorkshop(workshop);
  const key = { workshop, hostId };
  const h = (await store.host.get(key).go()).data;
  if (!h || h.state === "torn_down")
    throw new VisibleError("not_found", "host.not_found", `no host ${hostId} in workshop ${workshop}`);
  if (h.provider !== "enrolled")
    throw new VisibleError(
      "input",
      "host.not_enrolled",
      `${hostId} is not an enrolled host (provider ${h.provider}): drain, disable, enable, remove and rotate-secret act on machines that joined with a join token`,
      [{ path: "hostId", message: "expected an enrolled host" }],
    );
  const now = isoNow(clock);
  const [claimed] = await claimedAmong(workshop, [hostId]);
  const student = claimed ? { student: claimed.student } : {};
  let next = { drained: h.drained ?? false, disabled: h.disabled ?? false, state: h.state as string };
  if (action === "drain") {
    await store.host.patch(key).set({ drained: true, updatedAt: now }).go();
    next = { ...next, drained: true };
    await recordEvent({ ...key, type: "host.drained", detail: student });
  } else if (action === "disable") {
    await store.host.patch(key).set({ disabled: true, updatedAt: now }).go();
    await dropCommands(workshop, hostId);
    next = { ...next, disabled: true };
    await recordEvent({ ...key, type: "host.disabled", detail: student });
  } else if (action === "enable") {
    await store.host.patch(key).set({ updatedAt: now }).remove(["drained", "disabled"]).go();
    next = { ...next, drained: false, disabled: false };
    await recordEvent({ ...key, type: "host.enabled", detail: student });
  } else if (action === "remove") {
    await store.host
      .patch(key)
      .set({ state: "torn_down", updatedAt: now })
      .remove(["access", "address"])
      .go();
    await dropCommands(workshop, hostId);
    next = { ...next, state: "torn_down" };
    // The lab leaves with its machine: its student's claim is released (their link says so, and they may
    // claim again).
    const released = claimed ? await releaseLab(workshop, hostId, "removed").then(() => true) : false;
    await recordEvent({
      ...key,
      type: "host.removed",
      detail: { ...student, ...(released ? { released } : {}) },
    });
  } else {
    await requestRotation(workshop, hostId);
  }
  log.info("enrolled host controlled", { ...key, action });
  return { hostId, action, ...next };
}
