import { z } from "zod";
import { forgetStudentReads } from "../portal/reads.ts";
import type { Provider } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { mapLimit } from "../runtime/concurrency.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { withTransport } from "./hosts.ts";
import { machineOf } from "./machines.ts";
import { moveTeardownSchedule } from "./schedules.ts";
import { getWorkshop, listHosts } from "./workshops.ts";

/**
 * `labfleet extend NAME --hours N`: moves everything that ends a workshop N hours later, in this order:
 * 1. the pending teardown schedule record (a conditional write: it must still be pending at the time read),
 *    then its EventBridge mirror when the runtime has one;
 * 2. the expiry shown in the workshop's and hosts' records;
 * 3. the provider-side expiry (EC2: the `labfleet-expiry` tag the sweeper reads), when the provider has one;
 * 4. each live host's in-instance dead-man switch (see powerOffUserData in providers/aws-launch.ts): the deadline file
 *    the systemd timer checks, the fallback baked into the timer's script, and the pending `shutdown -P`.
 *    Only providers whose hosts carry the switch are touched; local sandboxes and bring-your-own hosts have none
 *    and are reported `skipped`.
 * Steps 1 and 2 either happen or the call fails; the others are reported part by part, so a failure says exactly
 * what still ends at the old time.
 */

export const MAX_EXTEND_HOURS = 168;

export const ExtendInput = z.strictObject({
  hours: z
    .number({ error: "expected hours: a number greater than 0" })
    .positive({ error: "expected hours greater than 0" })
    .max(MAX_EXTEND_HOURS, { error: `expected at most ${MAX_EXTEND_HOURS} hours at a time` }),
});

/** Providers whose hosts power themselves off at their expiry (powerOffUserData). */
const DEAD_MAN_SWITCH: ReadonlySet<Provider["name"]> = new Set(["aws"]);

export interface HostExtendResult {
  hostId: string;
  result: "moved" | "skipped" | "error";
  detail?: string;
}

export interface ExtendResult {
  workshop: string;
  hours: number;
  previousExpiry: string;
  /** The new teardown time. */
  expiry: string;
  /** The EventBridge schedule: `none` where the runtime has no mirror (the local scheduler reads the record). */
  schedule: { result: "moved" | "none" | "error"; detail?: string };
  /** The provider-side expiry: `none` when the provider keeps none. */
  provider: { result: "moved" | "none" | "error"; detail?: string };
  hosts: HostExtendResult[];
  /** False when any part still ends at the old time. */
  ok: boolean;
}

/**
 * The command that moves a host's dead-man switch to `deadline`, consistent with powerOffUserData: the deadline
 * file is replaced atomically (a half-written file would make the timer use its baked-in fallback), the
 * fallback in the timer's script is rewritten, and the pending power-off is cancelled and scheduled again in
 * whole minutes from now (never later than the deadline; the timer covers the rest of the minute). Exit 3 when
 * the host has no switch. LABFLEET_ROOT (unset on a real host) lets a test run it in a folder.
 */
export function extendPowerOffScript(deadline: Date): string {
  const epoch = Math.floor(deadline.getTime() / 1000);
  return `set -u
root="\${LABFLEET_ROOT:-}"
deadline=${epoch}
if [ ! -f "$root/etc/labfleet/deadline" ]; then
  echo "no dead-man switch on this host: /etc/labfleet/deadline is missing" >&2
  exit 3
fi
printf '%s\\n' "$deadline" > "$root/etc/labfleet/deadline.new" && mv -f "$root/etc/labfleet/deadline.new" "$root/etc/labfleet/deadline" || exit 1
script="$root/usr/local/sbin/labfleet-deadman"
if [ -f "$script" ]; then sed -i "s/d=[0-9][0-9]* ;;/d=$deadline ;;/" "$script" || exit 1; fi
shutdown -c "labfleet: the workshop was extended" 2>/dev/null || true
minutes=$(( (deadline - $(date +%s)) / 60 ))
[ "$minutes" -ge 1 ] || minutes=1
shutdown -P +"$minutes" "labfleet: the workshop's time is up" || { echo "shutdown -P failed" >&2; exit 1; }
echo "labfleet-extend minutes=$minutes"
`;
}

const NO_SWITCH_EXIT = 3;
const HOST_TIMEOUT_MS = 60_000;
const HOST_CONCURRENCY = 16;

export async function extendWorkshop(workshop: string, hours: number): Promise<ExtendResult> {
  assertActor("instructor");
  if (typeof hours !== "number" || !Number.isFinite(hours) || hours <= 0 || hours > MAX_EXTEND_HOURS) {
    throw new VisibleError(
      "input",
      "extend.bad_hours",
      `expected hours: a number greater than 0 and at most ${MAX_EXTEND_HOURS}, got ${String(hours)}`,
      [{ path: "hours", message: `expected a number greater than 0 and at most ${MAX_EXTEND_HOURS}` }],
    );
  }
  const deps = useDeps();
  const { store, clock } = deps;
  const w = await getWorkshop(workshop);
  const spec = w.spec as Workshop;
  const pending = (await store.schedule.get({ workshop, kind: "teardown" }).go()).data;
  if (w.state === "tearing_down" || w.state === "torn_down" || pending?.state !== "pending") {
    throw new VisibleError(
      "conflict",
      "extend.no_pending_teardown",
      w.state === "tearing_down"
        ? `workshop ${workshop} is being torn down; there is nothing left to extend`
        : `workshop ${workshop} has no pending teardown to extend (it was never brought up, or it is torn down)`,
    );
  }
  const now = clock.now();
  const to = new Date(Math.floor((Date.parse(pending.at) + hours * 3_600_000) / 1000) * 1000);
  if (to.getTime() <= now.getTime()) {
    throw new VisibleError(
      "input",
      "extend.too_short",
      `the teardown was due at ${pending.at}; ${hours} hours from then is already past, extend by more`,
      [{ path: "hours", message: "expected enough hours to reach a time after now" }],
    );
  }
  const expiry = to.toISOString();

  // 1. The record (conditional), then its mirror.
  const moved = await moveTeardownSchedule(workshop, pending.at, expiry);
  const schedule: ExtendResult["schedule"] =
    moved.mirror === "error"
      ? { result: "error", detail: `EventBridge schedule: ${moved.detail ?? "failed"}` }
      : { result: moved.mirror };

  // 2. What status shows.
  const nowIso = isoNow(clock);
  await store.workshop.patch({ name: workshop }).set({ expiry, updatedAt: nowIso }).go();
  forgetStudentReads(workshop); // the lab pages and the board show the new time at once
  const live = (await listHosts(workshop)).filter((h) => h.state !== "torn_down" && h.address);
  await mapLimit(live, HOST_CONCURRENCY, (h) =>
    store.host.patch({ workshop, hostId: h.hostId }).set({ expiry, updatedAt: nowIso }).go(),
  );

  // 3. The provider's own expiry (what the sweeper reads) and 4. the in-instance power-off of each live host,
  // side by side: neither waits for the other, so a request's time (API Gateway's 30 s) goes further.
  const provider = deps.providers[spec.provider.type];
  const providerStep = async (): Promise<ExtendResult["provider"]> => {
    if (!provider?.extendExpiry || live.length === 0) return { result: "none" };
    try {
      // By the ids the provider knows the machines by: a lab a rollout moved is on its other machine.
      await provider.extendExpiry(spec, live.map(machineOf), to);
      return { result: "moved" };
    } catch (err) {
      log.error("moving the provider-side expiry failed", { workshop, error: errorMessage(err) });
      return { result: "error", detail: errorMessage(err) };
    }
  };
  const [providerResult, hosts] = await Promise.all([
    providerStep(),
    mapLimit(live, HOST_CONCURRENCY, (h) => extendHost(spec, provider, h, to)),
  ]);

  const ok =
    schedule.result !== "error" &&
    providerResult.result !== "error" &&
    hosts.every((h) => h.result !== "error");
  log.info("workshop extended", {
    workshop,
    hours,
    previousExpiry: pending.at,
    expiry,
    schedule: schedule.result,
    provider: providerResult.result,
    hostsMoved: hosts.filter((h) => h.result === "moved").length,
    hostErrors: hosts.filter((h) => h.result === "error").length,
  });
  await recordEvent({ workshop, type: "workshop.extended", detail: { hours, expiry, ok } });
  return {
    workshop,
    hours,
    previousExpiry: pending.at,
    expiry,
    schedule,
    provider: providerResult,
    hosts,
    ok,
  };
}

async function extendHost(
  spec: Workshop,
  provider: Provider | undefined,
  h: HostItem,
  to: Date,
): Promise<HostExtendResult> {
  if (!provider || !DEAD_MAN_SWITCH.has(provider.name)) {
    return { hostId: h.hostId, result: "skipped", detail: "no in-instance power-off on this kind of host" };
  }
  try {
    const r = await withTransport(spec, provider, h, (t) =>
      t.exec(extendPowerOffScript(to), {
        sudo: true,
        timeoutMs: HOST_TIMEOUT_MS,
        step: "extend the power-off",
      }),
    );
    if (r.exitCode === NO_SWITCH_EXIT) {
      return { hostId: h.hostId, result: "skipped", detail: lastLine(r.stderr) ?? "no dead-man switch" };
    }
    if (r.exitCode !== 0) {
      const why = r.timedOut ? "timed out" : (lastLine(r.stderr) ?? `exit ${r.exitCode}`);
      return { hostId: h.hostId, result: "error", detail: `power-off not moved: ${why}` };
    }
    const minutes = /labfleet-extend minutes=(\d+)/.exec(r.stdout)?.[1];
    return {
      hostId: h.hostId,
      result: "moved",
      detail: `powers off at ${to.toISOString()}${minutes ? ` (shutdown in ${minutes} min)` : ""}`,
    };
  } catch (err) {
    log.warn("moving a host's power-off failed", {
      workshop: spec.name,
      hostId: h.hostId,
      error: errorMessage(err),
    });
    return { hostId: h.hostId, result: "error", detail: `power-off not moved: ${errorMessage(err)}` };
  }
}

function lastLine(text: string): string | undefined {
  const lines = text.trim().split("\n");
  const last = lines[lines.length - 1]?.trim();
  return last ? last.slice(0, 300) : undefined;
}
