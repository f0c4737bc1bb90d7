import { CliError } from "./client.ts";
import { jsonText, type Output } from "./render.ts";

/**
 * The one table of `labfleet` commands and options. `labfleet --help`, `labfleet help CMD`, `CMD --help` and the
 * shell completion (`completion.ts`) are all generated from it, and main.ts refuses a command that is not in it,
 * so a new command is added here first and then shows up everywhere.
 */

/** What an option value or an argument completes to in a shell. */
export type Completion = "yaml" | "file" | "dir" | "commands" | readonly string[];

export interface OptionSpec {
  short?: string;
  /** The placeholder of its value; an option without one is a flag. */
  value?: string;
  /** May be given more than once. */
  multiple?: boolean;
  help: string;
  complete?: Completion;
}

/** Every option the CLI parses (main.ts's parseArgs options must match: a unit test checks). */
export const OPTIONS = {
  file: {
    short: "f",
    value: "FILE",
    help: "the workshop file (validated before anything is sent)",
    complete: "yaml",
  },
  output: {
    short: "o",
    value: "FORMAT",
    help: "text (the default) or json: one JSON document instead of text, and no progress drawing",
    complete: ["json", "text"],
  },
  force: { help: "also act where it would be skipped" },
  plan: { help: "print what would be created or reused per host; change nothing" },
  close: { help: "close what the command opens" },
  port: { value: "N", help: "the port on 127.0.0.1 (0 for any free one; default 8787)" },
  "data-dir": {
    value: "DIR",
    help: "where the local runtime keeps its data and runtime.json (default .labfleet)",
    complete: "dir",
  },
  host: { value: "ID", multiple: true, help: "only this host (repeatable)" },
  label: { value: "K=V", multiple: true, help: "only hosts with this label (repeatable; all must match)" },
  jobs: {
    short: "j",
    value: "N",
    help: "hosts worked on at once, 1 to 64 (default 8; deploy and retry: lab.concurrency, at most 40)",
  },
  "max-errors": {
    value: "N",
    help: "exec: start no further host after N hosts failed (those not started are reported skipped)",
  },
  timeout: {
    value: "SECONDS",
    help: "exec: kill the command on a host after this long, 1 to 3600 (default 60; status timeout)",
  },
  ref: { value: "REF", help: "deploy this git branch, tag or commit instead of lab.ref" },
  only: {
    value: "STAGES",
    help: "run only these stages, comma-separated: provision, deploy, wait, publish",
    complete: ["provision", "deploy", "wait", "publish"],
  },
  skip: {
    value: "STAGES",
    help: "leave these stages out, comma-separated (after --only)",
    complete: ["provision", "deploy", "wait", "publish"],
  },
  check: {
    help: "report per host and stage what would be created, reused, rebuilt, skipped or promoted; change nothing (exit 0: nothing would change, 2: something would)",
  },
  "failed-only": { help: "rebuild only the selected hosts that failed (the default)" },
  "all-selected": { help: "act on every selected host, not only the failed ones" },
  unclaimed: { value: "N|all", help: "remove N (or all) labs nobody claimed", complete: ["all"] },
  csv: { value: "FILE", help: "write CSV to FILE (mode 0600)", complete: "file" },
  hours: { value: "N", help: "hours to add, more than 0 and at most 168" },
  count: { value: "N", help: "the number of hosts to have, more than now and at most 500" },
  url: { value: "URL", help: "the control plane's address (default LABFLEET_URL, then the local runtime)" },
  token: { help: "read a pasted API token from stdin instead of signing in through the browser" },
  "expires-days": { value: "N", help: "the token expires after N days (1 to 3650; default never)" },
  after: { value: "ID", help: "only what came after this event id (the last one you saw)" },
  key: {
    value: "LINE",
    multiple: true,
    help: 'a host\'s public key line, obtained out of band: "ssh-ed25519 AAAA..." or ssh-keyscan\'s "host ssh-ed25519 AAAA..." (repeatable)',
  },
  "key-file": {
    value: "PATH",
    help: "a file of host key lines (a host's ssh_host_*_key.pub, or ssh-keyscan's output); - reads stdin",
    complete: "file",
  },
  replace: { help: "replace a different key pinned before (at first contact, by hand or through SSM)" },
  address: { value: "A", help: "the network address, as portal status shows it" },
  all: { help: "every one of them" },
  yes: { short: "y", help: "do not ask for confirmation (for scripts)" },
  help: { short: "h", help: "show help (for a command: its usage, options and examples)" },
  version: { help: "print the version" },
  // rollout
  canary: { value: "N", help: "rollout: labs updated first, alone (default 1); a failure there halts" },
  batch: { value: "N", help: "rollout: labs per batch after the canary (default a quarter of the fleet)" },
  "include-claimed": { help: "rollout: also update claimed labs (their students are told before and after)" },
  status: {
    help: "rollout: show the latest rollout, each lab's old and new ref, state, gate and failure log",
  },
  resume: { help: "rollout: go on with a halted or aborted rollout (failed labs are tried again)" },
  abort: { help: "rollout: stop the running rollout; new hosts not yet promoted are removed" },
  // hosts join-token
  uses: { value: "N", help: "join-token: how many machines may join with it, 1 to 1000 (default 1)" },
  expires: {
    value: "TIME",
    help: "join-token: it stops working after this long: 90m, 24h, 7d (default 24h, at most 30d)",
  },
  approve: {
    value: "auto|manual",
    help: "join-token: auto approves hosts as they join (the default); manual keeps them pending for approval",
    complete: ["auto", "manual"],
  },
} as const satisfies Record<string, OptionSpec>;

export type OptionName = keyof typeof OPTIONS;

/** An option a command takes, with its own wording where the general one is not precise enough. */
export type CommandOption = OptionName | readonly [OptionName, string];

export interface SubcommandSpec {
  name: string;
  /** What follows the subcommand, as in the usage line. */
  args?: string;
  summary: string;
  /** Options only this subcommand takes. */
  options?: readonly CommandOption[];
  /** What its positional arguments after the workshop complete to. */
  complete?: Completion;
  /** False where it prints no JSON document with --output json. */
  json?: false;
}

export interface Example {
  command: string;
  note?: string;
  /** Shown in `labfleet --help` too. */
  overview?: true;
}

export type Group = "workshops" | "portal" | "auth" | "shell";

export interface CommandSpec {
  name: string;
  group: Group;
  summary: string;
  /** Usage lines (after "labfleet "), each with what it does. */
  usage: readonly (readonly [string, string])[];
  options: readonly CommandOption[];
  subcommands?: readonly SubcommandSpec[];
  /** What its first argument completes to, for a command without subcommands. */
  complete?: Completion;
  examples: readonly Example[];
  /** Whether `--output json` prints one JSON document. */
  json: boolean;
  notes?: readonly string[];
}

const W = "(-f workshop.yaml | NAME)";
const SELECT: readonly CommandOption[] = ["host", "label", "jobs"];

export const GROUPS: Record<Group, string> = {
  workshops: "Workshops and labs:",
  portal: "The claim portal (students go to the runtime's URL and type the code):",
  auth: "Sign-in and API tokens:",
  shell: "Help and shell completion:",
};

export const COMMANDS: readonly CommandSpec[] = [
  {
    name: "dev",
    group: "workshops",
    summary: "start the local runtime in the foreground, and with -f run a workshop on it",
    usage: [
      ["dev [-f workshop.yaml] [--port N] [--data-dir DIR]", "start the local runtime (and run a workshop)"],
    ],
    options: [["file", "submit this workshop, run up and draw per-host progress"], "port", "data-dir"],
    examples: [
      { command: "npx labfleet dev -f examples/demo/workshop.yaml", overview: true },
      {
        command: "npx labfleet dev --port 0 --data-dir /tmp/labfleet",
        note: "any free port, data elsewhere",
      },
    ],
    json: false,
    notes: [
      "It stays up until Ctrl-C. Other commands find it through .labfleet/runtime.json (or LABFLEET_DATA_DIR).",
      "It has no --output json: it is a long-running process that prints progress as it goes, not one document. " +
        "For data, run `labfleet up`, `status` or `runs` with --output json against it from another shell.",
    ],
  },
  {
    name: "validate",
    group: "workshops",
    summary: "check a workshop file offline; every error with its YAML path, line and column",
    usage: [["validate -f workshop.yaml", "check a file offline; exit 1 on any error"]],
    options: ["file", "output"],
    examples: [
      { command: "npx labfleet validate -f workshop.yaml" },
      { command: "npx labfleet validate -f workshop.yaml --output json", note: "the errors as a list" },
    ],
    json: true,
  },
  {
    name: "submit",
    group: "workshops",
    summary: "validate a workshop file and store it (created or updated); starts nothing",
    usage: [["submit -f workshop.yaml", "validate and store the file; start nothing"]],
    options: ["file", "output"],
    examples: [
      { command: "npx labfleet submit -f workshop.yaml" },
      {
        command: "npx labfleet submit -f workshop.yaml --output json",
        note: '{"name": ..., "created": true}',
      },
    ],
    json: true,
    notes: [
      "The file is checked before it is sent (exit 1 with every error). No host is created and no run starts: " +
        "`labfleet up -f workshop.yaml` does that.",
    ],
  },
  {
    name: "up",
    group: "workshops",
    summary: "submit a workshop file, run up and follow it until every lab is ready",
    usage: [
      ["up -f workshop.yaml [--force]", "submit, run up, follow until every lab is ready"],
      ["up -f workshop.yaml --plan", "what up would create or reuse, per host; changes nothing"],
      ["up -f workshop.yaml [--only STAGES] [--skip STAGES]", "run only some stages of up"],
      [
        "up -f workshop.yaml --check",
        "what each stage would do, per host; changes nothing (exit 2: changes)",
      ],
    ],
    options: [
      "file",
      ["force", "rebuild every lab, including ready ones"],
      "only",
      "skip",
      "check",
      "plan",
      "output",
    ],
    examples: [
      { command: "npx labfleet up -f workshop.yaml" },
      { command: "npx labfleet up -f workshop.yaml --output json", overview: true },
      {
        command: "npx labfleet up -f workshop.yaml --plan",
        note: "instance types, cost and quota; creates nothing",
      },
      { command: "npx labfleet up -f workshop.yaml --skip publish", note: "build the labs, hand out none" },
      { command: "npx labfleet up -f workshop.yaml --only publish", note: "hand out the labs built" },
      { command: "npx labfleet up -f workshop.yaml --check", note: "exit 0 when nothing would change" },
    ],
    json: true,
    notes: [
      "Exit 0 only when the run succeeded and every lab is ready (a run that skips wait: when no lab failed).",
      "Stages: provision, deploy, wait (until lab.health passes), publish (the portal opens, waiting students get labs, the workshop becomes ready). `--only provision` is `labfleet provision`.",
      "--check submits nothing and starts nothing; --plan prints the provider's plan as before.",
    ],
  },
  {
    name: "provision",
    group: "workshops",
    summary: "submit a workshop file and create (or reuse) its hosts, without deploying the lab",
    usage: [
      ["provision -f workshop.yaml", "submit, create or reuse the hosts, print each id and address"],
      ["provision -f workshop.yaml --plan", "what would be created or reused, per host; changes nothing"],
      [
        `provision ${W} --check`,
        "per host: create or reuse, changing nothing (exit 0: nothing, 2: something)",
      ],
    ],
    options: ["file", "plan", "check", "output"],
    examples: [
      { command: "npx labfleet provision -f workshop.yaml", note: "hosts ready for a later up" },
      { command: "npx labfleet provision -f workshop.yaml --plan", note: "the plan up --plan prints" },
      { command: "npx labfleet provision -f workshop.yaml --output json" },
      { command: "npx labfleet provision my-workshop --check", note: "exit 2 when a host would be created" },
    ],
    json: true,
    notes: [
      "A provision run records the hosts (new ones pending, with their address) and arms the TTL teardown; " +
        "no lab is deployed. A later `labfleet up -f workshop.yaml` deploys them.",
      "Exit 0 only when every host was provisioned.",
      "--check submits nothing and creates nothing: with -f it checks the file, with NAME the workshop as submitted; exit 0 when nothing would change, 2 when a host would be created, 1 on an error.",
    ],
  },
  {
    name: "workshops",
    group: "workshops",
    summary: "every workshop the control plane knows: state, provider, labs ready, time left",
    usage: [["workshops", "list the workshops"]],
    options: ["output"],
    examples: [{ command: "npx labfleet workshops --output json" }],
    json: true,
  },
  {
    name: "events",
    group: "workshops",
    summary: "what happened, oldest first: runs, hosts ready or failed, labs claimed or released, teardown",
    usage: [
      [
        `events ${W} [--after ID]`,
        "a workshop's events as sentences (who did it, to whose lab); --after for the ones since",
      ],
    ],
    options: ["file", "after", "output"],
    examples: [{ command: "npx labfleet events my-workshop --after 01JD8Z0Q7W3G9M2K4V6X8Y0B1C" }],
    json: true,
  },
  {
    name: "status",
    group: "workshops",
    summary:
      "re-read the hosts, then show the workshop with its claims and time left, while labs build when every lab will be ready (the estimate, with what it stands on), each host's state (and an enrolled host's agent: online, or unreachable and when last seen; drained, disabled), phase, claimant and error, and recent runs",
    usage: [[`status ${W}`, "re-read the hosts; phases, errors and runs"]],
    options: ["file", ...SELECT, "output"],
    examples: [
      { command: "npx labfleet status my-workshop" },
      {
        command: "LABFLEET_URL=https://... LABFLEET_TOKEN=... npx labfleet status my-workshop",
        overview: true,
      },
    ],
    json: true,
  },
  {
    name: "runs",
    group: "workshops",
    summary: "a workshop's runs, newest first; with RUN_ID, that run and its result on each host",
    usage: [
      [`runs ${W}`, "the workshop's runs, newest first: kind, state, start, duration"],
      [`runs ${W} RUN_ID`, "one run: its state, error and the result on each host"],
    ],
    options: ["file", "output"],
    examples: [
      { command: "npx labfleet runs my-workshop" },
      { command: "npx labfleet runs my-workshop run_01J9ZK3M4R7S8T9V0W1X2Y3Z4A --output json" },
    ],
    json: true,
    notes: [
      "Exit 0 whatever state the runs are in (exit 1 for an unknown workshop or run).",
      "With -f, only the workshop's name is taken from the file: nothing is submitted.",
    ],
  },
  {
    name: "doctor",
    group: "workshops",
    summary: "check each host against lab.requires: reachable, sudo, CPUs, memory, disk, KVM, commands",
    usage: [[`doctor ${W}`, "check each host against lab.requires"]],
    options: ["file", ...SELECT, "output"],
    examples: [{ command: "npx labfleet doctor -f workshop.yaml --label room=a -j 16", overview: true }],
    json: true,
    notes: ["Exit 1 when a host fails a check."],
  },
  {
    name: "exec",
    group: "workshops",
    summary: "run a shell command on every selected host: per-host output, exit codes and a summary",
    usage: [
      [
        `exec ${W} [--host ID] [--label K=V] [-j N] [--max-errors N] [--timeout SECONDS] -- CMD`,
        "run CMD with bash on each selected host",
      ],
    ],
    options: [
      "file",
      "host",
      "label",
      ["jobs", "hosts run at once, 1 to 64 (default 16)"],
      "max-errors",
      "timeout",
      [
        "output",
        "text (lines prefixed `HOST | ` for stdout, `HOST ! ` for stderr) or json (the job at its end)",
      ],
    ],
    examples: [
      { command: "npx labfleet exec my-workshop -- uptime", overview: true },
      {
        command:
          "npx labfleet exec my-workshop --label room=a -j 32 --max-errors 3 --timeout 30 -- 'df -h /'",
      },
      {
        command: "npx labfleet exec -f workshop.yaml --host student-07 --output json -- systemctl status lab",
      },
    ],
    json: true,
    notes: [
      "The command runs in the login user's home (root's on EC2 hosts reached through SSM), without input.",
      "Output per host: the first 64 KiB of stdout and of stderr (over SSM 20,000 and 6,800 bytes), 2 MiB in all; more is cut and marked.",
      "Ends with a summary such as `12 ok, 1 failed (exit 2): student-07; 1 timeout: student-03`.",
      "Exit 0 only when every selected host exited 0; 1 otherwise.",
      "It runs as a job (the same in both runtimes): each host's lines print as its result arrives; a timeout may be up to 3600 s.",
      "Ctrl-C cancels the job (the commands still running are ended on their hosts) and prints its id; a second Ctrl-C leaves at once.",
    ],
  },
  {
    name: "deploy",
    group: "workshops",
    summary: "deploy the lab again on the selected hosts (all without a selection) and follow the run",
    usage: [
      [`deploy ${W} [--ref REF] [--force]`, "deploy the lab again on the selected hosts"],
      [`deploy ${W} --check`, "what the deploy would do, per host and stage; changes nothing"],
    ],
    options: [
      "file",
      ...SELECT,
      "ref",
      ["force", "redeploy ready labs too, and labs students have claimed (refused without it, naming them)"],
      "only",
      "skip",
      "check",
      "output",
    ],
    examples: [
      { command: "npx labfleet deploy my-workshop --ref v2 --host student-03" },
      {
        command: "npx labfleet deploy my-workshop --ref v2 --force --check",
        note: "which labs would be rebuilt",
      },
    ],
    json: true,
  },
  {
    name: "rollout",
    group: "workshops",
    summary:
      "update the labs to a new git ref safely: canary first, then batches, each lab replaced only once its new one passes lab.health",
    usage: [
      [
        `rollout ${W} --ref REF [--canary N] [--batch N] [--include-claimed] [--check]`,
        "roll REF out and follow it",
      ],
      [`rollout ${W} --status`, "each lab of the latest rollout: old and new ref, state, gate, failure log"],
      [`rollout ${W} --resume`, "go on after a fix (failed labs are tried again)"],
      [`rollout ${W} --abort`, "stop it; new hosts not yet promoted are removed"],
    ],
    options: [
      "file",
      ["ref", "the git branch, tag or commit to roll out"],
      "canary",
      "batch",
      "include-claimed",
      [
        "check",
        "report per lab what the rollout would do (exit 0: nothing, 2: something, 1: an error); change nothing",
      ],
      "status",
      "resume",
      "abort",
      "output",
    ],
    examples: [
      { command: "npx labfleet rollout my-workshop --ref v2 --check" },
      { command: "npx labfleet rollout my-workshop --ref v2 --canary 2 --batch 5", overview: true },
      { command: "npx labfleet rollout my-workshop --status" },
    ],
    json: true,
    notes: [
      "Labs on local and aws hosts get a new host beside the old one; bring-your-own hosts are updated in place and one that fails stays off the board until labfleet retry, or a later rollout (back to the old ref, or on to a fixed one), updates it again.",
      "A lab a student claims while the rollout runs is left as it is without --include-claimed (--status says why); with it, the student is told before and after.",
      "Exit 0 when the rollout completed, 1 when it halted or was aborted, 2 on a usage error (1 with --check).",
    ],
  },
  {
    name: "retry",
    group: "workshops",
    summary: "re-read the selected hosts, then rebuild the ones that failed (or every selected one)",
    usage: [
      [`retry ${W} [--failed-only | --all-selected] [--force]`, "rebuild failed labs"],
      [
        `retry ${W} --check`,
        "which labs a retry would rebuild (from their recorded states); changes nothing",
      ],
    ],
    options: [
      "file",
      ...SELECT,
      "failed-only",
      "all-selected",
      ["force", "rebuild labs students have claimed too (refused without it, naming each lab and student)"],
      "only",
      "skip",
      "check",
      "output",
    ],
    examples: [{ command: "npx labfleet retry my-workshop --host student-07", overview: true }],
    json: true,
  },
  {
    name: "diagnose",
    group: "workshops",
    summary: "collect why labs failed: log tails, progress records and wrapper state, secrets redacted",
    usage: [[`diagnose ${W} [--all-selected]`, "collect why labs failed into NAME.diagnose-<utc>/"]],
    options: [
      "file",
      ...SELECT,
      ["all-selected", "collect from every selected host, not only failed ones"],
      "output",
    ],
    examples: [{ command: "npx labfleet diagnose my-workshop" }],
    json: true,
  },
  {
    name: "access",
    group: "workshops",
    summary: "the access sheet: one row per host, one URL per lab UI; never credentials",
    usage: [[`access ${W}`, "the access sheet: one row per host, one column per UI"]],
    options: ["file", "host", "label", "output"],
    examples: [{ command: "npx labfleet access my-workshop --output json" }],
    json: true,
  },
  {
    name: "hosts",
    group: "workshops",
    summary:
      "the trusted SSH host keys, pinning one obtained out of band, the fleet's SSH public key, one lab's access details",
    usage: [
      [`hosts keys|pubkey|forget-key ${W} [--host ID]`, "trusted host keys; the managed public key"],
      [
        `hosts pin ${W} --host ID (--key LINE | --key-file PATH) [--replace]`,
        "trust a host key obtained out of band",
      ],
      [`hosts credentials ${W} --host ID`, "one lab's access details (URLs, users, passwords)"],
      [
        `hosts drain|disable|enable|remove|rotate-secret ${W} HOST...`,
        "enrolled hosts: no new work, nothing at all, back to work, leave the workshop, a new secret",
      ],
      [
        "hosts join-token NAME [--uses N] [--expires 24h] [--approve auto|manual]",
        "a token machines join with, shown once, and the line to run on them",
      ],
      ["hosts join-tokens NAME", "the join tokens: uses, state, the hosts that joined"],
      ["hosts revoke-token NAME TOKEN-ID", "machines can no longer join with it"],
      ["hosts pending NAME", "the machines that joined and wait for approval"],
      ["hosts approve|reject NAME HOST...", "let pending hosts in, or remove them"],
    ],
    options: ["file", "output"],
    subcommands: [
      {
        name: "keys",
        summary:
          "list the trusted SSH host keys: fingerprints, and how each was obtained (tofu, workshop, pinned, ssm)",
      },
      {
        name: "pin",
        args: "--host ID (--key LINE | --key-file PATH) [--replace]",
        summary:
          "trust a host's key read on the host itself or with ssh-keyscan over a network you trust (what ssh.require_known_host_keys asks for)",
        options: [["host", "the host whose key it is"], "key", "key-file", "replace"],
      },
      { name: "pubkey", summary: "print the public key to install on bring-your-own hosts" },
      {
        name: "credentials",
        args: "--host ID",
        summary:
          "print one lab's access details from $LABFLEET_ACCESS (they hold passwords: mind the screen)",
        options: [["host", "the lab whose access details to print"]],
      },
      {
        name: "forget-key",
        args: "--host ID",
        summary: "forget a pinned key after a host was rebuilt; the next connection pins the new one",
        options: [["host", "the host whose key to forget (repeatable)"]],
      },
      {
        name: "drain",
        args: "HOST...",
        summary: "enrolled hosts: no new work and no new claims; what runs there and its claim stay",
      },
      { name: "disable", args: "HOST...", summary: "enrolled hosts: labfleet sends them nothing at all" },
      { name: "enable", args: "HOST...", summary: "enrolled hosts: undo drain and disable" },
      {
        name: "remove",
        args: "HOST...",
        summary:
          "enrolled hosts: leave the workshop (a claim on one is released); each agent forgets it at its next check-in",
      },
      {
        name: "rotate-secret",
        args: "HOST...",
        summary: "enrolled hosts: each agent gets a new signing secret at its next check-in",
      },
      {
        name: "join-token",
        args: "[--uses N] [--expires 24h] [--approve auto|manual]",
        summary:
          "make a join token (shown once; labfleet keeps its hash) and print the line that joins a machine with it",
        options: ["uses", "expires", "approve"],
      },
      {
        name: "join-tokens",
        summary: "list the workshop's join tokens: uses, expiry, state, the hosts that joined",
      },
      {
        name: "revoke-token",
        args: "TOKEN-ID",
        summary: "revoke a join token: machines presenting it are refused",
      },
      { name: "pending", summary: "list the machines that joined and wait for an instructor's approval" },
      {
        name: "approve",
        args: "HOST...",
        summary: "approve pending hosts: they may be given work from now on",
      },
      {
        name: "reject",
        args: "HOST...",
        summary: "reject pending hosts: each is removed and its signing secret dropped",
      },
    ],
    examples: [
      { command: "npx labfleet hosts keys my-workshop" },
      {
        command:
          'npx labfleet hosts pin my-workshop --host web-1 --key "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA... root@web-1"',
      },
      { command: "npx labfleet hosts pin -f workshop.yaml --host web-1 --key-file web-1.pub" },
      { command: "npx labfleet hosts forget-key my-workshop --host student-04" },
      { command: "npx labfleet hosts credentials my-workshop --host student-01" },
      { command: "npx labfleet hosts drain my-workshop lab-pc-3" },
      {
        command: "npx labfleet hosts join-token my-workshop --uses 40 --expires 8h",
        note: "one token for a room of 40 machines",
      },
      { command: "npx labfleet hosts approve my-workshop lab-pc-2 lab-pc-3" },
    ],
    json: true,
  },
  {
    name: "down",
    group: "workshops",
    summary: "tear the workshop down and follow it, or remove only the labs nobody claimed",
    usage: [
      [`down ${W} [--yes]`, "tear the workshop down, follow it and print its receipt"],
      [`down ${W} --unclaimed N|all [--force]`, "remove labs nobody claimed"],
    ],
    options: [
      "file",
      ["yes", "tear down without asking for the workshop's name (scripts)"],
      "unclaimed",
      ["force", "with --unclaimed: claimed labs too"],
      "output",
    ],
    examples: [
      { command: "npx labfleet down my-workshop", note: "asks for the workshop's name first" },
      { command: "npx labfleet down my-workshop --yes", note: "in a script" },
      { command: "npx labfleet down my-workshop --unclaimed all", note: "the no-shows only" },
    ],
    json: true,
    notes: [
      "On a terminal, down asks for the workshop's name, as the console does: anything else aborts and nothing " +
        "changes. Off a terminal it refuses (exit 1) unless --yes is given.",
      "When the teardown ends, down prints its receipt (see `labfleet receipt`). Exit 0 only when every host " +
        "was torn down and nothing labfleet made is left.",
    ],
  },
  {
    name: "receipt",
    group: "workshops",
    summary:
      "the last teardown's receipt: what was removed, what is left and how to remove it, host-hours and cost",
    usage: [[`receipt ${W}`, "print the receipt of the workshop's last teardown"]],
    options: ["file", "output"],
    examples: [{ command: "npx labfleet receipt my-workshop" }],
    json: true,
    notes: [
      "labfleet looks for what it made and is still there when a teardown ends (EC2: instances, volumes, " +
        "security groups by their ownership tags, the TTL schedule, the secrets parameter; local: host folders " +
        "and processes), and the sweeper looks again: each thing left is listed with why and the command that " +
        "removes it. Cost is host-hours at the built-in on-demand price (local and bring-your-own hosts cost nothing).",
      "Exit 0 when nothing is left, 1 when something is or the check could not finish.",
    ],
  },
  {
    name: "scale",
    group: "workshops",
    summary: "add hosts to a running workshop (local and aws hosts), deploy them and follow the run",
    usage: [
      [`scale ${W} --count N`, "grow the workshop to N hosts: the new ones are provisioned and deployed"],
    ],
    options: ["file", "count", "output"],
    examples: [
      { command: "npx labfleet scale my-workshop --count 50", note: "adds 10 labs to a workshop of 40" },
    ],
    json: true,
    notes: [
      "Only adds: N must be more than the hosts the workshop has; `labfleet down NAME --unclaimed N` removes labs. " +
        "The new count is recorded on the workshop, and a later `up -f` with a lower provider.count keeps it.",
      "Exit 0 only when the run succeeded and every new lab is ready.",
    ],
  },
  {
    name: "extend",
    group: "workshops",
    summary: "move the TTL teardown later (schedule, provider expiry and power-off timers)",
    usage: [[`extend ${W} --hours N`, "move the TTL teardown N hours later (N <= 168)"]],
    options: ["file", "hours", "output"],
    examples: [{ command: "npx labfleet extend my-workshop --hours 2", overview: true }],
    json: true,
  },
  {
    name: "open-access",
    group: "workshops",
    summary: "open the lab UIs to the internet once every lab is ready (aws hosts; never port 22)",
    usage: [
      [
        `open-access ${W} [--close]`,
        "open the lab UIs to the internet once every lab is ready (aws hosts; never port 22); --close shuts them",
      ],
    ],
    options: ["file", ["close", "close them again"], "output"],
    examples: [
      { command: "npx labfleet open-access my-workshop" },
      { command: "npx labfleet open-access my-workshop --close" },
    ],
    json: true,
  },
  {
    name: "portal",
    group: "portal",
    summary: "the instructor's side of the claim portal: window, code, board and claims",
    usage: [
      [`portal open|close|publish ${W}`, "open or close the claim window; publish the board"],
      [`portal info|status ${W}`, "the URL and code; labs and claims"],
      [`portal checks ${W}`, 'students x checks: each student\'s latest "Check my work" results'],
      [`portal slide ${W}`, "the URL, the code and a QR code of the URL, to show the room"],
      [`portal rotate-code ${W}`, "a new code (personal links keep working)"],
      [`portal export ${W} [--csv FILE]`, "claims as CSV, to stdout or a 0600 file"],
      [`portal admin-link ${W}`, "a new secret link to the instructor page"],
      [`portal release LAB | revoke EMAIL | reassign EMAIL LAB | unlock EMAIL  ${W}`, "fix a claim"],
      [`portal swap ${W} EMAIL|LAB`, "move a student off a broken lab, keeping their link"],
      [`portal invite ${W} ROSTER.csv --csv FILE`, "reserve labs; invite links into FILE (0600)"],
      [`portal unblock ${W} (--address A | --all)`, "let an address the rate limits hold back in again"],
    ],
    options: [["file", "the workshop file (only its name is used)"], "output"],
    subcommands: [
      { name: "open", summary: "open the claim window (the first one creates the portal and its code)" },
      { name: "close", summary: "close the claim window" },
      {
        name: "publish",
        summary: "put the board live; claiming opens at portal.open_at_percent, or with open",
      },
      { name: "info", summary: "where students go and the code" },
      { name: "slide", summary: "the URL and the code with a QR code of the URL, to show the room" },
      {
        name: "status",
        summary: "every lab and every claim (with emails), and who the rate limits hold back",
      },
      {
        name: "checks",
        summary:
          'students x checks: each student\'s latest "Check my work" result per check, and how many passed',
      },
      { name: "rotate-code", summary: "a new workshop code; personal links keep working" },
      {
        name: "export",
        args: "[--csv FILE]",
        summary: "claims as CSV (without --csv, the CSV is printed whatever --output says)",
        options: [["csv", "write the claims to FILE (mode 0600) instead of printing them"]],
      },
      {
        name: "admin-link",
        summary: "a new secret link to the instructor page; the previous one stops working",
      },
      { name: "release", args: "LAB", summary: "free a lab; its claimant's link stops working" },
      { name: "revoke", args: "EMAIL", summary: "free the lab claimed with this email" },
      {
        name: "reassign",
        args: "EMAIL LAB",
        summary: "move a student to another lab; prints their new link",
      },
      { name: "unlock", args: "EMAIL", summary: "unlock an email after five wrong PINs" },
      {
        name: "swap",
        args: "EMAIL|LAB",
        summary:
          "move a student to a free ready lab (a spare first) keeping their personal link; the old lab is rebuilt",
      },
      {
        name: "unqueue",
        args: "EMAIL",
        summary: "take a student out of the waiting line; the others move up",
      },
      {
        name: "invite",
        args: "ROSTER.csv --csv FILE",
        summary:
          'reserve a lab for each "name,email[,host_id]" line; their links go to FILE, never the screen',
        options: [["csv", "where the invite links go (mode 0600)"]],
        complete: "file",
      },
      {
        name: "unblock",
        args: "(--address A | --all)",
        summary: "let a held-back address (or every one) in again: its failure counts start from zero",
        options: [
          ["address", "the held-back address, as portal status shows it"],
          ["all", "every held-back address"],
        ],
      },
    ],
    examples: [
      { command: "npx labfleet portal open my-workshop", overview: true },
      { command: "npx labfleet portal slide my-workshop", note: "the URL, code and QR code for your slide" },
      { command: "npx labfleet portal export my-workshop --csv claims.csv", overview: true },
      { command: "npx labfleet portal invite my-workshop roster.csv --csv invites.csv" },
      {
        command: "npx labfleet portal unblock my-workshop --address 198.51.100.7",
        note: "a room behind one address is held back: let it in",
      },
    ],
    json: true,
    notes: ["The workshop comes after the subcommand: its name, or -f with the file it was submitted from."],
  },
  {
    name: "login",
    group: "auth",
    summary: "sign the CLI in through the browser (or store a pasted API token)",
    usage: [
      ["login [--url URL]", "sign the CLI in through the browser; the token goes to ~/.labfleet/credentials"],
      ["login --url URL --token", "store a pasted API token (read from stdin) instead"],
    ],
    options: ["url", "token", "output"],
    examples: [
      { command: "npx labfleet login --url https://labfleet.example.org", overview: true },
      { command: 'echo "$TOKEN" | npx labfleet login --url https://labfleet.example.org --token' },
    ],
    json: true,
    notes: [
      "With --output json, the page and code to confirm go to stderr and stdout gets one document: " +
        "the URL, who signed in and where the token is (never the token itself).",
    ],
  },
  {
    name: "logout",
    group: "auth",
    summary: "revoke the stored API token and remove the credentials file",
    usage: [["logout", "revoke the stored token and remove the credentials"]],
    options: ["output"],
    examples: [{ command: "npx labfleet logout" }],
    json: true,
  },
  {
    name: "tokens",
    group: "auth",
    summary: "list, create and revoke API tokens",
    usage: [
      ["tokens list | create NAME [--expires-days N] | revoke ID", "API tokens for the CLI and scripts"],
    ],
    options: ["output"],
    subcommands: [
      {
        name: "list",
        summary: "every API token: owner, created, last used, expiry (never the token itself)",
      },
      {
        name: "create",
        args: "NAME [--expires-days N]",
        summary: "a new API token, shown this once",
        options: ["expires-days"],
      },
      { name: "revoke", args: "ID", summary: "revoke a token; it stops working at once" },
    ],
    examples: [
      { command: "npx labfleet tokens list" },
      { command: "npx labfleet tokens create ci --expires-days 30" },
    ],
    json: true,
  },
  {
    name: "help",
    group: "shell",
    summary: "a command's usage, options and examples",
    usage: [["help [COMMAND]", "a command's usage, options and examples (also: COMMAND --help)"]],
    options: ["output"],
    complete: "commands",
    examples: [
      { command: "npx labfleet help up", note: "the same as: npx labfleet up --help" },
      { command: "npx labfleet help portal --output json", note: "the same help as data" },
    ],
    json: true,
  },
  {
    name: "completion",
    group: "shell",
    summary: "print a shell completion script for bash or zsh",
    usage: [["completion bash|zsh", "print a completion script for bash or zsh"]],
    options: ["output"],
    complete: ["bash", "zsh"],
    examples: [
      {
        command: "source <(npx labfleet completion bash)",
        note: "in ~/.bashrc, for this and every new shell",
      },
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a zsh parameter, not a template
      { command: 'npx labfleet completion zsh > "${fpath[1]}/_labfleet"', note: "then start a new zsh" },
    ],
    json: true,
  },
];

/** The options every command also takes. */
const ALWAYS: readonly CommandOption[] = ["help"];

export const EXIT_CODES =
  "Exit codes: 0 success; 1 a lab, host or run failed, or the file is invalid; 2 bad usage; 3 no runtime reachable.";

export function findCommand(name: string): CommandSpec | undefined {
  return COMMANDS.find((c) => c.name === name);
}

/** The options a command (and one of its subcommands, or all of them) takes, with their wording. */
export function commandOptions(
  cmd: CommandSpec,
  sub?: SubcommandSpec | "all",
): { name: OptionName; spec: OptionSpec; help: string }[] {
  const subs = sub === "all" ? (cmd.subcommands ?? []) : sub ? [sub] : [];
  const list = [...cmd.options, ...subs.flatMap((s) => s.options ?? []), ...ALWAYS];
  const seen = new Set<OptionName>();
  const result: { name: OptionName; spec: OptionSpec; help: string }[] = [];
  for (const o of list) {
    const [name, help] = typeof o === "string" ? [o, undefined] : o;
    if (seen.has(name)) continue;
    seen.add(name);
    const spec: OptionSpec = OPTIONS[name];
    result.push({ name, spec, help: help ?? spec.help });
  }
  return result;
}

/** "-f, --file FILE" */
export function optionLabel(name: OptionName): string {
  const spec: OptionSpec = OPTIONS[name];
  return `${spec.short ? `-${spec.short}, ` : ""}--${name}${spec.value ? ` ${spec.value}` : ""}`;
}

const LINE = 110;

/** Words of text on lines of at most `width` characters (a longer word gets a line of its own). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const w of text.split(" ")) {
    if (line && line.length + 1 + w.length > width) {
      lines.push(line);
      line = w;
    } else line = line ? `${line} ${w}` : w;
  }
  return [...lines, line];
}

/** Two columns: the right one starts at `width` and wraps; a left cell too wide for it gets a line of its own. */
function columns(
  rows: readonly (readonly [string, string])[],
  indent: number,
  width: number,
  line = LINE,
): string {
  const pad = " ".repeat(indent);
  const hang = `${pad}${" ".repeat(width)}`;
  return rows
    .map(([left, right]) => {
      const [first = "", ...rest] = wrap(right, Math.max(30, line - indent - width));
      const head =
        left.length + 2 > width ? `${pad}${left}\n${hang}${first}` : `${pad}${left.padEnd(width)}${first}`;
      return [head, ...rest.map((l) => `${hang}${l}`)].join("\n");
    })
    .join("\n");
}

/** `labfleet --help`: every command, the selection and output options, examples and exit codes. */
export function overview(): string {
  const groups = (Object.keys(GROUPS) as Group[]).map((g) => {
    const rows = COMMANDS.filter((c) => c.group === g).flatMap((c) =>
      c.usage.map(([syn, what]) => [`labfleet ${syn}`, what] as const),
    );
    return `${GROUPS[g]}\n${columns(rows, 2, 62, 120)}`;
  });
  const general = (["host", "label", "jobs", "output"] as const).map(
    (n) => [optionLabel(n), OPTIONS[n].help] as const,
  );
  const examples = COMMANDS.flatMap((c) => c.examples.filter((e) => e.overview).map((e) => `  ${e.command}`));
  return `labfleet: run hands-on workshop lab fleets

${groups.join("\n\n")}

Selection and output (where they apply):
${columns(general, 2, 22)}

Examples:
${examples.join("\n")}

\`labfleet help COMMAND\` (or \`labfleet COMMAND --help\`) shows a command's options and examples.
${EXIT_CODES}
On the machine running \`labfleet dev\`, the CLI finds it through .labfleet/runtime.json.
`;
}

/** `labfleet help CMD`: its usage, subcommands, options, examples and exit codes. */
export function commandHelp(cmd: CommandSpec): string {
  const parts = [`labfleet ${cmd.name}: ${cmd.summary}`];
  // With subcommands listed below, the usage lines need no description of their own.
  parts.push(
    `Usage:\n${cmd.usage
      .map(([syn, what]) =>
        cmd.subcommands
          ? `  labfleet ${syn}`
          : [`  labfleet ${syn}`, ...wrap(what, LINE - 6).map((l) => `      ${l}`)].join("\n"),
      )
      .join("\n")}`,
  );
  if (cmd.subcommands?.length) {
    parts.push(
      `Subcommands:\n${columns(
        cmd.subcommands.map((s) => [`${s.name}${s.args ? ` ${s.args}` : ""}`, s.summary] as const),
        2,
        26,
      )}`,
    );
  }
  const noJson = cmd.subcommands?.filter((s) => s.json === false).map((s) => s.name) ?? [];
  const opts = commandOptions(cmd, "all").map(
    ({ name, help }) =>
      [
        optionLabel(name),
        name === "output" && noJson.length ? `${help} (not for ${noJson.join(", ")})` : help,
      ] as const,
  );
  parts.push(`Options:\n${columns(opts, 2, 24)}`);
  parts.push(
    `Examples:\n${cmd.examples.map((e) => `  ${e.command}${e.note ? `\n      ${e.note}` : ""}`).join("\n")}`,
  );
  parts.push([...(cmd.notes ?? []), EXIT_CODES].join("\n"));
  return `${parts.join("\n\n")}\n`;
}

/** The table as data, for `labfleet help --output json`. */
export function commandDocument(cmd: CommandSpec) {
  return {
    name: cmd.name,
    summary: cmd.summary,
    usage: cmd.usage.map(([synopsis, description]) => ({ synopsis: `labfleet ${synopsis}`, description })),
    subcommands: (cmd.subcommands ?? []).map((s) => ({
      name: s.name,
      args: s.args ?? null,
      summary: s.summary,
      json: s.json ?? cmd.json,
    })),
    options: commandOptions(cmd, "all").map(({ name, spec, help }) => ({
      name: `--${name}`,
      short: spec.short ? `-${spec.short}` : null,
      value: spec.value ?? null,
      multiple: spec.multiple ?? false,
      help,
    })),
    examples: cmd.examples.map((e) => ({ command: e.command, note: e.note ?? null })),
    json: cmd.json,
  };
}

/** Edit distance, for "did you mean". */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      row.push(Math.min((prev[j] ?? 0) + 1, (row[j - 1] ?? 0) + 1, (prev[j - 1] ?? 0) + cost));
    }
    prev = row;
  }
  return prev[b.length] ?? 0;
}

/** The candidate closest to a mistyped word, if one is close enough to be what was meant. */
export function closest(word: string, candidates: readonly string[]): string | undefined {
  const w = word.toLowerCase();
  if (w.length >= 2) {
    const prefixed = candidates.filter((c) => c.startsWith(w));
    if (prefixed.length === 1) return prefixed[0];
  }
  // The fewest edits; between equals, the longest shared start ("tokn": tokens, not down).
  const shared = (c: string) => [...w].findIndex((ch, i) => c[i] !== ch);
  let best: { name: string; d: number; p: number } | undefined;
  for (const c of candidates) {
    const d = distance(w, c);
    const p = shared(c) < 0 ? w.length : shared(c);
    if (!best || d < best.d || (d === best.d && p > best.p)) best = { name: c, d, p };
  }
  return best && best.d <= Math.max(2, Math.floor(w.length / 3)) ? best.name : undefined;
}

/** The command, or a usage error (exit 2) naming the closest one. */
export function knownCommand(name: string): CommandSpec {
  const cmd = findCommand(name);
  if (cmd) return cmd;
  const near = closest(
    name,
    COMMANDS.map((c) => c.name),
  );
  throw new CliError(
    `unknown command ${name}${near ? `. Did you mean \`labfleet ${near}\`?` : ""}\n` +
      "`labfleet --help` lists every command.",
    2,
  );
}

/**
 * `labfleet help [CMD [SUB]]` (strict: an unknown CMD or SUB is a usage error) and `labfleet CMD ... --help`
 * (the words after CMD are its own arguments). Returns the exit code.
 */
export function showHelp(words: readonly string[], json: boolean, out: Output, strict: boolean): number {
  const print = (doc: unknown) => out.write(jsonText(doc));
  const [name, sub] = words;
  if (!name) {
    if (json)
      print({
        commands: COMMANDS.map(commandDocument),
        exitCodes: {
          0: "success",
          1: "a lab, host or run failed, or the file is invalid",
          2: "bad usage",
          3: "no runtime reachable",
        },
      });
    else out.write(overview());
    return 0;
  }
  const cmd = knownCommand(name);
  if (strict && sub !== undefined && cmd.subcommands) {
    const names = cmd.subcommands.map((s) => s.name);
    if (!names.includes(sub)) {
      const near = closest(sub, names);
      throw new CliError(
        `labfleet ${cmd.name} has no subcommand ${sub}${near ? `. Did you mean \`labfleet ${cmd.name} ${near}\`?` : ""}\n` +
          `its subcommands: ${names.join(", ")}`,
        2,
      );
    }
  }
  if (json) print(commandDocument(cmd));
  else out.write(commandHelp(cmd));
  return 0;
}
