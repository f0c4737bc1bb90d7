import { isConditionalFailure } from "../fleet/runs.ts";
import { isoNow } from "../runtime/clock.ts";
import { useDeps } from "../runtime/deps.ts";
import { issueHostSecret } from "./host-secrets.ts";

/** What a machine reports about itself when it joins (the agent gathers it; every field optional). */
export interface HostFacts {
  hostname?: string;
  os?: string;
  arch?: string;
  cpus?: number;
  memoryMb?: number;
  diskGb?: number;
  kvm?: boolean;
  nested?: boolean;
  commands?: string[];
  agentVersion?: string;
}

/** A host id from a machine's name: lowercase letters, digits and dashes, at most 40 characters. */
export function hostIdFrom(name: string | undefined): string {
  const slug = (name ?? "")
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 40)
    .replace(/-+$/g, "");
  return slug || "host";
}

/**
 * Records a machine that joined the workshop as one of its hosts (provider `enrolled`) and gives it its signing
 * secret, returned once for the agent to keep. The host id comes from the machine's name, made unique in the
 * workshop (`lab-pc`, `lab-pc-2`, ...) by a conditional create, so two machines joining at once never share one.
 */
export async function recordEnrolledHost(input: {
  workshop: string;
  name?: string;
  facts: HostFacts;
  enrollment: "pending" | "approved";
  labels?: Record<string, string>;
}): Promise<{ hostId: string; secret: string }> {
  const { store, clock } = useDeps();
  const base = hostIdFrom(input.name ?? input.facts.hostname);
  for (let n = 1; n <= 1000; n++) {
    const hostId = n === 1 ? base : `${base}-${n}`;
    try {
      await store.host
        .create({
          workshop: input.workshop,
          hostId,
          state: "pending",
          provider: "enrolled",
          enrollment: input.enrollment,
          reachable: "online",
          lastSeenAt: isoNow(clock),
          facts: input.facts,
          ...(input.labels ? { labels: input.labels } : {}),
          createdAt: isoNow(clock),
          updatedAt: isoNow(clock),
        })
        .go();
    } catch (err) {
      if (isConditionalFailure(err)) continue;
      throw err;
    }
    return { hostId, secret: await issueHostSecret(input.workshop, hostId) };
  }
  throw new Error(`no free host id for ${base} in ${input.workshop}`);
}
