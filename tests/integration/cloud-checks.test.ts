import { writeFileSync } from "node:fs";
import { userInfo } from "node:os";
import { join } from "node:path";
import type { SendCommandCommandInput } from "@aws-sdk/client-ssm";
import { describe, expect, inject, it } from "vitest";
import { localClient } from "../../cli/local/dynamodb.ts";
import { createStore } from "../../shared/store/entities.ts";
import { awsWorkshopYaml, cloudForTests } from "../harness/aws/cloud.ts";
import { portalStudent } from "../harness/aws/student.ts";

/**
 * "Check my work" in the cloud: the portal's function (which reaches no host) invokes RunChecks, whose role may
 * send SSM commands to labfleet's instances; the check runs on the student's EC2 host through SSM Run Command,
 * and the result comes back to the student's page. Two presses at once reach two portal sandboxes (two
 * processes) and the conditional write lets one through.
 */

const W = "cloud-checks";

const cloud = cloudForTests();

const student = () => portalStudent(cloud.account);

const CHECKS = `checks:
  - name: lab built
    run: test -f built
  - name: answer
    run: grep -qx 42 "$HOME/answer.txt"
    hint: Write 42 into ~/answer.txt
  - name: who runs checks
    run: id -un
`;

async function withStore<T>(fn: (store: ReturnType<typeof createStore>) => Promise<T>): Promise<T> {
  const ddb = localClient(inject("dynamoEndpoint"));
  try {
    return await fn(createStore(ddb, cloud.account.table));
  } finally {
    ddb.destroy();
  }
}

/** The press window, moved as a clock would: the lab's last press is made 31 s older. */
async function clearPress() {
  await withStore(async (store) => {
    const last = (await store.checkPress.get({ workshop: W, hostId }).go()).data;
    expect(last).toBeTruthy();
    await store.checkPress
      .patch({ workshop: W, hostId })
      .set({ at: (last?.at ?? 0) - 31_000 })
      .go();
  });
}

let s: ReturnType<typeof student>;
let token = "";
let hostId = "";

describe("check my work through the RunChecks function and SSM", { timeout: 240_000 }, () => {
  it("a student's press runs the checks on their EC2 host: one of two presses at once, the hint on a failure", async () => {
    const yaml = awsWorkshopYaml({ name: W, source: cloud.lab("quick"), count: 1, extraLab: CHECKS }).concat(
      "portal:\n  enabled: true\n",
    );
    const created = await cloud.api("", { yaml });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    expect((await cloud.runToEnd(W, started.body.run.id, 120_000)).state).toBe("succeeded");
    const info = (await cloud.api(`/${W}/portal/info`)).body;
    s = student();
    await s.get("/");
    expect((await s.post("/code", { code: info.code })).status).toBe(303);
    await s.get("/board");
    const claimed = await s.post("/claim", {
      name: "Ada Cloudwright",
      email: "ada@example.test",
      pin: "480271",
    });
    expect(claimed.status, claimed.text).toBe(303);
    token = claimed.location.slice(3);
    hostId = "student-01";
    const page = await s.get(`/l/${token}`);
    expect(page.text).toContain(`action="/l/${token}/check#checks"`);

    const presses = await Promise.all([s.post(`/l/${token}/check`), s.post(`/l/${token}/check`)]);
    expect(presses.map((p) => p.status).sort()).toEqual([200, 429]);
    const done = presses.find((p) => p.status === 200)?.text ?? "";
    expect(done).toContain("2 of 3 checks passed");
    expect(done).toContain("Hint: Write 42 into ~/answer.txt");
    expect(presses.find((p) => p.status === 429)?.text).toMatch(/Try again in \d+ seconds?/);

    // The checks went to the host as one SSM command, sent by RunChecks, never by the portal.
    const sent = cloud.account.server
      .inputs<SendCommandCommandInput>("ssm", "SendCommand", "RunChecks")
      .filter((c) => c.Comment?.endsWith("check the student's work"));
    expect(sent).toHaveLength(1);
    expect(cloud.account.server.inputs("ssm", "SendCommand", "Portal")).toEqual([]);
  });

  it("passes once the student did the work; the instructor's matrix shows it", async () => {
    const inst = cloud.account.ec2.instanceOf(W, hostId);
    writeFileSync(join(inst.home, "answer.txt"), "42\n");
    await clearPress();
    const again = await s.post(`/l/${token}/check`);
    expect(again.status, again.text).toBe(200);
    expect(again.text).toContain("All 3 checks passed");
    const m = (await cloud.api(`/${W}/portal/checks`)).body;
    expect(m.students).toEqual([
      expect.objectContaining({ lab: hostId, name: "Ada Cloudwright", results: [true, true, true] }),
    ]);
    // On EC2 the SSM agent runs every command as root; the AWS double's agent runs them as this machine's user.
    const who = await withStore((store) =>
      store.checkResult.get({ workshop: W, hostId, check: "who runs checks" }).go(),
    );
    expect(who.data).toMatchObject({ passed: true, attempts: 2, output: userInfo().username });
  });

  it("IAM: the portal may invoke RunChecks and nothing else; without the grant the press is refused", async () => {
    const pairs = cloud.account.actionPairs().filter((p) => p.principal === "Portal");
    expect(pairs.filter((p) => !p.action.startsWith("dynamodb:")).map((p) => p.action)).toEqual([
      "lambda:InvokeFunction",
    ]);
    expect(pairs.filter((p) => p.denied > 0)).toEqual([]);
    const run = cloud.account.actionPairs().filter((p) => p.principal === "RunChecks");
    expect(run.map((p) => p.action)).toEqual(
      expect.arrayContaining(["ssm:SendCommand", "ssm:GetCommandInvocation"]),
    );
    expect(run.filter((p) => p.denied > 0)).toEqual([]);

    // The same press with the grant taken away: IAM denies the Invoke, the student gets a clear 502.
    await clearPress();
    const refused = await cloud.account.withPolicy(
      "Portal",
      (policy) => ({
        ...policy,
        Statement: policy.Statement.filter((st) => (st as { Sid?: string }).Sid !== "InvokeRunChecks"),
      }),
      () => s.post(`/l/${token}/check`),
    );
    expect(refused.status).toBe(502);
    expect(refused.text).toContain("Checking your work did not work");
    const denied = cloud.account
      .actionPairs()
      .find((p) => p.principal === "Portal" && p.action === "lambda:InvokeFunction");
    expect(denied?.denied).toBe(1);
    expect(cloud.account.server.failures).toEqual([]);
  });
});
