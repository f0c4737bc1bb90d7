import { z } from "zod";
import { HOST_KEY_FORMS, type HostKey, parseHostKeyLine } from "../transports/host-keys.ts";
import {
  HISTORY_EVENT_LIMIT,
  historyBudget,
  INLINE_MAP_MAX_CONCURRENCY,
  MAX_WORKSHOP_HOSTS,
} from "./limits.ts";

/**
 * The schema of workshop.yaml. Every object is strict (unknown keys are errors), every limit says what
 * was expected, and schema/workshop.schema.json is generated from this file (`npm run schema`).
 */

const NAME = /^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$/;
const HOST_ID = /^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$/;
const SECRET_NAME = /^[A-Z][A-Z0-9_]{0,63}$/;

const int = (what: string, min: number, max: number) =>
  z
    .number({ error: `expected ${what}: a whole number from ${min} to ${max}` })
    .int({ error: `expected ${what}: a whole number from ${min} to ${max}` })
    .min(min, { error: `expected ${what}: a whole number from ${min} to ${max}` })
    .max(max, { error: `expected ${what}: a whole number from ${min} to ${max}` });

const text = (what: string) =>
  z
    .string({ error: `expected ${what} (a string)` })
    .trim()
    .min(1, { error: `expected ${what}, got an empty string` });

export const Requires = z
  .strictObject({
    memory_gib: z.number({ error: "expected memory in GiB (a number)" }).positive().optional(),
    cpus: int("a CPU count", 1, 512).optional(),
    disk_gib: z.number({ error: "expected free disk in GiB (a number)" }).positive().optional(),
    kvm: z.boolean({ error: "expected true or false" }).optional(),
    nested_virtualization: z.boolean({ error: "expected true or false" }).optional(),
    commands: z
      .array(z.string().regex(/^[\w.+-]{1,64}$/, { error: "expected a command name (no path, no spaces)" }))
      .optional(),
    root: z
      .boolean({ error: "expected true or false" })
      .optional()
      .describe("The lab needs root on its hosts: a root login or sudo without a password."),
  })
  .describe("What `labfleet doctor` checks on every host before a deploy.");

export const UiPort = z.strictObject({
  name: text("a name for this UI"),
  port: int("a TCP port", 1, 65535),
  scheme: z.enum(["http", "https"], { error: "expected http or https" }).default("https"),
  path: z.string().default("/"),
});

export const Component = z.strictObject({
  name: text("a component name"),
  port: int("a TCP port", 1, 65535).optional(),
  path: z.string().optional(),
  description: z.string().optional(),
});

/** How long one check may run by default, and at most: the portal waits for every check of a press at once. */
export const CHECK_TIMEOUT_DEFAULT_SECONDS = 10;
export const CHECK_TIMEOUT_MAX_SECONDS = 15;
export const CHECKS_MAX = 20;
const CHECK_NAME = /^[A-Za-z0-9][A-Za-z0-9 ._()/:+-]{0,59}$/;
const CHECK_TIMEOUT_ERROR = `expected seconds: a whole number from 1 to ${CHECK_TIMEOUT_MAX_SECONDS} (the student's page waits for its checks)`;

export const Check = z
  .strictObject({
    name: z.string({ error: "expected a check name (a string)" }).trim().regex(CHECK_NAME, {
      error:
        "expected a check name: 1 to 60 letters, digits, spaces and . _ ( ) / : + -, starting with a letter or digit",
    }),
    run: text("the shell command that checks the student's work (exit 0: passed)")
      .max(2000, {
        error: "expected a command of at most 2,000 characters (put longer checks in a script of the lab)",
      })
      .describe(
        "A shell command run with bash on the student's own host, in lab.dir, as the account that runs the lab; exit code 0 passes.",
      ),
    hint: z
      .string({ error: "expected a hint (a string)" })
      .trim()
      .max(500, { error: "expected a hint of at most 500 characters" })
      .optional()
      .describe("Shown to the student when the check fails."),
    timeout_seconds: z
      .number({ error: CHECK_TIMEOUT_ERROR })
      .int({ error: CHECK_TIMEOUT_ERROR })
      .min(1, { error: CHECK_TIMEOUT_ERROR })
      .max(CHECK_TIMEOUT_MAX_SECONDS, { error: CHECK_TIMEOUT_ERROR })
      .default(CHECK_TIMEOUT_DEFAULT_SECONDS),
  })
  .describe('One "Check my work" test of the lab page.');

const Checks = z
  .array(Check)
  .max(CHECKS_MAX, { error: `expected at most ${CHECKS_MAX} checks` })
  .superRefine((checks, ctx) => {
    const seen = new Map<string, number>();
    checks.forEach((c, i) => {
      const key = c.name.toLowerCase();
      const first = seen.get(key);
      if (first !== undefined) {
        ctx.addIssue({
          code: "custom",
          path: [i, "name"],
          message: `expected a unique check name; "${c.name}" is already used by checks[${first}]`,
        });
      } else seen.set(key, i);
    });
  })
  .default([])
  .describe(
    "The lab page's \"Check my work\": each check runs on the student's own host, at the same time as the others, each bounded by its timeout_seconds.",
  );

// The deploy step is an inline Map whose MaxConcurrency is lab.concurrency; Step Functions runs at most 40
// of its iterations at once, so a larger value would promise what the cloud does not do.
const CONCURRENCY_ERROR = `expected how many hosts deploy at once: a whole number from 1 to ${INLINE_MAP_MAX_CONCURRENCY} (Step Functions runs at most ${INLINE_MAP_MAX_CONCURRENCY} iterations of the deploy step's inline Map at once)`;

export const Lab = z
  .strictObject({
    dir: text("the folder the lab is synced into (relative to the host user's home, or absolute)")
      .default("lab")
      .describe(
        "The folder the lab is synced into and its setup runs in: relative to the login user's home, or absolute (SSH and EC2 hosts). On local hosts, a folder inside the host's own folder: relative, without `..`.",
      ),
    source: text('the lab source: "git:URL" or a local path')
      .describe(
        'Where the lab comes from: "git:https://..." (cloned, then reset to `ref`) or a local folder.',
      )
      .refine((s) => !s.startsWith("git:") || s.length > 4, { error: 'expected a URL after "git:"' }),
    ref: text("a git ref (branch, tag or commit)").optional(),
    setup: text("the command that builds the lab"),
    health: text("a command that exits 0 when the lab can be handed out").optional(),
    health_interval_seconds: int(
      "seconds between health checks of ready labs while the workshop runs (0: none)",
      0,
      3600,
    )
      .default(180)
      .describe(
        "How often `lab.health` runs on every ready lab while the workshop runs (claimed or free); two failures in a row flag the lab. 0 turns it off. The cloud checks at most every 5 minutes (the sweeper's rate).",
      ),
    concurrency: z
      .number({ error: CONCURRENCY_ERROR })
      .int({ error: CONCURRENCY_ERROR })
      .min(1, { error: CONCURRENCY_ERROR })
      .max(INLINE_MAP_MAX_CONCURRENCY, { error: CONCURRENCY_ERROR })
      .default(4),
    timeout_minutes: z
      .number({ error: "expected minutes (a number greater than 0, at most 1440)" })
      .gt(0, { error: "expected minutes (a number greater than 0, at most 1440)" })
      .max(1440, { error: "expected minutes (a number greater than 0, at most 1440)" })
      .default(180),
    poll_seconds: int("seconds between readiness polls", 5, 3600).default(60),
    push: z
      .boolean({ error: "expected true or false" })
      .default(true)
      .describe(
        "Whether hosts that can reach labfleet's API push their lab's progress (signed per host), so a lab is claimable as soon as its health passes. false: polling alone (every poll_seconds). EC2 hosts are always polled.",
      ),
    requires: Requires.default({}),
    ui_ports: z.array(UiPort).default([]),
    components: z.array(Component).default([]),
    operator_secrets: z
      .array(z.string().regex(SECRET_NAME, { error: "expected an UPPER_SNAKE_CASE secret name" }))
      .default([]),
    checks: Checks,
  })
  .superRefine(
    (value, ctx) => {
      const lab = value as unknown as { ref?: unknown; source?: unknown };
      if (typeof lab.ref === "string" && typeof lab.source === "string" && !lab.source.startsWith("git:")) {
        ctx.addIssue({ code: "custom", path: ["ref"], message: 'ref applies only to a "git:" source' });
      }
    },
    { when: (payload) => typeof payload.value === "object" && payload.value !== null },
  );

const SSH_ADDRESS = /^(?:[a-z_][a-z0-9_.-]{0,31}@)?(?:\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+)(?::\d{1,5})?$/;
const sshAddress = (what: string) =>
  z.string({ error: `expected ${what}: user@host[:port] or host` }).regex(SSH_ADDRESS, {
    error: `expected ${what}: user@host[:port] or host`,
  });

export const SshOptions = z.strictObject({
  proxy_jump: sshAddress("a bastion").optional().describe("Reach every host through this bastion (one hop)."),
  connect_timeout_seconds: z
    .number({ error: "expected seconds (a number from 1 to 120)" })
    .min(1, { error: "expected seconds (a number from 1 to 120)" })
    .max(120, { error: "expected seconds (a number from 1 to 120)" })
    .default(10),
});

export const Ssh = z
  .strictObject({
    require_known_host_keys: z
      .boolean({ error: "expected true or false" })
      .default(false)
      .describe(
        "Connect over SSH (and so send operator secrets and lab sources) only to hosts whose key was given out of band: hosts[].host_key, `labfleet hosts pin`, or read through SSM. A host whose key was only trusted on first use is refused, with the command that pins it.",
      ),
  })
  .describe("How labfleet trusts the SSH hosts it connects to.");

export const Defaults = z.strictObject({
  ssh_user: text("an SSH user name").optional(),
  identity_file: text("a path to an SSH private key").optional(),
  ssh_options: SshOptions.optional(),
});

const ProviderCommon = {
  host_id_prefix: z
    .string()
    .regex(/^[a-z0-9][a-z0-9-]{0,30}$/, { error: "expected lowercase letters, digits and dashes" })
    .default("student-"),
  ttl_hours: z
    .number({ error: "expected hours (a number greater than 0, at most 168)" })
    .gt(0, { error: "expected hours (a number greater than 0, at most 168)" })
    .max(168, { error: "expected hours (a number greater than 0, at most 168)" })
    .default(6),
};

export const LocalProvider = z.strictObject({
  type: z.literal("local"),
  count: int("a host count", 1, MAX_WORKSHOP_HOSTS),
  ...ProviderCommon,
});

export const StaticProvider = z.strictObject({
  type: z.literal("static"),
  count: int("a host count", 1, MAX_WORKSHOP_HOSTS).optional(),
  ...ProviderCommon,
});

export const AwsProvider = z.strictObject({
  type: z.literal("aws"),
  count: int("a host count", 1, MAX_WORKSHOP_HOSTS),
  region: text("an AWS region").optional(),
  subnet_id: text("a subnet id").optional(),
  instance_type: text("an EC2 instance type").optional(),
  instance_tier: text("an instance tier").optional(),
  ami: text("an AMI id").optional(),
  security_group_ids: z
    .array(text("a security group id"))
    .min(1, { error: "expected at least one security group id, or no security_group_ids" })
    .optional()
    .describe(
      "Bring-your-own security groups for the hosts; labfleet changes nothing in them. Without it, labfleet manages one group per workshop that admits operator_cidrs only.",
    ),
  operator_cidrs: z
    .array(
      z
        .union([z.cidrv4(), z.cidrv6()], {
          error: "expected an IPv4 or IPv6 CIDR such as 203.0.113.7/32 or 2001:db8::/64",
        })
        .refine((cidr) => !cidr.endsWith("/0"), {
          error: "refused: a /0 is the whole internet; give the operator's own addresses",
        }),
    )
    .min(1, { error: "expected at least one CIDR" })
    .optional()
    .describe(
      "The operator's addresses: the only sources labfleet's security group admits, on SSH (22) and the lab UI ports. Required without security_group_ids (the EC2 provider checks it).",
    ),
  student_access: z.enum(["operator", "open"], { error: "expected operator or open" }).optional(),
  volume_size_gib: int("a volume size in GiB", 8, 16384).optional(),
  nested_virtualization: z.boolean().optional(),
  labels: z.record(z.string(), z.string()).optional(),
  ...ProviderCommon,
});

/**
 * Machines that dial in (shared/providers/enrolled.ts): each machine that joins with a join token and is approved
 * becomes a host of the workshop; labfleet reaches it through its agent (the `agent` transport).
 */
export const EnrolledProvider = z.strictObject({
  type: z.literal("enrolled"),
  expected: int("a number of machines", 1, 500)
    .optional()
    .describe(
      "How many machines are expected to join: shown beside the hosts that have joined. Provisioning takes the approved machines that have joined, however many.",
    ),
  approve: z
    .enum(["auto", "manual"], { error: "expected auto or manual" })
    .default("auto")
    .describe(
      "With portal.enrollment: claim, whether a machine a student enrolls from their lab's join page is approved at once (auto) or waits for an instructor's approval (manual).",
    ),
  ...ProviderCommon,
});

export const Provider = z.discriminatedUnion(
  "type",
  [LocalProvider, StaticProvider, AwsProvider, EnrolledProvider],
  { error: "expected provider.type to be local, static, aws or enrolled" },
);

/**
 * `hosts[].host_key`: one host key line given out of band, or a list of them (`hostKeysOf` reads them). Each
 * line's problem is reported at its own path; the message never repeats the line.
 */
const HostKeys = z
  .union(
    [
      z.string(),
      z.array(z.string()).min(1, { error: "expected at least one host key" }).max(16, {
        error: "expected at most 16 host keys",
      }),
    ],
    { error: `expected ${HOST_KEY_FORMS}, or a list of them` },
  )
  .superRefine((value, ctx) => {
    const lines = Array.isArray(value) ? value : [value];
    lines.forEach((line, i) => {
      const r = parseHostKeyLine(line);
      if (!r.ok) ctx.addIssue({ code: "custom", path: Array.isArray(value) ? [i] : [], message: r.message });
    });
  });

export const HostEntry = z.strictObject({
  id: z.string({ error: "expected a host id" }).regex(HOST_ID, {
    error: "expected a host id: lowercase letters, digits and dashes, at most 48 characters",
  }),
  ssh: sshAddress("the host's SSH address"),
  via: sshAddress("a bastion")
    .optional()
    .describe("Reach this host through this bastion (overrides defaults.ssh_options.proxy_jump)."),
  // The formats restated: the OpenAPI generator would write both as "ip", one schema twice in an anyOf.
  public_ip: z
    .union([z.ipv4().meta({ format: "ipv4" }), z.ipv6().meta({ format: "ipv6" })], {
      error: "expected an IP address",
    })
    .optional(),
  host_key: HostKeys.optional().describe(
    "The host's SSH public key, or a list of its keys, obtained out of band (its /etc/ssh/ssh_host_*_key.pub, or ssh-keyscan over a network you trust): labfleet then trusts only these, never the key the network shows at first contact.",
  ),
  labels: z.record(z.string(), z.string({ error: "expected a label value (a string)" })).default({}),
});

export const Portal = z.strictObject({
  enabled: z.boolean({ error: "expected true or false" }).default(false),
  code_letters: int("the number of random letters in the workshop code", 4, 8).default(6),
  guide_url: z.url({ error: "expected a URL" }).optional(),
  open_at_percent: int("a percentage of ready labs", 1, 100).default(100),
  mode: z.enum(["open", "roster", "both"], { error: "expected open, roster or both" }).default("open"),
  student_ssh: z.boolean({ error: "expected true or false" }).default(false),
  auto_swap: z
    .boolean({ error: "expected true or false" })
    .default(false)
    .describe(
      "When a claimed lab is flagged failing its health check, move its student to a free ready lab (the same personal link), and rebuild the broken one.",
    ),
  spares: int("a number of labs", 0, 1000)
    .default(0)
    .describe(
      "How many ready labs to keep off the board, for swaps: the highest-numbered free labs stay out of claims and the waiting line, and free labs fill the spares before the line is served.",
    ),
  enrollment: z
    .enum(["claim"], { error: "expected claim" })
    .optional()
    .describe(
      "Bring your own device (provider.type enrolled only): a student who claims gets a join page with the one line to run on their own machine instead of a lab, and the machine that joins with it becomes their lab.",
    ),
});

/**
 * Why `lab.dir` cannot be a local host's lab folder, or undefined. A local host is a folder of this machine
 * (its HOME), and its lab stays inside it: not the folder itself, not `.labfleet` (the lab's records), nothing
 * absolute and no `..`, so a sync that replaces the lab folder can only ever replace that.
 */
export function localLabDirProblem(dir: string): string | undefined {
  const expected = "expected a folder inside the local host's own folder";
  if (dir.startsWith("/")) return `${expected}: a relative path such as lab, not an absolute one`;
  const parts = dir.split("/").filter((p) => p !== "" && p !== ".");
  if (parts.includes("..")) return `${expected}: a relative path without ..`;
  if (parts.length === 0) return `${expected}, not the host's folder itself`;
  if (parts[0] === ".labfleet")
    return `${expected} other than .labfleet, where labfleet keeps the lab's records`;
  return undefined;
}

const validCount = (n: unknown): n is number => typeof n === "number" && Number.isInteger(n) && n >= 1;

/**
 * One run of `up` is one Step Functions execution, whose history holds at most 25,000 events: a poll
 * interval short for the run's timeout (10-second polls for 8 hours) fails the run mid-way in the cloud.
 * Checked only when both settings and the host count are themselves valid (their own errors say the rest).
 */
function historyRule(
  w: {
    lab?: { poll_seconds?: unknown; timeout_minutes?: unknown };
    provider?: { type?: unknown; count?: unknown };
  },
  listedHosts: number,
  ctx: z.core.$RefinementCtx,
) {
  const poll = w.lab?.poll_seconds;
  const timeout = w.lab?.timeout_minutes;
  if (!validCount(poll) || poll < 5 || poll > 3600) return;
  if (typeof timeout !== "number" || !(timeout > 0) || timeout > 1440) return;
  const count =
    w.provider?.type === "enrolled" ? (w.provider as { expected?: unknown }).expected : w.provider?.count;
  const hosts = w.provider?.type === "static" ? (validCount(count) ? count : listedHosts) : count;
  if (!validCount(hosts) || hosts > MAX_WORKSHOP_HOSTS) return;
  const b = historyBudget(poll, timeout, hosts);
  if (b.fits) return;
  const fixes = [
    b.minPollSeconds !== undefined ? `raise poll_seconds to at least ${b.minPollSeconds}` : undefined,
    b.maxTimeoutMinutes !== undefined ? `lower timeout_minutes to at most ${b.maxTimeoutMinutes}` : undefined,
  ].filter((f) => f !== undefined);
  if (fixes.length === 0) fixes.push("raise poll_seconds or lower timeout_minutes");
  const n = (x: number) => x.toLocaleString("en-US");
  ctx.addIssue({
    code: "custom",
    path: ["lab", "poll_seconds"],
    message:
      `expected a poll interval that fits one Step Functions execution: polling every ${poll} s for ${timeout} ` +
      `minutes is up to ${n(b.polls)} polls, ${n(b.events)} history events in the worst case with ${hosts} ` +
      `host${hosts === 1 ? "" : "s"}, and an execution holds at most ${n(HISTORY_EVENT_LIMIT)}; ${fixes.join(", or ")}`,
  });
}

export const Workshop = z
  .strictObject({
    name: z.string({ error: "expected a workshop name" }).regex(NAME, {
      error: "expected a name of lowercase letters, digits and dashes, at most 40 characters",
    }),
    lab: Lab,
    defaults: Defaults.default({}),
    provider: Provider,
    hosts: z
      .array(HostEntry)
      .max(MAX_WORKSHOP_HOSTS, { error: `expected at most ${MAX_WORKSHOP_HOSTS} hosts` })
      .default([]),
    ssh: Ssh.default({ require_known_host_keys: false }),
    portal: Portal.default({
      enabled: false,
      code_letters: 6,
      open_at_percent: 100,
      mode: "open",
      student_ssh: false,
      auto_swap: false,
      spares: 0,
    }),
  })
  // Cross-field rules run even when other fields failed, so every error is reported at once; the
  // value may then be partly invalid, so these checks read it defensively.
  .superRefine(
    (value, ctx) => {
      const w = value as unknown as { hosts?: unknown; provider?: { type?: unknown; count?: unknown } };
      const hosts = Array.isArray(w.hosts) ? (w.hosts as { id?: unknown }[]) : [];
      const seen = new Map<string, number>();
      hosts.forEach((h, i) => {
        if (typeof h?.id !== "string") return;
        const first = seen.get(h.id);
        if (first !== undefined) {
          ctx.addIssue({
            code: "custom",
            path: ["hosts", i, "id"],
            message: `expected a unique host id; "${h.id}" is already used by hosts[${first}]`,
          });
        } else seen.set(h.id, i);
      });
      const type = w.provider?.type;
      if (type === "static") {
        if (hosts.length === 0) {
          ctx.addIssue({
            code: "custom",
            path: ["hosts"],
            message: "expected at least one host for provider.type static",
          });
        }
        const count = w.provider?.count;
        if (typeof count === "number" && count !== hosts.length) {
          ctx.addIssue({
            code: "custom",
            path: ["provider", "count"],
            message: `expected ${hosts.length} (the number of hosts[]) or no count for provider.type static`,
          });
        }
      } else if ((type === "local" || type === "aws" || type === "enrolled") && hosts.length > 0) {
        ctx.addIssue({
          code: "custom",
          path: ["hosts"],
          message: `expected no hosts[] for provider.type ${type}: hosts[] lists bring-your-own hosts (type static)`,
        });
      }
      const portal = (value as unknown as { portal?: { enrollment?: unknown; mode?: unknown } }).portal;
      if (portal?.enrollment === "claim" && type !== "enrolled" && typeof type === "string") {
        ctx.addIssue({
          code: "custom",
          path: ["portal", "enrollment"],
          message: `expected portal.enrollment: claim only with provider.type enrolled (students enroll their own machines), got provider.type ${type}`,
        });
      }
      if (portal?.enrollment === "claim" && portal.mode === "roster") {
        ctx.addIssue({
          code: "custom",
          path: ["portal", "mode"],
          message:
            "expected mode open or both with portal.enrollment: claim: students enroll their machines from the claim form",
        });
      }
      historyRule(w, hosts.length, ctx);
      const dir = (value as unknown as { lab?: { dir?: unknown } }).lab?.dir;
      const dirProblem =
        type === "local" && typeof dir === "string" ? localLabDirProblem(dir.trim()) : undefined;
      if (dirProblem) ctx.addIssue({ code: "custom", path: ["lab", "dir"], message: dirProblem });
    },
    { when: (payload) => typeof payload.value === "object" && payload.value !== null },
  );

export type Workshop = z.output<typeof Workshop>;
export type WorkshopInput = z.input<typeof Workshop>;
export type HostEntry = z.output<typeof HostEntry>;
export type Check = z.output<typeof Check>;

/**
 * Whether labfleet makes this provider's hosts (local sandboxes, EC2 instances), so it can make more, build a new
 * one beside an old one and must remove what it made; or is given them (bring-your-own over SSH, enrolled
 * machines that dialled in), so it can only use and update them in place.
 */
export function makesHosts(type: Workshop["provider"]["type"]): boolean {
  return type === "local" || type === "aws";
}

/** The keys `hosts[].host_key` gives a host (the schema checked every line), as `type base64` blobs. */
export function hostKeysOf(entry: { host_key?: string | string[] | undefined } | undefined): HostKey[] {
  const lines = entry?.host_key === undefined ? [] : [entry.host_key].flat();
  return lines.flatMap((line) => {
    const r = parseHostKeyLine(line);
    return r.ok ? [r.key] : [];
  });
}
