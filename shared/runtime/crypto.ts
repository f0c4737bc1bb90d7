import { createCipheriv, createDecipheriv, createHmac, randomBytes } from "node:crypto";

/** AES-256-GCM for lab credentials at rest: `v1.<iv>.<tag>.<ciphertext>`, base64url parts. */
export function seal(key: Buffer, plaintext: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", key, iv);
  const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()]);
  return ["v1", iv, cipher.getAuthTag(), body]
    .map((p) => (typeof p === "string" ? p : p.toString("base64url")))
    .join(".");
}

export function open(key: Buffer, sealed: string): string {
  const [version, iv, tag, body] = sealed.split(".");
  if (version !== "v1" || !iv || !tag || body === undefined)
    throw new Error("sealed value has an unknown format");
  const decipher = createDecipheriv("aes-256-gcm", key, Buffer.from(iv, "base64url"));
  decipher.setAuthTag(Buffer.from(tag, "base64url"));
  return Buffer.concat([decipher.update(Buffer.from(body, "base64url")), decipher.final()]).toString("utf8");
}

const derivedKeys = new Map<string, { from: Buffer; key: Buffer }>();

/**
 * A key for one purpose (`label`), derived from the runtime's access key with HMAC-SHA256, so a changed access
 * key ends everything signed with it (cookies, OAuth state). Kept per label while the access key is the same.
 */
export function derivedKey(accessKey: Buffer, label: string): Buffer {
  const kept = derivedKeys.get(label);
  if (kept?.from === accessKey) return kept.key;
  const key = createHmac("sha256", accessKey).update(label).digest();
  derivedKeys.set(label, { from: accessKey, key });
  return key;
}
