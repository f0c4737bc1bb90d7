import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AGENT_STDIN_MAX, AGENT_STDOUT_MAX } from "../../shared/agent/commands.ts";
import { AgentTransport } from "../../shared/transports/agent.ts";
import { enrolledFleet } from "../harness/agents.ts";
import { removeDir, testRuntime } from "../harness/runtime.ts";

/** The agent transport with real agent processes calling in to the local runtime on 127.0.0.1. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: Awaited<ReturnType<typeof enrolledFleet>>;
let t: AgentTransport;

async function rows(workshop: string, hostId: string) {
  return (await rt.store.agentCommand.query.byHost({ workshop, hostId }).go()).data;
}

const failure = async (p: Promise<unknown>) => {
  try {
    await p;
    return "ok";
  } catch (err) {
    return (err as { code?: string }).code ?? String(err);
  }
};

beforeAll(async () => {
  rt = await testRuntime();
  fleet = await enrolledFleet({ url: rt.url, workshop: "agx", names: ["pc-one"] });
  t = new AgentTransport({ workshop: "agx", hostId: "pc-one" });
});
afterAll(async () => {
  await fleet?.stop();
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
});

describe("the agent transport", () => {
  it("runs a command with bash in the agent's home, with env and stdin, and answers its exit code", async () => {
    const r = await t.exec('echo "$GREETING from $(pwd)"; cat; echo oops >&2; exit 3', {
      env: { GREETING: "it's me" },
      stdin: "from stdin\n",
      timeoutMs: 20_000,
    });
    expect(r).toEqual({
      exitCode: 3,
      stdout: `it's me from ${fleet.agents[0]?.home}\nfrom stdin\n`,
      stderr: "oops\n",
    });
    // The result was read: nothing stays queued.
    expect(await rows("agx", "pc-one")).toEqual([]);
  });

  it("never shows the command the host's secret", async () => {
    const r = await t.exec('env; echo "secret=$LABFLEET_HOST_SECRET"', { timeoutMs: 20_000 });
    expect(r.exitCode).toBe(0);
    expect(r.stdout).toContain("secret=\n");
    expect(r.stdout).not.toContain(fleet.agents[0]?.secret ?? "?");
  });

  it("ends a command at its timeout: exit 124 and timedOut", async () => {
    const started = Date.now();
    const r = await t.exec("sleep 30", { timeoutMs: 1500 });
    expect(r).toMatchObject({ exitCode: 124, timedOut: true });
    expect(Date.now() - started).toBeLessThan(15_000);
  });

  it("cuts output past its bound and says so", async () => {
    const r = await t.exec(`head -c ${AGENT_STDOUT_MAX + 5000} /dev/zero | tr '\\0' x`, {
      timeoutMs: 20_000,
    });
    expect(r.exitCode).toBe(0);
    expect(r.truncated).toBe(true);
    expect(r.stdout.length).toBe(AGENT_STDOUT_MAX);
  });

  it("refuses stdin past its bound before anything is queued", async () => {
    expect(await failure(t.exec("cat >/dev/null", { stdin: Buffer.alloc(AGENT_STDIN_MAX + 1) }))).toBe(
      "host.stdin_too_large",
    );
    expect(await rows("agx", "pc-one")).toEqual([]);
  });

  it("runs commands side by side: a long one does not hold up the next", async () => {
    const long = t.exec("sleep 12; echo long", { timeoutMs: 30_000 });
    const started = Date.now();
    const quick = await t.exec("echo quick", { timeoutMs: 20_000 });
    expect(quick.stdout).toBe("quick\n");
    expect(Date.now() - started).toBeLessThan(10_000);
    expect((await long).stdout).toBe("long\n");
  });

  it("refuses a disabled host at once, and a host that is not approved", async () => {
    await rt.store.host.patch({ workshop: "agx", hostId: "pc-one" }).set({ disabled: true }).go();
    expect(await failure(t.exec("true"))).toBe("host.disabled");
    await rt.store.host
      .patch({ workshop: "agx", hostId: "pc-one" })
      .set({ enrollment: "pending" })
      .remove(["disabled"])
      .go();
    expect(await failure(t.exec("true"))).toBe("host.pending");
    expect(await rows("agx", "pc-one")).toEqual([]);
    await rt.store.host.patch({ workshop: "agx", hostId: "pc-one" }).set({ enrollment: "approved" }).go();
    expect((await t.exec("echo back", { timeoutMs: 20_000 })).stdout).toBe("back\n");
  });
});
