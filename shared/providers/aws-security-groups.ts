import {
  AuthorizeSecurityGroupIngressCommand,
  CreateSecurityGroupCommand,
  DeleteSecurityGroupCommand,
  DescribeSecurityGroupsCommand,
  DescribeSubnetsCommand,
  type EC2Client,
  type Filter,
  type IpPermission,
  RevokeSecurityGroupIngressCommand,
  type SecurityGroup,
} from "@aws-sdk/client-ec2";
import { errorMessage, VisibleError } from "../runtime/errors.ts";
import type { Workshop } from "../workshop/schema.ts";
import { CREATED_TAG, errorName, OWNER_TAG, STAGE_TAG, tagValue, WORKSHOP_TAG } from "./aws-common.ts";

/**
 * The security group labfleet manages for a workshop without `security_group_ids`: one per workshop and VPC,
 * named `labfleet.<stage>.<workshop>`, tagged `ManagedBy=labfleet`, `labfleet-stage=<stage>`,
 * `labfleet-workshop=<name>` and `labfleet-created=<ISO time>`.
 *
 * Its inbound rules are reconciled on every provision to exactly:
 * - TCP 22 and every `lab.ui_ports` port from each of `provider.operator_cidrs` ("labfleet operator"), and
 * - while the labs are open (`setOpenAccess`), the `lab.ui_ports` ports (never 22) from 0.0.0.0/0 and ::/0
 *   ("labfleet open access").
 * Any other inbound rule (a stale operator address, SSH from the world, a rule added by hand) is revoked: the
 * group is labfleet's, so it says only what the workshop says. Outbound stays EC2's default (all), which
 * the SSM agent needs (HTTPS to the Systems Manager endpoints).
 */

export const WORLD_V4 = "0.0.0.0/0";
export const WORLD_V6 = "::/0";
export const SSH_PORT = 22;
/** Rule descriptions (EC2 allows letters, digits, spaces and ._-:/()#,@[]+=&;{}!$*, no apostrophe). */
export const OPERATOR_RULE = "labfleet operator";
export const OPEN_RULE = "labfleet open access";

/**
 * `labfleet.<stage>.<workshop>`: neither a stage nor a workshop name holds a dot, so two stages' names never
 * spell alike (with dashes, stage `test-a` of workshop `b` and stage `test` of workshop `a-b` would).
 */
export function managedGroupName(stage: string, workshop: string): string {
  return `labfleet.${stage}.${workshop}`;
}

// ---- CIDRs -------------------------------------------------------------------------------------------

export interface Cidr {
  family: 4 | 6;
  prefix: number;
  /** The canonical text (IPv6 lower-case and compressed as RFC 5952 writes it), how rules are compared. */
  text: string;
  /** The network address with the host bits cleared, as text, with the prefix. */
  network: string;
}

function parseV4(s: string): number[] | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  const out: number[] = [];
  for (const p of parts) {
    if (!/^(0|[1-9]\d{0,2})$/.test(p) || Number(p) > 255) return undefined;
    out.push(Number(p));
  }
  return out;
}

/** Eight 16-bit groups, or undefined. Accepts `::` compression and a trailing dotted IPv4 part. */
function parseV6(s: string): number[] | undefined {
  let text = s.toLowerCase();
  const lastColon = text.lastIndexOf(":");
  const last = text.slice(lastColon + 1);
  if (last.includes(".")) {
    // A trailing dotted IPv4 part (::ffff:192.0.2.1) is two groups.
    const v4 = parseV4(last);
    if (!v4 || lastColon < 0) return undefined;
    const [a = 0, b = 0, c = 0, d = 0] = v4;
    text = `${text.slice(0, lastColon + 1)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const halves = text.split("::");
  if (halves.length > 2) return undefined;
  const group = (part: string): number[] | undefined => {
    if (part === "") return [];
    const out: number[] = [];
    for (const g of part.split(":")) {
      if (!/^[0-9a-f]{1,4}$/.test(g)) return undefined;
      out.push(Number.parseInt(g, 16));
    }
    return out;
  };
  const head = group(halves[0] ?? "");
  const rest = halves.length === 2 ? group(halves[1] ?? "") : [];
  if (!head || !rest) return undefined;
  const given = head.length + rest.length;
  if (halves.length === 1) return given === 8 ? head : undefined;
  if (given > 7) return undefined;
  return [...head, ...new Array<number>(8 - given).fill(0), ...rest];
}

/** RFC 5952: lower case, no leading zeros, the longest run (two or more) of zero groups as `::`. */
function formatV6(groups: number[]): string {
  let best = { at: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > best.len && j - i >= 2) best = { at: i, len: j - i };
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best.at < 0) return hex.join(":");
  return `${hex.slice(0, best.at).join(":")}::${hex.slice(best.at + best.len).join(":")}`;
}

function clearHostBits(words: number[], bitsPerWord: number, prefix: number): number[] {
  return words.map((w, i) => {
    const keep = Math.min(bitsPerWord, Math.max(0, prefix - i * bitsPerWord));
    const mask = keep === 0 ? 0 : ((2 ** bitsPerWord - 1) >>> (bitsPerWord - keep)) << (bitsPerWord - keep);
    return w & mask;
  });
}

/** Parses an IPv4 or IPv6 CIDR (the prefix is required); undefined when it is not one. */
export function parseCidr(value: string): Cidr | undefined {
  const slash = value.indexOf("/");
  if (slash < 0) return undefined;
  const address = value.slice(0, slash);
  const bits = value.slice(slash + 1);
  if (!/^(0|[1-9]\d{0,2})$/.test(bits)) return undefined;
  const prefix = Number(bits);
  if (address.includes(":")) {
    const groups = parseV6(address);
    if (!groups || prefix > 128) return undefined;
    return {
      family: 6,
      prefix,
      text: `${formatV6(groups)}/${prefix}`,
      network: `${formatV6(clearHostBits(groups, 16, prefix))}/${prefix}`,
    };
  }
  const octets = parseV4(address);
  if (!octets || prefix > 32) return undefined;
  return {
    family: 4,
    prefix,
    text: `${octets.join(".")}/${prefix}`,
    network: `${clearHostBits(octets, 8, prefix).join(".")}/${prefix}`,
  };
}

/** Why a value cannot be an operator address, or undefined when it can. */
export function operatorCidrProblem(value: string): string | undefined {
  const cidr = parseCidr(value);
  if (!cidr) {
    return `expected an IPv4 or IPv6 CIDR such as 203.0.113.7/32 or 2001:db8::/64, got "${value}"`;
  }
  if (cidr.prefix === 0) {
    return `refused: ${value} is the whole internet; give the operator's own addresses (e.g. 203.0.113.7/32). To let students reach the lab UIs, use open-access, which never opens SSH`;
  }
  if (cidr.network !== cidr.text) {
    return `expected a network address: ${value} has host bits set; write ${cidr.network}`;
  }
  return undefined;
}

// ---- rules -------------------------------------------------------------------------------------------

export interface IngressRule {
  protocol: string;
  from?: number;
  to?: number;
  kind: "cidr4" | "cidr6" | "prefix-list" | "group";
  source: string;
  description?: string;
}

function canonicalSource(kind: IngressRule["kind"], source: string): string {
  if (kind === "cidr4" || kind === "cidr6") return parseCidr(source)?.text ?? source;
  return source;
}

function ruleKey(r: IngressRule): string {
  return [r.protocol, r.from ?? "", r.to ?? "", r.kind, canonicalSource(r.kind, r.source)].join("|");
}

export function isWorldRule(r: IngressRule): boolean {
  return (r.kind === "cidr4" || r.kind === "cidr6") && parseCidr(r.source)?.prefix === 0;
}

/** The group's inbound rules, one per source. */
export function rulesOf(group: SecurityGroup): IngressRule[] {
  const out: IngressRule[] = [];
  for (const p of group.IpPermissions ?? []) {
    const base = {
      protocol: p.IpProtocol ?? "-1",
      ...(p.FromPort !== undefined ? { from: p.FromPort } : {}),
      ...(p.ToPort !== undefined ? { to: p.ToPort } : {}),
    };
    for (const r of p.IpRanges ?? []) if (r.CidrIp) out.push({ ...base, kind: "cidr4", source: r.CidrIp });
    for (const r of p.Ipv6Ranges ?? [])
      if (r.CidrIpv6) out.push({ ...base, kind: "cidr6", source: r.CidrIpv6 });
    for (const r of p.PrefixListIds ?? [])
      if (r.PrefixListId) out.push({ ...base, kind: "prefix-list", source: r.PrefixListId });
    for (const r of p.UserIdGroupPairs ?? [])
      if (r.GroupId) out.push({ ...base, kind: "group", source: r.GroupId });
  }
  return out;
}

/** Rules as IpPermissions, one per protocol and port range, in first-seen order. */
export function permissionsOf(rules: IngressRule[], withDescriptions: boolean): IpPermission[] {
  const byRange = new Map<string, IpPermission>();
  for (const r of rules) {
    const key = `${r.protocol}|${r.from ?? ""}|${r.to ?? ""}`;
    let p = byRange.get(key);
    if (!p) {
      p = {
        IpProtocol: r.protocol,
        ...(r.from !== undefined ? { FromPort: r.from } : {}),
        ...(r.to !== undefined ? { ToPort: r.to } : {}),
      };
      byRange.set(key, p);
    }
    const description = withDescriptions && r.description ? { Description: r.description } : {};
    if (r.kind === "cidr4") p.IpRanges = [...(p.IpRanges ?? []), { CidrIp: r.source, ...description }];
    else if (r.kind === "cidr6")
      p.Ipv6Ranges = [...(p.Ipv6Ranges ?? []), { CidrIpv6: r.source, ...description }];
    else if (r.kind === "prefix-list")
      p.PrefixListIds = [...(p.PrefixListIds ?? []), { PrefixListId: r.source, ...description }];
    else p.UserIdGroupPairs = [...(p.UserIdGroupPairs ?? []), { GroupId: r.source, ...description }];
  }
  return [...byRange.values()];
}

/** The ports of a workshop: the operator's (22 and the UIs) and those open-access may open (the UIs, never 22). */
export function accessPorts(spec: Workshop): { operator: number[]; world: number[] } {
  const ui = [...new Set(spec.lab.ui_ports.map((u) => u.port))];
  return {
    operator: [...new Set([SSH_PORT, ...ui])],
    world: ui.filter((port) => port !== SSH_PORT),
  };
}

export function operatorRules(cidrs: string[], ports: number[]): IngressRule[] {
  const sources = cidrs.map((c) => parseCidr(c)).filter((c): c is Cidr => c !== undefined);
  return ports.flatMap((port) =>
    sources.map(
      (c): IngressRule => ({
        protocol: "tcp",
        from: port,
        to: port,
        kind: c.family === 4 ? "cidr4" : "cidr6",
        source: c.text,
        description: OPERATOR_RULE,
      }),
    ),
  );
}

export function worldRules(ports: number[]): IngressRule[] {
  return ports
    .filter((port) => port !== SSH_PORT)
    .flatMap((port): IngressRule[] => [
      { protocol: "tcp", from: port, to: port, kind: "cidr4", source: WORLD_V4, description: OPEN_RULE },
      { protocol: "tcp", from: port, to: port, kind: "cidr6", source: WORLD_V6, description: OPEN_RULE },
    ]);
}

function difference(a: IngressRule[], b: IngressRule[]): IngressRule[] {
  const keys = new Set(b.map(ruleKey));
  return a.filter((r) => !keys.has(ruleKey(r)));
}

function isOwned(group: SecurityGroup, stage: string, workshop?: string): boolean {
  if (tagValue(group.Tags, OWNER_TAG.key) !== OWNER_TAG.value) return false;
  if (tagValue(group.Tags, STAGE_TAG) !== stage) return false;
  const w = tagValue(group.Tags, WORKSHOP_TAG);
  return workshop === undefined ? w !== undefined : w === workshop;
}

export function portList(ports: number[]): string {
  return ports.map(String).join(", ");
}

/** `TCP 8443, 30080` for rules, by protocol and port range (a rule of every protocol is "all traffic"). */
export function describePorts(rules: IngressRule[]): string {
  const parts = new Map<string, string[]>();
  for (const r of rules) {
    if (r.protocol === "-1") {
      parts.set("all traffic", []);
      continue;
    }
    const range = r.from === r.to ? `${r.from}` : `${r.from}-${r.to}`;
    const protocol = r.protocol.toUpperCase();
    const list = parts.get(protocol) ?? [];
    if (!list.includes(range)) list.push(range);
    parts.set(protocol, list);
  }
  return [...parts]
    .map(([protocol, ranges]) => (ranges.length ? `${protocol} ${ranges.join(", ")}` : protocol))
    .join("; ");
}

/** What to do by hand with bring-your-own groups: labfleet changes nothing in them. */
export function byoAccessMessage(groupIds: string[], ports: number[], open: boolean): string {
  const groups = groupIds.join(", ");
  if (ports.length === 0) {
    return `provider.security_group_ids is set, so labfleet changes no security group; lab.ui_ports lists no port, so there is nothing to ${open ? "open" : "close"} (port 22 is never opened to the world)`;
  }
  const tcp = `TCP ${portList(ports)} from ${WORLD_V4} and ${WORLD_V6}`;
  return open
    ? `provider.security_group_ids is set, so labfleet changes no security group: to let students reach the lab UIs, allow inbound ${tcp} in ${groups}. Keep port 22 closed to the world: labfleet reaches the hosts through SSM`
    : `provider.security_group_ids is set, so labfleet changes no security group: to close the lab UIs, remove the inbound rules for ${tcp} from ${groups}`;
}

// ---- EC2 calls ---------------------------------------------------------------------------------------

/** The EC2 calls for labfleet's own security groups. Every method is idempotent. */
export class ManagedSecurityGroups {
  constructor(
    private readonly ec2: EC2Client,
    /** The deployment stage: only its groups are found, changed or deleted. */
    private readonly stage: string,
  ) {}

  /** The VPC of the subnet the hosts are launched into. */
  async vpcOf(subnetId: string): Promise<string> {
    const out = await this.ec2.send(new DescribeSubnetsCommand({ SubnetIds: [subnetId] }));
    const vpc = out.Subnets?.[0]?.VpcId;
    if (!vpc) throw new Error(`the subnet ${subnetId} was not found`);
    return vpc;
  }

  /** labfleet's groups: of one workshop (in one VPC when given), or of every workshop; tags re-checked. */
  async find(workshop?: string, vpcId?: string): Promise<SecurityGroup[]> {
    const Filters: Filter[] = [
      ...(vpcId ? [{ Name: "vpc-id", Values: [vpcId] }] : []),
      { Name: `tag:${OWNER_TAG.key}`, Values: [OWNER_TAG.value] },
      { Name: `tag:${STAGE_TAG}`, Values: [this.stage] },
      ...(workshop ? [{ Name: `tag:${WORKSHOP_TAG}`, Values: [workshop] }] : []),
    ];
    const groups: SecurityGroup[] = [];
    let NextToken: string | undefined;
    do {
      const page = await this.ec2.send(
        new DescribeSecurityGroupsCommand(NextToken ? { Filters, NextToken } : { Filters }),
      );
      groups.push(
        ...(page.SecurityGroups ?? []).filter((g) => g.GroupId && isOwned(g, this.stage, workshop)),
      );
      NextToken = page.NextToken;
    } while (NextToken);
    return groups.sort((a, b) => (a.GroupId ?? "").localeCompare(b.GroupId ?? ""));
  }

  /**
   * The workshop's group in this VPC, created when missing. CreateSecurityGroup has no idempotency token: a
   * concurrent creation shows up as InvalidGroup.Duplicate, and the group of that name is then used only if
   * it carries labfleet's tags for this workshop.
   */
  async ensure(workshop: string, vpcId: string, now: Date): Promise<SecurityGroup> {
    const [existing] = await this.find(workshop, vpcId);
    if (existing) return existing;
    const GroupName = managedGroupName(this.stage, workshop);
    try {
      const out = await this.ec2.send(
        new CreateSecurityGroupCommand({
          GroupName,
          Description: `labfleet workshop ${workshop}: SSH and lab UI ports from operator addresses (managed by labfleet)`,
          VpcId: vpcId,
          TagSpecifications: [
            {
              ResourceType: "security-group",
              Tags: [
                { Key: OWNER_TAG.key, Value: OWNER_TAG.value },
                { Key: STAGE_TAG, Value: this.stage },
                { Key: WORKSHOP_TAG, Value: workshop },
                { Key: CREATED_TAG, Value: now.toISOString() },
                { Key: "Name", Value: GroupName },
              ],
            },
          ],
        }),
      );
      if (!out.GroupId) throw new Error("EC2 answered without a security group id");
      return { GroupId: out.GroupId, GroupName, VpcId: vpcId, IpPermissions: [] };
    } catch (err) {
      if (errorName(err) !== "InvalidGroup.Duplicate") throw err;
    }
    const named = await this.ec2.send(
      new DescribeSecurityGroupsCommand({
        Filters: [
          { Name: "vpc-id", Values: [vpcId] },
          { Name: "group-name", Values: [GroupName] },
        ],
      }),
    );
    const group = named.SecurityGroups?.[0];
    if (group?.GroupId && isOwned(group, this.stage, workshop)) return group;
    throw new VisibleError(
      "conflict",
      "provider.security_group_taken",
      `a security group named ${GroupName} already exists in ${vpcId} and is not labfleet's for this workshop: rename or delete it, or give provider.security_group_ids`,
    );
  }

  /**
   * Makes the group's inbound rules exactly the operator rules plus any open-access rules on the UI ports.
   * Returns the rules added and revoked.
   */
  async reconcile(
    group: SecurityGroup,
    operator: IngressRule[],
    worldPorts: number[],
  ): Promise<{ added: IngressRule[]; revoked: IngressRule[] }> {
    const existing = rulesOf(group);
    const keep = [...operator, ...worldRules(worldPorts)];
    const added = difference(operator, existing);
    const revoked = difference(existing, keep);
    await this.revoke(group.GroupId as string, revoked);
    await this.authorize(group.GroupId as string, added);
    return { added, revoked };
  }

  /** Open: add the world rules for these ports (never 22). Close: revoke every world rule of the group. */
  async setWorld(
    group: SecurityGroup,
    ports: number[],
    open: boolean,
  ): Promise<{ added: IngressRule[]; revoked: IngressRule[] }> {
    const existing = rulesOf(group);
    if (open) {
      const added = difference(worldRules(ports), existing);
      await this.authorize(group.GroupId as string, added);
      return { added, revoked: [] };
    }
    const revoked = existing.filter(isWorldRule);
    await this.revoke(group.GroupId as string, revoked);
    return { added: [], revoked };
  }

  /** Deletes a group; "in_use" when an interface still holds it (DependencyViolation), "gone" when absent. */
  async delete(groupId: string): Promise<"deleted" | "in_use" | "gone"> {
    try {
      await this.ec2.send(new DeleteSecurityGroupCommand({ GroupId: groupId }));
      return "deleted";
    } catch (err) {
      const name = errorName(err);
      if (name === "DependencyViolation") return "in_use";
      if (name === "InvalidGroup.NotFound") return "gone";
      throw err;
    }
  }

  /** Adds rules; a rule that already exists (a concurrent caller) is no error. */
  private async authorize(groupId: string, rules: IngressRule[]): Promise<void> {
    if (rules.length === 0) return;
    try {
      await this.ec2.send(
        new AuthorizeSecurityGroupIngressCommand({
          GroupId: groupId,
          IpPermissions: permissionsOf(rules, true),
        }),
      );
      return;
    } catch (err) {
      if (errorName(err) !== "InvalidPermission.Duplicate") throw err;
    }
    // One duplicate fails the whole request and adds nothing: add the rules one by one.
    for (const rule of rules) {
      try {
        await this.ec2.send(
          new AuthorizeSecurityGroupIngressCommand({
            GroupId: groupId,
            IpPermissions: permissionsOf([rule], true),
          }),
        );
      } catch (err) {
        if (errorName(err) !== "InvalidPermission.Duplicate") throw err;
      }
    }
  }

  /** Removes rules; a rule already gone is no error. */
  private async revoke(groupId: string, rules: IngressRule[]): Promise<void> {
    if (rules.length === 0) return;
    try {
      await this.ec2.send(
        new RevokeSecurityGroupIngressCommand({
          GroupId: groupId,
          IpPermissions: permissionsOf(rules, false),
        }),
      );
    } catch (err) {
      if (errorName(err) !== "InvalidPermission.NotFound") {
        throw new Error(`RevokeSecurityGroupIngress ${groupId}: ${errorMessage(err)}`);
      }
    }
  }
}
