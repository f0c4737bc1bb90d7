import { type AllowList, hasAllowRules, parseAllowEmails } from "../../shared/auth/allow.ts";
import { DEVICE_DEFAULTS, type DeviceOptions } from "../../shared/auth/device.ts";
import { SECRET_NOT_SET } from "../../shared/cloud/env.ts";

/** Instructor sign-in: which providers, who may sign in, and the device login's timing. */
export interface AuthConfig {
  /** The URL instructors reach the control plane at; callback URLs are built from it (else from the request). */
  publicUrl?: string | undefined;
  github?: {
    clientId: string;
    clientSecret: string /** GitHub's REST API (a fake one in tests). */;
    apiUrl: string;
  };
  google?: { clientId: string; clientSecret: string };
  oidc?: {
    issuer: string;
    clientId: string;
    /** None: a public client (PKCE alone). */
    clientSecret?: string | undefined;
    /** The label of its sign-in button. */
    name: string;
  };
  allow: AllowList;
  device: DeviceOptions;
}

export type ProviderName = "github" | "google" | "oidc";

export const AUTH_ENV = {
  publicUrl: "LABFLEET_PUBLIC_URL",
  githubClientId: "LABFLEET_GITHUB_CLIENT_ID",
  githubClientSecret: "LABFLEET_GITHUB_CLIENT_SECRET",
  githubApiUrl: "LABFLEET_GITHUB_API_URL",
  googleClientId: "LABFLEET_GOOGLE_CLIENT_ID",
  googleClientSecret: "LABFLEET_GOOGLE_CLIENT_SECRET",
  oidcIssuer: "LABFLEET_OIDC_ISSUER",
  oidcClientId: "LABFLEET_OIDC_CLIENT_ID",
  oidcClientSecret: "LABFLEET_OIDC_CLIENT_SECRET",
  oidcName: "LABFLEET_OIDC_NAME",
  allowEmails: "LABFLEET_ALLOW_EMAILS",
  allowGithubOrg: "LABFLEET_ALLOW_GITHUB_ORG",
} as const;

/** Plain http is accepted for loopback addresses only (the local runtime, tests). */
function checkUrl(name: string, value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new Error(`${name} is not a URL`);
  }
  const loopback = ["127.0.0.1", "localhost", "[::1]"].includes(url.hostname);
  if (url.protocol !== "https:" && !(url.protocol === "http:" && loopback))
    throw new Error(`${name} must be an https URL (http only for 127.0.0.1 or localhost)`);
  if (url.search || url.hash) throw new Error(`${name} must not have a query or fragment`);
  return value.replace(/\/+$/, "");
}

/**
 * The sign-in settings from environment variables: the local runtime reads its own environment, the cloud's
 * instructor function the variables sst.config.ts sets from its secrets. A half-configured provider, or a
 * provider without anyone allowed to sign in, is an error at start-up rather than a confusing sign-in page.
 */
export function authConfigFromEnv(env: Record<string, string | undefined>): AuthConfig {
  const get = (name: string) => {
    const v = env[name]?.trim();
    return v && v !== SECRET_NOT_SET ? v : undefined;
  };
  const pair = (idName: string, secretName: string) => {
    const id = get(idName);
    const secret = get(secretName);
    if (Boolean(id) !== Boolean(secret)) throw new Error(`set both ${idName} and ${secretName}, or neither`);
    return id && secret ? { clientId: id, clientSecret: secret } : undefined;
  };

  const config: AuthConfig = {
    allow: { emails: parseAllowEmails(get(AUTH_ENV.allowEmails)) },
    device: { ...DEVICE_DEFAULTS },
  };
  const publicUrl = get(AUTH_ENV.publicUrl);
  if (publicUrl) config.publicUrl = checkUrl(AUTH_ENV.publicUrl, publicUrl);

  const github = pair(AUTH_ENV.githubClientId, AUTH_ENV.githubClientSecret);
  if (github) {
    const apiUrl = get(AUTH_ENV.githubApiUrl);
    config.github = {
      ...github,
      apiUrl: apiUrl ? checkUrl(AUTH_ENV.githubApiUrl, apiUrl) : "https://api.github.com",
    };
  }
  const google = pair(AUTH_ENV.googleClientId, AUTH_ENV.googleClientSecret);
  if (google) config.google = google;

  const issuer = get(AUTH_ENV.oidcIssuer);
  const oidcClientId = get(AUTH_ENV.oidcClientId);
  if (Boolean(issuer) !== Boolean(oidcClientId))
    throw new Error(`set both ${AUTH_ENV.oidcIssuer} and ${AUTH_ENV.oidcClientId}, or neither`);
  if (issuer && oidcClientId) {
    checkUrl(AUTH_ENV.oidcIssuer, issuer);
    config.oidc = {
      // Kept exactly as written (a trailing slash included): the discovery document's `issuer` and the
      // id_token's `iss` must equal it.
      issuer,
      clientId: oidcClientId,
      clientSecret: get(AUTH_ENV.oidcClientSecret),
      name: get(AUTH_ENV.oidcName) ?? "single sign-on",
    };
  }

  const org = get(AUTH_ENV.allowGithubOrg);
  if (org) {
    if (!/^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$/.test(org))
      throw new Error(`${AUTH_ENV.allowGithubOrg} is not a GitHub organisation name`);
    if (!config.github)
      throw new Error(`${AUTH_ENV.allowGithubOrg} needs GitHub sign-in (${AUTH_ENV.githubClientId})`);
    config.allow.githubOrg = org;
  }

  if ((config.github || config.google || config.oidc) && !hasAllowRules(config.allow)) {
    throw new Error(
      `instructor sign-in is configured but nobody may sign in: set ${AUTH_ENV.allowEmails} and/or ${AUTH_ENV.allowGithubOrg}`,
    );
  }
  return config;
}

export function configuredProviders(config: AuthConfig): ProviderName[] {
  return (["github", "google", "oidc"] as const).filter((p) => config[p] !== undefined);
}
