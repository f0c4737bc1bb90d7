import {
  DescribeInstancesCommand,
  DescribeVolumesCommand,
  type DescribeVolumesCommandOutput,
  type EC2Client,
  type Filter,
  type Instance,
  type Volume,
} from "@aws-sdk/client-ec2";
import { HOST_ID_TAG, OWNER_TAG, STAGE_TAG, tagValue, WORKSHOP_TAG } from "./aws-common.ts";
import type { ManagedSecurityGroups } from "./aws-security-groups.ts";
import type { Leftover } from "./types.ts";

/**
 * What the EC2 provider made for a workshop and is still there after its teardown, found by the ownership tags
 * (`ManagedBy=labfleet`, `labfleet-stage`, `labfleet-workshop`) in the client's region, re-checked on every
 * resource EC2 returns:
 * - instances not terminated and not shutting down (one that is shutting down is on its way out);
 * - volumes, except those deleted or going with a shutting-down instance (DeleteOnTermination);
 * - the workshop's managed security groups.
 * Calls: DescribeInstances, DescribeVolumes, DescribeSecurityGroups, every page.
 */
export async function awsLeftovers(opts: {
  ec2: EC2Client;
  groups: ManagedSecurityGroups;
  stage: string;
  workshop: string;
}): Promise<Leftover[]> {
  const { ec2, stage, workshop } = opts;
  const region = await ec2.config.region();
  const Filters: Filter[] = [
    { Name: `tag:${OWNER_TAG.key}`, Values: [OWNER_TAG.value] },
    { Name: `tag:${STAGE_TAG}`, Values: [stage] },
    { Name: `tag:${WORKSHOP_TAG}`, Values: [workshop] },
  ];
  const owned = (tags: { Key?: string; Value?: string }[] | undefined) =>
    tagValue(tags, OWNER_TAG.key) === OWNER_TAG.value &&
    tagValue(tags, STAGE_TAG) === stage &&
    tagValue(tags, WORKSHOP_TAG) === workshop;

  const instances: Instance[] = [];
  let NextToken: string | undefined;
  do {
    const page = await ec2.send(
      new DescribeInstancesCommand({
        Filters: [
          ...Filters,
          {
            Name: "instance-state-name",
            Values: ["pending", "running", "stopping", "stopped", "shutting-down"],
          },
        ],
        ...(NextToken ? { NextToken } : {}),
      }),
    );
    instances.push(
      ...(page.Reservations ?? []).flatMap((r) => r.Instances ?? []).filter((i) => owned(i.Tags)),
    );
    NextToken = page.NextToken;
  } while (NextToken);
  const goingIds = new Set(
    instances.filter((i) => i.State?.Name === "shutting-down").map((i) => i.InstanceId as string),
  );

  const volumes: Volume[] = [];
  let volumeToken: string | undefined;
  do {
    const page: DescribeVolumesCommandOutput = await ec2.send(
      new DescribeVolumesCommand({ Filters, ...(volumeToken ? { NextToken: volumeToken } : {}) }),
    );
    volumes.push(...(page.Volumes ?? []).filter((v) => owned(v.Tags)));
    volumeToken = page.NextToken;
  } while (volumeToken);

  const out: Leftover[] = [];
  for (const i of instances) {
    if (!i.InstanceId || goingIds.has(i.InstanceId)) continue;
    const hostId = tagValue(i.Tags, HOST_ID_TAG);
    out.push({
      kind: "instance",
      id: i.InstanceId,
      ...(hostId ? { hostId } : {}),
      why: `the instance is ${i.State?.Name ?? "in an unknown state"}, not terminated`,
      command: `aws ec2 terminate-instances --region ${region} --instance-ids ${i.InstanceId}`,
    });
  }
  for (const v of volumes) {
    if (!v.VolumeId || v.State === "deleting" || v.State === "deleted") continue;
    const attached = (v.Attachments ?? []).filter((a) => a.InstanceId);
    if (
      attached.length > 0 &&
      attached.every((a) => a.DeleteOnTermination && goingIds.has(a.InstanceId as string))
    )
      continue;
    const hostId = tagValue(v.Tags, HOST_ID_TAG);
    const to = attached.map((a) => a.InstanceId).join(", ");
    out.push({
      kind: "volume",
      id: v.VolumeId,
      ...(hostId ? { hostId } : {}),
      why: to
        ? `attached to ${to}, which is not being terminated (or keeps it on termination)`
        : `the volume is ${v.State ?? "there"} and attached to nothing`,
      command: to
        ? `aws ec2 terminate-instances --region ${region} --instance-ids ${attached.map((a) => a.InstanceId).join(" ")} && aws ec2 delete-volume --region ${region} --volume-id ${v.VolumeId}`
        : `aws ec2 delete-volume --region ${region} --volume-id ${v.VolumeId}`,
    });
  }
  for (const g of await opts.groups.find(workshop)) {
    const id = g.GroupId as string;
    out.push({
      kind: "security-group",
      id,
      why:
        goingIds.size > 0
          ? "still held by instances that are shutting down: the sweeper deletes it once they are gone"
          : "the workshop's security group was not deleted",
      command: `aws ec2 delete-security-group --region ${region} --group-id ${id}`,
    });
  }
  return out;
}
