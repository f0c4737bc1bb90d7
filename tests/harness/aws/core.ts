import { createHash } from "node:crypto";

/**
 * The AWS double's shared vocabulary: the test account, who calls (principals, identified by the access key id
 * of their SigV4 signature, as AWS identifies them), and the error every service double throws. Each service
 * double (ec2.ts, ssm.ts, ...) implements operations as `(input, call) => output`, and authorizes what the request
 * touches with `call.authorize([...])` before it changes anything, with the resource ARNs and condition keys AWS
 * puts in that request.
 */

export const FAKE_PARTITION = "aws";
export const FAKE_REGION = "eu-west-1";
export const FAKE_ACCOUNT_ID = "123456789012";

/** An IAM policy document, as iam-simulate takes it. */
export interface PolicyDocument {
  Version: "2012-10-17";
  Statement: Record<string, unknown>[];
}

export type PrincipalKind = "function" | "host" | "service" | "operator";

/**
 * Who makes a call. `policy` is the identity policy AWS evaluates for it; an operator (the test itself, acting
 * as the account's administrator to set things up or look at them) has none and may do anything.
 */
export interface Principal {
  /** Unique: a function's name (`BeginUp`), `host`, `states`, `scheduler`, `operator`. */
  name: string;
  kind: PrincipalKind;
  /** The role session ARN, as IAM evaluates and as AWS's error messages name it. */
  arn: string;
  accessKeyId: string;
  policy?: PolicyDocument;
}

export interface FakeCredentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken: string;
}

/** A stable access key id for a principal's name: `ASIA` and 16 upper-case letters and digits. */
export function accessKeyIdFor(name: string): string {
  const digest = createHash("sha256").update(`labfleet-fake-aws:${name}`).digest();
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
  let id = "ASIA";
  for (let i = 0; i < 16; i++) id += alphabet[(digest[i] as number) % 32];
  return id;
}

/** The temporary credentials a principal signs with (a Lambda's role session, an instance profile's). */
export function credentialsFor(name: string): FakeCredentials {
  return {
    accessKeyId: accessKeyIdFor(name),
    secretAccessKey: createHash("sha256").update(`secret:${name}`).digest("base64").slice(0, 40),
    sessionToken: `fake-session-${name}`,
  };
}

/** The access key id in a SigV4 `Authorization` header, and the service and region of its credential scope. */
export function signatureScope(
  authorization: string | undefined,
): { accessKeyId: string; region: string; service: string } | undefined {
  const m = /Credential=([^/,\s]+)\/\d{8}\/([^/]+)\/([^/]+)\/aws4_request/.exec(authorization ?? "");
  if (!m) return undefined;
  return { accessKeyId: m[1] as string, region: m[2] as string, service: m[3] as string };
}

/**
 * An error as an AWS service answers it: `code` is what the SDK turns into the error's `name` (the shape name
 * for JSON protocols, `Code` for EC2), `status` the HTTP status.
 */
export class AwsError extends Error {
  override name = "AwsError";
  constructor(
    readonly code: string,
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

/**
 * An operation's answer sent exactly as given, for services the double passes through (DynamoDB, proxied to
 * DynamoDB Local after IAM): the server does not encode it.
 */
export class RawReply {
  constructor(
    readonly status: number,
    readonly headers: Record<string, string>,
    readonly body: string | Buffer,
  ) {}
}

/** One thing IAM decides for a request: an action on a resource, with the condition keys AWS puts in it. */
export interface AuthRequest {
  action: string;
  /** The resource ARN, or `*` for actions that take none. */
  resource: string;
  context?: Record<string, string | string[]>;
}

/** What a service double's operation gets besides its input. */
export interface Call {
  principal: Principal;
  /** The signing name: ec2, ssm, servicequotas, scheduler, states, dynamodb, events, lambda. */
  service: string;
  operation: string;
  requestId: string;
  /**
   * Evaluates every request against the principal's policy; the first one denied throws the service's
   * AccessDenied error (EC2: UnauthorizedOperation) naming the principal, action and resource, as AWS does.
   */
  authorize(requests: AuthRequest[]): Promise<void>;
}

// biome-ignore lint/suspicious/noExplicitAny: operation inputs and outputs are the SDK's shapes, checked by each double
export type Operation = (input: any, call: Call) => unknown | Promise<unknown>;
export type Operations = Record<string, Operation>;

/** ARNs of the test account, as AWS writes them. */
export const arn = {
  ec2: (type: string, id: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:ec2:${region}:${type === "image" ? "" : FAKE_ACCOUNT_ID}:${type}/${id}`,
  ssmParameter: (name: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:ssm:${region}:${FAKE_ACCOUNT_ID}:parameter${name.startsWith("/") ? "" : "/"}${name}`,
  ssmDocument: (name: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:ssm:${region}::document/${name}`,
  role: (name: string) => `arn:${FAKE_PARTITION}:iam::${FAKE_ACCOUNT_ID}:role/${name}`,
  instanceProfile: (name: string) => `arn:${FAKE_PARTITION}:iam::${FAKE_ACCOUNT_ID}:instance-profile/${name}`,
  lambda: (name: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:lambda:${region}:${FAKE_ACCOUNT_ID}:function:${name}`,
  stateMachine: (name: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:states:${region}:${FAKE_ACCOUNT_ID}:stateMachine:${name}`,
  execution: (machine: string, name: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:states:${region}:${FAKE_ACCOUNT_ID}:execution:${machine}:${name}`,
  schedule: (group: string, name: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:scheduler:${region}:${FAKE_ACCOUNT_ID}:schedule/${group}/${name}`,
  eventBus: (name: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:events:${region}:${FAKE_ACCOUNT_ID}:event-bus/${name}`,
  table: (name: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:dynamodb:${region}:${FAKE_ACCOUNT_ID}:table/${name}`,
  quota: (service: string, code: string, region = FAKE_REGION) =>
    `arn:${FAKE_PARTITION}:servicequotas:${region}:${FAKE_ACCOUNT_ID}:${service}/${code}`,
};
