import { execFileSync } from "node:child_process";
import type { SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HTTP_APIS } from "../../infra/web.ts";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";
import { portalStudent } from "../harness/aws/student.ts";
import { runCli } from "../harness/cli.ts";

/**
 * The student portal in the cloud: its own function (web/portal-lambda.ts), reached through its HTTP API on the
 * stage's custom domain (API Gateway in front: payload format 2.0, the stage's throttling), whose role may only
 * read and write its partitions of the table (`dynamodb:LeadingKeys`). A student enters the code, claims a lab
 * and opens it, and every DynamoDB call the portal makes is one IAM allows.
 */

const W = "cloud-portal";
const DOMAIN = "labs.example.test";
let cloud: Cloud;
/** The HTTP APIs' throttling clock: each phase moves it on, so the buckets are full where a phase starts. */
let clock = 0;
const refill = () => {
  clock += 60_000;
};

beforeAll(async () => {
  cloud = await startCloud({ domains: { Portal: DOMAIN }, throttleClock: () => clock });
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

const student = () => portalStudent(cloud.account);

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
    // The address students go to is the portal's custom domain, not the API's: the API says so in full, and the
    // CLI prints it (`portal info`, `portal slide`).
    expect(cloud.account.portalUrl).toBe(`https://${DOMAIN}`);
    expect(info.url).toBe(new URL(info.path, `https://${DOMAIN}`).toString());
    const env = { LABFLEET_URL: cloud.account.apiEndpoint, LABFLEET_TOKEN: cloud.token };
    const printed = await runCli(["portal", "info", W], { env });
    expect(printed.code, printed.stderr).toBe(0);
    expect(printed.stdout).toContain(`go to  ${info.url}\n`);
    const slide = await runCli(["portal", "slide", W, "--output", "json"], { env });
    expect(JSON.parse(slide.stdout).url).toBe(info.url);

    refill();
    const s = student();
    expect((await s.get("/")).text).toContain('name="code"');
    // A form posted from another site is refused: the portal's own origin is the public https one.
    const forged = await s.post("/code", { code: info.code }, { origin: "https://evil.example.test" });
    expect(forged.status).toBe(403);
    const entered = await s.post("/code", { code: info.code });
    expect(entered.status, entered.text).toBe(303);
    // Two cookies in one response (the access cookie, the browser's): each its own Set-Cookie, through the 2.0
    // response's `cookies` array; Secure, as the portal is reached over https.
    expect(entered.cookies.length).toBeGreaterThanOrEqual(2);
    expect(new Set(entered.cookies.map((c) => c.split("=")[0])).size).toBe(entered.cookies.length);
    for (const c of entered.cookies) expect(c).toMatch(/; Secure/i);
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
    expect(claimed.cookies.some((c) => c.startsWith("lf_lab="))).toBe(true);
    const claims = cloud.account.apigateway.requests.filter((r) => r.routeKey === "POST /claim");
    expect(claims.map((r) => [r.status, r.invoked])).toEqual([[303, true]]);
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
    expect(steps.indexOf("sync lab source and start setup")).toBeGreaterThan(
      steps.indexOf("read the host's SSH keys"),
    );

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

  it("counts the portal's rate limits against the address API Gateway saw, whatever X-Forwarded-For says", async () => {
    refill();
    const s = student();
    await s.get("/");
    for (let i = 0; i < 10; i++) {
      const wrong = await s.post("/code", { code: "WRONG1" }, { "x-forwarded-for": `203.0.113.${i + 1}` });
      expect(wrong.status).toBeGreaterThanOrEqual(400);
    }
    const held = (await cloud.api(`/${W}/portal/status`)).body.heldBack as {
      holds: { address: string }[];
    };
    const addresses = new Set(held.holds.map((h) => h.address));
    expect([...addresses]).toEqual(["127.0.0.1"]);
    const sources = cloud.account.apigateway.requests.filter((r) => r.api === "PortalHttp");
    expect(new Set(sources.map((r) => r.sourceIp))).toEqual(new Set(["127.0.0.1"]));
  });

  it("refuses a flood of claims at the route's burst with 429, without invoking the portal's function", async () => {
    refill();
    const portalFn = cloud.account.deployed.functionName("Portal");
    const invoked = () => cloud.account.lambda.invocations.filter((r) => r.functionName === portalFn).length;
    const before = invoked();
    const burst = HTTP_APIS.Portal.routes["POST /claim"]?.burstLimit as number;
    const flood = await Promise.all(
      Array.from({ length: burst + 5 }, () =>
        fetch(`${cloud.account.portalEndpoint}/claim`, {
          method: "POST",
          headers: { "content-type": "application/x-www-form-urlencoded" },
          body: "name=x",
          redirect: "manual",
        }),
      ),
    );
    const refused = flood.filter((r) => r.status === 429);
    expect(refused).toHaveLength(5);
    for (const r of refused) expect(await r.json()).toEqual({ message: "Too Many Requests" });
    // The rest reached the portal, which answers a claim without its cookies and CSRF field itself.
    expect(flood.filter((r) => r.status !== 429).every((r) => r.status < 500)).toBe(true);
    expect(invoked() - before).toBe(burst);
  });

  it("the portal's function only touched the table, and IAM allowed every call with its leading keys", () => {
    const pairs = cloud.account.actionPairs().filter((p) => p.principal === "Portal");
    expect(pairs.length).toBeGreaterThan(0);
    expect(pairs.every((p) => p.action.startsWith("dynamodb:"))).toBe(true);
    expect(pairs.filter((p) => p.denied > 0)).toEqual([]);
    expect(cloud.account.server.failures).toEqual([]);
  });
});
