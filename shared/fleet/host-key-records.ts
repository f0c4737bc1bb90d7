import { isoNow } from "../runtime/clock.ts";
import { type ShortCache, shortCache } from "../runtime/concurrency.ts";
import { useDeps } from "../runtime/deps.ts";
import { byNumber } from "../runtime/text.ts";
import type { HostKeyItem } from "../store/entities.ts";
import {
  fingerprint,
  type HostKeyPins,
  type KeyOrigin,
  type KnownHostKeys,
  keyTypeOf,
} from "../transports/host-keys.ts";
import { hostKeysOf, type Workshop } from "../workshop/schema.ts";
import { isConditionalFailure } from "./runs.ts";

/**
 * The host keys labfleet trusts, as records: the store's pins (per workshop and host) and the keys workshop.yaml
 * gives. Reading them needs only the store, so the portal's lab page can show them (shared/fleet/host-keys.ts
 * holds the operations: pin, forget, read through SSM).
 */

/** The keys a stored pin holds, and how they were obtained (a record from before origins were kept is `tofu`). */
export function recordKeys(rec: HostKeyItem): KnownHostKeys {
  return { keys: rec.keys?.length ? rec.keys : [rec.key], origin: rec.origin ?? "tofu" };
}

/**
 * Host keys pinned in the store, per workshop: the first key a host shows is kept (`tofu`); a different one is
 * refused. Keys pinned another way (`labfleet hosts pin`, SSM) are read the same way.
 */
export function storePins(workshop: string): HostKeyPins {
  return {
    async get(hostId, opts = {}) {
      if (!opts.fresh) {
        const known = (await workshopPins(workshop)).get(hostId);
        if (known) return known;
      }
      // Not in that read (a first contact, or pinned since), or asked for now: the record itself.
      const { store } = useDeps();
      const rec = (await store.hostKey.get({ workshop, hostId }).go()).data;
      return rec ? recordKeys(rec) : undefined;
    },
    async pin(hostId, key) {
      const { store, clock } = useDeps();
      try {
        await store.hostKey
          .create({
            workshop,
            hostId,
            key,
            keys: [key],
            fingerprint: fingerprint(key),
            origin: "tofu",
            pinnedAt: isoNow(clock),
          })
          .go();
      } catch (err) {
        if (!isConditionalFailure(err)) throw err; // pinned meanwhile: the next connection compares against it
      }
      forgetPinReads(workshop);
    },
  };
}

/**
 * How long one read of a workshop's pins serves the connections this process opens after it: a fleet operation
 * connects to every host within moments, and reads the pins once instead of once per host. A pin changed in this
 * process is read again at once (forgetPinReads); one changed by another process (the cloud's other functions)
 * counts for connections opened up to this long after. A key that is not the one read is checked against the pin
 * as it is now before it is refused.
 */
export const PIN_READ_TTL_MS = 2_000;

/** Per store (a process may hold several runtimes' stores), per workshop: each host's pin, by host id. */
const pinReads = new WeakMap<object, ShortCache<[string], Map<string, KnownHostKeys>>>();

function workshopPins(workshop: string): Promise<Map<string, KnownHostKeys>> {
  const { store } = useDeps();
  let reads = pinReads.get(store);
  if (!reads) {
    reads = shortCache({
      key: (w: string) => w,
      load: async (w: string) => {
        const records = (await store.hostKey.query.byWorkshop({ workshop: w }).go({ pages: "all" })).data;
        return new Map(records.map((r) => [r.hostId, recordKeys(r)]));
      },
      ttlMs: PIN_READ_TTL_MS,
      max: 1_000,
    });
    pinReads.set(store, reads);
  }
  return reads(workshop);
}

/** A pin of the workshop was made, replaced or removed here: the next connection reads the pins again. */
export function forgetPinReads(workshop: string): void {
  pinReads.get(useDeps().store)?.forget(workshop);
}

/** One trusted host key, as the API and the CLI show it. */
export interface HostKeyView {
  type: string;
  fingerprint: string;
}

/** The keys trusted for one host, and how they were obtained. */
export interface HostKeysView {
  hostId: string;
  origin: KeyOrigin;
  /** The first key's fingerprint. */
  fingerprint: string;
  keys: HostKeyView[];
  /** When the keys were pinned (for `workshop`: when the workshop file was last submitted). */
  pinnedAt: string;
}

export function keyViews(keys: string[]): HostKeyView[] {
  return keys.map((k) => ({ type: keyTypeOf(k) ?? "unknown", fingerprint: fingerprint(k) }));
}

export function view(hostId: string, known: KnownHostKeys, pinnedAt: string): HostKeysView {
  const keys = keyViews(known.keys);
  return { hostId, origin: known.origin, fingerprint: keys[0]?.fingerprint ?? "", keys, pinnedAt };
}

/** The keys workshop.yaml gives a host (`hosts[].host_key`), as blobs; empty when it gives none. */
export function workshopHostKeys(spec: Workshop, hostId: string): string[] {
  return hostKeysOf(spec.hosts.find((h) => h.id === hostId)).map((k) => k.key);
}

/**
 * Every host's trusted keys: those workshop.yaml gives (origin `workshop`, which take the place of any stored pin
 * of that host), then the store's pins. Sorted by host id.
 */
export async function hostKeyViews(spec: Workshop, updatedAt: string): Promise<HostKeysView[]> {
  const { store } = useDeps();
  const records = (await store.hostKey.query.byWorkshop({ workshop: spec.name }).go({ pages: "all" })).data;
  const out = new Map<string, HostKeysView>();
  for (const r of records) out.set(r.hostId, view(r.hostId, recordKeys(r), r.pinnedAt));
  for (const h of spec.hosts) {
    const keys = workshopHostKeys(spec, h.id);
    if (keys.length) out.set(h.id, view(h.id, { keys, origin: "workshop" }, updatedAt));
  }
  return [...out.values()].sort((a, b) => byNumber(a.hostId, b.hostId));
}

/** The keys trusted for one host (workshop.yaml's, else the store's), for the portal's lab page. */
export async function trustedHostKeys(spec: Workshop, hostId: string): Promise<HostKeyView[]> {
  const declared = workshopHostKeys(spec, hostId);
  if (declared.length) return keyViews(declared);
  const rec = (await useDeps().store.hostKey.get({ workshop: spec.name, hostId }).go()).data;
  return rec ? keyViews(recordKeys(rec).keys) : [];
}
