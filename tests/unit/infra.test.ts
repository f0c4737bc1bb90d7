import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { describe, expect, it } from "vitest";
import {
  type Condition,
  EVENT_RECORDS_FILTER,
  envNamesOf,
  executionEndedPattern,
  FUNCTIONS,
  type FunctionName,
  fill,
  functionPlaceholders,
  functionPolicy,
  GRANTS,
  type GrantName,
  HOST_ROLE,
  MANAGED_BY,
  names,
  PORTAL_LEADING_KEYS,
  policyDocument,
  type Refs,
  resolveStatements,
  STAGE_TAG_KEY,
  type Statement,
  schedulerRole,
  specOf,
  stateMachineRole,
  statementsOf,
  substituteFunctionArns,
  TASK_FUNCTIONS,
  UNSCOPED_ACTIONS,
} from "../../infra/permissions.ts";
import { CLOUD_ENV, LINKED_SECRETS } from "../../shared/cloud/env.ts";
import { workshopSecretsParameter } from "../../shared/cloud/secret-parameters.ts";
import { OWNER_TAG, STAGE_TAG } from "../../shared/providers/aws.ts";
import { createStore } from "../../shared/store/entities.ts";
import { TABLE_KEYS } from "../../shared/store/table.ts";
import { allStates, loadDefinition } from "../../stepfunctions/definitions.ts";
import { taskFunctions } from "../../stepfunctions/handlers.ts";

const root = join(import.meta.dirname, "..", "..");
const read = (path: string) => readFileSync(join(root, path), "utf8");
const aslFiles = readdirSync(join(root, "stepfunctions")).filter((f) => f.endsWith(".asl.json"));
const allFunctions = Object.keys(FUNCTIONS) as FunctionName[];
const refs: Refs = {
  partition: "aws",
  region: "eu-west-1",
  account: "123456789012",
  stage: "test",
  app: "labfleet",
  table: "arn:aws:dynamodb:eu-west-1:123456789012:table/labfleet-test-TableTable",
};

/** Glob match as IAM's StringLike does it (`*` any run, `?` one character). */
function like(pattern: string, value: string): boolean {
  const re = pattern
    .replace(/[.+^${}()|[\]\\]/g, "\\$&")
    .replace(/\*/g, ".*")
    .replace(/\?/g, ".");
  return new RegExp(`^${re}$`).test(value);
}

const READ_ONLY =
  /^(ec2:Describe|ssm:Describe|ssm:Get|servicequotas:Get|states:Describe|states:GetExecution|dynamodb:(Get|BatchGet|Query|ConditionCheck)|scheduler:Get)/;
const isMutation = (action: string) => !READ_ONLY.test(action);
const managedConditions = new Set([
  `aws:ResourceTag/${MANAGED_BY.key}`,
  `aws:RequestTag/${MANAGED_BY.key}`,
  `ssm:resourceTag/${MANAGED_BY.key}`,
]);
/** The stage condition that goes with a ManagedBy condition: same operator, same key prefix, `{stage}`. */
const stageVariableFor = (managedByVariable: string) =>
  managedByVariable.replace(`/${MANAGED_BY.key}`, `/${STAGE_TAG_KEY}`);
const allGrantStatements = (Object.keys(GRANTS) as GrantName[]).flatMap((g) =>
  (GRANTS[g] as Statement[]).map((s) => ({ grant: g, s })),
);
/** Every string in a JSON value. */
const stringsOf = (value: unknown): string[] =>
  typeof value === "string"
    ? [value]
    : Array.isArray(value)
      ? value.flatMap(stringsOf)
      : value && typeof value === "object"
        ? Object.entries(value).flatMap(([k, v]) => [k, ...stringsOf(v)])
        : [];
const conditionedOnManagedBy = (s: Statement) =>
  (s.conditions ?? []).some(
    (c: Condition) =>
      managedConditions.has(c.variable) && c.test === "StringEquals" && c.values.join() === MANAGED_BY.value,
  );
/** The EC2 resource type of an ARN (`instance`, `image`, ...), if it is one. */
const ec2Type = (arn: string) =>
  /^arn:\{partition\}:ec2:\{region\}:(?:\{account\})?:([a-z-]+)\/\*$/.exec(arn)?.[1];

describe("every Task state has its function", () => {
  it.each(aslFiles)(
    `%s: each \${XFunction} is a deployed function with a handler export and a source file`,
    async (file) => {
      const lambda = (await import("../../functions/lambda.ts")) as Record<string, unknown>;
      const placeholders = functionPlaceholders(read(`stepfunctions/${file}`));
      expect(placeholders.length).toBeGreaterThan(0);
      for (const key of placeholders) {
        expect(TASK_FUNCTIONS, `${file}: \${${key}Function}`).toContain(key);
        const spec = specOf(key as FunctionName);
        expect(spec.handler).toBe(`functions/lambda.${key}`);
        expect(typeof lambda[key], `functions/lambda.ts exports ${key}`).toBe("function");
        expect(existsSync(join(root, spec.source)), spec.source).toBe(true);
      }
      // Every Task of the definition names its function through a placeholder: none points at a fixed ARN.
      const name = file.replace(".asl.json", "") as "up" | "teardown";
      for (const [state, def] of allStates(loadDefinition(name))) {
        if (def.Type !== "Task") continue;
        expect(def.Parameters?.FunctionName, `${file}: ${state}`).toMatch(/^\$\{\w+Function\}$/);
      }
    },
  );

  it("deploys exactly the Task functions the local executor runs, plus the sweeper and the web", async () => {
    expect([...TASK_FUNCTIONS].sort()).toEqual(Object.keys(taskFunctions).sort());
    const used = new Set(aslFiles.flatMap((f) => functionPlaceholders(read(`stepfunctions/${f}`))));
    expect([...used].sort()).toEqual([...TASK_FUNCTIONS].sort());
    const lambda = await import("../../functions/lambda.ts");
    expect(Object.keys(lambda).sort()).toEqual(
      [...TASK_FUNCTIONS, "Sweep", "ForwardEvents", "ReconcileRun", "RunChecks"].sort(),
    );
    const web = await import("../../web/lambda.ts");
    expect(Object.keys(web).sort()).toEqual(["api"]);
    const portal = await import("../../web/portal-lambda.ts");
    expect(Object.keys(portal).sort()).toEqual(["portal"]);
    for (const name of allFunctions) {
      const [file, exported] = specOf(name).handler.split(".");
      expect(existsSync(join(root, `${file}.ts`)), `${name}: ${file}.ts`).toBe(true);
      expect(exported, name).toMatch(/^\w+$/);
      expect(existsSync(join(root, specOf(name).source)), specOf(name).source).toBe(true);
    }
  });

  it("substitutes every placeholder with its function's ARN and refuses an unknown one", () => {
    const arns = Object.fromEntries(
      TASK_FUNCTIONS.map((n) => [n, `arn:aws:lambda:eu-west-1:123456789012:function:labfleet-test-${n}`]),
    );
    for (const file of aslFiles) {
      const out = substituteFunctionArns(read(`stepfunctions/${file}`), arns);
      expect(out).not.toContain("${");
      const def = JSON.parse(out) as Parameters<typeof allStates>[0];
      for (const [, state] of allStates(def)) {
        if (state.Type !== "Task") continue;
        expect(state.Resource).toBe("arn:aws:states:::lambda:invoke");
        expect(Object.values(arns)).toContain(state.Parameters?.FunctionName);
      }
    }
    expect(() => substituteFunctionArns(`{"FunctionName": "\${NopeFunction}"}`, arns)).toThrow(
      `the ASL names \${NopeFunction}, which is not a deployed function`,
    );
  });
});

describe("every function's IAM is scoped", () => {
  it("tags what it checks with the provider's own ownership and stage tags", () => {
    expect(MANAGED_BY).toEqual(OWNER_TAG);
    expect(STAGE_TAG_KEY).toBe(STAGE_TAG);
  });

  it("conditions every ManagedBy condition on this stage's tag too, with the same operator and key", () => {
    const managed = allGrantStatements.filter(({ s }) => conditionedOnManagedBy(s));
    // Launching, tagging, terminating, retagging, the groups (change and open), SSM commands.
    expect(managed.map(({ s }) => s.sid).sort()).toEqual(
      [
        "ChangeManagedGroup",
        "CreateTaggedGroup",
        "OpenManagedGroup",
        "RetagManaged",
        "RunTaggedInstances",
        "SendToManagedInstances",
        "TagAtCreation",
        "TerminateManaged",
      ].sort(),
    );
    for (const { grant, s } of managed) {
      for (const c of (s.conditions ?? []).filter((x) => managedConditions.has(x.variable))) {
        const stage = (s.conditions ?? []).filter((x) => x.variable === stageVariableFor(c.variable));
        expect(stage, `${grant}.${s.sid}: ${c.variable}`).toEqual([
          { test: "StringEquals", variable: stageVariableFor(c.variable), values: ["{stage}"] },
        ]);
      }
    }
    // And no stage condition without its ManagedBy one.
    for (const { grant, s } of allGrantStatements) {
      for (const c of (s.conditions ?? []).filter((x) => x.variable.endsWith(`/${STAGE_TAG_KEY}`))) {
        const managedBy = c.variable.replace(`/${STAGE_TAG_KEY}`, `/${MANAGED_BY.key}`);
        expect(
          (s.conditions ?? []).some((x) => x.variable === managedBy),
          `${grant}.${s.sid}: ${c.variable}`,
        ).toBe(true);
      }
    }
  });

  it.each(allFunctions)(
    "%s: resolved statements and its policy document name the stage, no placeholder left",
    (name) => {
      const resolved = resolveStatements(name, refs);
      const stageConditions = resolved.flatMap((s) =>
        (s.conditions ?? []).filter((c) => c.variable.endsWith(`/${STAGE_TAG_KEY}`)),
      );
      const managedBy = resolved.flatMap((s) =>
        (s.conditions ?? []).filter((c) => managedConditions.has(c.variable)),
      );
      expect(stageConditions).toHaveLength(managedBy.length);
      for (const c of stageConditions) expect(c.values, `${name}: ${c.variable}`).toEqual(["test"]);
      for (const text of stringsOf(resolved)) expect(text, name).not.toMatch(/[{}]/);

      const doc = JSON.parse(functionPolicy(name, refs)) as {
        Statement: { Condition?: Record<string, Record<string, string[]>> }[];
      };
      expect(functionPolicy(name, refs)).toBe(policyDocument(statementsOf(name), refs));
      for (const text of stringsOf(doc)) expect(text, name).not.toMatch(/[{}]/);
      const docStage = doc.Statement.flatMap((st) =>
        Object.values(st.Condition ?? {}).flatMap((byKey) =>
          Object.entries(byKey).filter(([k]) => k.endsWith(`/${STAGE_TAG_KEY}`)),
        ),
      );
      expect(docStage.map(([, v]) => v)).toEqual(stageConditions.map(() => ["test"]));
    },
  );

  it.each(allFunctions)(
    "%s: no wildcard action, no unconditioned mutation of anything labfleet does not own",
    (name) => {
      const statements = statementsOf(name);
      expect(statements.length).toBeGreaterThan(0);
      for (const s of statements) {
        expect(s.resources.length, s.sid).toBeGreaterThan(0);
        for (const action of s.actions) {
          expect(action, s.sid).toMatch(/^[a-z0-9-]+:[A-Za-z]+$/); // no `*`, no `service:Prefix*`
          if (s.resources.includes("*")) {
            expect(UNSCOPED_ACTIONS[action], `${s.sid}: ${action} on "*"`).toBeDefined();
          }
        }
        expect(s.resources.includes("*") && s.resources.length > 1, s.sid).toBe(false);
        const mutations = s.actions.filter(isMutation);
        if (mutations.length === 0 || s.resources.includes("*")) continue;
        for (const resource of s.resources) {
          const type = ec2Type(resource);
          if (type === undefined) continue;
          // labfleet's own instances, volumes and groups: only with the ManagedBy tag (in the request or on it).
          const owned = ["instance", "volume", "security-group"].includes(type);
          const attachByo = type === "security-group" && s.actions.join() === "ec2:RunInstances";
          if (owned && !attachByo) {
            expect(conditionedOnManagedBy(s), `${s.sid}: ${mutations.join(",")} on ${resource}`).toBe(true);
          } else {
            // What a launch uses: an image, a subnet, a VPC, the network interface it makes, a BYO group.
            expect(
              ["image", "subnet", "vpc", "network-interface", "security-group"],
              `${s.sid}: ${resource}`,
            ).toContain(type);
            expect(
              s.actions.every((a) => ["ec2:RunInstances", "ec2:CreateSecurityGroup"].includes(a)),
              s.sid,
            ).toBe(true);
          }
        }
      }
    },
  );

  it("creates tags only at creation or on labfleet's resources, and passes only its own roles", () => {
    const all = allFunctions.flatMap(statementsOf);
    for (const s of all.filter((x) => x.actions.includes("ec2:CreateTags"))) {
      const vars = (s.conditions ?? []).map((c) => c.variable);
      const atCreation = (s.conditions ?? []).some(
        (c) =>
          c.variable === "ec2:CreateAction" &&
          c.values.every((v) => ["RunInstances", "CreateSecurityGroup"].includes(v)),
      );
      expect(atCreation || vars.includes(`aws:ResourceTag/${MANAGED_BY.key}`), s.sid).toBe(true);
      expect(conditionedOnManagedBy(s), s.sid).toBe(true);
    }
    for (const s of all.filter((x) => x.actions.includes("iam:PassRole"))) {
      expect(s.actions).toEqual(["iam:PassRole"]);
      expect(s.resources).toHaveLength(1);
      expect(s.resources[0]).toMatch(
        /^arn:\{partition\}:iam::\{account\}:role\/\{app\}-\{stage\}-(host|scheduler)$/,
      );
      expect(s.conditions?.map((c) => c.variable)).toEqual(["iam:PassedToService"]);
    }
  });

  it("sends SSM commands only to labfleet's instances, with AWS-RunShellScript", () => {
    const send = GRANTS.ssmCommands.filter((s) => s.actions.includes("ssm:SendCommand"));
    expect(send.map((s) => [s.resources, conditionedOnManagedBy(s)])).toEqual([
      [["arn:{partition}:ec2:{region}:{account}:instance/*"], true],
      [["arn:{partition}:ssm:{region}::document/AWS-RunShellScript"], false],
    ]);
  });

  it("starts and stops executions of this stage's state machines only; exec jobs are started by the Api alone", () => {
    const states = allFunctions
      .flatMap(statementsOf)
      .filter((s) => s.actions.some((a) => a.startsWith("states:")));
    const machines = names("labfleet", "test");
    for (const s of states) {
      for (const r of s.resources.map((x) => fill(x, refs))) {
        expect(
          [
            machines.upStateMachine,
            machines.teardownStateMachine,
            machines.rolloutStateMachine,
            machines.execStateMachine,
          ].some(
            (m) =>
              r === `arn:aws:states:eu-west-1:123456789012:stateMachine:${m}` ||
              r === `arn:aws:states:eu-west-1:123456789012:execution:${m}:*`,
          ),
          r,
        ).toBe(true);
      }
    }
    const starters = allFunctions.filter((n) =>
      statementsOf(n).some((s) => s.actions.includes("states:StartExecution")),
    );
    expect(starters.sort()).toEqual(["Api", "Sweep"]);
    expect(specOf("Portal").grants).not.toContain("workflowsStart");
    const execStarters = allFunctions.filter((n) =>
      statementsOf(n).some((s) =>
        s.resources.some((r) => fill(r, refs).endsWith(`:${machines.execStateMachine}`)),
      ),
    );
    expect(execStarters).toEqual(["Api"]);
  });

  it("resolves every template to concrete ARNs", () => {
    for (const name of allFunctions) {
      for (const s of resolveStatements(name, refs)) {
        for (const r of s.resources) expect(r, `${name}: ${r}`).not.toMatch(/[{}]/);
      }
    }
    expect(() => fill("arn:{partition}:x:{nope}", refs)).toThrow("unknown placeholder {nope}");
  });

  it("gives each secret only to the functions that read it", () => {
    const holders = (secret: string) =>
      allFunctions.filter((n) => specOf(n).secrets.includes(secret as never));
    expect(holders("InstructorToken")).toEqual(["Api"]);
    expect(holders("GithubClientSecret")).toEqual(["Api"]);
    expect(holders("GoogleClientSecret")).toEqual(["Api"]);
    // Every function that reads records; the event forwarder only reads the stream's event images.
    expect(holders("AccessKey")).toEqual(allFunctions.filter((n) => n !== "ForwardEvents"));
    expect(holders("SshPrivateKey").sort()).toEqual(
      allFunctions.filter((n) => specOf(n).grants.includes("ssmCommands")).sort(),
    );
  });
});

describe("the lab hosts' role", () => {
  it("has the SSM agent's calls and this stage's workshop secret parameters, not every parameter", () => {
    for (const s of HOST_ROLE) {
      for (const action of s.actions)
        expect(action, s.sid).toMatch(/^(ssm|ec2messages|ssmmessages):[A-Za-z]+$/);
      if (s.resources.includes("*")) {
        expect(
          s.actions.filter((a) => /^ssm:Get|Parameter|Command|Document/.test(a)),
          s.sid,
        ).toEqual([]);
      }
    }
    const reads = HOST_ROLE.filter((s) => s.actions.some((a) => a.includes("Parameter")));
    expect(reads.map((s) => [s.actions, s.resources])).toEqual([
      [
        ["ssm:GetParameter"],
        ["arn:{partition}:ssm:{region}:{account}:parameter/labfleet/{stage}/workshops/*"],
      ],
    ]);
    // The name the control plane writes is the one the hosts may read, and the one its grant covers.
    const name = workshopSecretsParameter("test", "k8s-intro");
    const arn = `arn:aws:ssm:eu-west-1:123456789012:parameter${name}`;
    expect(like(fill(reads[0]?.resources[0] as string, refs), arn)).toBe(true);
    expect(like(fill(GRANTS.secretParameters[0]?.resources[0] as string, refs), arn)).toBe(true);
    expect(read("sst.config.ts")).not.toContain("AmazonSSMManagedInstanceCore");
  });

  it("reads the operator secrets wherever the domain does: the check before a run, deploys, the API", () => {
    // checkSecrets and publishSecretParameter (BeginUp), checkSecrets (startRun in the API), secretsForStart
    // (DeployHost) and the redaction of logs (diagnose, host failures) read them; a function that calls them
    // without the grant fails in AWS only.
    const readers = allFunctions.filter((n) => specOf(n).grants.includes("operatorSecrets"));
    for (const fn of ["BeginUp", "DeployHost", "RecordHostFailure", "Poll", "Api"])
      expect(readers, fn).toContain(fn);
  });

  it("writes and deletes the secrets parameter where the runs do it", () => {
    const holders = allFunctions.filter((n) => specOf(n).grants.includes("secretParameters"));
    // BeginUp writes it once per run (no host's deploy does: they only name it); the ends of runs delete it,
    // ReconcileRun too when it fails a run whose execution ended outside its steps.
    expect(holders.sort()).toEqual([
      "BeginRollout",
      "BeginUp",
      "FailRollout",
      "FailRun",
      "FailTeardown",
      "FinishRollout",
      "FinishTeardown",
      "FinishUp",
      "ReconcileRun",
    ]);
  });

  it("renders statements as an IAM policy document, conditions grouped by operator", () => {
    const doc = JSON.parse(policyDocument(GRANTS.hostsLaunch, refs)) as {
      Version: string;
      Statement: { Sid: string; Effect: string; Action: string[]; Resource: string[]; Condition?: unknown }[];
    };
    expect(doc.Version).toBe("2012-10-17");
    const tagAtCreation = doc.Statement.find((x) => x.Sid === "TagAtCreation");
    expect(tagAtCreation).toEqual({
      Sid: "TagAtCreation",
      Effect: "Allow",
      Action: ["ec2:CreateTags"],
      Resource: [
        "arn:aws:ec2:eu-west-1:123456789012:instance/*",
        "arn:aws:ec2:eu-west-1:123456789012:volume/*",
        "arn:aws:ec2:eu-west-1:123456789012:security-group/*",
      ],
      Condition: {
        StringEquals: {
          "ec2:CreateAction": ["RunInstances", "CreateSecurityGroup"],
          "aws:RequestTag/ManagedBy": ["labfleet"],
          "aws:RequestTag/labfleet-stage": ["test"],
        },
      },
    });
  });
});

describe("the grants and roles of the run's edges", () => {
  const holders = (grant: GrantName) => allFunctions.filter((n) => specOf(n).grants.includes(grant));

  it("opens the lab UIs from FinishUp only: finds groups and adds inbound rules to this stage's own", () => {
    expect(holders("openAccess")).toEqual(["FinishUp"]);
    expect(GRANTS.openAccess.map((s) => [s.actions, s.resources])).toEqual([
      [["ec2:DescribeSecurityGroups"], ["*"]],
      [["ec2:AuthorizeSecurityGroupIngress"], ["arn:{partition}:ec2:{region}:{account}:security-group/*"]],
    ]);
    const resolved = resolveStatements("FinishUp", refs).find((s) =>
      s.actions.includes("ec2:AuthorizeSecurityGroupIngress"),
    );
    expect(resolved?.conditions).toEqual([
      { test: "StringEquals", variable: "aws:ResourceTag/ManagedBy", values: ["labfleet"] },
      { test: "StringEquals", variable: "aws:ResourceTag/labfleet-stage", values: ["test"] },
    ]);
    // Closing is the instructor's (the API's securityGroups): FinishUp cannot revoke or delete.
    const finishUp = statementsOf("FinishUp").flatMap((s) => s.actions);
    for (const a of ["ec2:RevokeSecurityGroupIngress", "ec2:DeleteSecurityGroup", "ec2:CreateSecurityGroup"])
      expect(finishUp).not.toContain(a);
  });

  it("reads the account's Lambda settings from BeginUp only, an action AWS grants on * alone", () => {
    expect(holders("lambdaSettings").sort()).toEqual(["BeginRollout", "BeginUp"]);
    expect(GRANTS.lambdaSettings as Statement[]).toEqual([
      { sid: "LambdaConcurrency", actions: ["lambda:GetAccountSettings"], resources: ["*"] },
    ]);
    expect(UNSCOPED_ACTIONS["lambda:GetAccountSettings"]).toMatch(/^read only/);
  });

  it("deploys ReconcileRun as an EventBridge target, not a Task function, with its handler exported", async () => {
    expect(TASK_FUNCTIONS).not.toContain("ReconcileRun");
    expect(Object.keys(taskFunctions)).not.toContain("ReconcileRun");
    const used = aslFiles.flatMap((f) => functionPlaceholders(read(`stepfunctions/${f}`)));
    expect(used).not.toContain("ReconcileRun");
    expect(specOf("ReconcileRun").handler).toBe("functions/lambda.ReconcileRun");
    expect(existsSync(join(root, specOf("ReconcileRun").source))).toBe(true);
    const lambda = (await import("../../functions/lambda.ts")) as Record<string, unknown>;
    expect(typeof lambda.ReconcileRun).toBe("function");
  });

  it("sends ReconcileRun the executions of the given state machines that failed, timed out or were aborted", () => {
    const machines = ["up", "teardown"].map(
      (m) => `arn:aws:states:eu-west-1:123456789012:stateMachine:labfleet-test-${m}`,
    );
    // Step Functions puts "Step Functions Execution Status Change" events (source aws.states) on the default bus.
    expect(executionEndedPattern(machines)).toEqual({
      source: ["aws.states"],
      "detail-type": ["Step Functions Execution Status Change"],
      detail: { status: ["FAILED", "TIMED_OUT", "ABORTED"], stateMachineArn: machines },
    });
  });

  it("lets the state machines invoke the task functions (and their versions) and the scheduler the sweeper only", () => {
    const fn = (n: string) => `arn:aws:lambda:eu-west-1:123456789012:function:labfleet-test-${n}`;
    expect(stateMachineRole([fn("BeginUp"), fn("Poll")])).toEqual([
      {
        sid: "InvokeTasks",
        actions: ["lambda:InvokeFunction"],
        resources: [fn("BeginUp"), `${fn("BeginUp")}:*`, fn("Poll"), `${fn("Poll")}:*`],
      },
    ]);
    expect(schedulerRole(fn("sweep"))).toEqual([
      { sid: "InvokeSweep", actions: ["lambda:InvokeFunction"], resources: [fn("sweep")] },
    ]);
  });

  it("forwards only new event records from the table stream (ElectroDB's entity marker)", () => {
    const store = createStore(new DynamoDBClient({ region: "eu-west-1" }), "t");
    const item = (
      store.event
        .put({
          workshop: "k8s-intro",
          eventId: "01J9Z3Q8V6K1M2N3P4R5S6T7V8",
          type: "host.ready",
          at: "2030-01-01T00:00:00.000Z",
          expiresAt: 1,
        })
        .params() as { Item: Record<string, unknown> }
    ).Item;
    expect(EVENT_RECORDS_FILTER).toEqual({
      eventName: ["INSERT"],
      dynamodb: { NewImage: { __edb_e__: { S: [item.__edb_e__] } } },
    });
    const host = (
      store.host
        .put({
          workshop: "k8s-intro",
          hostId: "lab-01",
          provider: "local",
          state: "ready",
          createdAt: "2030-01-01T00:00:00.000Z",
          updatedAt: "2030-01-01T00:00:00.000Z",
        })
        .params() as { Item: Record<string, unknown> }
    ).Item;
    expect(EVENT_RECORDS_FILTER.dynamodb.NewImage.__edb_e__.S).not.toContain(host.__edb_e__);
  });
});

describe("the portal function", () => {
  const portal = statementsOf("Portal");

  it("has DynamoDB item actions on the table, limited to the portal's partitions, and invoking RunChecks", () => {
    expect(specOf("Portal").grants).toEqual(["portalTable", "invokeChecks"]);
    expect(specOf("Portal").secrets).toEqual(["AccessKey"]);
    // Its one way towards a host: invoke the RunChecks function of this stage, by its fixed name.
    expect(portal.filter((s) => s.sid === "InvokeRunChecks")).toEqual([
      {
        sid: "InvokeRunChecks",
        actions: ["lambda:InvokeFunction"],
        resources: ["arn:{partition}:lambda:{region}:{account}:function:{app}-{stage}-checks"],
      },
    ]);
    expect(names("labfleet", "prod").checksFunction).toBe("labfleet-prod-checks");
    for (const s of portal.filter((s) => s.sid !== "InvokeRunChecks")) {
      expect(
        s.actions.every((a) => a.startsWith("dynamodb:")),
        s.sid,
      ).toBe(true);
      expect(
        s.actions.some((a) => /Scan|Batch|Table|Stream|Export|Import|Index/.test(a)),
        s.sid,
      ).toBe(false);
      expect(s.resources).toEqual(["{table}"]); // the base table only, not its index
      expect(s.conditions?.map((c) => [c.test, c.variable])).toEqual([
        ["ForAllValues:StringLike", "dynamodb:LeadingKeys"],
      ]);
    }
    // The API's URL too, for a BYOD student's join line: an address, not a permission.
    expect(envNamesOf("Portal")).toEqual([
      CLOUD_ENV.table,
      CLOUD_ENV.stage,
      CLOUD_ENV.checksFunction,
      CLOUD_ENV.hostApiUrl,
    ]);
  });

  it("reaches the partitions of every record the portal reads and writes, and writes no workshop or code", () => {
    const store = createStore(new DynamoDBClient({ region: "eu-west-1" }), "t");
    const pkOf = (params: {
      Key?: Record<string, unknown>;
      ExpressionAttributeValues?: Record<string, unknown>;
    }) => String(params.Key?.pk ?? params.ExpressionAttributeValues?.[":pk"]);
    const reads = [
      store.workshop.get({ name: "k8s-intro" }).params(),
      store.portal.get({ workshop: "k8s-intro" }).params(),
      store.portalCode.get({ codeHash: "Zm9v" }).params(),
      store.host.query.byWorkshop({ workshop: "k8s-intro" }).params(),
      store.claim.query.byWorkshop({ workshop: "k8s-intro" }).params(),
      store.claimEmail.get({ workshop: "k8s-intro", emailHash: "e" }).params(),
      store.claimLink.get({ linkHash: "l" }).params(),
      store.rateCounter.get({ key: "addr:203.0.113.9", window: "1" }).params(),
      store.hostKey.get({ workshop: "k8s-intro", hostId: "lab-01" }).params(), // the lab page's host key
    ].map(pkOf);
    const writes = [
      store.claim
        .put({
          workshop: "k8s-intro",
          hostId: "lab-01",
          name: "A",
          emailHash: "e",
          emailSealed: "s",
          pinHash: "p",
          linkHash: "l",
          how: "open",
          claimedAt: "2026-11-30T10:00:00.000Z",
        })
        .params(),
      store.claimEmail.put({ workshop: "k8s-intro", emailHash: "e", hostId: "lab-01" }).params(),
      store.claimLink.put({ linkHash: "l", workshop: "k8s-intro", hostId: "lab-01" }).params(),
      store.rateCounter.upsert({ key: "code:all", window: "1", expiresAt: 1 }).add({ count: 1 }).params(),
    ].map((p) =>
      String(
        (p as { Item?: { pk?: string }; Key?: { pk?: string } }).Item?.pk ??
          (p as { Key?: { pk?: string } }).Key?.pk,
      ),
    );

    for (const pk of reads)
      expect(
        PORTAL_LEADING_KEYS.read.some((p) => like(p, pk)),
        pk,
      ).toBe(true);
    for (const pk of writes)
      expect(
        PORTAL_LEADING_KEYS.write.some((p) => like(p, pk)),
        pk,
      ).toBe(true);
    const workshopPk = pkOf(store.workshop.get({ name: "k8s-intro" }).params());
    const codePk = pkOf(store.portalCode.get({ codeHash: "Zm9v" }).params());
    for (const pk of [workshopPk, codePk]) {
      expect(
        PORTAL_LEADING_KEYS.write.some((p) => like(p, pk)),
        pk,
      ).toBe(false);
    }
    // A partition the portal has no business in (instructor tokens and sessions live in ones like it) is out of reach.
    expect(PORTAL_LEADING_KEYS.read.some((p) => like(p, "$labfleet#tokenhash_abc"))).toBe(false);
  });
  it("cannot reach any other partition: the only others in reach share the workshop's partition", () => {
    const store = createStore(new DynamoDBClient({ region: "eu-west-1" }), "t") as unknown as Record<
      string,
      { schema?: { indexes?: Record<string, { index?: string; pk: { composite: string[] } }> } }
    >;
    const used = [
      "workshop",
      "portal",
      "portalCode",
      "host",
      "claim",
      "claimEmail",
      "claimLink",
      "rateCounter",
      "rateHold",
      "hostKey",
      "queueEntry",
      "queueEmail",
      "queueLink",
      "checkResult",
      "checkPress",
      "joinLink",
    ];
    const inReach: string[] = [];
    for (const [name, entity] of Object.entries(store)) {
      const primary = Object.values(entity?.schema?.indexes ?? {}).find((i) => !i.index);
      const attribute = primary?.pk.composite[0];
      if (!attribute) continue;
      const pk = `$labfleet#${attribute.toLowerCase()}_x`;
      const reachable = PORTAL_LEADING_KEYS.read.some((p) => like(p, pk));
      if (used.includes(name)) expect(reachable, name).toBe(true);
      else if (reachable) inReach.push(`${name}:${attribute}`);
    }
    // Runs and schedules (and anything else keyed by workshop) share the partition the
    // portal needs; instructor sessions, API tokens and the like are out of reach.
    expect(
      inReach.every((e) => e.endsWith(":workshop")),
      inReach.join(", "),
    ).toBe(true);
  });
});

describe("sst.config.ts", () => {
  const config = read("sst.config.ts");

  it("deploys each function of infra/permissions.ts", () => {
    expect(config).toContain("infra.TASK_FUNCTIONS.map((name) => [name, fn(name)])");
    for (const name of allFunctions.filter((n) => !TASK_FUNCTIONS.includes(n))) {
      expect(config, name).toMatch(new RegExp(`fn\\("${name}"`));
    }
    expect(config).toContain("permissions: refs.apply((r) => infra.resolveStatements(name, r))");
    expect(config).toContain("link: spec.secrets.map((s) => secrets[s])");
  });

  it("deploys the project's JSONPath ASL with aws.sfn.StateMachine, never sst.aws.StepFunctions", () => {
    expect(config).toContain("new aws.sfn.StateMachine(");
    expect(config).toContain(`\`\${which}.asl.json\``);
    expect(config).toContain("infra.substituteFunctionArns(asl, arns)");
    expect(config).not.toContain("sst.aws.StepFunctions");
    expect(aslFiles.sort()).toEqual([
      "exec.asl.json",
      "rollout.asl.json",
      "teardown.asl.json",
      "up.asl.json",
    ]);
  });

  it("declares the table as shared/store/table.ts makes it, and links no table (a link grants dynamodb:*)", () => {
    const { partition, sort, gsi1, ttl } = TABLE_KEYS;
    expect(config).toContain(`primaryIndex: { hashKey: "${partition}", rangeKey: "${sort}" }`);
    expect(config).toContain(
      `globalIndexes: { ${gsi1.name}: { hashKey: "${gsi1.partition}", rangeKey: "${gsi1.sort}" } }`,
    );
    expect(config).toContain(`ttl: "${ttl}"`);
    expect(config.match(/link:/g)).toHaveLength(1);
  });

  it("runs the sweeper every 5 minutes and declares every linked secret", () => {
    expect(config).toMatch(
      /new sst\.aws\.CronV2\("Sweeper", \{ function: sweep, schedule: "rate\(5 minutes\)" \}\)/,
    );
    expect(config).toContain("LINKED_SECRETS.map((name) =>");
    expect([...LINKED_SECRETS].sort()).toEqual(
      ["AccessKey", "GithubClientSecret", "GoogleClientSecret", "InstructorToken", "SshPrivateKey"].sort(),
    );
  });

  it("sets each function's environment from the names the cloud runtime reads", () => {
    for (const name of allFunctions) {
      for (const variable of envNamesOf(name)) {
        expect(Object.values(CLOUD_ENV), `${name}: ${variable}`).toContain(variable);
        const key = Object.entries(CLOUD_ENV).find(([, v]) => v === variable)?.[0];
        expect(config, `${name}: ${variable}`).toContain(`[CLOUD_ENV.${key}]`);
      }
    }
    expect(envNamesOf("Api")).toContain(CLOUD_ENV.portalUrl);
    expect(envNamesOf("Provision")).toEqual(
      expect.arrayContaining([
        CLOUD_ENV.hostInstanceProfileArn,
        CLOUD_ENV.scheduleGroup,
        CLOUD_ENV.scheduleTargetArn,
      ]),
    );
    expect(envNamesOf("Poll")).not.toContain(CLOUD_ENV.scheduleGroup);
    // Only the functions that tell hosts where the API is are told its URL: DeployHost (push settings) and the
    // portal (a BYOD join line). sst.config.ts makes the HTTP API before the functions, so no cycle.
    const told = allFunctions.filter((n) => envNamesOf(n).includes(CLOUD_ENV.hostApiUrl));
    expect(told.sort()).toEqual(["DeployHost", "Portal"]);
    expect(config).toContain("[CLOUD_ENV.hostApiUrl]: apiHttp.url");
  });
});
