import {
  DeleteParameterCommand,
  DescribeParametersCommand,
  PutParameterCommand,
  type SSMClient,
} from "@aws-sdk/client-ssm";
import type { Leftover } from "../providers/types.ts";
import type { SecretParameters } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";

/**
 * Operator secrets for hosts reached through SSM. SSM keeps every command's parameters (the script, so any
 * stdin sent with it) in its command history for 30 days, so the values never travel in a command: the
 * control plane writes them as one SecureString parameter, `/labfleet/<stage>/workshops/<workshop>/secrets`
 * (a JSON object of name -> value), once per run before any host is touched (publishSecretParameter, in
 * BeginUp), and each host fetches it with its own instance role (see secretsForStart). The parameter is deleted
 * when the run that wrote it ends and at teardown.
 *
 * A teardown's receipt looks for it with DescribeParameters (metadata only, never a value; ssm:DescribeParameters
 * takes no resource), filtered on its exact name: the stage's path is the parameter's ownership.
 *
 * IAM: the control plane needs ssm:PutParameter and ssm:DeleteParameter on
 * `arn:aws:ssm:<region>:<account>:parameter/labfleet/<stage>/workshops/*`; the hosts' instance profile needs
 * ssm:GetParameter on the same path. With the default `aws/ssm` KMS key no KMS grant is needed (its key
 * policy lets the account use it through SSM); with `keyId`, the control plane needs kms:Encrypt
 * (kms:GenerateDataKey) and the instance profile kms:Decrypt on that key.
 *
 * Nothing here ever echoes a value: AWS validation errors can quote the request, so an AWS error is
 * reported by its name and the parameter name only.
 */

/** A stage names a path segment: the same rule as the operator secret store's. */
const STAGE = /^[A-Za-z0-9][A-Za-z0-9-]{0,63}$/;
const WORKSHOP = /^[a-z0-9-]{1,40}$/;
/** An advanced parameter holds at most 8 KB (a standard one 4 KB, Intelligent-Tiering picks). */
export const SECRET_PARAMETER_MAX_BYTES = 8192;

export function workshopSecretsParameter(stage: string, workshop: string): string {
  return `/labfleet/${stage}/workshops/${workshop}/secrets`;
}

export interface SsmSecretParametersOptions {
  client: SSMClient;
  /** The SST stage (`LABFLEET_STAGE`). */
  stage: string;
  /** A customer managed KMS key (id, ARN or alias) instead of the default `aws/ssm` key. */
  keyId?: string;
}

function errorName(err: unknown): string {
  return typeof err === "object" && err !== null && "name" in err ? String(err.name) : "Error";
}

export class SsmSecretParameters implements SecretParameters {
  private readonly client: SSMClient;
  private readonly stage: string;
  private readonly keyId: string | undefined;

  constructor(opts: SsmSecretParametersOptions) {
    if (!STAGE.test(opts.stage)) {
      throw new Error(`not a stage name: "${opts.stage}" (letters, digits and dashes)`);
    }
    this.client = opts.client;
    this.stage = opts.stage;
    this.keyId = opts.keyId;
  }

  nameOf(workshop: string): string {
    if (!WORKSHOP.test(workshop)) {
      throw new VisibleError(
        "input",
        "secrets.bad_workshop",
        `not a workshop name: ${workshop.slice(0, 40)}`,
      );
    }
    return workshopSecretsParameter(this.stage, workshop);
  }

  async put(workshop: string, values: Record<string, string>): Promise<string> {
    const Name = this.nameOf(workshop);
    const Value = JSON.stringify(values);
    if (Buffer.byteLength(Value, "utf8") > SECRET_PARAMETER_MAX_BYTES) {
      throw new VisibleError(
        "input",
        "secrets.too_large",
        `the operator secrets of ${workshop} (${Object.keys(values).join(", ")}) take more than ${SECRET_PARAMETER_MAX_BYTES} bytes as JSON, more than one Parameter Store parameter holds: store a smaller value (for example a token that fetches the rest)`,
      );
    }
    try {
      await this.client.send(
        new PutParameterCommand({
          Name,
          Value,
          Type: "SecureString",
          Overwrite: true,
          Tier: "Intelligent-Tiering",
          Description: `labfleet: operator secrets of workshop ${workshop}, fetched by its hosts; deleted at teardown`,
          ...(this.keyId ? { KeyId: this.keyId } : {}),
        }),
      );
    } catch (err) {
      throw new VisibleError(
        "host",
        "secrets.parameter_failed",
        `Parameter Store refused to write ${Name} (${errorName(err)}): the control plane needs ssm:PutParameter on it${this.keyId ? " and kms:Encrypt on its key" : ""}`,
      );
    }
    return Name;
  }

  async remove(workshop: string): Promise<void> {
    const Name = this.nameOf(workshop);
    try {
      await this.client.send(new DeleteParameterCommand({ Name }));
    } catch (err) {
      if (errorName(err) === "ParameterNotFound") return;
      throw new VisibleError(
        "host",
        "secrets.parameter_failed",
        `Parameter Store refused to delete ${Name} (${errorName(err)}): the control plane needs ssm:DeleteParameter on it`,
      );
    }
  }

  async leftover(workshop: string): Promise<Leftover | undefined> {
    const Name = this.nameOf(workshop);
    let NextToken: string | undefined;
    do {
      const page = await this.client.send(
        new DescribeParametersCommand({
          ParameterFilters: [{ Key: "Name", Option: "Equals", Values: [Name] }],
          ...(NextToken ? { NextToken } : {}),
        }),
      );
      if ((page.Parameters ?? []).some((p) => p.Name === Name)) {
        const region = await this.client.config.region();
        return {
          kind: "parameter",
          id: Name,
          why: "the operator secrets parameter was not deleted",
          command: `aws ssm delete-parameter --region ${region} --name ${Name}`,
        };
      }
      NextToken = page.NextToken;
    } while (NextToken);
    return undefined;
  }
}
