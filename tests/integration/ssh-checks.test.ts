import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkMyWork, checksForLink } from "../../shared/portal/checks.ts";
import { claimLab } from "../../shared/portal/claims.ts";
import { openPortal } from "../../shared/portal/portal.ts";
import { withActor } from "../../shared/runtime/actor.ts";
import { loadSshIdentity, publicKeyLine } from "../../shared/transports/ssh-identity.ts";
import { bootstrapAuth, createApp } from "../../web/app.ts";
import { fixturesDir, movableClock, removeDir, tempDir, testRuntime } from "../harness/runtime.ts";
import { type FakeHosts, startFakeHosts } from "../harness/ssh-hosts.ts";

/** "Check my work" on a bring-your-own host over real OpenSSH: the checks run as the login user, in its home. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let fleet: FakeHosts;
const TOKEN = "ssh-checks-suite-token";
const SECRET = "byo-check-secret-31c9";
const clock = movableClock();
const app = createApp({ auth: bootstrapAuth(TOKEN) });
const auth = { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" };

beforeAll(async () => {
  const data = tempDir();
  const home = join(data, "operator-home");
  mkdirSync(home, { recursive: true });
  writeFileSync(join(home, "secrets.yaml"), `API_TOKEN: "${SECRET}"\n`);
  chmodSync(join(home, "secrets.yaml"), 0o600);
  const identity = await loadSshIdentity({ labfleetHome: home });
  fleet = await startFakeHosts(1, { authorizedKeys: `${publicKeyLine(identity)}\n`, firstIndex: 31 });
  rt = await testRuntime({ dataDir: data, token: TOKEN, labfleetHome: home, clock });
}, 120_000);

afterAll(async () => {
  await rt?.close();
  await fleet?.stop();
  if (rt) removeDir(rt.dataDir);
});

describe("check my work over SSH", () => {
  it("runs the checks on the student's SSH host as the login user, bounded, and passes once the work is done", async () => {
    const host = fleet.hosts[0];
    if (!host) throw new Error("no host");
    const yaml = `name: byo-checks
lab:
  source: ${join(fixturesDir, "labs", "checked")}
  setup: bash setup.sh
  health: test -f built
  timeout_minutes: 2
  operator_secrets: [API_TOKEN]
  checks:
    - name: answer
      run: bash check-answer.sh
      hint: Write 42 into ~/answer.txt
    - name: who runs checks
      run: id -un; echo "$API_TOKEN" > /dev/null
    - name: hangs
      run: sleep 300
      timeout_seconds: 1
provider:
  type: static
hosts:
  - id: ${host.id}
    ssh: ${host.address}
portal:
  enabled: true
`;
    const created = await app.request("/api/workshops", {
      method: "POST",
      headers: auth,
      body: JSON.stringify({ yaml }),
    });
    expect(created.status, await created.clone().text()).toBe(201);
    const up = await app.request("/api/workshops/byo-checks/up", {
      method: "POST",
      headers: auth,
      body: "{}",
    });
    expect(up.status).toBe(202);
    await rt.executor.idle();
    await withActor({ type: "instructor", id: "test" }, () => openPortal("byo-checks"));
    const { token } = await claimLab(
      "byo-checks",
      { name: "Linus Remote", email: "linus@example.test", pin: "314159" },
      "192.0.2.31",
    );

    const first = await checkMyWork(token);
    expect(first.checks.map((c) => [c.name, c.passed, c.timedOut])).toEqual([
      ["answer", false, false],
      ["who runs checks", true, false],
      ["hangs", false, true],
    ]);
    expect(first.checks[0]?.output).toBe("no answer in /home/lab/answer.txt yet");
    expect(first.checks[1]?.output).toBe("lab");
    // Nothing of the hanging check is left on the host.
    const sleeping = host.processes().filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("sleep\u0000300");
      } catch {
        return false;
      }
    });
    expect(sleeping).toEqual([]);

    writeFileSync(join(host.root, "home", "answer.txt"), "42\n");
    clock.advance(31_000);
    const second = await checkMyWork(token);
    expect(second.checks.map((c) => c.passed)).toEqual([true, true, false]);
    expect((await checksForLink(token))?.checks[0]).toMatchObject({ passed: true, attempts: 2 });
  });
});
