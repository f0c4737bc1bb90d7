import { createHash, createHmac, timingSafeEqual } from "node:crypto";

/**
 * Signed calls from hosts to labfleet: an enrolled host's agent, and any host pushing its lab's progress. Each call
 * carries four headers; the signature is HMAC-SHA256, keyed with the host's own secret (shared/agent/host-secrets.ts),
 * over the canonical string
 *
 *   METHOD \n PATH \n SHA256-HEX(BODY) \n TIMESTAMP \n NONCE
 *
 * PATH is the request's path and query exactly as sent (`/agent/v1/poll`), TIMESTAMP is Unix seconds, NONCE is 16 to
 * 64 characters of [A-Za-z0-9_-]. labfleet refuses a call whose timestamp is more than SIGNATURE_WINDOW_SECONDS away
 * from its clock, and a nonce seen before inside that window (a replay). The same signing runs on hosts in bash with
 * openssl: SHELL_SIGNER below, shared by the agent script and the host-side wrapper.
 */
export const AGENT_HEADERS = {
  /** `<workshop>/<hostId>` */
  host: "x-labfleet-host",
  timestamp: "x-labfleet-timestamp",
  nonce: "x-labfleet-nonce",
  /** Lowercase hex. */
  signature: "x-labfleet-signature",
} as const;

export const SIGNATURE_WINDOW_SECONDS = 300;
export const NONCE_PATTERN = /^[A-Za-z0-9_-]{16,64}$/;

export interface SignedParts {
  method: string;
  /** Path and query, as sent. */
  path: string;
  body: string | Uint8Array;
  /** Unix seconds. */
  timestamp: number;
  nonce: string;
}

export function bodyHash(body: string | Uint8Array): string {
  return createHash("sha256").update(body).digest("hex");
}

export function canonicalString(parts: SignedParts): string {
  return [
    parts.method.toUpperCase(),
    parts.path,
    bodyHash(parts.body),
    String(parts.timestamp),
    parts.nonce,
  ].join("\n");
}

/** The signature of a call: hex HMAC-SHA256 keyed with the secret's UTF-8 bytes. */
export function signCall(secret: string, parts: SignedParts): string {
  return createHmac("sha256", secret).update(canonicalString(parts)).digest("hex");
}

/** The four headers of a signed call (what the agent and the wrapper send; tests use it to play a host). */
export function signedHeaders(
  workshop: string,
  hostId: string,
  secret: string,
  parts: SignedParts,
): Record<string, string> {
  return {
    [AGENT_HEADERS.host]: `${workshop}/${hostId}`,
    [AGENT_HEADERS.timestamp]: String(parts.timestamp),
    [AGENT_HEADERS.nonce]: parts.nonce,
    [AGENT_HEADERS.signature]: signCall(secret, parts),
  };
}

/** Whether `signature` is the call's signature under any of `secrets` (constant-time per comparison). */
export function signatureMatches(secrets: string[], parts: SignedParts, signature: string): boolean {
  if (!/^[0-9a-f]{64}$/.test(signature)) return false;
  const given = Buffer.from(signature, "hex");
  return secrets.some((secret) => timingSafeEqual(Buffer.from(signCall(secret, parts), "hex"), given));
}

/**
 * Bash functions for hosts, shared by the agent script and the host-side wrapper:
 * `labfleet_signed_curl METHOD PATH BODY_FILE [curl args...]` sends BODY_FILE to "$LABFLEET_API$PATH", signed for
 * "$LABFLEET_WORKSHOP/$LABFLEET_HOST_ID" with "$LABFLEET_HOST_SECRET", and prints the answer's body. It needs curl,
 * openssl, and od on a bash older than 5.1. The secret never reaches a command line (other users of a shared
 * machine can read those in ps): `labfleet_hmac` computes HMAC-SHA256 itself, with bash builtins for the key pads and `openssl dgst` for the two
 * hashes (the key is at most 64 bytes: host secrets are 64 hex characters, one SHA-256 block): `labfleet_hmac
 * MESSAGE` prints the HMAC of MESSAGE in hex. Every host of a fleet signs each push with it, so it starts no
 * process bash can do without: the time comes from `printf %()T`, the nonce from bash's `$SRANDOM` (bash 5.1 and
 * later: the kernel's random numbers; `od` of /dev/urandom on an older bash), and no cut, tr, sed or cat.
 */
export const SHELL_SIGNER = String.raw`
labfleet_hmac() {
  local k="$LABFLEET_HOST_SECRET" i c ipad="" opad="" inner x=""
  for ((i = 0; i < 64; i++)); do
    if ((i < ${"$"}{#k})); then printf -v c '%d' "'${"$"}{k:i:1}"; else c=0; fi
    printf -v ipad '%s\\x%02x' "$ipad" $((c ^ 0x36))
    printf -v opad '%s\\x%02x' "$opad" $((c ^ 0x5c))
  done
  inner=$(printf '%b%s' "$ipad" "$1" | openssl dgst -sha256 -r)
  inner=${"$"}{inner%% *}
  for ((i = 0; i < ${"$"}{#inner}; i += 2)); do x+="\x${"$"}{inner:i:2}"; done
  inner=$(printf '%b%b' "$opad" "$x" | openssl dgst -sha256 -r)
  printf '%s\n' "${"$"}{inner%% *}"
}
labfleet_signed_curl() {
  local method="$1" path="$2" body_file="$3" ts nonce body_hash message sig
  shift 3
  printf -v ts '%(%s)T' -1
  if [ -n "${"$"}{SRANDOM-}" ]; then
    printf -v nonce '%08x%08x%08x%08x' "$SRANDOM" "$SRANDOM" "$SRANDOM" "$SRANDOM"
  else
    nonce=$(od -An -N16 -tx1 /dev/urandom)
    nonce=${"$"}{nonce//[!0-9a-f]/}
  fi
  body_hash=$(openssl dgst -sha256 -r < "$body_file")
  body_hash=${"$"}{body_hash%% *}
  printf -v message '%s\n%s\n%s\n%s\n%s' "$method" "$path" "$body_hash" "$ts" "$nonce"
  sig=$(labfleet_hmac "$message")
  curl -sS --fail-with-body -X "$method" "$LABFLEET_API$path" \
    -H "content-type: application/json" \
    -H "x-labfleet-host: $LABFLEET_WORKSHOP/$LABFLEET_HOST_ID" \
    -H "x-labfleet-timestamp: $ts" \
    -H "x-labfleet-nonce: $nonce" \
    -H "x-labfleet-signature: $sig" \
    --data-binary "@$body_file" "$@"
}
`;
