import { readFileSync } from "node:fs";
import { join } from "node:path";
import { DynamoDBClient, UpdateTableCommand } from "@aws-sdk/client-dynamodb";
import {
  EVENT_RECORDS_FILTER,
  envNamesOf,
  executionEndedPattern,
  FUNCTIONS,
  type FunctionName,
  type FunctionSpec,
  functionPolicy,
  HOST_ROLE,
  names,
  policyDocument,
  type Refs,
  schedulerRole,
  stateMachineRole,
  substituteFunctionArns,
  TASK_FUNCTIONS,
} from "../../../infra/permissions.ts";
import { HTTP_APIS, routeKeysOf, type WebApiName } from "../../../infra/web.ts";
import type { LambdaBuild } from "../../../scripts/build-lambdas.ts";
import { CLOUD_ENV, type LinkedSecretName } from "../../../shared/cloud/env.ts";
import type { EngineTiming } from "../../../stepfunctions/engine.ts";
import { type DeployedHttpApi, FakeApiGateway } from "./apigateway.ts";
import {
  AwsError,
  accessKeyIdFor,
  arn,
  credentialsFor,
  FAKE_ACCOUNT_ID,
  FAKE_PARTITION,
  FAKE_REGION,
  type PolicyDocument,
  type Principal,
} from "./core.ts";
import { FakeDynamoDb } from "./dynamodb.ts";
import { FakeEc2, type FakeEc2Options } from "./ec2.ts";
import { FakeEventBridge, matches } from "./events.ts";
import { Iam } from "./iam.ts";
import { FakeLambda, lambdaFunctionsFromInfra } from "./lambda.ts";
import { FakeScheduler } from "./scheduler.ts";
import { AwsServer, accessDenied } from "./server.ts";
import { FakeStepFunctions } from "./sfn.ts";
import { FakeSsm, type FakeSsmOptions } from "./ssm.ts";

/**
 * A whole AWS account for the cloud path, as sst.config.ts deploys labfleet into it: the functions of
 * infra/permissions.ts, each running its bundle (scripts/build-lambdas.ts) in Lambda sandboxes with the
 * environment, linked secrets, timeout and memory sst.config.ts gives it, and signing its calls with its own
 * role, whose policy (the statements sst.config.ts gives it) IAM evaluates on every call; the two state machines
 * (the ASL with the functions' ARNs) run by Step Functions with its limits, as their role; the TTL schedules'
 * group and role; the event bus, the table's stream to ForwardEvents, and the rule that sends failed executions
 * to ReconcileRun; EC2 and SSM with instances that are folders on this machine; DynamoDB Local behind IAM.
 *
 * Everything listens on 127.0.0.1. The test acts as the account's administrator (`operator`) when it sets
 * things up or looks at them, and as an instructor through the Api's HTTP API (tests/harness/aws/apigateway.ts),
 * as the CLI would; students reach the Portal's HTTP API.
 */

export const FAKE_APP = "labfleet";

export interface FakeAwsAccountOptions {
  /** A temporary folder for the instances, the sandboxes and the fake commands. */
  dir: string;
  /** DynamoDB Local, and the table the deployment uses (the test creates it; its stream is turned on here). */
  dynamoEndpoint: string;
  table: string;
  stage?: string;
  build: Pick<LambdaBuild, "functions">;
  /** Values of the linked secrets (`npx sst secret set`); unset optional ones are `not-set`. */
  secrets: Partial<Record<LinkedSecretName, string>>;
  /** Shorter timeouts than the deployed ones, per function (a timeout seen in seconds). */
  timeoutMs?: Partial<Record<FunctionName, number>>;
  /** The account's Lambda concurrency (1,000 by default; a new account may have 10). */
  concurrencyLimit?: number;
  /** Step Functions' waits and retries, shortened for tests. */
  timing?: EngineTiming;
  ec2?: Partial<FakeEc2Options>;
  ssm?: Partial<Omit<FakeSsmOptions, "ec2">>;
  /** The On-Demand vCPU quota Service Quotas reports (L-1216C47A). */
  vcpuQuota?: number;
  /** Custom domains of the HTTP APIs (LABFLEET_PORTAL_DOMAIN, LABFLEET_API_DOMAIN); execute-api ones otherwise. */
  domains?: Partial<Record<WebApiName, string>>;
  /** A shorter integration timeout for the HTTP APIs (a timeout seen in seconds). */
  integrationTimeoutMs?: number;
  /** The HTTP APIs' throttling clock (ms): a test may hold it still. */
  throttleClock?: () => number;
}

/** The test's own credentials (DynamoDB Local keeps one database per access key id and region). */
const LOCAL_DYNAMO = { accessKeyId: "local", region: "local" };
const HOST_PROFILE = (stage: string) => names(FAKE_APP, stage).hostRole;

export class FakeAwsAccount {
  readonly stage: string;
  readonly refs: Refs;
  readonly iam = new Iam();
  readonly server: AwsServer;
  readonly ec2: FakeEc2;
  readonly ssm: FakeSsm;
  readonly sfn: FakeStepFunctions;
  readonly lambda: FakeLambda;
  readonly scheduler: FakeScheduler;
  readonly events: FakeEventBridge;
  readonly dynamodb: FakeDynamoDb;
  readonly apigateway: FakeApiGateway;
  /** The deployment's outputs, as `sst deploy` prints them: the HTTP APIs' URLs (https://DOMAIN). */
  apiUrl = "";
  portalUrl = "";
  /** Where the test connects to each HTTP API (http://127.0.0.1:PORT), as if to its URL. */
  apiEndpoint = "";
  portalEndpoint = "";
  /** The HTTP APIs as deployed. */
  readonly httpApis: Partial<Record<WebApiName, DeployedHttpApi>> = {};
  /** Names and ARNs of what the deployment made. */
  readonly deployed: {
    functionName: (fn: FunctionName) => string;
    upStateMachineArn: string;
    teardownStateMachineArn: string;
    rolloutStateMachineArn: string;
    execStateMachineArn: string;
    hostProfileArn: string;
    scheduleGroup: string;
    eventBus: string;
  };
  private streamTimer: NodeJS.Timeout | undefined;
  private streamBusy: Promise<void> = Promise.resolve();
  private readonly shardIterators = new Map<string, string>();
  private readonly finishedShards = new Set<string>();
  private readonly streamFailures: string[] = [];

  private constructor(private readonly opts: FakeAwsAccountOptions) {
    const stage = opts.stage ?? "test";
    this.stage = stage;
    const n = names(FAKE_APP, stage);
    const functionName = (fn: FunctionName) => {
      const fixed = (FUNCTIONS[fn] as FunctionSpec).fixedName;
      return fixed ? n[fixed] : `${FAKE_APP}-${stage}-${fn}`;
    };
    this.deployed = {
      functionName,
      upStateMachineArn: arn.stateMachine(n.upStateMachine),
      teardownStateMachineArn: arn.stateMachine(n.teardownStateMachine),
      rolloutStateMachineArn: arn.stateMachine(n.rolloutStateMachine),
      execStateMachineArn: arn.stateMachine(n.execStateMachine),
      hostProfileArn: arn.instanceProfile(n.hostRole),
      scheduleGroup: n.scheduleGroup,
      eventBus: n.eventBus,
    };
    this.refs = {
      partition: FAKE_PARTITION,
      region: FAKE_REGION,
      account: FAKE_ACCOUNT_ID,
      stage,
      app: FAKE_APP,
      table: arn.table(opts.table),
    };
    const fnArn = (fn: FunctionName) => arn.lambda(functionName(fn));
    const policy = (text: string) => JSON.parse(text) as PolicyDocument;
    const principals: Principal[] = [
      ...(Object.keys(FUNCTIONS) as FunctionName[]).map((fn) => ({
        name: fn,
        kind: "function" as const,
        arn: `arn:${FAKE_PARTITION}:sts::${FAKE_ACCOUNT_ID}:assumed-role/${functionName(fn)}-role/${functionName(fn)}`,
        accessKeyId: accessKeyIdFor(fn),
        policy: policy(functionPolicy(fn, this.refs)),
      })),
      {
        name: "host",
        kind: "host",
        arn: `arn:${FAKE_PARTITION}:sts::${FAKE_ACCOUNT_ID}:assumed-role/${n.hostRole}/i-instance`,
        accessKeyId: accessKeyIdFor("host"),
        policy: policy(policyDocument(HOST_ROLE, this.refs)),
      },
      {
        name: "states",
        kind: "service",
        arn: `arn:${FAKE_PARTITION}:sts::${FAKE_ACCOUNT_ID}:assumed-role/${FAKE_APP}-${stage}-StateMachineRole/states`,
        accessKeyId: accessKeyIdFor("states"),
        policy: policy(policyDocument(stateMachineRole(TASK_FUNCTIONS.map(fnArn)), this.refs)),
      },
      {
        name: "scheduler",
        kind: "service",
        arn: `arn:${FAKE_PARTITION}:sts::${FAKE_ACCOUNT_ID}:assumed-role/${n.schedulerRole}/scheduler`,
        accessKeyId: accessKeyIdFor("scheduler"),
        policy: policy(policyDocument(schedulerRole(fnArn("Sweep")), this.refs)),
      },
      {
        name: "operator",
        kind: "operator",
        arn: `arn:${FAKE_PARTITION}:iam::${FAKE_ACCOUNT_ID}:root`,
        accessKeyId: accessKeyIdFor("operator"),
      },
    ];

    this.ec2 = new FakeEc2({
      dir: join(opts.dir, "ec2"),
      instanceProfiles: { [HOST_PROFILE(stage)]: n.hostRole },
      ...(opts.ec2 ?? {}),
    });
    this.ssm = new FakeSsm({ ec2: this.ec2, ...(opts.ssm ?? {}) });
    this.dynamodb = new FakeDynamoDb({
      endpoint: opts.dynamoEndpoint,
      ...LOCAL_DYNAMO,
      tables: { [opts.table]: { partitionKey: "pk", indexes: { gsi1: "gsi1pk" } } },
    });
    this.events = new FakeEventBridge([n.eventBus]);

    // Lambda: the deployment's functions, their environment as sst.config.ts sets it.
    const env = (fn: FunctionName): Record<string, string> => this.environment(fn, fnArn);
    this.lambda = new FakeLambda({
      functions: lambdaFunctionsFromInfra(opts.build, { env, name: functionName }),
      endpoint: "http://127.0.0.1:9", // replaced in start(), before any sandbox exists
      concurrencyLimit: opts.concurrencyLimit ?? 1000,
      timeoutMs: Object.fromEntries(
        Object.entries(opts.timeoutMs ?? {}).map(([fn, ms]) => [
          functionName(fn as FunctionName),
          ms as number,
        ]),
      ),
      credentials: credentialsFor,
    });

    this.apigateway = new FakeApiGateway({
      lambda: this.lambda,
      ...(opts.throttleClock ? { now: opts.throttleClock } : {}),
    });

    const invokeAs = async (principal: string, functionArn: string, payload: unknown) => {
      const p = this.server.principal(principal);
      const req = { action: "lambda:InvokeFunction", resource: functionArn };
      if (!(await this.iam.allowed(p, req))) throw accessDenied("lambda", p, req);
      const out = await this.lambda.invoke(functionArn, JSON.stringify(payload ?? {}));
      return out;
    };

    this.sfn = new FakeStepFunctions({
      invoke: async (functionArn, payload) => {
        const out = await invokeAs("states", functionArn, payload);
        const text = out.payload.toString("utf8");
        return {
          payload: text === "" ? null : JSON.parse(text),
          ...(out.functionError ? { functionError: out.functionError } : {}),
        };
      },
      onStatusChange: (event) => void this.events.emit(event),
      ...(opts.timing ? { timing: opts.timing } : {}),
    });
    const taskArns = Object.fromEntries(TASK_FUNCTIONS.map((fn) => [fn, fnArn(fn)]));
    const machineRole = arn.role(`${FAKE_APP}-${stage}-StateMachineRole`);
    const machineName = {
      up: n.upStateMachine,
      teardown: n.teardownStateMachine,
      rollout: n.rolloutStateMachine,
      exec: n.execStateMachine,
    };
    for (const which of ["up", "teardown", "rollout", "exec"] as const) {
      const asl = readFileSync(
        join(import.meta.dirname, "..", "..", "..", "stepfunctions", `${which}.asl.json`),
        "utf8",
      );
      this.sfn.addStateMachine({
        name: machineName[which],
        definition: substituteFunctionArns(asl, taskArns),
        roleArn: machineRole,
      });
    }
    // The rule on the default bus: failed, timed-out and aborted executions go to ReconcileRun.
    this.events.rules.push({
      name: "ExecutionEnded",
      bus: "default",
      pattern: executionEndedPattern([
        this.deployed.upStateMachineArn,
        this.deployed.teardownStateMachineArn,
        this.deployed.rolloutStateMachineArn,
        this.deployed.execStateMachineArn,
      ]),
      target: async (event) => {
        const out = await this.lambda.invoke(fnArn("ReconcileRun"), JSON.stringify(event));
        if (out.functionError) throw new Error(`ReconcileRun failed: ${out.payload.toString("utf8")}`);
      },
    });

    this.scheduler = new FakeScheduler({
      groups: [n.scheduleGroup],
      invoke: async ({ arn: target, roleArn, input }) => {
        if (roleArn !== arn.role(n.schedulerRole))
          throw new Error(`a schedule names an unknown role ${roleArn}`);
        const out = await invokeAs("scheduler", target, input === undefined ? {} : JSON.parse(input));
        if (out.functionError)
          throw new Error(`the schedule's target failed: ${out.payload.toString("utf8")}`);
      },
    });

    this.server = new AwsServer({
      principals,
      iam: this.iam,
      services: {
        ec2: this.ec2,
        ssm: this.ssm,
        servicequotas: {
          operations: {
            GetServiceQuota: async (input: { ServiceCode?: string; QuotaCode?: string }, call) => {
              await call.authorize([
                {
                  action: "servicequotas:GetServiceQuota",
                  resource: arn.quota(input.ServiceCode ?? "", input.QuotaCode ?? ""),
                },
              ]);
              if (input.ServiceCode !== "ec2" || input.QuotaCode !== "L-1216C47A") {
                throw new AwsError(
                  "NoSuchResourceException",
                  "The request failed because the specified quota does not exist.",
                );
              }
              return {
                Quota: {
                  ServiceCode: "ec2",
                  QuotaCode: "L-1216C47A",
                  QuotaName: "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
                  Value: opts.vcpuQuota ?? 256,
                  Unit: "None",
                },
              };
            },
          },
        },
        scheduler: this.scheduler,
        states: this.sfn,
        events: this.events,
        dynamodb: this.dynamodb,
        lambda: {
          operations: {
            // Invoke (RequestResponse): IAM's lambda:InvokeFunction on the function's ARN (a qualifier, in the
            // name or as Qualifier, names the version or alias ARN), then the function runs in its sandbox. A
            // function's own failure is a 200 with X-Amz-Function-Error and the error object as the payload.
            Invoke: async (
              input: {
                FunctionName?: string;
                Payload?: Uint8Array;
                InvocationType?: string;
                Qualifier?: string;
              },
              call,
            ) => {
              const name = input.FunctionName ?? "";
              const bare = name.startsWith("arn:") ? (name.split(":")[6] ?? "") : (name.split(":")[0] ?? "");
              const qualifier =
                input.Qualifier ?? (name.startsWith("arn:") ? name.split(":")[7] : name.split(":")[1]);
              const target = `${arn.lambda(bare)}${qualifier ? `:${qualifier}` : ""}`;
              await call.authorize([{ action: "lambda:InvokeFunction", resource: target }]);
              if (input.InvocationType !== undefined && input.InvocationType !== "RequestResponse") {
                throw new AwsError(
                  "InvalidParameterValueException",
                  "the AWS double answers RequestResponse only",
                );
              }
              const out = await this.lambda.invoke(arn.lambda(bare), input.Payload ?? new Uint8Array());
              return {
                StatusCode: out.statusCode,
                Payload: out.payload,
                ExecutedVersion: out.executedVersion,
                ...(out.functionError ? { FunctionError: out.functionError } : {}),
              };
            },
            GetAccountSettings: async (_input: unknown, call) => {
              await call.authorize([{ action: "lambda:GetAccountSettings", resource: "*" }]);
              const limit = opts.concurrencyLimit ?? 1000;
              return {
                AccountLimit: {
                  ConcurrentExecutions: limit,
                  UnreservedConcurrentExecutions: limit,
                  CodeSizeUnzipped: 262_144_000,
                  CodeSizeZipped: 52_428_800,
                  TotalCodeSize: 80_530_636_800,
                },
                AccountUsage: { FunctionCount: Object.keys(FUNCTIONS).length, TotalCodeSize: 0 },
              };
            },
          },
        },
      },
    });
  }

  /** What sst.config.ts sets on a function: its environment variables and its linked secrets. */
  private environment(fn: FunctionName, fnArn: (fn: FunctionName) => string): Record<string, string> {
    const n = names(FAKE_APP, this.stage);
    const spec = FUNCTIONS[fn] as FunctionSpec;
    const values: Record<string, string> = {
      [CLOUD_ENV.table]: this.opts.table,
      [CLOUD_ENV.stage]: this.stage,
      [CLOUD_ENV.upStateMachineArn]: arn.stateMachine(n.upStateMachine),
      [CLOUD_ENV.teardownStateMachineArn]: arn.stateMachine(n.teardownStateMachine),
      [CLOUD_ENV.rolloutStateMachineArn]: arn.stateMachine(n.rolloutStateMachine),
      [CLOUD_ENV.execStateMachineArn]: arn.stateMachine(n.execStateMachine),
      [CLOUD_ENV.hostInstanceProfileArn]: arn.instanceProfile(n.hostRole),
      [CLOUD_ENV.scheduleGroup]: n.scheduleGroup,
      [CLOUD_ENV.schedulerRoleArn]: arn.role(n.schedulerRole),
      [CLOUD_ENV.scheduleTargetArn]: fnArn("Sweep"),
      [CLOUD_ENV.eventBus]: n.eventBus,
      [CLOUD_ENV.checksFunction]: n.checksFunction,
    };
    // envNamesOf is the list sst.config.ts sets; the portal URL is set on the Api once the Portal has one, and
    // the API's URL on the functions that give hosts their push settings once the Api has one.
    const out: Record<string, string> = {};
    for (const name of envNamesOf(fn)) {
      if (name === CLOUD_ENV.portalUrl || name === CLOUD_ENV.hostApiUrl) continue;
      const v = values[name];
      if (v === undefined) throw new Error(`the double gives ${fn} no value for ${name}`);
      out[name] = v;
    }
    for (const s of spec.secrets)
      out[`SST_RESOURCE_${s}`] = JSON.stringify({ value: this.opts.secrets[s] ?? "not-set" });
    return out;
  }

  /** Starts the endpoint, turns the table's stream on, deploys the HTTP APIs (as sst.config.ts does). */
  static async start(opts: FakeAwsAccountOptions): Promise<FakeAwsAccount> {
    const account = new FakeAwsAccount(opts);
    const url = await account.server.start();
    account.ec2.setEndpoint(url);
    account.lambda.setEndpoint(url);
    const portal = await account.deployHttpApi("Portal");
    account.portalUrl = portal.url;
    account.portalEndpoint = portal.endpoint;
    account.lambda.setEnv(account.deployed.functionName("Api"), CLOUD_ENV.portalUrl, account.portalUrl);
    const api = await account.deployHttpApi("Api");
    account.apiUrl = api.url;
    account.apiEndpoint = api.endpoint;
    // The URL hosts push to: the lab hosts of the double are on this machine, where the API answers on 127.0.0.1
    // (its https://DOMAIN URL resolves nowhere here), so they are given the address they reach it on.
    for (const fn of Object.keys(FUNCTIONS) as FunctionName[])
      if (envNamesOf(fn).includes(CLOUD_ENV.hostApiUrl))
        account.lambda.setEnv(account.deployed.functionName(fn), CLOUD_ENV.hostApiUrl, api.endpoint);
    await account.enableStream();
    return account;
  }

  /** An HTTP API of infra/web.ts: its routes to its function, its stage's throttling, its domain. */
  private async deployHttpApi(name: WebApiName): Promise<DeployedHttpApi> {
    const spec = HTTP_APIS[name];
    const fn = this.deployed.functionName(spec.function);
    const domain = this.opts.domains?.[name];
    const deployed = await this.apigateway.addHttpApi({
      name: `${name}Http`,
      routes: Object.fromEntries(routeKeysOf(name).map((key) => [key, fn])),
      throttle: spec.throttle,
      routeThrottle: spec.routes,
      ...(domain ? { domainName: domain } : {}),
      ...(this.opts.integrationTimeoutMs ? { integrationTimeoutMs: this.opts.integrationTimeoutMs } : {}),
    });
    this.httpApis[name] = deployed;
    return deployed;
  }

  /** The DynamoDB table the deployment uses. */
  get table(): string {
    return this.opts.table;
  }

  /**
   * Runs `fn` with a function's role policy changed (a grant taken away, to see what AWS answers without it),
   * then puts the policy back.
   */
  async withPolicy<T>(
    principal: FunctionName,
    change: (policy: PolicyDocument) => PolicyDocument,
    fn: () => Promise<T>,
  ): Promise<T> {
    const p = this.server.principal(principal);
    const kept = p.policy;
    if (!kept) throw new Error(`${principal} has no policy`);
    p.policy = change(structuredClone(kept));
    this.iam.forget(principal);
    try {
      return await fn();
    } finally {
      p.policy = kept;
      this.iam.forget(principal);
    }
  }

  /** SDK client settings for the test itself, as the account's administrator. */
  operatorClient() {
    return { region: FAKE_REGION, endpoint: this.server.url, credentials: credentialsFor("operator") };
  }

  /** Every (principal, action) pair IAM was asked about, with how often it was denied. */
  actionPairs(): { principal: string; action: string; calls: number; denied: number }[] {
    const pairs = new Map<string, { principal: string; action: string; calls: number; denied: number }>();
    for (const d of this.iam.decisions) {
      const key = `${d.principal} ${d.action}`;
      const p = pairs.get(key) ?? { principal: d.principal, action: d.action, calls: 0, denied: 0 };
      p.calls++;
      if (!d.allowed) p.denied++;
      pairs.set(key, p);
    }
    return [...pairs.values()].sort((a, b) =>
      `${a.principal} ${a.action}`.localeCompare(`${b.principal} ${b.action}`),
    );
  }

  // --------------------------------------------------------------------------------- the table's stream

  private async enableStream(): Promise<void> {
    const client = new DynamoDBClient({
      endpoint: this.opts.dynamoEndpoint,
      region: LOCAL_DYNAMO.region,
      credentials: { accessKeyId: LOCAL_DYNAMO.accessKeyId, secretAccessKey: "local" },
    });
    try {
      await client.send(
        new UpdateTableCommand({
          TableName: this.opts.table,
          StreamSpecification: { StreamEnabled: true, StreamViewType: "NEW_IMAGE" },
        }),
      );
    } catch (err) {
      if (!/already has an enabled stream/i.test(String(err))) throw err;
    } finally {
      client.destroy();
    }
    // Lambda's event source mapping polls the stream (about four times a second) with the function's role.
    this.streamTimer = setInterval(() => {
      this.streamBusy = this.streamBusy
        .then(async () => {
          await this.pollStream();
        })
        .catch((err: unknown) => {
          this.streamFailures.push(String(err));
        });
    }, 250);
    this.streamTimer.unref();
  }

  /** What went wrong delivering the stream to ForwardEvents (nothing, in a good run). */
  get streamErrors(): string[] {
    return [...this.streamFailures];
  }

  /** Reads new stream records, keeps the new event records (the subscription's filter) and invokes ForwardEvents. */
  async pollStream(): Promise<number> {
    const as = this.server.principal("ForwardEvents");
    const allowed = async (action: string, resource: string) => {
      if (!(await this.iam.allowed(as, { action, resource }))) {
        throw new Error(`the event source mapping cannot ${action} on ${resource} with ForwardEvents' role`);
      }
    };
    await allowed("dynamodb:ListStreams", "*");
    const streams = (await this.dynamodb.streams("ListStreams", { TableName: this.opts.table })) as {
      Streams?: { StreamArn: string }[];
    };
    let delivered = 0;
    for (const { StreamArn } of streams.Streams ?? []) {
      // DynamoDB Local names its streams in its own account and region; IAM sees the stream of this table.
      const iamArn = `${arn.table(this.opts.table)}/stream/${StreamArn.split("/stream/")[1] ?? ""}`;
      await allowed("dynamodb:DescribeStream", iamArn);
      const described = (await this.dynamodb.streams("DescribeStream", { StreamArn })) as {
        StreamDescription?: { Shards?: { ShardId: string }[] };
      };
      for (const { ShardId } of described.StreamDescription?.Shards ?? []) {
        const key = `${StreamArn}/${ShardId}`;
        // A shard read to its end (closed, no next iterator) has nothing more: it is not read again.
        if (this.finishedShards.has(key)) continue;
        let iterator = this.shardIterators.get(key);
        if (!iterator) {
          await allowed("dynamodb:GetShardIterator", iamArn);
          const it = (await this.dynamodb.streams("GetShardIterator", {
            StreamArn,
            ShardId,
            ShardIteratorType: "TRIM_HORIZON",
          })) as { ShardIterator?: string };
          if (!it.ShardIterator) continue;
          iterator = it.ShardIterator;
        }
        await allowed("dynamodb:GetRecords", iamArn);
        let page: { Records?: Record<string, unknown>[]; NextShardIterator?: string };
        try {
          page = (await this.dynamodb.streams("GetRecords", {
            ShardIterator: iterator,
            Limit: 100,
          })) as typeof page;
        } catch (err) {
          // An iterator past its time or into trimmed records is dropped, and the shard read again from its
          // oldest record (the event source mapping delivers at least once).
          if (/TrimmedDataAccessException|ExpiredIteratorException/.test(String(err))) {
            this.shardIterators.delete(key);
            continue;
          }
          throw err;
        }
        const records = (page.Records ?? [])
          .filter((r) => matches(EVENT_RECORDS_FILTER as unknown as Record<string, unknown>, r))
          .map((r) => ({ ...r, eventSourceARN: iamArn }));
        if (records.length > 0) {
          const out = await this.lambda.invoke(
            arn.lambda(this.deployed.functionName("ForwardEvents")),
            JSON.stringify({ Records: records }),
          );
          // A failed batch is retried from the same position, as Lambda retries a stream batch.
          if (out.functionError) throw new Error(`ForwardEvents failed: ${out.payload.toString("utf8")}`);
          delivered += records.length;
        }
        if (page.NextShardIterator) this.shardIterators.set(key, page.NextShardIterator);
        else {
          this.shardIterators.delete(key);
          this.finishedShards.add(key);
        }
      }
    }
    return delivered;
  }

  /** Waits for running executions, rule targets and stream deliveries to settle. */
  async settle(): Promise<void> {
    await this.sfn.idle();
    await this.events.settle();
    await this.streamBusy;
  }

  async close(): Promise<void> {
    if (this.streamTimer) clearInterval(this.streamTimer);
    await this.streamBusy;
    await this.sfn.close();
    await this.apigateway.close();
    await this.lambda.close();
    await this.ssm.close();
    await this.ec2.close();
    await this.server.close();
  }
}
