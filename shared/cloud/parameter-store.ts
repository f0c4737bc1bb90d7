import { GetParametersCommand, type GetParametersCommandOutput, type SSMClient } from "@aws-sdk/client-ssm";
import type { SecretStore } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { operatorSecretsPrefix } from "./env.ts";

/** GetParameters takes at most 10 names per call. */
export const GET_PARAMETERS_BATCH = 10;

/** A key becomes a shell variable on the host (`secrets.env`) and a path segment here: nothing else passes. */
const KEY = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const STAGE = /^[A-Za-z0-9][A-Za-z0-9-]{0,63}$/;

function errorName(err: unknown): string {
  return typeof err === "object" && err !== null && "name" in err ? String(err.name) : "Error";
}

/**
 * The cloud's operator secret store: one SecureString per key under `/labfleet/<stage>/secrets/<KEY>`,
 * read with GetParameters (WithDecryption) in batches of 10. Keys Parameter Store does not hold are listed
 * as missing. Values are returned to the caller and nowhere else: no log line and no error message holds
 * one (an AWS error is reported by its name and the parameter path only).
 *
 * Needs ssm:GetParameters on `arn:aws:ssm:<region>:<account>:parameter/labfleet/<stage>/secrets/*`; the
 * default `aws/ssm` KMS key needs no IAM grant of its own.
 */
export function parameterStoreSecrets(opts: { client: SSMClient; stage: string }): SecretStore & {
  prefix: string;
} {
  if (!STAGE.test(opts.stage)) {
    throw new Error(`not a stage name: "${opts.stage}" (letters, digits and dashes)`);
  }
  const prefix = operatorSecretsPrefix(opts.stage);
  return {
    prefix,
    async get(keys) {
      const wanted = [...new Set(keys)];
      const bad = wanted.filter((k) => !KEY.test(k));
      if (bad.length > 0) {
        throw new VisibleError(
          "input",
          "secrets.bad_key",
          `operator secret keys must be variable names (A-Z, 0-9, _): ${bad.map((k) => JSON.stringify(k.slice(0, 40))).join(", ")}`,
        );
      }
      const values: Record<string, string> = {};
      for (let i = 0; i < wanted.length; i += GET_PARAMETERS_BATCH) {
        const batch = wanted.slice(i, i + GET_PARAMETERS_BATCH);
        let out: GetParametersCommandOutput;
        try {
          out = await opts.client.send(
            new GetParametersCommand({ Names: batch.map((k) => prefix + k), WithDecryption: true }),
          );
        } catch (err) {
          throw new VisibleError(
            "input",
            "secrets.unavailable",
            `Parameter Store refused to read ${prefix}{${batch.join(",")}} (${errorName(err)})`,
          );
        }
        for (const p of out.Parameters ?? []) {
          if (p.Name?.startsWith(prefix) && p.Value !== undefined)
            values[p.Name.slice(prefix.length)] = p.Value;
        }
      }
      return { values, missing: wanted.filter((k) => !Object.hasOwn(values, k)) };
    },
  };
}
