import { execFileSync } from "node:child_process";
import type { SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";
import { cookieHeader, storeCookies } from "../harness/cookies.ts";

/**
 * The student portal in the cloud: its own function (web/portal-lambda.ts), reached through its Function URL,
 * whose role may only read and write its partitions of the table (`dynamodb:LeadingKeys`). A student enters the
 * code, claims a lab and opens it, and every DynamoDB call the portal makes is one IAM allows.
 */

const W = "cloud-portal";
let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud();
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

/** A student's browser without a browser: a cookie jar and the last form's CSRF field, on the portal's URL. */
function student() {
  const jar = new Map<string, string>();
  let csrf = "";
  const base = cloud.account.portalUrl.replace(/\/$/, "");
  const take = async (res: Response) => {
    storeCookies(jar, res);
    const text = await res.text();
    const m = /name="_csrf" value="([^"]+)"/.exec(text);
    if (m?.[1]) csrf = m[1];
    return { status: res.status, text, location: res.headers.get("location") ?? "" };
  };
  return {
    get: async (path: string) =>
      take(await fetch(`${base}${path}`, { headers: cookieHeader(jar), redirect: "manual" })),
    post: async (path: string, fields: Record<string, string>) =>
      take(
        await fetch(`${base}${path}`, {
          method: "POST",
          redirect: "manual",
          headers: { ...cookieHeader(jar), "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams({ _csrf: csrf, ...fields }),
        }),
      ),
  };
}

describe("the claim portal on its own function", { timeout: 240_000 }, () => {
  it("a student enters the code, claims a lab and sees its access details", async () => {
    const yaml = awsWorkshopYaml({
      name: W,
      source: cloud.lab("quick"),
      count: 2,
      extraLab: "",
      extraProvider: "",
    }).concat("portal:\n  enabled: true\n  student_ssh: true\n");
    expect((await cloud.api("", { yaml })).status).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    expect((await cloud.runToEnd(W, started.body.run.id, 120_000)).state).toBe("succeeded");
    const info = (await cloud.api(`/${W}/portal/info`)).body;
    expect(info.state).toBe("open");

    const s = student();
    expect((await s.get("/")).text).toContain('name="code"');
    const entered = await s.post("/code", { code: info.code });
    expect(entered.status, entered.text).toBe(303);
    const board = await s.get("/board");
    expect(board.status).toBe(200);
    expect(board.text).toContain('action="/claim"');
    const claimed = await s.post("/claim", {
      name: "Ada Cloudwright",
      email: "ada@example.test",
      pin: "480271",
    });
    expect(claimed.status, claimed.text).toBe(303);
    expect(claimed.location).toMatch(/^\/l\/[\w-]+$/);
    const lab = await s.get(claimed.location);
    expect(lab.status).toBe(200);
    expect(lab.text).toMatch(/s3cret-student-0[12]/);

    // The SSH command comes with the host's key fingerprints, read from the instance through SSM before the
    // lab was deployed (labfleet itself never reaches EC2 hosts over SSH): what ssh shows the student first.
    const hostId = /s3cret-(student-0[12])/.exec(lab.text)?.[1] as string;
    const inst = cloud.account.ec2.instanceOf(W, hostId);
    const lines = cloud.account.ec2.hostKeyLines(inst.id);
    expect(lines.map((l) => l.split(" ")[0]).sort()).toEqual(["ecdsa-sha2-nistp256", "ssh-ed25519"]);
    const expected = lines.map((l) => {
      const out = execFileSync("ssh-keygen", ["-l", "-f", "-"], { input: `${l}\n`, encoding: "utf8" });
      return out.split(" ")[1] as string;
    });
    expect(lab.text).toContain("ssh ");
    for (const fp of expected) expect(lab.text).toContain(`<code>${fp}</code>`);
    const keys = (await cloud.api(`/${W}/host-keys`)).body.keys as {
      hostId: string;
      origin: string;
      keys: { fingerprint: string }[];
    }[];
    expect(keys.map((k) => [k.hostId, k.origin])).toEqual([
      ["student-01", "ssm"],
      ["student-02", "ssm"],
    ]);
    const mine = keys.find((k) => k.hostId === hostId);
    expect(mine?.keys.map((k) => k.fingerprint).sort()).toEqual([...expected].sort());
    // Each instance has keys of its own (the other host's differ), and they were read before the lab started.
    const other = keys.find((k) => k.hostId !== hostId);
    expect(other?.keys.some((k) => expected.includes(k.fingerprint))).toBe(false);
    const steps = cloud.account.server
      .inputs<SendCommandCommandInput>("ssm", "SendCommand")
      .filter((c) => c.InstanceIds?.includes(inst.id))
      .map((c) => c.Comment?.replace(`labfleet ${W} ${hostId}: `, ""));
    expect(steps.indexOf("read the host's SSH keys")).toBeGreaterThan(
      steps.indexOf("wait for the first boot"),
    );
    expect(steps.indexOf("start lab setup")).toBeGreaterThan(steps.indexOf("read the host's SSH keys"));

    // The instructor sees the claim.
    const status = (await cloud.api(`/${W}/portal/status`)).body;
    expect(JSON.stringify(status)).toContain("Ada Cloudwright");
  });

  it("a full room waits in line through the portal's function; a released lab goes to the first", async () => {
    const b = student();
    const info = (await cloud.api(`/${W}/portal/info`)).body;
    await b.get("/");
    await b.post("/code", { code: info.code });
    await b.get("/board");
    const bea = await b.post("/claim", { name: "Bea Cloudwright", email: "bea@example.test", pin: "615283" });
    expect(bea.status, bea.text).toBe(303);

    const join = async (name: string, email: string) => {
      const s = student();
      await s.get("/");
      await s.post("/code", { code: info.code });
      const board = await s.get("/board");
      expect(board.text).toContain("Join the line");
      const joined = await s.post("/claim", { name, email, pin: "730914" });
      expect(joined.status, joined.text).toBe(303);
      return { s, path: joined.location };
    };
    const cy = await join("Cy Waiting", "cy@example.test");
    const dee = await join("Dee Waiting", "dee@example.test");
    expect((await cy.s.get(cy.path)).text).toContain("You are number 1 in line");
    expect((await dee.s.get(dee.path)).text).toContain("You are number 2 in line");
    const left = await dee.s.post(`${dee.path}/leave`, {});
    expect(left.status, left.text).toBe(303);
    expect((await dee.s.get(dee.path)).status).toBe(404);

    const status = (await cloud.api(`/${W}/portal/status`)).body;
    expect(status.waiting.map((w: { name: string }) => w.name)).toEqual(["Cy Waiting"]);
    const beasLab = status.claims.find((c: { name: string }) => c.name === "Bea Cloudwright").lab;
    expect((await cloud.api(`/${W}/portal/release`, { lab: beasLab })).status).toBe(200);
    const served = await cy.s.get(cy.path);
    expect(served.status).toBe(200);
    expect(served.text).toContain(`Your lab: ${beasLab}`);
    expect((await cloud.api(`/${W}/portal/status`)).body.waiting).toEqual([]);
  });

  it("the portal's function only touched the table, and IAM allowed every call with its leading keys", () => {
    const pairs = cloud.account.actionPairs().filter((p) => p.principal === "Portal");
    expect(pairs.length).toBeGreaterThan(0);
    expect(pairs.every((p) => p.action.startsWith("dynamodb:"))).toBe(true);
    expect(pairs.filter((p) => p.denied > 0)).toEqual([]);
    expect(cloud.account.server.failures).toEqual([]);
  });
});
