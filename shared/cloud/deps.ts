import { DynamoDBClient } from "@aws-sdk/client-dynamodb";
import { EC2Client } from "@aws-sdk/client-ec2";
import { LambdaClient } from "@aws-sdk/client-lambda";
import { SchedulerClient } from "@aws-sdk/client-scheduler";
import { ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import { SFNClient } from "@aws-sdk/client-sfn";
import { SSMClient } from "@aws-sdk/client-ssm";
import { runLabChecks } from "../fleet/lab-checks.ts";
import { AwsProvider } from "../providers/aws.ts";
import { EnrolledProvider } from "../providers/enrolled.ts";
import { StaticProvider } from "../providers/static.ts";
import { type Clock, systemClock } from "../runtime/clock.ts";
import type { Deps } from "../runtime/deps.ts";
import { createStore } from "../store/entities.ts";
import { publicKeyLine } from "../transports/ssh-identity.ts";
import { clientOptions } from "./clients.ts";
import { CLOUD_ENV, SECRET_NOT_SET } from "./env.ts";
import { lambdaConcurrency } from "./lambda-concurrency.ts";
import { parameterStoreSecrets } from "./parameter-store.ts";
import { EventBridgeScheduleMirror } from "./scheduler.ts";
import { SsmSecretParameters } from "./secret-parameters.ts";
import { accessKeyFrom, type Env, envLinkedSecrets, type LinkedSecrets, required } from "./secrets.ts";
import { StepFunctionsWorkflows } from "./step-functions.ts";
import { cloudTransportFactory, secretSshIdentity } from "./transports.ts";

/**
 * The cloud composition root: Deps for a Lambda, from its environment (names in env.ts, set by
 * sst.config.ts) and its linked secrets. Built once per Lambda instance, on the first invocation.
 */

export interface CloudConfig {
  stage: string;
  table: string;
  region: string | undefined;
  upStateMachineArn: string;
  teardownStateMachineArn: string;
  rolloutStateMachineArn: string;
  execStateMachineArn: string;
  hostInstanceProfileArn: string | undefined;
  /** All three or none: the functions that create, move or delete TTL schedules get them. */
  schedules: { group: string; roleArn: string; targetArn: string } | undefined;
  portalUrl: string | undefined;
  /** The API's URL as hosts reach it (CLOUD_ENV.hostApiUrl): set on the functions that give hosts push settings. */
  hostApiUrl: string | undefined;
}

/** The control plane's settings from the environment; every missing required variable is named at once. */
export function cloudConfig(env: Env): CloudConfig {
  required(env, [
    CLOUD_ENV.table,
    CLOUD_ENV.stage,
    CLOUD_ENV.upStateMachineArn,
    CLOUD_ENV.teardownStateMachineArn,
    CLOUD_ENV.rolloutStateMachineArn,
    CLOUD_ENV.execStateMachineArn,
  ]);
  const opt = (name: string) => env[name] || undefined;
  const scheduleVars = [CLOUD_ENV.scheduleGroup, CLOUD_ENV.schedulerRoleArn, CLOUD_ENV.scheduleTargetArn];
  if (scheduleVars.some((n) => env[n])) required(env, scheduleVars);
  return {
    stage: env[CLOUD_ENV.stage] as string,
    table: env[CLOUD_ENV.table] as string,
    region: opt("AWS_REGION"),
    upStateMachineArn: env[CLOUD_ENV.upStateMachineArn] as string,
    teardownStateMachineArn: env[CLOUD_ENV.teardownStateMachineArn] as string,
    rolloutStateMachineArn: env[CLOUD_ENV.rolloutStateMachineArn] as string,
    execStateMachineArn: env[CLOUD_ENV.execStateMachineArn] as string,
    hostInstanceProfileArn: opt(CLOUD_ENV.hostInstanceProfileArn),
    schedules: env[CLOUD_ENV.scheduleGroup]
      ? {
          group: env[CLOUD_ENV.scheduleGroup] as string,
          roleArn: env[CLOUD_ENV.schedulerRoleArn] as string,
          targetArn: env[CLOUD_ENV.scheduleTargetArn] as string,
        }
      : undefined,
    portalUrl: opt(CLOUD_ENV.portalUrl),
    hostApiUrl: opt(CLOUD_ENV.hostApiUrl),
  };
}

export interface CloudClients {
  dynamodb: DynamoDBClient;
  ec2: EC2Client;
  ssm: SSMClient;
  sfn: SFNClient;
  scheduler: SchedulerClient;
  serviceQuotas: ServiceQuotasClient;
  lambda: LambdaClient;
}

export interface CloudDepsOptions {
  /** How linked secrets are read; by default from `SST_RESOURCE_<Name>` variables of `env`. */
  linked?: LinkedSecrets;
  /** Clients to use instead of new ones for the function's region. */
  clients?: Partial<CloudClients>;
  clock?: Clock;
}

function clientsFor(config: CloudConfig, given: Partial<CloudClients> = {}): CloudClients {
  const options = clientOptions(config.region);
  return {
    dynamodb: given.dynamodb ?? new DynamoDBClient(options),
    ec2: given.ec2 ?? new EC2Client(options),
    ssm: given.ssm ?? new SSMClient(options),
    sfn: given.sfn ?? new SFNClient(options),
    scheduler: given.scheduler ?? new SchedulerClient(options),
    serviceQuotas: given.serviceQuotas ?? new ServiceQuotasClient(options),
    lambda: given.lambda ?? new LambdaClient(options),
  };
}

/**
 * How long provision waits, in the cloud, for instances to run and then for their SSM agents: together well
 * inside the Provision function's 15 minutes (Lambda's limit). A host still starting is reported with "provision
 * again to keep waiting"; provision is idempotent, so a retried or repeated run picks it up.
 */
export const CLOUD_PROVISION_WAITS = { waitTimeoutMs: 5 * 60_000, ssmWaitTimeoutMs: 7 * 60_000 } as const;

/**
 * Deps for the control plane's functions (workflow tasks, sweeper, instructor API): the DynamoDB table,
 * providers `aws` (EC2, reached over SSM), `static` (bring-your-own hosts over SSH with the managed key) and
 * `enrolled` (machines that dial in, reached through their agents' command queue in the table),
 * Step Functions for workflows, Parameter Store for operator secrets (and the per-workshop parameter they reach
 * SSM hosts through), the access key from its secret.
 * The SSH key is read when an SSH host is first reached, so functions without SSH hosts need no key. The
 * EventBridge copy of the TTL schedules is wired only where the schedule variables are set.
 */
export function cloudDeps(env: Env, options: CloudDepsOptions = {}): Deps {
  const config = cloudConfig(env);
  const linked = options.linked ?? envLinkedSecrets(env);
  const accessKey = accessKeyFrom(linked);
  const clients = clientsFor(config, options.clients);
  const sshIdentity = secretSshIdentity(() => {
    const v = linked("SshPrivateKey");
    return v === SECRET_NOT_SET ? undefined : v;
  });
  return {
    store: createStore(clients.dynamodb, config.table),
    clock: options.clock ?? systemClock,
    providers: {
      aws: new AwsProvider({
        ec2: clients.ec2,
        ssm: clients.ssm,
        serviceQuotas: clients.serviceQuotas,
        stage: config.stage,
        ...CLOUD_PROVISION_WAITS,
        ...(config.hostInstanceProfileArn ? { instanceProfileArn: config.hostInstanceProfileArn } : {}),
      }),
      static: new StaticProvider(),
      enrolled: new EnrolledProvider(),
    },
    transport: cloudTransportFactory({ ssm: clients.ssm, sshIdentity }),
    workflows: new StepFunctionsWorkflows({
      client: clients.sfn,
      stateMachineArns: {
        up: config.upStateMachineArn,
        teardown: config.teardownStateMachineArn,
        rollout: config.rolloutStateMachineArn,
        exec: config.execStateMachineArn,
      },
    }),
    accessKey,
    secrets: parameterStoreSecrets({ client: clients.ssm, stage: config.stage }),
    secretParameters: new SsmSecretParameters({ client: clients.ssm, stage: config.stage }),
    gitSourcesOnly: true,
    taskConcurrency: lambdaConcurrency(clients.lambda),
    checks: { run: (workshop, hostId) => runLabChecks(workshop, hostId) },
    sshPublicKey: async () => publicKeyLine(sshIdentity()),
    // Where pushing hosts post their progress (shared/fleet/push-config.ts decides which hosts push: never SSM).
    ...(config.hostApiUrl ? { hostApiUrl: () => config.hostApiUrl } : {}),
    ...(config.schedules
      ? {
          scheduleMirror: new EventBridgeScheduleMirror({
            client: clients.scheduler,
            group: config.schedules.group,
            roleArn: config.schedules.roleArn,
            targetArn: config.schedules.targetArn,
          }),
        }
      : {}),
  };
}
