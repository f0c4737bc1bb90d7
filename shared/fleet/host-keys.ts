import { z } from "zod";
import type { Provider } from "../providers/types.ts";
import { hostIdsOf } from "../providers/types.ts";
import { assertActor } from "../runtime/actor.ts";
import { isoNow } from "../runtime/clock.ts";
import { releaseConnections, useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { log } from "../runtime/logger.ts";
import { fingerprint, HOST_KEY_LINE_MAX, parseHostKeyLine } from "../transports/host-keys.ts";
import { bastionPinId, parseSshAddress } from "../transports/ssh.ts";
import type { Transport } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";
import {
  forgetPinReads,
  type HostKeysView,
  hostKeyViews,
  recordKeys,
  view,
  workshopHostKeys,
} from "./host-key-records.ts";
import { LabStepError } from "./lab.ts";
import { isConditionalFailure } from "./runs.ts";
import { getWorkshop } from "./workshops.ts";

export { type HostKeysView, storePins } from "./host-key-records.ts";

/** Every host's trusted keys, with how each was obtained (`labfleet hosts keys`). */
export async function listHostKeys(workshop: string): Promise<HostKeysView[]> {
  assertActor("instructor", "system");
  const w = await getWorkshop(workshop);
  return hostKeyViews(w.spec as Workshop, w.updatedAt);
}

/** The ids `hosts pin` and `forget-key` take: the workshop's hosts and the bastions workshop.yaml names. */
function pinIds(spec: Workshop): Set<string> {
  const ids = new Set(hostIdsOf(spec));
  const vias = [spec.defaults.ssh_options?.proxy_jump, ...spec.hosts.map((h) => h.via)];
  for (const via of vias) {
    if (via === undefined) continue;
    try {
      ids.add(bastionPinId(parseSshAddress(via, spec.defaults.ssh_user)));
    } catch {
      // a bastion without a user is refused where it is used
    }
  }
  return ids;
}

/** What `labfleet hosts pin` sends: the key lines (the OpenSSH format or ssh-keyscan's) and whether to replace. */
export const PinHostKeyInput = z.strictObject({
  keys: z
    .array(
      z
        .string({ error: "expected a host key line" })
        .max(HOST_KEY_LINE_MAX, {
          error: `expected a host key line of at most ${HOST_KEY_LINE_MAX} characters`,
        })
        .superRefine((line, ctx) => {
          const r = parseHostKeyLine(line);
          if (!r.ok) ctx.addIssue({ code: "custom", message: r.message });
        }),
      { error: "expected a list of host key lines" },
    )
    .min(1, { error: "expected at least one host key" })
    .max(16, { error: "expected at most 16 host keys" })
    .meta({
      description:
        'The host\'s public key lines, obtained out of band: "ssh-ed25519 AAAA... [comment]" or ssh-keyscan\'s "host ssh-ed25519 AAAA..."',
      example: [
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGQZr3A9d2lDGT/0vNa+LF6iyT9qnNIgpAg7sev0MANu root@web-1",
      ],
    }),
  replace: z.boolean({ error: "expected replace: true or false" }).default(false).meta({
    description: "replace a different key pinned before (at first contact, by hand or through SSM)",
  }),
});

export interface PinResult extends HostKeysView {
  /** The pin this one replaced, when it held other keys. */
  replaced?: HostKeysView;
}

/**
 * `labfleet hosts pin`: trust these keys for a host from now on (origin `pinned`). A different pin already there
 * (trusted on first use, pinned before or read through SSM) is replaced only with `replace`; a pin holding only
 * keys among the given ones is confirmed without it. A host whose keys workshop.yaml gives is refused: the file
 * decides.
 */
export async function pinHostKey(
  workshop: string,
  hostId: string,
  input: z.input<typeof PinHostKeyInput>,
): Promise<PinResult> {
  assertActor("instructor");
  const { replace, keys: lines } = PinHostKeyInput.parse(input);
  const { store, clock } = useDeps();
  const w = await getWorkshop(workshop);
  const spec = w.spec as Workshop;
  if (!pinIds(spec).has(hostId)) {
    throw new VisibleError("not_found", "host.not_found", `no host ${hostId} in workshop ${workshop}`);
  }
  const index = spec.hosts.findIndex((h) => h.id === hostId);
  if (workshopHostKeys(spec, hostId).length) {
    throw new VisibleError(
      "conflict",
      "host_key.from_workshop",
      `the keys of ${hostId} are given by hosts[${index}].host_key in workshop.yaml: change them there`,
    );
  }
  const keys = [
    ...new Set(
      lines.flatMap((l) => {
        const r = parseHostKeyLine(l);
        return r.ok ? [r.key.key] : [];
      }),
    ),
  ];
  const first = keys[0] as string;
  const existing = (await store.hostKey.get({ workshop, hostId }).go()).data;
  const before = existing ? view(hostId, recordKeys(existing), existing.pinnedAt) : undefined;
  const kept = existing ? recordKeys(existing).keys.every((k) => keys.includes(k)) : true;
  if (existing && before && !kept && !replace) {
    const how = {
      tofu: "trusted on first use",
      workshop: "given in workshop.yaml",
      pinned: "pinned by hand",
      ssm: "read through SSM",
    }[before.origin];
    throw new VisibleError(
      "conflict",
      "host_key.pinned",
      `${hostId} already has another key (${before.keys.map((k) => k.fingerprint).join(", ")}, ${how}): to replace it with the key given, add --replace (API: "replace": true)`,
    );
  }
  const pinnedAt = isoNow(clock);
  const item = { key: first, keys, fingerprint: fingerprint(first), origin: "pinned" as const, pinnedAt };
  try {
    if (existing) {
      // Only over the pin that was read: one that changed meanwhile is not replaced unseen.
      await store.hostKey
        .patch({ workshop, hostId })
        .set(item)
        .remove(["address"])
        .where((a, op) => op.eq(a.pinnedAt, existing.pinnedAt))
        .go();
    } else {
      await store.hostKey.create({ workshop, hostId, ...item }).go();
    }
  } catch (err) {
    if (!isConditionalFailure(err)) throw err;
    throw new VisibleError(
      "conflict",
      "host_key.changed_meanwhile",
      `the pin of ${hostId} changed while this one was made: run the command again`,
    );
  }
  await releaseKeyed(workshop, hostId);
  log.info("host key pinned", {
    workshop,
    hostId,
    fingerprints: keys.map(fingerprint),
    ...(before && !kept ? { replaced: before.origin } : {}),
  });
  const pinned = view(hostId, { keys, origin: "pinned" }, pinnedAt);
  return before && !kept ? { ...pinned, replaced: before } : pinned;
}

/** `labfleet hosts forget-key`: the next connection trusts whatever key the host shows, and pins it. */
export async function forgetHostKey(
  workshop: string,
  hostId: string,
): Promise<{ hostId: string; fingerprint: string }> {
  assertActor("instructor");
  const { store } = useDeps();
  const existing = (await store.hostKey.get({ workshop, hostId }).go()).data;
  if (!existing) {
    const spec = (await store.workshop.get({ name: workshop }).go()).data?.spec as Workshop | undefined;
    const index = spec?.hosts.findIndex((h) => h.id === hostId) ?? -1;
    if (spec && workshopHostKeys(spec, hostId).length) {
      throw new VisibleError(
        "conflict",
        "host_key.from_workshop",
        `the keys of ${hostId} are given by hosts[${index}].host_key in workshop.yaml: change or remove them there`,
      );
    }
    throw new VisibleError(
      "not_found",
      "host_key.not_found",
      `no pinned key for ${hostId} in workshop ${workshop}`,
    );
  }
  await store.hostKey.delete({ workshop, hostId }).go();
  await releaseKeyed(workshop, hostId);
  return { hostId, fingerprint: existing.fingerprint };
}

/**
 * A pin changed or went: a pooled connection opened under the old key ends, so the next one checks the key
 * trusted now. A bastion's pin (`bastion:...`) may carry any host of the workshop: all of them end.
 */
async function releaseKeyed(workshop: string, pinId: string): Promise<void> {
  forgetPinReads(workshop);
  await releaseConnections(workshop, pinId.startsWith("bastion:") ? undefined : [pinId]);
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
  forgetPinReads(workshop);
  await releaseConnections(workshop);
}

/**
 * Prints the host's public host keys, one per line. LABFLEET_ROOT (unset on a real host) lets a test run it on a
 * machine that is a folder.
 */
export const READ_HOST_KEYS = `for f in "\${LABFLEET_ROOT:-}"/etc/ssh/ssh_host_*_key.pub; do
  [ -f "$f" ] && head -c 16384 "$f" && echo
done
exit 0
`;

/**
 * For providers whose transport does not trust the network (EC2 through SSM: Provider.hostKeyChannel), reads the
 * host's SSH host keys through it and pins them with that origin, once per machine (a replaced instance, at
 * another address, is read again). What students' `ssh` is shown (the portal's lab page) and what
 * `labfleet hosts keys` lists is then a key no network could have slipped in. A host without host keys (an image
 * without sshd) gets no pin.
 */
export async function pinHostKeysThrough(
  t: Transport,
  spec: Workshop,
  provider: Pick<Provider, "hostKeyChannel">,
  host: { hostId: string; address?: string | undefined },
): Promise<void> {
  const origin = provider.hostKeyChannel;
  if (!origin || !host.address) return;
  const { store, clock } = useDeps();
  const workshop = spec.name;
  const existing = (await store.hostKey.get({ workshop, hostId: host.hostId }).go()).data;
  if (existing?.origin === origin && existing.address === host.address) return;
  const r = await t.exec(READ_HOST_KEYS, {
    step: "read the host's SSH keys",
    timeoutMs: 60_000,
    brief: true,
  });
  if (r.exitCode !== 0) {
    throw new LabStepError(`reading the host's SSH host keys failed with exit code ${r.exitCode}`);
  }
  const keys = [
    ...new Set(
      r.stdout.split("\n").flatMap((line) => {
        const k = parseHostKeyLine(line);
        return k.ok ? [k.key.key] : [];
      }),
    ),
  ];
  if (keys.length === 0) {
    log.info("the host has no SSH host keys to pin", { workshop, hostId: host.hostId });
    return;
  }
  const first = keys[0] as string;
  await store.hostKey
    .put({
      workshop,
      hostId: host.hostId,
      key: first,
      keys,
      fingerprint: fingerprint(first),
      origin,
      address: host.address,
      pinnedAt: isoNow(clock),
    })
    .go();
  forgetPinReads(workshop);
  log.info("host keys pinned", {
    workshop,
    hostId: host.hostId,
    origin,
    fingerprints: keys.map(fingerprint),
  });
}
