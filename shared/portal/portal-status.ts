import { listHosts } from "../fleet/workshops.ts";
import { assertActor } from "../runtime/actor.ts";
import { useDeps } from "../runtime/deps.ts";
import type { HostItem } from "../store/entities.ts";
import { type Board, boardOf } from "./claims.ts";
import { type ClaimRow, claimRowsOf, getPortal, readClaims } from "./portal.ts";

/**
 * The instructor's view of a portal from one read of its labs, claims, portal and workshop record, so the
 * board, the claim list and the labs agree: a claim landing mid-read is in all three or in none. (Student pages
 * build their board from the shared student reads instead: shared/portal/reads.ts.)
 */
export async function portalStatus(
  workshop: string,
): Promise<{ board: Board; claims: ClaimRow[]; hosts: HostItem[] }> {
  assertActor("instructor", "system");
  const { store, clock } = useDeps();
  const [hosts, [claims, emails], portal, w] = await Promise.all([
    listHosts(workshop),
    readClaims(workshop),
    getPortal(workshop),
    store.workshop.get({ name: workshop }).go(),
  ]);
  return {
    board: boardOf({ hosts, claims, portal, workshop: w.data }, clock.now()),
    claims: claimRowsOf(claims, emails),
    hosts,
  };
}
