import { utils } from "ssh2";
import { describe, expect, it } from "vitest";
import {
  fingerprint,
  hostKeyAlgorithms,
  keyTypeOf,
  parseHostKeyLine,
} from "../../shared/transports/host-keys.ts";
import { generateEd25519KeyPair } from "../../shared/transports/ssh-identity.ts";
import { validateWorkshopYaml } from "../../shared/workshop/load.ts";
import { hostKeysOf } from "../../shared/workshop/schema.ts";

// ed25519 keys come from labfleet's own generator: ssh2's makes a malformed one about once in 128.
function pub(type: "ed25519", bits?: undefined, comment?: string): string;
function pub(type: "ecdsa" | "rsa", bits: number, comment?: string): string;
function pub(type: "ed25519" | "ecdsa" | "rsa", bits?: number, comment = "root@web-1"): string {
  return type === "ed25519" || bits === undefined
    ? generateEd25519KeyPair(comment).public
    : utils.generateKeyPairSync(type, { bits, comment }).public;
}
const ed = pub("ed25519");
const edData = ed.split(" ")[1] as string;

function accepted(line: string) {
  const r = parseHostKeyLine(line);
  if (!r.ok) throw new Error(`refused: ${r.message}`);
  return r.key;
}
function refused(line: string): string {
  const r = parseHostKeyLine(line);
  if (r.ok) throw new Error("expected a refusal");
  return r.message;
}

describe("host key lines given out of band", () => {
  it("reads the OpenSSH public key format, with or without a comment", () => {
    expect(accepted(ed)).toEqual({ type: "ssh-ed25519", key: edData });
    expect(accepted(`  ssh-ed25519 ${edData}  `)).toEqual({ type: "ssh-ed25519", key: edData });
    for (const [type, bits, name] of [
      ["ecdsa", 256, "ecdsa-sha2-nistp256"],
      ["ecdsa", 384, "ecdsa-sha2-nistp384"],
      ["ecdsa", 521, "ecdsa-sha2-nistp521"],
      ["rsa", 2048, "ssh-rsa"],
    ] as const) {
      const line = pub(type, bits);
      expect(accepted(line)).toEqual({ type: name, key: line.split(" ")[1] });
    }
  });

  it("reads what ssh-keyscan prints and known_hosts lines: a host (or several, or hashed) before the key", () => {
    for (const host of ["192.0.2.7", "[192.0.2.7]:2222", "web-1,192.0.2.7", "|1|c2FsdA==|aGFzaA=="]) {
      expect(accepted(`${host} ssh-ed25519 ${edData}`)).toEqual({ type: "ssh-ed25519", key: edData });
    }
  });

  it("refuses what is not a host's public key, saying why and never repeating the line", () => {
    const privateKey = generateEd25519KeyPair().private;
    const cases: [string, RegExp][] = [
      ["", /empty line/],
      [privateKey, /this is a private key: give the host's public key/],
      [`ssh-dss ${edData}`, /ssh-dss keys are not accepted/],
      [`sk-ssh-ed25519@openssh.com ${edData}`, /sk-ssh-ed25519@openssh.com keys are not accepted/],
      [`ssh-ed25519-cert-v01@openssh.com ${edData}`, /keys are not accepted/],
      [`ssh-rsa ${edData}`, /the line says ssh-rsa, and its key data is of type ssh-ed25519/],
      ["ssh-ed25519", /the key data is missing after ssh-ed25519/],
      ["ssh-ed25519 not*base64", /not base64/],
      [`ssh-ed25519 ${edData.slice(0, 40)}`, /not an SSH public key|malformed/],
      [`@cert-authority *.example ssh-ed25519 ${edData}`, /markers .* are not accepted/],
      [`web-1 192.0.2.7 ${edData}`, /no key type/],
      [pub("rsa", 768), /the ssh-rsa key has 768 bits; at least 1024 are expected/],
    ];
    for (const [line, why] of cases) {
      const message = refused(line);
      expect(message, line.slice(0, 40)).toMatch(why);
      if (line.length > 20) expect(message).not.toContain(line.split(/\s+/)[1]?.slice(0, 20));
    }
    expect(refused(privateKey)).not.toMatch(/[A-Za-z0-9+/]{40}/);
  });

  it("asks the host only for the types of the keys it knows, an RSA key with its three signatures", () => {
    const rsa = accepted(pub("rsa", 2048)).key;
    const ecdsa = accepted(pub("ecdsa", 384)).key;
    expect(hostKeyAlgorithms([edData])).toEqual(["ssh-ed25519"]);
    expect(hostKeyAlgorithms([rsa, edData])).toEqual([
      "ssh-ed25519",
      "rsa-sha2-512",
      "rsa-sha2-256",
      "ssh-rsa",
    ]);
    expect(hostKeyAlgorithms([ecdsa])).toEqual(["ecdsa-sha2-nistp384"]);
    // A pinned key of another kind (a DSA key trusted on first use long ago): ssh2's defaults, unrestricted.
    const dss = Buffer.concat([Buffer.from([0, 0, 0, 7]), Buffer.from("ssh-dss")]).toString("base64");
    expect(keyTypeOf(dss)).toBe("ssh-dss");
    expect(hostKeyAlgorithms([dss])).toBeUndefined();
  });

  it("fingerprints a key as ssh-keygen -l does (SHA256 of the blob, base64 without padding)", () => {
    expect(fingerprint(edData)).toMatch(/^SHA256:[A-Za-z0-9+/]{43}$/);
    expect(fingerprint(edData)).not.toBe(fingerprint(accepted(pub("ed25519")).key));
  });
});

describe("workshop.yaml: hosts[].host_key and ssh.require_known_host_keys", () => {
  const yaml = (hostKey: string, ssh = "") => `name: byo
lab:
  source: ./lab
  setup: bash setup.sh
provider:
  type: static
${ssh}hosts:
  - id: web-1
    ssh: lab@192.0.2.7
    host_key: ${hostKey}
`;

  it("takes one key or a list, and the keys come out as type and blob", () => {
    const ecdsa = pub("ecdsa", 256);
    const one = validateWorkshopYaml(yaml(JSON.stringify(ed), "ssh:\n  require_known_host_keys: true\n"));
    expect(one.ok).toBe(true);
    if (!one.ok) return;
    expect(one.workshop.ssh).toEqual({ require_known_host_keys: true });
    expect(hostKeysOf(one.workshop.hosts[0])).toEqual([{ type: "ssh-ed25519", key: edData }]);
    const list = validateWorkshopYaml(yaml(`\n      - ${JSON.stringify(ed)}\n      - "web-1 ${ecdsa}"`));
    expect(list.ok).toBe(true);
    if (!list.ok) return;
    expect(list.workshop.ssh).toEqual({ require_known_host_keys: false }); // the default
    expect(hostKeysOf(list.workshop.hosts[0]).map((k) => k.type)).toEqual([
      "ssh-ed25519",
      "ecdsa-sha2-nistp256",
    ]);
  });

  it("refuses a bad key with its path (the entry's index in a list), and a bad setting with its own", () => {
    const bad = validateWorkshopYaml(yaml(`\n      - ${JSON.stringify(ed)}\n      - "ssh-rsa ${edData}"`));
    expect(bad.ok).toBe(false);
    if (bad.ok) return;
    expect(bad.errors).toHaveLength(1);
    expect(bad.errors[0]?.path).toBe("hosts[0].host_key[1]");
    expect(bad.errors[0]?.message).toMatch(/^expected an SSH public host key: .*the line says ssh-rsa/);
    expect(bad.errors[0]?.line).toBe(12);
    expect(bad.errors[0]?.message).not.toContain(edData.slice(0, 20));

    const number = validateWorkshopYaml(yaml("42"));
    expect(!number.ok && number.errors.map((e) => [e.path, e.message])).toEqual([
      ["hosts[0].host_key", expect.stringMatching(/^expected an SSH public host key.*, or a list of them$/)],
    ]);
    const empty = validateWorkshopYaml(yaml("[]"));
    expect(!empty.ok && empty.errors.map((e) => [e.path, e.message])).toEqual([
      ["hosts[0].host_key", "expected at least one host key"],
    ]);
    const setting = validateWorkshopYaml(
      yaml(JSON.stringify(ed), "ssh:\n  require_known_host_keys: yes please\n"),
    );
    expect(!setting.ok && setting.errors.map((e) => [e.path, e.message])).toEqual([
      ["ssh.require_known_host_keys", "expected true or false"],
    ]);
    const unknown = validateWorkshopYaml(yaml(JSON.stringify(ed), "ssh:\n  strict: true\n"));
    expect(!unknown.ok && unknown.errors.map((e) => e.path)).toEqual(["ssh.strict"]);
  });
});
