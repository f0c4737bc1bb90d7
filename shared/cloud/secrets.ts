import { type LinkedSecretName, SECRET_NOT_SET } from "./env.ts";

/** What the cloud entries share: the environment, linked secrets and the checks on both. */

export type Env = Record<string, string | undefined>;

/** A linked secret's value, or undefined when it is not linked to this function (or never set). */
export type LinkedSecrets = (name: LinkedSecretName) => string | undefined;

/**
 * Linked secrets as SST's `Resource` reads them from the environment: `SST_RESOURCE_<Name>` holding
 * `{"value": "..."}`. The Lambda entries pass SST's own `Resource` instead (it also decrypts the values SST
 * bundles with the function); this form serves tests and anything run outside SST.
 */
export function envLinkedSecrets(env: Env): LinkedSecrets {
  return (name) => {
    const raw = env[`SST_RESOURCE_${name}`];
    if (raw === undefined) return undefined;
    try {
      const parsed = JSON.parse(raw) as { value?: unknown };
      return typeof parsed?.value === "string" ? parsed.value : undefined;
    } catch {
      // The variable's content is a secret: it is not quoted back.
      throw new Error(`SST_RESOURCE_${name} is not JSON of the form {"value": "..."}`);
    }
  };
}

/**
 * Linked secrets from SST's `Resource` object (`import { Resource } from "sst/resource"` in the Lambda
 * entries): the ones linked to this function, undefined for the others. shared/ never imports `sst`.
 */
export function linkedFrom(resources: object): LinkedSecrets {
  return (name) => {
    if (!(name in resources)) return undefined;
    const linked = (resources as Record<string, { value?: unknown } | undefined>)[name];
    return typeof linked?.value === "string" ? linked.value : undefined;
  };
}

export function required(env: Env, names: string[]): void {
  const missing = names.filter((n) => !env[n]);
  if (missing.length > 0) {
    throw new Error(
      `labfleet's cloud runtime is not configured: ${missing.join(", ")} not set (sst.config.ts sets them on every function)`,
    );
  }
}

/**
 * The access key (lab credentials at rest, portal cookies) from the `AccessKey` secret: 32 bytes, base64
 * (`openssl rand -base64 32`). The messages name the secret, never its value.
 */
export function accessKeyFrom(linked: LinkedSecrets): Buffer {
  const value = linked("AccessKey");
  if (!value || value === SECRET_NOT_SET) {
    throw new Error(
      'the AccessKey secret is not set: npx sst secret set AccessKey "$(openssl rand -base64 32)" --stage STAGE',
    );
  }
  const key = Buffer.from(value.trim(), "base64");
  if (key.length !== 32 || key.toString("base64") !== value.trim()) {
    throw new Error("the AccessKey secret is not 32 bytes in base64: make one with openssl rand -base64 32");
  }
  return key;
}

/** The instructor's bootstrap token (the `InstructorToken` secret), accepted beside API tokens and OAuth sign-in. */
export function instructorTokenFrom(linked: LinkedSecrets): string {
  const value = linked("InstructorToken");
  if (!value || value === SECRET_NOT_SET) {
    throw new Error(
      'the InstructorToken secret is not set: npx sst secret set InstructorToken "$(openssl rand -base64 32)" --stage STAGE',
    );
  }
  if (value.length < 24)
    throw new Error("the InstructorToken secret is too short: use at least 24 characters");
  return value;
}
