import { shortCache } from "../runtime/concurrency.ts";
import { useDeps } from "../runtime/deps.ts";
import { STUDENT_READ_TTL_MS } from "./constants.ts";
import { FREE_LAB_ATTRIBUTES } from "./free-labs.ts";

/**
 * The reads every student page makes, shared for STUDENT_READ_TTL_MS: a classroom types the same code and
 * loads the same board within seconds. Instructor operations in this process forget them at once
 * (`forgetStudentReads`); nothing here decides a claim (the claim transaction does).
 */
const ttlMs = STUDENT_READ_TTL_MS;

export const portalRecord = shortCache({
  key: (workshop: string) => workshop,
  load: async (workshop: string) => (await useDeps().store.portal.get({ workshop }).go()).data ?? undefined,
  ttlMs,
});

export const codeRecord = shortCache({
  key: (hash: string) => hash,
  load: async (hash: string) => (await useDeps().store.portalCode.get({ codeHash: hash }).go()).data,
  ttlMs,
});

export const labStates = shortCache({
  key: (workshop: string) => workshop,
  load: async (workshop: string) =>
    (
      await useDeps()
        .store.host.query.byWorkshop({ workshop })
        // What choosing a free lab reads (drained, disabled, check-ins), not only the build state.
        .go({ pages: "all", attributes: [...FREE_LAB_ATTRIBUTES] })
    ).data,
  ttlMs,
});

export const claimRows = shortCache({
  key: (workshop: string) => workshop,
  load: async (workshop: string) =>
    (
      await useDeps()
        .store.claim.query.byWorkshop({ workshop })
        .go({ pages: "all", attributes: ["hostId", "name", "emailHash"] })
    ).data,
  ttlMs,
});

/** The workshop's record as the lab page shows it (its spec's portal section and the expiry). */
export const workshopRecord = shortCache({
  key: (name: string) => name,
  load: async (name: string) => (await useDeps().store.workshop.get({ name }).go()).data,
  ttlMs,
});

/** After an instructor operation or a claim in this process: the next student read goes to the store. */
export function forgetStudentReads(workshop: string): void {
  portalRecord.forget(workshop);
  labStates.forget(workshop);
  claimRows.forget(workshop);
  workshopRecord.forget(workshop);
  codeRecord.forget(); // keyed by code hash; few entries, so all of them
}
