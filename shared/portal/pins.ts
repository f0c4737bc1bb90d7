import { randomBytes, scrypt as scryptCb, timingSafeEqual } from "node:crypto";
import { promisify } from "node:util";
import { SCRYPT } from "./constants.ts";

const scrypt = promisify(scryptCb) as (
  pw: string,
  salt: Buffer,
  len: number,
  opts: object,
) => Promise<Buffer>;

const COMMON = new Set([
  "123123",
  "121212",
  "112233",
  "696969",
  "159753",
  "147258",
  "258369",
  "102030",
  "010203",
  "789456",
  "456789",
  "131313",
  "123321",
  "654456",
  "200000",
  "100000",
  "999999",
]);

/** Why a PIN is refused, or undefined when it is acceptable. */
export function pinProblem(pin: string): string | undefined {
  if (!/^\d{6}$/.test(pin)) return "a PIN is exactly 6 digits";
  if (/^(\d)\1{5}$/.test(pin)) return "a PIN of one repeated digit is too easy to guess";
  const digits = [...pin].map(Number);
  const steps = digits.slice(1).map((d, i) => (d - (digits[i] as number) + 10) % 10);
  if (steps.every((s) => s === 1) || steps.every((s) => s === 9))
    return "a PIN of consecutive digits is too easy to guess";
  if (/^(\d\d)\1\1$/.test(pin) || /^(\d\d\d)\1$/.test(pin))
    return "a PIN that repeats a pattern is too easy to guess";
  if (COMMON.has(pin)) return "this PIN is among the most common ones";
  return undefined;
}

export async function hashPin(pin: string): Promise<string> {
  const salt = randomBytes(16);
  const hash = await scrypt(pin, salt, SCRYPT.keyLen, {
    N: SCRYPT.N,
    r: SCRYPT.r,
    p: SCRYPT.p,
    maxmem: 64 * 1024 * 1024,
  });
  return `scrypt$${SCRYPT.N}$${SCRYPT.r}$${SCRYPT.p}$${salt.toString("base64url")}$${hash.toString("base64url")}`;
}

export async function verifyPin(pin: string, stored: string): Promise<boolean> {
  const [kind, n, r, p, salt, hash] = stored.split("$");
  if (kind !== "scrypt" || !salt || !hash) return false;
  const want = Buffer.from(hash, "base64url");
  const got = await scrypt(pin, Buffer.from(salt, "base64url"), want.length, {
    N: Number(n),
    r: Number(r),
    p: Number(p),
    maxmem: 64 * 1024 * 1024,
  });
  return got.length === want.length && timingSafeEqual(got, want);
}
