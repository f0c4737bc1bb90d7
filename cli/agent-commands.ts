import type { HostControl, HostControlResult } from "../shared/agent/host-controls.ts";
import { ApiClient, CliError, resolveTarget } from "./client.ts";
import { type Args, workshopName } from "./main.ts";
import { clean, jsonText, type Output } from "./render.ts";

/** `labfleet hosts drain|disable|enable|remove|rotate-secret NAME HOST...`: an instructor's controls of enrolled hosts. */
export const AGENT_HOST_COMMANDS: ReadonlySet<string> = new Set([
  "drain",
  "disable",
  "enable",
  "remove",
  "rotate-secret",
]);

const SAID: Record<HostControl, string> = {
  drain: "drained: no new work and no new claims",
  disable: "disabled: labfleet sends it nothing",
  enable: "enabled: it gets work and claims again",
  remove: "removed: a claim on its lab is released, and its agent forgets the workshop at its next check-in",
  "rotate-secret": "its agent gets a new signing secret at its next check-in",
};

export async function cmdAgentHosts(args: Args, out: Output): Promise<number> {
  const action = args.positionals[1] as HostControl;
  const name = workshopName({ ...args, positionals: ["hosts", ...args.positionals.slice(2)] });
  const hosts = args.values.file ? args.positionals.slice(2) : args.positionals.slice(3);
  if (hosts.length === 0)
    throw new CliError(`usage: labfleet hosts ${action} (-f workshop.yaml | NAME) HOST...`, 2);
  const client = new ApiClient(resolveTarget());
  const done: HostControlResult[] = [];
  for (const host of hosts) {
    const r = await client.call<HostControlResult>(
      "POST",
      `/workshops/${encodeURIComponent(name)}/hosts/${encodeURIComponent(host)}/control`,
      { action },
    );
    done.push(r);
    if (args.values.output !== "json") out.write(`${clean(r.hostId)} ${SAID[action]}\n`);
  }
  if (args.values.output === "json") out.write(jsonText({ hosts: done }));
  return 0;
}
