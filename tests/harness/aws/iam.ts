import { runSimulation, runUnsafeSimulation } from "@cloud-copilot/iam-simulate";
import {
  type AuthRequest,
  FAKE_ACCOUNT_ID,
  FAKE_REGION,
  type PolicyDocument,
  type Principal,
} from "./core.ts";

/**
 * IAM for the AWS double: every authorization a service double asks for is evaluated with an IAM policy
 * simulator (@cloud-copilot/iam-simulate, AGPL: tests only) against the calling principal's identity policy, in
 * strict mode, with the condition keys the request carries. A request the simulator cannot evaluate (an unknown
 * action, a resource type the action does not take, a context key the action does not have) is a bug of the
 * double, not a denial: it throws.
 *
 * The same request is evaluated once: results are kept by principal, action, resource and the values of the
 * condition keys the principal's policy reads (the only ones that can change the outcome).
 */

export interface Decision {
  principal: string;
  action: string;
  resource: string;
  allowed: boolean;
}

/** The condition keys a policy reads, lower-cased (IAM compares key names case-insensitively). */
function conditionKeysOf(policy: PolicyDocument): Set<string> {
  const keys = new Set<string>();
  for (const s of policy.Statement) {
    const cond = s.Condition as Record<string, Record<string, unknown>> | undefined;
    for (const byKey of Object.values(cond ?? {}))
      for (const k of Object.keys(byKey)) keys.add(k.toLowerCase());
  }
  return keys;
}

export class Iam {
  /** Every decision, in order: what the tests print and check. */
  readonly decisions: Decision[] = [];
  private readonly cache = new Map<string, Promise<boolean>>();
  private readonly keys = new Map<string, Set<string>>();

  /** Forgets the decisions cached for a principal (its policy was changed by a test). */
  forget(principal: string): void {
    this.keys.delete(principal);
    for (const key of [...this.cache.keys()]) if (JSON.parse(key)[0] === principal) this.cache.delete(key);
  }

  /** Whether the principal may make this request; operators (no policy) may do anything. */
  async allowed(principal: Principal, req: AuthRequest): Promise<boolean> {
    const allowed = principal.policy ? await this.evaluate(principal, req) : true;
    this.decisions.push({ principal: principal.name, action: req.action, resource: req.resource, allowed });
    return allowed;
  }

  private evaluate(principal: Principal, req: AuthRequest): Promise<boolean> {
    const policy = principal.policy as PolicyDocument;
    let read = this.keys.get(principal.name);
    if (!read) {
      read = conditionKeysOf(policy);
      this.keys.set(principal.name, read);
    }
    const relevant = Object.entries(req.context ?? {})
      .filter(([k]) => read.has(k.toLowerCase()))
      .sort(([a], [b]) => a.localeCompare(b));
    const key = JSON.stringify([principal.name, req.action, req.resource, relevant]);
    let result = this.cache.get(key);
    if (!result) {
      result = this.simulate(principal, policy, req);
      this.cache.set(key, result);
    }
    return result;
  }

  private async simulate(principal: Principal, policy: PolicyDocument, req: AuthRequest): Promise<boolean> {
    const simulation = {
      identityPolicies: [{ name: `${principal.name}-policy`, policy }],
      serviceControlPolicies: [],
      resourceControlPolicies: [],
      request: {
        principal: principal.arn,
        action: req.action,
        resource: { resource: req.resource, accountId: FAKE_ACCOUNT_ID },
        contextVariables: {
          "aws:PrincipalArn": principal.arn,
          "aws:PrincipalAccount": FAKE_ACCOUNT_ID,
          "aws:RequestedRegion": FAKE_REGION,
          ...req.context,
        },
      },
    };
    // AWS-owned resources have no account in their ARN (the AWS-RunShellScript document,
    // `arn:aws:ssm:REGION::document/AWS-RunShellScript`, as SSM authorizes SendCommand on it); iam-data's
    // resource pattern for documents requires one, so the simulator's validation would refuse a request AWS
    // evaluates. Only those are evaluated without validation (the action is still checked to exist).
    if (/^arn:[^:]+:[^:]+:[^:]*::/.test(req.resource)) {
      return runUnsafeSimulation(simulation, { simulationMode: "Strict" }) === "Allowed";
    }
    const response = await runSimulation(simulation, { simulationMode: "Strict" });
    if (response.resultType === "error") {
      throw new Error(
        `the AWS double asked IAM something it cannot evaluate (${req.action} on ${req.resource}): ${JSON.stringify(response.errors)}`,
      );
    }
    return response.overallResult === "Allowed";
  }
}
