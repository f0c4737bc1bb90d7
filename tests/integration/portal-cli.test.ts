import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { claimLab } from "../../shared/portal/claims.ts";
import { RATE } from "../../shared/portal/constants.ts";
import { recordFailure } from "../../shared/portal/rate-limit.ts";
import { runCli } from "../harness/cli.ts";
import { decodeTerminalQr } from "../harness/qr.ts";
import { removeDir, tempDir, testRuntime, workshopYaml } from "../harness/runtime.ts";

type Runtime = Awaited<ReturnType<typeof testRuntime>>;
let rt: Runtime;
let work: string;
let env: Record<string, string>;
let file: string;
const WS = "pcli";
const STUDENT = { name: "Dana Scully", email: "dana@example.test", pin: "582913" };

beforeAll(async () => {
  work = tempDir("labfleet-portal-cli-");
  rt = await testRuntime();
  env = { LABFLEET_URL: rt.url, LABFLEET_TOKEN: rt.token };
  file = join(work, "workshop.yaml");
  writeFileSync(file, `${workshopYaml({ name: WS, count: 2 })}portal:\n  mode: both\n`);
  const up = await runCli(["up", "-f", file], { env });
  expect(up.code, up.stderr).toBe(0);
});
afterAll(async () => {
  await rt?.close();
  if (rt) removeDir(rt.dataDir);
  if (work) removeDir(work);
});

describe("labfleet portal", () => {
  let code = "";

  it("publish, open and info print where to go and the code", async () => {
    const pub = await runCli(["portal", "publish", WS], { env });
    expect(pub.code, pub.stderr).toBe(0);
    expect(pub.stdout).toContain(`portal ${WS}: published, claiming not open yet`);
    const open = await runCli(["portal", "open", WS], { env });
    expect(open.code, open.stderr).toBe(0);
    const m = /^ {2}code {3}(LAB-[A-Z]{6}-\d{8})$/m.exec(open.stdout);
    expect(m, open.stdout).toBeTruthy();
    code = m?.[1] ?? "";
    expect(open.stdout).toContain(`portal ${WS}: claiming open`);
    expect(pub.stdout).toContain(`  code   ${code}`); // the code published is the code opened
    expect(open.stdout).toContain(`go to  ${rt.url}/`);

    const info = await runCli(["portal", "info", "-f", file], { env });
    expect(info.code).toBe(0);
    expect(info.stdout).toContain(code);
    const json = JSON.parse((await runCli(["portal", "info", WS, "--output", "json"], { env })).stdout);
    expect(json).toMatchObject({ workshop: WS, state: "open", code, url: `${rt.url}/` });
  });

  it("slide prints a QR code that decodes to the portal's address, with the address and the code", async () => {
    const r = await runCli(["portal", "slide", WS], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(decodeTerminalQr(r.stdout)).toBe(`${rt.url}/`);
    expect(r.stdout).toContain(`  go to  ${rt.url}/\n  code   ${code}\n`);
    expect(r.stdout).not.toContain("claiming is"); // it is open
    const json = JSON.parse((await runCli(["portal", "slide", WS, "--output", "json"], { env })).stdout);
    expect(json).toEqual({ url: `${rt.url}/`, code, state: "open" });
    const extra = await runCli(["portal", "slide", WS, "more"], { env });
    expect(extra.code).toBe(2);
    expect(extra.stderr).toContain("labfleet portal slide takes no arguments after the workshop");
  });

  it("status --output json lists the labs and the claims with emails", async () => {
    await claimLab(WS, STUDENT, "127.0.0.1");
    const r = await runCli(["portal", "status", WS, "--output", "json"], { env });
    expect(r.code, r.stderr).toBe(0);
    const doc = JSON.parse(r.stdout);
    expect(doc.portal).toMatchObject({ workshop: WS, state: "open", open: true });
    expect(doc.portal.code).toBeUndefined();
    expect(doc.labs.map((l: { lab: string; status: string }) => [l.lab, l.status])).toEqual([
      ["student-01", "claimed"],
      ["student-02", "free"],
    ]);
    expect(doc.claims).toEqual([
      expect.objectContaining({ lab: "student-01", name: STUDENT.name, email: STUDENT.email, locked: false }),
    ]);
    const text = await runCli(["portal", "status", WS], { env });
    expect(text.stdout).toMatch(/^student-01\s+claimed\s+Dana Scully\s+dana@example\.test/m);
    expect(text.stdout).toMatch(/^student-02\s+free$/m);
  });

  it("export writes the CSV to stdout, or to a 0600 file with --csv", async () => {
    const stdout = await runCli(["portal", "export", WS], { env });
    expect(stdout.code).toBe(0);
    expect(stdout.stdout.split("\n")[0]).toBe("lab,name,email,how,claimed at,first opened");
    expect(stdout.stdout).toContain("student-01,Dana Scully,dana@example.test,open,");

    const target = join(work, "claims.csv");
    writeFileSync(target, "old\n", { mode: 0o644 }); // an existing readable file is made private too
    const r = await runCli(["portal", "export", WS, "--csv", target], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`wrote 1 claim to ${target}`);
    expect(statSync(target).mode & 0o777).toBe(0o600);
    expect(readFileSync(target, "utf8")).toBe(stdout.stdout);

    const fresh = join(work, "fresh.csv");
    expect((await runCli(["portal", "export", "-f", file, "--csv", fresh], { env })).code).toBe(0);
    expect(statSync(fresh).mode & 0o777).toBe(0o600);
  });

  it("release, unlock and bad usage answer with their exit codes", async () => {
    expect((await runCli(["portal", "unlock", WS, STUDENT.email], { env })).code).toBe(0);
    const unknown = await runCli(["portal", "unlock", WS, "nobody@example.test"], { env });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("no lab is claimed with that email");

    const released = await runCli(["portal", "release", WS, "student-01"], { env });
    expect(released.code, released.stderr).toBe(0);
    expect(released.stdout).toContain("released student-01");
    const again = await runCli(["portal", "release", WS, "student-01"], { env });
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("lab student-01 is not claimed");

    expect((await runCli(["portal", "release", WS], { env })).code).toBe(2);
    expect((await runCli(["portal", "nonsense", WS], { env })).code).toBe(2);
    expect((await runCli(["portal", "info", WS, "--csv", "x.csv"], { env })).code).toBe(2);
    const noRuntime = await runCli(["portal", "info", WS], { env: { ...env, LABFLEET_TOKEN: "wrong" } });
    expect(noRuntime.code).toBe(3);
  });

  it("status shows who the rate limits hold back; unblock lets an address in again", async () => {
    const calm = await runCli(["portal", "status", WS], { env });
    expect(calm.stdout).toContain("nobody is held back by the rate limits");
    // A cookie-dropping guesser at one address (new browsers), one held browser at another.
    for (let i = 0; i < RATE.perAddressNewBrowsers; i++) await recordFailure("198.51.100.7", "code");
    const browser = { address: "198.51.100.9", browser: "b1b2c3d4e5f6a7b8c9d0", vouched: true };
    for (let i = 0; i < RATE.perBrowser; i++) await recordFailure(browser);

    const text = await runCli(["portal", "status", WS], { env });
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(
      new RegExp(
        `^198\\.51\\.100\\.7\\s+browsers that never entered a right code\\s+${RATE.perAddressNewBrowsers}/${RATE.perAddressNewBrowsers}\\s+(\\d{4}-\\d\\d-\\d\\d )?\\d\\d:\\d\\d:\\d\\d$`,
        "m",
      ),
    );
    expect(text.stdout).toMatch(/^198\.51\.100\.9\s+one browser \(…b8c9d0\)\s+10\/10\s/m);
    expect(text.stdout).toContain(`labfleet portal unblock ${WS} --address 198.51.100.7`);
    const json = JSON.parse((await runCli(["portal", "status", WS, "--output", "json"], { env })).stdout);
    expect(json.heldBack.holds.map((h: { address: string; scope: string }) => [h.address, h.scope])).toEqual([
      ["198.51.100.7", "new_browsers"],
      ["198.51.100.9", "browser"],
    ]);

    const one = await runCli(["portal", "unblock", WS, "--address", "198.51.100.7"], { env });
    expect(one.code, one.stderr).toBe(0);
    expect(one.stdout).toBe("let in again: 198.51.100.7 (their failure counts start from zero)\n");
    const after = await runCli(["portal", "status", WS], { env });
    expect(after.stdout).not.toMatch(/^198\.51\.100\.7\s/m);
    expect(after.stdout).toMatch(/^198\.51\.100\.9\s/m);
    const again = await runCli(["portal", "unblock", WS, "--address", "198.51.100.7"], { env });
    expect(again.stdout).toBe("nothing was held back at 198.51.100.7: nothing to lift\n");

    const all = await runCli(["portal", "unblock", WS, "--all", "--output", "json"], { env });
    expect(JSON.parse(all.stdout)).toEqual({ addresses: ["198.51.100.9"] });
    expect((await runCli(["portal", "status", WS], { env })).stdout).toContain("nobody is held back");

    const neither = await runCli(["portal", "unblock", WS], { env });
    expect(neither.code).toBe(2);
    expect(neither.stderr).toContain("needs --address A or --all");
    expect((await runCli(["portal", "unblock", WS, "--all", "--address", "1.2.3.4"], { env })).code).toBe(2);
    expect((await runCli(["portal", "status", WS, "--all"], { env })).code).toBe(2);
    const bad = await runCli(["portal", "unblock", WS, "--address", "not an address"], { env });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("address");
    expect(bad.stderr).toContain("expected a network address");
  });

  it("admin-link prints a working instructor URL", async () => {
    const r = await runCli(["portal", "admin-link", WS], { env });
    expect(r.code).toBe(0);
    const url = r.stdout.split("\n")[0] ?? "";
    expect(url).toMatch(new RegExp(`^${rt.url}/admin/${WS}/[\\w-]{32}$`));
    const page = await fetch(url);
    expect(page.status).toBe(200);
    expect(await page.text()).toContain("student-02");
  });

  it("invite writes personal links to a 0600 file only; down --unclaimed removes the free lab", async () => {
    const roster = join(work, "roster.csv");
    writeFileSync(roster, "name,email\nFox Mulder,fox@example.test\n");
    const out = join(work, "invites.csv");
    const r = await runCli(["portal", "invite", WS, roster, "--csv", out], { env });
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`invited 1: their personal links are in ${out} (mode 0600)`);
    expect(r.stdout).not.toContain("/l/");
    expect(statSync(out).mode & 0o777).toBe(0o600);
    const [header, row] = readFileSync(out, "utf8").trim().split("\n");
    expect(header).toBe("name,email,lab,link");
    expect(row).toMatch(new RegExp(`^Fox Mulder,fox@example\\.test,student-01,${rt.url}/l/[\\w-]{32}$`));
    const link = row?.split(",")[3] ?? "";
    expect((await fetch(link)).status).toBe(200);
    expect((await runCli(["portal", "invite", WS, roster], { env })).code).toBe(2);

    const refused = await runCli(["down", WS, "--unclaimed", "2"], { env });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain("add --force");
    const down = await runCli(["down", WS, "--unclaimed", "all", "--output", "json"], { env });
    expect(down.code, down.stderr).toBe(0);
    expect(JSON.parse(down.stdout)).toEqual({ removed: ["student-02"], releasedClaims: [], waiting: 0 });
    expect((await runCli(["down", WS, "--unclaimed", "some"], { env })).code).toBe(2);
  });
});
