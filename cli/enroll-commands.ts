import type { EnrolledHostView, EnrollmentDecision } from "../shared/agent/enrollment.ts";
import type { JoinTokenInfo } from "../shared/agent/join-tokens.ts";
import { ApiClient, CliError, resolveTarget } from "./client.ts";
import { type Args, jsonOutput } from "./main.ts";
import { clean, jsonText, type Output, paint, when, writeTable } from "./render.ts";

/**
 * Enrollment from the CLI: `labfleet hosts join-token|join-tokens|revoke-token|pending|approve|reject`. Machines
 * join with a join token (the printed line runs the agent served by the API); these make tokens and decide on the
 * hosts that wait for approval. Clients of the API, like every command but dev.
 */
export const ENROLL_SUBCOMMANDS: ReadonlySet<string> = new Set([
  "join-token",
  "join-tokens",
  "revoke-token",
  "pending",
  "approve",
  "reject",
]);

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400 };

/** `--expires`: a whole number and a unit, s, m, h or d (`24h`, `90m`, `2d`), as seconds. */
export function parseExpires(text: string): number {
  const m = /^(\d{1,7})([smhd])$/.exec(text.trim());
  const seconds = m ? Number(m[1]) * (UNITS[m[2] as string] as number) : Number.NaN;
  if (!Number.isInteger(seconds) || seconds < 60 || seconds > 30 * 86_400)
    throw new CliError(
      `--expires takes a time from 1m to 30d: a whole number and s, m, h or d (24h, 90m, 2d), got ${text}`,
      2,
    );
  return seconds;
}

function parseUses(text: string): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || !Number.isInteger(n) || n < 1 || n > 1000)
    throw new CliError(`--uses takes a whole number of machines from 1 to 1000, got ${text}`, 2);
  return n;
}

function parseApprove(text: string): "auto" | "manual" {
  if (text === "auto" || text === "manual") return text;
  throw new CliError(`--approve takes auto or manual, got ${text}`, 2);
}

const plural = (n: number, one: string) => `${n} ${one}${n === 1 ? "" : "s"}`;

export async function run(sub: string, args: Args, out: Output): Promise<number> {
  const name = args.positionals[2];
  if (!name) throw new CliError(`name the workshop: labfleet hosts ${sub} NAME`, 2);
  const rest = args.positionals.slice(3);
  const json = jsonOutput(args);
  const body = {
    ...(args.values.uses !== undefined ? { uses: parseUses(args.values.uses) } : {}),
    ...(args.values.expires !== undefined ? { expiresInSeconds: parseExpires(args.values.expires) } : {}),
    ...(args.values.approve !== undefined ? { approve: parseApprove(args.values.approve) } : {}),
  };
  if (sub !== "join-token" && Object.keys(body).length > 0)
    throw new CliError(`--uses, --expires and --approve go with hosts join-token, not hosts ${sub}`, 2);
  if ((sub === "approve" || sub === "reject") && rest.length === 0)
    throw new CliError(`name the hosts: labfleet hosts ${sub} ${name} HOST...`, 2);
  if (sub === "revoke-token" && rest.length !== 1)
    throw new CliError(
      `name one token: labfleet hosts revoke-token ${name} TOKEN-ID (hosts join-tokens lists them)`,
      2,
    );
  if (!["approve", "reject", "revoke-token"].includes(sub) && rest.length > 0)
    throw new CliError(
      `hosts ${sub} takes the workshop's name only, got ${rest.map(clean).join(" ")} too`,
      2,
    );
  const client = new ApiClient(resolveTarget());
  const path = `/workshops/${encodeURIComponent(name)}`;

  switch (sub) {
    case "join-token": {
      const r = await client.call<{ token: string; joinToken: JoinTokenInfo; command: string }>(
        "POST",
        `${path}/join-tokens`,
        body,
      );
      if (json) {
        out.write(jsonText(r));
        return 0;
      }
      const t = r.joinToken;
      out.write(
        `join token ${clean(t.id)} for ${clean(name)}: ${plural(t.uses, "use")}, expires ${when(t.expiry)}, ` +
          `${t.approve === "auto" ? "hosts approved as they join" : "hosts wait for approval (labfleet hosts pending)"}\n\n`,
      );
      out.write(`  ${clean(r.token)}\n\n`);
      out.write("It is shown only now. Run this on each machine (bash, curl and openssl):\n\n");
      out.write(`  ${clean(r.command)}\n`);
      return 0;
    }
    case "join-tokens": {
      const r = await client.call<{ joinTokens: JoinTokenInfo[] }>("GET", `${path}/join-tokens`);
      if (json) out.write(jsonText(r));
      else if (r.joinTokens.length === 0) out.write(`${clean(name)} has no join tokens\n`);
      else
        writeTable(
          [
            ["TOKEN", "STATE", "USED", "APPROVE", "EXPIRES", "BY", "HOSTS"],
            ...r.joinTokens.map((t) => [
              clean(t.id),
              paint(out, t.state === "active" ? "ready" : "failed", t.state.replace("_", " ")),
              `${t.used}/${t.uses}`,
              t.approve,
              when(t.expiry),
              clean(t.student ? `${t.by} (for ${t.student})` : t.by),
              clean(t.hosts.join(", ") || "-"),
            ]),
          ],
          out,
        );
      return 0;
    }
    case "revoke-token": {
      const id = rest[0] as string;
      const r = await client.call<{ joinToken: JoinTokenInfo }>(
        "DELETE",
        `${path}/join-tokens/${encodeURIComponent(id)}`,
      );
      if (json) out.write(jsonText(r));
      else
        out.write(
          `revoked ${clean(r.joinToken.id)}: machines can no longer join with it (${plural(r.joinToken.used, "host")} joined with it stay)\n`,
        );
      return 0;
    }
    case "pending": {
      const r = await client.call<{ hosts: EnrolledHostView[] }>("GET", `${path}/enrollment/pending`);
      if (json) out.write(jsonText(r));
      else if (r.hosts.length === 0) out.write(`no host of ${clean(name)} waits for approval\n`);
      else {
        writeTable(
          [
            ["HOST", "JOINED", "HOSTNAME", "OS", "CPUS", "MEMORY", "DISK"],
            ...r.hosts.map((h) => [
              clean(h.id),
              when(h.joinedAt),
              clean(h.facts.hostname ?? "-"),
              clean([h.facts.os, h.facts.arch].filter(Boolean).join(" ") || "-"),
              h.facts.cpus === undefined ? "-" : String(h.facts.cpus),
              h.facts.memoryMb === undefined ? "-" : `${(h.facts.memoryMb / 1024).toFixed(1)} GiB`,
              h.facts.diskGb === undefined ? "-" : `${h.facts.diskGb} GiB free`,
            ]),
          ],
          out,
        );
        out.write(
          `\nlabfleet hosts approve ${clean(name)} HOST... lets them in; hosts reject removes them\n`,
        );
      }
      return 0;
    }
    case "approve":
    case "reject": {
      const r = await client.call<{ results: EnrollmentDecision[] }>("POST", `${path}/enrollment/${sub}`, {
        hosts: rest,
      });
      if (json) out.write(jsonText(r));
      else
        for (const d of r.results)
          out.write(
            d.result === "approved"
              ? `approved ${clean(d.hostId)}: it may now be given work\n`
              : d.result === "rejected"
                ? `rejected ${clean(d.hostId)}: removed, and its signing secret dropped\n`
                : `${clean(d.hostId)} was approved already\n`,
          );
      return 0;
    }
    default:
      throw new CliError(`unknown hosts subcommand ${sub}`, 2);
  }
}
