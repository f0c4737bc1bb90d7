import { execFileSync } from "node:child_process";
import { chmodSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signedHeaders } from "../../shared/agent/signing.ts";
import { runCli } from "../harness/cli.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

/**
 * `labfleet hosts join-token|join-tokens|revoke-token|pending|approve|reject` as a user runs them (the CLI as its
 * own process, against the local runtime over HTTP), with machines played by fetch; and the one printed line run
 * by bash with a stand-in curl, to check what reaches which process.
 */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let env: Record<string, string>;
const WS = "enr";
const cli = (...args: string[]) => runCli(args, { env });
/** The signing secret the machine "Visitor" got at its join (it is rejected below). */
let visitorSecret = "";
let nonces = 0;

/** A poll signed as the host, as its agent makes it. */
async function agentPolls(hostId: string, secret: string) {
  const body = JSON.stringify({ wait: 0 });
  const parts = {
    method: "POST",
    path: "/agent/v1/poll",
    body,
    timestamp: Math.floor(Date.now() / 1000),
    nonce: `nonce-${process.pid}-${nonces++}-enrollcli`,
  };
  const res = await fetch(`${rt.url}${parts.path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...signedHeaders(WS, hostId, secret, parts) },
    body,
  });
  return { status: res.status, body: (await res.json()) as { error?: { code: string; message: string } } };
}

async function machineJoins(token: string, name: string) {
  const res = await fetch(`${rt.url}/agent/v1/enroll`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      token,
      name,
      facts: { cpus: 2, memoryMb: 4096, os: "Debian 12", hostname: name },
    }),
  });
  // biome-ignore lint/suspicious/noExplicitAny: checked field by field
  return { status: res.status, body: (await res.json()) as any };
}

beforeAll(async () => {
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  const res = await fetch(`${rt.url}/api/workshops`, {
    method: "POST",
    headers: { authorization: `Bearer ${rt.token}`, "content-type": "application/json" },
    body: JSON.stringify({ yaml: workshopYaml({ name: WS, count: 1 }) }),
  });
  expect(res.status).toBe(201);
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("labfleet hosts join-token", () => {
  it("prints the token once and the one line to run, which keeps the token out of every command line", async () => {
    const r = await cli("hosts", "join-token", WS, "--uses", "2", "--expires", "2h", "--approve", "manual");
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    const token = /^ {2}(lfj_enr_[A-Za-z0-9_-]{43})$/m.exec(r.stdout)?.[1] as string;
    expect(token).toBeDefined();
    expect(r.stdout).toMatch(
      /^join token jtk_[0-9A-Z]{26} for enr: 2 uses, expires .+, hosts wait for approval/m,
    );
    const line = /^ {2}(curl .*)$/m.exec(r.stdout)?.[1] as string;
    expect(line).toBe(
      `curl -fsSL ${rt.url}/agent/v1/agent.sh | LABFLEET_JOIN_TOKEN=${token} bash -s -- join ${rt.url}`,
    );
    // Run the line with a curl that records its arguments and serves a script recording what the agent gets.
    const dir = tempDir("labfleet-join-line-");
    try {
      writeFileSync(
        join(dir, "curl"),
        `#!/bin/bash\nprintf '%s\\n' "$@" > ${dir}/curl.args\nprintf '%s\\n' 'printf "%s" "$LABFLEET_JOIN_TOKEN" > ${dir}/agent.token; printf "%s\\n" "$@" > ${dir}/agent.args'\n`,
      );
      chmodSync(join(dir, "curl"), 0o755);
      execFileSync("bash", ["-c", line], { env: { PATH: `${dir}:${process.env.PATH}` } });
      expect(readFileSync(join(dir, "curl.args"), "utf8")).toBe(`-fsSL\n${rt.url}/agent/v1/agent.sh\n`);
      expect(readFileSync(join(dir, "agent.token"), "utf8")).toBe(token);
      expect(readFileSync(join(dir, "agent.args"), "utf8")).toBe(`join\n${rt.url}\n`);
    } finally {
      removeDir(dir);
    }
    // The token works once per use, and the machines wait.
    expect((await machineJoins(token, "Room PC")).body.enrollment).toBe("pending");
    const visitor = await machineJoins(token, "Visitor");
    expect(visitor.status).toBe(201);
    visitorSecret = visitor.body.secret;
    expect((await machineJoins(token, "Third")).body.error.code).toBe("join.used_up");
  });

  it("lists the pending hosts with what they reported", async () => {
    const pending = await cli("hosts", "pending", WS);
    expect(pending.code).toBe(0);
    const rows = pending.stdout.split("\n");
    expect(rows[0]).toMatch(/^HOST\s+JOINED\s+HOSTNAME\s+OS\s+CPUS\s+MEMORY\s+DISK$/);
    expect(rows[1]).toMatch(/^room-pc\s+.+\s+Room PC\s+Debian 12\s+2\s+4\.0 GiB\s+-$/);
    expect(rows[2]).toMatch(/^visitor\s/);
  });

  it("approves one pending host and rejects the other", async () => {
    const [approved, rejected] = await Promise.all([
      cli("hosts", "approve", WS, "room-pc"),
      cli("hosts", "reject", WS, "visitor"),
    ]);
    expect(approved.stdout).toBe("approved room-pc: it may now be given work\n");
    expect(approved.code).toBe(0);
    expect(rejected.stdout).toBe("rejected visitor: removed, and its signing secret dropped\n");
    expect(rejected.code).toBe(0);
    const [again, none] = await Promise.all([
      cli("hosts", "approve", WS, "room-pc", "--output", "json"),
      cli("hosts", "pending", WS),
    ]);
    expect(JSON.parse(again.stdout)).toEqual({ results: [{ hostId: "room-pc", result: "unchanged" }] });
    expect(none.stdout).toBe("no host of enr waits for approval\n");
    const status = await fetch(`${rt.url}/api/workshops/${WS}`, {
      headers: { authorization: `Bearer ${rt.token}` },
    });
    const ids = ((await status.json()) as { hostList: { id: string }[] }).hostList.map((h) => h.id);
    expect(ids).toContain("room-pc");
    expect(ids).not.toContain("visitor");
    // The rejected machine's agent, polling with the secret it got, is told to forget the workshop (and so
    // stops), not merely refused as a bad signature, which it would retry.
    expect(visitorSecret).not.toBe("");
    const refused = await agentPolls("visitor", visitorSecret);
    expect(refused.status).toBe(401);
    expect(refused.body.error?.code).toBe("agent.forgotten");
    expect(refused.body.error?.message).toContain("it was rejected");
  });

  it("lists and revokes tokens; a revoked token is refused", async () => {
    const made = JSON.parse((await cli("hosts", "join-token", WS, "--output", "json")).stdout);
    expect(made.joinToken).toMatchObject({ uses: 1, used: 0, approve: "auto", state: "active" });
    expect(Date.parse(made.joinToken.expiry) - Date.parse(made.joinToken.createdAt)).toBe(24 * 3600 * 1000);
    expect(made.command).toContain(`LABFLEET_JOIN_TOKEN=${made.token} bash`);
    const list = await cli("hosts", "join-tokens", WS);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(new RegExp(`^${made.joinToken.id}\\s+active\\s+0/1\\s+auto\\s`, "m"));
    expect(list.stdout).toMatch(/\sused up\s+2\/2\s+manual\s.+\sroom-pc, visitor$/m);
    expect(list.stdout).not.toContain("lfj_");
    const revoked = await cli("hosts", "revoke-token", WS, made.joinToken.id);
    expect(revoked.code).toBe(0);
    expect(revoked.stdout).toBe(
      `revoked ${made.joinToken.id}: machines can no longer join with it (0 hosts joined with it stay)\n`,
    );
    expect((await machineJoins(made.token, "late")).body.error.code).toBe("join.revoked");
  });

  const refuses = async (cases: [string[], number, string][]) => {
    const answers = await Promise.all(cases.map(([args]) => cli(...args)));
    cases.forEach(([args, code, message], i) => {
      const r = answers[i];
      expect(r?.stderr, args.join(" ")).toContain(message);
      expect(r?.code, args.join(" ")).toBe(code);
      expect(r?.stdout).toBe("");
    });
  };

  it("refuses options and arguments that are not right (exit 2), saying what was expected", async () => {
    await refuses([
      [
        ["hosts", "join-token", WS, "--uses", "0"],
        2,
        "--uses takes a whole number of machines from 1 to 1000, got 0",
      ],
      [["hosts", "join-token", WS, "--expires", "5x"], 2, "--expires takes a time from 1m to 30d"],
      [["hosts", "join-token", WS, "--expires", "31d"], 2, "--expires takes a time from 1m to 30d"],
      [["hosts", "join-token", WS, "--approve", "maybe"], 2, "--approve takes auto or manual, got maybe"],
      [["hosts", "approve", WS], 2, "name the hosts: labfleet hosts approve enr HOST..."],
      [["hosts", "pending"], 2, "name the workshop: labfleet hosts pending NAME"],
      [
        ["hosts", "pending", WS, "--uses", "3"],
        2,
        "--uses, --expires and --approve go with hosts join-token",
      ],
    ]);
  });

  it("reports what the API refused (exit 1)", async () => {
    await refuses([
      [["hosts", "approve", WS, "nobody"], 1, "enr has no host nobody"],
      [["hosts", "reject", WS, "room-pc"], 1, "room-pc is approved already"],
      [["hosts", "join-token", "no-such"], 1, "no workshop named no-such"],
      [["hosts", "revoke-token", WS, "tok"], 1, "expected a join token id"],
    ]);
  });
});
