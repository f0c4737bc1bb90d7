import {
  DeleteParameterCommand,
  ParameterNotFound,
  PutParameterCommand,
  SSMClient,
  ValidationException,
} from "@aws-sdk/client-ssm";
import { mockClient } from "aws-sdk-client-mock";
import { beforeEach, describe, expect, it } from "vitest";
import {
  SECRET_PARAMETER_MAX_BYTES,
  SsmSecretParameters,
  workshopSecretsParameter,
} from "../../shared/cloud/secret-parameters.ts";
import { VisibleError } from "../../shared/runtime/errors.ts";

const ssm = mockClient(SSMClient);
const meta = { $metadata: {} };
const NAME = "/labfleet/prod/workshops/k8s-intro/secrets";
const VALUES = { API_TOKEN: "tok-'quoted'-value-0001", LICENCE_KEY: "lic\nwith newline ü" };

function writer(keyId?: string): SsmSecretParameters {
  return new SsmSecretParameters({
    client: new SSMClient({ region: "eu-west-1" }),
    stage: "prod",
    ...(keyId ? { keyId } : {}),
  });
}

async function thrown(p: Promise<unknown>): Promise<VisibleError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(VisibleError);
  return err as VisibleError;
}

beforeEach(() => ssm.reset());

describe("SsmSecretParameters", () => {
  it("names one parameter per stage and workshop", () => {
    expect(workshopSecretsParameter("prod", "k8s-intro")).toBe(NAME);
    expect(writer().nameOf("k8s-intro")).toBe(NAME);
    expect(() => new SsmSecretParameters({ client: new SSMClient({}), stage: "a/b" })).toThrow(
      'not a stage name: "a/b"',
    );
    expect(() => writer().nameOf("../x")).toThrow("not a workshop name");
  });

  it("put writes the values as one JSON SecureString, overwriting, and returns its name", async () => {
    ssm.on(PutParameterCommand).resolves({ ...meta, Version: 3, Tier: "Standard" });
    expect(await writer().put("k8s-intro", VALUES)).toBe(NAME);
    const calls = ssm.commandCalls(PutParameterCommand);
    expect(calls).toHaveLength(1);
    expect(calls[0]?.args[0].input).toEqual({
      Name: NAME,
      Value: JSON.stringify(VALUES),
      Type: "SecureString",
      Overwrite: true,
      Tier: "Intelligent-Tiering",
      Description:
        "labfleet: operator secrets of workshop k8s-intro, fetched by its hosts; deleted at teardown",
    });
    expect(ssm.calls()).toHaveLength(1);
  });

  it("put encrypts with a customer managed key when one is given", async () => {
    ssm.on(PutParameterCommand).resolves({ ...meta, Version: 1 });
    await writer("alias/labfleet-secrets").put("k8s-intro", VALUES);
    expect(ssm.commandCalls(PutParameterCommand)[0]?.args[0].input).toMatchObject({
      Name: NAME,
      Type: "SecureString",
      KeyId: "alias/labfleet-secrets",
    });
  });

  it("put refuses values larger than a parameter holds, before any call, without naming a value", async () => {
    const big = { BIG: "x".repeat(SECRET_PARAMETER_MAX_BYTES) };
    const err = await thrown(writer().put("k8s-intro", big));
    expect(err.code).toBe("secrets.too_large");
    expect(err.message).toContain("(BIG)");
    expect(err.message).not.toContain("xxxx");
    expect(ssm.calls()).toHaveLength(0);
  });

  it("an AWS error is reported by its name, never its message (which may quote the value)", async () => {
    ssm.on(PutParameterCommand).rejects(
      new ValidationException({
        $metadata: {},
        message: `1 validation error detected: Value '${JSON.stringify(VALUES)}' at 'value' failed`,
      }),
    );
    const err = await thrown(writer().put("k8s-intro", VALUES));
    expect(err.code).toBe("secrets.parameter_failed");
    expect(err.message).toBe(
      `Parameter Store refused to write ${NAME} (ValidationException): the control plane needs ssm:PutParameter on it`,
    );
    for (const v of Object.values(VALUES)) expect(err.message).not.toContain(v);
  });

  it("remove deletes the parameter; one already gone is fine", async () => {
    ssm
      .on(DeleteParameterCommand)
      .resolvesOnce(meta)
      .rejectsOnce(new ParameterNotFound({ $metadata: {}, message: "not found" }));
    await writer().remove("k8s-intro");
    await writer().remove("k8s-intro");
    expect(ssm.commandCalls(DeleteParameterCommand).map((c) => c.args[0].input)).toEqual([
      { Name: NAME },
      { Name: NAME },
    ]);
  });

  it("remove reports any other error by name", async () => {
    const denied = new Error("User: arn:aws:sts::1:assumed-role/x is not authorized");
    denied.name = "AccessDeniedException";
    ssm.on(DeleteParameterCommand).rejects(denied);
    const err = await thrown(writer().remove("k8s-intro"));
    expect(err.message).toBe(
      `Parameter Store refused to delete ${NAME} (AccessDeniedException): the control plane needs ssm:DeleteParameter on it`,
    );
  });
});
