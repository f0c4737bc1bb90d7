import { createHash } from "node:crypto";

/** Where an SSH transport keeps the host keys it trusted on first contact (the store, per workshop). */
export interface HostKeyPins {
  /** The pinned key of a host (OpenSSH public key blob, base64), if any. */
  get(hostId: string): Promise<string | undefined>;
  /** Pins a key seen for the first time. Never replaces an existing pin: that takes `forget` first. */
  pin(hostId: string, keyBase64: string): Promise<void>;
}

/** `SHA256:...`, as `ssh-keygen -l` prints it. */
export function fingerprint(keyBase64: string): string {
  return `SHA256:${createHash("sha256").update(Buffer.from(keyBase64, "base64")).digest("base64").replace(/=+$/, "")}`;
}

/** In-memory pins, for tests and one-off tools. */
export function memoryPins(initial: Record<string, string> = {}): HostKeyPins & { all: Map<string, string> } {
  const all = new Map(Object.entries(initial));
  return {
    all,
    get: async (hostId) => all.get(hostId),
    pin: async (hostId, key) => {
      if (!all.has(hostId)) all.set(hostId, key);
    },
  };
}
