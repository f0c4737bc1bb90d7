import { z } from "zod";
import type { OpenAccessResult } from "../providers/aws.ts";
import type { Provider } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import type { HostItem } from "../store/entities.ts";
import type { Workshop } from "../workshop/schema.ts";
import { recordEvent } from "./events.ts";
import { getWorkshop, listHosts } from "./workshops.ts";

/**
 * Student access to the lab UIs (`labfleet open-access`): opens the `lab.ui_ports` of a workshop's hosts to
 * the whole internet, or closes them again. Only providers with security groups can (EC2: see
 * AwsProvider.setOpenAccess, which never opens port 22 and, with bring-your-own groups, changes nothing and
 * says what to open by hand).
 *
 * Opening is refused until every live host of the workshop is `ready` (its setup exited 0 and its health
 * check passed): no half-built lab is put on the internet. Closing is always allowed. With
 * `provider.student_access: open`, the up workflow opens access by itself once every lab is ready (see
 * openAccessWhenReady).
 */

export const OpenAccessInput = z.strictObject({
  close: z.boolean({ error: "expected close: true or false" }).default(false),
});

export interface OpenAccessView extends OpenAccessResult {
  workshop: string;
  /** What was asked: true to open, false to close. */
  open: boolean;
}

/** A provider that can open and close its hosts' lab UIs (only EC2 has security groups). */
type OpenAccessProvider = Provider & {
  setOpenAccess(spec: Workshop, open: boolean): Promise<OpenAccessResult>;
};

function canOpenAccess(provider: Provider): provider is OpenAccessProvider {
  return typeof (provider as Partial<OpenAccessProvider>).setOpenAccess === "function";
}

/** Hosts that count: every host of the workshop that is not torn down. */
function liveHosts(hosts: HostItem[]): HostItem[] {
  return hosts.filter((h) => h.state !== "torn_down");
}

/** Why the lab UIs may not be opened yet, or undefined when every live host is ready. */
export function notReadyProblem(workshop: string, hosts: HostItem[]): VisibleError | undefined {
  const live = liveHosts(hosts);
  if (live.length === 0) {
    return new VisibleError(
      "conflict",
      "open_access.no_hosts",
      `not opening the lab UIs of ${workshop}: it has no hosts yet (run labfleet up first)`,
    );
  }
  const waiting = live.filter((h) => h.state !== "ready");
  if (waiting.length === 0) return undefined;
  const describe = (h: HostItem) =>
    h.state === "deploying" && h.phase
      ? `${h.hostId} (deploying, phase ${h.phase})`
      : `${h.hostId} (${h.state})`;
  return new VisibleError(
    "conflict",
    "open_access.not_ready",
    `not opening the lab UIs of ${workshop}: ${waiting.length} of ${live.length} hosts are not ready (their health check has not passed): ${waiting.map(describe).join(", ")}`,
    waiting.map((h) => ({
      path: `hosts.${h.hostId}`,
      message: `expected ready, got ${h.state}${h.phase && h.state === "deploying" ? ` (phase ${h.phase})` : ""}`,
    })),
  );
}

/**
 * Opens (`open: true`) or closes the lab UIs of a workshop to the internet. Opening needs every live host
 * ready; closing is always allowed. Local and bring-your-own (static) workshops have nothing to open.
 */
export async function setStudentAccess(workshop: string, open: boolean): Promise<OpenAccessView> {
  assertActor("instructor");
  const spec = (await getWorkshop(workshop)).spec as Workshop;
  const provider = useDeps().providers[spec.provider.type];
  if (!provider) {
    throw new VisibleError(
      "input",
      "provider.unavailable",
      `provider ${spec.provider.type} is not available here`,
    );
  }
  if (!canOpenAccess(provider)) {
    throw new VisibleError(
      "input",
      "open_access.unsupported",
      `nothing to ${open ? "open" : "close"}: workshop ${workshop} uses the ${spec.provider.type} provider, which manages no firewall; its hosts are reachable as their own network allows (open-access applies to the aws provider only)`,
    );
  }
  if (open) {
    const problem = notReadyProblem(workshop, await listHosts(workshop));
    if (problem) throw problem;
  }
  const result = await provider.setOpenAccess(spec, open);
  await useDeps()
    .store.workshop.patch({ name: workshop })
    .set({ studentAccess: open ? "open" : "closed" })
    .go();
  log.info(open ? "student access opened" : "student access closed", {
    workshop,
    mode: result.mode,
    changed: result.changed,
    ports: result.ports,
  });
  await recordEvent({
    workshop,
    type: open ? "access.opened" : "access.closed",
    detail: { ports: result.ports, changed: result.changed },
  });
  return { workshop, open, ...result };
}

/**
 * The up workflow's step for `provider.student_access: open`: once every live host of the workshop is ready,
 * opens the lab UIs. Never fails the run: an error (or bring-your-own groups, where labfleet opens nothing) is
 * logged and recorded on the run's `error`, which the run keeps even when it succeeds.
 */
export async function openAccessWhenReady(
  spec: Workshop,
  provider: Provider,
  runId: string,
  hosts: HostItem[],
): Promise<void> {
  if (spec.provider.type !== "aws" || spec.provider.student_access !== "open") return;
  if (notReadyProblem(spec.name, hosts)) return;
  // An instructor who closed access keeps it closed: `labfleet open-access` opens it again.
  if ((await getWorkshop(spec.name)).studentAccess === "closed") return;
  let note: string | undefined;
  try {
    if (!canOpenAccess(provider)) {
      note = `the ${provider.name} provider of this runtime cannot open access`;
    } else {
      const result = await provider.setOpenAccess(spec, true);
      const what =
        result.mode === "byo"
          ? "student access not opened: bring-your-own security groups (student_access: open)"
          : "student access opened (student_access: open)";
      log.info(what, {
        workshop: spec.name,
        runId,
        mode: result.mode,
        changed: result.changed,
        ports: result.ports,
      });
      // With bring-your-own groups nothing was opened: the instructor must act, so the run says what to do.
      if (result.mode === "byo") note = result.message;
      else
        await recordEvent({
          workshop: spec.name,
          type: "access.opened",
          runId,
          detail: { ports: result.ports, changed: result.changed },
        });
    }
  } catch (err) {
    note = errorMessage(err);
    log.warn("opening student access failed (student_access: open)", {
      workshop: spec.name,
      runId,
      error: note,
    });
  }
  if (note === undefined) return;
  try {
    await useDeps()
      .store.run.patch({ workshop: spec.name, runId })
      .set({ error: `student access was not opened: ${note}`.slice(0, 4000) })
      .go();
  } catch (err) {
    log.warn("recording the student access result on the run failed", {
      workshop: spec.name,
      runId,
      error: errorMessage(err),
    });
  }
}
