import { existsSync } from "node:fs";
import aslValidator from "asl-validator";
import { StateMachine } from "aws-local-stepfunctions";
import { describe, expect, it } from "vitest";
import { RUN_KINDS } from "../../shared/store/entities.ts";
import { deployBatches, deployBatchSize } from "../../shared/workshop/limits.ts";
import {
  type AslDefinition,
  allStates,
  definitionOf,
  functionKeyOf,
  loadDefinition,
} from "../../stepfunctions/definitions.ts";
import { functionFiles, taskFunctions } from "../../stepfunctions/handlers.ts";
import { localHandlers } from "../../stepfunctions/local-executor.ts";
import { aslViolations } from "../../stepfunctions/rules.ts";

const root = new URL("../../", import.meta.url).pathname;
const kinds = ["up", "teardown", "rollout"] as const;

describe("ASL definitions", () => {
  it.each(kinds)("%s passes asl-validator", (kind) => {
    const result = aslValidator(loadDefinition(kind) as never);
    expect(result.errors).toEqual([]);
    expect(result.isValid).toBe(true);
  });

  it.each(kinds)("%s uses JSONPath and lambda:invoke only", (kind) => {
    expect(aslViolations(loadDefinition(kind))).toEqual([]);
  });

  it("the rule check catches every forbidden feature", () => {
    const bad: AslDefinition = {
      QueryLanguage: "JSONata",
      StartAt: "A",
      States: {
        A: { Type: "Task", Resource: "arn:aws:states:::ecs:runTask.sync", Next: "B" },
        B: { Type: "Task", Resource: "arn:aws:states:::lambda:invoke.waitForTaskToken", Next: "C" },
        C: { Type: "Pass", Assign: { x: 1 }, Next: "D" },
        D: { Type: "Task", Resource: "arn:aws:states:::dynamodb:putItem", End: true },
      },
    } as never;
    const problems = aslViolations(bad).join("\n");
    for (const word of ["QueryLanguage", ".sync", ".waitForTaskToken", "Assign", "dynamodb:putItem"])
      expect(problems).toContain(word);
  });

  it.each(kinds)("every Task of %s invokes a handler file that exists", (kind) => {
    for (const [name, state] of allStates(loadDefinition(kind))) {
      if (state.Type !== "Task") continue;
      const key = functionKeyOf(state);
      expect(key, name).toBeDefined();
      expect(Object.keys(taskFunctions), name).toContain(key);
      const file = functionFiles[key as keyof typeof functionFiles].replace(/\.handler$/, ".ts");
      expect(existsSync(`${root}${file}`), file).toBe(true);
    }
  });

  it("deploy is a Map over the hosts whose items catch their own failure", () => {
    const deploy = loadDefinition("up").States.Deploy;
    expect(deploy?.Type).toBe("Map");
    expect(deploy?.MaxConcurrencyPath).toBe("$.settings.concurrency");
    const item = deploy?.ItemProcessor?.States.DeployHost as {
      Catch?: { ErrorEquals: string[]; Next: string }[];
    };
    expect(item.Catch?.[0]).toMatchObject({ ErrorEquals: ["States.ALL"], Next: "RecordHostFailure" });
  });

  it("Choices on BeginUp's stages skip provision, deploy and wait when the run leaves them out", () => {
    const def = loadDefinition("up");
    expect(def.States.BeginUp?.ResultSelector).toMatchObject({
      "deploy.$": "$.Payload.deploy",
      "stages.$": "$.Payload.stages",
      "hostIds.$": "$.Payload.hostIds",
    });
    expect(def.States.BeginUp?.Next).toBe("ProvisionStage");
    expect(def.States.ProvisionStage).toMatchObject({
      Type: "Choice",
      Choices: [{ Variable: "$.settings.stages.provision", BooleanEquals: false, Next: "RecordedHosts" }],
      Default: "Provision",
    });
    expect(def.States.RecordedHosts).toMatchObject({
      Type: "Pass",
      Parameters: { "hostIds.$": "$.settings.hostIds" },
      ResultPath: "$.provision",
      Next: "AfterProvision",
    });
    expect(def.States.Provision?.Next).toBe("AfterProvision");
    expect(def.States.AfterProvision).toMatchObject({ Type: "Choice", Default: "Deploy" });
    expect(def.States.Deploy?.Next).toBe("AfterDeploy");
    expect(def.States.AfterDeploy).toMatchObject({
      Type: "Choice",
      Choices: [{ Variable: "$.settings.stages.wait", BooleanEquals: false, Next: "FinishUp" }],
      Default: "WaitBeforePoll",
    });
  });
});

describe("run kinds and definitions", () => {
  it("maps every run kind to its definition, provision and scale to up", () => {
    const expected = {
      up: "up",
      deploy: "up",
      retry: "up",
      provision: "up",
      scale: "up",
      teardown: "teardown",
      rollout: "rollout",
    };
    for (const kind of RUN_KINDS) {
      expect(definitionOf(kind), kind).toBe(expected[kind]);
    }
  });
});

/**
 * Runs the real `up` definition with stand-in handlers to count what Step Functions would bill. `deploy:
 * false` is what BeginUp returns for a provision run.
 */
type Flags = { provision: boolean; deploy: boolean; wait: boolean; publish: boolean };
const ALL: Flags = { provision: true, deploy: true, wait: true, publish: true };
const PROVISION_ONLY: Flags = { provision: true, deploy: false, wait: false, publish: false };

async function countTransitions(
  hosts: number,
  pollsUntilReady: number,
  stages: Flags = ALL,
): Promise<{ transitions: number; polls: number; tasks: string[]; deployed: string[] }> {
  const def = loadDefinition("up");
  let polls = 0;
  const tasks: string[] = [];
  const deployed: string[] = [];
  const ids = Array.from({ length: hosts }, (_, i) => `h${i}`);
  const batches = deployBatches(ids, deployBatchSize(hosts));
  const stand: Record<string, (p: Record<string, unknown>) => unknown> = {
    BeginUp: () => ({
      concurrency: 4,
      pollSeconds: 60,
      deadline: "2099-01-01T00:00:00.000Z",
      deploy: stages.deploy,
      stages,
      // Without the provision stage, BeginUp lists the hosts recorded.
      hostIds: stages.provision ? [] : ids,
      batches: stages.provision ? [] : batches,
    }),
    Provision: () => ({ hostIds: ids, batches }),
    DeployHost: (p) => {
      const items = p.hostIds as string[];
      deployed.push(...items);
      return { hosts: items.map((hostId) => ({ hostId, action: "started" })) };
    },
    Poll: () => {
      polls++;
      return { done: polls >= pollsUntilReady, timedOut: false, ready: 0, failed: 0, deploying: hosts };
    },
    FinishUp: () => ({ state: "succeeded" }),
  };
  // The same state-name -> handler wiring the local executor builds, with stand-in bodies.
  const wired = Object.fromEntries(
    Object.keys(localHandlers(def)).map((name) => [
      name,
      async (input: unknown) => {
        const fn = stand[name];
        if (!fn) throw new Error(`unexpected task ${name}`);
        tasks.push(name);
        return { StatusCode: 200, Payload: fn((input as { Payload: Record<string, unknown> }).Payload) };
      },
    ]),
  );
  const sm = new StateMachine(def as never, { validationOptions: { checkArn: true, checkPaths: true } });
  const execution = sm.run({ workshop: "w", runId: "run_X", force: false } as never, {
    overrides: { taskResourceLocalHandlers: wired as never, waitTimeOverrides: { WaitBeforePoll: 0 } },
  });
  let transitions = 0;
  const counting = (async () => {
    for await (const e of execution.eventLogs) if (e.type === "StateEntered") transitions++;
  })();
  await execution.result;
  await counting;
  return { transitions, polls, tasks, deployed };
}

describe("state transitions (Step Functions bills per transition)", () => {
  it("a 50-host lab polled every minute for two hours stays under 1,000 transitions", async () => {
    const { transitions, polls } = await countTransitions(50, 120);
    expect(polls).toBe(120);
    // BeginUp, ProvisionStage, Provision, AfterProvision, Deploy + 50 DeployHost items, AfterDeploy,
    // 120 x (Wait, Poll, Choice), FinishUp.
    expect(transitions).toBe(6 + 50 + 120 * 3 + 1);
    expect(transitions).toBeLessThan(1000);
  });

  it("500 hosts deploy as 100 Map items of 5 hosts: every host once, 100 item transitions", async () => {
    const { transitions, deployed } = await countTransitions(500, 120);
    expect(deployed).toHaveLength(500);
    expect(new Set(deployed).size).toBe(500);
    // BeginUp, ProvisionStage, Provision, AfterProvision, Deploy + 100 DeployHost items, AfterDeploy,
    // 120 x (Wait, Poll, Choice), FinishUp.
    expect(transitions).toBe(6 + 100 + 120 * 3 + 1);
  });

  it("polling cost does not grow with the fleet", async () => {
    const small = await countTransitions(5, 10);
    const large = await countTransitions(40, 10);
    expect(large.transitions - small.transitions).toBe(35);
  });

  it("a provision run stops after provisioning: five transitions whatever the fleet, no deploy, no poll", async () => {
    for (const hosts of [1, 50]) {
      const { transitions, polls, tasks } = await countTransitions(hosts, 120, PROVISION_ONLY);
      // BeginUp, ProvisionStage, Provision, AfterProvision, FinishUp.
      expect(transitions).toBe(5);
      expect(polls).toBe(0);
      expect(tasks).toEqual(["BeginUp", "Provision", "FinishUp"]);
    }
  });
});

describe("stages (--only / --skip): the workflow runs exactly the stages BeginUp says", () => {
  const run = (stages: Partial<Flags>) => countTransitions(3, 2, { ...ALL, ...stages });
  const polled = (tasks: string[]) => tasks.filter((t) => t === "Poll").length;

  it("every stage: provision, deploy each host, poll until done, finish", async () => {
    const r = await run({});
    expect(r.tasks.filter((t) => t !== "DeployHost" && t !== "Poll")).toEqual([
      "BeginUp",
      "Provision",
      "FinishUp",
    ]);
    expect(r.deployed.sort()).toEqual(["h0", "h1", "h2"]);
    expect(polled(r.tasks)).toBe(2);
  });

  it("--skip wait: deploys and ends without one poll (three transitions fewer per poll saved)", async () => {
    const r = await run({ wait: false });
    expect(r.deployed.sort()).toEqual(["h0", "h1", "h2"]);
    expect(polled(r.tasks)).toBe(0);
    expect(r.tasks.at(-1)).toBe("FinishUp");
    // BeginUp, ProvisionStage, Provision, AfterProvision, Deploy + 3 items, AfterDeploy, FinishUp.
    expect(r.transitions).toBe(6 + 3 + 1);
  });

  it("--skip provision: no Provision task, the recorded hosts are deployed and waited for", async () => {
    const r = await run({ provision: false });
    expect(r.tasks).not.toContain("Provision");
    expect(r.deployed.sort()).toEqual(["h0", "h1", "h2"]);
    expect(polled(r.tasks)).toBe(2);
  });

  it("--only deploy: neither Provision nor a poll", async () => {
    const r = await run({ provision: false, wait: false, publish: false });
    expect(r.tasks.filter((t) => t !== "DeployHost")).toEqual(["BeginUp", "FinishUp"]);
    expect(r.deployed).toHaveLength(3);
  });

  it("--only wait: polls what is building, deploys nothing", async () => {
    const r = await run({ provision: false, deploy: false, publish: false });
    expect(r.deployed).toEqual([]);
    expect(r.tasks.filter((t) => t !== "Poll")).toEqual(["BeginUp", "FinishUp"]);
    expect(polled(r.tasks)).toBe(2);
  });

  it("--only publish: straight from BeginUp to FinishUp (which publishes)", async () => {
    const r = await run({ provision: false, deploy: false, wait: false });
    expect(r.tasks).toEqual(["BeginUp", "FinishUp"]);
    // BeginUp, ProvisionStage, RecordedHosts, AfterProvision, FinishUp.
    expect(r.transitions).toBe(5);
  });
});
