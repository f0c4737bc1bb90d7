import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { fingerprint, type HostKeyPins } from "../transports/host-keys.ts";
import { isConditionalFailure } from "./runs.ts";

/** Host keys pinned in the store, per workshop: the first key a host shows is kept; a different one is refused. */
export function storePins(workshop: string): HostKeyPins {
  return {
    async get(hostId) {
      const { store } = useDeps();
      return (await store.hostKey.get({ workshop, hostId }).go()).data?.key;
    },
    async pin(hostId, key) {
      const { store, clock } = useDeps();
      try {
        await store.hostKey
          .create({ workshop, hostId, key, fingerprint: fingerprint(key), pinnedAt: isoNow(clock) })
          .go();
      } catch (err) {
        if (!isConditionalFailure(err)) throw err; // pinned meanwhile: the next connection compares against it
      }
    },
  };
}

export async function listHostKeys(workshop: string) {
  assertActor("instructor", "system");
  const { store } = useDeps();
  return (await store.hostKey.query.byWorkshop({ workshop }).go({ pages: "all" })).data.map((k) => ({
    hostId: k.hostId,
    fingerprint: k.fingerprint,
    pinnedAt: k.pinnedAt,
  }));
}

/** `labfleet hosts forget-key`: the next connection trusts whatever key the host shows, and pins it. */
export async function forgetHostKey(
  workshop: string,
  hostId: string,
): Promise<{ hostId: string; fingerprint: string }> {
  assertActor("instructor");
  const { store } = useDeps();
  const existing = (await store.hostKey.get({ workshop, hostId }).go()).data;
  if (!existing)
    throw new VisibleError(
      "not_found",
      "host_key.not_found",
      `no pinned key for ${hostId} in workshop ${workshop}`,
    );
  await store.hostKey.delete({ workshop, hostId }).go();
  return { hostId, fingerprint: existing.fingerprint };
}

/** The public key hosts must authorize so labfleet can log in (its managed key). */
export async function sshPublicKey(): Promise<string> {
  assertActor("instructor", "system");
  const { sshPublicKey } = useDeps();
  if (!sshPublicKey)
    throw new VisibleError("not_found", "ssh.no_managed_key", "this runtime has no managed SSH key");
  return sshPublicKey();
}

/** Forgets every pinned key of a workshop (for providers that create hosts and throw them away). */
export async function forgetAllHostKeys(workshop: string): Promise<void> {
  const { store } = useDeps();
  const keys = (await store.hostKey.query.byWorkshop({ workshop }).go({ pages: "all" })).data;
  for (const k of keys) await store.hostKey.delete({ workshop, hostId: k.hostId }).go();
}
