import type { ErrorDetail } from "../runtime/errors.ts";
import { MAX_WORKSHOP_HOSTS } from "../workshop/limits.ts";
import type { Workshop } from "../workshop/schema.ts";
import {
  DEFAULT_VOLUME_SIZE_GIB,
  INSTANCE_TIERS,
  refusedInstanceType,
  resolveInstanceType,
  supportsNestedVirtualization,
} from "./aws-launch.ts";
import { operatorCidrProblem } from "./aws-security-groups.ts";

/**
 * The rules of a workshop's `provider` section for the EC2 provider, and their messages: each problem is one
 * ErrorDetail with the field's path (`provider.<field>`). AwsProvider.validate returns them; plan and
 * provision refuse a spec that breaks any rule. What the instance types and tiers are lives in aws-launch.ts,
 * what an operator CIDR may be in aws-security-groups.ts.
 */

const INSTANCE_TYPE = /^[a-z][a-z0-9-]*\.[a-z0-9-]+$/;
const REGION = /^[a-z]{2}(-gov|-iso[a-z]?)?-[a-z]+-\d+$/;
const SUBNET = /^subnet-[0-9a-f]{8,17}$/;
const SECURITY_GROUP = /^sg-[0-9a-f]{8,17}$/;
const AMI = /^ami-[0-9a-f]{8,17}$/;

/** Every problem of the spec's provider section (none: an empty list). */
export function validateAwsProvider(spec: Workshop): ErrorDetail[] {
  const p = spec.provider;
  if (p.type !== "aws") {
    return [{ path: "provider.type", message: `expected aws for the EC2 provider, got ${p.type}` }];
  }
  const errors: ErrorDetail[] = [];
  const add = (path: string, message: string) => errors.push({ path: `provider.${path}`, message });

  if (p.region === undefined) add("region", "expected an AWS region (e.g. eu-west-1): it is required");
  else if (!REGION.test(p.region))
    add("region", `expected an AWS region such as eu-west-1, got "${p.region}"`);

  if (p.subnet_id === undefined) {
    add("subnet_id", "expected a subnet id (subnet-...): it is required, the hosts are launched into it");
  } else if (!SUBNET.test(p.subnet_id)) {
    add("subnet_id", `expected a subnet id such as subnet-0123456789abcdef0, got "${p.subnet_id}"`);
  }

  const tiers = Object.keys(INSTANCE_TIERS).join(", ");
  if (p.instance_type !== undefined && p.instance_tier !== undefined) {
    add("instance_tier", "expected instance_type or instance_tier, not both");
  } else if (p.instance_type === undefined && p.instance_tier === undefined) {
    add("instance_type", `expected instance_type (e.g. m7i.large) or instance_tier (${tiers})`);
  } else if (p.instance_tier !== undefined && !Object.hasOwn(INSTANCE_TIERS, p.instance_tier)) {
    add("instance_tier", `expected an instance tier: ${tiers}; got "${p.instance_tier}"`);
  } else if (p.instance_type !== undefined && !INSTANCE_TYPE.test(p.instance_type)) {
    add("instance_type", `expected an EC2 instance type such as m7i.large, got "${p.instance_type}"`);
  }
  const type = resolveInstanceType(p);
  const typePath = p.instance_type !== undefined ? "instance_type" : "instance_tier";
  if (type !== undefined && INSTANCE_TYPE.test(type)) {
    const refused = refusedInstanceType(type);
    if (refused) add(typePath, `refused for lab hosts: ${refused}`);
    if (p.nested_virtualization === true && !supportsNestedVirtualization(type)) {
      add(
        "nested_virtualization",
        `${type} cannot run nested virtualization: use a bare-metal type (*.metal) or a c8i, m8i or r8i type (or an instance_tier)`,
      );
    }
  }

  if (p.ami !== undefined && !AMI.test(p.ami)) {
    add("ami", `expected an AMI id such as ami-0123456789abcdef0, got "${p.ami}"`);
  }
  if (p.security_group_ids !== undefined && p.security_group_ids.length === 0) {
    add(
      "security_group_ids",
      "expected at least one security group id, or leave security_group_ids out to let labfleet manage a group",
    );
  }
  (p.security_group_ids ?? []).forEach((sg, i) => {
    if (!SECURITY_GROUP.test(sg)) {
      add(
        `security_group_ids[${i}]`,
        `expected a security group id such as sg-0123456789abcdef0, got "${sg}"`,
      );
    }
  });
  if (p.security_group_ids?.length) {
    if (p.operator_cidrs !== undefined) {
      add(
        "operator_cidrs",
        "operator_cidrs applies only to the group labfleet manages: with security_group_ids, leave it out and allow the operator's addresses in your own groups",
      );
    }
  } else if (p.operator_cidrs === undefined || p.operator_cidrs.length === 0) {
    add(
      "operator_cidrs",
      "expected the operator's addresses as CIDRs (e.g. [203.0.113.7/32]): labfleet's security group admits only them on SSH and the lab UI ports; it is required without security_group_ids",
    );
  } else {
    p.operator_cidrs.forEach((cidr, i) => {
      const problem = operatorCidrProblem(cidr);
      if (problem) add(`operator_cidrs[${i}]`, problem);
    });
  }
  if (p.student_access !== undefined && p.student_access !== "operator" && p.student_access !== "open") {
    add("student_access", `expected operator or open, got "${String(p.student_access)}"`);
  }
  const volume = p.volume_size_gib ?? DEFAULT_VOLUME_SIZE_GIB;
  if (!Number.isInteger(volume) || volume < 8 || volume > 16384) {
    add("volume_size_gib", `expected a volume size in GiB: a whole number from 8 to 16384, got ${volume}`);
  }
  if (!Number.isFinite(p.ttl_hours) || p.ttl_hours <= 0 || p.ttl_hours > 168) {
    add("ttl_hours", `expected hours (a number greater than 0, at most 168), got ${p.ttl_hours}`);
  }
  if (!Number.isInteger(p.count) || p.count < 1 || p.count > MAX_WORKSHOP_HOSTS) {
    add("count", `expected a host count: a whole number from 1 to ${MAX_WORKSHOP_HOSTS}, got ${p.count}`);
  }
  return errors;
}
