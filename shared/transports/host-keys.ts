import { createHash } from "node:crypto";

/**
 * How labfleet came to trust a host key:
 * - `tofu`: the key the host showed at first contact (trust on first use);
 * - `workshop`: `hosts[].host_key` in workshop.yaml;
 * - `pinned`: `labfleet hosts pin` (the API's PUT .../host-keys/HOST);
 * - `ssm`: read from the instance through SSM Run Command, a channel that does not trust the network.
 * Only `tofu` is learnt from the network itself; the others were obtained another way ("known").
 */
export type KeyOrigin = "tofu" | "workshop" | "pinned" | "ssm";

/** The keys a host may show (OpenSSH public key blobs, base64), and how they were obtained. */
export interface KnownHostKeys {
  keys: string[];
  origin: KeyOrigin;
}

/** Where an SSH transport keeps the host keys it trusts (the store, per workshop). */
export interface HostKeyPins {
  /**
   * The keys trusted for a host, if any. A store may answer from a read of a moment ago (the connections a fleet
   * operation opens share one); `fresh` reads it now (before refusing a key, and after pinning one).
   */
  get(hostId: string, opts?: { fresh?: boolean }): Promise<KnownHostKeys | undefined>;
  /** Pins a key seen for the first time (origin `tofu`). Never replaces an existing pin: that takes `forget` first. */
  pin(hostId: string, keyBase64: string): Promise<void>;
}

/** `SHA256:...`, as `ssh-keygen -l` prints it. */
export function fingerprint(keyBase64: string): string {
  return `SHA256:${createHash("sha256").update(Buffer.from(keyBase64, "base64")).digest("base64").replace(/=+$/, "")}`;
}

/** In-memory pins, for tests and one-off tools: `all` holds each host's first key, `origins` how it came. */
export function memoryPins(
  initial: Record<string, string> = {},
  origins: Record<string, KeyOrigin> = {},
): HostKeyPins & { all: Map<string, string> } {
  const all = new Map(Object.entries(initial));
  return {
    all,
    get: async (hostId) => {
      const key = all.get(hostId);
      return key === undefined ? undefined : { keys: [key], origin: origins[hostId] ?? "tofu" };
    },
    pin: async (hostId, key) => {
      if (!all.has(hostId)) all.set(hostId, key);
    },
  };
}

/** The host key types labfleet accepts, in the order it asks a host for them (ssh2's own preference). */
export const HOST_KEY_TYPES = [
  "ssh-ed25519",
  "ecdsa-sha2-nistp256",
  "ecdsa-sha2-nistp384",
  "ecdsa-sha2-nistp521",
  "ssh-rsa",
] as const;
export type HostKeyType = (typeof HOST_KEY_TYPES)[number];

/** A host key as labfleet keeps it: its type and its OpenSSH public key blob, base64. */
export interface HostKey {
  type: HostKeyType;
  key: string;
}

const ONE_OF = "ssh-ed25519, ecdsa-sha2-nistp256/384/521 or ssh-rsa";
export const HOST_KEY_FORMS =
  'an SSH public host key: "ssh-ed25519 AAAA... [comment]" (a host\'s /etc/ssh/ssh_host_*_key.pub) or a line of ssh-keyscan ("host ssh-ed25519 AAAA...")';
/** Longer than any real public key line (a 16384-bit RSA key is about 2,800 characters). */
export const HOST_KEY_LINE_MAX = 8192;

/**
 * Reads one host key line: the OpenSSH public key format (`type base64 [comment]`) or the form `ssh-keyscan` and
 * known_hosts use (`host type base64`). The key data must be the key the type names. The message of a refusal says
 * what is wrong and never repeats the text (a private key pasted by mistake stays out of errors and logs).
 */
export function parseHostKeyLine(line: string): { ok: true; key: HostKey } | { ok: false; message: string } {
  const bad = (why: string) => ({ ok: false as const, message: `expected ${HOST_KEY_FORMS}; ${why}` });
  const text = line.trim();
  if (text === "") return bad("got an empty line");
  if (text.length > HOST_KEY_LINE_MAX) return bad(`got ${text.length} characters`);
  if (/PRIVATE KEY/.test(text)) {
    return {
      ok: false,
      message:
        "this is a private key: give the host's public key (the .pub file, e.g. /etc/ssh/ssh_host_ed25519_key.pub), and keep the private key on the host",
    };
  }
  const tokens = text.split(/\s+/);
  if (tokens[0]?.startsWith("@")) {
    return bad("known_hosts markers (@cert-authority, @revoked) are not accepted: give the host's own key");
  }
  const typeLike = (t: string | undefined) => t !== undefined && /^(ssh|ecdsa|sk|rsa)-/.test(t);
  const at = typeLike(tokens[0]) ? 0 : typeLike(tokens[1]) ? 1 : -1;
  if (at < 0) return bad(`no key type (${ONE_OF}) in the line`);
  const type = tokens[at] as string;
  const data = tokens[at + 1];
  if (!(HOST_KEY_TYPES as readonly string[]).includes(type)) {
    return bad(`${type} keys are not accepted: give the host's ${ONE_OF} key`);
  }
  if (!data) return bad(`the key data is missing after ${type}`);
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(data)) return bad(`the key data after ${type} is not base64`);
  const blob = Buffer.from(data, "base64");
  const problem = blobProblem(blob, type as HostKeyType);
  if (problem) return bad(problem);
  return { ok: true, key: { type: type as HostKeyType, key: blob.toString("base64") } };
}

/** Reads the SSH wire strings of a key blob (RFC 4251 `string`s); undefined when it is not one. */
function sshStrings(blob: Buffer): Buffer[] | undefined {
  const out: Buffer[] = [];
  let at = 0;
  while (at < blob.length) {
    if (at + 4 > blob.length) return undefined;
    const n = blob.readUInt32BE(at);
    at += 4;
    if (at + n > blob.length) return undefined;
    out.push(blob.subarray(at, at + n));
    at += n;
  }
  return out;
}

/** Why a blob is not a public key of this type (RFC 4253 6.6, RFC 5656 3.1, RFC 8709 4), or undefined. */
function blobProblem(blob: Buffer, type: HostKeyType): string | undefined {
  const parts = sshStrings(blob);
  const inner = parts?.[0]?.toString("latin1");
  if (!parts || !inner) return `the key data after ${type} is not an SSH public key`;
  if (inner !== type) return `the line says ${type}, and its key data is of type ${inner.slice(0, 40)}`;
  if (type === "ssh-ed25519") {
    return parts.length === 2 && parts[1]?.length === 32
      ? undefined
      : "the ssh-ed25519 key data is malformed";
  }
  if (type === "ssh-rsa") {
    const n = parts[2];
    if (parts.length !== 3 || !parts[1]?.length || !n?.length) return "the ssh-rsa key data is malformed";
    const bits = (n.length - (n[0] === 0 ? 1 : 0)) * 8;
    return bits < 1024 ? `the ssh-rsa key has ${bits} bits; at least 1024 are expected` : undefined;
  }
  const curve = type.slice("ecdsa-sha2-".length);
  return parts.length === 3 && parts[1]?.toString("latin1") === curve && (parts[2]?.length ?? 0) > 0
    ? undefined
    : `the ${type} key data is malformed`;
}

/** The type named inside a key blob (base64), or undefined when it is not readable. */
export function keyTypeOf(keyBase64: string): string | undefined {
  return sshStrings(Buffer.from(keyBase64, "base64"))?.[0]?.toString("latin1");
}

/** The `type base64` line of a key blob. */
export function keyLine(keyBase64: string): string {
  return `${keyTypeOf(keyBase64) ?? "unknown"} ${keyBase64}`;
}

/**
 * The host key algorithms to ask for when the keys a host may show are known: only their types, so a host with
 * several keys presents one labfleet can check (an RSA key is signed with rsa-sha2-512, rsa-sha2-256 or ssh-rsa).
 * Undefined (ssh2's defaults) when a key's type is not one labfleet restricts to.
 */
export function hostKeyAlgorithms(keys: string[]): string[] | undefined {
  const types = new Set(keys.map(keyTypeOf));
  if ([...types].some((t) => !(HOST_KEY_TYPES as readonly (string | undefined)[]).includes(t)))
    return undefined;
  return HOST_KEY_TYPES.filter((t) => types.has(t)).flatMap((t) =>
    t === "ssh-rsa" ? ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] : [t],
  );
}
