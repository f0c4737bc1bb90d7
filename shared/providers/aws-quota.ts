import {
  type _InstanceType,
  DescribeInstancesCommand,
  DescribeInstanceTypesCommand,
  type EC2Client,
  type Filter,
  type Instance,
} from "@aws-sdk/client-ec2";
import { GetServiceQuotaCommand, type ServiceQuotasClient } from "@aws-sdk/client-service-quotas";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import { chunks } from "./aws-common.ts";

/**
 * The running On-Demand vCPU quota pre-check. EC2 limits the vCPUs of running On-Demand instances per region
 * and per quota class of instance families; a launch beyond it fails with VcpuLimitExceeded, possibly halfway
 * through a fleet. Before creating anything, labfleet compares:
 *
 *   needed  = vCPUs of the instance type (DescribeInstanceTypes, DefaultVCpus) x hosts to create
 *   in use  = vCPUs of every pending or running On-Demand instance of the same quota class in the region
 *             (DescribeInstances; spot and capacity-block instances have their own quotas and are left out)
 *   quota   = GetServiceQuota(ServiceCode ec2, the class's quota code)
 *
 * and stops with a VisibleError when needed + in use > quota.
 *
 * The classes (the family's leading letters, before its generation digit):
 *
 * | quota code | quota                                                             | series                         |
 * | ---------- | ----------------------------------------------------------------- | ------------------------------ |
 * | L-1216C47A | Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances  | a c d h i (im, is) m r t z     |
 * | L-74FC7D96 | Running On-Demand F instances                                     | f                              |
 * | L-DB2E81BA | Running On-Demand G and VT instances                              | g (gr) vt                      |
 * | L-417A185B | Running On-Demand P instances                                     | p                              |
 * | L-7295265B | Running On-Demand X instances                                     | x                              |
 * | L-1945791B | Running On-Demand Inf instances                                   | inf                            |
 *
 * Other families (dl, hpc, trn, u-, mac...) have quotas of their own that labfleet does not know: the check
 * is skipped for them and the plan says so.
 *
 * When the check cannot be made (GetServiceQuota denied because the control plane's role lacks
 * `servicequotas:GetServiceQuota`, the Service Quotas API unavailable, a describe call failing), labfleet does
 * not stop: the plan says "not checked" with the reason, provision logs a warning and goes on. The quota is a
 * convenience that fails early and clearly; EC2 still enforces it, and a launch it refuses is reported on
 * that host (RunInstances: VcpuLimitExceeded) while the others go on.
 */

export interface VcpuQuotaClass {
  quota: string;
  name: string;
  series: readonly string[];
}

export const VCPU_QUOTA_CLASSES: readonly VcpuQuotaClass[] = [
  {
    quota: "L-1216C47A",
    name: "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances",
    series: ["a", "c", "d", "h", "i", "im", "is", "m", "r", "t", "z"],
  },
  { quota: "L-74FC7D96", name: "Running On-Demand F instances", series: ["f"] },
  { quota: "L-DB2E81BA", name: "Running On-Demand G and VT instances", series: ["g", "gr", "vt"] },
  { quota: "L-417A185B", name: "Running On-Demand P instances", series: ["p"] },
  { quota: "L-7295265B", name: "Running On-Demand X instances", series: ["x"] },
  { quota: "L-1945791B", name: "Running On-Demand Inf instances", series: ["inf"] },
];

/** The quota class of an instance type (`m7i.large` -> Standard), or undefined for a family it does not know. */
export function vcpuQuotaClassOf(instanceType: string): VcpuQuotaClass | undefined {
  const series = /^([a-z]+)\d/.exec(instanceType.split(".")[0] ?? "")?.[1];
  if (series === undefined) return undefined;
  return VCPU_QUOTA_CLASSES.find((c) => c.series.includes(series));
}

export interface VcpuQuotaFigures {
  status: "fits" | "exceeds";
  instanceType: string;
  count: number;
  perInstance: number;
  needed: number;
  inUse: number;
  quota: number;
  quotaClass: VcpuQuotaClass;
  region: string;
}

export type VcpuQuotaCheck = VcpuQuotaFigures | { status: "unknown"; reason: string };

const IN_USE_STATES = ["pending", "running"];

/** Runs the check for `count` new instances of `instanceType`. Never throws: failures become "unknown". */
export async function checkVcpuQuota(args: {
  ec2: EC2Client;
  quotas: ServiceQuotasClient;
  region: string;
  instanceType: string;
  count: number;
}): Promise<VcpuQuotaCheck> {
  const { ec2, quotas, region, instanceType, count } = args;
  const quotaClass = vcpuQuotaClassOf(instanceType);
  if (!quotaClass) {
    return {
      status: "unknown",
      reason: `labfleet knows no running On-Demand vCPU quota for the ${instanceType.split(".")[0]} family`,
    };
  }
  let quota: number;
  try {
    const out = await quotas.send(
      new GetServiceQuotaCommand({ ServiceCode: "ec2", QuotaCode: quotaClass.quota }),
    );
    const value = out.Quota?.Value;
    if (value === undefined) throw new Error("Service Quotas answered without a value");
    quota = value;
  } catch (err) {
    return { status: "unknown", reason: `GetServiceQuota ${quotaClass.quota}: ${errorMessage(err)}` };
  }
  let inUseInstances: Instance[];
  try {
    inUseInstances = (await runningInstances(ec2)).filter(
      (i) =>
        i.InstanceLifecycle === undefined &&
        i.InstanceType !== undefined &&
        vcpuQuotaClassOf(i.InstanceType) === quotaClass,
    );
  } catch (err) {
    return { status: "unknown", reason: `DescribeInstances: ${errorMessage(err)}` };
  }
  let vcpus: Map<string, number>;
  const types = [...new Set([instanceType, ...inUseInstances.map((i) => i.InstanceType as string)])];
  try {
    vcpus = await vcpusOf(ec2, types);
  } catch (err) {
    return { status: "unknown", reason: `DescribeInstanceTypes: ${errorMessage(err)}` };
  }
  const perInstance = vcpus.get(instanceType);
  if (perInstance === undefined) {
    return {
      status: "unknown",
      reason: `EC2 does not describe the instance type ${instanceType} in ${region}`,
    };
  }
  let inUse = 0;
  for (const i of inUseInstances) {
    const n = vcpus.get(i.InstanceType as string);
    if (n === undefined) {
      return { status: "unknown", reason: `EC2 does not describe the instance type ${i.InstanceType}` };
    }
    inUse += n;
  }
  const needed = perInstance * count;
  return {
    status: needed + inUse > quota ? "exceeds" : "fits",
    instanceType,
    count,
    perInstance,
    needed,
    inUse,
    quota,
    quotaClass,
    region,
  };
}

async function runningInstances(ec2: EC2Client): Promise<Instance[]> {
  const Filters: Filter[] = [{ Name: "instance-state-name", Values: IN_USE_STATES }];
  const out: Instance[] = [];
  let NextToken: string | undefined;
  do {
    const page = await ec2.send(
      new DescribeInstancesCommand(NextToken ? { Filters, NextToken } : { Filters }),
    );
    out.push(...(page.Reservations ?? []).flatMap((r) => r.Instances ?? []));
    NextToken = page.NextToken;
  } while (NextToken);
  return out;
}

async function vcpusOf(ec2: EC2Client, types: string[]): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  for (const chunk of chunks([...types].sort(), 100)) {
    let NextToken: string | undefined;
    do {
      const InstanceTypes = chunk as _InstanceType[];
      const page = await ec2.send(
        new DescribeInstanceTypesCommand(NextToken ? { InstanceTypes, NextToken } : { InstanceTypes }),
      );
      for (const t of page.InstanceTypes ?? []) {
        if (t.InstanceType && t.VCpuInfo?.DefaultVCpus !== undefined) {
          out.set(t.InstanceType, t.VCpuInfo.DefaultVCpus);
        }
      }
      NextToken = page.NextToken;
    } while (NextToken);
  }
  return out;
}

/** The plan's quota line. */
export function vcpuQuotaLine(check: VcpuQuotaCheck): string {
  if (check.status === "unknown") return `vCPU quota not checked (${check.reason})`;
  const head = `vCPU quota ${check.quotaClass.quota}: ${check.needed} needed + ${check.inUse} in use of ${check.quota}`;
  return check.status === "fits"
    ? `${head}, fits`
    : `${head}, EXCEEDED by ${check.needed + check.inUse - check.quota}`;
}

/** The error that stops a provision that would not fit, with how to get more. */
export function vcpuQuotaError(check: VcpuQuotaFigures): VisibleError {
  const { count, instanceType, perInstance, needed, inUse, quota, quotaClass, region } = check;
  const desired = Math.ceil(needed + inUse);
  return new VisibleError(
    "conflict",
    "provider.vcpu_quota_exceeded",
    `not enough EC2 vCPU quota in ${region}: ${count} new ${instanceType} hosts need ${needed} vCPUs (${perInstance} each), ` +
      `${inUse} vCPUs of "${quotaClass.name}" are already in use, and the quota is ${quota} (${quotaClass.quota}). ` +
      `Nothing was created. Request an increase to at least ${desired} in the Service Quotas console (Amazon EC2, "${quotaClass.name}") ` +
      `or with: aws service-quotas request-service-quota-increase --region ${region} --service-code ec2 --quota-code ${quotaClass.quota} --desired-value ${desired}; ` +
      `or lower provider.count, pick a smaller instance size, or stop other instances.`,
    [{ path: "provider.count", message: `${needed} vCPUs needed, ${Math.max(0, quota - inUse)} available` }],
  );
}
