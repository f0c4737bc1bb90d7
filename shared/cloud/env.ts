/**
 * The environment contract between sst.config.ts and the cloud composition root (shared/cloud/deps.ts). Plain
 * constants, no imports: infra/ reads them to set each Lambda's environment, deps.ts to read it back.
 *
 * Secrets are not here: they are `sst.Secret`s linked to the functions that need them, read through SST's
 * `Resource` (which also reads `SST_RESOURCE_<Name>` variables, the form tests and scripts use).
 */
export const CLOUD_ENV = {
  /** The DynamoDB table's name. */
  table: "LABFLEET_TABLE",
  /** The SST stage: names the Parameter Store prefix `/labfleet/<stage>/secrets/` and the schedule group. */
  stage: "LABFLEET_STAGE",
  upStateMachineArn: "LABFLEET_UP_STATE_MACHINE_ARN",
  teardownStateMachineArn: "LABFLEET_TEARDOWN_STATE_MACHINE_ARN",
  rolloutStateMachineArn: "LABFLEET_ROLLOUT_STATE_MACHINE_ARN",
  /** The exec jobs' state machine (stepfunctions/exec.asl.json). */
  execStateMachineArn: "LABFLEET_EXEC_STATE_MACHINE_ARN",
  /** The instance profile EC2 hosts get, so their SSM agent can register (AmazonSSMManagedInstanceCore). */
  hostInstanceProfileArn: "LABFLEET_HOST_INSTANCE_PROFILE_ARN",
  /** The EventBridge Scheduler group TTL schedules are created in (`labfleet-<stage>`). */
  scheduleGroup: "LABFLEET_SCHEDULE_GROUP",
  /** The role EventBridge Scheduler assumes to invoke the schedules' target. */
  schedulerRoleArn: "LABFLEET_SCHEDULER_ROLE_ARN",
  /** What a TTL schedule invokes: the sweep function (functions/sweep.ts fires that workshop's record). */
  scheduleTargetArn: "LABFLEET_SCHEDULE_TARGET_ARN",
  /** The EventBridge bus the event forwarder puts workshop events on (`labfleet-<stage>-events`). */
  eventBus: "LABFLEET_EVENT_BUS",
  /**
   * The portal's public URL (its HTTP API's custom domain, else its execute-api URL): the instructor function sends
   * students there and prints it (`portal info`, `portal slide`, the console's slide).
   */
  portalUrl: "LABFLEET_PORTAL_URL",
  /**
   * The instructor API's public URL (its HTTP API's custom domain, else its execute-api URL), where hosts that can
   * reach it push their lab's progress (shared/fleet/push-config.ts): the function that deploys labs writes it into
   * each pushing host's `push.env`. Enrolled hosts call the same API for their commands (/agent/v1).
   */
  hostApiUrl: "LABFLEET_API_URL",
  /** The RunChecks function's name: the portal invokes it for "Check my work". */
  checksFunction: "LABFLEET_CHECKS_FUNCTION",
} as const;

/** The `sst.Secret`s, by the name they are linked under (`npx sst secret set <Name> ...`). */
export const LINKED_SECRETS = [
  "AccessKey",
  "InstructorToken",
  "SshPrivateKey",
  "GithubClientSecret",
  "GoogleClientSecret",
] as const;
export type LinkedSecretName = (typeof LINKED_SECRETS)[number];

/**
 * API Gateway's integration timeout for HTTP APIs (30 s, the most it allows): a function still running then has its
 * client answered 503, so the web functions' request deadlines are cut to it (web/lambda.ts).
 * https://docs.aws.amazon.com/apigateway/latest/developerguide/http-api-quotas.html
 */
export const HTTP_API_INTEGRATION_TIMEOUT_MS = 30_000;

/** The value sst.config.ts gives the optional secrets (SSH key, OAuth client secrets) until they are set. */
export const SECRET_NOT_SET = "not-set";

/** Where operator secrets (`lab.operator_secrets`) live in Parameter Store: one SecureString per key. */
export function operatorSecretsPrefix(stage: string): string {
  return `/labfleet/${stage}/secrets/`;
}
