import { closeSync, fchmodSync, openSync, readFileSync, writeSync } from "node:fs";
import { renderUnicodeCompact } from "uqr";
import type { ChecksMatrix } from "../shared/portal/checks.ts";
import type { BoardLab } from "../shared/portal/claims.ts";
import { csvLine } from "../shared/portal/csv.ts";
import type { ClaimRow, PortalView } from "../shared/portal/portal.ts";
import type { WaitingRow } from "../shared/portal/queue.ts";
import type { HeldBack, Hold } from "../shared/portal/rate-limit.ts";
import { ApiClient, CliError, resolveTarget } from "./client.ts";
import { type Args, checkedFile, jsonOutput } from "./main.ts";
import { clean, clock, duration, jsonText, type Output, writeTable } from "./render.ts";

/** `labfleet portal ...`: the instructor's side of the claim portal, each subcommand one API call. */

export const PORTAL_USAGE = `usage: labfleet portal SUBCOMMAND (-f workshop.yaml | NAME) [ARGS] [--output json]
  open | close                claim window
  publish                     the board goes live (labs appear as they pass health); claiming opens at
                              portal.open_at_percent, or with open
  rotate-code                 a new workshop code: everyone re-enters it; personal links keep working
  info                        where students go and the code
  slide                       the same with a QR code of the address, to show the room (the console's
                              Portal tab has a page to project)
  status                      every lab and every claim (with emails), the waiting line in order, spares
  checks                      students x checks: each student's latest "Check my work" result per check
  export [--csv FILE]         claims as CSV (lab, name, email, how, claimed at, first opened); FILE is 0600
  admin-link                  a new secret link to the instructor page (the previous one stops working)
  release LAB | revoke EMAIL | reassign EMAIL LAB | unlock EMAIL
  swap EMAIL|LAB              move a student off a broken lab to a free one (a spare first), keeping their
                              personal link; the old lab is rebuilt
  unqueue EMAIL               take a student out of the waiting line (the others move up)
  invite ROSTER.csv --csv FILE  reserve a lab for each "name,email[,host_id]" line; their invite links go
                              to FILE (0600), never to the screen
  unblock (--address A | --all)  let an address the rate limits hold back (or every one) in again`;

/** The arguments each subcommand takes after the workshop. */
const ARGS: Record<string, string[]> = {
  open: [],
  close: [],
  publish: [],
  "rotate-code": [],
  info: [],
  slide: [],
  status: [],
  checks: [],
  export: [],
  "admin-link": [],
  release: ["LAB"],
  revoke: ["EMAIL"],
  reassign: ["EMAIL", "LAB"],
  unlock: ["EMAIL"],
  swap: ["EMAIL|LAB"],
  unqueue: ["EMAIL"],
  invite: ["ROSTER"],
  unblock: [],
};

interface PortalStatus {
  portal: Omit<PortalView, "code"> & { open: boolean };
  labs: BoardLab[];
  claims: ClaimRow[];
  health: { lab: string; health: "ok" | "failing"; checkedAt: string | null; error: string | null }[];
  waiting: WaitingRow[];
  spares: number;
  heldBack: HeldBack;
}

/** The waiting line, first in line first, with how long each has waited. */
function writeWaiting(s: PortalStatus, out: Output): void {
  if (s.waiting.length === 0) {
    out.write("\nnobody is waiting for a lab\n");
    return;
  }
  out.write(`\n${s.waiting.length} waiting for a lab (the next free lab goes to #1):\n`);
  writeTable(
    [
      ["#", "name", "email", "waiting"],
      ...s.waiting.map((w) => [String(w.number), w.name, w.email, duration(w.waitedSeconds)]),
    ],
    out,
  );
}

const HOLD_TEXT: Record<Hold["scope"], string> = {
  address: "everything from it",
  new_browsers: "browsers that never entered a right code",
  browser: "one browser",
};

/** Who the rate limits hold back, with the counts, when it lifts and the command that lifts it now. */
function writeHeldBack(name: string, held: HeldBack, out: Output): void {
  const { holds, portalWide } = held;
  if (holds.length === 0 && !portalWide.active) {
    out.write("\nnobody is held back by the rate limits\n");
    return;
  }
  out.write("\nheld back by the rate limits (they cover the whole portal, every workshop):\n");
  if (holds.length)
    writeTable(
      [
        ["address", "held back", "failures", "lifts at"],
        ...holds.map((h) => [
          h.address,
          h.scope === "browser" && h.browser ? `one browser (…${h.browser})` : HOLD_TEXT[h.scope],
          `${h.count}/${h.limit}`,
          clock(h.liftsAt, true),
        ]),
      ],
      out,
    );
  if (portalWide.active && portalWide.liftsAt)
    out.write(
      `portal-wide: ${portalWide.wrongCodes}/${portalWide.limit} wrong codes; clients with a few wrong attempts wait until ${clock(portalWide.liftsAt, true)}\n`,
    );
  const first = holds[0]?.address;
  if (first)
    out.write(`let an address in now: labfleet portal unblock ${name} --address ${first}  (or --all)\n`);
}

/** Writes a file only its owner can read: the mode is set before any byte is written, even on an old file. */
function writePrivate(file: string, text: string): void {
  let fd: number;
  try {
    fd = openSync(file, "w", 0o600);
  } catch (err) {
    throw new CliError(`cannot write ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`, 1);
  }
  try {
    fchmodSync(fd, 0o600);
    writeSync(fd, text);
  } finally {
    closeSync(fd);
  }
}

/** The API's answer about a portal: with its full `url` when the portal has a URL of its own (the cloud's). */
type PortalReply = PortalView & { url?: string };

export async function run(args: Args, out: Output): Promise<number> {
  const sub = args.positionals[1];
  const wants = sub === undefined ? undefined : ARGS[sub];
  if (!sub || !wants) throw new CliError(`${sub ? `unknown portal command ${sub}\n` : ""}${PORTAL_USAGE}`, 2);
  // -f only names the workshop here: the portal acts on what was submitted (labfleet up -f ...).
  let name: string;
  let rest: string[];
  if (args.values.file) {
    name = checkedFile(args.values.file).name;
    rest = args.positionals.slice(2);
  } else {
    const n = args.positionals[2];
    if (!n) throw new CliError(`name the workshop: -f workshop.yaml or its name\n${PORTAL_USAGE}`, 2);
    name = n;
    rest = args.positionals.slice(3);
  }
  if (rest.length !== wants.length)
    throw new CliError(
      `labfleet portal ${sub} takes ${wants.length ? wants.join(" ") : "no arguments"} after the workshop\n${PORTAL_USAGE}`,
      2,
    );
  if (args.values.csv !== undefined && sub !== "export" && sub !== "invite")
    throw new CliError("--csv FILE goes with labfleet portal export or invite", 2);
  if (sub === "invite" && !args.values.csv)
    throw new CliError("labfleet portal invite needs --csv FILE for the invite links", 2);
  if ((args.values.address !== undefined || args.values.all) && sub !== "unblock")
    throw new CliError("--address and --all go with labfleet portal unblock", 2);
  if (sub === "unblock" && (args.values.address === undefined) === !args.values.all)
    throw new CliError("labfleet portal unblock needs --address A or --all (one of them)", 2);

  const json = jsonOutput(args);
  const client = new ApiClient(resolveTarget());
  const path = `/workshops/${encodeURIComponent(name)}/portal`;
  const link = (p: string) => new URL(p, `${client.target.url}/`).toString();
  // Where students go: the portal's own URL when the deployment has one (the cloud's portal API), else the API's.
  const studentLink = (v: PortalReply) => v.url ?? link(v.path);
  const print = (doc: unknown) => out.write(jsonText(doc));

  switch (sub) {
    case "open":
    case "close":
    case "publish":
    case "rotate-code":
    case "info": {
      const v =
        sub === "info"
          ? await client.call<PortalReply>("GET", `${path}/info`)
          : await client.call<PortalReply>("POST", `${path}/${sub}`, {});
      if (json) print({ ...v, url: studentLink(v) });
      else
        out.write(
          `portal ${clean(name)}: ${v.state === "published" ? "published, claiming not open yet" : `claiming ${clean(v.state)}`}${sub === "rotate-code" ? " · new code: everyone enters it again" : ""}\n` +
            `  go to  ${clean(studentLink(v))}\n  code   ${clean(v.code)}\n`,
        );
      return 0;
    }
    case "slide": {
      const v = await client.call<PortalReply>("GET", `${path}/info`);
      const url = studentLink(v);
      if (json) {
        print({ url, code: v.code, state: v.state });
        return 0;
      }
      // Light modules are drawn as blocks (a terminal is usually dark): phone cameras read either way round.
      const qr = renderUnicodeCompact(url, { ecc: "M", border: 2 });
      out.write(`${qr.replace(/\n?$/, "\n")}\n  go to  ${clean(url)}\n  code   ${clean(v.code)}\n`);
      if (v.state !== "open")
        out.write(`  (claiming is ${v.state === "published" ? "not open yet" : "closed"})\n`);
      return 0;
    }
    case "status": {
      const s = await client.call<PortalStatus>("GET", `${path}/status`);
      if (json) {
        print(s);
        return 0;
      }
      const free = s.labs.filter((l) => l.status === "free").length;
      out.write(
        `portal ${clean(name)}: claiming ${s.portal.open ? "open" : s.portal.state === "open" ? "paused" : "closed"} · ` +
          `${s.claims.length} claimed · ${free} free · ${s.labs.length} labs` +
          `${s.spares ? ` · ${s.spares} spare${s.spares === 1 ? "" : "s"} kept` : ""} · ${s.waiting.length} waiting\n`,
      );
      const byLab = new Map(s.claims.map((c) => [c.lab, c]));
      const failing = new Map((s.health ?? []).filter((h) => h.health === "failing").map((h) => [h.lab, h]));
      writeTable(
        [
          ["lab", "status", "name", "email", "claimed at", "first opened", ""],
          ...s.labs.map((l) => {
            const c = byLab.get(l.lab);
            const notes = [c?.locked ? "locked" : "", failing.has(l.lab) ? "HEALTH FAILING" : ""];
            return [
              l.lab,
              l.status,
              c?.name ?? "",
              c?.email ?? "",
              clock(c?.claimedAt),
              clock(c?.firstOpenedAt),
              notes.filter(Boolean).join(", "),
            ];
          }),
        ],
        out,
      );
      for (const h of failing.values()) {
        const c = byLab.get(h.lab);
        out.write(
          `\nlab ${clean(h.lab)} is failing its health check${h.error ? `: ${clean(h.error.split("\n")[0] ?? "")}` : ""}\n` +
            (c
              ? `  move its student, keeping their link: labfleet portal swap ${clean(name)} ${clean(h.lab)}\n`
              : ""),
        );
      }
      writeWaiting(s, out);
      writeHeldBack(name, s.heldBack, out);
      return 0;
    }
    case "checks": {
      const m = await client.call<ChecksMatrix>("GET", `${path}/checks`);
      if (json) {
        print(m);
        return 0;
      }
      if (m.checks.length === 0) {
        out.write(`workshop ${clean(name)} has no checks (lab.checks in workshop.yaml)\n`);
        return 0;
      }
      const mark = (r: boolean | null) => (r === null ? "-" : r ? "pass" : "FAIL");
      writeTable(
        [
          ["lab", "name", ...m.checks.map((k) => k.name), "last checked"],
          ...m.students.map((s) => [s.lab, s.name, ...s.results.map(mark), clock(s.lastRanAt)]),
          ["", "passed", ...m.checks.map((k) => `${k.passed}/${m.students.length}`), ""],
        ],
        out,
      );
      return 0;
    }
    case "unblock": {
      const body = args.values.all ? { all: true } : { address: args.values.address };
      const r = await client.call<{ addresses: string[] }>("POST", `${path}/unblock`, body);
      if (json) print(r);
      else if (r.addresses.length)
        out.write(`let in again: ${r.addresses.join(", ")} (their failure counts start from zero)\n`);
      else
        out.write(
          `nothing was held back${args.values.address ? ` at ${args.values.address}` : ""}: nothing to lift\n`,
        );
      return 0;
    }
    case "export": {
      const csv = await (await client.raw("GET", `${path}/export`)).text();
      const rows = Math.max(0, csv.trim().split("\n").length - 1);
      const file = args.values.csv;
      if (!file) {
        out.write(csv);
        return 0;
      }
      writePrivate(file, csv);
      if (json) print({ file, claims: rows });
      else out.write(`wrote ${rows} claim${rows === 1 ? "" : "s"} to ${clean(file)} (mode 0600)\n`);
      return 0;
    }
    case "admin-link": {
      const r = await client.call<{ token: string; path: string }>("POST", `${path}/admin-link`, {});
      if (json) print({ url: link(r.path) });
      else out.write(`${clean(link(r.path))}\n(the previous instructor link no longer works)\n`);
      return 0;
    }
    case "release": {
      const r = await client.call<{ lab: string }>("POST", `${path}/release`, { lab: rest[0] });
      if (json) print(r);
      else out.write(`released ${clean(r.lab)}: it is free again; its claimant's link no longer works\n`);
      return 0;
    }
    case "revoke": {
      const r = await client.call<{ lab: string }>("POST", `${path}/revoke`, { email: rest[0] });
      if (json) print(r);
      else out.write(`revoked the claim of that email: ${clean(r.lab)} is free again\n`);
      return 0;
    }
    case "reassign": {
      const r = await client.call<{ lab: string; token: string; path: string }>("POST", `${path}/reassign`, {
        email: rest[0],
        lab: rest[1],
      });
      if (json) print({ lab: r.lab, url: link(r.path) });
      else
        out.write(
          `moved to ${clean(r.lab)}; give the student their new personal link (the old one stopped working):\n  ${clean(link(r.path))}\n`,
        );
      return 0;
    }
    case "swap": {
      const who = rest[0] as string;
      const r = await client.call<{ from: string; to: string; name: string; rebuild: string }>(
        "POST",
        `${path}/swap`,
        who.includes("@") ? { email: who } : { lab: who },
      );
      if (json) print(r);
      else
        out.write(
          `moved ${clean(r.name)} from ${clean(r.from)} to ${clean(r.to)}: their personal link and cookie now open ${clean(r.to)}\n  ${clean(r.rebuild)}\n`,
        );
      return 0;
    }
    case "unlock": {
      const r = await client.call<{ unlocked: boolean }>("POST", `${path}/unlock`, { email: rest[0] });
      if (json) print(r);
      else out.write("unlocked: the student can get their lab back with email and PIN again\n");
      return 0;
    }
    case "unqueue": {
      const r = await client.call<{ removed: boolean }>("POST", `${path}/unqueue`, { email: rest[0] });
      if (json) print(r);
      else out.write("removed from the waiting line: the others moved up\n");
      return 0;
    }
    case "invite": {
      let roster: string;
      try {
        roster = readFileSync(rest[0] as string, "utf8");
      } catch (err) {
        throw new CliError(
          `cannot read ${rest[0]}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`,
          2,
        );
      }
      const r = await client.call<{
        invites: { name: string; email: string; lab: string; path: string }[];
        skipped: { email: string; reason: string }[];
      }>("POST", `${path}/invite`, { csv: roster });
      const file = args.values.csv as string;
      // As export does: control characters escaped, formulas quoted as text (shared/portal/csv.ts).
      writePrivate(
        file,
        `${csvLine(["name", "email", "lab", "link"])}\n${r.invites.map((i) => csvLine([i.name, i.email, i.lab, link(i.path)])).join("\n")}${r.invites.length ? "\n" : ""}`,
      );
      if (json) print({ file, invited: r.invites.length, skipped: r.skipped });
      else {
        out.write(`invited ${r.invites.length}: their personal links are in ${clean(file)} (mode 0600)\n`);
        for (const s of r.skipped) out.write(`  skipped ${clean(s.email)}: ${clean(s.reason)}\n`);
      }
      return r.skipped.length ? 1 : 0;
    }
    default:
      throw new CliError(PORTAL_USAGE, 2);
  }
}
