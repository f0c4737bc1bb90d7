import { CLOUD_ENV, type LinkedSecretName } from "../shared/cloud/env.ts";

/**
 * What sst.config.ts deploys, as plain data: every Lambda (handler, limits, secrets, environment) and its IAM
 * statements. sst.config.ts maps this onto resources; tests/unit/infra.test.ts checks it (every ASL Task has its
 * function, every statement is scoped, the portal touches only its table items).
 *
 * Resources are templates: `{partition}`, `{region}`, `{account}`, `{stage}` and `{table}` (the table's ARN)
 * are filled in by `resolveStatements`. The other resources labfleet creates have fixed names per stage
 * (`names`), so their ARNs are known before they exist and no function depends on another's ARN.
 *
 * Imports nothing but the environment names: sst.config.ts loads it without the application code.
 */

export interface Condition {
  test: string;
  variable: string;
  values: string[];
}

export interface Statement {
  sid: string;
  actions: string[];
  resources: string[];
  conditions?: Condition[];
}

export const MANAGED_BY = { key: "ManagedBy", value: "labfleet" } as const;
/** The stage tag on everything labfleet creates in EC2 (shared/providers/aws-common.ts, STAGE_TAG). */
export const STAGE_TAG_KEY = "labfleet-stage";

/**
 * EC2 and SSM resources of labfleet's own (instances, volumes, security groups) carry these tags: made by
 * labfleet, and by this stage, so two stages in one account cannot touch each other's.
 */
const managedResource: Condition[] = [
  { test: "StringEquals", variable: `aws:ResourceTag/${MANAGED_BY.key}`, values: [MANAGED_BY.value] },
  { test: "StringEquals", variable: `aws:ResourceTag/${STAGE_TAG_KEY}`, values: ["{stage}"] },
];
/** At creation the tags are in the request: nothing untagged, or tagged for another stage, can be created. */
const managedRequest: Condition[] = [
  { test: "StringEquals", variable: `aws:RequestTag/${MANAGED_BY.key}`, values: [MANAGED_BY.value] },
  { test: "StringEquals", variable: `aws:RequestTag/${STAGE_TAG_KEY}`, values: ["{stage}"] },
];

/** The names of what sst.config.ts creates besides the functions and the table, per stage. */
export function names(app: string, stage: string) {
  const base = `${app}-${stage}`;
  return {
    upStateMachine: `${base}-up`,
    teardownStateMachine: `${base}-teardown`,
    rolloutStateMachine: `${base}-rollout`,
    execStateMachine: `${base}-exec`,
    /** The role and instance profile of EC2 lab hosts (AmazonSSMManagedInstanceCore only). */
    hostRole: `${base}-host`,
    /** The role EventBridge Scheduler assumes for the one-time TTL schedules. */
    schedulerRole: `${base}-scheduler`,
    scheduleGroup: base,
    /** The sweeper: the cron's target and every TTL schedule's target. */
    sweepFunction: `${base}-sweep`,
    /** "Check my work": the portal invokes it by name (the portal reaches no host itself). */
    checksFunction: `${base}-checks`,
    /** The bus workshop events go to (host ready/failed, lab claimed, torn down). */
    eventBus: `${base}-events`,
  };
}

/** Placeholders in resource templates, filled in at deploy time. */
export type Refs = Record<"partition" | "region" | "account" | "stage" | "app" | "table", string>;

const ec2 = (type: string) => `arn:{partition}:ec2:{region}:{account}:${type}/*`;
const stateMachine = (which: "up" | "teardown" | "rollout" | "exec") =>
  `arn:{partition}:states:{region}:{account}:stateMachine:{app}-{stage}-${which}`;
const executions = (which: "up" | "teardown" | "rollout" | "exec") =>
  `arn:{partition}:states:{region}:{account}:execution:{app}-{stage}-${which}:*`;

const TABLE_ITEM_ACTIONS = [
  "dynamodb:BatchGetItem",
  "dynamodb:BatchWriteItem",
  "dynamodb:ConditionCheckItem",
  "dynamodb:DeleteItem",
  "dynamodb:GetItem",
  "dynamodb:PutItem",
  "dynamodb:Query",
  "dynamodb:UpdateItem",
];

/**
 * The partition keys (ElectroDB's `$labfleet#<first composite>_<value>`) of the records the portal reads, and of
 * the ones it writes. Reads: the workshop (`name_`), its portal, hosts and claims (`workshop_`), the code lookup
 * (`codehash_`), personal links (`linkhash_`) and rate counters (`key_`). Writes: claims and claim emails
 * (`workshop_`), personal links, rate counters. A record of any other partition (instructor tokens and sessions,
 * among them) is out of the portal's reach. Runs, schedules and pinned host keys share the
 * workshop's partition, so DynamoDB cannot keep the portal from them: the portal's code never reads them,
 * and its function can reach no host and start no workflow whatever those records say.
 */
export const PORTAL_LEADING_KEYS = {
  read: [
    "$labfleet#name_*",
    "$labfleet#workshop_*",
    "$labfleet#codehash_*",
    "$labfleet#linkhash_*",
    "$labfleet#key_*",
  ],
  write: ["$labfleet#workshop_*", "$labfleet#linkhash_*", "$labfleet#key_*"],
} as const;

/**
 * Actions AWS only grants on `Resource: "*"` (they take no resource ARN), with why each is safe unscoped.
 * Every other statement names its resources; the test allows `*` only for these.
 */
export const UNSCOPED_ACTIONS: Record<string, string> = {
  "ec2:DescribeInstances": "read only",
  "ec2:DescribeImages": "read only",
  "ec2:DescribeInstanceTypes": "read only",
  "ec2:DescribeSubnets": "read only",
  "ec2:DescribeSecurityGroups": "read only",
  "ec2:DescribeVolumes": "read only",
  "scheduler:ListSchedules": "read only: schedule names and states, never their input",
  "ssm:DescribeParameters": "read only: parameter names and metadata, never a value",
  "ssm:DescribeInstanceInformation": "read only: whether a host's SSM agent is online",
  "ssm:GetCommandInvocation": "read only: the output of a command labfleet sent",
  "dynamodb:ListStreams": "read only: the stream's ARN, for the event forwarder's stream subscription",
  "lambda:GetAccountSettings": "read only: the account's concurrency limit",
  "ssm:CancelCommand":
    "takes a command id, not a resource: it can only stop a command that is running, and labfleet cancels its own after their timeout",
};

/** Capabilities, each a set of statements; a function gets the grants it needs (FUNCTIONS). */
export const GRANTS = {
  /** Every item action on the table and its index, nothing on the table itself (no Scan, no DescribeTable). */
  table: [{ sid: "TableItems", actions: TABLE_ITEM_ACTIONS, resources: ["{table}", "{table}/index/*"] }],

  /** The student portal: item reads and writes on the base table, limited to its partitions. */
  portalTable: [
    {
      sid: "PortalReads",
      actions: ["dynamodb:GetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"],
      resources: ["{table}"],
      conditions: [
        {
          test: "ForAllValues:StringLike",
          variable: "dynamodb:LeadingKeys",
          values: [...PORTAL_LEADING_KEYS.read],
        },
      ],
    },
    {
      sid: "PortalWrites",
      actions: ["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"],
      resources: ["{table}"],
      conditions: [
        {
          test: "ForAllValues:StringLike",
          variable: "dynamodb:LeadingKeys",
          values: [...PORTAL_LEADING_KEYS.write],
        },
      ],
    },
  ],

  /** Looking at EC2: instances, images, instance types, subnets, security groups. */
  ec2Read: [
    {
      sid: "Ec2Read",
      actions: [
        "ec2:DescribeInstances",
        "ec2:DescribeImages",
        "ec2:DescribeInstanceTypes",
        "ec2:DescribeSubnets",
        "ec2:DescribeSecurityGroups",
      ],
      resources: ["*"],
    },
  ],

  /**
   * The teardown receipt's check (shared/fleet/receipt.ts): what is left of a workshop, by its ownership tags
   * (instances, volumes, security groups), the TTL schedule by its name in the stage's group, and the secrets
   * parameter by its name. Read only; AWS takes no resource for any of these.
   */
  leftovers: [
    {
      sid: "FindLeftovers",
      actions: [
        "ec2:DescribeInstances",
        "ec2:DescribeVolumes",
        "ec2:DescribeSecurityGroups",
        "scheduler:ListSchedules",
        "ssm:DescribeParameters",
      ],
      resources: ["*"],
    },
  ],

  /** The vCPU quota check before creating hosts. */
  quota: [
    {
      sid: "Ec2Quotas",
      actions: ["servicequotas:GetServiceQuota"],
      resources: ["arn:{partition}:servicequotas:{region}:{account}:ec2/*"],
    },
  ],

  /**
   * Creating lab hosts: RunInstances makes only tagged instances and volumes, tags only at creation, and
   * passes only the host role to EC2. The image, subnet, security groups (a BYO group is untagged) and the
   * network interface it creates are named by type.
   */
  hostsLaunch: [
    {
      sid: "RunTaggedInstances",
      actions: ["ec2:RunInstances"],
      resources: [ec2("instance"), ec2("volume")],
      conditions: managedRequest,
    },
    {
      sid: "RunInstancesUsing",
      actions: ["ec2:RunInstances"],
      resources: [
        "arn:{partition}:ec2:{region}::image/*",
        ec2("subnet"),
        ec2("security-group"),
        ec2("network-interface"),
      ],
    },
    {
      sid: "TagAtCreation",
      actions: ["ec2:CreateTags"],
      resources: [ec2("instance"), ec2("volume"), ec2("security-group")],
      conditions: [
        {
          test: "StringEquals",
          variable: "ec2:CreateAction",
          values: ["RunInstances", "CreateSecurityGroup"],
        },
        ...managedRequest,
      ],
    },
    {
      sid: "PassHostRole",
      actions: ["iam:PassRole"],
      resources: ["arn:{partition}:iam::{account}:role/{app}-{stage}-host"],
      conditions: [{ test: "StringEquals", variable: "iam:PassedToService", values: ["ec2.amazonaws.com"] }],
    },
    {
      sid: "SsmAgentOnline",
      actions: ["ssm:DescribeInstanceInformation"],
      resources: ["*"],
    },
  ],

  /** Ending lab hosts: only instances tagged ManagedBy=labfleet (the provider checks all three tags too). */
  hostsTerminate: [
    {
      sid: "TerminateManaged",
      actions: ["ec2:TerminateInstances"],
      resources: [ec2("instance")],
      conditions: managedResource,
    },
  ],

  /** `labfleet extend`: moves the `labfleet-expiry` tag of labfleet's instances; no other tag key. */
  hostsRetag: [
    {
      sid: "RetagManaged",
      actions: ["ec2:CreateTags"],
      resources: [ec2("instance"), ec2("volume")],
      conditions: [
        ...managedResource,
        { test: "ForAllValues:StringLike", variable: "aws:TagKeys", values: ["labfleet-*"] },
      ],
    },
  ],

  /**
   * The workshop's managed security group (operator address only, lab UI ports opened by `open-access`):
   * created tagged, changed and deleted only when tagged. A BYO group is never changed.
   */
  securityGroups: [
    {
      sid: "CreateTaggedGroup",
      actions: ["ec2:CreateSecurityGroup"],
      resources: [ec2("security-group")],
      conditions: managedRequest,
    },
    { sid: "CreateGroupInVpc", actions: ["ec2:CreateSecurityGroup"], resources: [ec2("vpc")] },
    {
      sid: "ChangeManagedGroup",
      actions: [
        "ec2:AuthorizeSecurityGroupIngress",
        "ec2:RevokeSecurityGroupIngress",
        "ec2:DeleteSecurityGroup",
      ],
      resources: [ec2("security-group")],
      conditions: managedResource,
    },
  ],

  /**
   * Opening the lab UIs to students once every lab is ready (`provider.student_access: open`, in the run's last
   * step): find the workshop's managed group and add inbound rules to it, nothing else. Closing is the
   * instructor's `open-access --close` (the API's securityGroups grant).
   */
  openAccess: [
    { sid: "FindManagedGroups", actions: ["ec2:DescribeSecurityGroups"], resources: ["*"] },
    {
      sid: "OpenManagedGroup",
      actions: ["ec2:AuthorizeSecurityGroupIngress"],
      resources: [ec2("security-group")],
      conditions: managedResource,
    },
  ],

  /**
   * The portal's one way to a host: invoke the RunChecks function, which runs only the checks workshop.yaml
   * gives (the portal sends a workshop and a lab, never a command).
   */
  invokeChecks: [
    {
      sid: "InvokeRunChecks",
      actions: ["lambda:InvokeFunction"],
      resources: ["arn:{partition}:lambda:{region}:{account}:function:{app}-{stage}-checks"],
    },
  ],

  /** The account's Lambda concurrency, which bounds how many hosts a run deploys at once. */
  lambdaSettings: [{ sid: "LambdaConcurrency", actions: ["lambda:GetAccountSettings"], resources: ["*"] }],

  /** Commands on labfleet's instances through SSM Run Command, with AWS-RunShellScript only. */
  ssmCommands: [
    {
      sid: "SendToManagedInstances",
      actions: ["ssm:SendCommand"],
      resources: [ec2("instance")],
      conditions: [
        { test: "StringEquals", variable: `ssm:resourceTag/${MANAGED_BY.key}`, values: [MANAGED_BY.value] },
        { test: "StringEquals", variable: `ssm:resourceTag/${STAGE_TAG_KEY}`, values: ["{stage}"] },
      ],
    },
    {
      sid: "SendRunShellScript",
      actions: ["ssm:SendCommand"],
      resources: ["arn:{partition}:ssm:{region}::document/AWS-RunShellScript"],
    },
    {
      sid: "CommandResults",
      actions: ["ssm:GetCommandInvocation", "ssm:CancelCommand"],
      resources: ["*"],
    },
  ],

  /** Operator secrets (`lab.operator_secrets`): this stage's SecureStrings, read only. */
  operatorSecrets: [
    {
      sid: "OperatorSecrets",
      actions: ["ssm:GetParameters"],
      resources: ["arn:{partition}:ssm:{region}:{account}:parameter/labfleet/{stage}/secrets/*"],
    },
  ],

  /**
   * The parameter operator secrets reach SSM hosts through (shared/cloud/secret-parameters.ts): written once
   * per run by BeginUp, before any host is touched (the hosts' deploys only name it), deleted when the run
   * ends and at teardown. This stage's workshops only.
   */
  secretParameters: [
    {
      sid: "WorkshopSecretParameters",
      actions: ["ssm:PutParameter", "ssm:DeleteParameter"],
      resources: ["arn:{partition}:ssm:{region}:{account}:parameter/labfleet/{stage}/workshops/*"],
    },
  ],

  /** Starting runs: the run state machines, nothing else. */
  workflowsStart: [
    {
      sid: "StartRuns",
      actions: ["states:StartExecution"],
      resources: [stateMachine("up"), stateMachine("teardown"), stateMachine("rollout")],
    },
  ],

  /** Starting exec jobs (`labfleet exec`): the exec state machine, nothing else. */
  execStart: [
    {
      sid: "StartExecJobs",
      actions: ["states:StartExecution"],
      resources: [stateMachine("exec")],
    },
  ],

  /** Stopping runs and reading their executions (a teardown stops a running up). */
  workflowsControl: [
    {
      sid: "ControlRuns",
      actions: ["states:StopExecution", "states:DescribeExecution", "states:GetExecutionHistory"],
      resources: [executions("up"), executions("teardown"), executions("rollout")],
    },
  ],

  /**
   * A run's last step (and an exec job's end) counts its execution's state transitions from the history (Step
   * Functions bills them).
   */
  workflowsHistory: [
    {
      sid: "RunHistory",
      actions: ["states:GetExecutionHistory"],
      resources: [executions("up"), executions("teardown"), executions("rollout"), executions("exec")],
    },
  ],

  /** The one-time TTL schedules of this stage's group, and handing them their role. */
  schedules: [
    {
      sid: "TtlSchedules",
      actions: [
        "scheduler:CreateSchedule",
        "scheduler:UpdateSchedule",
        "scheduler:DeleteSchedule",
        "scheduler:GetSchedule",
      ],
      resources: ["arn:{partition}:scheduler:{region}:{account}:schedule/{app}-{stage}/*"],
    },
    {
      sid: "PassSchedulerRole",
      actions: ["iam:PassRole"],
      resources: ["arn:{partition}:iam::{account}:role/{app}-{stage}-scheduler"],
      conditions: [
        { test: "StringEquals", variable: "iam:PassedToService", values: ["scheduler.amazonaws.com"] },
      ],
    },
  ],

  /** The event forwarder: read the table's stream (never its items) and put events on the stage's bus. */
  tableStream: [
    {
      sid: "TableStream",
      actions: ["dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"],
      resources: ["{table}/stream/*"],
    },
    { sid: "ListStreams", actions: ["dynamodb:ListStreams"], resources: ["*"] },
  ],
  eventsPut: [
    {
      sid: "PutEvents",
      actions: ["events:PutEvents"],
      resources: ["arn:{partition}:events:{region}:{account}:event-bus/{app}-{stage}-events"],
    },
  ],
} satisfies Record<string, Statement[]>;

export type GrantName = keyof typeof GRANTS;

/**
 * The role of the EC2 lab hosts. Students are root on their lab, so anything this role may do, they may do: it
 * is the SSM agent's own calls (registering, fetching and answering Run Command messages) and reading this
 * stage's workshop secret parameters (shared/cloud/secret-parameters.ts). Not AmazonSSMManagedInstanceCore:
 * that policy also allows ssm:GetParameter(s) on every parameter of the account.
 */
export const HOST_ROLE: Statement[] = [
  {
    sid: "SsmAgent",
    actions: ["ssm:UpdateInstanceInformation", "ssm:ListInstanceAssociations"],
    resources: ["*"],
  },
  {
    sid: "SsmAgentMessages",
    actions: [
      "ec2messages:AcknowledgeMessage",
      "ec2messages:DeleteMessage",
      "ec2messages:FailMessage",
      "ec2messages:GetEndpoint",
      "ec2messages:GetMessages",
      "ec2messages:SendReply",
      "ssmmessages:CreateControlChannel",
      "ssmmessages:CreateDataChannel",
      "ssmmessages:OpenControlChannel",
      "ssmmessages:OpenDataChannel",
    ],
    resources: ["*"],
  },
  {
    sid: "WorkshopSecretParameters",
    actions: ["ssm:GetParameter"],
    resources: ["arn:{partition}:ssm:{region}:{account}:parameter/labfleet/{stage}/workshops/*"],
  },
];

/** An IAM policy document from statements, resources filled in (for roles sst.config.ts makes itself). */
export function policyDocument(statements: Statement[], refs: Refs): string {
  return JSON.stringify({
    Version: "2012-10-17",
    Statement: statements.map((s) => ({
      Sid: s.sid,
      Effect: "Allow",
      Action: s.actions,
      Resource: s.resources.map((r) => fill(r, refs)),
      ...(s.conditions
        ? {
            Condition: s.conditions.reduce<Record<string, Record<string, string[]>>>((all, c) => {
              all[c.test] = { ...all[c.test], [c.variable]: c.values.map((v) => fill(v, refs)) };
              return all;
            }, {}),
          }
        : {}),
    })),
  });
}

/** Environment a grant needs besides the common variables (its resources' names). */
const GRANT_ENV: Partial<Record<GrantName, string[]>> = {
  hostsLaunch: [CLOUD_ENV.hostInstanceProfileArn],
  schedules: [CLOUD_ENV.scheduleGroup, CLOUD_ENV.schedulerRoleArn, CLOUD_ENV.scheduleTargetArn],
  // The leftover check lists the stage's schedule group (names only: listing needs no other grant).
  leftovers: [CLOUD_ENV.scheduleGroup, CLOUD_ENV.schedulerRoleArn, CLOUD_ENV.scheduleTargetArn],
  eventsPut: [CLOUD_ENV.eventBus],
  invokeChecks: [CLOUD_ENV.checksFunction],
};

export interface FunctionSpec {
  /** `file.export`, relative to the project root, as sst.aws.Function takes it. */
  handler: string;
  /** The handler's own module (what the entry export wraps), for the tests. */
  source: string;
  description: string;
  timeout: `${number} second${"" | "s"}` | `${number} minute${"" | "s"}`;
  memory: `${number} MB`;
  grants: GrantName[];
  secrets: LinkedSecretName[];
  /**
   * A web function: served through its API Gateway HTTP API (infra/web.ts), never a Function URL, so no request
   * reaches it without passing the API's throttling.
   */
  web?: boolean;
  /** The portal function: its own Deps (shared/cloud/portal-deps.ts) and only the portal's environment. */
  portal?: boolean;
  /** A fixed function name (its ARN is known before it exists: the TTL schedules' target). */
  fixedName?: "sweepFunction" | "checksFunction";
  /**
   * The function tells hosts where the API is, so it is told the API's URL (CLOUD_ENV.hostApiUrl): DeployHost
   * writes it into the push settings of hosts that push (shared/fleet/push-config.ts), the portal into a BYOD
   * student's join line. It needs no grant for it: the host, not the function, calls the API.
   */
  givesHostsTheApiUrl?: boolean;
}

/** What every function that reaches hosts has: the table, SSM commands and the SSH key (read when needed). */
const reachesHosts = {
  grants: ["table", "ssmCommands"] as GrantName[],
  secrets: ["AccessKey", "SshPrivateKey"],
};

/** What removes a lab's new host when it fails (or its old one once the new one is promoted). */
const removesHosts: GrantName[] = ["ec2Read", "hostsTerminate", "securityGroups"];

interface RolloutStep {
  /** What the step does, after "labfleet rollout: ". */
  what: string;
  timeout?: FunctionSpec["timeout"];
  memory?: FunctionSpec["memory"];
  /** The step reaches hosts: it has what every such function has (reachesHosts) besides its own grants. */
  reachesHosts?: boolean;
  grants: GrantName[];
}

/**
 * The steps of the rollout workflow (stepfunctions/rollout.asl.json), each described once: its function is
 * `functions/lambda.<Name>` over the module `functions/<name-in-kebab-case>.ts`, 5 minutes and 512 MB unless
 * said, with the table and the access key (and, when it reaches hosts, what reachesHosts gives).
 */
const ROLLOUT_STEPS = {
  BeginRollout: {
    what: "read the rollout's settings, check the operator secrets, write the secrets parameter",
    timeout: "1 minute",
    grants: ["operatorSecrets", "secretParameters", "lambdaSettings"],
  },
  NextRolloutBatch: {
    what: "the next batch of labs to update, or done (every batch, or a failure halted it)",
    timeout: "1 minute",
    memory: "256 MB",
    grants: [],
  },
  StartRolloutHost: {
    what: "make a lab's new host beside the old one (or update it in place) and start its setup",
    timeout: "15 minutes",
    reachesHosts: true,
    // The provider's create path, as Provision; a failed new host is terminated again.
    grants: ["operatorSecrets", "ec2Read", "quota", "hostsLaunch", "hostsTerminate", "securityGroups"],
  },
  RecordRolloutHostFailure: {
    what: "record why a lab's update failed and remove its new host",
    reachesHosts: true,
    grants: ["operatorSecrets", ...removesHosts],
  },
  PollRollout: {
    what: "check the batch's new labs, promote those that pass lab.health, remove their old hosts",
    reachesHosts: true,
    grants: ["operatorSecrets", ...removesHosts],
  },
  FinishRollout: {
    what: "record the outcome; a completed rollout makes the new ref the workshop's",
    reachesHosts: true,
    grants: ["secretParameters", "workflowsHistory", ...removesHosts],
  },
  FailRollout: {
    what: "halt with the step's error, remove new hosts not promoted",
    reachesHosts: true,
    grants: ["secretParameters", "workflowsHistory", ...removesHosts],
  },
} satisfies Record<string, RolloutStep>;

const ROLLOUT_FUNCTIONS = Object.fromEntries(
  Object.entries(ROLLOUT_STEPS as Record<string, RolloutStep>).map(([name, step]) => [
    name,
    {
      handler: `functions/lambda.${name}`,
      source: `functions/${name.replace(/[A-Z]/g, (c, at: number) => `${at ? "-" : ""}${c.toLowerCase()}`)}.ts`,
      description: `labfleet rollout: ${step.what}`,
      timeout: step.timeout ?? "5 minutes",
      memory: step.memory ?? "512 MB",
      grants: step.reachesHosts ? [...reachesHosts.grants, ...step.grants] : ["table", ...step.grants],
      secrets: step.reachesHosts ? (reachesHosts.secrets as LinkedSecretName[]) : ["AccessKey"],
    } satisfies FunctionSpec,
  ]),
) as Record<keyof typeof ROLLOUT_STEPS, FunctionSpec>;

/**
 * Every Lambda. The task functions are keyed by the X of `${XFunction}` in the ASL (stepfunctions/handlers.ts
 * lists the same ten); `Sweep`, `Api`, `Portal`, `ForwardEvents`, `ReconcileRun` and `RunChecks` are the others.
 */
export const FUNCTIONS = {
  BeginUp: {
    handler: "functions/lambda.BeginUp",
    source: "functions/begin-up.ts",
    description:
      "labfleet up: read the run's settings, check the operator secrets, write the run's secrets parameter",
    timeout: "1 minute",
    memory: "512 MB",
    // checkSecrets reads the operator secrets before a run touches a host; for SSM hosts,
    // publishSecretParameter then writes them once for the run as the workshop's secrets parameter. The
    // account's Lambda concurrency bounds the run's deploy concurrency.
    grants: ["table", "operatorSecrets", "secretParameters", "lambdaSettings"],
    secrets: ["AccessKey"],
  },
  Provision: {
    handler: "functions/lambda.Provision",
    source: "functions/provision.ts",
    description: "labfleet up: create or reuse the hosts, wait for them, schedule the TTL teardown",
    timeout: "15 minutes",
    memory: "512 MB",
    grants: [
      ...reachesHosts.grants,
      "ec2Read",
      "quota",
      "hostsLaunch",
      "hostsTerminate",
      "securityGroups",
      "schedules",
    ],
    secrets: reachesHosts.secrets as LinkedSecretName[],
  },
  DeployHost: {
    handler: "functions/lambda.DeployHost",
    source: "functions/deploy-host.ts",
    description: "labfleet up: sync the lab source to one host and start its setup",
    timeout: "15 minutes",
    memory: "512 MB",
    // secretsForStart reads the operator secrets (stdin to SSH hosts); SSM hosts fetch the parameter BeginUp wrote.
    grants: [...reachesHosts.grants, "operatorSecrets"],
    secrets: reachesHosts.secrets as LinkedSecretName[],
    // Hosts that push (enrolled and SSH ones, never SSM) get the API's URL in push.env before their setup starts.
    givesHostsTheApiUrl: true,
  },
  RecordHostFailure: {
    handler: "functions/lambda.RecordHostFailure",
    source: "functions/record-host-failure.ts",
    description: "labfleet up: record why a host failed (operator secrets redacted)",
    timeout: "1 minute",
    memory: "512 MB",
    grants: ["table", "operatorSecrets"],
    secrets: ["AccessKey"],
  },
  Poll: {
    handler: "functions/lambda.Poll",
    source: "functions/poll.ts",
    description: "labfleet up: check every building lab once (progress, health, access)",
    timeout: "5 minutes",
    memory: "512 MB",
    grants: [...reachesHosts.grants, "operatorSecrets"],
    secrets: reachesHosts.secrets as LinkedSecretName[],
  },
  FailUnfinished: {
    handler: "functions/lambda.FailUnfinished",
    source: "functions/fail-unfinished.ts",
    description: "labfleet up: stop and fail the labs still building at the deadline",
    timeout: "5 minutes",
    memory: "512 MB",
    grants: reachesHosts.grants,
    secrets: reachesHosts.secrets as LinkedSecretName[],
  },
  FinishUp: {
    handler: "functions/lambda.FinishUp",
    source: "functions/finish-up.ts",
    description:
      "labfleet up: record the run's outcome, delete the run's secrets parameter, open the lab UIs when asked",
    timeout: "1 minute",
    memory: "512 MB",
    grants: ["table", "secretParameters", "openAccess", "workflowsHistory"],
    secrets: ["AccessKey"],
  },
  FailRun: {
    handler: "functions/lambda.FailRun",
    source: "functions/fail-run.ts",
    description: "labfleet up: fail the run with the step's error, delete the run's secrets parameter",
    timeout: "1 minute",
    memory: "512 MB",
    grants: ["table", "secretParameters", "workflowsHistory"],
    secrets: ["AccessKey"],
  },
  Deprovision: {
    handler: "functions/lambda.Deprovision",
    source: "functions/deprovision.ts",
    description: "labfleet teardown: stop the labs, terminate labfleet's instances",
    timeout: "5 minutes",
    memory: "512 MB",
    grants: [...reachesHosts.grants, "ec2Read", "hostsTerminate", "securityGroups"],
    secrets: reachesHosts.secrets as LinkedSecretName[],
  },
  FinishTeardown: {
    handler: "functions/lambda.FinishTeardown",
    source: "functions/finish-teardown.ts",
    description:
      "labfleet teardown: record the outcome, delete the TTL schedule, the portal and the secrets parameter, take the receipt",
    timeout: "1 minute",
    memory: "512 MB",
    grants: ["table", "schedules", "secretParameters", "workflowsHistory", "leftovers"],
    secrets: ["AccessKey"],
  },
  ...ROLLOUT_FUNCTIONS,
  ExecStep: {
    handler: "functions/lambda.ExecStep",
    source: "functions/exec-step.ts",
    description:
      "labfleet exec: check the hosts whose command runs, collect what ended, start more (short commands only)",
    timeout: "5 minutes",
    memory: "512 MB",
    // The command runs detached on the host: each step sends short commands (start, check, kill) and redacts
    // the output with the operator secrets before it is stored.
    grants: [...reachesHosts.grants, "operatorSecrets", "workflowsHistory"],
    secrets: reachesHosts.secrets as LinkedSecretName[],
  },
  ExecFail: {
    handler: "functions/lambda.ExecFail",
    source: "functions/exec-fail.ts",
    description: "labfleet exec: fail the job with the step's error (operator secrets redacted)",
    timeout: "1 minute",
    memory: "512 MB",
    grants: ["table", "operatorSecrets", "workflowsHistory"],
    secrets: ["AccessKey"],
  },
  FailTeardown: {
    handler: "functions/lambda.FailTeardown",
    source: "functions/fail-teardown.ts",
    description:
      "labfleet teardown: fail the run with the step's error, take a receipt of what is left and how to remove it",
    timeout: "1 minute",
    memory: "512 MB",
    // The receipt's leftover check (EC2 by the ownership tags, the TTL schedule, the secrets parameter).
    grants: ["table", "secretParameters", "workflowsHistory", "leftovers"],
    secrets: ["AccessKey"],
  },
  ReconcileRun: {
    handler: "functions/lambda.ReconcileRun",
    source: "functions/reconcile-run.ts",
    description:
      "labfleet runs: fail a run whose Step Functions execution failed, timed out or was aborted outside labfleet; a teardown's takes its receipt",
    timeout: "1 minute",
    memory: "256 MB",
    // A teardown's receipt: the leftover check, as FailTeardown's (EC2 by the ownership tags, the TTL schedule,
    // the secrets parameter).
    grants: ["table", "secretParameters", "workflowsHistory", "leftovers"],
    secrets: ["AccessKey"],
  },
  Sweep: {
    handler: "functions/lambda.Sweep",
    source: "functions/sweep.ts",
    description:
      "labfleet sweeper: fire due TTL schedules, terminate expired labfleet instances, health-check ready labs",
    timeout: "5 minutes",
    memory: "512 MB",
    // The health pass runs lab.health on ready labs through their transport (SSM commands, the SSH key), and a
    // swap's rebuild (portal.auto_swap) starts a retry run.
    grants: [
      ...reachesHosts.grants,
      "ec2Read",
      "hostsTerminate",
      "securityGroups",
      "workflowsStart",
      "workflowsControl",
      "operatorSecrets",
      "leftovers",
    ],
    secrets: reachesHosts.secrets as LinkedSecretName[],
    fixedName: "sweepFunction",
  },
  Api: {
    handler: "web/lambda.api",
    source: "web/lambda.ts",
    description: "labfleet instructor API and console",
    // API Gateway answers its client after 30 s whatever the function does (web/lambda.ts cuts requests to it).
    // It also serves what hosts call (/agent/v1: enrolled hosts' joins, long polls and results, pushed progress),
    // which needs the table and the access key only: join tokens, host secrets and queued commands are items.
    timeout: "30 seconds",
    memory: "1024 MB",
    grants: [
      ...reachesHosts.grants,
      "ec2Read",
      "quota",
      "hostsTerminate",
      "hostsRetag",
      "securityGroups",
      "operatorSecrets",
      "workflowsStart",
      "workflowsControl",
      "execStart",
      "schedules",
    ],
    secrets: [
      ...(reachesHosts.secrets as LinkedSecretName[]),
      "InstructorToken",
      "GithubClientSecret",
      "GoogleClientSecret",
    ],
    web: true,
  },
  ForwardEvents: {
    handler: "functions/lambda.ForwardEvents",
    source: "functions/forward-events.ts",
    description: "labfleet events: the table stream's new event records to the stage's EventBridge bus",
    timeout: "1 minute",
    memory: "256 MB",
    grants: ["tableStream", "eventsPut"],
    secrets: [],
  },
  RunChecks: {
    handler: "functions/lambda.RunChecks",
    source: "functions/run-checks.ts",
    description: "labfleet portal: run a lab's checks (lab.checks) on its host for Check my work",
    // The portal waits for it within its own 30 seconds: half of this is the checks' deadline (25 s), more
    // than the slowest check may take (15 s) with SSM's delivery and polling.
    timeout: "50 seconds",
    memory: "512 MB",
    // The checks' output is redacted with the operator secrets before it leaves the function.
    grants: [...reachesHosts.grants, "operatorSecrets"],
    secrets: reachesHosts.secrets as LinkedSecretName[],
    fixedName: "checksFunction",
  },
  Portal: {
    handler: "web/portal-lambda.portal",
    source: "web/portal-lambda.ts",
    description: "labfleet student portal (table items, and invoking RunChecks)",
    timeout: "30 seconds",
    memory: "1024 MB",
    grants: ["portalTable", "invokeChecks"],
    secrets: ["AccessKey"],
    web: true,
    portal: true,
    // A BYOD student's join page (portal.enrollment: claim) holds the line their machine runs against the API.
    givesHostsTheApiUrl: true,
  },
} satisfies Record<string, FunctionSpec>;

export type FunctionName = keyof typeof FUNCTIONS;

/** The functions Step Functions invokes: every one but the sweeper, the web's two and the event consumers. */
export const TASK_FUNCTIONS = (Object.keys(FUNCTIONS) as FunctionName[]).filter(
  (n) => !["Sweep", "Api", "Portal", "ForwardEvents", "ReconcileRun", "RunChecks"].includes(n),
);

/** The state machines' role: invoke the task functions (and their versions and aliases), nothing else. */
export function stateMachineRole(taskFunctionArns: string[]): Statement[] {
  return [
    {
      sid: "InvokeTasks",
      actions: ["lambda:InvokeFunction"],
      resources: taskFunctionArns.flatMap((arn) => [arn, `${arn}:*`]),
    },
  ];
}

/** The role EventBridge Scheduler assumes for the TTL schedules: invoke the sweep function, nothing else. */
export function schedulerRole(sweepFunctionArn: string): Statement[] {
  return [{ sid: "InvokeSweep", actions: ["lambda:InvokeFunction"], resources: [sweepFunctionArn] }];
}

/**
 * The EventBridge rule on the default bus that sends ReconcileRun the end of every execution of this stage's
 * state machines that did not end by itself in success: Step Functions puts an "Execution Status Change" event
 * there for each status change. A run whose execution failed, timed out or was aborted while its record still
 * says running is failed with the execution's error.
 */
export function executionEndedPattern(stateMachineArns: string[]): Record<string, unknown> {
  return {
    source: ["aws.states"],
    "detail-type": ["Step Functions Execution Status Change"],
    detail: { status: ["FAILED", "TIMED_OUT", "ABORTED"], stateMachineArn: stateMachineArns },
  };
}

/** The table stream's filter for the event forwarder: only new event records (ElectroDB's entity marker). */
export const EVENT_RECORDS_FILTER = {
  eventName: ["INSERT"],
  dynamodb: { NewImage: { __edb_e__: { S: ["event"] } } },
} as const;

export function specOf(name: FunctionName): FunctionSpec {
  return FUNCTIONS[name] as FunctionSpec;
}

/**
 * The packages installed beside a function's bundle instead of bundled (`nodejs.install`): `ssh2` carries native
 * addons esbuild cannot bundle. The portal's bundle has no SSH code, so nothing.
 */
export function installOf(name: FunctionName): string[] {
  return specOf(name).portal ? [] : ["ssh2"];
}

/** A function's statements, templates unresolved. */
export function statementsOf(name: FunctionName): Statement[] {
  return specOf(name).grants.flatMap((g) => GRANTS[g] as Statement[]);
}

/** Fills `{partition}`, `{region}`, `{account}`, `{stage}`, `{app}` and `{table}`; an unknown one throws. */
export function fill(template: string, refs: Refs): string {
  return template.replace(/\{(\w+)\}/g, (whole, key: string) => {
    if (!Object.hasOwn(refs, key)) throw new Error(`unknown placeholder ${whole} in ${template}`);
    return refs[key as keyof Refs];
  });
}

/** A function's statements with their resources filled in, in the shape sst.aws.Function's `permissions` takes. */
export function resolveStatements(name: FunctionName, refs: Refs) {
  return statementsOf(name).map((s) => ({
    actions: s.actions,
    resources: s.resources.map((r) => fill(r, refs)),
    ...(s.conditions
      ? { conditions: s.conditions.map((c) => ({ ...c, values: c.values.map((v) => fill(v, refs)) })) }
      : {}),
  }));
}

/** A function's IAM policy document as AWS holds it for its role (what the AWS double evaluates). */
export function functionPolicy(name: FunctionName, refs: Refs): string {
  return policyDocument(statementsOf(name), refs);
}

/** The environment variable names a function gets (values: sst.config.ts). */
export function envNamesOf(name: FunctionName): string[] {
  const spec = specOf(name);
  const push = spec.givesHostsTheApiUrl ? [CLOUD_ENV.hostApiUrl] : [];
  if (spec.portal) return [CLOUD_ENV.table, CLOUD_ENV.stage, CLOUD_ENV.checksFunction, ...push];
  const common: string[] = [
    CLOUD_ENV.table,
    CLOUD_ENV.stage,
    CLOUD_ENV.upStateMachineArn,
    CLOUD_ENV.teardownStateMachineArn,
    CLOUD_ENV.rolloutStateMachineArn,
    CLOUD_ENV.execStateMachineArn,
  ];
  const extra = spec.grants.flatMap((g) => GRANT_ENV[g] ?? []);
  const web = spec.web ? [CLOUD_ENV.portalUrl] : [];
  return [...new Set([...common, ...extra, ...web, ...push])];
}

/**
 * The ASL with each `${XFunction}` replaced by the ARN of function X. A placeholder without a function is an
 * error, so a Task cannot reach AWS pointing nowhere.
 */
export function substituteFunctionArns(asl: string, arns: Partial<Record<string, string>>): string {
  return asl.replace(/\$\{(\w+)Function\}/g, (whole, key: string) => {
    const arn = arns[key];
    if (!arn) throw new Error(`the ASL names ${whole}, which is not a deployed function`);
    return arn;
  });
}

/** Every `${XFunction}` placeholder in an ASL text, as X. */
export function functionPlaceholders(asl: string): string[] {
  return [...new Set([...asl.matchAll(/\$\{(\w+)Function\}/g)].map((m) => m[1] as string))];
}
