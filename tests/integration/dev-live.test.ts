import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, inject, it } from "vitest";
import { liveText } from "../../cli/live-line.ts";
import { runCli, startCli } from "../harness/cli.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";
import { removeDir, tempDir, waitFor, workshopYaml } from "../harness/runtime.ts";

/** `labfleet dev -f` (what `npm start` runs) after its labs are ready: the live line, off a terminal. */
const work = tempDir("labfleet-devlive-");
let dev: ReturnType<typeof startCli> | undefined;

afterAll(async () => {
  if (dev?.child.pid && dev.child.exitCode === null) {
    dev.child.kill("SIGTERM");
    await dev.exited;
  }
  removeDir(work);
});

function runtimeInfo(dataDir: string): { url: string; token: string } | undefined {
  const f = join(dataDir, "runtime.json");
  try {
    return existsSync(f) ? JSON.parse(readFileSync(f, "utf8")) : undefined;
  } catch {
    return undefined; // being written
  }
}

/** A student in a plain HTTP client: front page, the workshop code, the board, a claim. */
async function claim(url: string, code: string, who: { name: string; email: string; pin: string }) {
  const jar = new Map<string, string>();
  let csrf = "";
  const take = async (res: Response) => {
    storeCookies(jar, res);
    const text = await res.text();
    csrf = /name="_csrf" value="([^"]+)"/.exec(text)?.[1] ?? csrf;
    return res;
  };
  const post = async (path: string, fields: Record<string, string>) =>
    take(
      await fetch(`${url}${path}`, {
        method: "POST",
        redirect: "manual",
        headers: { ...cookieHeader(jar), "content-type": "application/x-www-form-urlencoded", origin: url },
        body: new URLSearchParams({ _csrf: csrf, ...fields }),
      }),
    );
  await take(await fetch(`${url}/`, { headers: cookieHeader(jar) }));
  expect((await post("/code", { code })).status).toBe(303);
  await take(await fetch(`${url}/board`, { headers: cookieHeader(jar) }));
  const r = await post("/claim", who);
  expect(r.status).toBe(303);
}

const lines = () => (dev?.out.stdout ?? "").split("\n").filter((l) => l.startsWith("live · "));

describe("npm start after ready", () => {
  it("prints a live line with claims, free labs, time left and the code, again whenever they change", async () => {
    const dataDir = join(work, ".labfleet");
    const file = join(work, "workshop.yaml");
    writeFileSync(file, `${workshopYaml({ name: "devlive", count: 2 })}portal:\n  enabled: true\n`);
    dev = startCli(["dev", "-f", file, "--data-dir", dataDir, "--port", "0"], {
      cwd: work,
      env: {
        LABFLEET_DYNAMODB_ENDPOINT: inject("dynamoEndpoint"),
        LABFLEET_TABLE: "dev_live_test",
        LABFLEET_WAIT_MS: "200",
        LABFLEET_LIVE_MS: "200",
        TZ: "UTC",
      },
    });
    const first = await waitFor("the first live line", () => lines()[0], 45_000);
    const code = /code (LAB-[A-Z]+-\d+)$/.exec(first)?.[1] ?? "";
    expect(first, dev.out.stdout).toMatch(
      new RegExp(
        `^live · 2/2 ready · 0 claimed · 2 free · 5 h [0-5]\\d min left, torn down at (\\d{4}-\\d\\d-\\d\\d )?\\d\\d:\\d\\d · code ${code}$`,
      ),
    );
    expect(dev.out.stdout).toContain(`Student portal: ${runtimeInfo(dataDir)?.url}/  code ${code}`);
    expect(lines(), dev.out.stdout).toHaveLength(1); // nothing changed: off a terminal, no new line

    const env = { LABFLEET_DATA_DIR: dataDir };
    const rotated = await runCli(["portal", "rotate-code", "devlive"], { cwd: work, env });
    expect(rotated.code, rotated.stderr + dev.out.stdout).toBe(0);
    const fresh = /code {3}(LAB-[A-Z]+-\d+)/.exec(rotated.stdout)?.[1] ?? "";
    expect(fresh).not.toBe(code);
    await waitFor(
      "a live line with the new code",
      () => lines().find((l) => l.endsWith(`code ${fresh}`)),
      10_000,
    );

    await claim(runtimeInfo(dataDir)?.url ?? "", fresh, {
      name: "Ada L",
      email: "ada@example.test",
      pin: "582913",
    });
    const claimed = await waitFor(
      "a live line with the claim",
      () => lines().find((l) => l.includes("1 claimed")),
      10_000,
    );
    expect(claimed).toMatch(/^live · 2\/2 ready · 1 claimed · 1 free · .* · code LAB-/);
    expect(dev.out.stdout).not.toContain("ada@example.test");

    dev.child.kill("SIGTERM");
    expect(await dev.exited).toBe(0);
    expect(dev.out.stdout).toMatch(/stopped\n$/);
  });

  it("says what it reads in words, and only that a torn-down workshop is torn down", () => {
    const text = liveText({
      ready: 3,
      total: 3,
      claimed: 1,
      free: 2,
      code: "LAB-ABCDEF-20261201",
      claiming: "closed",
    });
    expect(text).toBe("live · 3/3 ready · 1 claimed · 2 free · code LAB-ABCDEF-20261201 (claiming closed)");
  });
});
