import type { EventView } from "../shared/fleet/events.ts";
import type { WorkshopSummary } from "../shared/fleet/workshops.ts";
import { ApiClient, resolveTarget } from "./client.ts";
import { type Args, jsonOutput, workshopName } from "./main.ts";
import { type Output, writeTable } from "./render.ts";

/** `labfleet workshops`: every workshop the control plane knows, one line each. */
export async function cmdWorkshops(args: Args, out: Output): Promise<number> {
  const client = new ApiClient(resolveTarget());
  const { workshops } = await client.call<{ workshops: WorkshopSummary[] }>("GET", "/workshops");
  if (jsonOutput(args)) {
    out.write(`${JSON.stringify({ workshops }, null, 2)}\n`);
    return 0;
  }
  if (workshops.length === 0) {
    out.write("no workshops yet: labfleet up -f workshop.yaml\n");
    return 0;
  }
  writeTable(
    [
      ["workshop", "state", "provider", "ready", "failed", "expires"],
      ...workshops
        .slice()
        .sort((a, b) => a.name.localeCompare(b.name))
        .map((w) => [
          w.name,
          w.state,
          w.provider,
          `${w.hosts.ready}/${w.hosts.total}`,
          String(w.hosts.failed),
          w.expiry ?? "",
        ]),
    ],
    out,
  );
  return 0;
}

/** `labfleet events NAME [--after ID]`: what happened, oldest first (host ready/failed, claims, runs). */
export async function cmdEvents(args: Args, out: Output): Promise<number> {
  const name = workshopName(args);
  const client = new ApiClient(resolveTarget());
  const after = args.values.after;
  const query = after ? `?after=${encodeURIComponent(after)}` : "";
  const r = await client.call<{ events: EventView[]; last: string | null }>(
    "GET",
    `/workshops/${encodeURIComponent(name)}/events${query}`,
  );
  if (jsonOutput(args)) {
    out.write(`${JSON.stringify(r, null, 2)}\n`);
    return 0;
  }
  if (r.events.length === 0) {
    out.write(`${name}: no events${after ? ` after ${after}` : ""}\n`);
    return 0;
  }
  writeTable(
    [
      ["at", "event", "host", "detail", "id"],
      ...r.events.map((e) => [e.at, e.type, e.hostId ?? "", describe(e.detail), e.id]),
    ],
    out,
  );
  return 0;
}

function describe(detail: Record<string, unknown>): string {
  return Object.entries(detail)
    .map(([k, v]) => `${k}=${typeof v === "string" ? v : JSON.stringify(v)}`)
    .join(" ");
}
