import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import {
  CancelCommandCommand,
  GetCommandInvocationCommand,
  type GetCommandInvocationCommandOutput,
  InvalidInstanceId,
  InvocationDoesNotExist,
  SendCommandCommand,
  type SendCommandCommandInput,
  SSMClient,
} from "@aws-sdk/client-ssm";
import { mockClient } from "aws-sdk-client-mock";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { VisibleError } from "../../shared/runtime/errors.ts";
import {
  SSM_MAX_STDIN_BASE64,
  SSM_STDERR_TAIL,
  SSM_STDOUT_TAIL,
  SsmTransport,
  type SsmTransportOptions,
} from "../../shared/transports/ssm.ts";

const ssm = mockClient(SSMClient);
const client = new SSMClient({
  region: "eu-west-1",
  credentials: { accessKeyId: "x", secretAccessKey: "y" },
});

let home: string;
let sleeps: number[];
let clock: number;

beforeEach(() => {
  ssm.reset();
  home = mkdtempSync(join(tmpdir(), "labfleet-ssm-"));
  sleeps = [];
  clock = 0;
});

afterEach(() => {
  rmSync(home, { recursive: true, force: true });
});

function transport(extra: Partial<SsmTransportOptions> = {}): SsmTransport {
  return new SsmTransport({
    workshop: "k8s-101",
    hostId: "lab-01",
    instanceId: "i-0123456789abcdef0",
    client,
    home,
    // a fake clock that only the injected sleep moves: no real waiting
    now: () => clock,
    sleep: async (ms) => {
      sleeps.push(ms);
      clock += ms;
    },
    ...extra,
  });
}

function sent(): SendCommandCommandInput {
  const calls = ssm.commandCalls(SendCommandCommand);
  expect(calls).toHaveLength(1);
  const input = calls[0]?.args[0].input;
  if (!input) throw new Error("no SendCommand");
  return input;
}

function scriptOf(input: SendCommandCommandInput): string {
  const script = input.Parameters?.commands?.[0];
  expect(input.Parameters?.commands).toHaveLength(1);
  if (script === undefined) throw new Error("no script");
  return script;
}

/**
 * A host behind a fake SSM: SendCommand runs the script for real with `sh` (as the agent does), and
 * GetCommandInvocation reports it the way SSM does: the first 24,000 / 8,000 characters, and the agent's
 * own line after stderr on a non-zero exit.
 */
function fakeHost() {
  let run: { stdout: string; stderr: string; status: number } | undefined;
  ssm.on(SendCommandCommand).callsFake((input: SendCommandCommandInput) => {
    const r = spawnSync("sh", ["-c", scriptOf(input)], {
      encoding: "utf8",
      env: { PATH: process.env.PATH ?? "/usr/bin:/bin" },
      maxBuffer: 16 * 1024 * 1024,
    });
    run = { stdout: r.stdout, stderr: r.stderr, status: r.status ?? -1 };
    return { Command: { CommandId: "cmd-1" } };
  });
  ssm.on(GetCommandInvocationCommand).callsFake((): GetCommandInvocationCommandOutput => {
    if (!run) throw new Error("nothing ran");
    const ok = run.status === 0;
    const stderr = ok ? run.stderr : `${run.stderr}failed to run commands: exit status ${run.status}`;
    return {
      $metadata: {},
      CommandId: "cmd-1",
      Status: ok ? "Success" : "Failed",
      StatusDetails: ok ? "Success" : "Failed",
      ResponseCode: run.status,
      StandardOutputContent: run.stdout.slice(0, 24_000),
      StandardErrorContent: stderr.slice(0, 8_000),
    };
  });
}

function kept(): string[] {
  try {
    return readdirSync(join(home, ".labfleet", "ssm"));
  } catch {
    return [];
  }
}

function invocation(over: Partial<GetCommandInvocationCommandOutput>): GetCommandInvocationCommandOutput {
  return { $metadata: {}, CommandId: "cmd-1", ...over };
}

function doesNotExist() {
  return new InvocationDoesNotExist({ $metadata: {}, message: "" });
}

async function rejection(p: Promise<unknown>): Promise<VisibleError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(VisibleError);
  return err as VisibleError;
}

describe("SsmTransport: the SSM calls", () => {
  it("runs the command through AWS-RunShellScript and returns stdout, stderr and the exit code", async () => {
    fakeHost();
    const result = await transport().exec('echo hello; echo oops >&2; pwd; echo "$HOME"', {
      timeoutMs: 10_000,
      step: "doctor",
    });
    expect(result).toEqual({ exitCode: 0, stdout: `hello\n${home}\n${home}\n`, stderr: "oops\n" });

    const input = sent();
    expect(input.DocumentName).toBe("AWS-RunShellScript");
    expect(input.InstanceIds).toEqual(["i-0123456789abcdef0"]);
    expect(Object.keys(input.Parameters ?? {}).sort()).toEqual(["commands", "executionTimeout"]);
    // 10 s for the command, then 30 s for SSM's backstop
    expect(input.Parameters?.executionTimeout).toEqual(["40"]);
    expect(input.Comment).toBe("labfleet k8s-101 lab-01: doctor");
    expect(input.TimeoutSeconds).toBe(120);
    expect(scriptOf(input)).toContain("timeout -k 5 10.000 bash --noprofile --norc -c");

    const polls = ssm.commandCalls(GetCommandInvocationCommand);
    expect(polls).toHaveLength(1);
    expect(polls[0]?.args[0].input).toEqual({ CommandId: "cmd-1", InstanceId: "i-0123456789abcdef0" });
    expect(sleeps).toEqual([500]);
    // output that fit is not kept on the host
    expect(kept()).toEqual([]);
  });

  it("returns a non-zero exit code with the command's own stderr (the agent's line stripped)", async () => {
    fakeHost();
    const result = await transport().exec("echo partial; echo broken >&2; exit 3", { step: "health" });
    expect(result).toEqual({ exitCode: 3, stdout: "partial\n", stderr: "broken\n" });
    // no timeoutMs: the default hour, plus SSM's backstop
    expect(sent().Parameters?.executionTimeout).toEqual(["3630"]);
  });

  it("keeps polling through InvocationDoesNotExist and InProgress, backing off up to the cap", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-42" } });
    ssm
      .on(GetCommandInvocationCommand)
      .rejectsOnce(doesNotExist())
      .rejectsOnce(doesNotExist())
      .resolvesOnce(invocation({ Status: "Pending", StatusDetails: "Pending" }))
      .resolvesOnce(invocation({ Status: "InProgress", StatusDetails: "InProgress" }))
      .resolvesOnce(invocation({ Status: "InProgress", StatusDetails: "InProgress" }))
      .resolves(
        invocation({
          Status: "Success",
          StatusDetails: "Success",
          ResponseCode: 0,
          StandardOutputContent: "done\n",
          StandardErrorContent: "",
        }),
      );
    const result = await transport().exec("true", {
      timeoutMs: 600_000,
    });
    expect(result).toEqual({ exitCode: 0, stdout: "done\n", stderr: "" });
    expect(sleeps).toEqual([500, 1000, 2000, 4000, 5000, 5000]);
    const polls = ssm.commandCalls(GetCommandInvocationCommand);
    expect(polls).toHaveLength(6);
    for (const p of polls) expect(p.args[0].input.CommandId).toBe("cmd-42");
  });

  it("honours custom poll intervals", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-1" } });
    ssm
      .on(GetCommandInvocationCommand)
      .resolvesOnce(invocation({ Status: "InProgress" }))
      .resolvesOnce(invocation({ Status: "InProgress" }))
      .resolvesOnce(invocation({ Status: "Cancelling" }))
      .resolves(invocation({ Status: "Failed", StatusDetails: "Failed", ResponseCode: 2 }));
    const result = await transport({ pollIntervalMs: 100, maxPollIntervalMs: 300 }).exec("false");
    expect(result.exitCode).toBe(2);
    expect(sleeps).toEqual([100, 200, 300, 300]);
  });

  it("maps SSM's TimedOut (execution timeout) to exit code 124 and timedOut", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-1" } });
    ssm.on(GetCommandInvocationCommand).resolves(
      invocation({
        Status: "TimedOut",
        StatusDetails: "ExecutionTimedOut",
        ResponseCode: -1,
        StandardOutputContent: "",
        StandardErrorContent: "",
      }),
    );
    const result = await transport().exec("sleep 999", { timeoutMs: 5000 });
    expect(result).toEqual({ exitCode: 124, stdout: "", stderr: "", timedOut: true });
    expect(sent().Parameters?.executionTimeout).toEqual(["35"]);
  });

  it("gives up at the local deadline: cancels the command and returns 124", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-7" } });
    ssm.on(GetCommandInvocationCommand).resolves(invocation({ Status: "InProgress" }));
    ssm.on(CancelCommandCommand).resolves({});
    const result = await transport({ pollIntervalMs: 1000, maxPollIntervalMs: 8000 }).exec("sleep 999", {
      timeoutMs: 2000,
    });
    expect(result).toEqual({ exitCode: 124, stdout: "", stderr: "", timedOut: true });
    const cancels = ssm.commandCalls(CancelCommandCommand);
    expect(cancels).toHaveLength(1);
    expect(cancels[0]?.args[0].input).toEqual({ CommandId: "cmd-7", InstanceIds: ["i-0123456789abcdef0"] });
    // the timeout plus its grace for delivery and polling (as long as the timeout, 15 s to 60 s), never overslept
    expect(sleeps.reduce((a, b) => a + b, 0)).toBe(17_000);
    expect(Math.max(...sleeps)).toBe(8000);
  });

  it("never waits past the caller's deadline, whatever the command's timeout", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-8" } });
    ssm.on(GetCommandInvocationCommand).resolves(invocation({ Status: "InProgress" }));
    ssm.on(CancelCommandCommand).resolves({});
    let now = 1_000_000;
    const t = transport({
      pollIntervalMs: 1000,
      maxPollIntervalMs: 8000,
      now: () => now,
      sleep: async (ms) => {
        sleeps.push(ms);
        now += ms;
      },
    });
    const result = await t.exec("sleep 999", { timeoutMs: 600_000, deadline: now + 20_000 });
    expect(result.timedOut).toBe(true);
    expect(sleeps.reduce((a, b) => a + b, 0)).toBe(20_000);
    expect(ssm.commandCalls(CancelCommandCommand)).toHaveLength(1);
  });

  it("keeps polling a command whose GetCommandInvocation is throttled, and returns its result", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-9" } });
    const throttled = Object.assign(new Error("Rate exceeded"), { name: "ThrottlingException" });
    ssm
      .on(GetCommandInvocationCommand)
      .rejectsOnce(throttled)
      .rejectsOnce(throttled)
      .resolves(invocation({ Status: "Success", ResponseCode: 0, StandardOutputContent: "done\n" }));
    const result = await transport().exec("echo done");
    expect(result).toMatchObject({ exitCode: 0, stdout: "done\n" });
    expect(ssm.commandCalls(GetCommandInvocationCommand)).toHaveLength(3);
  });

  it("reports a command never delivered by the local deadline as unreachable (and cancels it)", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-8" } });
    ssm.on(GetCommandInvocationCommand).resolves(invocation({ Status: "Delayed", StatusDetails: "Delayed" }));
    ssm.on(CancelCommandCommand).resolves({});
    const err = await rejection(transport().exec("true", { timeoutMs: 1000, step: "sync lab source" }));
    expect(err.kind).toBe("host");
    expect(err.code).toBe("host.unreachable");
    expect(err.message).toMatch(
      /^lab-01 \(i-0123456789abcdef0\): unreachable through SSM during sync lab source: .*Delayed/,
    );
    expect(ssm.commandCalls(CancelCommandCommand)[0]?.args[0].input.CommandId).toBe("cmd-8");
  });

  it.each([
    ["Failed", "Undeliverable"],
    ["Failed", "Terminated"],
    ["TimedOut", "Delivery Timed Out"],
  ] as const)(
    "maps %s / %s to host.unreachable naming the host and the step",
    async (Status, StatusDetails) => {
      ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-1" } });
      ssm.on(GetCommandInvocationCommand).resolves(invocation({ Status, StatusDetails, ResponseCode: -1 }));
      const err = await rejection(transport().exec("true", { step: "doctor" }));
      expect(err.kind).toBe("host");
      expect(err.code).toBe("host.unreachable");
      expect(err.message).toBe(
        `lab-01 (i-0123456789abcdef0): unreachable through SSM during doctor: SSM could not deliver the command (${StatusDetails})`,
      );
    },
  );

  it("maps InvalidInstanceId from SendCommand to host.unreachable, without polling", async () => {
    ssm.on(SendCommandCommand).rejects(
      new InvalidInstanceId({
        $metadata: {},
        message: "Instances [[i-0123456789abcdef0]] not in a valid state",
      }),
    );
    const err = await rejection(transport().exec("true", { step: "health check" }));
    expect(err.kind).toBe("host");
    expect(err.code).toBe("host.unreachable");
    expect(err.message).toMatch(
      /^lab-01 \(i-0123456789abcdef0\): unreachable through SSM during health check: the instance is not a managed node online/,
    );
    expect(err.message).toContain("InvalidInstanceId");
    expect(ssm.commandCalls(GetCommandInvocationCommand)).toHaveLength(0);
  });

  it("reports a Failed invocation without an exit code, and a cancelled one, as host.ssm_failed", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-1" } });
    ssm
      .on(GetCommandInvocationCommand)
      .resolvesOnce(invocation({ Status: "Failed", StatusDetails: "Failed", ResponseCode: -1 }))
      .resolves(invocation({ Status: "Cancelled", StatusDetails: "Cancelled" }));
    const failed = await rejection(transport().exec("true", { step: "doctor" }));
    expect(failed.code).toBe("host.ssm_failed");
    expect(failed.message).toMatch(/^lab-01 \(i-0123456789abcdef0\): SSM reports doctor as Failed/);
    const cancelled = await rejection(transport().exec("true", { step: "doctor" }));
    expect(cancelled.code).toBe("host.ssm_failed");
    expect(cancelled.message).toContain("doctor was cancelled");
  });

  it("has nothing to close", async () => {
    await expect(transport().close()).resolves.toBeUndefined();
    expect(ssm.calls()).toHaveLength(0);
  });
});

describe("SsmTransport: the host-side wrapper", () => {
  it("carries stdin as base64 lines in the script, decoded into a private file that is gone before the command runs", async () => {
    fakeHost();
    const input = Buffer.concat([Buffer.from("line one\nline 'two' $HOME `x`\n"), Buffer.alloc(3000, 0xa7)]);
    const result = await transport().exec(
      [
        "umask",
        'readlink /proc/self/fd/0 | sed "s|^$HOME/||"',
        "stat -L -c %a /proc/self/fd/0",
        "sha256sum | cut -d' ' -f1",
      ].join("; "),
      { stdin: input, step: "copy file" },
    );

    // the script's base64 block decodes to the input, in lines of at most 76 characters
    const script = scriptOf(sent());
    const block = /<<'LABFLEET_STDIN'[^\n]*\n([\s\S]*?)\nLABFLEET_STDIN\n/.exec(script)?.[1];
    expect(block).toBeDefined();
    const lines = block?.split("\n") ?? [];
    expect(lines.length).toBeGreaterThan(1);
    for (const l of lines) expect(l.length).toBeLessThanOrEqual(76);
    expect(Buffer.from(lines.join(""), "base64").equals(input)).toBe(true);
    expect(script.indexOf("umask 077")).toBeLessThan(script.indexOf("base64 -d"));

    // on the host: umask 077, a mode-600 file under $HOME, unlinked, and the content intact
    const [umask, path, mode, sum] = result.stdout.trim().split("\n");
    expect(umask).toBe("0077");
    expect(path).toMatch(/^\.labfleet\/ssm\/run\.[A-Za-z0-9]+\/in \(deleted\)$/);
    expect(mode).toBe("600");
    expect(sum).toBe((await import("node:crypto")).createHash("sha256").update(input).digest("hex"));
    expect(result.exitCode).toBe(0);
    expect(kept()).toEqual([]);
  });

  it("reads a stream stdin fully first", async () => {
    fakeHost();
    const result = await transport().exec("cat", {
      stdin: Readable.from(["chunk-1 ", Buffer.from("chunk-2")]),
    });
    expect(result.stdout).toBe("chunk-1 chunk-2");
  });

  it("gives the command an empty stdin when there is none", async () => {
    fakeHost();
    const result = await transport().exec("cat; echo end");
    expect(result).toEqual({ exitCode: 0, stdout: "end\n", stderr: "" });
    expect(scriptOf(sent())).not.toContain("base64");
  });

  it("refuses stdin too large for SendCommand before sending anything", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-1" } });
    const big = Buffer.alloc((SSM_MAX_STDIN_BASE64 / 4) * 3 + 1, 1);
    const err = await rejection(transport().exec("cat", { stdin: big, step: "copy file" }));
    expect(err.kind).toBe("input");
    expect(err.code).toBe("host.stdin_too_large");
    expect(err.message).toMatch(/^lab-01 \(i-0123456789abcdef0\): the input of copy file is larger than SSM/);
    const streamed = await rejection(
      transport().exec("cat", { stdin: Readable.from([big.subarray(0, 20_000), big.subarray(20_000)]) }),
    );
    expect(streamed.code).toBe("host.stdin_too_large");
    expect(ssm.commandCalls(SendCommandCommand)).toHaveLength(0);
    // exactly the limit still goes
    fakeHost();
    const fits = await transport().exec("wc -c", { stdin: big.subarray(1) });
    expect(fits.stdout.trim()).toBe(String(big.length - 1));
  });

  it("exports env quoted for the shell, and refuses a bad variable name", async () => {
    fakeHost();
    const result = await transport().exec('printf "%s|%s" "$GREETING" "$EMPTY"', {
      env: { GREETING: `it's "quoted" $HOME; rm -rf /`, EMPTY: "" },
    });
    expect(result.stdout).toBe(`it's "quoted" $HOME; rm -rf /|`);
    const err = await rejection(transport().exec("true", { env: { "BAD-NAME": "x" } }));
    expect(err.code).toBe("host.bad_env");
  });

  it("treats sudo as a no-op: Run Command already runs as root", async () => {
    fakeHost();
    await transport().exec("id -u", { sudo: true, timeoutMs: 1000 });
    const withSudo = scriptOf(sent());
    ssm.reset();
    fakeHost();
    await transport().exec("id -u", { timeoutMs: 1000 });
    expect(scriptOf(sent())).toBe(withSudo);
    expect(withSudo).not.toMatch(/\bsudo\b/);
  });

  it("returns the tail of a long output, marks it truncated and keeps the full output on the host", async () => {
    fakeHost();
    const result = await transport().exec(
      "head -c 100000 /dev/zero | tr '\\0' a; echo; echo END; seq 1 5000 >&2; echo last-err >&2",
    );
    expect(result.exitCode).toBe(0);
    expect(result.truncated).toBe(true);
    expect(result.stdout).toHaveLength(SSM_STDOUT_TAIL);
    expect(result.stdout.endsWith("aaaa\nEND\n")).toBe(true);
    const [note, ...rest] = result.stderr.split("\n");
    expect(note).toMatch(
      /^\[labfleet: the output was cut to its end \(100005 bytes of stdout, \d+ of stderr\)/,
    );
    expect(rest.join("\n")).toHaveLength(SSM_STDERR_TAIL);
    expect(result.stderr.endsWith("4999\n5000\nlast-err\n")).toBe(true);
    expect(result.stderr).not.toContain("__LABFLEET_SSM__");

    const dirs = kept();
    expect(dirs).toHaveLength(1);
    const dir = join(home, ".labfleet", "ssm", dirs[0] ?? "missing");
    expect(readFileSync(join(dir, "out"), "utf8")).toHaveLength(100_005);
    expect(note).toContain(dir);
  });

  it("is not truncated when the output fits exactly", async () => {
    fakeHost();
    const result = await transport().exec(`head -c ${SSM_STDOUT_TAIL} /dev/zero | tr '\\0' b`);
    expect(result.stdout).toHaveLength(SSM_STDOUT_TAIL);
    expect(result.truncated).toBeUndefined();
    expect(kept()).toEqual([]);
  });

  it("marks truncated when the marker counts more than came back", async () => {
    ssm.on(SendCommandCommand).resolves({ Command: { CommandId: "cmd-1" } });
    ssm.on(GetCommandInvocationCommand).resolves(
      invocation({
        Status: "Success",
        ResponseCode: 0,
        StandardOutputContent: "tail of it\n",
        StandardErrorContent:
          "warn\n\n__LABFLEET_SSM__ rc=0 out=123456 err=6 timedout=0 dir=/root/.labfleet/ssm/run.abc\n",
      }),
    );
    const result = await transport().exec("big");
    expect(result).toMatchObject({ exitCode: 0, stdout: "tail of it\n", truncated: true });
    expect(result.stderr).toMatch(/\/root\/\.labfleet\/ssm\/run\.abc\/out.*\nwarn\n$/);
  });

  it("times the command out on the host: exit 124 and timedOut, with the output so far", async () => {
    fakeHost();
    const result = await transport().exec("echo started; sleep 10", { timeoutMs: 300 });
    expect(result).toEqual({ exitCode: 124, stdout: "started\n", stderr: "", timedOut: true });
  });

  it("does not take a command's own exit code 124 for a timeout", async () => {
    fakeHost();
    const result = await transport().exec("exit 124", { timeoutMs: 10_000 });
    expect(result).toEqual({ exitCode: 124, stdout: "", stderr: "" });
  });

  it("never puts a secret from stdin or env in the Comment, which stays within 100 characters", async () => {
    fakeHost();
    const secret = "s3cr3t-Passw0rd";
    await transport().exec("cat >/dev/null", {
      stdin: `password=${secret}\n`,
      env: { DB_PASSWORD: secret },
      step: `deploy access ${"x".repeat(200)}`,
    });
    const input = sent();
    expect(input.Comment).not.toContain(secret);
    expect(input.Comment?.startsWith("labfleet k8s-101 lab-01: deploy access")).toBe(true);
    expect(input.Comment?.length).toBeLessThanOrEqual(100);
  });
});
