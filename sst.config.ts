/// <reference path="./.sst/platform/config.d.ts" />

/**
 * labfleet on AWS. This file only wires: what each function is, may do and is given lives in
 * infra/permissions.ts (plain data the tests check), the workflows are the ASL files in stepfunctions/.
 * docs/deploy-aws.md walks through deploying, using and removing it.
 */
export default $config({
  app(input) {
    return {
      name: "labfleet",
      home: "aws",
      removal: input?.stage === "production" ? "retain" : "remove",
      protect: input?.stage === "production",
    };
  },
  async run() {
    const { readFileSync } = await import("node:fs");
    const { join } = await import("node:path");
    const infra = await import("./infra/permissions.ts");
    const web = await import("./infra/web.ts");
    const { CLOUD_ENV, LINKED_SECRETS, SECRET_NOT_SET } = await import("./shared/cloud/env.ts");

    const app = $app.name;
    const stage = $app.stage;
    const named = infra.names(app, stage);
    const partition = aws.getPartitionOutput().partition;
    const region = aws.getRegionOutput().region;
    const account = aws.getCallerIdentityOutput().accountId;
    const known = $resolve({ partition, region, account });
    /** An ARN of something with a fixed name, from an infra template. */
    const arnOf = (template: string) =>
      known.apply((k) => infra.fill(template, { ...k, app, stage, table: "" }));

    // The one table, as shared/store/table.ts creates it locally: pk/sk, gsi1, TTL on expiresAt.
    const table = new sst.aws.Dynamo("Table", {
      fields: { pk: "string", sk: "string", gsi1pk: "string", gsi1sk: "string" },
      primaryIndex: { hashKey: "pk", rangeKey: "sk" },
      globalIndexes: { gsi1: { hashKey: "gsi1pk", rangeKey: "gsi1sk" } },
      ttl: "expiresAt",
      // New event records go to the stage's bus through the forwarder below.
      stream: "new-image",
      deletionProtection: stage === "production",
    });

    // `npx sst secret set NAME VALUE --stage STAGE`. AccessKey and InstructorToken must be set before the
    // first deploy; the others may stay unset until a workshop needs them (SSH hosts, OAuth sign-in).
    const optional = new Set<string>(["SshPrivateKey", "GithubClientSecret", "GoogleClientSecret"]);
    const secrets = Object.fromEntries(
      LINKED_SECRETS.map((name) => [
        name,
        optional.has(name) ? new sst.Secret(name, SECRET_NOT_SET) : new sst.Secret(name),
      ]),
    ) as Record<(typeof LINKED_SECRETS)[number], sst.Secret>;

    // EC2 lab hosts: the SSM agent and the workshop secret parameters, nothing else (students are root there).
    const hostRole = new aws.iam.Role("HostRole", {
      name: named.hostRole,
      description: "labfleet lab hosts: the SSM agent and this stage's workshop secret parameters",
      assumeRolePolicy: JSON.stringify({
        Version: "2012-10-17",
        Statement: [
          { Effect: "Allow", Principal: { Service: "ec2.amazonaws.com" }, Action: "sts:AssumeRole" },
        ],
      }),
    });
    new aws.iam.RolePolicy("HostRolePolicy", {
      role: hostRole.id,
      policy: known.apply((k) => infra.policyDocument(infra.HOST_ROLE, { ...k, app, stage, table: "" })),
    });
    const hostProfile = new aws.iam.InstanceProfile("HostProfile", {
      name: named.hostRole,
      role: hostRole.name,
    });

    // The TTL schedules: one-time schedules in this stage's group invoke the sweep function, which fires the
    // workshop's schedule record (shared/cloud/scheduler.ts says why not the state machine).
    const sweepArn = arnOf(`arn:{partition}:lambda:{region}:{account}:function:${named.sweepFunction}`);
    new aws.scheduler.ScheduleGroup("ScheduleGroup", { name: named.scheduleGroup });
    const schedulerRole = new aws.iam.Role("SchedulerRole", {
      name: named.schedulerRole,
      description: "labfleet TTL schedules: invoke the sweep function",
      assumeRolePolicy: account.apply((id) =>
        JSON.stringify({
          Version: "2012-10-17",
          Statement: [
            {
              Effect: "Allow",
              Principal: { Service: "scheduler.amazonaws.com" },
              Action: "sts:AssumeRole",
              Condition: { StringEquals: { "aws:SourceAccount": id } },
            },
          ],
        }),
      ),
    });
    new aws.iam.RolePolicy("SchedulerRoleInvoke", {
      role: schedulerRole.id,
      policy: $resolve({ k: known, sweep: sweepArn }).apply(({ k, sweep }) =>
        infra.policyDocument(infra.schedulerRole(sweep), { ...k, app, stage, table: "" }),
      ),
    });

    // The HTTP APIs (infra/web.ts) are made before the functions, and routed to them after: DeployHost writes the
    // instructor API's URL into the push settings of hosts that push (CLOUD_ENV.hostApiUrl), and the API's URL
    // does not depend on the function it routes to.
    const domains = web.domainsFrom(process.env);
    const httpApi = (name: import("./infra/web.ts").WebApiName) => {
      const domain = domains[name];
      // Route settings may only name routes that exist: the stage is made once the routes are.
      let routesMade: (routes: $util.Resource[]) => void = () => {};
      const routes = new Promise<$util.Resource[]>((resolve) => {
        routesMade = resolve;
      });
      const gateway = new sst.aws.ApiGatewayV2(`${name}Http`, {
        cors: false,
        ...(domain
          ? {
              domain: domain.cert
                ? { name: domain.name, dns: false as const, cert: domain.cert }
                : domain.name,
            }
          : {}),
        transform: {
          stage: (args, opts) => {
            Object.assign(args, web.stageSettings(name));
            args.accessLogSettings = $output(args.accessLogSettings).apply((settings) => ({
              destinationArn: settings?.destinationArn ?? "",
              format: web.ACCESS_LOG_FORMAT,
            }));
            opts.dependsOn = routes;
          },
        },
      });
      return {
        url: gateway.url,
        /** Every route of the API to its function, then its stage. */
        routeTo: (target: sst.aws.Function) =>
          routesMade(web.routeKeysOf(name).map((key) => gateway.route(key, target.arn))),
      };
    };
    const apiHttp = httpApi("Api");

    const refs = $resolve({ partition, region, account, table: table.arn }).apply((r) => ({
      ...r,
      app,
      stage,
    }));
    const values: Record<string, $util.Input<string>> = {
      [CLOUD_ENV.table]: table.name,
      [CLOUD_ENV.stage]: stage,
      [CLOUD_ENV.upStateMachineArn]: arnOf(
        `arn:{partition}:states:{region}:{account}:stateMachine:${named.upStateMachine}`,
      ),
      [CLOUD_ENV.teardownStateMachineArn]: arnOf(
        `arn:{partition}:states:{region}:{account}:stateMachine:${named.teardownStateMachine}`,
      ),
      [CLOUD_ENV.rolloutStateMachineArn]: arnOf(
        `arn:{partition}:states:{region}:{account}:stateMachine:${named.rolloutStateMachine}`,
      ),
      [CLOUD_ENV.execStateMachineArn]: arnOf(
        `arn:{partition}:states:{region}:{account}:stateMachine:${named.execStateMachine}`,
      ),
      [CLOUD_ENV.hostInstanceProfileArn]: hostProfile.arn,
      [CLOUD_ENV.scheduleGroup]: named.scheduleGroup,
      [CLOUD_ENV.schedulerRoleArn]: schedulerRole.arn,
      [CLOUD_ENV.scheduleTargetArn]: sweepArn,
      [CLOUD_ENV.eventBus]: named.eventBus,
      [CLOUD_ENV.checksFunction]: named.checksFunction,
      [CLOUD_ENV.hostApiUrl]: apiHttp.url,
    };

    const fn = (
      name: import("./infra/permissions.ts").FunctionName,
      extra: Record<string, $util.Input<string>> = {},
    ) => {
      const spec = infra.specOf(name);
      const all = { ...values, ...extra };
      return new sst.aws.Function(name, {
        ...(spec.fixedName ? { name: named[spec.fixedName] } : {}),
        handler: spec.handler,
        description: spec.description,
        runtime: "nodejs22.x",
        timeout: spec.timeout,
        memory: spec.memory,
        environment: Object.fromEntries(
          infra.envNamesOf(name).map((n) => {
            const value = all[n];
            if (value === undefined) throw new Error(`sst.config.ts gives ${name} no value for ${n}`);
            return [n, value];
          }),
        ),
        link: spec.secrets.map((s) => secrets[s]),
        permissions: refs.apply((r) => infra.resolveStatements(name, r)),
        // ssh2 carries optional native addons esbuild cannot bundle: installed beside the bundle instead.
        nodejs: { install: infra.installOf(name) },
      });
    };

    // One Lambda per Task function; the state machines invoke them and nothing else.
    const tasks = Object.fromEntries(infra.TASK_FUNCTIONS.map((name) => [name, fn(name)]));
    const taskArns = $resolve(Object.fromEntries(Object.entries(tasks).map(([name, f]) => [name, f.arn])));
    const machineRole = new aws.iam.Role("StateMachineRole", {
      description: "labfleet workflows: invoke the task functions",
      assumeRolePolicy: account.apply((id) =>
        JSON.stringify({
          Version: "2012-10-17",
          Statement: [
            {
              Effect: "Allow",
              Principal: { Service: "states.amazonaws.com" },
              Action: "sts:AssumeRole",
              Condition: { StringEquals: { "aws:SourceAccount": id } },
            },
          ],
        }),
      ),
    });
    const invoke = new aws.iam.RolePolicy("StateMachineInvoke", {
      role: machineRole.id,
      policy: $resolve({ k: known, arns: taskArns }).apply(({ k, arns }) =>
        infra.policyDocument(infra.stateMachineRole(Object.values(arns)), { ...k, app, stage, table: "" }),
      ),
    });
    const machines: { arn: $util.Output<string> }[] = [];
    const machineNames = {
      up: ["UpStateMachine", named.upStateMachine],
      teardown: ["TeardownStateMachine", named.teardownStateMachine],
      rollout: ["RolloutStateMachine", named.rolloutStateMachine],
      exec: ["ExecStateMachine", named.execStateMachine],
    } as const;
    for (const which of ["up", "teardown", "rollout", "exec"] as const) {
      const asl = readFileSync(join($cli.paths.root, "stepfunctions", `${which}.asl.json`), "utf8");
      const machine = new aws.sfn.StateMachine(
        machineNames[which][0],
        {
          name: machineNames[which][1],
          type: "STANDARD",
          roleArn: machineRole.arn,
          definition: taskArns.apply((arns) => infra.substituteFunctionArns(asl, arns)),
        },
        { dependsOn: [invoke] },
      );
      machines.push(machine);
    }

    // A run whose execution fails, times out or is aborted outside labfleet's own steps is failed with the
    // execution's error, so no run stays "running" forever (Step Functions' status change events).
    const reconcile = fn("ReconcileRun");
    const ended = new aws.cloudwatch.EventRule("ExecutionEnded", {
      description: "labfleet: executions of this stage's workflows that failed, timed out or were aborted",
      eventPattern: $resolve(machines.map((m) => m.arn)).apply((arns) =>
        JSON.stringify(infra.executionEndedPattern(arns)),
      ),
    });
    new aws.cloudwatch.EventTarget("ExecutionEndedTarget", { rule: ended.name, arn: reconcile.arn });
    new aws.lambda.Permission("ExecutionEndedInvoke", {
      action: "lambda:InvokeFunction",
      function: reconcile.name,
      principal: "events.amazonaws.com",
      sourceArn: ended.arn,
    });

    // The sweeper: every 5 minutes, and the target of each workshop's TTL schedule.
    const sweep = fn("Sweep");
    new sst.aws.CronV2("Sweeper", { function: sweep, schedule: "rate(5 minutes)" });

    // Workshop events: the table's new event records go to the stage's bus (subscribe with source "labfleet").
    new aws.cloudwatch.EventBus("Events", { name: named.eventBus });
    const forward = fn("ForwardEvents");
    table.subscribe("EventRecords", forward.arn, {
      filters: [structuredClone(infra.EVENT_RECORDS_FILTER) as Record<string, unknown>],
    });

    // "Check my work": the portal invokes RunChecks by its fixed name (infra/permissions.ts, invokeChecks).
    fn("RunChecks");
    // The web: the portal (students) and the instructor API and console, each behind an HTTP API of its own
    // (infra/web.ts): its stage's throttling in front of the function, a custom domain when the stage sets one.
    const portalHttp = httpApi("Portal");
    portalHttp.routeTo(fn("Portal"));
    apiHttp.routeTo(fn("Api", { [CLOUD_ENV.portalUrl]: portalHttp.url }));

    return { api: apiHttp.url, portal: portalHttp.url, table: table.name };
  },
});
