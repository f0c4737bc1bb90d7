import { existsSync } from "node:fs";
import aslValidator from "asl-validator";
import { StateMachine } from "aws-local-stepfunctions";
import { describe, expect, it } from "vitest";
import { RUN_KINDS } from "../../shared/store/entities.ts";
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

  it("after Provision, a Choice on BeginUp's deploy flag goes to Deploy, or for provision to FinishUp", () => {
    const def = loadDefinition("up");
    expect(def.States.BeginUp?.ResultSelector).toMatchObject({ "deploy.$": "$.Payload.deploy" });
    expect(def.States.Provision?.Next).toBe("AfterProvision");
    expect(def.States.AfterProvision).toMatchObject({
      Type: "Choice",
      Choices: [{ Variable: "$.settings.deploy", BooleanEquals: false, Next: "FinishUp" }],
      Default: "Deploy",
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
async function countTransitions(
  hosts: number,
  pollsUntilReady: number,
  deploy = true,
): Promise<{ transitions: number; polls: number; tasks: string[] }> {
  const def = loadDefinition("up");
  let polls = 0;
  const tasks: string[] = [];
  const stand: Record<string, (p: Record<string, unknown>) => unknown> = {
    BeginUp: () => ({ concurrency: 4, pollSeconds: 60, deadline: "2099-01-01T00:00:00.000Z", deploy }),
    Provision: () => ({ hostIds: Array.from({ length: hosts }, (_, i) => `h${i}`) }),
    DeployHost: (p) => ({ hostId: p.hostId, action: "started" }),
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
  return { transitions, polls, tasks };
}

describe("state transitions (Step Functions bills per transition)", () => {
  it("a 50-host lab polled every minute for two hours stays under 1,000 transitions", async () => {
    const { transitions, polls } = await countTransitions(50, 120);
    expect(polls).toBe(120);
    // BeginUp, Provision, AfterProvision, Deploy + 50 DeployHost items, 120 x (Wait, Poll, Choice), FinishUp.
    expect(transitions).toBe(4 + 50 + 120 * 3 + 1);
    expect(transitions).toBeLessThan(1000);
  });

  it("polling cost does not grow with the fleet", async () => {
    const small = await countTransitions(5, 10);
    const large = await countTransitions(40, 10);
    expect(large.transitions - small.transitions).toBe(35);
  });

  it("a provision run stops after provisioning: four transitions whatever the fleet, no deploy, no poll", async () => {
    for (const hosts of [1, 50]) {
      const { transitions, polls, tasks } = await countTransitions(hosts, 120, false);
      // BeginUp, Provision, AfterProvision, FinishUp.
      expect(transitions).toBe(4);
      expect(polls).toBe(0);
      expect(tasks).toEqual(["BeginUp", "Provision", "FinishUp"]);
    }
  });
});
