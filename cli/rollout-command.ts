import { type CheckReport, checkExitCode } from "../shared/fleet/check.ts";
import type { RolloutView } from "../shared/fleet/rollout.ts";
import { ApiClient, CliError, resolveTarget } from "./client.ts";
import { type Args, jsonOutput, workshopName } from "./main.ts";
import { block, clean, jsonText, type Output, paint, when, writeTable } from "./render.ts";
import { writeCheck } from "./stage-commands.ts";

/**
 * `labfleet rollout NAME --ref REF [--canary N] [--batch N] [--include-claimed] [--check]`, and `--status`,
 * `--resume`, `--abort` of the workshop's latest rollout. A started or resumed rollout is followed until it
 * ends. Exit 0 when it completed, 1 when it halted or was aborted, 2 on a usage error; `--check` prints what
 * up, deploy and retry `--check` print and exits as they do: 0 when nothing would change, 2 when something
 * would, 1 on any error (usage errors too: cli/main.ts).
 */
export async function cmdRollout(args: Args, out: Output): Promise<number> {
  const name = workshopName(args);
  const json = jsonOutput(args);
  const v = args.values;
  const modes = [v.status, v.resume, v.abort, v.check].filter(Boolean).length;
  if (modes > 1) throw new CliError("rollout takes one of --status, --resume, --abort and --check", 2);
  if (!v.status && !v.resume && !v.abort && !v.ref)
    throw new CliError("rollout needs --ref REF (the git branch, tag or commit to roll out)", 2);
  const client = new ApiClient(resolveTarget());
  const path = `/workshops/${encodeURIComponent(name)}/rollout`;
  if (v.status) {
    const { rollout } = await client.call<{ rollout: RolloutView }>("GET", path);
    return write(rollout, json, out);
  }
  if (v.abort) {
    const { rollout } = await client.call<{ rollout: RolloutView }>("POST", `${path}/abort`);
    return write(rollout, json, out);
  }
  let started: RolloutView;
  if (v.resume) {
    started = (await client.call<{ rollout: RolloutView }>("POST", `${path}/resume`)).rollout;
  } else {
    if (!v.ref) throw new CliError("rollout needs --ref REF (the git branch, tag or commit to roll out)", 2);
    const body = {
      ref: v.ref,
      ...count(v.canary, "--canary", "canary"),
      ...count(v.batch, "--batch", "batch"),
      ...(v["include-claimed"] ? { includeClaimed: true } : {}),
    };
    if (v.check) {
      const report = await client.call<CheckReport>("POST", `${path}/check`, body);
      if (json) out.write(jsonText(report));
      else writeCheck(report, out);
      return checkExitCode(report);
    }
    started = (await client.call<{ rollout: RolloutView }>("POST", path, body)).rollout;
  }
  if (!json)
    out.write(`rollout of ${clean(name)} to ${clean(started.ref)} started (run ${clean(started.runId)})\n`);
  const done = await followRollout(client, path, started.id, json ? undefined : out);
  return write(done, json, out);
}

function count(text: string | undefined, flag: string, key: string) {
  if (text === undefined) return {};
  const n = Number(text);
  if (!/^\d+$/.test(text.trim()) || n < 1 || n > 1000)
    throw new CliError(`${flag} expects a whole number from 1 to 1000, got ${text}`, 2);
  return { [key]: n };
}

/** Polls the rollout until it is no longer running; prints each lab's state as it changes. */
async function followRollout(client: ApiClient, path: string, id: string, out: Output | undefined) {
  const seen = new Map<string, string>();
  for (;;) {
    const { rollout } = await client.call<{ rollout: RolloutView }>("GET", path);
    if (rollout.id !== id) throw new CliError(`another rollout (${rollout.id}) started meanwhile`, 1);
    for (const h of rollout.hosts) {
      if (out && seen.get(h.hostId) !== h.state && h.state !== "pending")
        out.write(`  ${clean(h.hostId)} ${paint(out, stateColor(h.state), h.state)}\n`);
      seen.set(h.hostId, h.state);
    }
    if (rollout.state !== "running") return rollout;
    await new Promise((r) => setTimeout(r, 1000));
  }
}

function stateColor(state: string): string {
  if (state === "promoted" || state === "updated") return "ready";
  if (state === "failed") return "failed";
  if (state === "building") return "deploying";
  if (state === "skipped") return "pending";
  return state;
}

function write(r: RolloutView, json: boolean, out: Output): number {
  const code = r.state === "completed" || r.state === "running" ? 0 : 1;
  if (json) {
    out.write(jsonText({ rollout: r }));
    return code;
  }
  const from = r.fromRef ? ` from ${clean(r.fromRef)}` : "";
  out.write(
    `rollout ${clean(r.id)} of ${clean(r.workshop)} to ${clean(r.ref)}${from}: ${paint(out, r.state === "completed" ? "ready" : r.state === "running" ? "deploying" : "failed", r.state)} (canary ${r.canary}, batch ${r.batch}${r.includeClaimed ? ", claimed labs included" : ""}; started ${when(r.createdAt)}${r.by ? ` by ${clean(r.by)}` : ""})\n`,
  );
  writeTable(
    [
      ["LAB", "BATCH", "HOW", "OLD REF", "NEW REF", "STATE", "GATE", "STUDENT"],
      ...r.hosts.map((h) => [
        h.hostId,
        h.batch === 0 ? "canary" : String(h.batch),
        h.mode === "replace" ? "replace" : h.needsAttention ? "in place (needs attention)" : "in place",
        h.fromRef ?? "(default)",
        h.toRef,
        paint(out, stateColor(h.state), h.state),
        h.gate ?? "",
        h.student ?? "",
      ]),
    ],
    out,
  );
  for (const h of r.hosts.filter((x) => x.reason))
    out.write(`${clean(h.hostId)}: left alone: ${block(h.reason)}\n`);
  for (const h of r.hosts.filter((x) => x.error)) {
    out.write(`${clean(h.hostId)}: ${block(h.error)}\n`);
    if (h.logTail)
      out.write(
        `  log:\n${h.logTail
          .split("\n")
          .map((l) => `    ${clean(l)}`)
          .join("\n")}\n`,
      );
  }
  if (r.error) out.write(`${block(r.error)}\n`);
  return code;
}
