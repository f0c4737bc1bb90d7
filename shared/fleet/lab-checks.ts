import { useDeps } from "../runtime/deps.ts";
import { VisibleError } from "../runtime/errors.ts";
import { shq, type Transport } from "../transports/types.ts";
import type { Check, Workshop } from "../workshop/schema.ts";
import { transportFor } from "./hosts.ts";
import { LabStepError, labDir, labEnv, stateDir } from "./lab.ts";
import { secretRedactor } from "./secrets.ts";
import { loadWorkshop } from "./up.ts";

/**
 * "Check my work", host side: a lab's `lab.checks` run on one host, in one command. Every check runs in the lab
 * folder with the lab contract's variables, as the account that runs the lab's setup and health check (the
 * login user over SSH, you on a local host, root on an EC2 host reached through SSM), at the same time as the
 * others, each under `timeout` (its `timeout_seconds`, its whole process group killed after it). What a check
 * printed (stdout and stderr together) is kept on the host only while the command runs; its last
 * CHECK_OUTPUT_BYTES come back, base64-encoded, so 20 checks stay under what every transport returns whole.
 */

/** The tail of a check's output that comes back (and is kept, redacted). */
export const CHECK_OUTPUT_BYTES = 600;
/** The command's own timeout, beyond the slowest check's: the time to start, collect and answer. */
const CHECK_COMMAND_SLACK_MS = 8_000;
const END = "@@end";

export interface CheckOutcome {
  name: string;
  passed: boolean;
  timedOut: boolean;
  exitCode: number;
  /** The last CHECK_OUTPUT_BYTES of what it printed, operator secrets redacted, control characters removed. */
  output: string;
}

/** The one command that runs every check of the lab (exported for the unit tests). */
export function checksScript(spec: Workshop, dir: string, hostId: string): string {
  const checks = spec.lab.checks;
  const env = labEnv(spec, hostId);
  const runs = checks.map(
    (c, i) =>
      `( cd ${dir} && ${env} timeout -k 2 ${c.timeout_seconds} bash -c ${shq(c.run)} < /dev/null > "$t/${i}" 2>&1; echo $? > "$t/${i}.rc" ) &`,
  );
  const collect = checks.map(
    (_, i) =>
      `echo "@@check ${i} $(head -c 8 "$t/${i}.rc" 2>/dev/null | tr -cd '0-9')"; tail -c ${CHECK_OUTPUT_BYTES} "$t/${i}" 2>/dev/null | base64 -w 0; echo`,
  );
  return `t=${stateDir(spec.name)}/checks.$$
rm -rf "$t"; mkdir -p "$t" && chmod 700 "$t" || exit 90
trap 'rm -rf "$t"' EXIT
${runs.join("\n")}
wait
${collect.join("\n")}
echo ${END}
`;
}

/** What checksScript printed, as one outcome per check (in the order of `checks`). */
export function parseChecks(
  checks: Check[],
  stdout: string,
  redact: (text: string) => string,
): CheckOutcome[] {
  if (!stdout.includes(`\n${END}`) && !stdout.startsWith(END)) {
    throw new LabStepError("the checks' results came back cut off (their end line is missing)");
  }
  const found = new Map<number, { rc: number | undefined; output: string }>();
  const lines = stdout.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const m = /^@@check (\d+) ?(\d*)$/.exec(lines[i] ?? "");
    if (!m) continue;
    const text = Buffer.from((lines[i + 1] ?? "").trim(), "base64").toString("utf8");
    found.set(Number(m[1]), { rc: m[2] === "" ? undefined : Number(m[2]), output: text });
  }
  return checks.map((c, i) => {
    const r = found.get(i);
    const exitCode = r?.rc ?? -1;
    return {
      name: c.name,
      passed: exitCode === 0,
      // timeout(1) answers 124 when the check ran out of time (137 when it had to kill it).
      timedOut: exitCode === 124 || exitCode === 137,
      exitCode,
      output: cleanOutput(redact(r?.output ?? "")),
    };
  });
}

/** Control characters (terminal escapes among them) out, lines kept. */
function cleanOutput(text: string): string {
  return (
    text
      // biome-ignore lint/suspicious/noControlCharactersInRegex: removing them is the point
      .replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, "")
      // biome-ignore lint/suspicious/noControlCharactersInRegex: removing them is the point
      .replace(/[\x00-\x08\x0b-\x1f\x7f]/g, "")
      .trimEnd()
  );
}

/** Runs the lab's checks on a host through a transport; `deadline` (epoch ms) bounds the wait. */
export async function runChecksOn(
  t: Transport,
  spec: Workshop,
  hostId: string,
  redact: (text: string) => string,
  deadline?: number,
): Promise<CheckOutcome[]> {
  const checks = spec.lab.checks;
  if (checks.length === 0) return [];
  const slowest = Math.max(...checks.map((c) => c.timeout_seconds)) * 1000;
  const r = await t.exec(checksScript(spec, labDir(spec, t), hostId), {
    timeoutMs: slowest + CHECK_COMMAND_SLACK_MS,
    step: "check the student's work",
    ...(deadline !== undefined ? { deadline } : {}),
  });
  if (r.timedOut) throw new LabStepError("the lab did not answer in time");
  if (r.exitCode !== 0 || r.truncated) {
    throw new LabStepError(
      `running the checks failed: exit code ${r.exitCode}${r.truncated ? " (cut)" : ""}`,
    );
  }
  return parseChecks(checks, r.stdout, redact);
}

/**
 * Runs a workshop's checks on one of its hosts (the local runtime and the cloud's RunChecks function). A host
 * that cannot be reached, or that answers nonsense, is a `host` error that names no secret.
 */
export async function runLabChecks(
  workshop: string,
  hostId: string,
  opts: { deadline?: number } = {},
): Promise<CheckOutcome[]> {
  const { spec, provider } = await loadWorkshop(workshop);
  if (spec.lab.checks.length === 0) return [];
  const host = (await useDeps().store.host.get({ workshop, hostId }).go()).data;
  if (!host) throw new VisibleError("not_found", "host.not_found", `no host ${hostId} in ${workshop}`);
  const redact = await secretRedactor(spec);
  const t = transportFor(spec, provider, host);
  try {
    return await runChecksOn(t, spec, hostId, redact, opts.deadline);
  } catch (err) {
    if (err instanceof VisibleError) throw err;
    const why = err instanceof LabStepError ? err.message : "the lab could not be reached";
    throw new VisibleError("host", "checks.host_failed", `Checking your work did not work: ${redact(why)}.`);
  } finally {
    await t.close?.();
  }
}
