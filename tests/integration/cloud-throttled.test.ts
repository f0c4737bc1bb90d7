import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { awsWorkshopYaml, type Cloud, startCloud } from "../harness/aws/cloud.ts";

/**
 * The cloud path when AWS throttles: a fifth of every API's calls (each function's, and the hosts') answered
 * with ThrottlingException, or RequestLimitExceeded by EC2, as AWS answers a caller past its rate. up (with an
 * operator secret, the lab UIs opened by the workflow), polls, open-access, extend and teardown all succeed.
 */

const W = "throttled";
let cloud: Cloud;

beforeAll(async () => {
  cloud = await startCloud();
  cloud.account.ssm.putParameter("/labfleet/test/secrets/THROTTLED_TOKEN", "throttled-token-value");
  cloud.account.server.setThrottle({ share: 0.2, seed: 7 });
}, 120_000);

afterAll(async () => {
  await cloud?.close();
});

describe("the cloud path with 20 % of every API's calls throttled", { timeout: 240_000 }, () => {
  it("up succeeds: every lab ready, the lab UIs opened", async () => {
    const yaml = awsWorkshopYaml({
      name: W,
      source: cloud.lab("quick"),
      count: 3,
      setup: `. "$LABFLEET_SECRETS"; test "$THROTTLED_TOKEN" = throttled-token-value && bash setup.sh`,
      extraLab: "operator_secrets: [THROTTLED_TOKEN]\nui_ports:\n  - { name: ui, port: 8443 }",
      extraProvider: "student_access: open",
    });
    expect((await cloud.api("", { yaml })).status).toBe(201);
    const started = await cloud.api(`/${W}/up`, {});
    expect(started.status, JSON.stringify(started.body)).toBe(202);
    const run = await cloud.runToEnd(W, started.body.run.id, 180_000);
    expect(run.state, JSON.stringify(run)).toBe("succeeded");
    expect(run.error).toBeUndefined();
    const s = (await cloud.api(`/${W}`)).body;
    expect(s.hostList.map((h: { state: string }) => h.state)).toEqual(["ready", "ready", "ready"]);
  });

  it("status refresh, open-access and extend succeed", async () => {
    const refreshed = await cloud.api(`/${W}/refresh`, {});
    expect(refreshed.status).toBe(200);
    expect(refreshed.body.hosts.map((h: { state: string }) => h.state)).toEqual(["ready", "ready", "ready"]);
    expect((await cloud.api(`/${W}/open-access`, { close: true })).body).toMatchObject({
      open: false,
      changed: true,
    });
    expect((await cloud.api(`/${W}/open-access`, {})).body).toMatchObject({ open: true, changed: true });
    const extended = await cloud.api(`/${W}/extend`, { hours: 1 });
    expect(extended.status).toBe(200);
    expect(extended.body.ok, JSON.stringify(extended.body)).toBe(true);
  });

  it("teardown succeeds and ends every instance", async () => {
    const res = await cloud.api(`/${W}/teardown`, {});
    expect(res.status).toBe(202);
    const run = await cloud.runToEnd(W, res.body.run.id, 120_000);
    expect(run.state, JSON.stringify(run)).toBe("succeeded");
    expect((await cloud.api(`/${W}`)).body.state).toBe("torn_down");
  });

  it("about a fifth of the calls were throttled, every API's, and none was denied", () => {
    const aws = cloud.account;
    const byApi = new Map<string, { calls: number; throttled: number }>();
    for (const c of aws.server.calls.filter((x) => x.principal !== "operator")) {
      const key = `${c.service}:${c.operation}`;
      const v = byApi.get(key) ?? { calls: 0, throttled: 0 };
      v.calls++;
      if (c.throttled) v.throttled++;
      byApi.set(key, v);
    }
    const all = [...byApi.values()].reduce(
      (a, v) => ({ calls: a.calls + v.calls, throttled: a.throttled + v.throttled }),
      {
        calls: 0,
        throttled: 0,
      },
    );
    console.log(
      `throttled calls by API:\n${[...byApi]
        .sort()
        .map(([k, v]) => `  ${k.padEnd(45)} ${v.throttled}/${v.calls}`)
        .join("\n")}`,
    );
    expect(all.throttled / all.calls).toBeGreaterThan(0.15);
    expect(all.throttled / all.calls).toBeLessThan(0.25);
    for (const [api, v] of byApi) if (v.calls >= 20) expect(v.throttled, api).toBeGreaterThan(0);
    expect(aws.actionPairs().filter((p) => p.denied > 0)).toEqual([]);
    expect(aws.server.failures).toEqual([]);
  });
});
