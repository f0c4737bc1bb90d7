import { createHash, randomInt } from "node:crypto";

// No I or O: a code read off a projector should not be mistaken for 1 or 0.
const LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ";

/** `LAB-XVFDQK-20261130`: random letters and the date, easy to read aloud and to type. */
export function generateCode(letters: number, date: Date): string {
  const random = Array.from({ length: letters }, () => LETTERS[randomInt(LETTERS.length)]).join("");
  const day = date.toISOString().slice(0, 10).replace(/-/g, "");
  return `LAB-${random}-${day}`;
}

/** Case, spaces and dashes do not matter. */
export function normalizeCode(input: string): string {
  return input.toUpperCase().replace(/[\s-]+/g, "");
}

export function codeHash(input: string): string {
  return createHash("sha256")
    .update(`code:${normalizeCode(input)}`)
    .digest("hex");
}

export function emailHash(workshop: string, email: string): string {
  return createHash("sha256").update(`email:${workshop}:${email.trim().toLowerCase()}`).digest("hex");
}

export function linkHash(token: string): string {
  return createHash("sha256").update(`link:${token}`).digest("hex");
}
