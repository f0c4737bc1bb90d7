import type { Provider } from "../providers/types.ts";
import type { ExecResult, Transport } from "../transports/types.ts";
import type { Workshop } from "../workshop/schema.ts";
import {
  judge,
  type LabProbe,
  LabStepError,
  lastLines,
  probeLab,
  readAccess,
  runHealth,
  type StartFiles,
  syncAndStartLab,
} from "./lab.ts";
import { secretsForStart } from "./secrets.ts";

/**
 * The two halves of building a lab on a host, shared by `up`'s deploy and poll (shared/fleet/up.ts) and a
 * rollout's new lab (shared/fleet/rollout-steps.ts): starting its setup, and judging it from the host's records
 * and lab.health. What each caller records about the outcome stays with it.
 */

/** Waits until the host has finished booting, when its provider says how (see Provider.bootWait). */
export async function waitForBoot(t: Transport, provider: Provider, what = "the host"): Promise<void> {
  if (!provider.bootWait) return;
  const r = await t.exec(provider.bootWait.command, {
    timeoutMs: provider.bootWait.timeoutMs,
    step: "wait for the first boot",
  });
  if (r.exitCode !== 0) throw new LabStepError(`${what} did not finish booting: ${lastLines(r)}`);
}

export interface SetupStart {
  hostId: string;
  runId: string;
  /** The git ref to build at (undefined: lab.ref, else the default branch). */
  ref: string | undefined;
  /** A setup is running, or a killed wrapper left something running: it is stopped first. */
  stop: boolean;
  /** How the boot-wait error names the host. */
  what?: string;
  /**
   * Runs once the host has booted, before any secret reaches it (`up` pins its keys and records the deploy), and
   * answers the host's push settings (StartFiles.push); none leaves them as they are.
   */
  beforeSecrets?: () => Promise<StartFiles["push"] | undefined>;
}

/**
 * Starts a lab's setup on a host: the host's first boot waited for, then one command that stops what an earlier
 * setup left running, puts the lab source at the ref, writes the operator secrets and push settings and starts
 * the detached setup (syncAndStartLab, shared/fleet/lab.ts).
 */
export async function startSetup(
  t: Transport,
  spec: Workshop,
  provider: Provider,
  s: SetupStart,
): Promise<void> {
  await waitForBoot(t, provider, s.what);
  const push = await s.beforeSecrets?.();
  const secrets = await secretsForStart(t, spec, provider.transport);
  await syncAndStartLab(t, spec, provider.transport, {
    ref: s.ref,
    stopFirst: s.stop,
    hostId: s.hostId,
    runId: s.runId,
    files: { ...(push ? { push } : {}), ...(secrets !== undefined ? { secrets } : {}) },
  });
}

/** Whether a probed setup is to be stopped before a new one starts: it runs, or a killed wrapper left it. */
export function leftRunning(probe: LabProbe | undefined): boolean {
  if (!probe) return false;
  const state = judge(probe).state;
  return state === "running" || state === "failed";
}

/** What a lab is, from its records and then lab.health and its access file. */
export type LabJudgement =
  | { state: "running"; probe: LabProbe }
  | { state: "not_started"; probe: LabProbe }
  /** The setup failed or its wrapper died (the reason is the setup's). */
  | { state: "failed"; probe: LabProbe; reason: string }
  /** The setup exited 0 and lab.health fails: the caller decides whether to wait. */
  | { state: "unhealthy"; probe: LabProbe; health: ExecResult }
  /** lab.health passes, but the access file cannot be read as one (LabStepError's reason). */
  | { state: "bad_access"; probe: LabProbe; reason: string }
  | { state: "ready"; probe: LabProbe; access: string | undefined };

/**
 * Judges the lab on a host: its setup's records first; once the setup has exited 0, lab.health, then the access
 * file. A host that cannot be read throws (an unreachable host is not a failed lab: the caller polls again).
 */
export async function judgeLab(t: Transport, spec: Workshop, hostId: string): Promise<LabJudgement> {
  const probe = await probeLab(t, spec.name);
  const verdict = judge(probe);
  if (verdict.state === "running" || verdict.state === "not_started") return { state: verdict.state, probe };
  if (verdict.state === "failed") return { state: "failed", probe, reason: verdict.reason };
  const health = await runHealth(t, spec, hostId);
  if (health.exitCode !== 0) return { state: "unhealthy", probe, health };
  try {
    return { state: "ready", probe, access: await readAccess(t, spec.name) };
  } catch (err) {
    if (!(err instanceof LabStepError)) throw err;
    return { state: "bad_access", probe, reason: err.message };
  }
}
