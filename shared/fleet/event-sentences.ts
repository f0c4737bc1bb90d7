import { formatDuration, formatWhen } from "../runtime/time-format.ts";
import type { EventView } from "./events.ts";

/**
 * An event as a short sentence that says what happened, who did it (`detail.by`: an instructor's name,
 * "labfleet" for what it did by itself, "student" for the portal's visitors) and to whose lab (`detail.student`,
 * the display name the student gave). The console's activity list and `labfleet events` print the same
 * sentences. Every detail field is optional: a missing one leaves a shorter sentence.
 *
 * A sentence is made of parts: text, and times (`{ time: ISO }`) that each reader shows its own way. The
 * console renders a time as a `<time>` element the browser rewrites in the viewer's zone (web/time.tsx);
 * `eventSentence` writes it as the CLI does ("12:43 (in 5 h 58 min)", shared/runtime/time-format.ts).
 */

/** A piece of a sentence: text, or a time to show in the reader's zone. */
export type SentencePart = string | { time: string };

/** "45 s", "3 min 05 s"; undefined when unknown. */
const duration = (seconds: number | undefined): string | undefined => formatDuration(seconds) || undefined;

const text = (v: unknown): string | undefined =>
  typeof v === "string" && v.trim() !== "" ? v.trim() : undefined;

/** One line, at most `max` characters: a long setup error stays readable in a list. */
function clip(s: string, max = 240): string {
  const line = s.replace(/\s+/g, " ");
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

const KIND_WORD: Record<string, string> = {
  up: "Up",
  deploy: "Deploy",
  retry: "Retry",
  provision: "Provision",
  scale: "Scale up",
  teardown: "Teardown",
  rollout: "Rollout",
};
const runWord = (kind: unknown) => KIND_WORD[text(kind) ?? ""] ?? "A run";
/** What `by` started: "up", "a deploy", "the teardown". */
const STARTED: Record<string, string> = {
  up: "up",
  deploy: "a deploy",
  retry: "a retry",
  provision: "provisioning",
  scale: "a scale-up",
  teardown: "the teardown",
  rollout: "a rollout",
};

/** What a type is called in the list's Event column. */
export function eventLabel(type: string): string {
  return type.replace(".", " ").replace(/_/g, " ");
}

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/**
 * The sentence as plain text, its times written by `time` (by default the CLI's human format in this
 * machine's zone: "12:43 (in 5 h 58 min)").
 */
export function eventSentence(
  e: EventView,
  time: (iso: string) => string = (iso) => formatWhen(iso),
): string {
  return eventParts(e)
    .map((p) => (typeof p === "string" ? p : time(p.time)))
    .join("");
}

/** The sentence as parts: text, and the times in it. */
export function eventParts(e: EventView): SentencePart[] {
  const s = sentence(e);
  return typeof s === "string" ? [s] : s;
}

function sentence(e: EventView): string | SentencePart[] {
  const d = e.detail;
  const host = e.hostId ?? "a host";
  const by = clip(text(d.by) ?? "Someone", 60);
  const byStudent = d.by === "student";
  const named = text(d.student) ?? text(d.name) ?? text(d.firstName);
  const student = named ? clip(named, 60) : undefined;
  const whose = student ? `${student}'s` : "a student's";
  const type: string = e.type;
  switch (e.type) {
    case "host.ready": {
      const took = duration(typeof d.seconds === "number" ? d.seconds : undefined);
      return `${host} is ready${took ? ` (built in ${took})` : ""}.`;
    }
    case "host.failed": {
      const reason = text(d.reason) ?? text(d.error) ?? text(d.message);
      return reason ? `${host} failed: ${clip(reason)}` : `${host} failed.`;
    }
    case "lab.claimed":
      if (d.how === "queue")
        return `Lab ${host} went to ${student ?? "the student"}, the first in the waiting line.`;
      if (d.how === "byod")
        return `${student ?? "A student"} enrolled their own machine as lab ${host} (from their join page).`;
      return student ? `${student} claimed lab ${host}.` : `Lab ${host} was claimed.`;
    case "lab.released":
      if (d.how === "revoked") return `${by} revoked ${whose} claim on lab ${host}; the lab is free again.`;
      if (d.how === "removed")
        return `${student ?? "Its student"}'s claim on lab ${host} ended: its machine was removed from the workshop.`;
      return student
        ? `${by} released lab ${host} from ${student}; it is free again.`
        : `Lab ${host} was released and is free again.`;
    case "lab.recovered":
      return `${student ?? "Its student"} opened lab ${host} again with their email and PIN (a new personal link).`;
    case "lab.unlocked":
      return d.inLine
        ? `${by} unlocked ${whose} PIN (in the waiting line).`
        : `${by} unlocked ${whose} PIN for lab ${host}.`;
    case "lab.moved": {
      const to = text(d.to);
      return `${by} moved ${student ?? "a student"} from lab ${host}${to ? ` to ${clip(to, 60)}` : ""}.`;
    }
    case "lab.swapped": {
      const to = text(d.to);
      const dest = to ? ` for ${clip(to, 60)}` : "";
      return byStudent || d.by === undefined
        ? `${student ?? "Its student"} swapped lab ${host}${dest}; ${host} is rebuilt.`
        : `${by} swapped ${whose} lab ${host}${dest}; ${host} is rebuilt.`;
    }
    case "lab.removed":
      return student
        ? `${by} removed lab ${host}, and with it ${student}'s claim.`
        : `${by} removed lab ${host} (scaled down).`;
    case "lab.unhealthy": {
      const reason = text(d.reason);
      return `Lab ${host} is failing its health check${reason ? `: ${clip(reason)}` : "."}`;
    }
    case "lab.healthy":
      return `Lab ${host} passes its health check again.`;
    case "checks.run": {
      const counts =
        typeof d.passed === "number" && typeof d.total === "number"
          ? `: ${d.passed} of ${plural(d.total, "check")} ${d.passed === 1 ? "passes" : "pass"}`
          : "";
      return `${student ?? "A student"} pressed Check my work on lab ${host}${counts}.`;
    }
    case "queue.joined":
      return `${student ?? "A student"} joined the waiting line.`;
    case "queue.left":
      return d.how === "removed"
        ? `${by} took ${student ?? "a student"} out of the waiting line.`
        : `${student ?? "A student"} left the waiting line.`;
    case "portal.published":
      return `${by} published the portal: students see the board; claiming is not open yet.`;
    case "portal.opened":
      return `${by} opened claiming in the portal.`;
    case "portal.closed":
      return `${by} closed claiming in the portal.`;
    case "portal.code_rotated":
      return `${by} changed the workshop code: students type the new one; personal links keep working.`;
    case "access.opened": {
      const ports = Array.isArray(d.ports) ? d.ports.filter((p) => typeof p === "number") : [];
      return `${by} opened the lab UIs to students${ports.length ? ` (ports ${ports.join(", ")})` : ""}.`;
    }
    case "access.closed":
      return `${by} closed the lab UIs to students.`;
    case "workshop.extended": {
      const hours = typeof d.hours === "number" ? ` by ${d.hours} h` : "";
      const expiry = text(d.expiry);
      const valid = expiry !== undefined && Number.isFinite(Date.parse(expiry));
      const head = `${by} extended the workshop${hours}`;
      const tail = `${d.ok === false ? " (with problems)" : ""}.`;
      return valid ? [`${head}; the teardown is at `, { time: expiry }, tail] : `${head}${tail}`;
    }
    case "run.started": {
      const hosts = Array.isArray(d.hosts) ? d.hosts.filter((h) => typeof h === "string") : [];
      const on = hosts.length ? ` on ${clip(hosts.join(", "), 120)}` : "";
      const sizes =
        typeof d.from === "number" && typeof d.to === "number" ? ` (${d.from} → ${d.to} hosts)` : "";
      const what = STARTED[text(d.kind) ?? ""] ?? "a run";
      return d.by === undefined
        ? `${runWord(d.kind)} started${sizes}${on}.`
        : `${by} started ${what}${sizes}${on}.`;
    }
    case "run.finished": {
      const state = text(d.state) ?? text(d.result);
      const took = duration(typeof d.durationSeconds === "number" ? d.durationSeconds : undefined);
      const error = text(d.error);
      const how = state ? ` ${state.replace(/_/g, " ")}` : " finished";
      return `${runWord(d.kind)}${how}${took ? ` after ${took}` : ""}${error ? `: ${clip(error)}` : "."}`;
    }
    case "workshop.torn_down":
      return "The workshop was torn down: its hosts and portal are gone.";
    case "exec": {
      const n = typeof d.hosts === "number" ? d.hosts : undefined;
      const cmd = text(d.command);
      const summary = text(d.summary);
      return `${by} ran a command on ${n === undefined ? "the hosts" : plural(n, "host")}${cmd ? `: ${clip(cmd, 80)}` : ""}${summary ? ` (${clip(summary)})` : "."}`;
    }
    case "teardown.receipt": {
      const left = Array.isArray(d.left) ? d.left.filter((l) => typeof l === "string") : [];
      const who = d.by === "sweeper" ? "The sweeper found" : "Teardown receipt:";
      if (left.length === 0) return `${who} nothing left.`;
      return `${who} ${plural(left.length, "thing")} left (${clip(left.join(", "), 160)}): see the receipt for the commands that remove them.`;
    }
    case "rollout.started": {
      const ref = text(d.ref);
      const n = typeof d.labs === "number" ? d.labs : undefined;
      return `${by} started a rollout${ref ? ` to ${clip(ref, 60)}` : ""}${n === undefined ? "" : ` of ${plural(n, "lab")}`}: canary first, then batches.`;
    }
    case "rollout.finished": {
      const ref = text(d.ref);
      const to = ref ? ` to ${clip(ref, 60)}` : "";
      if (d.state === "completed") return `The rollout${to} completed: every lab is on the new ref.`;
      if (d.state === "aborted")
        return `${by} aborted the rollout${to}; labs not yet promoted stay as they were.`;
      return `The rollout${to} halted at a failure; the labs not reached stay as they were.`;
    }
    case "lab.updated": {
      const ref = text(d.ref);
      const how = d.how === "in place" ? " in place" : " on a new host";
      return `${host} was updated${ref ? ` to ${clip(ref, 60)}` : ""}${how}${student ? `; ${student} was told` : ""}.`;
    }
    case "lab.update_skipped": {
      const ref = text(d.ref);
      return `${host} was left on its old ref${ref ? ` (not updated to ${clip(ref, 60)})` : ""}: ${student ?? "a student"} claimed it during the rollout.`;
    }
    case "lab.invited":
      return `${by} invited ${student ?? "a student"} to lab ${host} (roster).`;
    case "host.unreachable":
      return `Host ${host} stopped calling in (three missed check-ins)${student ? `: ${student}'s lab takes no new work until it is back` : ""}.`;
    case "host.reachable":
      return `Host ${host} calls in again${student ? ` (${student}'s lab)` : ""}.`;
    case "host.drained":
      return `${by} drained host ${host}: no new work and no new claims.`;
    case "host.disabled":
      return `${by} disabled host ${host}: labfleet sends it nothing.`;
    case "host.enabled":
      return `${by} enabled host ${host} again.`;
    case "host.removed":
      return `${by} removed host ${host}${student ? ` (${student}'s lab, now released)` : ""}: its agent forgets the workshop.`;
    case "portal.unblocked": {
      const addresses = Array.isArray(d.addresses) ? d.addresses.filter((a) => typeof a === "string") : [];
      const which = addresses.length ? clip(addresses.join(", "), 120) : "held-back addresses";
      return `${by} let ${which} into the portal again (wrong attempts start from zero).`;
    }
    // Enrollment: machines that joined with a join token, approved or rejected, and the tokens themselves.
    case "host.joined": {
      const waits = d.enrollment === "pending" ? ": it waits for an instructor's approval" : "";
      return `${host} joined the workshop${student ? ` as ${student}'s lab` : ""}${waits}.`;
    }
    case "host.approved":
      return `${by} approved ${host}: it may now be given work.`;
    case "host.rejected":
      return `${by} rejected ${host}: it was removed and its signing secret dropped.`;
    case "join_token.created": {
      const uses = typeof d.uses === "number" ? plural(d.uses, "use") : undefined;
      const manual = d.approve === "manual" ? ", hosts wait for approval" : "";
      return `${by} created a join token${uses ? ` (${uses}${manual})` : ""}${student ? ` for ${student}` : ""}.`;
    }
    case "join_token.revoked":
      return `${by} revoked a join token: machines can no longer join with it.`;
    default:
      return eventLabel(type);
  }
}
