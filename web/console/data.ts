import { fleetView } from "../../shared/fleet/fleet-view.ts";

/** The labs one page of the console's fleet table shows (the rest a page at a time: ?labs=CURSOR). */
export const CONSOLE_FLEET_PAGE = 100;

import { getWorkshop, listHosts, listWorkshops, workshopStatus } from "../../shared/fleet/workshops.ts";
import { checksMatrix } from "../../shared/portal/checks.ts";
import { type ClaimRow, listClaims, portalInfo } from "../../shared/portal/portal.ts";
import { portalStatus } from "../../shared/portal/portal-status.ts";
import { listQueue } from "../../shared/portal/queue.ts";
import { heldBack } from "../../shared/portal/rate-limit.ts";
import { useDeps } from "../../shared/runtime/deps.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";
import { byNumber } from "../../shared/runtime/text.ts";
import type { Workshop } from "../../shared/workshop/schema.ts";
import { now } from "./common.tsx";
import type { LabAccess, PortalData, RunHostRow, RunRow, WorkshopRow } from "./views.tsx";

// What the console's pages show, read once per page or live answer.

export async function workshopRows(): Promise<WorkshopRow[]> {
  const all = await listWorkshops();
  const rows = await Promise.all(
    all.map(async (w) => ({ ...w, claims: w.state === "torn_down" ? 0 : (await listClaims(w.name)).length })),
  );
  return rows.sort((a, b) => a.name.localeCompare(b.name));
}

/** The workshop page's data; `labs` is the fleet table's page (the cursor of `page.next`/`page.prev`). */
export async function workshopView(name: string, labs?: string) {
  const [s, fleet] = await Promise.all([
    workshopStatus(name),
    fleetView(name, { limit: CONSOLE_FLEET_PAGE, ...(labs ? { cursor: labs } : {}) }),
  ]);
  return {
    summary: s,
    hosts: s.hostList,
    fleet,
    activeRun: s.runs.find((r) => r.state === "running"),
    now: now(),
    // Offered whenever the workshop may have a teardown pending; extendWorkshop says so when it has none.
    canExtend: !["draft", "tearing_down", "torn_down"].includes(s.state),
    access: labAccess(s.spec),
  };
}

/**
 * Whether this runtime's provider of the workshop can open its lab UIs (the check setStudentAccess makes):
 * only one with security groups (aws). The ports are accessPorts(spec).world, computed here so the console
 * does not load the EC2 client.
 */
export function labAccess(spec: Workshop): LabAccess {
  const p = spec.provider;
  const provider = useDeps().providers[p.type] as { setOpenAccess?: unknown } | undefined;
  if (typeof provider?.setOpenAccess !== "function")
    return { kind: "none", provider: p.type, available: provider !== undefined };
  return {
    kind: "firewall",
    ports: [...new Set(spec.lab.ui_ports.map((u) => u.port))].filter((port) => port !== 22),
    byo: p.type === "aws" && Boolean(p.security_group_ids?.length),
    automatic: p.type === "aws" && p.student_access === "open",
  };
}

export async function portalData(name: string): Promise<PortalData> {
  await getWorkshop(name);
  const info = await portalInfo(name).catch((err) => {
    if (err instanceof VisibleError && err.code === "portal.not_found") return undefined;
    throw err;
  });
  const [{ board: b, claims, hosts }, held, waiting, checks] = await Promise.all([
    portalStatus(name),
    heldBack(),
    listQueue(name),
    checksMatrix(name),
  ]);
  const taken = new Set(claims.map((c) => c.lab));
  const free = hosts
    .filter((h) => h.state === "ready" && h.health !== "failing" && !taken.has(h.hostId))
    .map((h) => h.hostId)
    .sort(byNumber);
  const failing = Object.fromEntries(
    hosts
      .filter((h) => h.state === "ready" && h.health === "failing")
      .map((h) => [h.hostId, h.healthError ?? null]),
  );
  return { name, info, board: b, claims, waiting, free, failing, heldBack: held, checks };
}

export async function claimOf(name: string, lab: string): Promise<ClaimRow> {
  const claim = (await listClaims(name)).find((c) => c.lab === lab);
  if (!claim) throw new VisibleError("not_found", "portal.not_claimed", `lab ${lab} is not claimed`);
  return claim;
}

/**
 * Each run with its hosts: the recorded per-host results of a finished run, the live states of a running
 * one. A host's build time is shown on the run its last deploy started in (host records keep only that one).
 */
export async function runRows(name: string): Promise<RunRow[]> {
  const [s, hosts] = await Promise.all([workshopStatus(name), listHosts(name)]);
  const byId = new Map(hosts.map((h) => [h.hostId, h]));
  const at = now().getTime();
  return s.runs.slice(0, 50).map((run) => {
    const start = Date.parse(run.startedAt);
    const end = run.endedAt ? Date.parse(run.endedAt) : at;
    const results: [string, { state: string; error?: string | undefined }][] = run.hosts
      ? Object.entries(run.hosts)
      : run.state === "running" && run.kind !== "teardown"
        ? hosts
            .filter((h) => h.state !== "torn_down" && (!run.selection || run.selection.includes(h.hostId)))
            .map((h) => [h.hostId, { state: h.state, error: h.error }])
        : [];
    const rows: RunHostRow[] = results
      .map(([id, r]) => {
        const h = byId.get(id);
        const began = h?.deployStartedAt ? Date.parse(h.deployStartedAt) : Number.NaN;
        const inRun = began >= start && began <= end;
        const finished = h?.readyAt ? Date.parse(h.readyAt) : run.state === "running" ? at : Number.NaN;
        const seconds = inRun && finished >= began ? (finished - began) / 1000 : undefined;
        return { id, state: r.state, error: r.error, seconds };
      })
      .sort((a, b) => byNumber(a.id, b.id));
    return { run, hosts: rows };
  });
}
