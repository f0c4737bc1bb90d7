import { createPrivateKey, type KeyObject, sign } from "node:crypto";
import { mkdir, readFile, stat, writeFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join } from "node:path";
import ssh2 from "ssh2";
import { VisibleError } from "../runtime/errors.ts";

// ssh2 is CommonJS: Node exposes only some of its names to ESM imports, not `utils`.
const { utils, BaseAgent } = ssh2;
type ParsedKey = ssh2.ParsedKey;

/**
 * The key labfleet logs in with: a private key (OpenSSH or PEM, unencrypted) and/or an ssh-agent socket.
 * `keyLabel` says which key it is in messages (a path, or "agent"); it never holds key material.
 */
export interface SshIdentity {
  privateKey?: Buffer;
  keyLabel: string;
  agent?: string;
}

export interface LoadSshIdentityOptions {
  /** `defaults.identity_file` from workshop.yaml; a leading `~/` is the user's home. */
  identityFile?: string;
  /** labfleet's own folder (`~/.labfleet`); the managed key lives in its `ssh/` folder. */
  labfleetHome: string;
  /** An ssh-agent socket (`SSH_AUTH_SOCK`), offered after the key. */
  agentSocket?: string;
}

/** The managed key labfleet creates when a workshop names no identity_file. */
export function managedKeyPath(labfleetHome: string): string {
  return join(labfleetHome, "ssh", "id_ed25519");
}

/**
 * The identity for SSH hosts: `identity_file` when given, otherwise the managed key
 * `<labfleetHome>/ssh/id_ed25519` (created on first use, mode 0600, with its `.pub` beside it),
 * plus the agent socket when given. Key files readable by other users are refused, as OpenSSH does.
 */
export async function loadSshIdentity(options: LoadSshIdentityOptions): Promise<SshIdentity> {
  const agent = options.agentSocket ? { agent: options.agentSocket } : {};
  if (options.identityFile !== undefined) {
    const path = expandHome(options.identityFile);
    const key = await readKeyFile(path, "identity_file");
    if (parsePrivateKey(key, path) === "encrypted") {
      if (options.agentSocket) return { keyLabel: `agent (${path} is encrypted)`, ...agent };
      throw new VisibleError(
        "input",
        "ssh.identity_encrypted",
        `identity_file ${path} is protected by a passphrase, and labfleet never prompts: load it into ssh-agent (SSH_AUTH_SOCK) or use a key without a passphrase`,
      );
    }
    return { privateKey: key, keyLabel: path, ...agent };
  }
  const path = managedKeyPath(options.labfleetHome);
  const key = await ensureManagedKey(path);
  return { privateKey: key, keyLabel: path, ...agent };
}

/** The OpenSSH public key line (`ssh-ed25519 AAAA... labfleet`) of an identity's key, for authorized_keys. */
export function publicKeyLine(identity: SshIdentity, comment = "labfleet"): string {
  if (!identity.privateKey) {
    throw new VisibleError("input", "ssh.identity_no_key", `${identity.keyLabel} holds no key file to print`);
  }
  const parsed = utils.parseKey(identity.privateKey);
  const key = Array.isArray(parsed) ? parsed[0] : parsed;
  if (!key || key instanceof Error) {
    throw new VisibleError(
      "input",
      "ssh.identity_invalid",
      `${identity.keyLabel} is not a private key ssh2 can read`,
    );
  }
  return `${key.type} ${key.getPublicSSH().toString("base64")} ${comment}`;
}

/** The hash a key type signs with when the server asks for none in particular (RSA: the server names sha256/512). */
const DEFAULT_HASH: Record<string, string | null> = {
  "ssh-ed25519": null,
  "ecdsa-sha2-nistp256": "sha256",
  "ecdsa-sha2-nistp384": "sha384",
  "ecdsa-sha2-nistp521": "sha512",
  "ssh-rsa": "sha1",
  "ssh-dss": "sha1",
};

/**
 * An identity's private key as an ssh2 agent that lives in this process: the key is parsed once and signs with a
 * crypto KeyObject. Given the key itself, ssh2 parses the key file again at every login and its PEM text again at
 * every signature, which costs a fleet's cold operations more CPU per host than the signature itself.
 */
class KeyAgent extends BaseAgent<ParsedKey> {
  private readonly signer: KeyObject;
  private readonly defaultHash: string | null;

  constructor(private readonly key: ParsedKey) {
    super();
    this.signer = createPrivateKey(key.getPrivatePEM());
    this.defaultHash = DEFAULT_HASH[key.type] ?? null;
  }

  getIdentities(cb: ssh2.IdentityCallback<ParsedKey>): void {
    cb(null, [this.key]);
  }

  sign(
    _key: ParsedKey,
    data: Buffer,
    options: ssh2.SigningRequestOptions | ssh2.SignCallback,
    cb?: ssh2.SignCallback,
  ): void {
    const done = typeof options === "function" ? options : cb;
    const hash = (typeof options === "function" ? undefined : options.hash) ?? this.defaultHash;
    let signature: Buffer;
    try {
      signature = sign(hash, data, this.signer);
    } catch (err) {
      done?.(err as Error);
      return;
    }
    done?.(null, signature);
  }
}

const agents = new WeakMap<Buffer, KeyAgent>();

/** The in-process agent of an identity's private key (KeyAgent), made once per key; undefined for a key ssh2 cannot read. */
export function keyAgent(privateKey: Buffer): ssh2.BaseAgent<ParsedKey> | undefined {
  const kept = agents.get(privateKey);
  if (kept) return kept;
  const parsed = utils.parseKey(privateKey);
  const key = Array.isArray(parsed) ? parsed[0] : parsed;
  if (!key || key instanceof Error || key.getPrivatePEM() === null) return undefined;
  const agent = new KeyAgent(key);
  agents.set(privateKey, agent);
  return agent;
}

function expandHome(path: string): string {
  if (path === "~") return homedir();
  return path.startsWith("~/") ? join(homedir(), path.slice(2)) : path;
}

async function readKeyFile(path: string, what: string): Promise<Buffer> {
  let mode: number;
  try {
    mode = (await stat(path)).mode;
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new VisibleError(
      "input",
      "ssh.identity_missing",
      code === "ENOENT"
        ? `${what} ${path} does not exist`
        : `${what} ${path} cannot be read (${code ?? "error"})`,
    );
  }
  if ((mode & 0o077) !== 0) {
    const octal = (mode & 0o777).toString(8).padStart(4, "0");
    throw new VisibleError(
      "input",
      "ssh.identity_too_open",
      `${what} ${path} has mode ${octal}, so other users can read or change it: run chmod 600 ${path}`,
    );
  }
  try {
    return await readFile(path);
  } catch (err) {
    throw new VisibleError(
      "input",
      "ssh.identity_missing",
      `${what} ${path} cannot be read (${(err as NodeJS.ErrnoException).code ?? "error"})`,
    );
  }
}

/** "ok" for a usable private key, "encrypted" for one behind a passphrase; anything else is refused. */
function parsePrivateKey(key: Buffer, path: string): "ok" | "encrypted" {
  const parsed = utils.parseKey(key);
  if (parsed instanceof Error) {
    if (/encrypted|passphrase/i.test(parsed.message)) return "encrypted";
    throw new VisibleError(
      "input",
      "ssh.identity_invalid",
      `identity_file ${path} is not a private key labfleet can read (OpenSSH or PEM): ${parsed.message}`,
    );
  }
  const first = Array.isArray(parsed) ? parsed[0] : parsed;
  if (!first || first.getPrivatePEM() === null) {
    throw new VisibleError(
      "input",
      "ssh.identity_invalid",
      `identity_file ${path} holds a public key: give the private key`,
    );
  }
  return "ok";
}

/**
 * A new ed25519 key pair in OpenSSH format: `private` (the key file) and `public` (the `.pub` line).
 * ssh2 1.17 drops a leading zero byte from the public key or the seed (about one key in 128), which
 * OpenSSH then refuses ("error in libcrypto"): such keys are checked for and made again.
 */
export function generateEd25519KeyPair(comment = ""): { private: string; public: string } {
  for (;;) {
    const pair = utils.generateKeyPairSync("ed25519", { comment });
    if (wellFormedEd25519(pair.private)) return pair;
  }
}

/** Whether an unencrypted OpenSSH ed25519 key file holds a 32-byte public key and a 64-byte secret that ends with it. */
function wellFormedEd25519(pem: string): boolean {
  const blob = Buffer.from(pem.replace(/-----[^-]+-----/g, "").replace(/\s+/g, ""), "base64");
  let at = "openssh-key-v1\0".length;
  const field = (from: Buffer): Buffer => {
    const length = from.readUInt32BE(at);
    const value = from.subarray(at + 4, at + 4 + length);
    at += 4 + length;
    return value;
  };
  try {
    field(blob); // cipher
    field(blob); // kdf
    field(blob); // kdf options
    at += 4; // number of keys
    field(blob); // public key blob
    const secret = field(blob);
    at = 8; // two check words
    field(secret); // key type
    const publicKey = field(secret);
    const privateKey = field(secret);
    return publicKey.length === 32 && privateKey.length === 64 && privateKey.subarray(32).equals(publicKey);
  } catch {
    return false;
  }
}

async function ensureManagedKey(path: string): Promise<Buffer> {
  const exists = await stat(path).then(
    () => true,
    () => false,
  );
  if (!exists) {
    await mkdir(dirname(path), { recursive: true, mode: 0o700 });
    const pair = generateEd25519KeyPair("labfleet");
    try {
      // "wx": never replace a key that another process created meanwhile.
      await writeFile(path, pair.private, { mode: 0o600, flag: "wx" });
      await writeFile(`${path}.pub`, `${pair.public}\n`, { mode: 0o644 });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    }
  }
  return readKeyFile(path, "the managed key");
}
