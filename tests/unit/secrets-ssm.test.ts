import { execFileSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { LabStepError, startLab } from "../../shared/fleet/lab.ts";
import {
  fetchSecretsScript,
  publishSecretParameter,
  secretsFile,
  secretsForStart,
} from "../../shared/fleet/secrets.ts";
import type { Provider } from "../../shared/providers/types.ts";
import { configure, type Deps, type SecretParameters } from "../../shared/runtime/deps.ts";
import { LocalTransport } from "../../shared/transports/local.ts";
import { wrapScript } from "../../shared/transports/ssm.ts";
import type { ExecOptions, Transport, TransportName } from "../../shared/transports/types.ts";
import { parseWorkshopYaml } from "../../shared/workshop/load.ts";
import { removeDir, tempDir } from "../harness/runtime.ts";

/**
 * Operator secrets for hosts reached through SSM: publishSecretParameter (BeginUp, once per run) writes the
 * values to Parameter Store through the injected writer, and secretsForStart (each host's deploy) only names the
 * parameter: the host fetches it itself; no value may appear in any command, stdin or environment sent to the
 * host. The "host" is a folder run by the local transport, with a fake `aws` CLI that serves what the writer
 * wrote.
 */

const VALUES = {
  API_TOKEN: "tok-9f8e7d6c5b4a",
  LICENCE_KEY: `it's "quoted" $(rm -rf /) \`x\` \\back\nsecond line ü`,
};
const PARAMETER = "/labfleet/test/workshops/sec/secrets";
const spec = parseWorkshopYaml(`name: sec
lab:
  source: /srv/lab
  setup: bash setup.sh
  operator_secrets: [API_TOKEN, LICENCE_KEY]
provider:
  type: aws
  region: eu-west-1
  count: 1
  ttl_hours: 4
`);

/** A fake AWS CLI: logs its arguments, serves the fake parameter store, or fails as told. */
const FAKE_AWS = `#!/usr/bin/python3
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_AWS_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
fail = os.environ.get("FAKE_AWS_FAIL")
if fail:
    sys.stderr.write("\\nAn error occurred (" + fail + ") when calling the GetParameter operation: User: arn:aws:sts::123456789012:assumed-role/lab/i-0abc is not authorized\\n")
    sys.exit(254)
if args[:2] != ["ssm", "get-parameter"] or "--with-decryption" not in args:
    sys.exit(252)
name = args[args.index("--name") + 1]
with open(os.environ["FAKE_SSM_STORE"]) as f:
    params = json.load(f)
if name not in params:
    sys.stderr.write("An error occurred (ParameterNotFound) when calling the GetParameter operation: \\n")
    sys.exit(254)
if args[args.index("--query") + 1] != "Parameter.Value" or args[args.index("--output") + 1] != "json":
    sys.exit(252)
print(json.dumps(params[name]))
`;

let work: string;
let home: string;
let storeFile: string;
let awsLog: string;
const bins: Record<"full" | "noAws" | "noPython", string> = { full: "", noAws: "", noPython: "" };
let sent: { command: string; stdin: string; env: string }[] = [];
let puts: { workshop: string; values: Record<string, string> }[] = [];
let awsFail: string | undefined;
let bin: string;

const writer: SecretParameters = {
  nameOf: (workshop) => `/labfleet/test/workshops/${workshop}/secrets`,
  async put(workshop, values) {
    puts.push({ workshop, values });
    const name = writer.nameOf(workshop);
    const store = existsSync(storeFile) ? JSON.parse(readFileSync(storeFile, "utf8")) : {};
    writeFileSync(storeFile, JSON.stringify({ ...store, [name]: JSON.stringify(values) }));
    return name;
  },
  async remove() {},
};

/** The local transport in `dir`, recording exactly what labfleet sent before adding the test's environment. */
function recordingTransport(dir: string = home): Transport {
  const inner = new LocalTransport(dir);
  return {
    async exec(command: string, options: ExecOptions = {}) {
      const stdin =
        options.stdin === undefined ? "" : Buffer.from(options.stdin as string | Buffer).toString();
      sent.push({ command, stdin, env: JSON.stringify(options.env ?? {}) });
      return inner.exec(command, {
        ...options,
        env: {
          ...options.env,
          PATH: bin,
          FAKE_AWS_LOG: awsLog,
          FAKE_SSM_STORE: storeFile,
          ...(awsFail ? { FAKE_AWS_FAIL: awsFail } : {}),
        },
      });
    },
  };
}

/** The workshop's provider (`aws`), reaching its hosts through `transport`. */
function deps(parameters: SecretParameters | undefined, transport: TransportName = "ssm"): Deps {
  return {
    store: undefined as never,
    clock: { now: () => new Date() },
    providers: { aws: { name: "aws", transport } as Provider },
    transport: () => recordingTransport(),
    workflows: { start: async () => {}, stop: async () => {} },
    accessKey: Buffer.alloc(32),
    secrets: {
      get: async (keys) => ({
        values: Object.fromEntries(keys.map((k) => [k, VALUES[k as keyof typeof VALUES]])),
        missing: [],
      }),
    },
    ...(parameters ? { secretParameters: parameters } : {}),
  };
}

/** A PATH of its own: the tools the scripts use, with or without `aws` and `python3`. */
function makeBin(name: string, withAws: boolean, withPython: boolean): string {
  const dir = join(work, name);
  mkdirSync(dir);
  for (const tool of ["bash", "sh", "mkdir", "chmod", "rm", "mv", "sed", "grep", "head", "cat"]) {
    const path = execFileSync("bash", ["-c", `command -v ${tool}`], { encoding: "utf8" }).trim();
    symlinkSync(path, join(dir, tool));
  }
  if (withPython) symlinkSync("/usr/bin/python3", join(dir, "python3"));
  if (withAws) {
    writeFileSync(join(dir, "aws"), FAKE_AWS);
    chmodSync(join(dir, "aws"), 0o755);
  }
  return dir;
}

const secretsEnv = () => join(home, ".labfleet", "sec", "secrets.env");

function expectNoValueSent(): void {
  expect(sent.length).toBeGreaterThan(0);
  for (const s of sent) {
    for (const v of [...Object.values(VALUES), "tok-9f8e", "second line"]) {
      expect(s.command).not.toContain(v);
      expect(s.stdin).not.toContain(v);
      expect(s.env).not.toContain(v);
    }
  }
}

async function failure(p: Promise<unknown>): Promise<LabStepError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(LabStepError);
  const message = (err as Error).message;
  for (const v of Object.values(VALUES)) expect(message).not.toContain(v);
  return err as LabStepError;
}

beforeAll(() => {
  work = tempDir("labfleet-secrets-ssm-");
  bins.full = makeBin("bin-full", true, true);
  bins.noAws = makeBin("bin-no-aws", false, true);
  bins.noPython = makeBin("bin-no-python", true, false);
});
afterAll(() => {
  if (work) removeDir(work);
});
let hosts = 0;
beforeEach(() => {
  hosts++;
  home = join(work, `host-${hosts}`);
  mkdirSync(home);
  storeFile = join(work, `parameters-${hosts}.json`);
  awsLog = join(work, `aws-${hosts}.log`);
  writeFileSync(awsLog, "");
  sent = [];
  puts = [];
  awsFail = undefined;
  bin = bins.full;
  configure(deps(writer));
});

describe("operator secrets for a host reached through SSM", () => {
  it("the run writes the values to the parameter, the host fetches them into secrets.env; no value is sent", async () => {
    await publishSecretParameter(spec);
    expect(puts).toEqual([{ workshop: "sec", values: VALUES }]);
    expect(sent).toEqual([]);

    await secretsForStart(recordingTransport(), spec, "ssm");
    // The host's deploy writes nothing: it only names the parameter.
    expect(puts).toEqual([{ workshop: "sec", values: VALUES }]);
    // Byte for byte the file the SSH path writes, mode 0600 in a 0700 folder, no temporary file left.
    expect(readFileSync(secretsEnv(), "utf8")).toBe(secretsFile(VALUES));
    expect(statSync(secretsEnv()).mode & 0o777).toBe(0o600);
    expect(statSync(join(home, ".labfleet", "sec")).mode & 0o777).toBe(0o700);
    expect(existsSync(`${secretsEnv()}.tmp`)).toBe(false);
    expect(existsSync(join(home, ".labfleet", "sec", "secrets.fetch.err"))).toBe(false);
    // A lab sourcing it gets every value back exactly.
    const read = execFileSync(
      "bash",
      ["-c", `. "$1"; printf '%s\\0%s' "$API_TOKEN" "$LICENCE_KEY"`, "x", secretsEnv()],
      { encoding: "utf8" },
    );
    expect(read.split("\0")).toEqual([VALUES.API_TOKEN, VALUES.LICENCE_KEY]);

    // One command, naming the parameter and the region; the host's CLI asked for it decrypted.
    expect(sent).toHaveLength(1);
    expect(sent[0]?.command).toContain(`--name '${PARAMETER}' --with-decryption --region 'eu-west-1'`);
    expect(sent[0]?.stdin).toBe("");
    expectNoValueSent();
    const calls = readFileSync(awsLog, "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l));
    expect(calls).toEqual([
      [
        "ssm",
        "get-parameter",
        "--name",
        PARAMETER,
        "--with-decryption",
        "--region",
        "eu-west-1",
        "--query",
        "Parameter.Value",
        "--output",
        "json",
      ],
    ]);
  });

  it("the fetch command works as the SSM transport runs it (sh around bash, as AWS-RunShellScript does)", async () => {
    await writer.put("sec", VALUES);
    const script = wrapScript({
      home,
      command: fetchSecretsScript("sec", PARAMETER, "eu-west-1"),
      timeoutMs: 60_000,
    });
    for (const v of Object.values(VALUES)) expect(script).not.toContain(v);
    const out = execFileSync("sh", ["-c", script], {
      encoding: "utf8",
      env: { PATH: `${bin}:/usr/bin:/bin`, FAKE_AWS_LOG: awsLog, FAKE_SSM_STORE: storeFile },
      stdio: ["ignore", "pipe", "pipe"],
    });
    expect(out).toBe("");
    expect(readFileSync(secretsEnv(), "utf8")).toBe(secretsFile(VALUES));
    expect(statSync(secretsEnv()).mode & 0o777).toBe(0o600);
  });

  it("says what to install when the host has no AWS CLI, and writes nothing", async () => {
    bin = bins.noAws;
    const err = await failure(secretsForStart(recordingTransport(), spec, "ssm"));
    expect(err.message).toContain("the AWS CLI (aws) is not installed on this host");
    expect(err.message).toContain("sudo snap install aws-cli --classic");
    expect(err.message).toContain(PARAMETER);
    expect(existsSync(secretsEnv())).toBe(false);
    expectNoValueSent();
  });

  it("says what to install when the host has no python3", async () => {
    bin = bins.noPython;
    const err = await failure(secretsForStart(recordingTransport(), spec, "ssm"));
    expect(err.message).toContain("python3 is not installed on this host");
    expect(existsSync(secretsEnv())).toBe(false);
  });

  it("reports the AWS error code and the IAM the instance profile needs, nothing the host printed", async () => {
    awsFail = "AccessDeniedException";
    const err = await failure(secretsForStart(recordingTransport(), spec, "ssm"));
    expect(err.message).toBe(
      `fetching the operator secrets from Parameter Store (${PARAMETER}) failed on the host (AccessDeniedException): its instance profile needs ssm:GetParameter on that parameter, and kms:Decrypt on its key when that is not the default aws/ssm key`,
    );
    expect(existsSync(secretsEnv())).toBe(false);
    expectNoValueSent();
  });

  it("refuses a parameter that is not a JSON object of text values", async () => {
    writeFileSync(storeFile, JSON.stringify({ [PARAMETER]: JSON.stringify(["not", "an", "object"]) }));
    const notAnObject: SecretParameters = {
      nameOf: () => PARAMETER,
      put: async () => PARAMETER,
      remove: async () => {},
    };
    configure(deps(notAnObject));
    const err = await failure(secretsForStart(recordingTransport(), spec, "ssm"));
    expect(err.message).toBe(
      `the operator secrets in Parameter Store (${PARAMETER}) are not a JSON object of names to text values`,
    );
    expect(existsSync(secretsEnv())).toBe(false);
  });

  it("without a parameter writer, the run writes nothing and each host is refused before anything reaches it", async () => {
    configure(deps(undefined));
    await publishSecretParameter(spec);
    const err = await failure(secretsForStart(recordingTransport(), spec, "ssm"));
    expect(err.message).toContain("operator secrets cannot reach hosts through SSM here");
    expect(sent).toEqual([]);
  });

  it("a writer that fails stops the run before any host is touched", async () => {
    const failing: SecretParameters = {
      nameOf: () => PARAMETER,
      put: async () => {
        throw new Error(
          "Parameter Store refused to write /labfleet/test/workshops/sec/secrets (ThrottlingException)",
        );
      },
      remove: async () => {},
    };
    configure(deps(failing));
    await expect(publishSecretParameter(spec)).rejects.toThrow("(ThrottlingException)");
    expect(sent).toEqual([]);
  });

  it("a run of several hosts writes the parameter once; each host's deploy only fetches it", async () => {
    await publishSecretParameter(spec);
    const homes = [1, 2, 3, 4].map((i) => {
      const dir = join(work, `host-${hosts}-fleet-${i}`);
      mkdirSync(dir);
      return dir;
    });
    await Promise.all(homes.map((dir) => secretsForStart(recordingTransport(dir), spec, "ssm")));
    expect(puts).toEqual([{ workshop: "sec", values: VALUES }]);
    for (const dir of homes) {
      expect(readFileSync(join(dir, ".labfleet", "sec", "secrets.env"), "utf8")).toBe(secretsFile(VALUES));
    }
    expect(sent).toHaveLength(homes.length);
    for (const s of sent) expect(s.command).toContain(`--name '${PARAMETER}'`);
    expectNoValueSent();
  });

  it("a host's fetch alone writes nothing: without the run's parameter the host's fetch fails, naming it", async () => {
    writeFileSync(storeFile, "{}");
    const err = await failure(secretsForStart(recordingTransport(), spec, "ssm"));
    expect(puts).toEqual([]);
    expect(err.message).toContain(`Parameter Store (${PARAMETER}) failed on the host (ParameterNotFound)`);
    expect(existsSync(secretsEnv())).toBe(false);
  });

  it("publishSecretParameter writes nothing for a lab without operator secrets", async () => {
    const plain = parseWorkshopYaml(`name: plain
lab:
  source: /srv/lab
  setup: bash setup.sh
provider:
  type: aws
  region: eu-west-1
  count: 1
  ttl_hours: 4
`);
    await publishSecretParameter(plain);
    expect(puts).toEqual([]);
  });

  it("hosts reached over SSH or locally still get the values over stdin, with no parameter written", async () => {
    configure(deps(writer, "ssh"));
    await publishSecretParameter(spec);
    const text = await secretsForStart(recordingTransport(), spec, "ssh");
    expect(text).toBe(secretsFile(VALUES));
    expect(sent).toEqual([]);
    // The start command writes them, from its stdin, beside the wrapper it starts.
    await startLab(recordingTransport(), spec, "student-01", "run1", { secrets: text as string });
    expect(puts).toEqual([]);
    expect(sent).toHaveLength(1);
    expect(sent[0]?.stdin).toContain(secretsFile(VALUES));
    expect(sent[0]?.command).not.toContain(VALUES.API_TOKEN);
    expect(readFileSync(secretsEnv(), "utf8")).toBe(secretsFile(VALUES));
    expect(statSync(secretsEnv()).mode & 0o777).toBe(0o600);
  });
});
