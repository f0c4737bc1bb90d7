import { spawn } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../harness/cli.ts";
import { processesUnder, removeDir, tempDir, testRuntime, waitFor } from "../harness/runtime.ts";

/** The demo lab (examples/demo/lab) as `npm start` deploys it, with its pauses cut to nothing. */
type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
const WS = "demo-web";
const HOSTS = ["student-01", "student-02", "student-03"];
const demoLab = new URL("../../examples/demo/lab", import.meta.url).pathname;
const hostDir = (id: string) => join(rt.dataDir, "hosts", WS, id);

interface Access {
  urls: { demo: string };
  credentials: { user: string; password: string };
}
const access: Record<string, Access> = {};

beforeAll(async () => {
  work = tempDir("labfleet-demo-lab-");
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  const file = join(work, "workshop.yaml");
  writeFileSync(
    file,
    `name: ${WS}
lab:
  source: ${demoLab}
  setup: DEMO_MIN_SECONDS=0 DEMO_SPREAD_SECONDS=0 bash setup.sh
  health: bash health.sh
  concurrency: 3
provider:
  type: local
  count: 3
`,
  );
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stdout + up.stderr).toBe(0);
  for (const id of HOSTS) {
    const res = await fetch(`${rt.url}/api/workshops/${WS}/hosts/${id}/access`, {
      headers: { authorization: `Bearer ${rt.token}` },
    });
    access[id] = ((await res.json()) as { access: Access }).access;
  }
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

const basic = (user: string, password: string) =>
  `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;

describe("the demo lab", () => {
  it("serves a page on its own loopback port on each host, behind the credentials on the lab page", async () => {
    const ports = new Set<string>();
    for (const id of HOSTS) {
      const a = access[id] as Access;
      const url = new URL(a.urls.demo);
      expect(url.hostname).toBe("127.0.0.1");
      ports.add(url.port);
      expect(a.credentials.user).toBe("student");
      expect(a.credentials.password).toMatch(/^[A-Za-z0-9]{12,}$/);

      const without = await fetch(url);
      expect(without.status).toBe(401);
      expect(without.headers.get("www-authenticate")).toMatch(/^Basic realm=/);
      const wrong = await fetch(url, { headers: { authorization: basic("student", "not-the-password") } });
      expect(wrong.status).toBe(401);
      const right = await fetch(url, {
        headers: { authorization: basic(a.credentials.user, a.credentials.password) },
      });
      expect(right.status).toBe(200);
      const page = await right.text();
      expect(page).toContain(`Your demo lab: ${id}`);
      expect(page).toContain(`demo service for ${id}`);
      expect(page).not.toContain(a.credentials.password);
    }
    expect(ports.size).toBe(3); // three hosts, three ports
    // Another host's password does not open this host's page.
    const one = access["student-01"] as Access;
    const two = access["student-02"] as Access;
    expect(
      (await fetch(one.urls.demo, { headers: { authorization: basic("student", two.credentials.password) } }))
        .status,
    ).toBe(401);
  });

  it("the server stops when the workshop is torn down", async () => {
    const down = await runCli(["down", WS, "--yes", "--output", "json"], { env });
    expect(down.code, down.stdout + down.stderr).toBe(0);
    // The local provider ended each host's server as it removed the host.
    const run = JSON.parse(down.stdout).run;
    for (const id of HOSTS) expect(run.hosts[id]).toMatchObject({ detail: "1 process ended" });
    for (const id of HOSTS) {
      expect(existsSync(hostDir(id))).toBe(false);
      const url = (access[id] as Access).urls.demo;
      await waitFor(`${id}'s demo server to stop`, () =>
        fetch(url).then(
          () => undefined,
          () => true,
        ),
      );
      expect(processesUnder(hostDir(id))).toEqual([]);
    }
  });

  it("the local provider ends what runs in a host's folder when it removes the host", async () => {
    const spec = { name: "ends", provider: { type: "local", count: 1 } } as never;
    const [h] = await rt.provider.provision(spec, ["student-01"]);
    const dir = (h as { address: string }).address;
    const child = spawn("setsid", ["-f", "sleep", "300"], {
      cwd: dir,
      env: { PATH: process.env.PATH, HOME: dir },
      stdio: "ignore",
    });
    await new Promise((res) => child.on("exit", res));
    const pids = await waitFor("the sleep to run", () =>
      processesUnder(dir).length ? processesUnder(dir) : undefined,
    );
    expect(await rt.provider.deprovision(spec, ["student-01"])).toEqual([
      { hostId: "student-01", result: "destroyed", detail: "1 process ended" },
    ]);
    await waitFor(
      "the sleep to end",
      () => pids.every((p) => !existsSync(`/proc/${p}`) || zombie(p)) || undefined,
    );
  });
});

function zombie(pid: number): boolean {
  try {
    return /\) Z /.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return true;
  }
}
